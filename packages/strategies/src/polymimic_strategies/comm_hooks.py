"""DDP communication hooks, handed to Lightning as zero-argument factories.

A factory (rather than the hook itself) lets a Hydra config select the real function
with `_target_` and `_partial_`-free instantiation, and Lightning then logs the real
hook's name instead of a wrapper's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

CommHook = Callable[[Any, Any], Any]


def make_bf16_compress_hook() -> CommHook:
    """Torch's bf16 gradient compression: all-reduce in bf16, gradients stay fp32 after."""
    return default_hooks.bf16_compress_hook
