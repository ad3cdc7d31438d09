"""vLLM 0.33's real parallel layers on the CPU (gloo), for tests/test_engines_vllm_invariant.py:
building them at the process group's TP size (and at TP=1 for the logical shapes), and the
oracle: the TP=1 tensor of each parameter, fed to vLLM's OWN weight_loader the way a
checkpoint is (q/k/v and gate/up as separate shards, MoE experts one by one).

Runs inside the spawned worker processes only (imports vLLM).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
BLOCK = [16, 16]
# vLLM 0.33's dummy bounds, restated: 8-bit floats +-1.0, wider floats +-1e-3.
E8M0 = getattr(torch, "float8_e8m0fnu", None)


def bounds(dtype: torch.dtype) -> tuple[float, float]:
    return (-1.0, 1.0) if torch.finfo(dtype).bits == 8 else (-1e-3, 1e-3)


def quant_configs():
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    static = Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="static")
    block = Fp8Config(
        is_checkpoint_fp8_serialized=True, activation_scheme="dynamic", weight_block_size=BLOCK
    )
    return static, block


def linear_specs(world: int) -> list[tuple[str, str, dict]]:
    """(name, class, kwargs) of every linear/embedding layer under test. Sizes divide by 4,
    block-quantized ones are 16-aligned per rank at TP=4 (vLLM refuses the others)."""
    static, block = quant_configs()
    specs = [
        ("embed", "VocabParallelEmbedding", dict(num_embeddings=200, embedding_dim=32)),
        (
            "lm_head",
            "ParallelLMHead",
            dict(num_embeddings=203, embedding_dim=32, org_num_embeddings=197, bias=True),
        ),
        (
            "qkv_rep1",
            "QKV",
            dict(hidden_size=32, head_size=8, total_num_heads=8, total_num_kv_heads=1),
        ),
        (
            "qkv_rep2",
            "QKV",
            dict(hidden_size=32, head_size=8, total_num_heads=8, total_num_kv_heads=2),
        ),
        (
            "qkv_split",
            "QKV",
            dict(hidden_size=32, head_size=8, total_num_heads=8, total_num_kv_heads=4),
        ),
        ("gate_up", "Merged", dict(input_size=32, output_sizes=[48, 80], bias=True)),
        ("col", "Column", dict(input_size=32, output_size=72, bias=True)),
        ("o_proj", "Row", dict(input_size=64, output_size=36, bias=True)),
        ("rep", "Replicated", dict(input_size=32, output_size=24, bias=True)),
        (
            "fp8_qkv",
            "QKV",
            dict(
                hidden_size=32,
                head_size=16,
                total_num_heads=4,
                total_num_kv_heads=2,
                quant_config=static,
                bias=False,
            ),
        ),
        (
            "fp8_gate_up",
            "Merged",
            dict(input_size=32, output_sizes=[32, 64], quant_config=static, bias=False),
        ),
        (
            "fp8_col",
            "Column",
            dict(input_size=256, output_size=256, quant_config=static, bias=False),
        ),
        ("fp8_row", "Row", dict(input_size=64, output_size=48, quant_config=static, bias=False)),
        (
            "blk_qkv",
            "QKV",
            dict(
                hidden_size=64,
                head_size=16,
                total_num_heads=8,
                total_num_kv_heads=4,
                quant_config=block,
                bias=False,
            ),
        ),
        (
            "blk_gate_up",
            "Merged",
            dict(input_size=64, output_sizes=[64, 128], quant_config=block, bias=False),
        ),
        ("blk_col", "Column", dict(input_size=64, output_size=128, quant_config=block, bias=False)),
        ("blk_row", "Row", dict(input_size=128, output_size=32, quant_config=block, bias=False)),
    ]
    return specs


def build_linear(kind: str, kwargs: dict, disable_tp: bool = False) -> torch.nn.Module:
    from vllm.model_executor.layers import linear as vl
    from vllm.model_executor.layers import vocab_parallel_embedding as ve

    cls = {
        "VocabParallelEmbedding": ve.VocabParallelEmbedding,
        "ParallelLMHead": ve.ParallelLMHead,
        "QKV": vl.QKVParallelLinear,
        "Merged": vl.MergedColumnParallelLinear,
        "Column": vl.ColumnParallelLinear,
        "Row": vl.RowParallelLinear,
        "Replicated": vl.ReplicatedLinear,
    }[kind]
    return cls(**kwargs, params_dtype=BF16, disable_tp=disable_tp)


def moe_config(cfg, placement: str | None):
    """A copy of the VllmConfig with expert parallelism off (None) or on with the
    placement ("linear", "round_robin")."""
    import copy

    new = copy.copy(cfg)
    new.parallel_config = copy.copy(cfg.parallel_config)
    new.parallel_config.enable_expert_parallel = placement is not None
    if placement is not None:
        new.parallel_config.expert_placement_strategy = placement
    return new


def build_moe(quant, prefix: str, tp1: bool = False) -> torch.nn.Module:
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory

    extra = dict(tp_size=1, dp_size=1, pcp_size=1) if tp1 else {}
    runner = FusedMoEFactory(
        num_experts=8,
        top_k=2,
        hidden_size=32,
        intermediate_size=64,
        params_dtype=BF16,
        quant_config=quant,
        prefix=prefix,  # unique: vLLM registers each MoE layer by name
        # Grouped routing: vLLM places experts round robin only for several expert groups.
        use_grouped_topk=True,
        num_expert_group=2,
        topk_group=1,
        **extra,
    )
    return runner.routed_experts


def stand_in_model_config(cfg) -> None:
    # Read while FP8 layers are built (dtype) and by FP8 MoE (the model type).
    text = SimpleNamespace(model_type="llama")
    cfg.model_config = SimpleNamespace(dtype=BF16, hf_text_config=text, hf_config=text)


def no_fp8_gemm_kernel() -> None:
    # Fp8LinearMethod picks a GEMM kernel after creating every parameter; this CPU has
    # none. The weights and scales stay as vLLM makes them.
    import vllm.model_executor.layers.quantization.fp8 as fp8

    fp8.init_fp8_linear_kernel = lambda *a, **k: None


# ---- the oracle ---------------------------------------------------------------------------


def checkpoint_tensor(name: str, shape, dtype, seed: int = 1234) -> torch.Tensor:
    """The TP=1 tensor of the parameter ``name`` filled by the stateless mode (our fill,
    tested on its own against numpy; the layout is what is under test here)."""
    from fp8_dummy.stateless import init_stateless_, tensor_seed

    g = torch.empty(tuple(shape), dtype=dtype)
    if dtype == E8M0:
        g.view(torch.uint8).fill_(120)
        return g
    return init_stateless_(g, *bounds(dtype), tensor_seed(seed, name))


def _units(param, size: int) -> int:
    from vllm.model_executor.parameter import BlockQuantScaleParameter

    return -(-size // BLOCK[0]) if isinstance(param, BlockQuantScaleParameter) else size


def feed_linear(layer, kind: str, name: str, param, g: torch.Tensor) -> None:
    """Load ``g`` (the TP=1 tensor) into ``param`` through vLLM's own loader, as a
    checkpoint would: fused layers shard by shard."""
    loader = param.weight_loader
    if kind == "QKV":
        d, vd = layer.head_size, layer.v_head_size
        sizes = [
            layer.total_num_heads * d,
            layer.total_num_kv_heads * d,
            layer.total_num_kv_heads * vd,
        ]
        ids = ["q", "k", "v"]
    elif kind == "Merged":
        sizes, ids = list(layer.output_sizes), list(range(len(layer.output_sizes)))
    else:
        loader(param, g)
        return
    if getattr(param, "output_dim", None) is None:  # per-tensor scales: one per shard
        for i, shard in enumerate(ids):
            loader(param, g[i], shard)
        return
    start = 0
    for size, shard in zip(sizes, ids):
        n = _units(param, size)
        loader(param, g.narrow(param.output_dim, start, n), shard)
        start += n


def feed_moe(layer, name: str, param, g: torch.Tensor) -> None:
    inter = layer.moe_config.intermediate_size
    for e in range(g.shape[0]):
        if name in ("w13_weight", "w13_weight_scale_inv"):
            half = g.shape[1] // 2
            layer.weight_loader(param, g[e, :half], name, "w1", e)
            layer.weight_loader(param, g[e, half:], name, "w3", e)
        elif name == "w13_weight_scale":
            layer.weight_loader(param, g[e, 0], name, "w1", e)
            layer.weight_loader(param, g[e, 1], name, "w3", e)
        elif name == "w13_input_scale":
            layer.weight_loader(param, g[e], name, "w1", e)
            layer.weight_loader(param, g[e], name, "w3", e)
        else:
            layer.weight_loader(param, g[e], name, "w2", e)
    assert inter == 64
