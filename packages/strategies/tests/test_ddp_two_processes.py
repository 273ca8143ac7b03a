"""Two CPU processes on gloo, forked inside pytest: the strategy as a user meets it."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from polymimic_strategies import (
    PolymimicDDPStrategy,
    UnusedParametersError,
    make_bf16_compress_hook,
)


class Tiny(pl.LightningModule):
    """Checks, inside each rank, the gradients DDP hands back after every backward."""

    def __init__(self, *, unused: bool = False, bf16: bool = False) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 64)
        self.spare = nn.Linear(4, 4) if unused else None
        self.bf16 = bf16
        self.checked = 0

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self._batch = batch
        return self.layer(batch * 3.3).pow(2).mean()

    def on_after_backward(self) -> None:
        if not self.bf16:
            return
        # The fp32 all-reduce, computed independently of DDP, from this rank's own gradient.
        reference = nn.Linear(64, 64)
        reference.load_state_dict(self.layer.state_dict())
        reference(self._batch * 3.3).pow(2).mean().backward()
        expected = reference.weight.grad.clone()
        dist.all_reduce(expected)
        expected /= dist.get_world_size()
        ddp = self.trainer.strategy.model
        assert ddp._get_ddp_logging_data().get("comm_hook") == "bf16_compress_hook"
        got = self.layer.weight.grad
        assert got.dtype == torch.float32 and self.layer.weight.dtype == torch.float32
        # bf16 keeps 8 significant bits: each summand is off by up to 2^-8 of its size.
        scale = expected.abs().max().item()
        torch.testing.assert_close(got, expected, rtol=2**-7, atol=2**-7 * scale)
        assert not torch.equal(got, expected), "gradients were not compressed: the hook did not run"
        gathered = [torch.empty_like(got) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, got)
        assert all(torch.equal(g, gathered[0]) for g in gathered), "ranks disagree"
        self.checked += 1

    def on_train_end(self) -> None:
        assert not self.bf16 or self.checked == self.trainer.max_steps

    def configure_optimizers(self) -> torch.optim.Optimizer:
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        assert all(s == {} or s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
        return opt

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            torch.randn(64, 64, generator=torch.Generator().manual_seed(0)), batch_size=4
        )


def _fit(module: Tiny, **strategy: object) -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=PolymimicDDPStrategy(
            start_method="fork", process_group_backend="gloo", **strategy
        ),
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)


def test_bf16_hook_runs_on_cpu_and_matches_the_fp32_all_reduce() -> None:
    _fit(Tiny(bf16=True), ddp_comm_hook=make_bf16_compress_hook())


def test_plain_ddp_names_the_parameter_without_a_gradient() -> None:
    with pytest.raises(Exception, match=r"spare\.weight.*ddp_find_unused_parameters_true") as info:
        _fit(Tiny(unused=True))
    assert UnusedParametersError.__name__ in str(info.value) or "plain DDP" in str(info.value)


def test_find_unused_parameters_trains_that_model() -> None:
    _fit(Tiny(unused=True), find_unused_parameters=True)
