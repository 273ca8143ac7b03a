"""DDP for Lightning: comm hooks on every device, and the parameters that break plain DDP named.

Lightning registers a DDP comm hook only when the device is CUDA and silently ignores it
elsewhere, so a bf16-compressed all-reduce could not be tested on CPU, nor used on CPU
clusters; this strategy registers it on any backend that DDP supports (gloo included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_info
from torch.nn.parallel import DistributedDataParallel


class UnusedParametersError(RuntimeError):
    """Plain DDP met trainable parameters that received no gradient."""


def _hook_name(hook: Callable[..., Any]) -> str:
    return getattr(hook, "__qualname__", getattr(hook, "__name__", repr(hook)))


class PolymimicDDPStrategy(DDPStrategy):
    """`DDPStrategy` with comm hooks on every device and a clear unused-parameter error."""

    strategy_name = "polymimic_ddp"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._checked_unused = False

    def _register_ddp_hooks(self) -> None:
        hook = self._ddp_comm_hook
        if hook is None:
            return
        assert isinstance(self.model, DistributedDataParallel)
        if self._ddp_comm_wrapper is not None:
            hook = self._ddp_comm_wrapper(hook)
        self.model.register_comm_hook(state=self._ddp_comm_state, hook=hook)
        rank_zero_info(
            f"DDP gradient communication hook: {_hook_name(hook)} "
            f"({getattr(hook, '__module__', '?')}), on {self.root_device.type}"
        )

    def post_backward(self, closure_loss: torch.Tensor) -> None:
        super().post_backward(closure_loss)
        if self._checked_unused or self._ddp_kwargs.get("find_unused_parameters", False):
            return
        self._checked_unused = True
        module = self.lightning_module
        assert module is not None
        unused = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
        if unused:
            shown = ", ".join(unused[:20]) + (
                f", ... ({len(unused)} in all)" if len(unused) > 20 else ""
            )
            raise UnusedParametersError(
                f"plain DDP needs a gradient for every trainable parameter, but these got none in "
                f"the first step: {shown}. Choose trainer=ddp_find_unused_parameters_true (DDP "
                "then searches for unused parameters every step), or freeze them "
                "(requires_grad=False)."
            )
