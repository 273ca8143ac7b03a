"""Metrics take torch tensors or numpy arrays alike: numpy in, numpy out."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

F = TypeVar("F", bound=Callable[..., Any])


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().numpy()
        return array[()] if array.ndim == 0 else array  # a 0-d result as a numpy scalar
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value


def numpy_or_torch(function: F) -> F:
    """Run a torch metric on numpy inputs too; results come back as numpy when any input was."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = [*args, *kwargs.values()]
        if not any(isinstance(a, np.ndarray) for a in given):
            return function(*args, **kwargs)
        args = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
        kwargs = {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()
        }
        return _to_numpy(function(*args, **kwargs))

    return wrapper  # type: ignore[return-value]
