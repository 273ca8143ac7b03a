# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .data_fault_monitor import DataFaultMonitor as DataFaultMonitor
from .grad_norm_monitor import GradNormMonitor as GradNormMonitor
from .rerun_predictions import RerunPredictions as RerunPredictions
from .sim_eval import SimEval as SimEval
from .step_error_plot import StepErrorPlot as StepErrorPlot
from .step_timing import StepTimer as StepTimer
from .trajectory_video import TrajectoryVideoCallback as TrajectoryVideoCallback
