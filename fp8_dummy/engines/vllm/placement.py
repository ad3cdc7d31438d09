"""Where each rank's vLLM parameter sits in the logical (TP=1, EP=1, unpadded) tensor: one rule
per layer class, the affine map of vLLM 0.33's own ``weight_loader``, registered into
:data:`RULES` (docs/engines.md, "The load format fp8_dummy_invariant")."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["RULES", "Piece", "Placement", "UncoveredParameterError", "expert_runs", "placement"]
__all__ += ["register"]


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


def register(module: str, cls: str, methods: tuple[str, ...], rule: Callable) -> None:
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
_LOADERS = ("weight_loader", "weight_loader_v2", "validate_shard_id")
_QKV = (*_LOADERS, "_get_shard_offset_mapping", "_get_shard_size_mapping")
register(_LINEAR, "ReplicatedLinear", ("weight_loader",), linear)
register(_LINEAR, "DCPGroupColumnParallelLinear", _LOADERS, linear)
register(_LINEAR, "MergedColumnParallelLinear", _LOADERS, linear)
register(_LINEAR, "QKVParallelLinear", _QKV, linear)
register(_LINEAR, "ColumnParallelLinear", _LOADERS, linear)
register(_LINEAR, "RowParallelLinear", _LOADERS, linear)
for _cls in ("ParallelLMHead", "VocabParallelEmbedding"):
    register("vllm.model_executor.layers.vocab_parallel_embedding", _cls, ("weight_loader",), vocab)


# ---- fused MoE (fused_moe/routed_experts.py): per local expert, the global one the expert map
# names; w13: w1 rows then w3 rows, rank r taking rows r * (I // tp) of each; w2: those columns.
# MoE ranks: moe_parallel_config (DP x PCP x TP flattened), never the attention TP group.

_TENSORS = ("weight", "bias", "weight_scale", "weight_scale_inv", "input_scale")


def expert_runs(layer: Any) -> list[tuple[int, int, int, int]]:
    """(local start, global start, count, global step) runs of the experts this rank holds."""
    emap = getattr(layer, "_expert_map", None)
    if emap is None:
        return [(0, 0, layer.local_num_experts, 1)]
    owner = {int(loc): g for g, loc in enumerate(emap.tolist()) if loc >= 0}
    glob = [owner.get(loc, -1) for loc in range(layer.local_num_experts)]
    if -1 in glob:
        raise UncoveredParameterError("a local expert slot that no global expert maps to")
    runs: list[tuple[int, int, int, int]] = []
    for loc, g in enumerate(glob):
        if runs:
            l0, g0, n, s = runs[-1]
            if n == 1 and g > g0:
                runs[-1] = (l0, g0, 2, g - g0)
                continue
            if g == g0 + n * s:
                runs[-1] = (l0, g0, n + 1, s)
                continue
        runs.append((loc, g, 1, 1))
    return runs


def moe(layer: Any, name: str, t: torch.Tensor, cls: type, fn: Any) -> Placement:
    cfg = layer.moe_config
    pc, method = cfg.moe_parallel_config, layer.quant_method
    if getattr(pc, "enable_eplb", False) or cfg.num_experts != cfg.num_logical_experts:
        raise UncoveredParameterError("redundant (EPLB) or substituted experts are not covered")
    if getattr(layer.expert_map_manager, "num_fused_shared_experts", 0):
        raise UncoveredParameterError("fused shared experts are not covered")
    if getattr(cfg, "tp_shard_with_padding", False) or getattr(t, "is_transposed", False):
        raise UncoveredParameterError("block-aligned padded TP or transposed MoE weights")
    if type(method).__name__ not in ("UnquantizedFusedMoEMethod", "Fp8MoEMethod"):
        raise UncoveredParameterError(f"MoE quantization method {type(method).__name__}")
    if getattr(method, "weight_scale_refine", None) is not None:
        raise UncoveredParameterError("FP8 MoE block scales on a refined grid (not affine)")
    kind, _, rest = name.partition("_")
    if kind not in ("w13", "w2") or rest not in _TENSORS:
        raise UncoveredParameterError(f"MoE tensor {name!r} is not covered")
    tp, r, experts = pc.tp_size, pc.tp_rank, expert_runs(layer)
    inter, hidden = cfg.intermediate_size, cfg.hidden_dim_unpadded
    block = getattr(method, "weight_block_size", None)
    b = block if rest == "weight_scale_inv" and block else (1, 1)  # block scales count blocks
    inter_n, inter_k, hidden_n, hidden_k = (-(-x // b[i]) for x in (inter, hidden) for i in (0, 1))
    if kind == "w13" and rest in ("weight", "weight_scale_inv", "bias"):
        per_rank = inter_n // tp
        n = max(0, min(per_rank, inter_n - per_rank * r))
        gated = cfg.is_act_and_mul
        half = t.shape[1] // 2 if gated else t.shape[1]
        runs = [(0, r * per_rank, n)] + ([(half, inter_n + r * per_rank, n)] if gated else [])
        inner = (2 * inter_n if gated else inter_n,) + ((hidden_k,) if rest != "bias" else ())
        return _experts(t, experts, cfg.num_experts, inner, 1, runs)
    if kind == "w2" and rest in ("weight", "weight_scale_inv"):
        per_rank = inter_k // tp
        n = max(0, min(per_rank, inter_k - per_rank * r))
        return _experts(t, experts, cfg.num_experts, (hidden_n, inter_k), 2, [(0, r * per_rank, n)])
    if rest == "bias":  # w2_bias: whole on every TP rank
        return _experts(t, experts, cfg.num_experts, (hidden,), None, [])
    # Per-tensor scales, one per expert (w13_weight_scale: one each for w1 and w3).
    return _experts(t, experts, cfg.num_experts, tuple(t.shape[1:]), None, [])


def _experts(
    t: torch.Tensor, experts: list, total: int, inner: tuple, dim: Any, runs: list
) -> Placement:
    """Experts along dim 0, ``runs`` (local, global, length) along ``dim``, the rest whole."""
    shape = (total, *inner)
    pieces = []
    for l0, g0, count, gstep in experts:
        for local, glob, n in runs if dim is not None else [(0, 0, None)]:
            if n == 0:
                continue
            idx, off = [slice(l0, l0 + count)], [g0]
            for d in range(1, t.dim()):
                inside = d == dim
                idx.append(
                    slice(local, local + n) if inside else slice(0, min(t.shape[d], shape[d]))
                )
                off.append(glob if inside else 0)
            pieces.append(Piece(tuple(idx), tuple(off), (gstep,) + (1,) * (t.dim() - 1)))
    return Placement(shape, tuple(pieces))


register(
    "vllm.model_executor.layers.fused_moe.routed_experts",
    "RoutedExperts",
    ("weight_loader", "_load_w13", "_load_w2"),
    moe,
)


def kv_cache_scale(t: torch.Tensor, fn: Any) -> Placement | None:
    """Attention's q/k/v/prob scales under a KV-cache quant method (``Fp8Config``,
    ``quantization/kv_cache.py``): scalars the parameter class's own loader copies whole to
    every rank (per-head scales, with a per-instance loader, stay refused)."""
    from vllm.model_executor.layers.quantization.kv_cache import KVCacheScaleParameter as K

    return whole(t) if isinstance(t, K) and t.dim() == 0 and fn is K.weight_loader else None


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
        if (kv := kv_cache_scale(t, fn)) is not None:
            return kv
    except UncoveredParameterError as e:
        why = str(e)
    raise UncoveredParameterError(
        f"fp8_dummy: no invariant rule for parameter {full or name!r} ({type(t).__name__}, shape "
        f"{tuple(t.shape)}) of layer {type(layer).__name__}: {why} (docs/engines.md)"
    )
