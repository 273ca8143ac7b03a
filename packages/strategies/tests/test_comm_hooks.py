from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from polymimic_strategies import make_bf16_compress_hook


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gloo_group():
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def test_factory_returns_torch_bf16_hook_by_its_real_name() -> None:
    hook = make_bf16_compress_hook()
    assert hook is default_hooks.bf16_compress_hook
    assert hook.__name__ == "bf16_compress_hook"


def test_hook_reduces_gradients_in_bf16_and_returns_fp32(gloo_group) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    reference = torch.nn.Linear(64, 64)
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, make_bf16_compress_hook())
    x = torch.randn(8, 64) * 3.1
    ddp(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    assert model.weight.grad is not None and reference.weight.grad is not None
    assert model.weight.grad.dtype == torch.float32  # master gradients stay fp32
    rounded = reference.weight.grad.to(torch.bfloat16).to(torch.float32)
    torch.testing.assert_close(model.weight.grad, rounded, rtol=0, atol=0)
    assert not torch.equal(model.weight.grad, reference.weight.grad)  # it really was compressed
