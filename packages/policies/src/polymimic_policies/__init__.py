"""polymimic-policies: cross-embodiment policies as plain nn.Modules: HPT, RDT and Pi.

Each policy is built from one config dataclass and its embodiments' specs, meets the
`Policy` protocol, and is registered by name, so a trained policy is recorded and rebuilt
as plain data (`policy_record`, `policy_from_record`).
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-policies")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"


from polymimic_policies.action_heads import FlowHead, RegressionHead
from polymimic_policies.embodiment_spec import EmbodimentSpec
from polymimic_policies.hpt import HPTConfig, HPTPolicy, pretrained_parts
from polymimic_policies.paligemma_loading import (
    ensure_tiny_paligemma,
    make_tiny_paligemma,
    paligemma_3b_config,
)
from polymimic_policies.pi import PiConfig, PiPolicy, pi_parameter_count
from polymimic_policies.policy import (
    LocalWeights,
    Policy,
    UnregisteredPolicyError,
    build_policy,
    policy_class,
    policy_class_of,
    policy_from_record,
    policy_record,
    register_policy,
    registered_policies,
)
from polymimic_policies.policy_config import PolicyConfig
from polymimic_policies.pretrained import PretrainedWeightsError
from polymimic_policies.rdt import RDTConfig, RDTPolicy
from polymimic_policies.real_time_chunking import ActionPrefix, flow_step_velocity, prefix_weights

__all__ = [
    "ActionPrefix",
    "EmbodimentSpec",
    "FlowHead",
    "HPTConfig",
    "HPTPolicy",
    "LocalWeights",
    "PiConfig",
    "PiPolicy",
    "Policy",
    "PolicyConfig",
    "PretrainedWeightsError",
    "RDTConfig",
    "RDTPolicy",
    "RegressionHead",
    "UnregisteredPolicyError",
    "build_policy",
    "ensure_tiny_paligemma",
    "flow_step_velocity",
    "make_tiny_paligemma",
    "paligemma_3b_config",
    "pi_parameter_count",
    "policy_class",
    "policy_class_of",
    "policy_from_record",
    "policy_record",
    "prefix_weights",
    "pretrained_parts",
    "register_policy",
    "registered_policies",
]
