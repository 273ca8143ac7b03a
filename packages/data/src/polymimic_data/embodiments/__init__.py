"""Embodiments: the built-in registry (eva, aria, mecka, scale) and embodiments declared by data."""

from __future__ import annotations

from polymimic_data.embodiments.declared import (
    DECLARATION,
    DeclarationError,
    check_declaration,
    declaration_key,
    declare,
    declared_names,
    embodiment_from_declaration,
    layout_name,
)
from polymimic_data.embodiments.registry import (
    CameraIntrinsics,
    Embodiment,
    LayoutRecipe,
    VectorRecipe,
    camera_intrinsics,
    get_embodiment,
    register_embodiment,
    registered_embodiments,
)
from polymimic_data.embodiments.specs import (
    DEFAULT_CAMERAS,
    action_rates,
    embodiment_specs,
    policy_embodiments,
)

__all__ = [
    "DECLARATION",
    "DEFAULT_CAMERAS",
    "CameraIntrinsics",
    "DeclarationError",
    "Embodiment",
    "LayoutRecipe",
    "VectorRecipe",
    "action_rates",
    "camera_intrinsics",
    "check_declaration",
    "declaration_key",
    "declare",
    "declared_names",
    "embodiment_from_declaration",
    "embodiment_specs",
    "get_embodiment",
    "layout_name",
    "policy_embodiments",
    "register_embodiment",
    "registered_embodiments",
]
