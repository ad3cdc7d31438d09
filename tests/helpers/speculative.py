"""Shared by tests/test_realistic_speculative*.py: tiny configs of the architectures with MTP
layers (and plain targets), an export, the acceptance transformers' own generation measures,
and an oracle of the designed process that reads only the exported weights.

The oracle (:func:`weight_maps`, :func:`simulate`) knows nothing of the fill: from the
safetensors files it finds the code subspace as the columns the lm_head reads, checks that no
residual branch writes them and that each MTP input projection reads its embedding half only,
then takes each token's greedy successor (the target) and proposal (the draft) as argmaxes of
those weights, and replays an engine's greedy verification with k draft tokens in numpy."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from safetensors import safe_open

# Qwen3-Next: 8 experts top-2 and a shared expert; three linear-attention layers and a full one
QWEN3_NEXT = dict(
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
    shared_expert_intermediate_size=64, head_dim=32, linear_num_value_heads=4,
    linear_num_key_heads=2, linear_key_head_dim=32, linear_value_head_dim=32,
)  # fmt: skip
# Qwen3.5 (its text models): Qwen3-Next's linear attention; the MoE one Qwen3-Next's experts
LINEAR = {k: v for k, v in QWEN3_NEXT.items() if k.startswith(("linear_", "head_dim"))}
QWEN3_5 = {"qwen3_5_text": LINEAR, "qwen3_5_moe_text": QWEN3_NEXT}
ROUTED = ("qwen3_moe", "deepseek_v3", "glm4_moe")  # the routing tests' configs, 16 experts top-2
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=64, head_dim=32)
# The other architectures whose configs declare MTP layers, small: 16 experts top-2 (a shared one)
MORE = {
    "mellum": dict(num_experts=16, sliding_window=64, **MOE),  # a sliding layer: the MTP's type
    "inkling_text": dict(n_routed_experts=16, n_shared_experts=1, swa_num_attention_heads=4,
                         swa_num_key_value_heads=2, swa_head_dim=32, sliding_window_size=64,
                         d_rel=8, rel_extent=64, **MOE),
    # GLM-4.7-Flash: MLA attention, a dense first layer (no MTP layers by default)
    "glm4_moe_lite": dict(n_routed_experts=16, n_shared_experts=1, q_lora_rank=32,
                          kv_lora_rank=32, qk_nope_head_dim=16,  # head_dim: the rope part
                          v_head_dim=32, first_k_dense_replace=1, n_group=1, topk_group=1,
                          num_key_value_heads=4, **MOE),
    "bailing_hybrid": dict(num_experts=16, n_group=4, topk_group=2, num_shared_experts=1,
                           kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
                           qk_nope_head_dim=16, v_head_dim=32, layer_group_size=2,
                           first_k_dense_replace=1, num_key_value_heads=4, pad_token_id=None,
                           **MOE),
}  # fmt: skip
# Nemotron-H: 16 experts top-2 and a shared one (non-gated); its MTP step: attention, then MoE
NEMOTRON_H = dict(n_routed_experts=16, moe_shared_expert_intermediate_size=64, mamba_num_heads=8,
                  mamba_head_dim=16, ssm_state_size=16, n_groups=2, pad_token_id=None,
                  **MOE)  # fmt: skip
MORE["nemotron_h"] = NEMOTRON_H  # its config counts MTP steps: num_nextn_predict_layers
# ERNIE 4.5 MoE: 16 experts top-2 and a shared one, its first layer dense; its MTP block dense
MORE["ernie4_5_moe"] = dict(moe_num_experts=16, moe_num_shared_experts=1, pad_token_id=None, **MOE)
# EXAONE-MoE: 16 experts top-2 and a shared one, its first layer dense; its MTP block dense
MORE["exaone_moe"] = dict(num_experts=16, num_shared_experts=1, sliding_window=64,
                          pad_token_id=None, **MOE)  # fmt: skip
# HY-V3: 16 experts top-2 and a shared one, its first layer dense (first_k_dense_replace: what
# vLLM reads, mlp_layer_types: what transformers reads)
MORE["hy_v3"] = dict(num_experts=16, num_shared_experts=1, first_k_dense_replace=1, **MOE)
# MiMo-V2-Flash: 16 experts top-2, its first layer dense and full attention, its second sliding
# (kv heads doubled, attention sinks); its MTP layers a dense sliding-attention block
MORE["mimo_v2_flash"] = dict(n_routed_experts=16, v_head_dim=32, sliding_window=64, **MOE)
# LongCat-Flash: MLA (the rope part head_dim, as its rotary embedding reads it), 16 experts top-2
# and 4 zero (identity) experts; the keys its checkpoints' config.json has, which the engines
# read (transformers always scales the MLA's LoRA parts)
MORE["longcat_flash"] = dict(n_routed_experts=16, zero_expert_num=4, moe_topk=2,
                             expert_ffn_hidden_size=64, q_lora_rank=32, kv_lora_rank=32,
                             qk_nope_head_dim=16, qk_rope_head_dim=16, head_dim=16,
                             v_head_dim=32, num_key_value_heads=4, mla_scale_q_lora=True,
                             mla_scale_kv_lora=True, pad_token_id=None)  # fmt: skip
# Qwen4-Exp's text model: Qwen3-Next's linear attention and experts, 4 hyper-connection streams
# (a low rank of 16), the QSA indexer's fields (transformers' attention always builds the
# indexer, vLLM's QSA attention where they are set: its MTP layer's)
QWEN4_EXP = dict(QWEN3_NEXT, hc_count=4, hc_lowrank=16, indexer_n_heads=2, indexer_kv_heads=1,
                 indexer_head_dim=32, indexer_budget=16, indexer_compress_ratio=4,
                 pad_token_id=None)  # fmt: skip
# DeepSeek-V3.2 and GLM-5: MLA with the lightning indexer (top-k of 16 tokens), 16 experts top-2
# and a shared one, a dense first layer
DSA = dict(n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64,
           q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
           v_head_dim=32, num_key_value_heads=4, first_k_dense_replace=1, n_group=1,
           topk_group=1, index_topk=16, index_head_dim=32, index_n_heads=2,
           pad_token_id=None)  # fmt: skip
MORE.update(deepseek_v32=DSA, glm_moe_dsa=DSA)
# HY-V4: MLA with the lightning indexer (the rope part head_dim, as transformers sets it), 16
# experts top-2 and a shared one, its first layer dense, two iHC streams; no pad token (its
# default is past a small vocabulary); one expert group, written out: vLLM's own HY-V4 config
# class, which replaces transformers' once vLLM has read one, has no such default
MORE["hy_v4"] = dict(n_routed_experts=16, n_shared_experts=1, q_lora_rank=32, kv_lora_rank=32,
                     qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=32, index_head_dim=16,
                     index_n_heads=2, hc_mult=2, n_group=1, topk_group=1, pad_token_id=None,
                     **MOE)  # fmt: skip
# Step-3.5-Flash's text checkpoint: 16 experts top-2 and the shared expert, its first layer
# dense; as its config.json, the layer types over the main and the MTP layers (transformers
# splits them off into mtp_layer_types and mtp_mlp_layer_types), every fourth from the first
# full attention, the others sliding (its MTP layers, 45 to 47, are sliding ones), the MoE
# layers by index (an MTP layer none: dense); its pad token an int (its config's type): bos's
MORE["step3p5"] = dict(n_routed_experts=16, share_expert_dim=64, sliding_window=64,
                       pad_token_id=0, **MOE)  # fmt: skip
# their configs count MTP layers as DeepSeek-V3's (EXAONE-MoE's, LongCat's: one where the key
# is absent)
NEXTN = ("glm4_moe_lite", "ernie4_5_moe", "exaone_moe", "hy_v3", "mimo_v2_flash", "longcat_flash")
NEXTN += ("deepseek_v32", "glm_moe_dsa", "hy_v4", "step3p5")
# GLM-5-Next's text model: a KDA layer, then an indexed MLA one (NoPE), dense then MoE (16 experts
# top-2, a shared one), four hyper-connection streams; the indexer's top-k (64, in pools of 4) at
# least the sequences the tests run, so that its selection keeps every earlier token
GLM5_NEXT = dict(n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=2,
                 moe_intermediate_size=64, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=32,
                 qk_rope_head_dim=0, v_head_dim=32, num_key_value_heads=4,
                 layer_types=["linear_attention", "indexed_attention"],
                 mlp_layer_types=["dense", "sparse"], index_topk=256, index_head_dim=16,
                 index_n_heads=2, index_kpool=4, linear_head_dim=16, linear_num_heads=4,
                 hc_mult=4, pad_token_id=None)  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on one thread: a second one only contends (imported by the test modules)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# every residual branch's last linear, under the checkpoints' names (Bailing's attention.dense;
# Inkling's multimodal checkpoint's attention, dense MLP, routed and shared experts)
WRITERS = re.compile(r"\.(o_proj|down_proj|out_proj|attention\.dense|wo_ud|w2_md|w2_weight"
                     r"|shared_w2_weight)(\.weight|\.bias|$)")  # fmt: skip
# every MTP input projection, under the checkpoints' names (ERNIE's counted by a last index)
PROJECTIONS = re.compile(r"(eh_proj|mtp\.fc|input_proj|mtp_linear_proj\.\d+)\.weight$")
EMBEDDINGS = ("embed_tokens.weight", "word_embeddings.weight", "backbone.embeddings.weight")
EMBEDDINGS += ("model.llm.embed.weight",)  # Inkling's multimodal checkpoint's
# the lm_head: Inkling's multimodal checkpoint's, MiniMax-M3's
HEADS = ("lm_head.weight", "model.llm.unembed.weight", "language_model.lm_head.weight")


def config(arch: str, hidden: int = 128, vocab: int = 1024, layers: int = 2, mtp: int = 0,
           **more):  # fmt: skip
    """A tiny untied config of ``arch`` with bos 0 and eos 1: Llama; Qwen3-MoE, DeepSeek-V3 and
    GLM-4.5 as tests/test_realistic_routing.py makes them (16 experts, top 2); Qwen3-Next and
    Qwen3.5's text models (at least four layers: three linear-attention ones, then a full one;
    Qwen3.5 with ``mtp`` MTP layers; Qwen4-Exp's text model likewise, its fourth a QSA one);
    Mellum (a sliding layer, then a full one), Inkling, Bailing, GLM-4.7-Flash, Nemotron-H,
    ERNIE 4.5 MoE, EXAONE-MoE, LongCat-Flash, DeepSeek-V3.2, GLM-5 and HY-V4 (:data:`MORE`),
    GLM-5-Next (:data:`GLM5_NEXT`) with ``mtp`` MTP layers (``bailing_v3``: Bailing's, naming
    Ling-3.0's class); then ``more``."""
    if arch == "bailing_v3":  # Ling-3.0: Ling's hybrid config naming its own class
        cfg = config("bailing_hybrid", hidden, vocab, layers, mtp, **more)
        cfg.architectures = ["BailingMoeV3ForCausalLM"]
        return cfg
    common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab)  # fmt: skip
    if arch in ROUTED:
        from test_realistic_routing import configs

        cfg = configs(h=hidden, experts=16, k=2, layers=layers)[arch]
    elif arch == "qwen3_next":
        cfg = tf.Qwen3NextConfig(**{**common, "num_hidden_layers": max(layers, 4)}, **QWEN3_NEXT)
    elif arch == "nemotron_h":  # a Mamba, a MoE, an attention and a MoE layer (at least four)
        kinds = (["mamba", "moe", "attention", "moe"] * layers)[: max(layers, 4)]
        kw = dict(common, layers_block_type=kinds, num_nextn_predict_layers=mtp)
        del kw["num_hidden_layers"]  # the layer types count them
        cfg = tf.AutoConfig.for_model(arch, **kw, **NEMOTRON_H)
    elif arch == "qwen4_exp_text":  # three linear-attention layers, then a QSA one; its MTP
        kw = {**common, "num_hidden_layers": max(layers, 4), **QWEN4_EXP}  # count as 3.5's
        cfg = tf.AutoConfig.for_model(arch, **kw, mtp_num_hidden_layers=mtp)
    elif arch in QWEN3_5:  # its MTP layer count the key vLLM reads (one where it is absent)
        kw = {**common, "num_hidden_layers": max(layers, 4), **QWEN3_5[arch]}
        cfg = tf.AutoConfig.for_model(arch, **kw, **({"mtp_num_hidden_layers": mtp} if mtp else {}))
    elif arch == "glm_ocr":
        return _glm_ocr(common, mtp, more)
    elif arch == "exaone4_5":
        return _exaone4_5(common, mtp, more)
    elif arch == "glm5_next":
        return _glm5_next(common, mtp, more)
    elif arch == "minimax_m3_vl":
        return _minimax_m3(common, mtp, more)
    elif arch in MORE:
        count = "num_nextn_predict_layers" if arch in NEXTN else "num_mtp_layers"
        kw = {**common, **MORE[arch], count: mtp or (0 if "bailing" in arch else None)}
        if arch in ("mellum", "exaone_moe"):  # a sliding layer, then full ones
            kw["layer_types"] = ["sliding_attention"] + ["full_attention"] * (layers - 1)
        if arch == "longcat_flash":  # its num_hidden_layers counts two per decoder layer
            kw["num_layers"] = kw.pop("num_hidden_layers")
        if arch == "step3p5":  # its lists over the main and MTP layers, as its config.json
            kw[count] = mtp
            kw["layer_types"] = [("sliding_attention", "full_attention")[i % 4 == 0]
                                 for i in range(layers + mtp)]  # fmt: skip
            kw["moe_layers_enum"] = ",".join(str(i) for i in range(1, layers))
        cfg = tf.AutoConfig.for_model(arch, **kw)
    else:
        cfg = tf.AutoConfig.for_model(arch, **common)
    settings = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    for name, value in {**settings, **more}.items():
        setattr(cfg, name, value)
    return cfg


