"""A misconfigured run ends before anything heavy, with one line naming the field and what
would work, and leaves no run directory behind. (How fast: `nox -s bench-train`.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polymimic_data.synthetic import ensure_synthetic_episodes

CASES = {
    "image_tokens": (["model.image_tokens=0"], "model.image_tokens: must be a positive integer"),
    "heads": (
        ["model.d_model=30", "model.num_heads=4"],
        "model.num_heads: 4 does not divide d_model=30; choose one of [1, 2, 3, 5, 6, 10, 15, 30]",
    ),
    "batch_size": (["data.batch_size=0"], "data.batch_size: must be a positive integer, got 0"),
    "max_steps": (["trainer.max_steps=0"], "trainer.max_steps: must be a positive integer"),
    "interval": (["trainer.val_check_interval=-2"], "trainer.val_check_interval: must be"),
    "embodiment": (
        ["data.datasets.eva_bimanual.embodiment=robot9"],
        "data.datasets.eva_bimanual.embodiment: 'robot9' is not one of ['aria_bimanual',",
    ),
    "camera": (
        ["data.datasets.eva_bimanual.cameras=[top]"],
        "data.datasets.eva_bimanual.cameras: ['top'] are not cameras of eva_bimanual; "
        "choose from ['front_1', 'left_wrist', 'right_wrist']",
    ),
    "camera_string": (
        ["data.datasets.eva_bimanual.cameras=front_1"],
        "data.datasets.eva_bimanual.cameras: a list of camera names, e.g. [front_1]; got 'front_1'",
    ),
    "layout": (
        ["data.datasets.eva_bimanual.layout=joints"],
        "data.datasets.eva_bimanual.layout: 'joints' is not a layout of eva_bimanual; choose one",
    ),
    "name": (["name=my/run"], "name: letters, digits"),
    "weight": (
        ["+data.datasets.eva_bimanual.weight=-1"],
        "data.datasets.eva_bimanual.weight: must be a number, 0 or more (0: held out of "
        "training), got -1",
    ),
    "loss_weight": (
        ["+data.datasets.eva_bimanual.loss_weight=0"],
        "data.datasets.eva_bimanual.loss_weight: must be a number above 0 (its loss's weight "
        "in each step's mean over the embodiments; 1 by default), got 0",
    ),
    "held_out_under_ddp": (
        ["data=synthetic_cotrain", "data.datasets.aria_bimanual.weight=0", "trainer=ddp"],
        "data.datasets.aria_bimanual.weight: 0 (held out of training) leaves its stems without "
        "a gradient, which DDP refuses; choose trainer=ddp_find_unused_parameters_true",
    ),
    "rerun_frames": (
        ["callbacks.rerun.every_n_validations=1", "callbacks.rerun.max_frames=0"],
        "callbacks.rerun.max_frames: must be a positive integer, got 0",
    ),
    "rerun_every": (
        ["callbacks.rerun.every_n_validations=-1"],
        "callbacks.rerun.every_n_validations: must be an integer >= 0, got -1",
    ),
    "weights": (
        ["+data.datasets.eva_bimanual.weight=0"],
        "data.datasets: every weight is 0; at least one dataset must train (weight > 0)",
    ),
    "workers": (
        ["data.num_workers=many"],
        "data.num_workers: must be an integer >= 0 or auto, got 'many'",
    ),
    "blocks": (
        ["data.episodes_per_block=0"],
        "data.episodes_per_block: must be a positive integer",
    ),
    "balance_with_blocks": (
        ["data.balance_by=task_name", "data.episodes_per_block=4"],
        "data.balance_by and data.episodes_per_block: one or the other",
    ),
}


def _fails_cleanly(result, expected: str, tmp: Path) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {expected}"] or errors[0].startswith(f"error: {expected}"), errors
    assert "Traceback" not in result.stderr
    runs = tmp / "runs"
    assert not runs.exists() or not [p for p in runs.rglob("run.json")], "a run dir was left"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_misconfiguration_fails_before_any_data_with_the_field(
    tmp_path: Path, train_app, case: str
) -> None:
    overrides, expected = CASES[case]
    result = train_app(tmp_path, None, *overrides)
    _fails_cleanly(result, expected, tmp_path)
    assert not (tmp_path / "data").exists()  # no episode was generated


@pytest.mark.parametrize(
    ("resume", "expected"),
    [
        ("/does/not/exist", "resume=/does/not/exist: no such checkpoint or run directory"),
        ("latest", "resume=latest: no unfinished run named 'hpt_small-synthetic_eva'"),
    ],
)
def test_a_resume_that_cannot_work_fails_before_anything(
    tmp_path: Path, train_app, resume: str, expected: str
) -> None:
    result = train_app(tmp_path, None, f"resume={resume}")
    _fails_cleanly(result, expected, tmp_path)
    assert not (tmp_path / "data").exists()


def test_a_data_root_without_the_embodiment_names_the_dataset(tmp_path: Path, train_app) -> None:
    aria = ensure_synthetic_episodes(
        tmp_path / "aria",
        "aria_bimanual",
        episodes=2,
        frames=8,
        height=16,
        width=20,
        progress=False,
    )
    result = train_app(tmp_path, None, "data=episodes", f"data.roots=[{aria}]")
    _fails_cleanly(
        result, "data.datasets.eva_bimanual: no episodes of eva_bimanual under data.roots", tmp_path
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.batch_size=0", "data.batch_size: must be a positive integer, got 0"),
        ("model.image_tokens=0", "model.image_tokens: must be a positive integer"),
    ],
)
def test_a_misconfigured_run_on_an_object_store_fails_before_the_store_is_listed(
    tmp_path: Path, train_app, monkeypatch: pytest.MonkeyPatch, override: str, expected: str
) -> None:
    # Nothing answers at this endpoint: had the store been listed first, the run would end
    # on data.roots (after the client's retries) instead of on the field that is wrong.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    result = train_app(tmp_path, None, "data=episodes", "data.roots=[s3://bucket/eva]", override)
    _fails_cleanly(result, expected, tmp_path)
    assert not (tmp_path / "cache" / "remote").exists()  # no mirror begun


def test_a_checkpoint_of_another_shape_is_refused_in_one_line(tmp_path: Path, train_app) -> None:
    trained = train_app(tmp_path, None, "data.synthetic.episodes=4", "data.synthetic.frames=20")
    assert trained.returncode == 0, trained.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs" / "hpt_small-synthetic_eva").iterdir()
    before = json.loads((run_dir / "run.json").read_text())
    result = train_app(tmp_path, None, f"resume={run_dir}", "model.d_model=64")
    assert result.returncode == 2
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(
        f"error: resume={run_dir / 'checkpoints' / 'last.ckpt'}: the checkpoint"
    )
    assert "tensors differ in shape" in error and "size mismatch" not in result.stderr
    assert json.loads((run_dir / "run.json").read_text()) == before  # untouched


def test_help_lists_only_choosable_options(tmp_path: Path, train_app) -> None:
    result = train_app(tmp_path, None, "--help")
    assert result.returncode == 0
    assert (
        "data: episodes, lerobot, lerobot_cotrain_eva, sim_aloha_ee_transfer_cube, "
        "sim_aloha_transfer_cube, sim_cotrain_transfer_cube, sim_hands_transfer_cube, "
        "sim_metaworld, sim_metaworld_mt10, synthetic_aria, synthetic_cotrain, synthetic_eva"
        in result.stdout
    )
    assert "base" not in result.stdout.split("== Config ==")[0]


def test_pi_on_a_quaternion_layout_is_refused_naming_the_rot6d_one(
    tmp_path: Path, train_environment
) -> None:
    """Before any model, data or PaliGemma is made (the model's own keys, not SMALL's)."""
    import subprocess
    import sys
    import time

    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train", "model=pi_tiny", "data=synthetic_eva"],
        env=train_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - start
    _fails_cleanly(
        result,
        "data.datasets.eva_bimanual.layout: 'eva_cartesian_quat' has quaternion rotations, and "
        "model PiPolicy predicts rot6d only; use data.datasets.eva_bimanual.layout="
        "eva_cartesian_rot6d",
        tmp_path,
    )
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()
    print(f"refused in {seconds:.1f} s")  # bench-train times it; the goal is under 10 s


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (None, "paths.paligemma: this model needs a local PaliGemma in the transformers format"),
        ("/no/paligemma", "paths.paligemma: /no/paligemma is not a PaliGemma directory"),
    ],
)
def test_pi_without_a_local_paligemma_says_where_to_point_it(
    tmp_path: Path, train_environment, where: str | None, expected: str
) -> None:
    import subprocess
    import sys

    env = train_environment(tmp_path)
    env.pop("POLYMIMIC_PALIGEMMA_DIR", None)
    if where is not None:
        env["POLYMIMIC_PALIGEMMA_DIR"] = where
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train", "model=pi05", "data=synthetic_eva_rot6d"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _fails_cleanly(result, expected, tmp_path)
    assert not (tmp_path / "data").exists()
