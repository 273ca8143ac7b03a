"""polymimic-policies: cross-embodiment policies as plain nn.Modules: HPT, RDT and Pi."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-policies")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"


from polymimic_policies.action_heads import FlowHead, RegressionHead
from polymimic_policies.hpt import EmbodimentSpec, HPTPolicy, pretrained_parts
from polymimic_policies.pi import PiPolicy
from polymimic_policies.pretrained import PretrainedWeightsError
from polymimic_policies.rdt import RDTPolicy

__all__ = [
    "EmbodimentSpec",
    "FlowHead",
    "HPTPolicy",
    "PiPolicy",
    "PretrainedWeightsError",
    "RDTPolicy",
    "RegressionHead",
    "pretrained_parts",
]
