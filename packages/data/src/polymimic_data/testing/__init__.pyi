# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .lerobot_format import LeRobotEpisodeTruth as LeRobotEpisodeTruth
from .lerobot_format import render_frames as render_frames
from .lerobot_format import write_lerobot_dataset as write_lerobot_dataset
from .s3_server import S3TestServer as S3TestServer
