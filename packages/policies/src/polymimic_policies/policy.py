"""The Policy protocol every policy meets, and the registry of policy classes by name.

Train and serve call a policy through `Policy` alone. A policy class declares what it is
as class attributes: its registered `name`, its `config_type`, the rotation
representations it can predict (`rotation_kinds`, None for any) and the config fields
that name local directories of weights it reads (`local_weights`, each a LocalWeights).

A trained policy is recorded as plain data, `{"name": ..., "config": config.to_dict()}`,
and rebuilt from it by `policy_from_record`, which looks the name up among the registered
policies before anything else: a record naming anything else (a module, a function, a
class that is not a registered policy) is refused with UnregisteredPolicyError, and
nothing is imported or called for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

import torch
from torch import Tensor, nn

from polymimic_policies.embodiment_spec import EmbodimentSpec
from polymimic_policies.policy_config import PolicyConfig
from polymimic_policies.real_time_chunking import ActionPrefix

Embodiments = Mapping[str, EmbodimentSpec | Mapping[str, Any]]


@dataclass(frozen=True)
class LocalWeights:
    """A local directory of weights a policy reads when built afresh, and how to tell one.

    The train app's config check names the setting that points at it, with these words,
    before anything is built (e.g. Pi's PaliGemma).
    """

    marker: str  # a file every such directory holds, e.g. "config.json"
    name: str  # what it is, in a word: "PaliGemma"
    what: str  # what it is, in full: "PaliGemma in the transformers format (...)"
    example: str  # a path one might set: "/models/paligemma-3b-pt-224"
    source: str  # where one comes from


class UnregisteredPolicyError(ValueError):
    """A policy name (or config type) that no registered policy class has."""


@runtime_checkable
class Policy(Protocol):
    """What every policy offers (an nn.Module built on the CPU; see DESIGN.md, Policies).

    `compute_loss` takes a normalised batch and gives `loss` and parts to log;
    `sample_actions` gives normalised action chunks (B, T, A), from `noise` (B, T, A) if
    given, else drawn from `generator`, and, where `can_inpaint`, continuing a previous
    chunk's `prefix` (real-time chunking, see real_time_chunking); `param_groups` puts
    backbones at their own rate. The nn.Module methods train and serve use are part of the
    protocol too.
    """

    name: ClassVar[str]
    config_type: ClassVar[type[PolicyConfig]]
    rotation_kinds: ClassVar[tuple[str, ...] | None]
    local_weights: ClassVar[Mapping[str, LocalWeights]]

    def __init__(self, config: Any, embodiments: Embodiments) -> None: ...

    @property
    def config(self) -> PolicyConfig:
        """The config the policy was built from."""
        ...

    @property
    def specs(self) -> Mapping[str, EmbodimentSpec]:
        """The embodiments the policy was built for, by name."""
        ...

    def compute_loss(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        """The loss for a normalised batch (`loss`), with its parts for logging."""
        ...

    def sample_actions(
        self,
        batch: Mapping[str, Any],
        generator: torch.Generator | None = None,
        noise: Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> Tensor:
        """Normalised action chunks (B, T, A) for a batch; with `prefix`, continuing it."""
        ...

    def can_inpaint(self, embodiment: str) -> bool:
        """Whether `sample_actions` takes a `prefix` for this embodiment (real-time chunking)."""
        ...

    def param_groups(self, lr: float, backbone_lr: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups: backbones at `backbone_lr`, the rest at `lr`."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """nn.Module's."""
        ...

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """nn.Module's."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """nn.Module's."""
        ...

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """nn.Module's."""
        ...

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """nn.Module's."""
        ...

    def train(self, mode: bool = True) -> Self:
        """nn.Module's."""
        ...

    def eval(self) -> Self:
        """nn.Module's."""
        ...


P = TypeVar("P", bound=type[Policy])
_BY_NAME: dict[str, type[Policy]] = {}


def check_config_type(cls: type, config: object) -> None:
    """TypeError unless `config` is exactly what policy class `cls` is built from."""
    expected = getattr(cls, "config_type", None)
    if type(config) is not expected:
        name = getattr(expected, "__name__", expected)
        raise TypeError(
            f"{cls.__name__} is built from {name}, not {type(config).__name__} "
            "(build_policy picks the class from the config)"
        )


def register_policy(cls: P) -> P:
    """Class decorator: register a policy class under its `name` (and its config type)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__qualname__}: a policy class declares its name (a string)")
    config_type = getattr(cls, "config_type", None)
    if not (isinstance(config_type, type) and issubclass(config_type, PolicyConfig)):
        raise ValueError(f"{cls.__qualname__}: config_type must be a PolicyConfig subclass")
    for other in _BY_NAME.values():
        same = other.__module__ == cls.__module__ and other.__qualname__ == cls.__qualname__
        if same:
            continue  # the same class again (its module reloaded)
        if other.name == name:
            raise ValueError(f"policy {name!r}: already registered by {other.__qualname__}")
        if other.config_type is config_type:
            raise ValueError(
                f"{cls.__qualname__}: {config_type.__name__} already builds {other.__qualname__}"
            )
    _BY_NAME[name] = cls
    return cls


def registered_policies() -> list[str]:
    """The registered policy names, sorted."""
    return sorted(_BY_NAME)


def policy_class(name: str) -> type[Policy]:
    """The policy class registered under `name`, or UnregisteredPolicyError naming it."""
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None:
        raise UnregisteredPolicyError(
            f"policy {name!r} is not a registered policy; registered: {registered_policies()}"
        )
    return cls


def policy_class_of(config: PolicyConfig) -> type[Policy]:
    """The registered policy class that `config`'s type builds."""
    for cls in _BY_NAME.values():
        if cls.config_type is type(config):
            return cls
    builds = {n: c.config_type.__name__ for n, c in sorted(_BY_NAME.items())}
    raise UnregisteredPolicyError(
        f"no registered policy is built from a {type(config).__name__}; registered: {builds}"
    )


def build_policy(config: PolicyConfig, embodiments: Embodiments) -> Policy:
    """The policy `config` describes, for these embodiments (its class from the config's type)."""
    return policy_class_of(config)(config, embodiments)


def policy_record(policy: Policy) -> dict[str, Any]:
    """The policy as plain data: `{"name": its registered name, "config": config.to_dict()}`."""
    if _BY_NAME.get(policy.name) is not type(policy):
        raise UnregisteredPolicyError(
            f"{type(policy).__qualname__} is not a registered policy class (the name "
            f"{policy.name!r} is not registered to it); registered: {registered_policies()}"
        )
    return {"name": policy.name, "config": policy.config.to_dict()}


def policy_from_record(
    record: Mapping[str, Any], embodiments: Embodiments, *, weights_from_checkpoint: bool = False
) -> Policy:
    """The policy a `policy_record` describes, built for `embodiments`.

    The name is looked up among the registered policies first: an unregistered one raises
    UnregisteredPolicyError before anything is imported, built or called. The config is
    then rebuilt by the class's own config type (unknown keys refused). With
    `weights_from_checkpoint`, the policy reads no initial weights (no pretrained parts,
    no base weights): a checkpoint's state dict supplies them.
    """
    name = record.get("name") if isinstance(record, Mapping) else None
    if not isinstance(name, str):
        raise UnregisteredPolicyError(
            f"policy record: no registered policy name (name {name!r}); a record is "
            f"{{'name': ..., 'config': ...}} and the names are {registered_policies()}"
        )
    cls = policy_class(name)
    unknown = sorted(str(k) for k in record if k not in ("name", "config"))
    if unknown:
        raise ValueError(f"policy record: unknown keys {unknown}; a record has name and config")
    config = cls.config_type.from_dict(record.get("config", {}))
    if weights_from_checkpoint:
        config = config.without_initial_weights()
    return cls(config, embodiments)
