# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).

__version__: str

from .embodiments import Embodiment as Embodiment
from .embodiments import embodiment_specs as embodiment_specs
from .embodiments import get_embodiment as get_embodiment
from .embodiments import registered_embodiments as registered_embodiments
from .episodes import EpisodeInfo as EpisodeInfo
from .episodes import resolve_episodes as resolve_episodes
from .episodes import split_episodes as split_episodes
from .geometry import ChannelGroup as ChannelGroup
from .geometry import Layout as Layout
from .geometry import get_layout as get_layout
from .samples import EpisodeDataset as EpisodeDataset
from .samples import EpisodeIndex as EpisodeIndex
from .samples import Normalizer as Normalizer
from .samples import NormStats as NormStats
from .samples import collate_samples as collate_samples
from .samples import load_or_compute_norm_stats as load_or_compute_norm_stats
from .store import EpisodeReader as EpisodeReader
from .store import write_episode as write_episode
