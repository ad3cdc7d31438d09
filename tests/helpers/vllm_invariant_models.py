"""vLLM 0.33's own model classes (Llama, Qwen3-MoE, DeepSeek-V3), each in bf16, FP8
per-tensor (static activation scales) and FP8 block (16 x 16 blocks), built on this CPU from
tiny configs, for tests/test_engines_vllm_invariant_models.py (inside its gloo workers: this
module imports vLLM lazily).

Built the way vLLM builds a model: a config.json in a temporary folder, read by vLLM's
``ModelConfig`` (which also turns the ``quantization_config`` into an ``Fp8Config``), a
``VllmConfig``, then the model loader's ``create_model`` (``initialize_model``) under
``set_default_torch_dtype`` and the CPU device, as ``BaseModelLoader.load_model`` does.
Every parameter is created by vLLM's code. What is replaced, and why (:func:`prepare`):

- ``vllm.model_executor.layers.quantization.fp8.init_fp8_linear_kernel`` returns None
  where vLLM finds no kernel. ``Fp8LinearMethod.create_weights`` calls it as its last
  statement, after it registered ``weight``, ``weight_scale`` / ``weight_scale_inv`` and
  ``input_scale``, to choose a GEMM kernel; vLLM's CPU kernels for FP8 block weights need
  AMX tiles, so without one it raises ``ValueError: Failed to find a kernel``. Only
  ``process_weights_after_loading`` and ``apply`` read the choice, and neither runs here.
- ``vllm.model_executor.layers.fused_moe.config.FusedMoEConfig.__post_init__`` lets a
  non-gated MoE (Nemotron-H's squared-ReLU experts) pass on the CPU: its last statement
  raises ``NotImplementedError`` there (no CPU kernel runs one), after everything else is
  set; ``select_unquantized_moe_backend`` (as ``unquantized_fused_moe_method`` calls it)
  then finds no CPU kernel for it and gets the CPU backend, no kernel class. The experts'
  parameters (``w13`` of the up projection alone) follow from the activation, not the
  platform (the CPU and Triton backends round no size up), and no kernel runs here.
- ``vllm.model_executor.models.registry._run_in_subprocess`` calls its function in this
  process. ``ModelConfig`` inspects the architecture's class (``_ModelInfo``: pipeline
  parallel support, hybrid or not...) in a fresh interpreter so that a GPU parent stays
  uninitialized; here that costs a second vLLM import per class (20-40 s) for the same
  answer. It has no say in the parameters.
- ``VLLM_CACHE_ROOT`` is the test's temporary folder (where that inspection is cached), so
  nothing is read from or left in ~/.cache/vllm.
- ``process_weights_after_loading`` is never called (``load_model`` calls it after
  ``load_weights``): it turns loaded weights into kernel layouts with vLLM's ``_C`` ops,
  absent from this wheel. The weights are compared as loaded, before that step.

The oracle (:func:`checkpoint`, :func:`load_checkpoint`): the TP=1 model's tensors written
back under the names of an HF checkpoint (q/k/v, gate/up, q_a/kv_a and every expert
separate; the vocabulary unpadded), then loaded into a zeroed copy of the model by the
model's own ``load_weights``: vLLM's name mapping, stacked shards, expert mapping and each
parameter's ``weight_loader``, as from a real checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from helpers import vllm_invariant_layers as L

COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    head_dim=16,
    vocab_size=200,  # padded to 256 by vLLM: the padding rows stay zero
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    torch_dtype="bfloat16",
    tie_word_embeddings=False,
)
# Two layers each; KV heads split at TP=2 (Llama) or replicated (Qwen3-MoE: one KV head);
# Qwen3-MoE's first layer dense (mlp_only_layers), DeepSeek-V3's too (first_k_dense_replace),
# with MLA (q_lora_rank: the fused q_a/kv_a projection), a shared expert and a score bias.
MODELS = {
    "llama": dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        intermediate_size=128,
        num_key_value_heads=2,
    ),
    "qwen3_moe": dict(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_key_value_heads=1,
        mlp_only_layers=[0],
        norm_topk_prob=True,
    ),
    "deepseek_v3": dict(
        architectures=["DeepseekV3ForCausalLM"],
        model_type="deepseek_v3",
        intermediate_size=128,
        moe_intermediate_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=16,
        v_head_dim=16,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        routed_scaling_factor=1.0,
    ),
    # Step-3.5-Flash's text checkpoint (transformers' Step3p7TextConfig, which vLLM reads it
    # with): a dense full-attention layer, then a sliding MoE one (its packed experts and shared
    # expert); 32 heads, so that the per-head gate g_proj's rows divide into the 16-row FP8
    # blocks on each of two ranks; the keys of its config.json vLLM's class reads
    "step3p5": dict(
        architectures=["Step3p5ForCausalLM"],
        model_type="step3p5",
        num_attention_heads=32,
        num_key_value_heads=2,
        intermediate_size=128,
        moe_intermediate_size=32,
        share_expert_dim=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        layer_types=["full_attention", "sliding_attention"],
        sliding_window=64,
        moe_layers_enum="1",
        pad_token_id=0,
        use_head_wise_attn_gate=True,
        use_moe_router_bias=True,
        need_fp32_gate=True,
        moe_router_activation="sigmoid",
        norm_expert_weight=True,
    ),
    "mixtral": dict(
        architectures=["MixtralForCausalLM"],
        model_type="mixtral",
        intermediate_size=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        num_key_value_heads=2,
    ),
}
QUANTS = {
    "bf16": None,
    "fp8": dict(quant_method="fp8", activation_scheme="static"),
    "blk": dict(quant_method="fp8", activation_scheme="dynamic", weight_block_size=L.BLOCK),
}
CASES = [(m, q) for m in MODELS for q in QUANTS]
# The formats each quantization runs with (fp8_dummy_realistic: the checkpoint of a bf16 or an
# FP8 block config; "routed": fp8_dummy_realistic with a routing profile, MoE models only).
FORMATS = {"invariant": QUANTS, "realistic": ("bf16", "blk"), "routed": ("bf16", "blk")}
ROUTING = "zipf:1.2"
# format -> (vLLM's load format, its model_loader_extra_config)
LOADS = {
    "invariant": ("fp8_dummy_invariant", {}),
    "realistic": ("fp8_dummy_realistic", {}),
    "routed": ("fp8_dummy_realistic", {"routing": ROUTING}),
}
# The (model, quantization) pairs a format runs on, if not all: Qwen3-MoE's router is
# quantized with the rest in vLLM's FP8 (and routing refuses a quantized router without a
# bias), DeepSeek-V3's stays unquantized.
ONLY = {
    "invariant": tuple((m, q) for m in ("llama", "qwen3_moe", "deepseek_v3") for q in QUANTS),
    "realistic": (("mixtral", "bf16"), ("step3p5", "bf16"), ("step3p5", "blk"))
    + tuple((m, q) for m in ("llama", "qwen3_moe", "deepseek_v3") for q in ("bf16", "blk")),
    "routed": (("qwen3_moe", "bf16"), ("deepseek_v3", "blk")),
}
# At TP=2 also with expert parallelism (each rank 2 of the 4 experts), against the same
# TP=1 checkpoint: expert mapping through the models' own load_weights.
EP_CASES = [("qwen3_moe", "fp8"), ("deepseek_v3", "blk")]

# The checkpoint names of vLLM's fused layers' shards (the models' stacked_params_mapping).
_FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
}


def key(model: str, quant: str, fmt: str) -> str:
    return f"{model}-{quant}" + ("" if fmt == "invariant" else f"-{fmt}")


def runs(fmt: str, model: str, quant: str) -> bool:
    return quant in FORMATS[fmt] and (fmt not in ONLY or (model, quant) in ONLY[fmt])


def prepare(tmp: str) -> None:
    """The replacements of the module docstring; before the first model is built."""
    os.environ["VLLM_CACHE_ROOT"] = os.path.join(tmp, "vllm-cache")
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()
    import vllm.model_executor.layers.quantization.fp8 as fp8

    choose = fp8.init_fp8_linear_kernel

    def kernel_or_none(*args, **kwargs):
        try:
            return choose(*args, **kwargs)
        except ValueError:  # "Failed to find a kernel": none on this CPU
            return None

    fp8.init_fp8_linear_kernel = kernel_or_none
    import vllm.model_executor.layers.fused_moe.config as moe

    check = moe.FusedMoEConfig.__post_init__

    def non_gated_anywhere(self) -> None:
        try:
            check(self)
        except NotImplementedError as e:  # its last statement: a kernel choice, not a shape
            if "is_act_and_mul=False" not in str(e):
                raise

    moe.FusedMoEConfig.__post_init__ = non_gated_anywhere
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as unquantized

    select = unquantized.select_unquantized_moe_backend

    def backend_or_cpu(moe_config, **kwargs):
        try:
            return select(moe_config=moe_config, **kwargs)
        except NotImplementedError:  # no CPU kernel for a non-gated MoE
            if moe_config.is_act_and_mul:
                raise
            return unquantized.UnquantizedMoeBackend.CPU, None

    unquantized.select_unquantized_moe_backend = backend_or_cpu


def start(rank: int, port: int, tmp: str):
    """A worker's set-up: :func:`prepare`, rank ``rank`` of a two-process gloo group at TP=1,
    fp8_dummy's plugin registered; the base config to rebuild the model-parallel groups in."""
    prepare(tmp)
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    from fp8_dummy import vllm as vllm_plugin

    base = VllmConfig(device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(base):
        init_distributed_environment(2, rank, f"tcp://127.0.0.1:{port}", rank, backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=1)
    vllm_plugin.register()
    return base


def build(model: str, quant: str, folder: Path, world: int, ep: bool = False):
    """(model, vllm_config, model_config): ``model`` with ``quant`` at TP=``world`` (with
    expert parallelism: ``ep``), its tensors as vLLM creates them (uninitialized)."""
    write_config(model, quant, folder)
    return build_from(folder, world, ep)


def write_config(model: str, quant: str, folder: Path) -> Path:
    """``folder``/config.json of ``model`` with ``quant``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(COMMON, **MODELS[model])
    if QUANTS[quant]:
        config["quantization_config"] = QUANTS[quant]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def build_from(folder: Path, world: int, ep: bool = False):
    """:func:`build` of the config.json in ``folder`` (a checkpoint's, for instance)."""
    from vllm.config import (
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    model_config = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16")
    vllm_config = VllmConfig(
        model_config=model_config,
        device_config=DeviceConfig(device="cpu"),
        parallel_config=ParallelConfig(tensor_parallel_size=world, enable_expert_parallel=ep),
    )
    loader = get_model_loader(LoadConfig(load_format="dummy"))
    with set_current_vllm_config(vllm_config):
        with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
            built = loader.create_model(vllm_config=vllm_config, model_config=model_config)
    return built, vllm_config, model_config


def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer by its first full name (what a dummy loader
    fills; a tensor two modules share, e.g. DeepSeek's score bias, once)."""
    out = dict(model.named_parameters())
    seen = {id(t) for t in out.values()}
    for prefix, module in model.named_modules():
        for name, b in module._buffers.items():
            if b is not None and name not in module._non_persistent_buffers_set:
                if id(b) not in seen:
                    out[f"{prefix}.{name}" if prefix else name] = b
                    seen.add(id(b))
    return out


def _own(model: torch.nn.Module):
    """(prefix, module, {name: tensor}) with each module's own tensors under their first
    full name only."""
    first = {id(t): n for n, t in tensors(model).items()}
    for prefix, module in model.named_modules():
        own = {**module._parameters, **module._buffers}
        own = {
            n: t
            for n, t in own.items()
            if t is not None and first.get(id(t)) == (f"{prefix}.{n}" if prefix else n)
        }
        if own:
            yield prefix, module, own


# KV-cache quantization parameters vLLM's attention makes (compressed-tensors' zero points are
# plain parameters, hence by name): no checkpoint holds them; vLLM sets them after loading
KV_SCALES = ("k_scale", "v_scale", "q_scale", "prob_scale", "k_zero_point", "v_zero_point")
KV_SCALES += ("q_zero_point",)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (a 0-dim tensor too: KV-cache scales are scalars)."""
    return t.data.reshape(t.shape or (1,)).view(torch.uint8)


def poison(model: torch.nn.Module, byte: int = 0x55) -> None:
    with torch.no_grad():
        for t in tensors(model).values():
            as_bytes(t).fill_(byte)


def logical(model: torch.nn.Module, seed: int = 1234) -> dict[str, torch.Tensor]:
    """What the format defines for each tensor of a TP=1 model, from its definition
    (docs/engines.md), restated: vLLM 0.33's dummy value rules (``dummy_weight_value``,
    else uniform, 8-bit floats in +-1.0, wider in +-1e-3) drawn by the stateless fill of the
    logical tensor keyed by the full name; vocabulary padding rows zero."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    out = {}
    for prefix, module, own in _own(model):
        for name, t in own.items():
            full = f"{prefix}.{name}" if prefix else name
            shape = list(t.shape)
            if isinstance(module, VocabParallelEmbedding):
                shape[0] = module.org_vocab_size
            value = getattr(t, "dummy_weight_value", None)
            if value is not None:
                g = torch.full(shape, value, dtype=t.dtype)
            else:
                g = L.checkpoint_tensor(full, shape, t.dtype, seed)
            want = torch.zeros(t.shape, dtype=t.dtype)
            if shape:
                want[: shape[0]] = g
            else:
                want.copy_(g)
            out[full] = want
    return out


def export(model: str, quant: str, folder: Path, routing: str = "balanced") -> Path:
    """``python -m fp8_dummy export`` of the model's config (its own format: the quantization's
    blocks) with seed 0, written to ``folder``/checkpoint: what fp8_dummy_realistic loads."""
    from fp8_dummy.realistic.export import export as write

    out = folder / "checkpoint"
    write(write_config(model, quant, folder / "source"), out, routing=routing, progress=False)
    return out


def load_safetensors(model: torch.nn.Module, model_config) -> set[str]:
    """vLLM's own safetensors loader (``--load-format safetensors``) on ``model_config``'s
    folder, into ``model`` as it stands; the names the model reports loaded."""
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    loader = get_model_loader(LoadConfig(load_format="safetensors"))
    seen: set[str] = set()
    own = model.load_weights

    def spy(weights):  # the names the model's load_weights returns
        names = own(weights)
        seen.update(names or ())
        return names

    model.load_weights = spy
    try:
        with torch.no_grad():
            loader.load_weights(model, model_config)
    finally:
        del model.load_weights
    return seen


def checkpoint(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The TP=1 model's parameters under an HF checkpoint's names: fused layers split into
    their shards (per-tensor scales one scalar each, block scales in blocks), experts one by
    one, the vocabulary without padding, everything else as named."""
    from vllm.model_executor.layers import linear as vl
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.parameter import BlockQuantScaleParameter, PerTensorScaleParameter

    out: dict[str, torch.Tensor] = {}
    params = {id(p) for p in model.parameters()}
    for prefix, module, own in _own(model):
        own = {n: t for n, t in own.items() if id(t) in params}
        if not own:
            continue
        if isinstance(module, RoutedExperts):
            _experts(prefix.removesuffix(".routed_experts"), own, out)
            continue
        if isinstance(module, VocabParallelEmbedding):
            for name, p in own.items():
                out[f"{prefix}.{name}"] = p.data[: module.org_vocab_size].clone()
            continue
        base, _, last = prefix.rpartition(".")
        if isinstance(module, (vl.QKVParallelLinear, vl.MergedColumnParallelLinear)):
            assert last in _FUSED, prefix
            if isinstance(module, vl.QKVParallelLinear):
                d, heads, kv = module.head_size, module.total_num_heads, module.total_num_kv_heads
                sizes = [heads * d, kv * d, kv * module.v_head_size]
            else:
                sizes = list(module.output_sizes)
            for name, p in own.items():
                if isinstance(p, PerTensorScaleParameter):  # one scalar per shard
                    parts = [p.data[i].clone() for i in range(len(sizes))]
                else:
                    if isinstance(p, BlockQuantScaleParameter):
                        b = module.weight_block_size[0]
                        rows = [-(-s // b) for s in sizes]
                    else:
                        rows = sizes
                    assert sum(rows) == p.shape[0], (prefix, name, rows, p.shape)
                    parts = [x.clone() for x in p.data.split(rows)]
                for shard, part in zip(_FUSED[last], parts):
                    out[f"{base}.{shard}.{name}"] = part
            continue
        for name, p in own.items():
            out[f"{prefix}.{name}"] = p.data.clone()
    return out


def _experts(base: str, own: dict, out: dict) -> None:
    """w13 (gate rows, then up rows) and w2 of each expert under the checkpoint's names
    ``{base}.{e}.gate_proj.weight`` ...; per-tensor scales: w13 one per shard, the input
    scale shared by gate and up; per-channel scales [E, 2I, 1]: gate rows, then up rows."""
    for name, p in own.items():
        kind, _, rest = name.partition("_")
        for e in range(p.shape[0]):
            if kind == "w2":
                out[f"{base}.{e}.down_proj.{rest}"] = p.data[e].clone()
                continue
            if rest == "input_scale":
                gate = up = p.data[e]
            elif rest == "weight_scale" and p.dim() == 2:  # per tensor: [E, 2]
                gate, up = p.data[e, 0], p.data[e, 1]
            else:
                gate, up = p.data[e].chunk(2)
            out[f"{base}.{e}.gate_proj.{rest}"] = gate.clone()
            out[f"{base}.{e}.up_proj.{rest}"] = up.clone()


def load_checkpoint(model: torch.nn.Module, ckpt: dict[str, torch.Tensor]) -> set[str]:
    """Zero every tensor, then the model's own ``load_weights`` (vLLM's loaders) from
    ``ckpt``; the names it reports loaded."""
    poison(model, 0)
    with torch.no_grad():
        return set(model.load_weights(iter(ckpt.items())))


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose bytes differ (or that one side lacks)."""
    bad = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.shape != y.shape or not torch.equal(as_bytes(x), as_bytes(y)):
            bad.append(name)
    return bad
