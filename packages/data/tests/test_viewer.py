"""`polymimic-data view`: episodes in a rerun recording, read back through rerun's own
dataframe query (not trusted because logging did not raise)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeReader, write_episode
from polymimic_data.cli import main
from polymimic_data.synthetic import ensure_synthetic_episodes

rerun = pytest.importorskip("rerun", reason="the viz extra (rerun-sdk) is not installed")
pytest.importorskip("datafusion", reason="reading a recording back needs rerun-sdk[catalog]")

FRAMES = 24
SENTINEL_FRAME, CORRUPT_FRAME = 7, 9


def _episodes(root: Path) -> dict[str, Path]:
    """An eva and an aria episode (polymimic's writer), an aria one in EgoVerse's layout, and
    a copy of the aria one with a hand not detected at one frame and a corrupt JPEG at
    another, as validate --deep would flag them."""
    made = {
        "eva": ensure_synthetic_episodes(root / "eva", "eva_bimanual", episodes=1,
                                         frames=FRAMES, height=24, width=32, progress=False),
        "aria": ensure_synthetic_episodes(root / "aria", "aria_bimanual", episodes=1,
                                          frames=FRAMES, height=24, width=32, progress=False),
        "egoverse": ensure_synthetic_episodes(root / "ego", "aria_bimanual", episodes=1,
                                              frames=FRAMES, height=24, width=32, seed=1,
                                              layout="egoverse", progress=False),
    }  # fmt: skip
    paths = {name: next(folder.rglob("*.zarr")) for name, folder in made.items()}
    source = EpisodeReader(paths["aria"])
    stored = source.keys()
    arrays = {
        k: source.read_numeric(k)
        for k in stored
        if not k.startswith("images.") and k != "annotations"
    }
    arrays["left.obs_wrist_pose"][SENTINEL_FRAME] = 1e9
    jpegs = source.read_jpegs("front_1", 0, FRAMES)
    jpegs[CORRUPT_FRAME] = jpegs[CORRUPT_FRAME][: len(jpegs[CORRUPT_FRAME]) // 3]
    paths["flawed"] = write_episode(
        root / "flawed" / "flawed.zarr",
        embodiment=source.embodiment,
        fps=float(source.attrs["fps"]),
        arrays=arrays,
        images={"front_1": jpegs},
        annotations=[{"text": "pick up the cup", "start_idx": 2, "end_idx": 12}],
        task_name="cups",
    )
    return paths


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("view")
    paths = _episodes(root)
    dest = root / "all.rrd"
    assert main(["view", str(root), "--save", str(dest)]) == 0
    from rerun.chunk import RrdReader

    store = RrdReader(dest).store().stream().collect()
    return paths, store, dest


def _table(store, entity: str):
    """The rows of one entity on the `frame` timeline, through rerun's dataframe query."""
    frame = store.reader(index="frame", contents=entity).to_pandas()
    return frame.dropna(subset=[c for c in frame.columns if c.startswith("/")], how="all")


def test_every_frame_of_every_camera_is_the_stored_jpeg(recording) -> None:
    paths, store, _ = recording
    for path in paths.values():
        reader = EpisodeReader(path)
        table = _table(store, f"/episodes/{reader.hash}/images/front_1")
        blobs = table[f"/episodes/{reader.hash}/images/front_1:EncodedImage:blob"]
        expected = [
            f for f in range(FRAMES) if not (path.name == "flawed.zarr" and f == CORRUPT_FRAME)
        ]
        assert table["frame"].tolist() == expected
        for frame in (0, 5, FRAMES - 1):
            row = table.index[table["frame"] == frame][0]
            assert bytes(np.asarray(blobs[row][0], dtype=np.uint8)) == reader.read_jpeg(
                "front_1", frame
            )
        # the time timeline is the frame over the episode's rate
        times = table["time"].dt.total_seconds().to_numpy()
        np.testing.assert_allclose(times, np.asarray(expected) / float(reader.attrs["fps"]))


def test_each_channel_is_a_series_named_by_its_key_and_channel(recording) -> None:
    paths, store, _ = recording
    for name in ("eva", "aria", "egoverse"):
        reader = EpisodeReader(paths[name])
        pose = reader.read_numeric("left.obs_ee_pose")
        for channel, column in (("x", 0), ("qw", 3)):
            entity = f"/episodes/{reader.hash}/left/obs_ee_pose/{channel}"
            table = _table(store, entity)
            values = np.array([v[0] for v in table[f"{entity}:Scalars:scalars"]])
            assert len(values) == FRAMES
            np.testing.assert_allclose(values, pose[:, column], rtol=1e-6)
    eva = EpisodeReader(paths["eva"])
    assert "left.cmd_ee_pose" in eva.keys()  # noqa: SIM118 (a reader's keys, not a dict's)
    for key in ("obs_ee_pose", "cmd_ee_pose"):  # observed and commanded, each a 3D transform
        entity = f"/episodes/{eva.hash}/world/left/{key}"
        table = _table(store, entity)
        xyz = np.stack(table[f"{entity}:Transform3D:translation"].map(lambda v: np.asarray(v[0])))
        stored = eva.read_numeric(f"left.{key}")
        np.testing.assert_allclose(xyz, stored[:, :3], rtol=1e-6)
        xyzw = np.stack(table[f"{entity}:Transform3D:quaternion"].map(lambda v: np.asarray(v[0])))
        np.testing.assert_allclose(xyzw, stored[:, [4, 5, 6, 3]], rtol=1e-6)  # stored w, x, y, z


def test_human_data_has_hands_a_head_and_its_camera(recording) -> None:
    paths, store, _ = recording
    aria = EpisodeReader(paths["aria"])
    base = f"/episodes/{aria.hash}/world"
    keypoints = aria.read_numeric("right.obs_keypoints").reshape(FRAMES, -1, 3)
    table = _table(store, f"{base}/right/obs_keypoints")
    points = np.asarray(table[f"{base}/right/obs_keypoints:Points3D:positions"].iloc[4].tolist())
    np.testing.assert_allclose(points, keypoints[4], rtol=1e-6)
    bones = _table(store, f"{base}/right/obs_keypoints/bones")
    assert len(bones) == FRAMES and len(bones.iloc[0, -1]) == 23  # a 21-point hand's bones
    assert len(_table(store, f"{base}/obs_head_pose")) == FRAMES
    schema = "\n".join(str(c) for c in store.schema())
    assert f"{base}/obs_head_pose/front_1:Pinhole:image_from_camera" in schema  # its frustum


def test_flagged_frames_and_language_are_on_the_timeline(recording) -> None:
    paths, store, _ = recording
    flawed = EpisodeReader(paths["flawed"])
    entity = f"/episodes/{flawed.hash}/flags"
    flags = _table(store, entity)
    texts = dict(
        zip(flags["frame"], flags[f"{entity}:TextLog:text"].map(lambda v: v[0]), strict=True)
    )
    assert sorted(texts) == [SENTINEL_FRAME, CORRUPT_FRAME]
    assert "left.obs_wrist_pose: not-detected sentinel (1e9)" in texts[SENTINEL_FRAME]
    assert "images.front_1" in texts[CORRUPT_FRAME]
    x = f"/episodes/{flawed.hash}/left/obs_wrist_pose/x"
    series = _table(store, x).set_index("frame")[f"{x}:Scalars:scalars"]
    assert np.isnan(series[SENTINEL_FRAME][0]) and np.isfinite(series[SENTINEL_FRAME - 1][0])
    entity = f"/episodes/{flawed.hash}/annotations"
    spans = _table(store, entity)
    assert spans["frame"].tolist() == [2]
    assert spans[f"{entity}:TextLog:text"].iloc[0][0] == "pick up the cup [frames 2-12)"
    clean = EpisodeReader(paths["aria"])
    assert f"/episodes/{clean.hash}/flags" not in "\n".join(str(c) for c in store.schema())


def test_one_episode_by_hash_and_clear_errors(
    tmp_path: Path, recording, capsys, monkeypatch
) -> None:
    paths, _, _ = recording
    root = paths["eva"].parent
    wanted = EpisodeReader(paths["eva"]).hash
    dest = tmp_path / "one.rrd"
    assert main(["view", str(root), "--episode", wanted, "--save", str(dest)]) == 0
    assert dest.is_file() and not (tmp_path / "one.rrd.partial").exists()
    assert main(["view", str(root), "--episode", "nope", "--save", str(dest)]) == 2
    assert "no episode nope" in capsys.readouterr().err
    assert main(["view", str(root), "--save", str(tmp_path / "absent" / "x.rrd")]) == 2
    assert "--save: no folder" in capsys.readouterr().err
    for limit in ("lots", "500KB", "50 %", "100"):  # what rerun's server would refuse
        with pytest.raises(SystemExit) as stopped:  # before any episode is read or port opened
            main(["view", str(root), "--web", "--memory-limit", limit])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert f"--memory-limit: expected e.g. 4GiB, 500MB or 50%, got {limit!r}" in err
    monkeypatch.setitem(sys.modules, "rerun", None)  # as without the extra
    assert main(["view", str(root), "--save", str(dest)]) == 2
    assert "polymimic-data[viz]" in capsys.readouterr().err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _screenshot(url: str, dest: Path, wait_s: float) -> None:
    """A headless Chromium's screenshot of `url` after `wait_s`, through the DevTools protocol
    (Chromium's own --screenshot takes it before a WebAssembly app has started)."""
    import asyncio
    import base64
    import json
    import subprocess
    import time
    import urllib.request

    import websockets

    port = _free_port()
    browser = subprocess.Popen(
        ["chromium", "--headless=new", "--no-sandbox", f"--remote-debugging-port={port}",
         "--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
         "--window-size=1280,800", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as answer:
                    targets = json.load(answer)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("chromium's DevTools did not come up")
        page = next(t for t in targets if t["type"] == "page")

        async def shoot() -> bytes:
            async with websockets.connect(page["webSocketDebuggerUrl"], max_size=2**26) as ws:
                await ws.send(
                    json.dumps({"id": 1, "method": "Page.navigate", "params": {"url": url}})
                )
                await asyncio.sleep(wait_s)
                await ws.send(json.dumps({"id": 2, "method": "Page.captureScreenshot"}))
                while True:
                    message = json.loads(await ws.recv())
                    if message.get("id") == 2:
                        return base64.b64decode(message["result"]["data"])

        dest.write_bytes(asyncio.run(shoot()))
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def test_web_serves_rerun_viewer_that_a_headless_browser_draws(recording, tmp_path: Path) -> None:
    """`view --web` serves rerun's web viewer with the episodes; a real headless Chromium
    loads it and draws the viewer (not the blank page or the loading screen)."""
    import os
    import shutil
    import subprocess

    if shutil.which("chromium") is None:
        if os.environ.get("POLYMIMIC_REQUIRE_BROWSER"):
            raise AssertionError("chromium is not installed; nox -s tests-data installs it")
        pytest.skip("chromium is not installed (nox -s tests-data installs it)")
    from PIL import Image

    paths, _, _ = recording
    root = paths["aria"].parent
    web, grpc = _free_port(), _free_port()
    command = [sys.executable, "-m", "polymimic_data.cli", "view", str(root), "--web",
               "--port", str(web), "--grpc-port", str(grpc)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert f"http://localhost:{web}/" in line, (
            line,
            server.stderr.read() if server.poll() else "",
        )
        url = line.split(" at ")[1].split(" ")[0]
        shot = tmp_path / "view.png"
        _screenshot(url, shot, wait_s=20)
    finally:
        server.terminate()
        server.communicate(timeout=30)  # and its pipes closed
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    # the viewer's light panels and plots, not the dark loading screen or a blank page
    assert (pixels > 128).mean() > 0.05 and pixels.std() > 30, ((pixels > 128).mean(), pixels.std())
