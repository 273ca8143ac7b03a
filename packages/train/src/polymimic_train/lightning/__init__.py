"""The Lightning modules the recipe composes.

`policy_module.PolicyModule`: the policy's training and validation steps; and
`data_module.EmbodimentDataModule`: the loaders per embodiment. Import the modules
themselves: this package imports nothing, so `train --help` stays light.
"""
