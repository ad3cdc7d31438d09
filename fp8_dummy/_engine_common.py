"""What the serving-engine drop-ins (``vllm.py``, ``sglang.py``, ``model.py``) share: the
per-tensor rules of each engine's dummy loader as plain data (:class:`Action`), which
tensors our fused operator may fill, the one helper for random integer bytes, the
once-per-(device, dtype) self-check, and the environment switch of the plugins.

Nothing here imports an engine: the rules are written down from the engines' sources
(vLLM 0.28-0.33, SGLang 0.5.23) and tested against them byte for byte
(``tests/test_engines_*.py``).
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import ops

__all__ = ["Action", "SelfCheck", "fusable", "random_bytes_", "sglang_action", "vllm_action"]

# vLLM >= 0.33 fills E8M0 scales with this byte (2**-7) and draws 8-bit floats in +-1.0
# by default (+-1e-3 would round almost every FP8 E4M3 value to zero).
VLLM_E8M0_SCALE_BYTE = 120
VLLM_FP8_DEFAULT_RANGE = 1.0
DEFAULT_RANGE = 1e-3
SGLANG_NEUTRAL_SUFFIXES = ("weight_scale_inv", "weight_scale_2")

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_FP8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
_FP8_NAMES += ("float8_e8m0fnu",)
_FUSED_DTYPES = {getattr(torch, n) for n in _FP8_NAMES if hasattr(torch, n)} | {
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
}


def random_bytes_(t: torch.Tensor, low: int, high: int, seed: int) -> torch.Tensor:
    """``t.random_(low, high)`` with a fresh generator of ``t``'s device seeded with
    ``seed``: the bytes the engines give int8, uint8 and packed FP4 weights.

    Plain strided tensors go through ``fp8_dummy.random_`` (the same bytes and generator
    use; on the CPU several threads instead of torch's serial loop, behind its own
    self-check against torch's ``random_``); tensor subclasses (DTensor, ...) through
    torch's ``random_``, which knows their rules."""
    if type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided:
        return ops.random_(t, low, high, seed)
    g = torch.Generator(device=t.device)
    g.manual_seed(seed)
    return t.random_(low, high, generator=g)


@dataclass(frozen=True)
class Action:
    """What an engine's dummy loader does to one tensor.

    kind: ``skip``; ``fill`` (``t.fill_(value)``); ``byte`` (every byte set to
    ``value``); ``int8`` / ``uint8`` (random bytes, :func:`random_bytes_` over
    [-128, 128) on the tensor / over [0, 256) on its uint8 view); ``zero``; ``uniform``
    (the float16-temp path, or ``uniform_`` for 16-bit and wider floats, in
    ``[low, high)``, a fresh generator seeded per tensor); ``tpu`` (vLLM's CPU-drawn TPU
    path: left to vLLM); ``call`` (``value()`` does it: delegation to the engine);
    ``error`` (the engine raises: ``value`` is (exception type, message)).
    """

    kind: str
    low: float = 0.0
    high: float = 0.0
    value: Any = None


SKIP = Action("skip")


def _error(kind: type[Exception], message: str) -> Action:
    return Action("error", value=(kind, message))


# The float path converts through float16, and copy_ has no float4_e2m1fn_x2 kernel.
_FP4_ERROR = _error(
    NotImplementedError, "copy_ is not implemented for float4_e2m1fn_x2 (the engine raises too)"
)


def vllm_action(
    t: torch.Tensor,
    low: float | None,
    high: float | None,
    name: str,
    generation: int,
    *,
    tpu: bool = False,
    rocm: bool = False,
) -> Action:
    """vLLM's ``initialize_single_dummy_weight(t, low, high, seed, name)`` as an Action.

    generation: 28 (vLLM 0.28, 0.29), 30 (0.30-0.32: ``dummy_weight_value``), 33 (0.33 and
    later: E8M0 and ``*scale*`` uint8 tensors get byte 120, int8/uint8/packed FP4 get
    random bytes, bounds left as None default to +-1.0 for 8-bit floats, +-1e-3 else).
    The branches in vLLM's order: meta, dummy_weight_value, E8M0, 8-bit random,
    other non-floats, bounds, TPU, then the float16-temp path."""
    if t.device.type == "meta":
        return SKIP  # vLLM defers meta tensors (online quantization materializes them)
    if generation >= 30:
        value = getattr(t, "dummy_weight_value", None)
        if value is not None:
            return Action("fill", value=value)
    if generation >= 33:
        if (_E8M0 is not None and t.dtype == _E8M0) or (t.dtype == torch.uint8 and "scale" in name):
            return Action("byte", value=VLLM_E8M0_SCALE_BYTE)
        if t.dtype in (torch.int8, torch.uint8, _FP4) and not tpu:
            return Action("int8" if t.dtype == torch.int8 else "uint8")
    if not torch.is_floating_point(t):
        return Action("zero") if rocm else SKIP
    if low is None or high is None:
        if generation >= 33:
            small = torch.finfo(t.dtype).bits < 16
            r = VLLM_FP8_DEFAULT_RANGE if small else DEFAULT_RANGE
        else:  # the older signature's defaults
            r = DEFAULT_RANGE
        low = -r if low is None else low
        high = r if high is None else high
    if tpu:
        return Action("tpu", low, high)
    if t.dtype == _FP4:
        return _FP4_ERROR
    return Action("uniform", float(low), float(high))


def sglang_action(t: torch.Tensor, low: float, high: float, name: str) -> Action:
    """SGLang 0.5.23's ``initialize_dummy_weights`` loop body for one ``state_dict`` entry:
    floating tensors only; names ending in ``weight_scale_inv`` or ``weight_scale_2`` get
    1.0; the rest the float16-temp path (``.to(float16)``, same bytes) in [low, high)."""
    if not torch.is_floating_point(t):
        return SKIP
    if name.endswith(SGLANG_NEUTRAL_SUFFIXES):
        if t.dtype == _FP4:  # fill_ has no FP4 kernel
            return _error(NotImplementedError, "fill_ is not implemented for float4_e2m1fn_x2")
        return SKIP if t.is_meta else Action("fill", value=1.0)
    if t.is_meta:  # a generator of the meta device
        return _error(RuntimeError, "meta tensor: SGLang cannot make a generator for it")
    if t.dtype == _FP4:
        return _FP4_ERROR
    return Action("uniform", float(low), float(high))


def fusable(t: torch.Tensor) -> bool:
    """Whether ``fp8_dummy.init_`` may fill ``t`` in place of the engine's float path:
    a dtype and device it supports, and a plain tensor or ``nn.Parameter`` (vLLM's
    parameter classes included) whose ``.data`` is a plain tensor. Wrapper subclasses
    (whose ``uniform_``/``copy_`` may update side tensors) stay with the engine."""
    if t.dtype not in _FUSED_DTYPES or t.layout != torch.strided:
        return False
    kind = type(t)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        if not isinstance(t, torch.nn.Parameter) or type(t.data) is not torch.Tensor:
            return False
    device = t.device.type
    if device == "cpu":
        return True
    return device == "cuda" and _cuda_kernels()


@functools.cache
def _cuda_kernels() -> bool:
    if torch.version.hip is not None:  # our kernels are CUDA's; ROCm keeps the engine's path
        return False
    return torch.ops.fp8_dummy.init_.default.has_kernel_for_dispatch_key("CUDA")


class SelfCheck:
    """Proves our fused fill against a reference once per (device, dtype), on a small
    probe, before an engine integration uses it (the rule of the house: whatever replaces
    the reference without the user asking first proves itself on that device and torch).

    ``reference(t, low, high, seed)`` fills ``t`` the engine's way. On a mismatch, or if
    our fill raises where the reference does not, ``passed`` is False from then on for
    that key and one warning says so; callers then use the reference."""

    PROBE_SHAPE = (67, 129)

    def __init__(self, label: str, reference: Callable[[torch.Tensor, float, float, int], Any]):
        self.label = label
        self.reference = reference
        self.results: dict[tuple[torch.device, torch.dtype], bool] = {}

    def passed(self, t: torch.Tensor, low: float, high: float) -> bool:
        key = (t.device, t.dtype)
        if key not in self.results:
            result = self._run(t.device, t.dtype, low, high)
            if result is None:  # the reference refuses these bounds: let it raise its error
                return False
            self.results[key] = result
        return self.results[key]

    def _run(
        self, device: torch.device, dtype: torch.dtype, low: float, high: float
    ) -> bool | None:
        from .ops import init_

        def probe() -> torch.Tensor:
            p = torch.empty(self.PROBE_SHAPE, dtype=dtype, device=device)
            p.view(torch.uint8).fill_(0x55)
            return p

        with torch.no_grad():
            theirs = probe()
            try:
                self.reference(theirs, low, high, 1234)
            except Exception:
                return None
            ours = probe()
            try:
                init_(ours, low, high, 1234)
                same = torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8))
                why = "different bytes"
            except Exception as e:  # noqa: BLE001 (any failure means: use the reference)
                same, why = False, f"{type(e).__name__}: {e}"
        if not same:
            warnings.warn(
                f"fp8_dummy: {self.label}: self-check failed on {device} {dtype} ({why}); "
                "these tensors are filled by the reference path from now on",
                RuntimeWarning,
                stacklevel=3,
            )
        return same


def enabled(variable: str) -> bool:
    """The plugins' switch: off when the variable is 0, false, off or no."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "off", "no")
