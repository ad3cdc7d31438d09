"""DTensor support for ``torch.ops.fp8_dummy`` (FSDP2 ``fully_shard``, tensor parallel).

Importing this module registers a ``__torch_dispatch__`` rule for ``DTensor`` on each public
operator with ``torch.library.register_torch_dispatch`` (public API; DTensor's dispatch,
Python and C++ alike, consults these rules before its sharding propagation, which knows no
strategy for our ops). So ``torch.ops.fp8_dummy.*`` and the Python wrappers accept DTensors.
``import fp8_dummy`` imports it only once ``torch.distributed.tensor`` is imported (that
import takes seconds): see ``fp8_dummy/_lazy_dtensor.py``.

- ``init_stateless_``: each rank fills its local tensor with the values the global tensor
  has there, so ``full_tensor()`` is byte-identical to filling the full tensor at once,
  for any mesh. ``element_offset``/``element_strides`` refer to the global tensor.
- ``init_``/``init_many_``: the bytes of the reference path on that DTensor. On a CPU mesh,
  torch (2.11-2.15) pops the ``generator`` argument of a DTensor random op and, with no RNG
  tracker for CPU meshes, runs ``uniform_`` on each rank's local tensor with the default
  CPU generator: ``seed`` and ``generator`` have no effect. We do the same. Other meshes
  (CUDA: DTensor's ``OffsetBasedRNGTracker``) are refused; see docs/modes.md.
"""

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


def _name(op: str) -> str:
    return f"fp8_dummy.{op}"


def _refuse_partial(t: DTensor, op: str) -> None:
    for p in t.placements:
        if isinstance(p, Partial):
            # The local tensors are summands of the global one: no rank holds its values.
            # torch's own uniform_ refuses it too.
            raise RuntimeError(
                f"{_name(op)}: DTensor placement Partial ({p}) is not supported (the local "
                "tensors are partial sums, not values); redistribute to Shard or Replicate"
            )


def _check_placements(t: DTensor, op: str) -> None:
    _refuse_partial(t, op)
    for p in t.placements:
        strided = _StridedShard is not None and isinstance(p, _StridedShard)
        if not (strided or isinstance(p, (Shard, Replicate))):
            raise RuntimeError(f"{_name(op)}: unknown DTensor placement {p!r}")
    # torch >= 2.10 can record a non-default order for a dimension sharded on several mesh
    # dimensions (without _StridedShard); the runs below assume left to right.
    spec = getattr(t, "_spec", None)
    order = getattr(spec, "shard_order", None)
    default = getattr(type(spec), "compute_default_shard_order", None)
    if order is not None and default is not None and order != default(spec.placements):
        raise RuntimeError(
            f"{_name(op)}: DTensor with a non-default shard order {order} is not supported"
        )


