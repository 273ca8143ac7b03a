# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .importer import ImportReport as ImportReport
from .importer import declaration_for as declaration_for
from .importer import episode_path as episode_path
from .importer import import_lerobot as import_lerobot
from .importer import joint_groups as joint_groups
from .importer import parse_episodes as parse_episodes
from .source import IMAGE_PREFIX as IMAGE_PREFIX
from .source import LeRobotEpisode as LeRobotEpisode
from .source import LeRobotFormatError as LeRobotFormatError
from .source import LeRobotSource as LeRobotSource
from .source import camera_name as camera_name
from .source import channel_names as channel_names
from .source import lerobot_extra as lerobot_extra
