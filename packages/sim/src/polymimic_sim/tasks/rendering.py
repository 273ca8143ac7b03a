"""Headless MuJoCo rendering: EGL or OSMesa, chosen before MuJoCo is imported.

`MUJOCO_GL` set by the user is kept. Otherwise each backend is tried in a subprocess (a
backend that cannot start may abort the process that tries it) and the first that renders
is set for this process; if neither does, the error names the Debian packages that provide
them. Renderers are made cheap for evaluation and recording alike: no shadows and no
multisampling (about 4x faster for a 96x128 MetaWorld frame on a CPU).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BACKENDS = ("egl", "osmesa")
PACKAGES = {"egl": "libegl1 libegl-mesa0 libgl1-mesa-dri", "osmesa": "libosmesa6"}
_PROBE = "import mujoco; c = mujoco.GLContext(8, 8); c.make_current(); c.free(); print('ok')"


class RenderingError(RuntimeError):
    """No headless OpenGL backend works here."""


def _works(backend: str) -> tuple[bool, str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=os.environ | {"MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend},
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return result.returncode == 0 and "ok" in result.stdout, last


_PRELOAD_TORCH = [True]  # off in a simulator worker, which never loads torchvision


def never_loads_torch() -> None:
    """Mark this process as one that renders but never loads torchvision: no preload.

    The preload costs seconds (it imports torch); a worker only steps and renders.
    """
    _PRELOAD_TORCH[0] = False


def ensure_headless_rendering() -> str:
    """The MUJOCO_GL backend this process renders with (set here unless the user set it).

    Set in the environment, so processes started from this one inherit the choice.
    """
    if _PRELOAD_TORCH[0]:
        preload_torch_ops()
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    failures = []
    for backend in BACKENDS:
        works, why = _works(backend)
        if works:
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
        failures.append(f"{backend}: {why}")
    raise RenderingError(
        "no headless OpenGL backend for MuJoCo works here ("
        + "; ".join(failures)
        + "). On Debian or Ubuntu: apt-get install "
        + " ".join(PACKAGES.values())
        + "; or set MUJOCO_GL to a backend that works"
    )


def preload_torch_ops() -> None:
    """Load torchvision's ops before any GL context exists.

    With Mesa's EGL, the first import of torchvision.ops after MuJoCo has made a context
    kills the process (a segfault in the library loader; found by this package's tests:
    a policy built after a task was made). Loaded first, both work.
    """
    with contextlib.suppress(ModuleNotFoundError):  # no torchvision: nothing to protect
        import torchvision.ops  # noqa: F401


def make_rendering_cheap(model: Any) -> None:
    """No shadows, no multisampling: the same images for recording and evaluation, cheaper."""
    model.vis.quality.offsamples = 0
    model.light_castshadow[:] = 0


_NARROWED = re.compile(r"(?P<base>.+)_fov(?P<fovy>[1-9][0-9]*)")  # whole degrees, one spelling:
# the name is a key of stores and of modules (`images.<camera>`, a stem per camera), where a
# dot is not, and one view must not have two


def base_camera(camera: str) -> str:
    """The model camera a camera name draws from: `corner4` for `corner4_fov40`, else itself.

    By the name alone. camera_view, which checks it against a model, takes a model camera
    that is itself named like `x_fov40` as that camera; this helper would read it as `x`.
    """
    narrowed = _NARROWED.fullmatch(camera)
    return camera if narrowed is None else narrowed["base"]


@dataclass(frozen=True)
class View:
    """One camera as render_cameras draws it: the model camera, and the field of view asked."""

    name: str  # as asked for: the frame's key
    camera: str  # the model's camera drawn
    index: int  # its id in the model
    fovy: float | None  # None: the camera's own

    def fovy_in(self, model: Any) -> float:
        """The vertical field of view (degrees) this view is drawn with in `model`."""
        return float(model.cam_fovy[self.index]) if self.fovy is None else self.fovy


def is_pinhole(model: Any, index: int) -> bool:
    """Whether camera `index` of `model` is a pinhole whose `cam_fovy` sets its view.

    Not one that is orthographic, nor one given by a sensor's intrinsics (`cam_sensorsize`).
    """
    return not (model.cam_orthographic[index] or model.cam_sensorsize[index].any())


def camera_view(model: Any, camera: str) -> View:
    """The view a camera name asks of `model`: the model camera it draws from, the field of view.

    A camera of the model is itself (fovy None: its own field of view). `<camera>_fov<degrees>`,
    e.g. `corner4_fov40`, is that model camera narrowed to `degrees` (whole): a zoom about
    its axis, the same pose, more pixels on what is in the middle of its view. The name says
    it all, so a checkpoint's camera list is enough to render its view again. ValueError for
    a name that is neither, a field of view outside (0, 180) degrees, or a camera whose view
    its field of view does not set (orthographic, or given by a sensor's intrinsics).
    """
    known = [model.camera(i).name for i in range(model.ncam)]
    if camera in known:
        return View(camera, camera, model.camera(camera).id, None)
    narrowed = _NARROWED.fullmatch(camera)
    if narrowed is None or narrowed["base"] not in known:
        raise ValueError(
            f"camera {camera!r}: not one of the model's cameras {known}, "
            "nor one of them narrowed as <camera>_fov<degrees>"
        )
    fovy = float(narrowed["fovy"])
    if not 0 < fovy < 180:
        raise ValueError(f"camera {camera!r}: a field of view in (0, 180) degrees, got {fovy:g}")
    index = model.camera(narrowed["base"]).id
    if not is_pinhole(model, index):
        raise ValueError(
            f"camera {camera!r}: {narrowed['base']!r} is orthographic or has a sensor's "
            "intrinsics; its field of view does not set its view, so it cannot be narrowed"
        )
    return View(camera, narrowed["base"], index, fovy)


def camera_views(model: Any, task: str, cameras: Sequence[str]) -> tuple[View, ...]:
    """Each camera's view of `model` (camera_view), resolved once for all a task's frames.

    ValueError naming `task` and the camera.
    """
    try:
        return tuple(camera_view(model, camera) for camera in cameras)
    except ValueError as exc:
        raise ValueError(f"cameras of {task}: {exc}") from None


def render_cameras(renderer: Any, data: Any, views: Sequence[View]) -> dict[str, np.ndarray]:
    """One uint8 (H, W, 3) frame of MuJoCo `data` per view, by its name, from one renderer.

    `views` from camera_views; `renderer` a `mujoco.Renderer`. A narrowed view is drawn with
    its field of view set on the model for that one scene, then set back.
    """
    model = renderer.model
    frames = {}
    for view in views:
        if view.fovy is None:
            renderer.update_scene(data, camera=view.index)
        else:
            own = float(model.cam_fovy[view.index])
            model.cam_fovy[view.index] = view.fovy
            try:
                renderer.update_scene(data, camera=view.index)
            finally:
                model.cam_fovy[view.index] = own
        frames[view.name] = renderer.render().copy()
    return frames


def camera_renderer(model: Any, image_size: Sequence[int], cheap: bool) -> Any:
    """A `mujoco.Renderer` of `model` at `image_size` (H, W).

    `cheap`: no shadows, no multisampling (make_rendering_cheap), set on the model first.
    """
    import mujoco

    if cheap:
        make_rendering_cheap(model)
    height, width = (int(v) for v in image_size)
    return mujoco.Renderer(model, height, width)
