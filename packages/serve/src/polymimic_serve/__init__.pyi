# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .checkpoints import CheckpointError as CheckpointError
from .checkpoints import checkpoint_record as checkpoint_record
from .checkpoints import read_checkpoint as read_checkpoint
from .checkpoints import write_export as write_export
from .client import PolicyClient as PolicyClient
from .executors import DEFAULT_EXECUTOR as DEFAULT_EXECUTOR
from .executors import EXECUTORS as EXECUTORS
from .executors import ChunkBroker as ChunkBroker
from .executors import ChunkExecutor as ChunkExecutor
from .executors import ChunkPolicy as ChunkPolicy
from .executors import RealTimeChunking as RealTimeChunking
from .executors import TemporalEnsemble as TemporalEnsemble
from .executors import make_executor as make_executor
from .inference import LocalPolicy as LocalPolicy
from .inference import PolicyRunner as PolicyRunner
from .observations import ObservationError as ObservationError
from .observations import ObservationReader as ObservationReader
from .observations import Request as Request
from .observations import StateHistory as StateHistory
from .realtime import RealTimeRunner as RealTimeRunner
from .server import DEFAULT_MAX_BATCH as DEFAULT_MAX_BATCH
from .server import PolicyServer as PolicyServer
from .server import RunningServer as RunningServer
from .trained_policy import Continuation as Continuation
from .trained_policy import TrainedPolicy as TrainedPolicy
from .trained_policy import load_policy as load_policy
from .untrained import write_untrained_export as write_untrained_export
from .wire import packb as packb
from .wire import unpackb as unpackb

__version__: str
