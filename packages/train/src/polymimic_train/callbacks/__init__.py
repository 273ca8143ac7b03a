"""Callbacks the configs name.

Overlay videos (`TrajectoryVideoCallback`), the per-step error plot (`StepErrorPlot`),
gradient-norm statistics (`GradNormMonitor`), step timing (`StepTimer`), data-fault reports
(`DataFaultMonitor`) and closed-loop evaluation in simulation (`SimEval`). Each loads on
first use, so `train --help` stays light.
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
