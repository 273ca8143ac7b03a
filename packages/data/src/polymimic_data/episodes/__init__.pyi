# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .bad_values import NOT_DETECTED as NOT_DETECTED
from .bad_values import QUATERNION_TOLERANCE as QUATERNION_TOLERANCE
from .bad_values import frame_faults as frame_faults
from .checks import FrameProblems as FrameProblems
from .checks import deep_problems as deep_problems
from .checks import frame_ranges as frame_ranges
from .corrections import APPLIED as APPLIED
from .corrections import CORRECTIONS as CORRECTIONS
from .corrections import Correction as Correction
from .corrections import CorrectionResult as CorrectionResult
from .corrections import apply_correction as apply_correction
from .resolver import EMPTY_FOLDER as EMPTY_FOLDER
from .resolver import EPISODE as EPISODE
from .resolver import NO_GROUP_METADATA as NO_GROUP_METADATA
from .resolver import STRAY_FILE as STRAY_FILE
from .resolver import EpisodeInfo as EpisodeInfo
from .resolver import EpisodeScan as EpisodeScan
from .resolver import EpisodeValidationError as EpisodeValidationError
from .resolver import episode_dirs as episode_dirs
from .resolver import job_cache_dir as job_cache_dir
from .resolver import resolve_episodes as resolve_episodes
from .resolver import scan_episodes as scan_episodes
from .resolver import walk_root as walk_root
from .splits import split_episodes as split_episodes
from .viewer import MissingViewerError as MissingViewerError
from .viewer import save_recording as save_recording
