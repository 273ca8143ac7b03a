# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .recording import LINGER as LINGER
from .recording import ExpertRun as ExpertRun
from .recording import record as record
from .recording import run_expert as run_expert
from .rollouts.closed_loop import describe as describe
from .rollouts.closed_loop import evaluate as evaluate
from .rollouts.closed_loop import evaluate_checkpoint as evaluate_checkpoint
from .rollouts.closed_loop import evaluate_policy as evaluate_policy
from .rollouts.closed_loop import rollout as rollout
from .rollouts.closed_loop import summarise_suite as summarise_suite
from .rollouts.episodes import Outcome as Outcome
from .rollouts.episodes import summarise as summarise
from .rollouts.episodes import wilson_interval as wilson_interval
from .rollouts.parallel import evaluate_parallel as evaluate_parallel
from .settings import RolloutSettings as RolloutSettings
from .tasks.camera_frames import project_view as project_view
from .tasks.metaworld_tasks import distances_to_goal as distances_to_goal
from .tasks.registry import default_cameras as default_cameras
from .tasks.registry import expert_variant as expert_variant
from .tasks.registry import make_task as make_task
from .tasks.registry import object_poses as object_poses
from .tasks.registry import suite_tasks as suite_tasks
from .tasks.registry import task_embodiment as task_embodiment
from .tasks.rendering import RenderingError as RenderingError
from .tasks.task_types import STOCK_EXPERT as STOCK_EXPERT
from .tasks.task_types import MissingExtraError as MissingExtraError
from .tasks.task_types import SimTask as SimTask
from .tasks.task_types import UnknownTaskError as UnknownTaskError

__version__: str
