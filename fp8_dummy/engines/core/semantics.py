"""An engine's dummy-weight function as data (docs/engines.md, "The core"): what it does to
each tensor (:class:`Kind`, :class:`Action`, a :data:`Rule`), its parameters and order
(:class:`Semantics`) and the registry by name."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["ROWS", "SEMANTICS", "SKIP", "Action", "Call", "Kind", "Planned", "Rule", "Semantics"]
__all__ += ["bind", "error", "is_scale_tensor"]

ROWS = "contiguous_path"  # a row-major temp: the bytes depend on the layout


class Kind(enum.Enum):
    SKIP = "skip"  # untouched
    FILL = "fill"  # t.fill_(value)
    BYTE = "byte"  # every byte set to value
    RANDOM = "random"  # random_(low, high) on the tensor (low < 0) or its uint8 view
    ZERO = "zero"
    UNIFORM = "uniform"  # the float path in [low, high): fused where proven
    REFERENCE = "reference"  # the float path through the plain-torch reference
    ENGINE = "engine"  # the engine's own function: value() (None: not known here)
    ERROR = "error"  # the engine raises: value = (exception type, message)


@dataclass(frozen=True)
class Action:
    kind: Kind
    low: float = 0.0
    high: float = 0.0
    value: Any = None


SKIP = Action(Kind.SKIP)
Rule = Callable[[torch.Tensor, Any, Any, str], Action]
Call = tuple[tuple, dict]


def error(kind: type[Exception], message: str) -> Action:
    return Action(Kind.ERROR, value=(kind, message))


@dataclass(frozen=True)
class Semantics:
    """An engine's dummy-weight function as data (docs/engines.md, "The core")."""

    path: str  # the proof keys' and FP8_DUMMY_FAULT's name
    name: str  # the engine and version the keys name
    rule: Rule  # (t, low, high, name as passed, else local) -> Action
    params: tuple[tuple[str, Any], ...]  # its parameters after the tensor or model, defaults
    order: str = "state_dict"  # or "modules": each module's parameters, persistent buffers
    temp: str = "new_path"  # its float path: a function of fp8_dummy.reference
    per_tensor: bool = False  # its function takes a tensor (else a model)
    # The tensor's attributes its rule reads beyond its class, dtype, device, dimensions and
    # layout (getattr, None if absent): the plan then asks it once per kind of tensor (local
    # name, class, those facts and values). None: asked for every tensor.
    reads: tuple[str, ...] | None = None


SEMANTICS: dict[str, Semantics] = {}  # by name, for fp8_dummy.initialize_dummy_weights


def bind(sem: Semantics, args: tuple, kwargs: dict) -> tuple[dict, bool]:
    """(the arguments with the defaults, whether a name was given); TypeError: not its call."""
    names = [n for n, _ in sem.params]
    if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[: len(args)]):
        raise TypeError(f"not {sem.name}'s signature")
    given = dict(zip(names, args), **kwargs)
    return {**dict(sem.params), **given}, "name" in given


def is_scale_tensor(name: str, tensor: torch.Tensor) -> bool:
    """``scales="neutral"``'s rule: 0-dim, or a local name ending in ``scale``/``scale_inv`` or
    containing ``_scale_`` (``weight_scale_2``)."""
    local = name.rsplit(".", 1)[-1]
    return tensor.dim() == 0 or local.endswith(("scale", "scale_inv")) or "_scale_" in local


Planned = tuple[str, torch.Tensor, Action, "tuple[Semantics, int]"]
