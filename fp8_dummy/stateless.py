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

import hashlib
from collections.abc import Sequence

import torch

from .ops import as_index, init_stateless_

__all__ = ["init_shard_", "init_stateless_", "shard_slices", "split_bounds", "tensor_seed"]


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
    global_shape = [as_index(s, "global_shape", "init_shard_") for s in global_shape]
    shard_offsets = [as_index(o, "shard_offsets", "init_shard_") for o in shard_offsets]
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
    shape = [as_index(s, "global_shape", "shard_slices") for s in global_shape]
    dim = dim % len(shape)
    start, stop = split_bounds(shape[dim], rank, world_size)
    offsets = [0] * len(shape)
    offsets[dim] = start
    shape[dim] = stop - start
    return shape, offsets


def tensor_seed(seed: int, name: str) -> int:
    """The stateless key of the tensor ``name`` (full): BLAKE2b-64 of ``f"{seed}:{name}"``, LE."""
    digest = hashlib.blake2b(f"{int(seed)}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
