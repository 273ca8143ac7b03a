"""polymimic-policies: cross-embodiment policies as plain nn.Modules (HPT; Pi and RDT to come)."""

from polymimic_policies.flow_matching import FlowMatchingActionHead
from polymimic_policies.hpt import EmbodimentSpec, HPTPolicy

__all__ = ["EmbodimentSpec", "FlowMatchingActionHead", "HPTPolicy"]
