"""LongCat-Flash's MTP layer (docs/realistic.md#speculative-decoding), the fast tier: its block
is not transformers' LongCat decoder layer (two MLA attentions, two dense MLPs, a MoE) but what
vLLM's ``LongCatFlashMTP`` and SGLang's ``LongcatFlashForCausalLMNextN`` read: one MLA attention
and one dense MLP, made from the first of each of the class's own decoder layer. Here: the names
those loaders read (written out from vLLM's name mapping, not from the fill), one layer whatever
the config counts, the values a decoder layer's parts get, the embedding's copy, every format."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import FORMATS, build_model, config_checkpoint, logical_model  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

P = "model.mtp.layers.0."
# vLLM 0.33's LongCatFlashMTP.load_weights name mapping, its keys without the FP8 scales
VLLM_NAMES = {f"{P}{n}.weight" for n in (
    "eh_proj", "enorm.m", "hnorm.m", "input_layernorm", "post_attention_layernorm",
    "self_attn.kv_a_layernorm", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
    "self_attn.o_proj", "self_attn.q_a_layernorm", "self_attn.q_a_proj", "self_attn.q_b_proj",
    "transformer_layer.mlp.down_proj", "transformer_layer.mlp.gate_proj",
    "transformer_layer.mlp.up_proj")}  # fmt: skip
VLLM_NAMES |= {"model.mtp.embed_tokens.weight", "model.mtp.norm.weight"}
# the MTP block's tensor -> the part of the main model's decoder layer i it is made from
PARTS = {"self_attn.": "self_attn.0.", "transformer_layer.mlp.": "mlps.0.",
         "input_layernorm.": "input_layernorm.0.",
         "post_attention_layernorm.": "post_attention_layernorm.0."}  # fmt: skip


def test_longcat_mtp_under_the_engines_names():
    """Exactly the names vLLM's mapping reads (any other ``model.mtp.`` name fails its loader),
    the shapes of its modules (``eh_proj`` [H, 2H]; the dense MLP of the config's
    ``ffn_hidden_size``, vLLM's ``intermediate_size``), the main tensors unchanged; one MTP layer
    where ``num_nextn_predict_layers`` is absent (vLLM's reading) or says more (its class builds
    one), none at 0."""
    cfg = H.config("longcat_flash", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    assert {n for n in t if n.startswith("model.mtp.")} == VLLM_NAMES
    assert t[P + "eh_proj.weight"].shape == (128, 256)
    assert t[P + "transformer_layer.mlp.gate_proj.weight"].shape == (cfg.ffn_hidden_size, 128)
    assert t[P + "self_attn.q_b_proj.weight"].shape == (4 * 32, 32)  # heads·(nope+rope), q rank
    assert t["model.mtp.embed_tokens.weight"].shape == (1024, 128)
    none = H.config("longcat_flash", num_nextn_predict_layers=0)
    main = config_checkpoint(none, 0).tensors
    assert {n for n in t if not n.startswith("model.mtp.")} == set(main)
    assert any(".mlp.experts." in n for n in main) and any(".mlps.1." in n for n in main)
    assert S.mtp_layers(cfg) == ("longcat", 1) and S.mtp_prefixes(cfg) == ("model.mtp.",)
    assert S.mtp_layers(none) == (None, 0)
    absent = H.config("longcat_flash", mtp=1)
    del absent.num_nextn_predict_layers
    assert S.mtp_layers(absent) == ("longcat", 1)
    two = H.config("longcat_flash", mtp=2)
    assert S.mtp_layers(two) == ("longcat", 1)
    assert {n for n in config_checkpoint(two, 0).tensors if n.startswith("model.mtp.")} == (
        VLLM_NAMES
    )


def test_the_block_is_valued_as_the_decoder_layers_parts():
    """Each block tensor has the spec of the decoder-layer part it is made from (the residual
    rule's o_proj and down_proj, the linear rule, the norms' constant), as the other layouts'
    blocks have their decoder layer's; the MTP norms the final norm's; the embedding's copy the
    embedding's spec, key and overrides (the same bytes: the designed codes included)."""
    cfg = H.config("longcat_flash", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    own = tuple(P + n for n in ("enorm", "hnorm", "eh_proj"))
    block = [n for n in t if n.startswith(P) and not n.startswith(own)]
    assert len(block) == 12
    for name in block:
        rest = name[len(P) :]
        (new,) = [k for k in PARTS if rest.startswith(k)]
        twin = t["model.layers.1." + PARTS[new] + rest[len(new) :]]
        assert t[name].spec == twin.spec, name
        assert t[name].key != twin.key, "its own values, not a copy"
    assert {t[P + "self_attn.o_proj.weight"].spec.role} == {"residual_out"}
    for norm in (P + "enorm.m.weight", P + "hnorm.m.weight", "model.mtp.norm.weight"):
        assert t[norm].spec == t["model.norm.weight"].spec
    copy, embed = t["model.mtp.embed_tokens.weight"], t["model.embed_tokens.weight"]
    assert (copy.spec, copy.key, copy.overrides) == (embed.spec, embed.key, embed.overrides)
    assert embed.overrides, "the designed codes"


# mxfp4: GPT-OSS's fused experts only (LongCat's checkpoint is refused in it, MTP layer or not);
# fp8, fp8-channel and nvfp4: the export refuses them with the MTP layer (vLLM's loader reads its
# scales under FP8-block names alone: tests/test_realistic_speculative_mtp_quantized_dense.py)
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f not in ("mxfp4", "fp8", "fp8-channel")])
def test_every_format_holds_the_mtp_layer(fmt):
    """In every format it is made in, the MTP tensors are under the same names: the block
    quantized as a decoder layer (its linears' scales beside them), the input projection
    ``eh_proj`` too (vLLM's class builds it with the quantization config) and not listed with
    the modules the quantized checkpoint leaves alone, the norms and the copy as they are."""
    cfg = H.config("longcat_flash", hidden=256, mtp=1)
    model = build_model(cfg, dtype=torch.bfloat16)
    made = logical_model(model, 0, format=fmt, acceptance=0.6, mtp=True)
    t = made.tensors
    names = {n for n in t if n.startswith("model.mtp.")}
    assert {n for n in VLLM_NAMES if n in names} == VLLM_NAMES
    extra = names - VLLM_NAMES
    quantized = FORMATS[fmt].quant is not None
    assert bool(extra) == quantized, extra
    own = (P + "self_attn.", P + "transformer_layer.", P + "eh_proj.")
    assert all(n.startswith(own) for n in extra), extra
    assert P + "eh_proj" not in made.skipped
    if quantized:
        assert any(n.startswith(P + "self_attn.o_proj.") for n in extra)
        o_proj = {n[len(P + "self_attn.o_proj.") :] for n in extra if ".o_proj." in n}
        assert {n[len(P + "eh_proj.") :] for n in extra if ".eh_proj." in n} == o_proj
        assert t[P + "eh_proj.weight"].dtype == t[P + "self_attn.o_proj.weight"].dtype
