"""vLLM's dummy-weight semantics per release (docs/engines.md): 28 (0.28-0.29), 30 (0.30-0.32:
``dummy_weight_value``) and 33 (0.33: E8M0 and uint8 ``*scale*`` tensors byte 120, random
bytes for int8/uint8/packed FP4, 8-bit floats in +-1.0 by default)."""

from __future__ import annotations

import functools
import re
import sys

import torch

from ...tensors import E8M0, FP4
from ..core import SKIP, Action, Kind, Rule, Semantics, installed

__all__ = ["generation", "major_minor", "platform", "rule", "semantics", "version"]

# The per-tensor function's parameters (0.33 added ``name`` and per-dtype default bounds).
PARAMS = {33: (("low", None), ("high", None), ("seed", 1234), ("name", ""))}
PARAMS[30] = PARAMS[28] = (("low", -1e-3), ("high", 1e-3), ("seed", 1234))


def major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of "0.33.0rc1", "v0.34.0.dev3"; an unreadable version reads as a release
    newer than any matched (its behaviour is proven, not assumed)."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 0)


def version() -> str | None:
    """The installed vLLM's version (``vllm.__version__`` once imported), or None."""
    v = getattr(sys.modules.get("vllm"), "__version__", None)
    return v if isinstance(v, str) else installed("vllm")


def generation(v: str | None = None) -> int:
    """28, 30 or 33 (0.33 on, an unreadable version, no vLLM: the newest matched)."""
    v = version() if v is None else v
    release = (1, 0) if v is None else major_minor(v)
    return 33 if release >= (0, 33) else 30 if release >= (0, 30) else 28


@functools.cache
def platform() -> tuple[bool, bool]:
    """(TPU, ROCm) as vLLM sees it; without vLLM: (False, a ROCm torch)."""
    if version() is None:
        return False, torch.version.hip is not None
    from vllm.platforms import current_platform

    return bool(current_platform.is_tpu()), bool(current_platform.is_rocm())


@functools.cache
def rule(gen: int, tpu: bool = False, rocm: bool = False) -> Rule:
    """``initialize_single_dummy_weight(t, low, high, seed, name)``: its branches in order."""

    def act(t: torch.Tensor, low: float | None, high: float | None, name: str) -> Action:
        if t.device.type == "meta":
            return SKIP  # deferred (online quantization materializes it)
        value = getattr(t, "dummy_weight_value", None) if gen >= 30 else None
        if value is not None:
            return Action(Kind.FILL, value=value)
        if gen >= 33 and (t.dtype == E8M0 or (t.dtype == torch.uint8 and "scale" in name)):
            return Action(Kind.BYTE, value=120)  # 2**-7
        if gen >= 33 and t.dtype in (torch.int8, torch.uint8, FP4) and not tpu:
            return Action(Kind.RANDOM, *((-128, 128) if t.dtype == torch.int8 else (0, 256)))
        if not torch.is_floating_point(t):
            return Action(Kind.ZERO) if rocm else SKIP
        # +-1e-3 would round almost every FP8 E4M3 value to zero: 0.33 draws them in +-1.0
        r = 1.0 if gen >= 33 and torch.finfo(t.dtype).bits < 16 else 1e-3
        low, high = -r if low is None else low, r if high is None else high
        return Action(Kind.ENGINE if tpu else Kind.UNIFORM, float(low), float(high))

    return act


def semantics(gen: int | None = None, order: str = "modules") -> Semantics:
    """The installed vLLM's semantics on its platform; ``gen``: that generation's, no vLLM."""
    return _semantics(gen, order, version() if gen is None else None)


@functools.lru_cache(maxsize=32)  # vLLM's per-tensor function asks it for every tensor
def _semantics(gen: int | None, order: str, v: str | None) -> Semantics:
    if gen is not None:
        act, name = rule(gen, False, torch.version.hip is not None), f"vLLM 0.{gen} semantics"
    else:
        gen = generation(v)
        act, name = rule(gen, *platform()), f"vLLM {v}" if v else "vLLM 0.33 semantics"
    reads = ("dummy_weight_value",)
    return Semantics("vllm", name, act, PARAMS[gen], order, per_tensor=True, reads=reads)
