"""The private Lightning members polymimic-strategies relies on, checked against the installed one.

`PolymimicDDPStrategy` overrides and reads members of Lightning's `DDPStrategy` that are not
public API, so a Lightning release may rename or reshape them without notice. These tests name
each one, so an upgrade fails here, loudly and by name, instead of silently dropping the comm
hook or the unused-parameter check. The pyproject pins Lightning to the range checked here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Literal

import pytest
from lightning.pytorch.strategies import DDPStrategy
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from polymimic_strategies import PolymimicDDPStrategy


@dataclass(frozen=True)
class Member:
    name: str
    kind: Literal["method", "attribute"]
    # Methods: the parameter names our override or call depends on, in order (self included).
    # Attributes: the `DDPStrategy.__init__` argument whose value Lightning stores there
    # ("**kwargs" for the catch-all keyword arguments).
    expects: tuple[str, ...] | str
    used: str


# Every private member of Lightning's DDPStrategy that polymimic_strategies reads, writes or
# overrides, with where. All of them are in packages/strategies/src/polymimic_strategies/ddp.py.
PRIVATE_LIGHTNING_MEMBERS: tuple[Member, ...] = (
    Member(
        "_register_ddp_hooks",
        "method",
        ("self",),
        "overridden by PolymimicDDPStrategy._register_ddp_hooks, so the comm hook is registered "
        "on every device (Lightning's registers it only on CUDA); Lightning's configure_ddp "
        "must keep calling it",
    ),
    Member(
        "_ddp_comm_hook",
        "attribute",
        "ddp_comm_hook",
        "read in PolymimicDDPStrategy._register_ddp_hooks: the hook to register",
    ),
    Member(
        "_ddp_comm_wrapper",
        "attribute",
        "ddp_comm_wrapper",
        "read in PolymimicDDPStrategy._register_ddp_hooks: wraps the hook when set",
    ),
    Member(
        "_ddp_comm_state",
        "attribute",
        "ddp_comm_state",
        "read in PolymimicDDPStrategy._register_ddp_hooks: the state= of register_comm_hook",
    ),
    Member(
        "_ddp_kwargs",
        "attribute",
        "**kwargs",
        "read in PolymimicDDPStrategy.post_backward: .get('find_unused_parameters')",
    ),
)

# Public members whose shape the override depends on (overridden, or called by Lightning).
PUBLIC_OVERRIDES: tuple[Member, ...] = (
    Member(
        "post_backward",
        "method",
        ("self", "closure_loss"),
        "overridden by PolymimicDDPStrategy.post_backward (calls super, then checks unused params)",
    ),
    Member(
        "configure_ddp",
        "method",
        ("self",),
        "Lightning's; wraps the model in DDP and then calls _register_ddp_hooks",
    ),
)

# Private names PolymimicDDPStrategy sets for itself: they must not collide with Lightning's.
OWN_PRIVATE_ATTRIBUTES = ("_checked_unused",)

SRC = Path(__file__).resolve().parents[1] / "src" / "polymimic_strategies"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _hook(state: object, bucket: object) -> object:
    return bucket


def _wrapper(hook: object) -> object:
    return hook


def _strategy() -> DDPStrategy:
    """Lightning's own DDPStrategy, built with a value for each argument the members come from."""
    return DDPStrategy(
        ddp_comm_state="state-sentinel",
        ddp_comm_hook=_hook,
        ddp_comm_wrapper=_wrapper,
        find_unused_parameters=True,
        gradient_as_bucket_view=True,
    )


EXPECTED_VALUES: dict[str, object] = {
    "ddp_comm_state": "state-sentinel",
    "ddp_comm_hook": _hook,
    "ddp_comm_wrapper": _wrapper,
    "**kwargs": {"find_unused_parameters": True, "gradient_as_bucket_view": True},
}


def _check(member: Member) -> None:
    lightning = version("lightning")
    where = f"(used: {member.used}; installed lightning {lightning})"
    if member.kind == "method":
        attr = inspect.getattr_static(DDPStrategy, member.name, None)
        assert attr is not None, f"Lightning's DDPStrategy has no method {member.name} {where}"
        assert inspect.isfunction(attr), (
            f"DDPStrategy.{member.name} is a {type(attr).__name__}, expected a method {where}"
        )
        params = tuple(inspect.signature(attr).parameters)
        assert params == member.expects, (
            f"DDPStrategy.{member.name} takes {params}, polymimic_strategies expects "
            f"{member.expects} {where}"
        )
        return
    strategy = _strategy()
    assert member.name in vars(strategy), (
        f"DDPStrategy() no longer sets the attribute {member.name} {where}"
    )
    assert not callable(inspect.getattr_static(DDPStrategy, member.name, None)), (
        f"DDPStrategy.{member.name} is now a method, expected an attribute {where}"
    )
    assert isinstance(member.expects, str)
    got = getattr(strategy, member.name)
    want = EXPECTED_VALUES[member.expects]
    assert got == want, (
        f"DDPStrategy.{member.name} no longer holds the {member.expects} argument: "
        f"got {got!r}, expected {want!r} {where}"
    )


