"""DTensor rules for ``torch.ops.fp8_dummy`` (FSDP2, tensor parallel), registered on import with
``torch.library.register_torch_dispatch``: ``init_stateless_`` fills each rank's part of the
global tensor, ``init_``/``init_many_`` do what torch's reference does on a CPU DTensor
(docs/modes.md, "DTensors")."""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

try:  # private; FSDP2 + tensor parallel on one tensor dim produce it
    from torch.distributed.tensor.placement_types import _StridedShard
except ImportError:  # pragma: no cover (a torch without it cannot produce it either)
    _StridedShard = None

from .stateless import row_major_strides

__all__ = ["local_runs"]

# A run: local elements [local_start, local_start + length) of one dimension hold global
# indices [global_start, global_start + length).
Run = tuple[int, int, int]


def _refuse_partial(t: DTensor, op: str) -> None:
    for p in t.placements:
        if isinstance(p, Partial):  # no rank holds values; torch's own uniform_ refuses it too
            raise RuntimeError(
                f"fp8_dummy.{op}: DTensor placement Partial ({p}) is not supported (the local "
                "tensors are partial sums, not values); redistribute to Shard or Replicate"
            )


def _strided(p: object) -> bool:
    return _StridedShard is not None and isinstance(p, _StridedShard)


def _check_placements(t: DTensor, op: str) -> None:
    _refuse_partial(t, op)
    for p in t.placements:
        if not (_strided(p) or isinstance(p, (Shard, Replicate))):
            raise RuntimeError(f"fp8_dummy.{op}: unknown DTensor placement {p!r}")
    # torch >= 2.10 can record a non-default order for a dimension sharded on several mesh
    # dimensions (without _StridedShard); the runs below assume left to right.
    spec = getattr(t, "_spec", None)
    order = getattr(spec, "shard_order", None)
    default = getattr(type(spec), "compute_default_shard_order", None)
    if order is not None and default is not None and order != default(spec.placements):
        raise RuntimeError(f"fp8_dummy.{op}: DTensor with a non-default shard order {order}")


@functools.lru_cache(maxsize=256)
def _torch_indices(size: int, mesh: object, placements: tuple) -> tuple[int, ...]:
    # torch's own local split of arange(size) (src_data_rank=None: no communication): its
    # definition of each placement, version by version (hand-made shards: stateless.py).
    dt = distribute_tensor(torch.arange(size), mesh, list(placements), src_data_rank=None)
    return tuple(dt.to_local().cpu().tolist())


def _runs_of(indices: Sequence[int]) -> list[Run]:
    runs: list[Run] = []
    for i, g in enumerate(indices):
        if runs and runs[-1][1] + runs[-1][2] == g:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, g, 1))
    return runs


def local_runs(t: DTensor, op: str = "init_stateless_") -> list[list[Run]] | None:
    """For each dimension, the runs of global indices the local tensor holds, as torch's own
    ``distribute_tensor`` splits it; None on a rank outside ``t``'s mesh."""
    _check_placements(t, op)
    mesh = t.device_mesh
    if mesh.get_coordinate() is None:
        return None
    out: list[list[Run]] = []
    for d, size in enumerate(t.shape):
        dim_pl = [p if getattr(p, "dim", None) in (d, d - t.ndim) else None for p in t.placements]
        if all(p is None for p in dim_pl):
            out.append([(0, 0, int(size))] if size else [])
            continue
        mapped = tuple(
            Replicate() if p is None else _StridedShard(0, split_factor=p.split_factor)
            if _strided(p) else Shard(0)
            for p in dim_pl
        )  # fmt: skip
        out.append(_runs_of(_torch_indices(int(size), mesh, mapped)))
    local = t.to_local()
    got = [sum(r[2] for r in runs) for runs in out]
    if got != list(local.shape):
        raise RuntimeError(
            f"fp8_dummy.{op}: the local tensor has shape {tuple(local.shape)} but placements "
            f"{t.placements} of global shape {tuple(t.shape)} give {tuple(got)} on this rank"
        )
    return out


def _init_stateless(
    t, low=-1e-3, high=1e-3, seed=1234, *, key_offset=0, element_offset=0, element_strides=None
) -> None:
    op = torch.ops.fp8_dummy.init_stateless_.default
    strides = None if element_strides is None else [int(s) for s in element_strides]
    kw = dict(key_offset=key_offset, element_strides=strides)
    # Every check against the global shape (a meta tensor), alike on all ranks, before any writes.
    whole = torch.empty(t.shape, dtype=t.dtype, device="meta")
    op(whole, low, high, seed, **kw, element_offset=element_offset)
    kw["element_strides"] = strides = strides or row_major_strides(t.shape)
    runs = local_runs(t)
    if runs is None:
        return
    local = t.to_local()  # its layout too, before a piece is written
    torch.ops.fp8_dummy_internal.check_stateless_args(local, low, high, 0, None)
    for combo in itertools.product(*runs):  # one piece per combination of runs
        view, offset = local, element_offset
        for d, (lstart, gstart, n) in enumerate(combo):
            view = view.narrow(d, lstart, n)
            offset += gstart * strides[d]
        op(view, low, high, seed, **kw, element_offset=offset)


