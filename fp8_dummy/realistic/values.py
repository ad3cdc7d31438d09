"""The one place the realistic model's values become bytes: a tensor's :class:`~.rules.Spec`
and its stateless key written into a tensor, or into a block of it (``init_stateless_`` with
the block's element offset and strides), then the routing's overrides of the logical tensor
where the block holds them. A centered weight's second half along its inputs holds its first
half's values negated (its rows sum to zero exactly, in every format). The in-place fill, the
logical model's stand-ins in the engines' loaders and the export's buffers all write through
:func:`fill_`; the small tensors an engine's loader is handed whole are made by
:func:`made_whole`, the same bytes with the plain draws and constants written by the operator
itself."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from ..ops import as_float, as_int64
from ..stateless import init_stateless_, row_major_strides
from ..tensors import BYTE_VIEWED, FLOAT8, PACKED_FP4
from .routing import apply_overrides
from .rules import Spec

__all__ = ["fill_", "made_whole"]

_DRAWN = ("uniform", "codes")  # the kinds a single draw writes whole (no post-processing)


@torch.no_grad()
def fill_(
    t: torch.Tensor, spec: Spec, key: int, *, element_offset: int = 0,
    element_strides: Sequence[int] | None = None, overrides: Sequence | None = None,
    logical_shape: Sequence[int] | None = None,
) -> torch.Tensor:  # fmt: skip
    """``spec`` written into ``t`` with the stateless key ``key``: the logical tensor, or its
    block at ``element_offset``/``element_strides`` (as :func:`init_stateless_` takes them);
    then the routing's ``overrides`` of the logical tensor (of ``logical_shape``, default
    ``t``'s) where the block holds them (:mod:`.routing`)."""
    raw = t.data.view(torch.uint8) if t.dtype in BYTE_VIEWED else t.data
    shape = t.shape if logical_shape is None else logical_shape
    if spec.kind == "const":
        raw.fill_(spec.low)
    elif spec.kind != "skip":
        low, high = (0, 256) if spec.kind == "e8m0" else (spec.low, spec.high)
        if spec.kind != "uniform":
            low, high = int(low), int(high)
        if spec.center:
            strides = row_major_strides(shape) if element_strides is None else element_strides
            _mirrored(raw, t.dtype, (low, high, key), shape, spec.center, element_offset, strides)
        else:
            where = dict(element_offset=element_offset, element_strides=element_strides)
            init_stateless_(raw, low, high, key, **where)
        if spec.kind == "e8m0":
            raw.copy_(raw >= int(spec.high)).add_(int(spec.low))
    if overrides:
        apply_overrides(t.data, shape, overrides, element_offset, element_strides)
    return t


@torch.no_grad()
def made_whole(entries: Iterable[tuple]) -> list[torch.Tensor]:
    """Each (shape, dtype, spec, key, overrides) of ``entries`` made whole in a tensor of its
    own, the bytes :func:`fill_` writes into a new tensor (zeros for a skip): a plain draw (no
    center, no overrides) by the operator itself and a constant by ``fill_``, the draw's
    arguments read as
    :func:`init_stateless_` reads them, in one ``no_grad`` (a small tensor's bytes cost less
    than a call of the checked writer); any other through :func:`fill_`."""
    op = torch.ops.fp8_dummy.init_stateless_.default
    out = []
    for shape, dtype, spec, key, overrides in entries:
        if spec.kind in _DRAWN and not spec.center and not overrides:
            low, high = spec.low, spec.high
            if spec.kind != "uniform":
                low, high = int(low), int(high)
            t = torch.empty(shape, dtype=dtype)
            raw = t.view(torch.uint8) if dtype in BYTE_VIEWED else t
            op(raw, as_float(low, "low"), as_float(high, "high"), as_int64(key, "seed"))
        elif spec.kind == "const" and not overrides:
            t = torch.empty(shape, dtype=dtype)
            (t.view(torch.uint8) if dtype in BYTE_VIEWED else t).fill_(spec.low)
        else:
            t = (torch.zeros if spec.kind == "skip" else torch.empty)(shape, dtype=dtype)
            fill_(t, spec, key, overrides=overrides)
        out.append(t)
    return out


def _mirrored(raw, dtype, draw, shape, center, offset, strides) -> None:
    """``draw`` (low, high, key) written into ``raw``, the block at ``offset``/``strides`` of the
    logical tensor of ``shape``, with the logical tensor's indices ``[n, 2n)`` along ``center``
    (of size 2n or 2n + 1) taking the values of ``[0, n)`` negated, and an odd last index 0."""
    dim = len(shape) + center
    logical = row_major_strides(shape)
    box = _box(tuple(raw.shape), shape, logical, offset, strides, dim)
    if box is None:  # no box of the logical tensor: the whole one made, the block's taken
        whole = torch.empty(tuple(shape), dtype=raw.dtype)
        _mirrored(whole, dtype, draw, shape, center, 0, logical)
        index = torch.full((), offset, dtype=torch.int64)
        for d, (n, step) in enumerate(zip(raw.shape, strides)):
            index = index + (torch.arange(n) * step).reshape([-1] + [1] * (raw.dim() - d - 1))
        raw.copy_(whole.reshape(-1)[index])
        return
    along, origin, step = box  # raw's dimension along ``center`` (None: one column throughout)
    size = raw.shape[along] if along is not None else 1
    half = shape[dim] // 2

    def first(index: int) -> int:  # the block's first position at or past the logical index
        return min(max(-(-(index - origin) // step), 0), size)

    a, b = first(half), first(2 * half)
    parts = ((0, a, 0), (a, b, half * logical[dim]), (b, size, None))
    for lo, hi, shift in parts:
        if hi <= lo:
            continue
        view = raw.narrow(along, lo, hi - lo) if along is not None else raw
        if shift is None:  # an odd middle index
            view.zero_()
            continue
        start = offset + (lo * strides[along] if along is not None else 0) - shift
        init_stateless_(view, *draw, element_offset=start, element_strides=strides)
        if shift and (raw.dtype == torch.uint8 or dtype in FLOAT8):  # the sign bits: FP8's,
            bits = view.view(torch.uint8)  # FP4's two a byte
            bits.bitwise_xor_(0x88 if dtype in PACKED_FP4 else 0x80)
            if "fnuz" in str(dtype):  # no -0 there (0x80 is its NaN): 0 stays 0
                bits.masked_fill_(bits == 0x80, 0)
        elif shift:
            view.neg_()


def _box(sizes, shape, logical, offset, strides, dim):
    """(the block's dimension moving along the logical ``dim`` or None, the logical index along
    ``dim`` where the block starts, its step there) where the block is a strided box of the
    logical tensor (each of its dimensions steps along one logical dimension, within it: a
    narrow, select, transpose or chunk of it); else None."""
    origin, rest = [], offset
    for stride in logical:
        origin.append(rest // stride)
        rest %= stride
    end, along, step = list(origin), None, 1
    for d, (n, s) in enumerate(zip(sizes, strides)):
        if n == 1 or s == 0:
            continue
        j = next((j for j in range(len(shape)) if shape[j] > 1 and s % logical[j] == 0), None)
        if j is None:
            return None
        end[j] += (n - 1) * (s // logical[j])
        if j == dim:
            if along is not None:
                return None
            along, step = d, s // logical[j]
    if any(e >= n for e, n in zip(end, shape)):
        return None
    return along, origin[dim], step
