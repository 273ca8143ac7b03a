# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .layouts import ChannelGroup as ChannelGroup
from .layouts import Layout as Layout
from .layouts import get_layout as get_layout
from .layouts import layout_from_widths as layout_from_widths
from .layouts import register_layout as register_layout
from .poses import express_in as express_in
from .poses import invert as invert
from .poses import matrix_to_pose as matrix_to_pose
from .poses import points_in_frame as points_in_frame
from .poses import pose_to_matrix as pose_to_matrix
from .rotations import ROTATION_WIDTHS as ROTATION_WIDTHS
from .rotations import continuous_quaternions as continuous_quaternions
from .rotations import convert as convert
from .rotations import euler_to_matrix as euler_to_matrix
from .rotations import from_matrix as from_matrix
from .rotations import geodesic_angle as geodesic_angle
from .rotations import matrix_to_euler as matrix_to_euler
from .rotations import matrix_to_quat as matrix_to_quat
from .rotations import matrix_to_rot6d as matrix_to_rot6d
from .rotations import quat_to_matrix as quat_to_matrix
from .rotations import resample_quaternions as resample_quaternions
from .rotations import rot6d_to_matrix as rot6d_to_matrix
from .rotations import slerp as slerp
from .rotations import to_matrix as to_matrix
