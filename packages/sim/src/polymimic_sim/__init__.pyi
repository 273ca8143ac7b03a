# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .camera_frames import project_view as project_view
from .episodes import Outcome as Outcome
from .episodes import summarise as summarise
from .episodes import wilson_interval as wilson_interval
from .metaworld_tasks import distances_to_goal as distances_to_goal
from .parallel import evaluate_parallel as evaluate_parallel
from .recording import LINGER as LINGER
from .recording import ExpertRun as ExpertRun
from .recording import record as record
from .recording import run_expert as run_expert
from .rendering import RenderingError as RenderingError
from .rollouts import describe as describe
from .rollouts import evaluate as evaluate
from .rollouts import evaluate_checkpoint as evaluate_checkpoint
from .rollouts import evaluate_policy as evaluate_policy
from .rollouts import rollout as rollout
from .rollouts import summarise_suite as summarise_suite
from .settings import RolloutSettings as RolloutSettings
from .task_types import STOCK_EXPERT as STOCK_EXPERT
from .task_types import MissingExtraError as MissingExtraError
from .task_types import SimTask as SimTask
from .task_types import UnknownTaskError as UnknownTaskError
from .tasks import default_cameras as default_cameras
from .tasks import expert_variant as expert_variant
from .tasks import make_task as make_task
from .tasks import object_poses as object_poses
from .tasks import suite_tasks as suite_tasks
from .tasks import task_embodiment as task_embodiment

__version__: str
