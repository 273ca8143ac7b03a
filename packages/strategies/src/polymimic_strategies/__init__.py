"""polymimic-strategies: distributed strategies and gradient communication hooks for Lightning."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-strategies")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"


from polymimic_strategies.comm_hooks import make_bf16_compress_hook
from polymimic_strategies.cpu_budget import fit_torch_threads, usable_cpus
from polymimic_strategies.ddp import PolymimicDDPStrategy, UnusedParametersError
from polymimic_strategies.gpu_reaper import reap_stale_gpu_processes

__all__ = [
    "PolymimicDDPStrategy",
    "UnusedParametersError",
    "fit_torch_threads",
    "make_bf16_compress_hook",
    "reap_stale_gpu_processes",
    "usable_cpus",
]
