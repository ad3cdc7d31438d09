"""The fused-MoE placement rule (vLLM 0.33's ``RoutedExperts``, ``fused_moe/routed_experts.py``):
per local expert, the global expert the expert map names (linear or round-robin placement);
``w13``: w1 rows then w3 rows, rank r taking rows r * (I // tp) of each; ``w2``: columns
r * (I // tp). The MoE ranks come from ``moe_config.moe_parallel_config`` (flattened over DP x
PCP x TP), never from the attention TP group."""

from __future__ import annotations

from typing import Any

import torch

from .placement import Piece, Placement, UncoveredParameterError, register

__all__ = ["expert_runs", "moe"]

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
    if rest == "weight_scale_inv" and block:  # block scales count whole blocks
        inter_n, inter_k = -(-inter // block[0]), -(-inter // block[1])
        hidden_n, hidden_k = -(-hidden // block[0]), -(-hidden // block[1])
    else:
        inter_n = inter_k = inter
        hidden_n = hidden_k = hidden
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
    """Experts by ``experts`` runs along dim 0, ``runs`` (local, global, length) along ``dim``;
    every other dimension from its start up to the global size (beyond: padding)."""
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
