"""Cameras: a model camera narrowed by name (`corner4_fov40`) is a zoom about its axis."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from polymimic_sim import make_task, project_view
from polymimic_sim.tasks.metaworld_tasks import MetaWorldTask
from polymimic_sim.tasks.rendering import (
    View,
    base_camera,
    camera_view,
    ensure_headless_rendering,
    render_cameras,
)

TASK, SIZE = "metaworld/reach-v3", (96, 128)


def _middle_enlarged(frame: np.ndarray, zoom: float) -> np.ndarray:
    """The middle 1/zoom of `frame`, resized back to the frame's size."""
    height, width = frame.shape[:2]
    h, w = height / zoom, width / zoom
    box = ((width - w) / 2, (height - h) / 2, (width + w) / 2, (height + h) / 2)
    return np.asarray(
        Image.fromarray(frame).resize((width, height), Image.Resampling.BILINEAR, box=box)
    )


def test_a_narrowed_camera_is_the_middle_of_its_own_view_enlarged_and_leaves_it_as_it_was():
    task = MetaWorldTask("reach-v3", image_size=SIZE, cameras=["corner4", "corner4_fov40"])
    try:
        task.reset(1000)
        model = task.sim.model
        own = float(model.cam_fovy[model.camera("corner4").id])
        first, again = task.render(), task.render()
        after = float(model.cam_fovy[model.camera("corner4").id])
    finally:
        task.close()
    assert own == after == 60.0  # MetaWorld's corner4, set back after each narrowed scene
    np.testing.assert_array_equal(first["corner4"], again["corner4"])
    base, narrowed = first["corner4"].astype(float), first["corner4_fov40"].astype(float)
    zoom = math.tan(math.radians(30)) / math.tan(math.radians(20))
    middle = np.abs(_middle_enlarged(first["corner4"], zoom) - narrowed).mean()
    whole = np.abs(base - narrowed).mean()
    wrong_zoom = np.abs(_middle_enlarged(first["corner4"], 1.2) - narrowed).mean()
    assert middle < 0.5 * whole and middle < 0.7 * wrong_zoom, (middle, whole, wrong_zoom)


@pytest.mark.parametrize(
    ("camera", "message"),
    [
        ("corner9_fov40", r"'corner9_fov40': not one of the model's cameras \[.*'corner4'"),
        ("corner4_fov180", r"'corner4_fov180': a field of view in \(0, 180\) degrees, got 180"),
        ("corner4_fov42.5", r"nor one of them narrowed as <camera>_fov<degrees>"),  # whole
        ("corner4_fov040", r"nor one of them narrowed as <camera>_fov<degrees>"),  # one name
        ("corner4_zoom", r"nor one of them narrowed as <camera>_fov<degrees>"),
    ],
)
def test_a_camera_that_is_neither_the_models_nor_one_narrowed_is_refused(camera, message):
    with pytest.raises(ValueError, match=message):
        make_task(TASK, image_size=SIZE, cameras=[camera])


def test_the_head_camera_refuses_the_camera_it_is_made_of_narrowed_too():
    with pytest.raises(ValueError, match=r"'front_1' is the model's 'angle' camera moved"):
        make_task("aloha_ego/transfer_cube", image_size=SIZE, cameras=["front_1", "angle_fov40"])


_CAMERAS = """<mujoco><worldbody>
  <camera name="perspective" fovy="60"/>
  <camera name="orthographic" orthographic="true" fovy="2"/>
  <camera name="intrinsics" sensorsize="0.01 0.01" resolution="100 100" focal="0.01 0.01"/>
</worldbody></mujoco>"""


@pytest.mark.parametrize("camera", ["orthographic_fov30", "intrinsics_fov30"])
def test_a_camera_its_field_of_view_does_not_set_is_refused_narrowed(camera):
    ensure_headless_rendering()  # before MuJoCo is imported: its GL backend is chosen then
    import mujoco

    model = mujoco.MjModel.from_xml_string(_CAMERAS)  # pyright: ignore[reportAttributeAccessIssue]
    assert camera_view(model, base_camera(camera)).fovy is None  # itself, as it is: drawn
    with pytest.raises(ValueError, match=rf"'{camera}': .* is orthographic or has a sensor's"):
        camera_view(model, camera)
    data = mujoco.MjData(model)  # pyright: ignore[reportAttributeAccessIssue]
    itself = camera_view(model, base_camera(camera))
    with pytest.raises(ValueError, match=rf"'{itself.name}': orthographic or a sensor's"):
        project_view(model, data, itself, (8, 8), np.zeros(3))  # no pinhole to project with
    mujoco.mj_forward(model, data)  # pyright: ignore[reportAttributeAccessIssue]
    ahead = np.array([[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]])  # a MuJoCo camera looks along -z
    (_, inside) = project_view(model, data, camera_view(model, "perspective"), (8, 8), ahead)
    assert inside.tolist() == [True, False]  # in front of the pinhole, and behind it
    narrowed = View("perspective_fov30", "perspective", 0, 30.0)
    assert camera_view(model, "perspective_fov30") == narrowed


@pytest.mark.parametrize(
    ("name", "base"),
    [("corner4_fov40", "corner4"), ("corner4", "corner4"), ("angle_fov_fov9", "angle_fov"),
     ("corner4_fov040", "corner4_fov040"), ("corner4_fov", "corner4_fov")],
)  # fmt: skip
def test_the_base_camera_of_a_name_is_the_one_camera_view_draws_from(name, base):
    assert base_camera(name) == base


@pytest.mark.parametrize("camera", ["corner4", "corner4_fov40"])
def test_a_projected_object_lands_on_its_own_pixels(camera: str) -> None:
    """project_view is the renderer's pinhole: a segmentation render shows the object there."""
    ensure_headless_rendering()  # before MuJoCo is imported: its GL backend is chosen then
    import mujoco

    task = MetaWorldTask("push-v3", image_size=SIZE, cameras=[camera])
    model, data = task.sim.model, task.sim.data
    segmenting = mujoco.Renderer(model, *SIZE)
    segmenting.enable_segmentation_rendering()
    drawn = []
    try:
        for seed in (1000, 1001, 1002):
            task.reset(seed)
            puck = np.asarray(task.sim._get_pos_objects(), float).reshape(-1, 3)[:1]
            (pixel,), (inside,) = project_view(model, data, task.views[0], SIZE, puck)
            ids = render_cameras(segmenting, data, task.views)[camera]
            column, row = (int(v) for v in pixel)
            geom, kind = ids[row, column]
            assert inside and kind == mujoco.mjtObj.mjOBJ_GEOM  # pyright: ignore[reportAttributeAccessIssue]
            drawn.append(model.body(model.geom_bodyid[geom]).name)
    finally:
        segmenting.close()
        task.close()
    assert drawn == ["obj"] * 3
