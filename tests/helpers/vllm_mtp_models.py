"""vLLM 0.33's MTP draft classes (``DeepSeekMTP``, ``Glm4MoeMTP``, ``Qwen3NextMTP``,
``BailingMoeV25MTPModel``, ``Qwen3_5MTP``, ``Qwen3_5MoeMTP``, ``Glm4MoeLiteMTP``, ``GlmOcrMTP``,
``Exaone4_5_MTP``, ``NemotronHMTP``, ``ErnieMTP``, ``ExaoneMoeMTP``, ``HYV3MTP``, ``MiMoV2MTP``,
``LongCatFlashMTP``, ``BailingMoeV3MTPModel``, ``Qwen4ExpMTP``, ``DeepseekV32MTPModel``'s class
for DeepSeek-V3.2 and GLM-5, ``Glm5NextMTP``, ``MiniMaxM3MTP``, ``HYV4MTP``, ``Step3p5MTP``)
built on this CPU from tiny configs with MTP layers, for tests/test_engines_vllm_mtp.py (inside
its gloo workers: vLLM is imported lazily). Built as vLLM builds a draft: the target's
``ModelConfig``, a ``SpeculativeConfig`` (method ``mtp``, which turns the target's config into
the draft's: ``DeepSeekMTPModel``, ``Glm4MoeMTPModel``, ``Qwen3NextMTP``,
``BailingMoeV25MTPModel``, ``Qwen3_5MTP``, ``Qwen3_5MoeMTP``, ``Glm4MoeLiteMTPModel``,
``GlmOcrMTPModel``, ``Exaone4_5_MTP``, ``NemotronHMTPModel``, ``ErnieMTPModel``,
``ExaoneMoeMTP``, ``HYV3MTPModel``, ``MiMoV2MTPModel``, ``LongCatFlashMTPModel``,
``BailingMoeV3MTPModel``, ``Qwen4ExpMTP``, ``DeepseekV32MTPModel``, ``Glm5NextMTPModel``,
``MiniMaxM3MTP``, ``HYV4MTPModel``, ``Step3p5MTP``), a ``VllmConfig`` holding both, then the
model loader's ``create_model`` with the draft's model config, the way its proposer's
``get_model`` does. The replacements of
tests/helpers/vllm_invariant_models.py (``prepare``) apply, two of transformers' image modules
where torchvision is missing, for Qwen4-Exp its QSA attention's FlashAttention check
(helpers/vllm_qsa_flash_attention_stub.py) and for the indexed sparse MLA its backend choice
(helpers/vllm_sparse_mla.py), and for NVFP4 its linear kernel and MoE backend choices
(helpers/vllm_nvfp4_cpu.py) (:func:`build`); the oracle is the same: the export of the config,
read by vLLM's own safetensors loader into a twin."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers import vllm_invariant_models as M

ARCHITECTURES = {"glm4_moe": "Glm4MoeForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}
ARCHITECTURES["bailing_hybrid"] = "BailingMoeV2_5ForCausalLM"  # Ling/Ring-2.5's own
ARCHITECTURES["nemotron_h"] = "NemotronHForCausalLM"
ARCHITECTURES.update(qwen3_5_text="Qwen3_5ForCausalLM", qwen3_5_moe_text="Qwen3_5MoeForCausalLM")
ARCHITECTURES["glm4_moe_lite"] = "Glm4MoeLiteForCausalLM"  # GLM-4.7-Flash
ARCHITECTURES["ernie4_5_moe"] = "Ernie4_5_MoeForCausalLM"
ARCHITECTURES["exaone_moe"] = "ExaoneMoeForCausalLM"
ARCHITECTURES["hy_v3"] = "HYV3ForCausalLM"
ARCHITECTURES["hy_v4"] = "HYV4ForCausalLM"
ARCHITECTURES["glm_ocr"] = "GlmOcrForConditionalGeneration"  # vLLM's only GLM-OCR class
ARCHITECTURES["exaone4_5"] = "Exaone4_5_ForConditionalGeneration"
ARCHITECTURES["mimo_v2_flash"] = "MiMoV2FlashForCausalLM"
ARCHITECTURES["longcat_flash"] = "LongcatFlashForCausalLM"
# Ling-3.0's own class (transformers' bailing_hybrid is Ling-3.0's KDA/MLA model): vLLM drafts
# with BailingMoeV3MTPModel where the config names it, BailingMoeV25MTPModel where it names 2.5's
ARCHITECTURES["bailing_v3"] = "BailingMoeV3ForCausalLM"
ARCHITECTURES["qwen4_exp_text"] = "Qwen4ExpForCausalLM"
# DeepSeek-V3.2 and GLM-5 (vLLM drafts both with DeepseekV32MTPModel), GLM-5-Next: their MTP
# layers' attention is the indexed sparse MLA (helpers/vllm_sparse_mla.py builds it on the CPU)
ARCHITECTURES["deepseek_v32"] = "DeepseekV32ForCausalLM"
ARCHITECTURES["glm_moe_dsa"] = "GlmMoeDsaForCausalLM"
ARCHITECTURES["glm5_next"] = "Glm5NextForConditionalGeneration"
# Keys GLM-5-Next's config.json has in its text config, which vLLM's classes read (transformers'
# config names none of them): the hyper-connections on, the NoPE MLA, the router's scoring
GLM5_NEXT_KEYS = dict(mhc=True, mla_use_nope=True, indexer_rope_interleave=False,
                      topk_method="noaux_tc", scoring_func="sigmoid")  # fmt: skip
ARCHITECTURES["minimax_m3_vl"] = "MiniMaxM3SparseForConditionalGeneration"  # vLLM's only one
ARCHITECTURES["step3p5"] = "Step3p5ForCausalLM"  # Step-3.5-Flash's text checkpoint
# Parameters of a draft class that no loader writes: vLLM's proposer replaces them with the
# target's (``_maybe_share_lm_head``: an MTP model shares the target's lm_head). LongCat's
# ``load_weights`` reads only ``model.mtp.`` names, so its own ``lm_head`` is never loaded.
SHARED = {"longcat_flash": ("lm_head.weight",)}
# HY-V4's loader reads the checkpoint's lm_head into the first MTP layer's head alone: a second
# MTP layer's (the config's two main layers: model.layers.3.) is the target's at run time too
SHARED["hy_v4"] = ("model.layers.3.shared_head.head.weight",)


def padding(model: str, config) -> dict[str, int]:
    """A draft class's parameters whose rows from the given one on no checkpoint tensor holds:
    Qwen4-Exp's merged hyper-connection projection ``input_mix_weight_down_block_inject`` (the
    down projection's ``hc_lowrank`` rows, the injection's ``hc_count``) is padded to a multiple
    of 16 rows (``_input_mix_padding``), which its forward splits off unread; neither loader
    writes them."""
    if not model.startswith("qwen4_exp"):
        return {}
    return {"input_mix_weight_down_block_inject.weight": config.hc_lowrank + config.hc_count}


def fields(model: str, mtp: int = 1) -> dict:
    """config.json's fields of ``model`` at this harness's sizes (helpers/vllm_invariant_models'
    COMMON: hidden 64, vocabulary 200, two decoder layers; Qwen3-Next and Qwen3.5 four):
    DeepSeek-V3 as there, GLM-4.5, Qwen3-Next, Ling's hybrid (Bailing, one MTP layer), Qwen3.5's
    text models, Nemotron-H (four layers, one MTP step: attention, MoE), ERNIE 4.5 MoE, EXAONE-
    MoE, HY-V3, MiMo-V2-Flash, LongCat-Flash, Qwen4-Exp's text model and HY-V4 as
    tests/helpers/speculative.py makes them (HY-V4 with the keys of its config.json vLLM reads);
    Ling-3.0 (``bailing_v3``): Ling's hybrid config naming its own class; Step-3.5-Flash's
    text checkpoint with ``mtp`` MTP layers (its layer lists cover them, as its config.json's:
    vLLM reads an MTP layer's types there)."""
    if model == "deepseek_v3":
        return dict(M.COMMON, **M.MODELS[model])
    from helpers import speculative as H

    arch = ARCHITECTURES[model]
    model = {"bailing_v3": "bailing_hybrid"}.get(model, model)  # one config, another class
    mtp = (
        mtp
        if model in H.MORE or model in ("glm_ocr", "exaone4_5", "glm5_next", "minimax_m3_vl")
        else 0
    )
    cfg = H.config(model, hidden=64, vocab=200, head_dim=16, max_position_embeddings=256, mtp=mtp)
    out = dict(cfg.to_dict(), architectures=[arch], torch_dtype="bfloat16")
    if model == "nemotron_h":  # as its checkpoints' config.json: the patterns (SGLang reads them)
        out["hybrid_override_pattern"] = cfg.hybrid_override_pattern
        out["mtp_hybrid_override_pattern"] = cfg.mtp_hybrid_override_pattern
        del out["layers_block_type"], out["mtp_layers_block_type"]
    if model == "glm5_next":
        out["text_config"] = dict(out["text_config"], **GLM5_NEXT_KEYS)
    if model == "hy_v3":  # keys HY-V3's config.json has, which vLLM reads (transformers: others)
        out.update(expert_hidden_dim=cfg.moe_intermediate_size, route_norm=True, qk_norm=True)
    if model == "minimax_m3_vl":
        out["text_config"] = minimax_m3_released(out["text_config"])
    if model == "step3p5":  # 32 heads: the per-head gate g_proj's rows (one a head) a multiple of
        # the harness's 16-row FP8 blocks on each of two ranks (vLLM checks each rank's)
        out.update(num_attention_heads=32, num_sliding_attention_heads=32)
    if model == "hy_v4":  # keys HY-V4's config.json has, which vLLM reads (transformers' class
        # always builds the attention's output gate, elementwise, its sinks and the iHC streams)
        out.update(gated_mla=True, gating_type="elementwise", learnable_sink=True, enable_ihc=True)
    if model == "bailing_hybrid":  # keys Ling-2.5's config.json has, which vLLM reads
        out.update(use_bias=False, score_function="sigmoid", moe_router_enable_expert_bias=True,
                   moe_shared_expert_intermediate_size=cfg.moe_intermediate_size)  # fmt: skip
    return out


def minimax_m3_released(text: dict) -> dict:
    """MiniMax-M3's text config as its release writes it, with the keys vLLM's own config
    (``MiniMaxM3TextConfig``) reads where transformers' names them otherwise (transformers reads
    these too: its config turns the two lists into its layer types): the clamped SwiGLU's name,
    the sigmoid router with its correction bias, one shared expert (of the routed experts'
    width), the rotated part of a head as a fraction, the MoE layers and the sparse attention's
    indexer as 0/1 lists and a dict."""
    sparse = [int(t == "minimax_m3_sparse") for t in text["layer_types"]]
    indexer = dict(use_sparse_attention=True, sparse_index_dim=text["index_head_dim"],
                   sparse_num_index_heads=text["index_n_heads"],
                   sparse_topk_blocks=text["index_topk_blocks"],
                   sparse_block_size=text["index_block_size"], sparse_disable_index_value=sparse,
                   sparse_score_type="max", sparse_init_block=0,
                   sparse_local_block=text["index_local_blocks"],
                   sparse_attention_freq=sparse)  # fmt: skip
    assert text["shared_intermediate_size"] == text["intermediate_size"]  # vLLM's reading
    return dict(text, hidden_act="swigluoai", n_shared_experts=1, scoring_func="sigmoid",
                use_routing_bias=True, rope_theta=text["rope_parameters"]["rope_theta"],
                partial_rotary_factor=text["rotary_dim"] / text["head_dim"],
                moe_layer_freq=[int(t == "sparse") for t in text["mlp_layer_types"]],
                sparse_attention_config=indexer)  # fmt: skip


def as_released(config: dict) -> dict:
    """MiMo-V2-Flash's config as its release writes config.json: its own keys for what
    transformers' config names otherwise (the sliding layers' sizes: transformers doubles the kv
    heads; the layer patterns as 0/1 lists; the window without the query; the norms' epsilon),
    its RoPE as flat keys (no rope_parameters), which vLLM's classes read."""
    import transformers as tf

    cfg = tf.AutoConfig.for_model(**config)
    rope = cfg.rope_parameters
    own = dict(
        swa_num_attention_heads=cfg.num_attention_heads,
        swa_num_key_value_heads=2 * cfg.num_key_value_heads, swa_head_dim=cfg.head_dim,
        swa_v_head_dim=cfg.v_head_dim, add_swa_attention_sink_bias=True,
        add_full_attention_sink_bias=False, sliding_window_size=cfg.sliding_window - 1,
        hybrid_layer_pattern=[int(t == "sliding_attention") for t in cfg.layer_types],
        moe_layer_freq=[int(t == "sparse") for t in cfg.mlp_layer_types],
        layernorm_epsilon=cfg.rms_norm_eps, rope_theta=rope["full_attention"]["rope_theta"],
        swa_rope_theta=rope["sliding_attention"]["rope_theta"],
        partial_rotary_factor=rope["full_attention"]["partial_rotary_factor"],
    )  # fmt: skip
    out = {k: v for k, v in config.items() if k != "rope_parameters"}
    return dict(out, **own)


# (model, quantization, MTP layers, draft tokens, acceptance): the designed stream at one and
# two MTP layers (two draft tokens: a per-position list), FP8 block, and the plain MTP layers.
CASES = [
    ("deepseek_v3", "bf16", 1, 1, 0.6),
    ("deepseek_v3", "blk", 2, 2, "0.8,0.5"),
    ("deepseek_v3", "bf16", 1, 3, None),
    ("glm4_moe", "bf16", 1, 1, 0.6),
    ("qwen3_next", "bf16", 1, 1, 0.6),
    ("bailing_hybrid", "bf16", 1, 1, 0.6),
    ("nemotron_h", "bf16", 1, 1, 0.6),
    ("qwen3_5_text", "bf16", 1, 1, 0.6),
    ("qwen3_5_moe_text", "bf16", 2, 2, "0.8,0.5"),
    ("glm4_moe_lite", "bf16", 1, 1, 0.6),
    ("ernie4_5_moe", "bf16", 1, 1, 0.6),
    ("exaone_moe", "bf16", 1, 1, 0.6),
    ("hy_v3", "bf16", 1, 1, 0.6),
    ("hy_v4", "bf16", 1, 1, 0.6),
    ("hy_v4", "bf16", 2, 2, "0.8,0.5"),
    ("glm_ocr", "bf16", 1, 1, 0.6),
    ("exaone4_5", "bf16", 1, 1, 0.6),
    ("mimo_v2_flash", "bf16", 1, 1, 0.6),
    ("mimo_v2_flash", "blk", 3, 2, "0.8,0.5"),
    ("longcat_flash", "bf16", 1, 1, 0.6),
    ("bailing_v3", "bf16", 1, 1, 0.6),
    ("bailing_v3", "blk", 2, 2, "0.8,0.5"),
    ("qwen4_exp_text", "bf16", 1, 1, 0.6),
    ("qwen4_exp_text", "bf16", 2, 2, "0.8,0.5"),
    ("deepseek_v32", "bf16", 1, 1, 0.6),
    ("glm_moe_dsa", "bf16", 1, 1, 0.6),
    ("glm5_next", "bf16", 1, 1, 0.6),
    ("minimax_m3_vl", "bf16", 1, 1, 0.6),
    ("minimax_m3_vl", "bf16", 2, 2, "0.8,0.5"),
    ("step3p5", "bf16", 1, 1, 0.6),
    ("step3p5", "bf16", 2, 2, "0.8,0.5"),
]


# Every architecture's MTP layer in each quantized format: FP8 blocks as the config's own
# (``blk``: the harness's [16, 16] blocks, which these hidden-64 models divide), the others as
# ``export --format`` writes them from a bf16 config (a case's quantization -> that format)
EXPORT_FORMATS = {"fp8-tensor": "fp8", "fp8-channel": "fp8-channel", "nvfp4": "nvfp4"}
CASES += [(m, q, 1, 1, 0.6) for m in dict.fromkeys(c[0] for c in CASES)
          for q in ("blk", *EXPORT_FORMATS)]  # fmt: skip
# Cases whose export fp8_dummy refuses before writing (vLLM 0.33's draft class cannot load the
# format's MTP scales: LongCat-Flash's maps them by ``weight_scale_inv`` names alone,
# MiniMax-M3's renames them to ``weight_scale``, its fused q/k/v/index projection's per-tensor
# scale takes the shard ids q, k, v alone, and its NVFP4 lm_head is one no list names)
REFUSED = {("longcat_flash", q) for q in ("fp8-tensor", "fp8-channel", "nvfp4")}
REFUSED |= {("minimax_m3_vl", q) for q in ("blk", "fp8-tensor", "nvfp4")}
# GLM-OCR's and HY-V3's MTP head, which vLLM builds with the NVFP4 method under a name no list of
# the checkpoint's reaches
REFUSED |= {("glm_ocr", "nvfp4"), ("hy_v3", "nvfp4")}
# Step-3.5's Step3p5MTP, whose loader requires every parameter loaded, compressed-tensors'
# attention KV-cache ones (no checkpoint holds them) included
REFUSED |= {("step3p5", q) for q in ("fp8-tensor", "fp8-channel")}
# HY-V4's fused routed experts and Step-3.5's packed ones are quantized in the FP8 formats
# alone: NVFP4 refused (the model)
REFUSED_MODEL = {("hy_v4", "nvfp4"), ("step3p5", "nvfp4")}


# A draft model (``export --draft``) of a Llama target: vLLM's Llama class from the draft's
# config, its "fp8_dummy_draft" mark read through vLLM's own config loading.
DRAFT = ("llama", "bf16", 0, 4, 0.7)


def key(case: tuple) -> str:
    if case == DRAFT:
        return "draft-model"
    model, quant, layers, k, acceptance = case
    return f"{model}-{quant}-{layers}mtp-k{k}-{acceptance}"


def write_config(case: tuple, folder: Path) -> Path:
    model, quant, layers, _, _ = case
    folder.mkdir(parents=True, exist_ok=True)
    # the MTP layer count under the key vLLM reads (Qwen3.5's own)
    own = model.startswith(("qwen3_5", "qwen4_exp"))
    count = "mtp_num_hidden_layers" if own else "num_nextn_predict_layers"
    # Step-3.5's layer lists cover its MTP layers: made for the case's count
    config = dict(fields(model, layers if model == "step3p5" else 1), **{count: layers})
    if model in ("glm_ocr", "glm5_next"):  # its text config's (vLLM's MTP class reads it there)
        config["text_config"] = dict(config["text_config"], **{count: layers})
    if model == "minimax_m3_vl":  # its text config's num_mtp_modules (vLLM's MiniMaxM3MTP's)
        del config[count]
        config["text_config"] = dict(config["text_config"], num_mtp_modules=layers)
    if model == "mimo_v2_flash" and quant != "bf16":  # bf16: as transformers writes it (the
        config = as_released(config)  # export writes MiMo's own keys vLLM reads)
    if M.QUANTS.get(quant):
        config["quantization_config"] = M.QUANTS[quant]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def export(case: tuple, folder: Path) -> Path:
    """fp8_dummy's export of the case's config with its acceptance, seed 0 (Qwen3-Next's
    ``A_log``, which no role covers, with its assumed values); for :data:`DRAFT`, the draft
    model's checkpoint that ``export --draft`` writes beside the target's."""
    from fp8_dummy.realistic.export import export as write
    from fp8_dummy.realistic.export import main

    out = folder / "checkpoint"
    if case == DRAFT:
        source = folder / "source"
        source.mkdir(parents=True, exist_ok=True)
        (source / "config.json").write_text(json.dumps(dict(M.COMMON, **M.MODELS["llama"])))
        args = [str(source), str(folder / "target"), "--acceptance", str(case[4]), "--quiet"]
        assert main(args + ["--draft", str(out), "--draft-hidden", "64"]) == 0
        return out
    source = write_config(case, folder / "source")
    fmt = EXPORT_FORMATS.get(case[1])  # else the config's own
    write(source, out, acceptance=case[4], progress=False, allow_unknown=True, format=fmt)
    return out


# transformers' image processor modules that import torchvision -> (their PIL twin, the
# torchvision class's name -> the PIL class's) for the names vLLM's classes import from them
_PIL_TWINS = {
    "qwen2_vl.image_processing_qwen2_vl": ("qwen2_vl.image_processing_pil_qwen2_vl", {}),
    "glm4v.image_processing_glm4v": (
        "glm4v.image_processing_pil_glm4v", {"Glm4vImageProcessor": "Glm4vImageProcessorPil"}
    ),
}  # fmt: skip


def _image_module_without_torchvision() -> None:
    """vLLM's Qwen3.5 and GLM-OCR classes import ``smart_resize`` (and GLM's image processor
    class) from transformers' Qwen2-VL and GLM-4V image processor modules, which import
    torchvision, not in the engines' environment here; the PIL processors' modules hold the
    same function and a processor class of the same interface. No image is processed: where
    torchvision is missing, those module names are given a module of the PIL one's names (the
    torchvision class's name for the PIL class)."""
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("torchvision") is not None:
        return
    for name, (pil_name, aliases) in _PIL_TWINS.items():
        pil = importlib.import_module(f"transformers.models.{pil_name}")
        twin = types.ModuleType(f"transformers.models.{name}")
        twin.__dict__.update({k: v for k, v in vars(pil).items() if not k.startswith("__")})
        twin.__dict__.update({a: getattr(pil, p) for a, p in aliases.items()})
        sys.modules.setdefault(twin.__name__, twin)


def build(folder: Path, world: int, k: int, method: str = "mtp", draft: Path | None = None):
    """(draft model, vllm_config, draft model_config): the MTP draft of the target config in
    ``folder`` at TP=``world`` with ``k`` speculative tokens, as vLLM creates it (``method``
    another speculative method, of the draft in ``draft``: ``eagle3``); a draft model's folder
    (``export --draft``'s): its own model, as vLLM builds any."""
    if json.loads((folder / "config.json").read_text()).get("fp8_dummy_draft"):
        return M.build_from(folder, world)
    from vllm.config import set_current_vllm_config
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    from helpers import vllm_nvfp4_cpu

    vllm_config, draft = configs(folder, world, k, method, draft)
    loader = get_model_loader(LoadConfig(load_format="dummy"))
    with set_current_vllm_config(vllm_config), vllm_nvfp4_cpu.choices():
        with set_default_torch_dtype(draft.dtype), torch.device("cpu"):
            model = loader.create_model(vllm_config=vllm_config, model_config=draft)
    return model, vllm_config, draft


def configs(folder: Path, world: int, k: int, method: str = "mtp", draft: Path | None = None,
            eager: bool = False):  # fmt: skip
    """(vllm_config, draft model_config) of :func:`build`'s draft; ``eager``: the target's
    model config says ``enforce_eager`` (vLLM then registers no JIT kernel warmups)."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    _image_module_without_torchvision()
    if json.loads((folder / "config.json").read_text()).get("model_type", "").startswith("qwen4"):
        from helpers import vllm_qsa_flash_attention_stub

        vllm_qsa_flash_attention_stub.install()  # its MTP layer's QSA: the one GPU-only check
    target = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16",
                         enforce_eager=eager)  # fmt: skip
    parallel = ParallelConfig(tensor_parallel_size=world)
    spec = SpeculativeConfig(
        method=method, num_speculative_tokens=k, target_model_config=target,
        target_parallel_config=parallel, model=None if draft is None else str(draft),
    )  # fmt: skip
    # without prefix caching: a hybrid model's (Ling's) mamba block size is then the model's
    # length, which vLLM's check of the whole config requires where the CPU platform turns it off
    vllm_config = VllmConfig(
        model_config=target, device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel, speculative_config=spec,
        cache_config=CacheConfig(enable_prefix_caching=False),
    )  # fmt: skip
    return vllm_config, spec.draft_model_config
