# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .egoverse_layout import PAD_TO as PAD_TO
from .egoverse_layout import ROWS_PER_CHUNK as ROWS_PER_CHUNK
from .egoverse_layout import padded_length as padded_length
from .egoverse_layout import write_egoverse_episode as write_egoverse_episode
from .episodes import APPROACH_RATE as APPROACH_RATE
from .episodes import ensure_synthetic_episodes as ensure_synthetic_episodes
from .episodes import episode_name as episode_name
from .episodes import generate_episode as generate_episode
from .hand_keypoints import HAND_WIDTH as HAND_WIDTH
from .hand_keypoints import SIDES as SIDES
from .hand_keypoints import hand_keypoints_in_reference as hand_keypoints_in_reference
