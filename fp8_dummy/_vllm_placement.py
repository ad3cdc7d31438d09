"""Where each rank's vLLM parameter sits in the logical (TP=1, EP=1, unpadded) tensor: the
rules of ``fp8_dummy.vllm.initialize_invariant_dummy_weights``.

A :class:`Placement` is the global shape and a few :class:`Piece` s; a piece says that the
block ``local[piece.local]`` of the rank's tensor holds, at multi-index ``idx``, the global
element ``piece.offset + piece.step * idx`` (per dimension). Elements no piece covers
(vocabulary padding, LoRA rows, padded MoE rows) are those a checkpoint never reaches.

Each rule restates, as affine arithmetic, what vLLM 0.33's own ``weight_loader`` of that
layer does with a checkpoint tensor (``vllm/model_executor/layers/linear.py``,
``vocab_parallel_embedding.py``, ``fused_moe/routed_experts.py``, ``parameter.py``,
``quantization/kv_cache.py``). A rule applies only where the parameter's loader is the
class's own function, so a subclass that overrides its loader (about 64 custom loaders exist
in vLLM 0.33) is refused by name rather than filled per rank. The tests feed vLLM's own
loaders the TP=1 tensor and compare (``tests/test_engines_vllm_invariant*.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["Piece", "Placement", "UncoveredParameterError", "placement"]


class UncoveredParameterError(NotImplementedError):
    """A sharded parameter, or one with a custom ``weight_loader``, that no rule covers."""


@dataclass(frozen=True)
class Piece:
    local: tuple[slice, ...]  # a block of the rank's tensor
    offset: tuple[int, ...]  # its first element's global multi-index
    step: tuple[int, ...] | None = None  # global index step per local step (default 1)


@dataclass(frozen=True)
class Placement:
    global_shape: tuple[int, ...]
    pieces: tuple[Piece, ...]


def whole(t: torch.Tensor) -> Placement:
    """Replicated: the local tensor is the global one."""
    return Placement(tuple(t.shape), (Piece(tuple(slice(None) for _ in t.shape), (0,) * t.dim()),))


def _along(t: torch.Tensor, dim: int, runs: list[tuple[int, int, int]], size: int) -> Placement:
    """Runs (local start, global start, length) along ``dim``; other dims whole."""
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
        idx = [slice(None)] * t.dim()
        idx[dim] = slice(local, local + n)
        off = [0] * t.dim()
        off[dim] = glob
        pieces.append(Piece(tuple(idx), tuple(off)))
    return Placement(tuple(shape), tuple(pieces))


def _bound(loader: Any) -> tuple[Any, Any]:
    """(object, function) of a bound method, else (None, loader)."""
    return getattr(loader, "__self__", None), getattr(loader, "__func__", loader)


# ---- linear layers (vllm/model_executor/layers/linear.py, parameter.py) -------------------


def _unit(layer: Any, param: Any, dim: int, which: str) -> Callable[[int], int]:
    """Weight rows/columns -> this parameter's units along ``dim``: FP8 blocks (rounded up,
    as adjust_block_scale_shard), packed elements, else the same."""
    from vllm.model_executor.parameter import BlockQuantScaleParameter

    if isinstance(param, BlockQuantScaleParameter):
        block = getattr(layer, "weight_block_size", None)
        if not block:
            raise UncoveredParameterError("a block scale on a layer without weight_block_size")
        b = int(block[0] if which == "out" else block[1])
        return lambda x: (x + b - 1) // b
    if getattr(param, "packed_dim", None) == dim:
        if getattr(param, "marlin_tile_size", None) is not None:
            raise UncoveredParameterError("Marlin-tiled packed parameters are not covered")
        factor = getattr(param, "packed_factor", None) or param.pack_factor
        return lambda x: round(x // factor)
    return lambda x: x


def _linear(layer: Any, param: Any, cls: type, loader_fn: Any) -> Placement:
    t = param
    from vllm.model_executor import parameter as vp
    from vllm.model_executor.layers import linear as vl

    v2 = loader_fn is getattr(cls, "weight_loader_v2", None)
    if v2 and type(param) not in _V2_CLASSES:
        raise UncoveredParameterError(
            f"parameter class {type(param).__name__} with weight_loader_v2"
        )
    if getattr(param, "is_sharded_weight", False):
        raise UncoveredParameterError("is_sharded_weight: the checkpoint is sharded already")
    if cls is vl.ReplicatedLinear:
        return whole(t)
    # The dimension the loader narrows, if any: v1 reads the attribute; v2 the class's method.
    if cls is vl.RowParallelLinear:
        dim = getattr(param, "input_dim", None)
        if v2 and not isinstance(param, vp.RowvLLMParameter):
            dim = None  # PerTensorScale, ChannelQuantScale, PackedColumn: copied whole
        if dim is None:
            return whole(t)
        rank = param.tp_rank if v2 else layer.tp_rank
        n = t.shape[dim]
        return _along(t, dim, [(0, rank * n, n)], n * layer.tp_size)
    dim = getattr(param, "output_dim", None)
    if v2 and not isinstance(param, vp._ColumnvLLMParameter):
        dim = None  # PerTensorScale (one scalar per logical shard), Row/Base: copied whole
    if dim is None:
        return whole(t)
    rank = param.tp_rank if v2 else layer.tp_rank
    if cls in (vl.ColumnParallelLinear, vl.DCPGroupColumnParallelLinear):
        n = t.shape[dim]
        return _along(t, dim, [(0, rank * n, n)], n * layer.tp_size)
    unit = _unit(layer, param, dim, "out")
    tp = layer.tp_size
    if cls is vl.MergedColumnParallelLinear:
        sizes = list(layer.output_sizes)
        shards = [
            (sum(sizes[:i]), s, sum(sizes[:i]) // tp, s // tp, rank) for i, s in enumerate(sizes)
        ]
        total = sum(sizes)
    else:  # QKV: q sharded by rank; k, v by kv-head index rank // num_kv_head_replicas
        d, vd = layer.head_size, layer.v_head_size
        nq, nkv = layer.num_heads, layer.num_kv_heads
        heads, kv = layer.total_num_heads, layer.total_num_kv_heads
        kv_rank = rank // layer.num_kv_head_replicas
        shards = [
            (0, heads * d, 0, nq * d, rank),
            (heads * d, kv * d, nq * d, nkv * d, kv_rank),
            ((heads + kv) * d, kv * vd, (nq + nkv) * d, nkv * vd, kv_rank),
        ]
        total = (heads + kv) * d + kv * vd
    runs = []
    for g_start, _g_size, l_start, l_size, shard_rank in shards:
        n = unit(l_size)
        runs.append((unit(l_start), unit(g_start) + shard_rank * n, n))
    return _along(t, dim, runs, unit(total))


def _v2_classes() -> frozenset:
    from vllm.model_executor import parameter as vp

    names = (
        "BasevLLMParameter",
        "ModelWeightParameter",
        "RowvLLMParameter",
        "PerTensorScaleParameter",
        "ChannelQuantScaleParameter",
        "GroupQuantScaleParameter",
        "BlockQuantScaleParameter",
        "PackedvLLMParameter",
        "PackedColumnParameter",
    )
    return frozenset(getattr(vp, n) for n in names if hasattr(vp, n))


_V2_CLASSES: frozenset = frozenset()


# ---- embeddings (vocab_parallel_embedding.py) ----------------------------------------------


def _vocab(layer: Any, param: Any) -> Placement:
    t = param
    dim = getattr(param, "output_dim", None)
    if dim is None:
        return whole(t)
    if dim != 0 or getattr(param, "packed_dim", None) is not None:
        raise UncoveredParameterError("an embedding sharded on a dimension other than 0, or packed")
    idx = layer.shard_indices
    n = idx.org_vocab_end_index - idx.org_vocab_start_index
    return _along(t, 0, [(0, idx.org_vocab_start_index, n)], layer.org_vocab_size)


# ---- attention (quantization/kv_cache.py) -------------------------------------------------


def _kv_cache_scale(t: torch.Tensor, fn: Any) -> Placement | None:
    """Attention's q/k/v/prob scales under a KV-cache quant method (``Fp8Config``): scalars
    the class's own loader copies whole to every rank (per-head scales, with a per-instance
    loader, stay refused)."""
    from vllm.model_executor.layers.quantization.kv_cache import KVCacheScaleParameter as K

    return whole(t) if isinstance(t, K) and t.dim() == 0 and fn is K.weight_loader else None


# ---- dispatch ------------------------------------------------------------------------------


def _rules() -> list[tuple[type, tuple[str, ...]]]:
    from vllm.model_executor.layers import linear as vl
    from vllm.model_executor.layers import vocab_parallel_embedding as ve
    from vllm.model_executor.layers.fused_moe import routed_experts as vr

    linear = ("weight_loader", "weight_loader_v2", "validate_shard_id")
    return [
        (vl.ReplicatedLinear, ("weight_loader",)),
        (vl.DCPGroupColumnParallelLinear, linear),
        (vl.MergedColumnParallelLinear, linear),
        (vl.QKVParallelLinear, (*linear, "_get_shard_offset_mapping", "_get_shard_size_mapping")),
        (vl.ColumnParallelLinear, linear),
        (vl.RowParallelLinear, linear),
        (ve.ParallelLMHead, ("weight_loader",)),
        (ve.VocabParallelEmbedding, ("weight_loader",)),
        (vr.RoutedExperts, ("weight_loader", "_load_w13", "_load_w2")),
    ]


def placement(layer: torch.nn.Module, name: str, t: torch.Tensor, loader: Any) -> Placement:
    """The placement of ``layer``'s tensor ``name`` (``t``), whose weight loader (with any
    layerwise wrapper removed) is ``loader``. Raises :class:`UncoveredParameterError` for a
    sharded or custom-loaded tensor no rule covers."""
    global _V2_CLASSES
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.model_executor.parameter import BasevLLMParameter

    if not _V2_CLASSES:
        _V2_CLASSES = _v2_classes()
    owner, fn = _bound(loader)
    for cls, methods in _rules():
        if not isinstance(layer, cls):
            continue
        # A subclass is covered only where it keeps every method the loading relies on.
        if any(getattr(type(layer), m, None) is not getattr(cls, m, None) for m in methods):
            break
        if owner is not layer or fn not in {getattr(cls, m, None) for m in methods[:2]}:
            break
        from vllm.model_executor.layers import vocab_parallel_embedding as ve
        from vllm.model_executor.layers.fused_moe import routed_experts as vr

        if cls in (ve.ParallelLMHead, ve.VocabParallelEmbedding):
            return _vocab(layer, t)
        if cls is vr.RoutedExperts:
            from ._vllm_moe import moe_placement

            return moe_placement(layer, name, t)
        return _linear(layer, t, cls, fn)
    if loader is None or fn is default_weight_loader:
        if not isinstance(t, BasevLLMParameter):
            return whole(t)
    if (kv_scale := _kv_cache_scale(t, fn)) is not None:
        return kv_scale
    raise UncoveredParameterError(
        f"fp8_dummy: no invariant rule for parameter {name!r} ({type(t).__name__}, shape "
        f"{tuple(t.shape)}) of layer {type(layer).__name__}: its weight_loader "
        f"{getattr(fn, '__qualname__', fn)!r} is not one the rules cover "
        "(docs/engines.md lists the covered layer classes)"
    )