@pytest.mark.parametrize("member", PRIVATE_LIGHTNING_MEMBERS, ids=lambda m: m.name)
def test_private_lightning_member_still_exists_with_expected_shape(member: Member) -> None:
    _check(member)


@pytest.mark.parametrize("member", PUBLIC_OVERRIDES, ids=lambda m: m.name)
def test_overridden_public_member_keeps_its_signature(member: Member) -> None:
    _check(member)


def test_lightning_still_calls_register_ddp_hooks_after_wrapping_the_model() -> None:
    # Otherwise the override is dead code and the comm hook silently never registers off CUDA.
    tree = ast.parse(textwrap.dedent(inspect.getsource(DDPStrategy.configure_ddp)))
    calls = [
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
    ]
    assert "_register_ddp_hooks" in calls, (
        f"Lightning {version('lightning')}: DDPStrategy.configure_ddp no longer calls "
        f"self._register_ddp_hooks() (it calls {calls}); PolymimicDDPStrategy's override "
        "would never run"
    )


def test_own_private_attributes_do_not_collide_with_lightnings() -> None:
    strategy = _strategy()
    for name in OWN_PRIVATE_ATTRIBUTES:
        assert not hasattr(strategy, name), (
            f"Lightning {version('lightning')}'s DDPStrategy now has {name}, which "
            "PolymimicDDPStrategy uses for its own state"
        )
    assert PolymimicDDPStrategy()._checked_unused is False


def _private_names_used_in_source() -> dict[str, list[str]]:
    """`_`-prefixed names the package takes from Lightning: self._x, def _x, imports of _x."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in {
                "lightning",
                "pytorch_lightning",
                "lightning_fabric",
            }:
                mod_parts = (node.module or "").split(".")
                names = [p for p in mod_parts if p.startswith("_")]
                names += [a.name for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "DDPStrategy" for b in node.bases
            ):
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id == "self"
                        and sub.attr.startswith("_")
                    ) or (isinstance(sub, ast.FunctionDef) and sub.name.startswith("_")):
                        name = sub.attr if isinstance(sub, ast.Attribute) else sub.name
                        if not name.startswith("__"):
                            names.append(name)
            for name in names:
                found.setdefault(name, []).append(f"{path.name}:{getattr(node, 'lineno', '?')}")
    return found


def test_the_list_names_every_private_member_the_source_uses() -> None:
    used = _private_names_used_in_source()
    listed = {m.name for m in PRIVATE_LIGHTNING_MEMBERS} | set(OWN_PRIVATE_ATTRIBUTES)
    unlisted = {name: where for name, where in used.items() if name not in listed}
    assert unlisted == {}, (
        "polymimic_strategies uses private names not in PRIVATE_LIGHTNING_MEMBERS "
        f"(or OWN_PRIVATE_ATTRIBUTES): {unlisted}"
    )
    stale = {m.name for m in PRIVATE_LIGHTNING_MEMBERS} - set(used)
    assert stale == set(), f"listed but no longer used: {stale}"


def _pinned_lightning() -> SpecifierSet:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    pins = [r for r in reqs if canonicalize_name(r.name) == "lightning"]
    assert len(pins) == 1, f"expected one lightning requirement in {PYPROJECT}, got {pins}"
    return pins[0].specifier


def test_lightning_pin_has_an_upper_bound() -> None:
    spec = _pinned_lightning()
    assert any(s.operator in {"<", "<=", "~=", "==", "==="} for s in spec), (
        f"lightning{spec}: private members are relied on, so the range must be closed above"
    )


def test_installed_lightning_is_inside_the_pinned_range() -> None:
    spec = _pinned_lightning()
    installed = Version(version("lightning"))
    assert spec.contains(installed, prereleases=True), (
        f"installed lightning {installed} is outside the range lightning{spec} pinned in "
        f"{PYPROJECT.name}; re-run the contract tests on it and move the pin"
    )
