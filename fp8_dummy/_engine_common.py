"""What the serving-engine drop-ins (``vllm.py``, ``sglang.py``, ``trtllm.py``, ``model.py``)
share: the
per-tensor rules of each engine's dummy loader as plain data (:class:`Action`), which
tensors our fused operator may fill, the one helper for random integer bytes, the probe
tensors of the engines' proofs (fp8_dummy/_proof.py), and the environment switch of the
plugins.

Nothing here imports an engine: the rules are written down from the engines' sources
(vLLM 0.28-0.33, SGLang 0.5.23, TensorRT-LLM's public source: docs/trtllm.md) and tested
against them byte for byte (``tests/test_engines_*.py``; TensorRT-LLM against an oracle
written from that page, no wheel being installable).
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from . import ops

__all__ = [
    "warn_fallback",
    "Action",
    "fusable",
    "probe_tensor",
    "random_bytes_",
    "sglang_action",
    "trtllm_action",
    "vllm_action",
]

# vLLM >= 0.33 fills E8M0 scales with this byte (2**-7) and draws 8-bit floats in +-1.0
# by default (+-1e-3 would round almost every FP8 E4M3 value to zero).
VLLM_E8M0_SCALE_BYTE = 120
VLLM_FP8_DEFAULT_RANGE = 1.0
DEFAULT_RANGE = 1e-3
SGLANG_NEUTRAL_SUFFIXES = ("weight_scale_inv", "weight_scale_2")
# TensorRT-LLM draws 1-byte tensors in bounds of their dtype, whatever low/high say:
# float8_e4m3fn and int8 in +-3.0, uint8 (its packed-FP4 dtype and FP4 scales) in [0, 64).
TRTLLM_BYTE_BOUNDS = {torch.int8: (-3.0, 3.0), torch.uint8: (0.0, 64.0)}
if hasattr(torch, "float8_e4m3fn"):
    TRTLLM_BYTE_BOUNDS[torch.float8_e4m3fn] = (-3.0, 3.0)

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_FP8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
_FP8_NAMES += ("float8_e8m0fnu",)
_FUSED_DTYPES = {getattr(torch, n) for n in _FP8_NAMES if hasattr(torch, n)} | {
    torch.int8,  # through the float16 temp (TensorRT-LLM): truncation toward zero
    torch.uint8,
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
    if type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and distinct(t):
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
    ``[low, high)``, a fresh generator seeded per tensor; ``contiguous``: the temp is
    ``torch.empty(shape)``, row-major, as TensorRT-LLM's); ``reference`` (the float path as
    ``uniform``, but through the reference path, never fused: our fill was refused for it);
    ``tpu`` (vLLM's CPU-drawn TPU path: left to vLLM); ``call`` (``value()`` does it:
    delegation to the engine); ``error`` (the engine raises: ``value`` is (exception type,
    message)).
    """

    kind: str
    low: float = 0.0
    high: float = 0.0
    value: Any = None
    contiguous: bool = False


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


def trtllm_action(t: torch.Tensor, low: float, high: float) -> Action:
    """TensorRT-LLM's ``initialize_dummy_weights(model, low, high, seed)`` loop body for one
    ``state_dict`` value (docs/trtllm.md): a generator of the tensor's device first (none
    for meta: RuntimeError); 1-byte dtypes through a contiguous float16 temp in their own
    bounds (the others raise NotImplementedError); floats of 2+ bytes ``uniform_(low,
    high)``; other dtypes untouched. Refusals that TensorRT-LLM only meets when it writes
    (bad bounds, overlapping elements) are errors here too, of the same type."""
    if t.device.type == "meta":
        return _error(RuntimeError, "meta tensor: TensorRT-LLM cannot make a generator for it")
    if t.element_size() < 2:
        if t.dtype not in TRTLLM_BYTE_BOUNDS:
            return _error(NotImplementedError, f"Unknown quantized type: {t.dtype}.")
        action = Action("uniform", *TRTLLM_BYTE_BOUNDS[t.dtype], contiguous=True)
    elif torch.is_floating_point(t):
        action = Action("uniform", float(low), float(high), contiguous=True)
        refused = _bounds_refused(t.dtype, action.low, action.high)
        if refused is not None:
            return _error(RuntimeError, refused)
    else:
        return SKIP
    if type(t) in (torch.Tensor, torch.nn.Parameter) and torch._debug_has_internal_overlap(t) == 1:
        return _error(RuntimeError, "more than one element refers to a single memory location")
    return action