def _check_reference(t, low, high, op, index=-1, contiguous_temp=False) -> torch.Tensor | None:
    """The local tensor torch's reference fills (any placement but Partial); None off the mesh."""
    if contiguous_temp:  # TensorRT-LLM's temp is a full plain tensor, no shard: not guessed
        raise RuntimeError(f"fp8_dummy.{op}: contiguous_temp=True is not supported on DTensors")
    _refuse_partial(t, op)
    local = t.to_local()
    torch.ops.fp8_dummy_internal.check_init_args(local, low, high, f"fp8_dummy.{op}", index)
    if local.device.type not in ("cpu", "meta"):
        raise RuntimeError(
            f"fp8_dummy.{op}: DTensors on {local.device.type} meshes are not supported: there "
            "torch's reference path runs DTensor's RNG tracker (per-shard generator offsets, "
            "a broadcast of rank 0's RNG state), which fp8_dummy does not reproduce. Use "
            "fp8_dummy.init_stateless_ (the same full tensor for any mesh), or "
            "initialize_dummy_weights(model, mode='stateless')"
        )
    import torch.distributed.tensor._random as dt_random

    tracker = getattr(dt_random, "_rng_tracker", None)
    if tracker is not None and getattr(tracker, "distribute_region_enabled", True):
        raise RuntimeError(
            f"fp8_dummy.{op}: a DTensor RNG tracker is active in this process (a GPU mesh ran a "
            "random op), so torch's reference path on a CPU DTensor takes the tracker's path, "
            "which fp8_dummy does not reproduce. Use fp8_dummy.init_stateless_"
        )
    return local if t.device_mesh.get_coordinate() is not None else None


def _fill_reference(local: torch.Tensor | None, low: float, high: float) -> None:
    if local is None:
        return
    warnings.warn(
        "fp8_dummy.init_ on a CPU DTensor reproduces torch's reference path there, which "
        "ignores seed and generator: each rank fills its local tensor from the default CPU "
        "generator. fp8_dummy.init_stateless_ gives values set by the seed, for any mesh.",
        stacklevel=2,
    )
    torch.ops.fp8_dummy.init_.generator(local, low, high, generator=None)


def _init(t, low=-1e-3, high=1e-3, seed=None, *, generator=None, contiguous_temp=False) -> None:
    """Both overloads of ``init_``: seed and generator are ignored, as by torch's reference."""
    _fill_reference(_check_reference(t, low, high, "init_", -1, contiguous_temp), low, high)


def _init_many(tensors, low=-1e-3, high=1e-3, seed=1234, *, contiguous_temp=False) -> None:
    # Check everything first; then fill in list order: runs of plain tensors by init_many_
    # (its batching), each DTensor as init_ would, so the result is that of a loop.
    locals_ = []
    for i, t in enumerate(tensors):
        if isinstance(t, DTensor):
            locals_.append(_check_reference(t, low, high, "init_many_", i, contiguous_temp))
        else:
            torch.ops.fp8_dummy_internal.check_init_args(t, low, high, "fp8_dummy.init_many_", i)
            locals_.append(t)
    runs = itertools.groupby(zip(tensors, locals_), key=lambda pair: isinstance(pair[0], DTensor))
    for is_dtensor, run in runs:
        run_locals = [local for _, local in run]
        if not is_dtensor:  # plain tensors in one call (its batching)
            torch.ops.fp8_dummy.init_many_.default(run_locals, low, high, seed)
            continue
        for local in run_locals:
            _fill_reference(local, low, high)


def _rule(fn):  # the __torch_dispatch__ calling convention -> the schema's
    return lambda cls, func, types, args=(), kwargs=None: fn(*args, **(kwargs or {}))


_ops = torch.ops.fp8_dummy
for _op, _fn in ((_ops.init_stateless_.default, _init_stateless), (_ops.init_.default, _init),
                 (_ops.init_.generator, _init), (_ops.init_many_.default, _init_many)):  # fmt: skip
    torch.library.register_torch_dispatch(_op, DTensor, _rule(_fn))
_REGISTERED = True  # once per process: on import
