"""The ``config.json`` an export writes: the caller's config as written (every key under the
name the caller gave it: an engine that reads the raw file, not transformers' class, finds
what it expects), with the export's dtype and format, and every architecture fact the logical
model assumed written out, so that no reader falls back to a default of its own:

- the keys the transformers class reads with their values there (its defaults included:
  DeepSeek-V3's ``n_group``, ``topk_group``), but not under a second name where the caller
  wrote the first (``num_experts`` stays; no ``num_local_experts`` beside it), nor
  transformers' ``rope_parameters`` where the caller wrote ``rope_theta``/``rope_scaling``:
  the RoPE as those keys, every reader's, where the caller left them out; nor the layer-type
  lists transformers derives from Nemotron-H's pattern strings where the caller wrote those;
- ``architectures``: the class the model was built as;
- for routers that add a correction bias to sigmoid scores (DeepSeek-V3's class always does),
  ``scoring_func`` and ``topk_method`` ("noaux_tc"): a reader defaulting to softmax or greedy
  builds another router, or none for the bias;
- an architecture's own keys that the engines' classes read where transformers' config says
  the same otherwise (MiMo-V2-Flash's: :func:`_mimo_v2_keys`), or does not declare
  (Step-3.5-Flash's: :func:`_step3p5_keys`), where the caller left them out."""

from __future__ import annotations

import json
from typing import Any

import torch

from .logical import LogicalModel
from .routing import find_routers

__all__ = ["config_json"]

_NOT_COPIED = {"transformers_version", "dtype", "torch_dtype", "quantization_config"}
# A key transformers' class derives from a legacy one the caller wrote, in its own newer
# vocabulary (Nemotron-H's pattern strings -> layer-type lists of "linear_attention", ...):
# the caller's key alone, which older readers (SGLang 0.5.23's config class) also take.
_DERIVED = {"hybrid_override_pattern": "layers_block_type",
            "mtp_hybrid_override_pattern": "mtp_layers_block_type"}  # fmt: skip


def _rope(params: Any) -> dict:
    """transformers' ``rope_parameters`` as the keys every reader knows."""
    if not isinstance(params, dict) or "rope_theta" not in params:
        return {}
    out: dict[str, Any] = {"rope_theta": params["rope_theta"]}
    rest = {k: v for k, v in params.items() if k != "rope_theta"}
    if rest.get("rope_type", "default") != "default":
        out["rope_scaling"] = rest
    return out


def config_json(
    config: Any, lm: LogicalModel, floats: torch.dtype, raw: dict | None, architecture: str
) -> bytes:
    """The exported config.json's bytes; ``raw``: the caller's file as written (None: a config
    object, written as transformers writes it)."""
    theirs = json.loads(config.to_json_string(use_diff=True))
    data = dict(raw) if raw is not None else dict(theirs)
    written = set(data)
    aliases = getattr(type(config), "attribute_map", {}) or {}
    named = {target for alias, target in aliases.items() if alias in written}
    named |= {alias for alias, target in aliases.items() if target in written}
    named |= {derived for legacy, derived in _DERIVED.items() if legacy in written}
    for key, value in theirs.items():
        if key in written or key in named or key in _NOT_COPIED:
            continue
        if key == "rope_parameters":  # as the keys every reader knows, the caller's kept
            if "rope_parameters" not in written:
                for name, v in _rope(value).items():
                    data.setdefault(name, v)
            continue
        data[key] = value
    if not data.get("architectures"):
        data["architectures"] = [architecture]
    _router_facts(data, lm)
    own = _OWN_KEYS.get(getattr(type(config), "model_type", None))
    for key, value in (own(config) if own is not None else {}).items():
        data.setdefault(key, value)
    text = _OWN_TEXT_KEYS.get(getattr(type(config), "model_type", None))
    if text is not None and isinstance(data.get("text_config"), dict):
        data["text_config"].update(text)  # they describe the tensors written
    dtype = str(floats).removeprefix("torch.")
    data["dtype"] = dtype
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype
    data.pop("quantization_config", None)
    quant = lm.quantization_config()
    if quant is not None:
        data["quantization_config"] = quant
    data.update(_expert_dtype(config))
    return (json.dumps(data, indent=2) + "\n").encode()


