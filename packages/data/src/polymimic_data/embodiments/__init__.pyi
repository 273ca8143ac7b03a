# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .declared import DECLARATION as DECLARATION
from .declared import DeclarationError as DeclarationError
from .declared import check_declaration as check_declaration
from .declared import declaration_key as declaration_key
from .declared import declare as declare
from .declared import declared_cameras as declared_cameras
from .declared import declared_names as declared_names
from .declared import embodiment_from_declaration as embodiment_from_declaration
from .declared import lacking_cameras as lacking_cameras
from .declared import layout_name as layout_name
from .registry import CameraIntrinsics as CameraIntrinsics
from .registry import Embodiment as Embodiment
from .registry import LayoutRecipe as LayoutRecipe
from .registry import VectorRecipe as VectorRecipe
from .registry import camera_intrinsics as camera_intrinsics
from .registry import get_embodiment as get_embodiment
from .registry import register_embodiment as register_embodiment
from .registry import registered_embodiments as registered_embodiments
from .specs import DEFAULT_CAMERAS as DEFAULT_CAMERAS
from .specs import action_rates as action_rates
from .specs import dataset_cameras as dataset_cameras
from .specs import embodiment_specs as embodiment_specs
from .specs import policy_embodiments as policy_embodiments
