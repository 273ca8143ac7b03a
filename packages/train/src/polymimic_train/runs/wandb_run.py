"""`logger=wandb`: Lightning's WandbLogger for a run directory, one W&B run per directory.

The W&B run is named after the run directory and keeps its files under it
(`<run dir>/wandb/`). Its id is recorded in `<run dir>/wandb_run.json` before the W&B run
starts, and read back when the run directory is trained again (`resume=latest`,
`resume=<run dir>`, a requeued SLURM job), so every life of a run directory continues
the same W&B run (`resume="allow"`).

Without an explicit mode, W&B runs offline unless credentials are at hand
(`WANDB_API_KEY`, `WANDB_IDENTITY_TOKEN_FILE`, or a netrc login for the W&B host); an
explicit `WANDB_MODE` is left for wandb to read. Offline runs upload later with
`wandb sync <run dir>/wandb/offline-run-*`.

wandb itself is imported only when the W&B run starts, on global rank zero (the only
process that writes: Lightning hands the other ranks a dummy experiment).
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os
import secrets
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import WandbLogger

from polymimic_data.store import write_json_atomic
from polymimic_train.run_config import WANDB_INSTALL_HINT, WANDB_MODES

if TYPE_CHECKING:
    from wandb.sdk.lib import RunDisabled
    from wandb.wandb_run import Run

RUN_ID_FILE = "wandb_run.json"
DEFAULT_HOST = "https://api.wandb.ai"
_ID_CHARACTERS = string.ascii_lowercase + string.digits


def wandb_installed() -> bool:
    """Whether wandb can be imported (without importing it)."""
    return importlib.util.find_spec("wandb") is not None


def read_run_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The W&B run id recorded in a run directory, or None if it has none."""
    path = Path(run_dir) / RUN_ID_FILE
    try:
        run_id = json.loads(path.read_text())["id"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a W&B run record ({exc}); delete it for a new run") from exc
    return str(run_id)


def new_run_id() -> str:
    """A fresh W&B run id: 8 lowercase letters and digits, as wandb makes them."""
    return "".join(secrets.choice(_ID_CHARACTERS) for _ in range(8))


def has_credentials() -> bool:
    """Whether wandb would find credentials: its environment variables or a netrc login."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST).netloc
    if os.environ.get("NETRC"):
        candidates = [Path(os.environ["NETRC"]).expanduser()]
    else:
        candidates = [Path("~/.netrc").expanduser(), Path("~/_netrc").expanduser()]
    for path in candidates:
        try:
            if netrc.netrc(str(path)).authenticators(host):
                return True
        except (OSError, netrc.NetrcParseError):
            continue
    return False


def run_mode(mode: str | None) -> str | None:
    """The mode to start W&B in.

    `mode` when given; None when `WANDB_MODE` is set (wandb reads it); else online with
    credentials, offline without.
    """
    if mode is not None:
        if mode not in WANDB_MODES:
            raise ValueError(f"logger.wandb.mode: {mode!r} is not one of {list(WANDB_MODES)}")
        return mode
    if os.environ.get("WANDB_MODE"):
        return None
    return "online" if has_credentials() else "offline"


class RunWandbLogger(WandbLogger):
    """Lightning's WandbLogger for one run directory, one W&B run across its resumes.

    The W&B run is named after the directory, keeps its files under it and its id in it.
    `project` defaults (in config) to the run's `name`; `entity`, `group` and `tags` go to
    `wandb.init` as they are. `mode`: online, offline or disabled; None decides as
    `run_mode` does. The run's config (`log_run_config`) is logged as the W&B run's
    config when it starts.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        project: str,
        entity: str | None = None,
        mode: str | None = None,
        group: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> None:
        if not wandb_installed():
            raise ModuleNotFoundError(f"logger=wandb needs wandb: {WANDB_INSTALL_HINT}")
        self.run_dir = Path(run_dir)
        self.run_config: dict[str, Any] | None = None
        recorded = read_run_id(self.run_dir)
        super().__init__(
            name=self.run_dir.name,
            save_dir=str(self.run_dir),
            id=recorded or new_run_id(),
            project=project,
            entity=entity,
            mode=run_mode(mode),
            group=group,
            tags=list(tags) if tags else None,
        )
        # Lightning passes `anonymous=None` to wandb.init, which warns that it has no effect.
        self._wandb_init.pop("anonymous", None)

    def log_run_config(self, config: Mapping[str, Any]) -> None:
        """The run's composed config, as the W&B run's config (logged when the run starts)."""
        self.run_config = dict(config)
        if self._experiment is not None:
            self.log_hyperparams(self.run_config)

    def _record_run_id(self, run_id: str) -> None:
        if read_run_id(self.run_dir) == run_id:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        record = {"id": run_id, "project": self._project, "entity": self._wandb_init["entity"]}
        write_json_atomic(self.run_dir / RUN_ID_FILE, record)

    @property
    @rank_zero_experiment
    def experiment(self) -> Run | RunDisabled:
        """The W&B run, started on first use (global rank zero only)."""
        if self._experiment is not None:
            return self._experiment
        assert self._id is not None
        self._record_run_id(self._id)  # first: a run killed at once still resumes this id
        run = super().experiment
        if run.id and run.id != self._id:  # a W&B run already open in this process
            self._record_run_id(run.id)
        if self.run_config is not None:
            self.log_hyperparams(self.run_config)
        return run
