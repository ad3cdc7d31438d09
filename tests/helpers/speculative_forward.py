"""MTP layers transformers cannot run (Qwen3-Next, Qwen3.5, GLM-4.7-Flash, GLM-OCR, EXAONE 4.5,
ERNIE 4.5 MoE, EXAONE-MoE, HY-V3, MiniMax-M3: their configs declare no ``num_mtp_layers``;
Step-3.5-Flash's text checkpoint: no class of transformers loads it;
Bailing's hybrid and Nemotron-H: stateful models, which assisted generation refuses), run
independently of fp8_dummy and of any engine, as vLLM's MTP classes compute them
(``Qwen3NextMTP``, ``Qwen3_5MTP``, ``Qwen3_5MoeMTP``, ``ExaoneMoeMTP``,
``BailingMoeV25MTPModel``, ``BailingMoeV3MTPModel``, ``Glm4MoeLiteMTP``, ``GlmOcrMTP``,
``Exaone4_5_MTP``, ``NemotronHMTP``, ``ErnieMTP``, ``HYV3MTP``, ``MiniMaxM3MTP``,
``Step3p5MTP``): the input
projection of the normalized embedding and the target's last hidden state, the MTP decoder block
(transformers' own decoder layer, full attention (EXAONE-MoE's: the config's first layer type;
MiniMax-M3's: its sparse attention), loaded from the export as a one-layer model of the target's
class: GLM-OCR's and EXAONE 4.5's multimodal one; Nemotron-H's step: its attention and MoE
layers as a two-layer model), the MTP layer's final norm (ERNIE: none) and the lm_head; reused
for k draft tokens, each on the sequence with the drafts so far, and verified against the
target's greedy tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers as tf

from .speculative import read

# Where each layout keeps its MTP layer (L: the main layers): the block, the input projection,
# the norms of the embedding, the hidden state and the output, and the norms' offset (1 + w)
LAYOUTS = {
    "qwen3_next": dict(block="mtp.layers.0.", fc="mtp.fc", embed="mtp.pre_fc_norm_embedding",
                       hidden="mtp.pre_fc_norm_hidden", out="mtp.norm", offset=1.0),
    "bailing_hybrid": dict(block="model.layers.{L}.", fc="model.layers.{L}.eh_proj",
                           embed="model.layers.{L}.enorm", hidden="model.layers.{L}.hnorm",
                           out="model.layers.{L}.final_layernorm", offset=0.0),
}  # fmt: skip
# Ling-3.0 (vLLM's BailingMoeV3MTPModel): the same names and computation, but the embedding at
# position 0 as it is (BailingMoeV25MTPModel masks it to zero)
LAYOUTS["bailing_v3"] = dict(LAYOUTS["bailing_hybrid"])
LAYOUTS["bailing_hybrid"]["mask_first"] = True
# Nemotron-H: its MTP step (attention, MoE: mtp.layers.0-1.) run as a model of those two layers
LAYOUTS["nemotron_h"] = dict(block="mtp.layers.", fc="mtp.layers.0.eh_proj",
                             embed="mtp.layers.0.enorm", hidden="mtp.layers.0.hnorm",
                             out="mtp.layers.1.final_layernorm", offset=0.0,
                             into="backbone.layers.", norm="backbone.norm_f.weight")  # fmt: skip
LAYOUTS["qwen3_5_text"] = LAYOUTS["qwen3_5_moe_text"] = LAYOUTS["qwen3_next"]  # the same names
LAYOUTS["glm4_moe_lite"] = dict(LAYOUTS["bailing_hybrid"], out="model.layers.{L}.shared_head.norm")
# ERNIE 4.5 MoE (vLLM's ErnieMTP): a dense block and no final norm, its output straight to the
# lm_head (here a norm of weight 1: a positive scale, which no argmax sees, and the next step's
# hidden state is normalized anyway); the embedding at position 0 masked to zero
LAYOUTS["ernie4_5_moe"] = dict(block="model.mtp_block.0.", fc="model.mtp_linear_proj.0",
                               embed="model.mtp_emb_norm.0", hidden="model.mtp_hidden_norm.0",
                               out=None, offset=0.0, mask_first=True)  # fmt: skip
# EXAONE-MoE (vLLM's ExaoneMoeMTP): Qwen3-Next's names, plain norms, a dense block whose
# attention is the config's first layer type (vLLM's reading where no mtp_layer_types), RoPE
LAYOUTS["exaone_moe"] = dict(LAYOUTS["qwen3_next"], offset=0.0, dense=True, first_type=True)
# HY-V3 (vLLM's HYV3MTP): Ling's names, the embedding at position 0 masked to zero as ERNIE's
LAYOUTS["hy_v3"] = dict(LAYOUTS["bailing_hybrid"], mask_first=True)
# GLM-OCR: GLM-4.7-Flash's names under its language model, run as its multimodal class
LAYOUTS["glm_ocr"] = {k: v.replace("model.", "model.language_model.", 1) if isinstance(v, str)
                      else v for k, v in LAYOUTS["glm4_moe_lite"].items()}  # fmt: skip
LAYOUTS["glm_ocr"].update(into="model.language_model.layers.0.",
                          norm="model.language_model.norm.weight")  # fmt: skip
# EXAONE 4.5: Qwen3-Next's names, plain norms, run as its multimodal class
LAYOUTS["exaone4_5"] = dict(LAYOUTS["qwen3_next"], offset=0.0,
                            into="model.language_model.layers.0.",
                            norm="model.language_model.norm.weight")  # fmt: skip
# LongCat-Flash (vLLM's LongCatFlashMTP): its block is vLLM's DeepseekV2DecoderLayer without
# experts (one MLA attention, a dense MLP), run as a one-layer dense DeepSeek-V3 model; the
# embedding copy under model.mtp. (the lookup is the target's, as vLLM's proposer shares it)
LAYOUTS["longcat_flash"] = dict(block="model.mtp.layers.0.", fc="model.mtp.layers.0.eh_proj",
                                embed="model.mtp.layers.0.enorm.m",
                                hidden="model.mtp.layers.0.hnorm.m", out="model.mtp.norm",
                                offset=0.0, longcat=True)  # fmt: skip


# MiMo-V2-Flash (vLLM's MiMoV2MTP): model.mtp.layers.0. its plain norms, eh_proj (the normalized
# embedding first) and a dense block whose attention is the sliding one (sinks, the doubled kv
# heads), its norm before the MLP named pre_mlp_layernorm (transformers' post_attention_layernorm)
LAYOUTS["mimo_v2_flash"] = dict(
    block="model.mtp.layers.0.", fc="model.mtp.layers.0.eh_proj", embed="model.mtp.layers.0.enorm",
    hidden="model.mtp.layers.0.hnorm", out="model.mtp.layers.0.final_layernorm", offset=0.0,
    dense=True, layer_type="sliding_attention",
    rename={"pre_mlp_layernorm.": "post_attention_layernorm."},
)  # fmt: skip


# MiniMax-M3 (vLLM's MiniMaxM3MTP): under the multimodal checkpoint's language model, Gemma
# norms (1 + w), the embedding at position 0 masked to zero, its block the sparse (indexed)
# attention and MoE under transformer_layer., run as its multimodal class
_M3 = "language_model.model.mtp.layers.0."
LAYOUTS["minimax_m3_vl"] = dict(
    block=_M3 + "transformer_layer.", fc=_M3 + "eh_proj", embed=_M3 + "enorm",
    hidden=_M3 + "hnorm", out=_M3 + "final_layernorm", offset=1.0, mask_first=True,
    layer_type="minimax_m3_sparse", into="language_model.model.layers.0.",
    norm="language_model.model.norm.weight", head="language_model.lm_head.weight",
)  # fmt: skip


def _rms(x: torch.Tensor, w: torch.Tensor, offset: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (offset + w.float())


def _longcat_block(out: Path, t: dict, names: dict, work: Path) -> torch.nn.Module:
    """LongCat-Flash's MTP block as vLLM's ``LongCatFlashMTP`` computes it: a DeepSeek-V2
    decoder layer built with no routed experts (MLA attention, a dense MLP of the config's
    ``intermediate_size``), its LoRA norms scaled by √(hidden/rank) as its weight loader
    scales them (``scale_mla_lora_norms_on_load``), the MTP layer's final norm and the
    target's lm_head: a one-layer dense DeepSeek-V3 model that transformers' loader reads."""
    from safetensors.torch import save_file

    one = work / "mtp-as-deepseek"
    one.mkdir(parents=True, exist_ok=True)
    lc = tf.AutoConfig.from_pretrained(out)
    keys = ("hidden_size", "vocab_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rms_norm_eps",
            "max_position_embeddings", "intermediate_size")  # fmt: skip
    ds = tf.DeepseekV3Config(**{k: getattr(lc, k) for k in keys}, num_hidden_layers=1,
                             num_key_value_heads=lc.num_attention_heads, first_k_dense_replace=1,
                             rope_parameters=lc.rope_parameters, tie_word_embeddings=False,
                             rope_interleave=True)  # fmt: skip
    ds.save_pretrained(one)
    b, into = names["block"], "model.layers.0."
    ours = {
        into + n[len(b) :].replace("transformer_layer.", ""): v
        for n, v in t.items()
        if n.startswith(b)
        and n[len(b) :].startswith(
            ("self_attn.", "transformer_layer.", "input_layernorm", "post_attention")
        )
    }
    for x, rank in (("q", lc.q_lora_rank), ("kv", lc.kv_lora_rank)):
        if getattr(lc, f"mla_scale_{x}_lora"):  # the key vLLM reads (its config.json's)
            ours[f"{into}self_attn.{x}_a_layernorm.weight"] *= (lc.hidden_size / rank) ** 0.5
    ours["model.embed_tokens.weight"] = t["model.embed_tokens.weight"]
    ours["model.norm.weight"] = t[names["out"] + ".weight"]
    ours["lm_head.weight"] = t["lm_head.weight"]
    save_file({n: torch.from_numpy(v).to(torch.bfloat16) for n, v in ours.items()},
              str(one / "model.safetensors"))  # fmt: skip
    return _load(one)


# Step-3.5-Flash's text checkpoint (vLLM's Step3p5MTP): DeepSeek's names but its head's copy
# shared_head.output, Gemma norms (1 + w), a dense block of the config's MTP layer types; run by
# transformers' decoder with the checkpoint renamed in the test (helpers/step3p5_model.py)
LAYOUTS["step3p5"] = dict(block="model.layers.{L}.", fc="model.layers.{L}.eh_proj",
                          embed="model.layers.{L}.enorm", hidden="model.layers.{L}.hnorm",
                          out="model.layers.{L}.shared_head.norm", offset=1.0,
                          step3p5=True)  # fmt: skip


def _block_model(out: Path, t: dict, names: dict, work: Path) -> torch.nn.Module:
    """The MTP block as a one-layer model of the target's class (full attention, MoE), its
    final norm the MTP layer's: transformers' own loader reads it."""
    from safetensors.torch import save_file

    if names.get("step3p5"):
        from . import step3p5_model

        return step3p5_model.mtp_block(out, t, names["block"])
    if names.get("longcat"):
        return _longcat_block(out, t, names, work)
    one = work / "mtp-as-model"
    one.mkdir(parents=True, exist_ok=True)
    whole = tf.AutoConfig.from_pretrained(out)
    small = whole.get_text_config()  # GLM-OCR: its text config (the rest as the target's)
    if "backbone." in names.get("into", ""):  # Nemotron-H: the step's own layer types
        small.layers_block_type, small.num_nextn_predict_layers = small.mtp_layers_block_type, 0
    else:
        first = small.layer_types[0] if names.get("first_type") else "full_attention"
        first = names.get("layer_type", first)
        small.num_hidden_layers, small.layer_types = 1, [first]
    if getattr(small, "mlp_layer_types", None) is not None:
        small.mlp_layer_types = ["dense" if names.get("dense") else "sparse"]
    if getattr(small, "first_k_dense_replace", None) is not None:
        small.first_k_dense_replace = 0
    if getattr(small, "moe_layer_start_index", None) is not None:  # ERNIE: its layer 0 dense
        small.moe_layer_start_index = 1
    if hasattr(small, "num_nextn_predict_layers"):
        small.num_nextn_predict_layers = 0
    whole.save_pretrained(one)
    ends = ("embed_tokens.weight", "word_embeddings.weight", "backbone.embeddings.weight")
    (embed,) = [n for n in t if n.endswith(ends) and "layers." not in n]
    out_norm = np.ones(small.hidden_size) if names["out"] is None else t[names["out"] + ".weight"]
    ours = {embed: t[embed], names.get("norm", "model.norm.weight"): out_norm}
    head = names.get("head", "lm_head.weight")  # MiniMax-M3's under its language model
    ours[head] = t[head]
    b, into = names["block"], names.get("into", "model.layers.0.")
    for n, v in t.items():
        if n.startswith(b):
            rest = n[len(b) :]
            for old, new in names.get("rename", {}).items():
                rest = rest.replace(old, new)
            ours[into + rest] = v
    save_file({n: torch.from_numpy(v).to(torch.bfloat16) for n, v in ours.items()},
              str(one / "model.safetensors"))  # fmt: skip
    return _load(one)


def _load(folder: Path) -> torch.nn.Module:
    """transformers' model of the checkpoint in ``folder``: its causal LM, else (GLM-OCR) its
    image-text-to-text class, which holds the lm_head."""
    try:
        return tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    except ValueError:
        return tf.AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()


def independent_mtp_acceptance(out: Path, arch: str, k: int, work: Path, prompts: int = 3,
                               tokens: int = 80, vocab: int = 1024) -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy MTP decoding with k draft tokens, the MTP layer
    of ``arch``'s export run as above."""
    t = read(out)
    if LAYOUTS[arch].get("step3p5"):  # transformers has no class that loads its checkpoint
        from . import step3p5_model

        target = step3p5_model.target(out, t)
    else:
        target = _load(out)
    main = target.config.get_text_config().num_hidden_layers
    names = {key: v.format(L=main) if isinstance(v, str) else v for key, v in LAYOUTS[arch].items()}
    block = _block_model(out, t, names, work)
    fc = torch.from_numpy(t[names["fc"] + ".weight"]).float()
    ne, nh = (torch.from_numpy(t[names[w] + ".weight"]) for w in ("embed", "hidden"))
    c = names["offset"]
    embed = target.get_input_embeddings()
    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            hidden = target(seq[None], output_hidden_states=True).hidden_states[-1][0]
            n = start  # the target has made seq[n]: the drafts start after it
            while n < start + tokens:
                e = embed(seq[1 : n + 1])
                if names.get("mask_first"):
                    e[0] = 0
                x = torch.cat([_rms(e, ne, c), _rms(hidden[:n], nh, c)], -1) @ fc.T
                drafts = []
                for _ in range(k):
                    # One forward gives both the draft (its logits) and the hidden state that
                    # feeds the next draft.
                    last = block(inputs_embeds=x[None], output_hidden_states=True)
                    drafts.append(int(last.logits[0, -1].argmax()))
                    step = _rms(embed(torch.tensor([drafts[-1]])), ne, c)
                    h = last.hidden_states[-1][0, -1:]
                    x = torch.cat([x, torch.cat([step, _rms(h, nh, c)], -1) @ fc.T])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    return np.asarray(counts)


def greedy_sequences(target, prompts: int, tokens: int, vocab: int):
    """(prompt length, the prompt and the target's greedy continuation of ``tokens``) for
    ``prompts`` random prompts of 8 tokens (seed 0)."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(prompts):
        ids = torch.randint(2, vocab, (1, 8), generator=gen)
        yield ids.shape[1], target.generate(ids, do_sample=False, max_new_tokens=tokens)[0]


def accepted(drafts: list[int], seq: torch.Tensor, n: int) -> int:
    """How many of the drafts after position n the target's greedy tokens verify."""
    m = 0
    while m < len(drafts) and drafts[m] == int(seq[n + 1 + m]):
        m += 1
    return m
