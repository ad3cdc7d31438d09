"""The layouts of the view ops a checkpoint conversion or a loader takes of a stand-in
(squeeze, split, unbind, select, slice, transpose), computed from the block's own
(shape, strides, offset) as torch's view functions compute them: no meta tensor, no meta op
and no alias check per view (a conversion of a per-expert MoE takes tens of thousands). An op
or an argument outside what is written here (a negative step, an index out of range, a 0-d
block, a size-0 split) is :data:`GENERAL`: the stand-in's general path (the op run on its
meta proxy) answers it, errors included."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["GENERAL", "Layout", "VIEWS"]

Layout = tuple[tuple[int, ...], tuple[int, ...], int]  # shape, strides, storage offset
GENERAL = None  # "not answered here": the general path runs the op on the meta proxy
_aten = torch.ops.aten
_INT64_MAX = (1 << 63) - 1


def _dim(d, ndim: int) -> int | None:
    """``d`` wrapped as torch wraps a dimension; None where it is out of range (or no int)."""
    if type(d) is not int or ndim == 0:
        return None
    d = d + ndim if d < 0 else d
    return d if 0 <= d < ndim else None


def _squeeze(lay: Layout, dims=None) -> Layout | None:
    shape, strides, offset = lay
    if dims is None:
        keep = [i for i, s in enumerate(shape) if s != 1]
    else:
        wrapped = {_dim(d, len(shape)) for d in dims}
        if None in wrapped or len(wrapped) != len(dims):  # torch refuses a repeated dim
            return GENERAL
        keep = [i for i, s in enumerate(shape) if s != 1 or i not in wrapped]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep), offset


def _select(lay: Layout, dim, index) -> Layout | None:
    shape, strides, offset = lay
    d = _dim(dim, len(shape))
    if d is None or type(index) is not int or not -shape[d] <= index < shape[d]:
        return GENERAL
    index = index + shape[d] if index < 0 else index
    return shape[:d] + shape[d + 1 :], strides[:d] + strides[d + 1 :], offset + index * strides[d]


def _narrowed(lay: Layout, d: int, start: int, length: int) -> Layout:
    shape, strides, offset = lay
    return shape[:d] + (length,) + shape[d + 1 :], strides, offset + start * strides[d]


def _split(lay: Layout, size, dim=0) -> list | None:
    d = _dim(dim, len(lay[0]))
    if d is None or type(size) is not int or size <= 0 or lay[0][d] == 0:
        return GENERAL
    n = lay[0][d]
    return [_narrowed(lay, d, s, min(size, n - s)) for s in range(0, n, size)]


def _unbind(lay: Layout, dim=0) -> list | None:
    d = _dim(dim, len(lay[0]))
    if d is None:
        return GENERAL
    return [_select(lay, d, i) for i in range(lay[0][d])]


def _slice(lay: Layout, dim=0, start=None, end=None, step=1) -> Layout | None:
    shape, strides, offset = lay
    d = _dim(dim, len(shape))
    start = 0 if start is None else start
    end = _INT64_MAX if end is None else end
    if d is None or type(start) is not int or type(end) is not int or type(step) is not int:
        return GENERAL
    if step <= 0:
        return GENERAL
    n = shape[d]
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    start = min(max(start, 0), n)
    end = min(max(end, start), n)
    length = (end - start + step - 1) // step
    stride = strides[:d] + (strides[d] * step,) + strides[d + 1 :]
    return shape[:d] + (length,) + shape[d + 1 :], stride, offset + start * strides[d]


def _transpose(lay: Layout, dim0, dim1) -> Layout | None:
    shape, strides, offset = lay
    a, b = _dim(dim0, len(shape)), _dim(dim1, len(shape))
    if a is None or b is None:
        return GENERAL
    order = list(range(len(shape)))
    order[a], order[b] = b, a
    return tuple(shape[i] for i in order), tuple(strides[i] for i in order), offset


def _t(lay: Layout) -> Layout | None:
    return _transpose(lay, 0, 1) if len(lay[0]) == 2 else GENERAL


# op -> (layout, the op's arguments after the tensor) -> the view's layout, a list of them, or
# GENERAL
VIEWS: dict[object, Callable] = {
    _aten.squeeze.default: _squeeze,
    _aten.squeeze.dim: lambda lay, dim: _squeeze(lay, (dim,)),
    _aten.squeeze.dims: _squeeze,
    _aten.select.int: _select,
    _aten.split.Tensor: _split,
    _aten.unbind.int: _unbind,
    _aten.slice.Tensor: _slice,
    _aten.transpose.int: _transpose,
    _aten.t.default: _t,
}