def _mimo_v2_keys(config: Any) -> dict:
    """MiMo-V2-Flash's config.json keys that vLLM's and SGLang's MiMo-V2 classes (main and MTP
    layers) read, for the model transformers' class builds from its own keys: the sliding
    layers' heads with the kv heads doubled and attention sinks, the window without the query
    (transformers' ``sliding_window`` counts it), the 0/1 layer patterns, the norms' epsilon,
    and the per-type RoPE. Without them vLLM's class fails to build or builds another model (no
    sinks: the checkpoint's are skipped, no error)."""
    rope = getattr(config, "rope_parameters", None) or {}
    full, swa = rope.get("full_attention", {}), rope.get("sliding_attention", {})
    keys = {
        "swa_num_attention_heads": config.num_attention_heads,
        "swa_num_key_value_heads": 2 * config.num_key_value_heads,
        "swa_head_dim": config.head_dim,
        "swa_v_head_dim": config.v_head_dim,
        "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False,
        "sliding_window_size": config.sliding_window - 1,
        "hybrid_layer_pattern": [int(t == "sliding_attention") for t in config.layer_types],
        "moe_layer_freq": [int(t == "sparse") for t in config.mlp_layer_types],
        "layernorm_epsilon": config.rms_norm_eps,
    }
    for key, value in (("rope_theta", full.get("rope_theta")),
                       ("swa_rope_theta", swa.get("rope_theta")),
                       ("partial_rotary_factor", full.get("partial_rotary_factor"))):  # fmt: skip
        if value is not None:
            keys[key] = value
    return keys


def _step3p5_keys(config: Any) -> dict:
    """Step-3.5-Flash's config.json keys that vLLM's ``Step3p5ForCausalLM`` and ``Step3p5MTP``
    read and transformers' config does not declare, for the model transformers' decoder builds:
    the per-head attention gate (``g_proj``: without the key vLLM builds none and its main
    loader skips the checkpoint's), the router's bias and float32 gate (its asserts), the
    sigmoid scores and the top-k weights normalized (``norm_expert_weight``, read without a
    default)."""
    return {
        "use_head_wise_attn_gate": config.gating is True or config.gating == "per-head",
        "use_moe_router_bias": True,
        "need_fp32_gate": True,
        "moe_router_activation": "sigmoid",
        "norm_expert_weight": True,
    }


def _expert_dtype(config: Any) -> dict:
    """DeepSeek-V4's ``expert_dtype``: ``fp8`` in every format, whatever the caller's config
    said (a copy of DeepSeek-V4-Flash's says ``fp4``). vLLM 0.33 reads the key as a switch:
    ``fp4`` is DeepSeek-V4-Flash's MXFP4 experts (its FP8 config builds them with MXFP4's
    method and reads the linear scales as E8M0; its CPU name mapper renames a linear's
    ``weight_scale`` to ``weight_scale_inv``; its MegaMoE backends build MXFP4 experts),
    ``fp8`` the experts quantized as the quantization config says, or not at all: what the
    export writes (FP8 blocks, compressed-tensors' FP8, ModelOpt's NVFP4, bf16; ``mxfp4``
    refuses DeepSeek-V4). Without the key vLLM reads ``fp4``."""
    if getattr(type(config), "model_type", None) != "deepseek_v4":
        return {}
    return {"expert_dtype": "fp8"}


# model type -> its own config keys (of the config object) where the caller left them out
_OWN_KEYS = {"mimo_v2_flash": _mimo_v2_keys, "step3p5": _step3p5_keys}

# model type -> its text config's keys, whatever the caller's said: Inkling's multimodal
# checkpoint, whose text model transformers always builds with the dense MLP's global scale
# and the embedding's norm; vLLM's own Inkling config builds neither unless its keys say so
# (both off by default), and then refuses the checkpoint's `mlp.global_scale` and `embed_norm`
_OWN_TEXT_KEYS = {"inkling_mm_model": {"use_global_scale": True, "use_embed_norm": True}}


def _router_facts(data: dict, lm: LogicalModel) -> None:
    """The routing facts the logical model assumed, where the config left them implicit."""
    roles = {n: t.spec.role for n, t in lm.tensors.items()}
    shapes = {n: t.shape for n, t in lm.tensors.items()}
    try:
        routers = find_routers(roles, shapes, lm.config)
    except ValueError:  # a router the fill does not route: nothing assumed about it
        return
    for r in routers:
        if r.realize == "correction":
            data.setdefault("scoring_func", r.score)
            data.setdefault("topk_method", "noaux_tc")
            return