@functools.lru_cache(maxsize=64)
def _bounds_refused(dtype: torch.dtype, low: float, high: float) -> str | None:
    """uniform_'s bound checks for ``dtype`` (as torch.ops.fp8_dummy.init_ runs them): None,
    or the error."""
    try:
        meta = torch.empty(0, dtype=dtype, device="meta")
        torch.ops.fp8_dummy_internal.check_init_args(meta, low, high)
    except RuntimeError as e:
        return str(e)
    return None


def fusable(t: torch.Tensor) -> bool:
    """Whether ``fp8_dummy.init_`` may fill ``t`` in place of the engine's float path:
    a dtype and device it supports, a plain tensor or ``nn.Parameter`` (vLLM's
    parameter classes included) whose ``.data`` is a plain tensor, and elements shown
    distinct. Wrapper subclasses (whose ``uniform_``/``copy_`` may update side tensors) and
    layouts whose elements may share memory stay with the engine."""
    if t.dtype not in _FUSED_DTYPES or t.layout != torch.strided:
        return False
    kind = type(t)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        if not isinstance(t, torch.nn.Parameter) or type(t.data) is not torch.Tensor:
            return False
    device = t.device.type
    return (device == "cpu" or device == "cuda" and _cuda_kernels()) and distinct(t)


def distinct(t: torch.Tensor) -> bool:
    """Whether our operators take ``t``'s layout: the elements shown not to share memory
    by their one rule (check_distinct, csrc/common/reference.cpp). Torch writes the others
    (its "too hard" overlaps), so the engine's own path keeps them."""
    if torch._debug_has_internal_overlap(t) == 0:  # dense: no check to call
        return True
    try:
        torch.ops.fp8_dummy_internal.check_init_args(t, 0.0, 0.0)
    except RuntimeError:
        return False
    return True


@functools.cache
def _cuda_kernels() -> bool:
    if torch.version.hip is not None:  # our kernels are CUDA's; ROCm keeps the engine's path
        return False
    # Not "is a CUDA kernel registered": a CPU-only build registers CUDA kernels that raise.
    from ._build import build_info

    return bool(build_info()["cuda"])


def probe_tensor(t: torch.Tensor, strided: bool = False) -> torch.Tensor:
    """A small tensor like ``t`` for an engine probe (fp8_dummy/_proof.py): its dtype, device
    and number of dimensions (0, 1 or 2+), 8,643 elements (67 x 129) unless 0-dim, every
    byte 0x55. ``strided``: not row-major contiguous (2+ dimensions: transposed; 1: every
    other element), for engines whose bytes depend on that (TensorRT-LLM's row-major temp)."""
    shape = {0: (), 1: (67 * 129,)}.get(t.dim(), (67, 129) + (1,) * (t.dim() - 2))
    if strided and t.dim() >= 2:
        p = torch.empty((129, 67) + shape[2:], dtype=t.dtype, device=t.device).transpose(0, 1)
    elif strided and t.dim() == 1:
        p = torch.empty((2 * shape[0],), dtype=t.dtype, device=t.device)[::2]
    else:
        p = torch.empty(shape, dtype=t.dtype, device=t.device)
    raw = torch.empty(0, dtype=torch.uint8, device=t.device)
    raw.set_(p.untyped_storage()).fill_(0x55)
    return p


def enabled(variable: str) -> bool:
    """The plugins' switch: off when the variable is 0, false, off or no."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "off", "no")


_warned: set[tuple[str, str]] = set()


def warn_fallback(integration: str, engine: str, what: str, e: Exception) -> None:
    """The one warning of an integration's step that failed (once per step and process):
    what failed, with the exception, and that the engine's own dummy weights are used.
    ``integration``: "the vLLM plugin", ...; ``engine``: "vLLM", ..."""
    if (integration, what) in _warned:
        return
    _warned.add((integration, what))
    warnings.warn(
        f"fp8_dummy: {integration}'s {what} failed ({type(e).__name__}: {e}); "
        f"{engine}'s own dummy weights are used",
        RuntimeWarning,
        stacklevel=3,
    )