def _chunk(start: int, length: int, parts: int, index: int) -> tuple[int, int]:
    """Part ``index`` of ``[start, start + length)`` split as torch.chunk splits (and DTensor's
    Shard does): chunks of ceil(length / parts), the last ones short or empty. Not
    stateless.split_bounds (torch.tensor_split's rule, for hand-made shards): a DTensor's
    local tensor is what its placement made."""
    size = -(-length // parts)
    lo = min(index * size, length)
    return start + lo, min(lo + size, length) - lo


@functools.lru_cache(maxsize=256)
def _torch_indices(size: int, mesh: object, placements: tuple) -> tuple[int, ...]:
    # torch's own local split of arange(size) (src_data_rank=None: no communication).
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
    """For each dimension, the runs of global indices the local tensor holds; None on a
    rank outside ``t``'s mesh. Shard (torch.chunk-style, nested left to right) and
    Replicate are computed here; a dimension with a ``_StridedShard`` is split by torch's
    own ``distribute_tensor`` (its definition of that placement, version by version)."""
    _check_placements(t, op)
    mesh = t.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:
        return None
    out: list[list[Run]] = []
    for d, size in enumerate(t.shape):
        dim_pl = [
            p if getattr(p, "dim", None) is not None and p.dim % t.ndim == d else None
            for p in t.placements
        ]
        if any(_StridedShard is not None and isinstance(p, _StridedShard) for p in dim_pl):
            mapped = tuple(
                Replicate()
                if p is None
                else (
                    _StridedShard(0, split_factor=p.split_factor)
                    if isinstance(p, _StridedShard)
                    else Shard(0)
                )
                for p in dim_pl
            )
            out.append(_runs_of(_torch_indices(int(size), mesh, mapped)))
            continue
        start, length = 0, int(size)
        for i, p in enumerate(dim_pl):
            if p is not None:
                start, length = _chunk(start, length, mesh.size(i), coord[i])
        out.append([(0, start, length)] if length else [])
    local = t.to_local()
    got = [sum(r[2] for r in runs) for runs in out]
    if got != list(local.shape):
        raise RuntimeError(
            f"{_name(op)}: the local tensor has shape {tuple(local.shape)} but placements "
            f"{t.placements} of global shape {tuple(t.shape)} give {tuple(got)} on this rank"
        )
    return out


def _init_stateless(
    t: DTensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    key_offset: int = 0,
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> None:
    op = torch.ops.fp8_dummy.init_stateless_.default
    kw = dict(key_offset=key_offset, element_offset=element_offset)
    strides = None if element_strides is None else [int(s) for s in element_strides]
    # Every check against the global shape, alike on all ranks, before any rank writes
    # (a meta tensor: no memory, no data).
    whole = torch.empty(t.shape, dtype=t.dtype, device="meta")
    op(whole, low, high, seed, **kw, element_strides=strides)
    strides = strides if strides is not None else row_major_strides(t.shape)
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
        kw["element_offset"] = offset
        op(view, low, high, seed, **kw, element_strides=strides)


def _check_reference(
    t: DTensor,
    low: float,
    high: float,
    op: str,
    index: int = -1,
    contiguous_temp: bool = False,
) -> torch.Tensor | None:
    """The local tensor to fill as torch's reference would, or None off the mesh. (The
    reference runs uniform_ on the local tensor whatever the placements, but Partial.
    TensorRT-LLM's contiguous temp, torch.empty(shape), is a full plain tensor, no shard:
    refused rather than guessed.)"""
    if contiguous_temp:
        raise RuntimeError(f"{_name(op)}: contiguous_temp=True is not supported on DTensors")
    _refuse_partial(t, op)
    local = t.to_local()
    torch.ops.fp8_dummy_internal.check_init_args(local, low, high, _name(op), index)
    if local.device.type not in ("cpu", "meta"):
        raise RuntimeError(
            f"{_name(op)}: DTensors on {local.device.type} meshes are not supported: there "
            "torch's reference path runs DTensor's RNG tracker (per-shard generator offsets, "
            "a broadcast of rank 0's RNG state), which fp8_dummy does not reproduce. Use "
            "fp8_dummy.init_stateless_ (the same full tensor for any mesh), or "
            "initialize_dummy_weights(model, mode='stateless')"
        )
    import torch.distributed.tensor._random as dt_random

    tracker = getattr(dt_random, "_rng_tracker", None)
    if tracker is not None and getattr(tracker, "distribute_region_enabled", True):
        raise RuntimeError(
            f"{_name(op)}: a DTensor RNG tracker is active in this process (a GPU mesh ran a "
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


def _init(
    t: DTensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    contiguous_temp: bool = False,
) -> None:
    _fill_reference(
        _check_reference(t, low, high, "init_", contiguous_temp=contiguous_temp), low, high
    )


def _init_generator(
    t: DTensor,
    low: float,
    high: float,
    *,
    generator: torch.Generator | None = None,
    contiguous_temp: bool = False,
) -> None:
    _fill_reference(
        _check_reference(t, low, high, "init_", contiguous_temp=contiguous_temp), low, high
    )


def _init_many(
    tensors: list[torch.Tensor],
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    contiguous_temp: bool = False,
) -> None:
    # Check everything first; then fill in list order: runs of plain tensors by init_many_
    # (its batching), each DTensor as init_ would, so the result is that of a loop.
    locals_ = []
    for i, t in enumerate(tensors):
        if isinstance(t, DTensor):
            locals_.append(_check_reference(t, low, high, "init_many_", i, contiguous_temp))
        else:
            torch.ops.fp8_dummy_internal.check_init_args(t, low, high, _name("init_many_"), i)
            locals_.append(t)
    run: list[torch.Tensor] = []
    for t, local in zip(tensors, locals_):
        if not isinstance(t, DTensor):
            run.append(local)
            continue
        if run:
            torch.ops.fp8_dummy.init_many_.default(run, low, high, seed)
            run = []
        _fill_reference(local, low, high)
    if run:
        torch.ops.fp8_dummy.init_many_.default(run, low, high, seed)


def _rule(fn):  # the __torch_dispatch__ calling convention -> the schema's
    def rule(cls, func, types, args=(), kwargs=None):
        return fn(*args, **(kwargs or {}))

    return rule


_REGISTERED = False


def register() -> None:
    """Register the DTensor rules (once per process; importing this module does it)."""
    global _REGISTERED
    if _REGISTERED:
        return
    ops = torch.ops.fp8_dummy
    for overload, fn in (
        (ops.init_stateless_.default, _init_stateless),
        (ops.init_.default, _init),
        (ops.init_.generator, _init_generator),
        (ops.init_many_.default, _init_many),
    ):
        torch.library.register_torch_dispatch(overload, DTensor, _rule(fn))
    _REGISTERED = True


register()
