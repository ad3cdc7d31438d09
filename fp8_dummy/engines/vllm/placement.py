"""Where each rank's vLLM parameter sits in the logical (TP=1, EP=1, unpadded) tensor: one rule
per layer class, the affine map of vLLM 0.33's own ``weight_loader``, registered into
:data:`RULES` (docs/engines.md, "The load format fp8_dummy_invariant")."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["RULES", "Piece", "Placement", "UncoveredParameterError", "placement", "register"]


class UncoveredParameterError(NotImplementedError):
    """A sharded parameter, or one with a custom ``weight_loader``, that no rule covers."""


@dataclass(frozen=True)
class Piece:
    """``local[piece.local]`` holds, at index ``idx``, global element ``offset + step * idx``."""

    local: tuple[slice, ...]
    offset: tuple[int, ...]
    step: tuple[int, ...] | None = None  # default 1


@dataclass(frozen=True)
class Placement:
    global_shape: tuple[int, ...]
    pieces: tuple[Piece, ...]  # what no piece covers (padding) no checkpoint element reaches


# (module, layer class) -> (the methods the loading uses, the first two being the parameters'
# loaders; rule(layer, name, tensor, class, loader function)). A rule applies only where the
# loader is the class's own and the layer keeps those methods. First match wins: subclasses
# before their bases.
RULES: dict[tuple[str, str], tuple[tuple[str, ...], Callable[..., Placement]]] = {}


def register(
    module: str, cls: str, methods: tuple[str, ...], rule: Callable[..., Placement]
) -> None:
    RULES[(module, cls)] = (methods, rule)


def whole(t: torch.Tensor) -> Placement:
    """Replicated: the local tensor is the global one."""
    return Placement(tuple(t.shape), (Piece(tuple(slice(None) for _ in t.shape), (0,) * t.dim()),))


def along(t: torch.Tensor, dim: int, runs: list[tuple[int, int, int]], size: int) -> Placement:
    """Runs (local start, global start, length) along ``dim`` of a global size; other dims whole."""
    shape = list(t.shape)
    shape[dim] = size
    pieces = []
    for local, glob, n in runs:
        if n <= 0:
            continue
        if glob < 0 or glob + n > size or local + n > t.shape[dim]:
            raise UncoveredParameterError(
                f"rows [{glob}, {glob + n}) of a global size {size} (local [{local}, "
                f"{local + n}) of {t.shape[dim]}): vLLM's own loader refuses this shape too"
            )
        idx, off = [slice(None)] * t.dim(), [0] * t.dim()
        idx[dim], off[dim] = slice(local, local + n), glob
        pieces.append(Piece(tuple(idx), tuple(off)))
    return Placement(tuple(shape), tuple(pieces))


def _unit(layer: Any, param: Any, dim: int) -> Callable[[int], int]:
    """Weight rows -> this parameter's units along ``dim``: FP8 blocks (rounded up, as
    adjust_block_scale_shard), packed elements, else the same."""
    from vllm.model_executor.parameter import BlockQuantScaleParameter

    if isinstance(param, BlockQuantScaleParameter):
        block = getattr(layer, "weight_block_size", None)
        if not block:
            raise UncoveredParameterError("a block scale on a layer without weight_block_size")
        return lambda x: (x + int(block[0]) - 1) // int(block[0])
    if getattr(param, "packed_dim", None) == dim:
        if getattr(param, "marlin_tile_size", None) is not None:
            raise UncoveredParameterError("Marlin-tiled packed parameters are not covered")
        factor = getattr(param, "packed_factor", None) or param.pack_factor
        return lambda x: round(x // factor)
    return lambda x: x


_V2 = ("BasevLLMParameter", "ModelWeightParameter", "RowvLLMParameter", "PerTensorScaleParameter")
_V2 += ("ChannelQuantScaleParameter", "GroupQuantScaleParameter", "BlockQuantScaleParameter")
_V2 += ("PackedvLLMParameter", "PackedColumnParameter")


def linear(layer: Any, name: str, t: Any, cls: type, fn: Any) -> Placement:
    """linear.py's layers (``weight_loader`` or ``weight_loader_v2``, parameter.py's classes)."""
    from vllm.model_executor import parameter as vp
    from vllm.model_executor.layers import linear as vl

    v2 = fn is getattr(cls, "weight_loader_v2", None)
    if v2 and type(t) not in {getattr(vp, n, None) for n in _V2}:
        raise UncoveredParameterError(f"parameter class {type(t).__name__} with weight_loader_v2")
    if getattr(t, "is_sharded_weight", False):
        raise UncoveredParameterError("is_sharded_weight: the checkpoint is sharded already")
    row = cls is vl.RowParallelLinear
    # The dimension the loader narrows: v1 reads the attribute; v2 only narrows Row (input)
    # or column (output) parameters: a PerTensorScale (one scalar per shard) is copied whole.
    dim = getattr(t, "input_dim" if row else "output_dim", None)
    if v2 and not isinstance(t, vp.RowvLLMParameter if row else vp._ColumnvLLMParameter):
        dim = None
    if cls is vl.ReplicatedLinear or dim is None:
        return whole(t)
    rank, tp = (t.tp_rank if v2 else layer.tp_rank), layer.tp_size
    if row or cls in (vl.ColumnParallelLinear, vl.DCPGroupColumnParallelLinear):
        n = t.shape[dim]
        return along(t, dim, [(0, rank * n, n)], n * tp)
    unit = _unit(layer, t, dim)
    if cls is vl.MergedColumnParallelLinear:
        sizes = list(layer.output_sizes)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        shards = [(g, s // tp, g // tp, rank) for g, s in zip(starts, sizes)]
        total = sum(sizes)
    else:  # QKV: q sharded by rank; k, v by kv-head index rank // num_kv_head_replicas
        d, vd, nq, nkv = layer.head_size, layer.v_head_size, layer.num_heads, layer.num_kv_heads
        heads, kv = layer.total_num_heads, layer.total_num_kv_heads
        kv_rank = rank // layer.num_kv_head_replicas
        shards = [(0, nq * d, 0, rank), (heads * d, nkv * d, nq * d, kv_rank)]
        shards.append(((heads + kv) * d, nkv * vd, (nq + nkv) * d, kv_rank))
        total = (heads + kv) * d + kv * vd
    # (global start, local size, local start, rank) per logical shard
    runs = [(unit(loc), unit(g) + r * unit(n), unit(n)) for g, n, loc, r in shards]
    return along(t, dim, runs, unit(total))


def vocab(layer: Any, name: str, t: Any, cls: type, fn: Any) -> Placement:
    """vocab_parallel_embedding.py: rows of the unpadded vocabulary; padding and LoRA rows left."""
    dim = getattr(t, "output_dim", None)
    if dim is None:
        return whole(t)
    if dim != 0 or getattr(t, "packed_dim", None) is not None:
        raise UncoveredParameterError("an embedding sharded on a dimension other than 0, or packed")
    idx = layer.shard_indices
    n = idx.org_vocab_end_index - idx.org_vocab_start_index
    return along(t, 0, [(0, idx.org_vocab_start_index, n)], layer.org_vocab_size)


_LINEAR = "vllm.model_executor.layers.linear"
_METHODS = ("weight_loader", "weight_loader_v2", "validate_shard_id")
register(_LINEAR, "ReplicatedLinear", ("weight_loader",), linear)
register(_LINEAR, "DCPGroupColumnParallelLinear", _METHODS, linear)
register(_LINEAR, "MergedColumnParallelLinear", _METHODS, linear)
register(
    _LINEAR,
    "QKVParallelLinear",
    (*_METHODS, "_get_shard_offset_mapping", "_get_shard_size_mapping"),
    linear,
)
register(_LINEAR, "ColumnParallelLinear", _METHODS, linear)
register(_LINEAR, "RowParallelLinear", _METHODS, linear)
for _cls in ("ParallelLMHead", "VocabParallelEmbedding"):
    register("vllm.model_executor.layers.vocab_parallel_embedding", _cls, ("weight_loader",), vocab)


def placement(layer: Any, name: str, t: torch.Tensor, loader: Any, full: str = "") -> Placement:
    """The placement of ``layer``'s tensor ``name`` (``full``: its name in the model), whose
    weight loader (layerwise wrappers removed) is ``loader``; else UncoveredParameterError."""
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.model_executor.parameter import BasevLLMParameter

    owner, fn = getattr(loader, "__self__", None), getattr(loader, "__func__", loader)
    why = f"its weight_loader {getattr(fn, '__qualname__', fn)!r} is not one the rules cover"
    try:
        for (module, cls_name), (methods, rule) in RULES.items():
            cls = getattr(importlib.import_module(module), cls_name, None)
            if cls is None or not isinstance(layer, cls):
                continue
            kept = all(getattr(type(layer), m, None) is getattr(cls, m, None) for m in methods)
            if kept and owner is layer and fn in {getattr(cls, m, None) for m in methods[:2]}:
                return rule(layer, name, t, cls, fn)
            break
        if (loader is None or fn is default_weight_loader) and not isinstance(t, BasevLLMParameter):
            return whole(t)
    except UncoveredParameterError as e:
        why = str(e)
    raise UncoveredParameterError(
        f"fp8_dummy: no invariant rule for parameter {full or name!r} ({type(t).__name__}, shape "
        f"{tuple(t.shape)}) of layer {type(layer).__name__}: {why} (docs/engines.md)"
    )
