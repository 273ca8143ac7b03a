"""polymimic-policies: cross-embodiment policies as plain nn.Modules (HPT; Pi and RDT to come)."""

from polymimic_policies.action_heads import FlowHead, RegressionHead
from polymimic_policies.hpt import EmbodimentSpec, HPTPolicy, pretrained_parts
from polymimic_policies.pretrained import PretrainedWeightsError

__all__ = [
    "EmbodimentSpec",
    "FlowHead",
    "HPTPolicy",
    "PretrainedWeightsError",
    "RegressionHead",
    "pretrained_parts",
]