def _glm_ocr(text: dict, mtp: int, more: dict):
    """GLM-OCR: its dense text model (``mtp`` MTP layers counted in its text config, as vLLM's
    ``GlmOcrMTP`` reads them; a multimodal RoPE over half of each head) beside a one-block
    vision tower; ``more`` and the untied settings go to the text config."""
    text = dict(text, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, **more)
    head = text.get("head_dim", text["hidden_size"] // text["num_attention_heads"])
    quarter = head // 4  # the rotated half's frequencies: text, height, width sections
    sections = [quarter - 2 * (quarter // 4), quarter // 4, quarter // 4]
    rope = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                mrope_section=sections)  # fmt: skip
    # no q/k/v biases, as transformers' class has none (SGLang's GLM layer makes them unless told)
    text.update(rope_parameters=rope, num_nextn_predict_layers=mtp, attention_bias=False)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=text["hidden_size"])  # fmt: skip
    return tf.AutoConfig.for_model("glm_ocr", text_config=text, vision_config=vision,
                                   tie_word_embeddings=False)  # fmt: skip


def _glm5_next(text: dict, mtp: int, more: dict):
    """GLM-5-Next: its text model (:data:`GLM5_NEXT`, two layers; ``mtp`` MTP layers counted in
    its text config, as vLLM's ``Glm5NextMTP`` reads them) beside a one-block vision tower;
    ``more`` and the untied settings go to the text config."""
    text = dict(text, **GLM5_NEXT, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
                num_nextn_predict_layers=mtp, **more)  # fmt: skip
    text["num_hidden_layers"] = len(text["layer_types"])
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=text["hidden_size"], projection_intermediate_size=64)  # fmt: skip
    return tf.AutoConfig.for_model("glm5_next", text_config=text, vision_config=vision,
                                   tie_word_embeddings=False)  # fmt: skip


