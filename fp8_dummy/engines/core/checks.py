"""Which tensors our fill may write, and how: torch's refusals (bounds, overlap, FP4, inference
tensors) raised as the engines would, before anything is written, and which tensors our
fused kernels take (dtype, device, a plain strided tensor, distinct elements)."""

from __future__ import annotations

import functools

import torch

from ..._build import build_info
from ...tensors import E8M0, FLOAT8, FP4, is_plain, refusal, unwritable
from .semantics import Action, Kind, error

__all__ = ["FUSED_DTYPES", "checked", "cuda_kernels", "distinct", "fusable"]

_WIDE = (torch.int8, torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)
FUSED_DTYPES = {*FLOAT8, *(d for d in (E8M0,) if d is not None), *_WIDE}
_CHECK = torch.ops.fp8_dummy_internal.check_init_args


def fusable(t: torch.Tensor) -> bool:
    """A dtype and device of ours, a plain tensor or Parameter (subclasses may update more)."""
    plain = is_plain(t) or (isinstance(t, torch.nn.Parameter) and type(t.data) is torch.Tensor)
    if not plain or t.dtype not in FUSED_DTYPES or t.layout != torch.strided:
        return False
    return (t.device.type == "cpu" or t.device.type == "cuda" and cuda_kernels()) and distinct(t)


def distinct(t: torch.Tensor) -> bool:
    """Dense, or shown distinct by our ops' rule (torch writes "too hard" overlaps too)."""
    return torch._debug_has_internal_overlap(t) == 0 or refusal(_CHECK, t, 0.0, 0.0) is None


@functools.cache
def cuda_kernels() -> bool:
    """Our CUDA kernels are built (a CPU-only build registers kernels that raise); not ROCm."""
    return torch.version.hip is None and bool(build_info()["cuda"])


@functools.lru_cache(maxsize=64)
def _bounds_refused(dtype: torch.dtype, low: float, high: float) -> str | None:
    return refusal(_CHECK, torch.empty(0, dtype=dtype, device="meta"), low, high, "uniform_")


def checked(t: torch.Tensor, action: Action) -> Action:
    """``action``, or the error torch would raise for it on ``t`` (bounds, overlap, FP4, an
    inference tensor outside inference mode), with what to do about it."""
    kind = action.kind
    if t.is_meta or kind in (Kind.SKIP, Kind.ENGINE, Kind.ERROR):
        return action
    if (why := unwritable(t, independent=False)) is not None:
        return error(RuntimeError, why)
    if kind not in (Kind.UNIFORM, Kind.RANDOM, Kind.FILL):
        return action
    if t.dtype == FP4 and kind is not Kind.RANDOM:
        op = "copy_" if kind is Kind.UNIFORM else "fill_"
        return error(NotImplementedError, f"{op} is not implemented for float4_e2m1fn_x2")
    refused = None
    if kind is Kind.UNIFORM and t.dtype in FUSED_DTYPES:
        refused = _bounds_refused(t.dtype, action.low, action.high)
    if kind is not Kind.FILL and is_plain(t) and torch._debug_has_internal_overlap(t) == 1:
        refused = "more than one element refers to a single memory location"
    return action if refused is None else error(RuntimeError, refused)
