"""The CPU twin a meta model's facts are probed on (:func:`.arch.derive_twin`): the model class
built from the same config on the CPU, its random initial values drawn by the stateless fill
(:func:`fp8_dummy.init_stateless_`, a fixed key per draw: a uniform of the draw's own mean and
standard deviation, or bounds) instead of torch's global generator (``normal_``,
``uniform_`` and nn.Linear's ``kaiming_uniform_``; any other draw is torch's). The probes take
a fact from tensor identities, shapes or the values they substitute, never from which random
draw a weight got (those were the caller's generator's, whatever its state), so the facts are
the same; the deterministic part of the initialization (ones, zeros, buffers) is the model's
own. The fill costs a fraction of ``normal_``'s Gaussians drawn one by one (most of the twin's
build for a MoE of many experts), the twin is the same in every process, and the caller's
generator is left as it was."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import ops

__all__ = ["SEED", "build_twin"]

SEED = 0x7717  # the twin's draws' key: any fixed value (the facts do not depend on it)
_HALF_MAX = 60000.0  # the stateless fill's values pass through float16: bounds within its range
_METHODS = {torch._C.TensorBase.normal_: "normal_", torch._C.TensorBase.uniform_: "uniform_"}
# torch.nn.init's draws, and transformers' copies of them that its init context swaps in
_INIT_MODULES = ("torch.nn.init", "transformers.initialization")


def build_twin(cls: type, config: Any, dtype: torch.dtype) -> torch.nn.Module:
    """``cls`` built from ``config`` on the CPU in ``dtype``, its normal and uniform draws
    made by the stateless fill (:class:`_Draws`): in a device context where the caller's
    makes tensors elsewhere (an engine's), in none where they are made on the CPU already (a
    context is a Python call in every torch call of the build)."""
    elsewhere = torch.empty(()).device.type != "cpu"
    with torch.device("cpu") if elsewhere else contextlib.nullcontext(), _Draws():
        return cls._from_config(config, dtype=dtype)


_DRAWS = ("normal_", "uniform_", "kaiming_uniform_")  # nn.Linear's own reset: kaiming's


def _draw(func: Any) -> str | None:
    """The name of a draw this fill stands for, else None."""
    if func in _METHODS:
        return _METHODS[func]
    name = getattr(func, "__name__", None)
    if name in _DRAWS and getattr(func, "__module__", None) in _INIT_MODULES:
        return name
    return None


def _bounds(draw: str, method: bool, args: tuple, kwargs: dict):
    """(tensor, low, high) of a draw from the global generator, else None (a generator of its
    own, an argument this does not read: torch's own draw)."""
    names = {"normal_": ("tensor", "mean", "std"), "uniform_": ("tensor", "a", "b")}.get(draw)
    names = names or ("tensor", "a", "mode", "nonlinearity")
    if method and draw == "uniform_":
        names = ("tensor", "from", "to")
    if len(args) > len(names) or kwargs.get("generator") is not None:
        return None
    if any(k not in names and k != "generator" for k in kwargs):
        return None
    given = dict(zip(names, args))
    given.update((k, v) for k, v in kwargs.items() if k != "generator")
    t = given.get("tensor")
    if draw == "kaiming_uniform_":  # torch's bound: gain · √(3 / fan)
        a, mode = given.get("a", 0), given.get("mode", "fan_in")
        if not isinstance(t, torch.Tensor) or t.dim() < 2 or type(a) not in (int, float):
            return None
        try:
            gain = torch.nn.init.calculate_gain(given.get("nonlinearity", "leaky_relu"), a)
            fan = torch.nn.init._calculate_correct_fan(t, mode)
        except (ValueError, TypeError):
            return None
        bound = gain * math.sqrt(3.0 / fan) if fan > 0 else math.inf
        return t, -bound, bound
    first, second = given.get(names[1], 0.0), given.get(names[2], 1.0)
    if not all(type(v) in (int, float) for v in (first, second)):
        return None
    if draw == "normal_":  # a uniform of the same mean and standard deviation
        half = float(second) * math.sqrt(3.0)
        return t, float(first) - half, float(first) + half
    return t, float(first), float(second)


class _Draws(TorchFunctionMode):
    """Normal and uniform draws into a floating CPU tensor, made by the stateless fill (key:
    :data:`SEED` and the draw's number); any other call, and a draw the fill cannot stand for
    (another device or dtype, bounds beyond float16's range, a tensor method's draw into a
    leaf that requires grad outside ``no_grad``: torch's error), runs as torch runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        draw = _draw(func)
        if draw is not None:
            method = func in _METHODS
            found = _bounds(draw, method, args, kwargs)
            if found is not None and _fillable(*found):
                t, low, high = found
                skip = not method and getattr(t, "_is_hf_initialized", False)  # its own no-op
                grad = method and torch.is_grad_enabled() and t.requires_grad  # torch's error
                if not (skip or grad):
                    self.count += 1
                    try:
                        with torch.no_grad():
                            return ops.init_stateless_(t, low, high, SEED, key_offset=self.count)
                    except Exception:  # noqa: BLE001 (a tensor the fill refuses: torch's draw)
                        pass
        return func(*args, **kwargs)


def _fillable(t: Any, low: float, high: float) -> bool:
    return (
        type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.device.type == "cpu"
        and t.numel() > 0
        and t.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and all(math.isfinite(v) and abs(v) <= _HALF_MAX for v in (low, high))
        and low < high
    )