def _exaone4_5(text: dict, mtp: int, more: dict):
    """EXAONE 4.5: EXAONE 4.0's text model beside a one-block vision tower; ``mtp`` MTP layers
    counted at the top level (vLLM's ``Exaone4_5_MTP`` reads them there, one where it names
    none: 0 here says so), with the vocabulary size it reads there too; ``more`` and the untied
    settings go to the text config."""
    text = dict(text, model_type="exaone4", bos_token_id=0, eos_token_id=1,
                tie_word_embeddings=False, **more)  # fmt: skip
    vision = dict(model_type="exaone4_5_vision", depth=1, hidden_size=32, intermediate_size=64,
                  num_heads=2, num_key_value_heads=2, out_hidden_size=text["hidden_size"],
                  fullatt_block_indexes=[0])  # fmt: skip
    return tf.AutoConfig.for_model("exaone4_5", text_config=text, vision_config=vision,
                                   tie_word_embeddings=False, vocab_size=text["vocab_size"],
                                   num_nextn_predict_layers=mtp)  # fmt: skip


def _minimax_m3(text: dict, mtp: int, more: dict):
    """MiniMax-M3's multimodal checkpoint: its text model (a dense full-attention first layer,
    then sparse-attention MoE layers: the indexer's heads as many as the kv heads and as wide,
    as vLLM's fused projection requires; 16 experts top-2 and a shared one) beside a one-layer
    vision tower; ``mtp`` MTP layers counted in its text config (``num_mtp_modules``, as vLLM
    reads them: 0 here says none); ``more`` and the untied settings go to the text config."""
    text = dict(text, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, **more)
    head = text.get("head_dim", text["hidden_size"] // text["num_attention_heads"])
    layers = text["num_hidden_layers"]
    text.update(head_dim=head, rotary_dim=head // 2, index_n_heads=text["num_key_value_heads"],
                index_head_dim=head, index_block_size=4, index_topk_blocks=2,
                num_local_experts=16, num_experts_per_tok=2, intermediate_size=64,
                shared_intermediate_size=64, dense_intermediate_size=2 * text["hidden_size"],
                layer_types=["full_attention"] + ["minimax_m3_sparse"] * (layers - 1),
                mlp_layer_types=["dense"] + ["sparse"] * (layers - 1),
                num_mtp_modules=mtp)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    # transformers' own class by name: vLLM, once imported, registers its own config class for
    # this model type with transformers' AutoConfig (one without the indexer's fields)
    return tf.MiniMaxM3VLConfig(text_config=text, vision_config=vision,
                                projector_hidden_size=text["hidden_size"],
                                tie_word_embeddings=False)  # fmt: skip


# Inkling's multimodal checkpoint made small: its text model :func:`config`'s, its vision
# tower's layers at least the steps of its scale plan (patch 2, temporal patch 2: three; with
# fewer, transformers' class plans them with scipy, which is not installed), a small audio table
INKLING_TOWERS = dict(vision_config=dict(num_hidden_layers=3, patch_size=2),
                      audio_config=dict(n_mel_bins=8, mel_vocab_size=16))  # fmt: skip


def inkling_mm(mtp: int = 0, **more):
    """Inkling's multimodal config (``inkling_mm_model``) around :func:`config`'s Inkling text
    model (``more`` goes to it), ``mtp`` MTP layers described where its real checkpoints
    describe them: the top-level ``mtp_config`` (``num_nextn_predict_layers``,
    ``chain_hidden_post_norm``, ``local_layer_ids``; vLLM reads them there, transformers'
    config copies them into the text config), as the text config has them."""
    text = config("inkling_text", mtp=mtp, **more).to_dict()
    mtp_config = {"num_nextn_predict_layers": mtp,
                  "chain_hidden_post_norm": text.get("chain_hidden_post_norm", False)}  # fmt: skip
    if text.get("mtp_local_layer_ids") is not None:
        mtp_config["local_layer_ids"] = text["mtp_local_layer_ids"]
    return tf.AutoConfig.for_model("inkling_mm_model", text_config=text, **INKLING_TOWERS,
                                   mtp_config=mtp_config)  # fmt: skip


def export(cfg, folder: Path, acceptance, *, routing: str = "balanced", tokenizer=None) -> Path:
    """``cfg`` saved in ``folder``/config (with ``tokenizer``'s files), exported to
    ``folder``/out by fp8_dummy's export with ``acceptance`` (Qwen3-Next's ``A_log``, which no
    role covers, with its assumed values)."""
    from fp8_dummy.realistic.export import export as write

    src, out = folder / "config", folder / "out"
    shutil.rmtree(src, ignore_errors=True)
    cfg.save_pretrained(src)
    if tokenizer is not None:
        tokenizer.save_pretrained(src)
    write(src, out, acceptance=acceptance, routing=routing, progress=False, allow_unknown=True)
    return out


def read(out: Path) -> dict[str, np.ndarray]:
    """Every tensor of an export, float64, through the safetensors library."""
    index = json.loads((out / "model.safetensors.index.json").read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(out / shard), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name).double().numpy()
    return tensors


def _argmax_rows(head: np.ndarray, h: np.ndarray) -> np.ndarray:
    return (h @ head.T).argmax(1)


def _output_rows(w: np.ndarray, s: np.ndarray, hidden: int) -> np.ndarray:
    """The rows ``s`` of a residual writer's output dimension: [out, in], experts fused
    [E, out, in] (a square one: its rows), a bias [out]."""
    if w.ndim >= 2 and w.shape[-2] == hidden:
        return w[..., s, :]
    return w[s] if w.shape[0] == hidden else w[..., s]


def _mtp_copy(name: str) -> bool:
    """An MTP layer's copy of the embedding (DeepSeek's under its layer, LongCat's under
    ``model.mtp.``)."""
    return "layers." in name or ".mtp." in f".{name}"


def weight_maps(t: dict[str, np.ndarray], hidden: int, hidden_first: bool = False) -> dict:
    """From an export's tensors alone: the code columns S (those the lm_head reads), that no
    residual writer touches them, the target's greedy successor of every token and, per MTP
    input projection (its hidden half first where ``hidden_first``: Inkling's), the draft's
    proposal after every token."""
    (head,) = [t[n] for n in HEADS if n in t]
    (embed,) = [w for n, w in t.items() if n.endswith(EMBEDDINGS) and not _mtp_copy(n)]
    copies = [n for n, w in t.items() if n.endswith(EMBEDDINGS) and _mtp_copy(n)]
    assert all(np.array_equal(t[n], embed) for n in copies), "an MTP layer's copy differs"
    s = np.flatnonzero(np.abs(head).sum(0))
    assert 0 < s.size < hidden // 2, s
    for name, w in t.items():
        tower = ".visual." in f".{name}" or name.startswith("vision_tower.")  # its own stream
        if WRITERS.search(name) and not tower:
            assert not np.any(_output_rows(w, s, hidden)), f"{name} writes the code columns"
    succ = _argmax_rows(head[:, s], embed[:, s])
    proposals = {}
    half = slice(hidden, None) if hidden_first else slice(0, hidden)
    other = slice(0, hidden) if hidden_first else slice(hidden, None)
    for name, w in t.items():
        if PROJECTIONS.search(name) and w.shape == (hidden, 2 * hidden):
            assert not np.any(w[s][:, other]), f"{name}: the code reads the hidden half"
            e = embed / np.sqrt((embed**2).mean(1, keepdims=True))  # enorm, weight 1 or 1+0
            proposals[name] = _argmax_rows(head[:, s], e @ w[s][:, half].T)
    return {"codes": s, "successor": succ, "proposals": proposals}


def draft_proposal(t: dict[str, np.ndarray]) -> np.ndarray:
    """A draft model's greedy proposal after every token, from its export alone."""
    head, embed = t["lm_head.weight"], t["model.embed_tokens.weight"]
    s = np.flatnonzero(np.abs(head).sum(0))
    return _argmax_rows(head[:, s], embed[:, s])


def simulate(succ: np.ndarray, proposal: np.ndarray, k: int, starts, tokens: int) -> np.ndarray:
    """Greedy speculative decoding replayed: from each start token, the target's first token,
    then steps of k proposals (each from the one before) verified against the target's
    successors; the number accepted per step, all starts together."""
    accepted = []
    for start in starts:
        last, made = int(succ[start]), 1
        while made < tokens:
            draft, truth, m = [], [], 0
            x, y = last, last
            for _ in range(k):
                x, y = int(proposal[x]), int(succ[y])
                draft.append(x), truth.append(y)
            while m < k and draft[m] == truth[m]:
                m += 1
            accepted.append(m)
            last = truth[m] if m < k else int(succ[truth[-1]])
            made += m + 1
    return np.asarray(accepted)


def conditional(m: np.ndarray, k: int) -> list[float]:
    """Per position: the share of steps that accepted it among those that accepted the one
    before."""
    return [float((m >= i).sum() / max((m >= i - 1).sum(), 1)) for i in range(1, k + 1)]


def mtp_acceptance(out: Path, layers: int, monkeypatch, prompts: int = 4, tokens: int = 150,
                   vocab: int = 1024, sample: bool = False) -> np.ndarray:  # fmt: skip
    """transformers' own MTP speculative decoding (``generate(use_mtp=True)``) of the export,
    greedy (or sampled at temperature 1): the tokens accepted per step, recorded from the
    candidate generator's own count."""
    from transformers.generation import candidate_generator as cg

    model = _auto(out).from_pretrained(out, dtype=torch.float32)
    text = model.config.get_text_config()
    first = text.num_hidden_layers  # where this checkpoint keeps its MTP layers
    names = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    if any(n.startswith(f"model.layers.{first}.") for n in names):  # the class names layer 61
        model._keys_to_ignore_on_load_unexpected = [
            rf"model\.layers\.{first + i}\..*" for i in range(layers)
        ]
    counts: list[int] = []
    own = cg.MTPCandidateGenerator.get_candidates

    def record(self, input_ids, model_kwargs, model_outputs, is_first_iteration, n_last_matches,
               **kw):  # fmt: skip
        if not is_first_iteration and not self.is_main_model_prefill:
            counts.append(int(n_last_matches))
        return own(self, input_ids, model_kwargs, model_outputs, is_first_iteration,
                   n_last_matches, **kw)  # fmt: skip

    monkeypatch.setattr(cg.MTPCandidateGenerator, "get_candidates", record)
    gen = torch.Generator().manual_seed(0)
    for _ in range(prompts):
        ids = torch.randint(2, vocab, (1, 8), generator=gen)
        model.generate(ids, use_mtp=True, do_sample=sample, max_new_tokens=tokens,
                       min_new_tokens=tokens, temperature=1.0 if sample else None)  # fmt: skip
    return np.asarray(counts)


def _auto(out: Path):
    """The auto class of the export's model: Inkling's and Step-3.7's multimodal ones'
    image-text-to-text."""
    kind = json.loads((out / "config.json").read_text()).get("model_type")
    multimodal = kind in ("inkling_mm_model", "step3p7")
    return tf.AutoModelForImageTextToText if multimodal else tf.AutoModelForCausalLM


def assisted_acceptance(out: Path, draft: Path, k: int, monkeypatch, prompts: int = 4,
                        tokens: int = 150, vocab: int = 1024) -> np.ndarray:  # fmt: skip
    """transformers' own assisted generation with the exported draft model, greedy, k draft
    tokens a step (constant, no confidence cut): the tokens accepted per step. Not counted:
    each generation's first step (drafted from the prompt's own last token) and its steps near
    the length limit (fewer than k drafted, or the accepted ones cut to the limit)."""
    from transformers.generation import candidate_generator as cg

    model = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assistant = tf.AutoModelForCausalLM.from_pretrained(draft, dtype=torch.float32)
    drafting = assistant.generation_config  # what the candidate generator reads
    drafting.num_assistant_tokens, drafting.num_assistant_tokens_schedule = k, "constant"
    drafting.assistant_confidence_threshold = 0.0
    steps: list[tuple[int, int]] = []  # (draft tokens, accepted)
    own = cg.AssistedCandidateGenerator.update_candidate_strategy

    def record(self, input_ids, scores, num_matches):
        steps.append((scores.shape[1] - 1, int(num_matches)))
        return own(self, input_ids, scores, num_matches)

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "update_candidate_strategy", record)
    gen = torch.Generator().manual_seed(0)
    counts: list[int] = []
    for _ in range(prompts):
        ids = torch.randint(2, vocab, (1, 8), generator=gen)
        steps.clear()
        model.generate(ids, assistant_model=assistant, do_sample=False, max_new_tokens=tokens,
                       min_new_tokens=tokens)  # fmt: skip
        counts += [m for drafted, m in steps[1:-1] if drafted == k]
    return np.asarray(counts)


def entropies(model: torch.nn.Module, vocab: int, prompts: int = 16) -> np.ndarray:
    """The next-token distribution's entropy (nats, temperature 1) after random prompts."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (prompts, 12), generator=gen)
    with torch.no_grad():
        logits = model(ids).logits[:, -1].double()
    p = logits.softmax(-1)
    return (-(p * p.clamp_min(1e-300).log()).sum(-1)).numpy()
