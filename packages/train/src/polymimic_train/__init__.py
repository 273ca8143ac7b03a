"""polymimic-train: the thin app that composes data, policy, strategy and eval under Hydra.

`load_policy(path)` rebuilds a trained policy from a checkpoint or an export alone, and
`export_policy(checkpoint)` writes an export (see trained_policy; both load from
polymimic-serve, which a robot computer installs alone); importing them loads
neither Lightning nor Hydra.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-train")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

from typing import TYPE_CHECKING, Any

__all__ = ["TrainedPolicy", "export_policy", "load_policy"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from polymimic_train import trained_policy

        return getattr(trained_policy, name)
    raise AttributeError(f"module 'polymimic_train' has no attribute {name!r}")


if TYPE_CHECKING:
    from polymimic_train.trained_policy import TrainedPolicy, export_policy, load_policy
