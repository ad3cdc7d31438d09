"""Device-independent dummy weights: ``init_stateless_`` (a global tensor's element ``e`` set by
``(seed, key_offset, e)`` alone) and its shards (docs/modes.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import torch

from .ops import as_index, as_int64, init_stateless_

__all__ = ["init_shard_", "init_stateless_", "shard_slices", "split_bounds", "tensor_seed"]
__all__ += ["tensor_seeds"]


def row_major_strides(shape: Sequence[int]) -> list[int]:
    """A contiguous ``shape``'s element strides: a global tensor's default ``element_strides``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return strides[::-1]


def init_shard_(
    t: torch.Tensor, global_shape: Sequence[int], shard_offsets: Sequence[int],
    low: float = -1e-3, high: float = 1e-3, seed: int = 1234, *, key_offset: int = 0,
) -> torch.Tensor:  # fmt: skip
    """Fill ``t``, the block at ``shard_offsets`` of a global tensor of ``global_shape``, with
    the bytes :func:`init_stateless_` gives the global tensor there. Return ``t``."""
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
    """[start, stop) of part ``rank`` of ``size`` in ``world_size`` parts, as ``torch.tensor_split``
    splits (hand-made shards; a DTensor's ``Shard`` splits as ``torch.chunk``: dtensor.py)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"split_bounds: rank {rank} not in [0, {world_size})")
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_slices(
    global_shape: Sequence[int], dim: int, rank: int, world_size: int
) -> tuple[list[int], list[int]]:
    """Shape and offsets of rank ``rank``'s shard of ``global_shape`` split along ``dim``
    (0: a column-parallel linear's rows; -1: a row-parallel one's), for :func:`init_shard_`."""
    shape = [as_index(s, "global_shape", "shard_slices") for s in global_shape]
    dim = dim % len(shape)
    start, stop = split_bounds(shape[dim], rank, world_size)
    offsets = [0] * len(shape)
    offsets[dim] = start
    shape[dim] = stop - start
    return shape, offsets


def tensor_seed(seed: int, name: str) -> int:
    """The stateless key of the tensor ``name`` (full): BLAKE2b-64 of ``f"{seed}:{name}"``, LE,
    the seed read as torch's ``manual_seed`` reads it: an int in [-2^63, 2^64) taken modulo
    2^64 (-1 and 2^64 - 1 are one seed); anything else is refused (TypeError, ValueError)."""
    seed = as_int64(seed, "seed", "tensor_seed") % (1 << 64)
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def tensor_seeds(seed: int, names: Iterable[str]) -> dict[str, int]:
    """Name -> :func:`tensor_seed` of each of ``names``, the seed read once."""
    seed = as_int64(seed, "seed", "tensor_seed") % (1 << 64)
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    return {n: from_bytes(blake2b(f"{seed}:{n}".encode(), digest_size=8).digest(), "little")
            for n in names}  # fmt: skip
