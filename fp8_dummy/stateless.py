"""Device-independent dummy weights (``torch.ops.fp8_dummy.init_stateless_``).

Element ``e`` of a (global) tensor takes the value that
``torch.func._random.uniform_(torch.func._random.key(seed), t, low=low, high=high)`` gives
element ``e`` of a contiguous tensor ``t`` (float16 for FP8 dtypes, then converted as
``copy_`` converts; the tensor's own dtype otherwise). The bytes depend only on
``(seed, key_offset, e)``, the bounds and the dtype: the same on the CPU and on every GPU,
for any thread count, and for any sharding, since a shard can name the global indices of
its elements. The default mode (:func:`fp8_dummy.init_`) instead reproduces torch's
stateful ``uniform_``, whose CUDA bytes depend on the GPU's SM count.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from ._proof import emit_pending
from .ops import as_float, as_int64

__all__ = ["init_shard_", "init_stateless_", "shard_slices", "split_bounds"]


def init_stateless_(
    t: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    key_offset: int = 0,
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> torch.Tensor:
    """Fill ``t`` in place with the stateless values; return ``t``.

    The element of ``t`` at multi-index ``idx`` takes the value of global element
    ``element_offset + sum(idx[d] * element_strides[d])``; by default ``element_strides``
    are the row-major strides of ``t``'s shape (the element's logical index). ``seed`` and
    ``key_offset`` are the key's (seed, offset) pair, read as unsigned 64-bit numbers: any
    value in [-2^63, 2^64), as ``torch.func._random.key`` takes them.
    """
    op = "init_stateless_"
    strides = None
    if element_strides is not None:
        strides = [_as_index(s, "element_strides", op) for s in element_strides]
    torch.ops.fp8_dummy.init_stateless_.default(
        t,
        as_float(low, "low", op),
        as_float(high, "high", op),
        as_int64(seed, "seed", op),
        key_offset=as_int64(key_offset, "key_offset", op),
        element_offset=_as_index(element_offset, "element_offset", op),
        element_strides=strides,
    )
    emit_pending()
    return t


def _as_index(value: object, name: str, op: str) -> int:
    """An element index or stride: an int (a float such as 2.5 is a TypeError, never
    truncated), non-negative, below 2^63 (global indices are int64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"fp8_dummy.{op}: {name} must be ints, not {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 1 << 63:
        raise ValueError(f"fp8_dummy.{op}: {name} must be in [0, 2^63), got {value}")
    return value


def row_major_strides(shape: Sequence[int]) -> list[int]:
    """The element strides of a contiguous tensor of ``shape``: a global tensor's default
    ``element_strides`` (one rule for init_shard_, the DTensor rules and the vLLM layouts)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return strides[::-1]


def init_shard_(
    t: torch.Tensor,
    global_shape: Sequence[int],
    shard_offsets: Sequence[int],
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    key_offset: int = 0,
) -> torch.Tensor:
    """Fill ``t``, the block of a global tensor of shape ``global_shape`` that starts at
    index ``shard_offsets`` (one start per dimension), with the bytes the global tensor
    filled at once by :func:`init_stateless_` has there. Return ``t``."""
    global_shape = [_as_index(s, "global_shape", "init_shard_") for s in global_shape]
    shard_offsets = [_as_index(o, "shard_offsets", "init_shard_") for o in shard_offsets]
    if not (len(global_shape) == len(shard_offsets) == t.dim()):
        raise ValueError(
            f"init_shard_: global_shape {global_shape} and shard_offsets {shard_offsets} need "
            f"one entry per dimension of the shard (shape {tuple(t.shape)})"
        )
    for d, (size, start, n) in enumerate(zip(global_shape, shard_offsets, t.shape)):
        if start < 0 or start + n > size:
            raise ValueError(
                f"init_shard_: dimension {d}: shard [{start}, {start + n}) is outside the "
                f"global size {size}"
            )
    strides = row_major_strides(global_shape)
    offset = sum(o * s for o, s in zip(shard_offsets, strides))
    return init_stateless_(
        t, low, high, seed, key_offset=key_offset, element_offset=offset, element_strides=strides
    )


def split_bounds(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, stop) of part ``rank`` of ``size`` split into ``world_size`` parts, the first
    ``size % world_size`` parts one longer (``torch.tensor_split``'s rule: hand-made shards'
    sizes differ by one at most). A DTensor's ``Shard`` splits as ``torch.chunk`` does
    instead, so fp8_dummy/dtensor.py uses that rule (``_chunk``): each follows the split its
    tensors were actually made with."""
    if not 0 <= rank < world_size:
        raise ValueError(f"split_bounds: rank {rank} not in [0, {world_size})")
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_slices(
    global_shape: Sequence[int], dim: int, rank: int, world_size: int
) -> tuple[list[int], list[int]]:
    """Shape and offsets of rank ``rank``'s shard when ``global_shape`` is split along
    ``dim`` (0: rows, e.g. a column-parallel linear's output features; -1: columns, a
    row-parallel linear's input features). Pass them to :func:`init_shard_`."""
    shape = [_as_index(s, "global_shape", "shard_slices") for s in global_shape]
    dim = dim % len(shape)
    start, stop = split_bounds(shape[dim], rank, world_size)
    offsets = [0] * len(shape)
    offsets[dim] = start
    shape[dim] = stop - start
    return shape, offsets
