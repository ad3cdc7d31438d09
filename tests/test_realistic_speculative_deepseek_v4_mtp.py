"""DeepSeek-V4's MTP layers (docs/realistic.md#speculative-decoding): ``mtp.{i}.`` under the
names its real checkpoints keep them (DeepSeek-V4-Flash's tensor list; ``head`` and
``emb.tok_emb`` as its Base checkpoint holds them, which vLLM's ``DeepSeekV4MTP`` loader reads
for its head and embedding), written out here from that list, not from the fill: a
hyper-connected block under the main layers' names (sliding attention: no compressor; a routed
MoE: a gate with its bias, no hash table), ``enorm``, ``hnorm``, two input projections [H, H]
``e_proj`` and ``h_proj``, the head's stream collapse ``hc_head_*``, ``norm``. The
design through the exported files alone (``e_proj`` copies S2 of the normalized embedding into
S, ``h_proj`` and the block write no S), every format, and (the slow tier) the acceptance
through an independent forward of the MTP layer as vLLM's class computes it
(tests/helpers/deepseek_v4_mtp_forward.py): transformers' class drops ``mtp.*`` and cannot run
them."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.deepseek_v4_mtp_forward import files, independent_v4_mtp_acceptance  # noqa: E402
from helpers.dequantize import unquantized  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402

from fp8_dummy.realistic import FORMATS, build_model, config_checkpoint, logical_model  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

EXPERTS = 16  # the test config's routed experts
# DeepSeek-V4-Flash's MTP tensors (its model-00046-of-00046.safetensors), without the FP8
# scales, and the Base checkpoint's two copies
BLOCK = ["attn.attn_sink", "attn.kv_norm.weight", "attn.q_norm.weight", "attn.wkv.weight",
         "attn.wo_a.weight", "attn.wo_b.weight", "attn.wq_a.weight", "attn.wq_b.weight",
         "attn_norm.weight", "ffn_norm.weight", "ffn.gate.weight", "ffn.gate.bias",
         "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base",
         "hc_ffn_scale"]  # fmt: skip
BLOCK += [f"ffn.shared_experts.w{j}.weight" for j in (1, 2, 3)]
BLOCK += [f"ffn.experts.{e}.w{j}.weight" for e in range(EXPERTS) for j in (1, 2, 3)]
OWN = ["enorm.weight", "hnorm.weight", "e_proj.weight", "h_proj.weight", "norm.weight"]
OWN += ["hc_head_fn", "hc_head_base", "hc_head_scale", "head.weight", "emb.tok_emb.weight"]


def names(n: int) -> set[str]:
    return {f"mtp.{i}.{name}" for i in range(n) for name in BLOCK + OWN}


def _config(hidden=128, vocab=1024, layers=2, hc=4, mtp=1):
    cfg = config(hidden, vocab, layers, hc)
    cfg.num_nextn_predict_layers = mtp
    return cfg


@pytest.mark.parametrize("mtp", [1, 2])
def test_deepseek_v4_mtp_under_the_checkpoints_names(mtp):
    """Exactly the real checkpoint's MTP names for each of ``num_nextn_predict_layers``, their
    shapes (the real checkpoint's at its sizes: ``e_proj``/``h_proj`` [H, H], ``hc_head_fn``
    [hc, hc·H], ``hc_attn_fn`` [(2+hc)·hc, hc·H]), each in its main-model kind's dtype, the main
    model's tensors as without them; none at 0."""
    h, v, hc = 128, 1024, 4
    cfg = _config(h, v, 2, hc, mtp)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    assert {n for n in t if n.startswith("mtp.")} == names(mtp)
    main = config_checkpoint(_config(h, v, 2, hc, 0), 0, acceptance=0.5).tensors
    assert {n for n in t if not n.startswith("mtp.")} == set(main)
    assert not any(n.startswith("mtp.") for n in main)
    shapes = {"e_proj.weight": (h, h), "h_proj.weight": (h, h), "hc_head_fn": (hc, hc * h),
              "hc_head_base": (hc,), "hc_head_scale": (1,), "hc_attn_fn": ((2 + hc) * hc, hc * h),
              "hc_attn_base": ((2 + hc) * hc,), "hc_attn_scale": (3,), "head.weight": (v, h),
              "emb.tok_emb.weight": (v, h), "ffn.gate.bias": (EXPERTS,)}  # fmt: skip
    for i in range(mtp):
        for name, shape in shapes.items():
            assert tuple(t[f"mtp.{i}.{name}"].shape) == shape, name
        # each in the dtype of the main model's tensor of its kind (as transformers' class
        # keeps them: the main model's, not the real checkpoint's float32)
        assert t[f"mtp.{i}.hc_head_fn"].dtype == t["hc_head_fn"].dtype
        for name in ("hc_attn_fn", "ffn.gate.bias", "attn.attn_sink"):
            assert t[f"mtp.{i}.{name}"].dtype == t[f"layers.1.{name}"].dtype, name
        # the block's attention is the sliding one (its layer 0's shapes), not compressed
        for name in BLOCK[:8]:
            assert t[f"mtp.{i}.{name}"].shape == t[f"layers.0.{name}"].shape, name
    assert S.mtp_layers(cfg) == ("deepseek_v4", mtp) and S.mtp_prefixes(cfg) == ("mtp.",)
    assert S.mtp_layers(_config(mtp=0)) == (None, 0)


def test_the_mtp_layer_is_valued_as_the_main_models():
    """Each block tensor has the spec of the main decoder layer's tensor of the same name (its
    own values), ``hc_head_*`` the main head's collapse's, the norms the final norm's, the
    copies the embedding's and the lm_head's spec, key and overrides (the same bytes)."""
    t = config_checkpoint(_config(), 0, acceptance=0.5).tensors
    for name in BLOCK:
        main = t[f"layers.1.{name}"]  # a routed (not hash) MoE layer
        assert t[f"mtp.0.{name}"].spec == main.spec, name
        assert t[f"mtp.0.{name}"].key != main.key, "its own values, not a copy"
    for name in ("hc_head_fn", "hc_head_base", "hc_head_scale"):
        assert t[f"mtp.0.{name}"].spec == t[name].spec and t[f"mtp.0.{name}"].key != t[name].key
    for norm in ("enorm", "hnorm", "norm"):
        assert t[f"mtp.0.{norm}.weight"].spec == t["norm.weight"].spec
    for copy, source in (("head.weight", "head.weight"), ("emb.tok_emb.weight", "embed.weight")):
        a, b = t["mtp.0." + copy], t[source]
        assert (a.spec, a.key, a.overrides) == (b.spec, b.key, b.overrides), copy
        assert b.overrides, "the designed codes"


def _export(cfg, folder, acceptance, fmt: str = "bf16", seed: int = 0, routing="balanced"):
    """``cfg`` exported in ``fmt``; a quantized export dequantized from its bytes and scales
    (tests/helpers/dequantize.py) as a consumer reads it."""
    from fp8_dummy.realistic.export import export

    (folder / "c").mkdir(parents=True)
    cfg.save_pretrained(folder / "c")
    export(folder / "c", folder / "out", seed=seed, acceptance=acceptance, format=fmt,
           routing=routing, progress=False, allow_unknown=True)  # fmt: skip
    if FORMATS[fmt].quant is None:
        return folder / "out"
    return unquantized(folder / "out", folder / "dequantized")


QUANTIZED = [f for f in FORMATS if FORMATS[f].quant not in (None, "mxfp4")]
DESIGN = [(128, 1024, 2, 4, "bf16"), (192, 2048, 3, 2, "bf16")]
DESIGN += [(128, 1024, 2, 4, f) for f in QUANTIZED] + [(256, 1024, 2, 2, "fp8-block")]


@pytest.mark.parametrize("hidden, vocab, layers, hc, fmt", DESIGN)
def test_the_exported_mtp_layer_carries_the_design(hidden, vocab, layers, hc, fmt, tmp_path):
    """From the exported files alone (a quantized export's weights decoded from their bytes
    and scales): ``e_proj``'s rows on the code columns S each read one column of S2 (the
    view's code) of the normalized embedding with weight exactly 1, ``h_proj``'s rows on S are
    0, no residual writer of the MTP block (``wo_b``, the experts' ``w2``) writes S; so S of
    every stream the block reads, and of its output, is the view's code times a positive
    factor, and the head (the lm_head's copy) reads S only."""
    cfg = _config(hidden, vocab, layers, hc)
    cfg.expert_dtype = "fp4"  # a copy of DeepSeek-V4-Flash's: MXFP4 experts
    out = _export(cfg, tmp_path, 0.6, fmt)
    # vLLM takes the experts as the quantization config says only where the config says
    # "fp8" (fp8_dummy/realistic/exported_config.py): the export's own, in every format
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["expert_dtype"] == "fp8"
    t = H.read(out)
    head = t["mtp.0.head.weight"]
    assert np.array_equal(head, t["head.weight"])
    assert np.array_equal(t["mtp.0.emb.tok_emb.weight"], t["embed.weight"])
    codes = np.flatnonzero(np.abs(head).sum(0))
    assert 0 < codes.size < hidden // 2
    view = codes - codes.size  # S2: the d columns before S
    e, h = t["mtp.0.e_proj.weight"], t["mtp.0.h_proj.weight"]
    assert np.array_equal(e[codes][:, view], np.eye(codes.size))
    assert not np.any(np.delete(e[codes], view, axis=1))
    assert not np.any(h[codes])
    # the rest of each projection keeps the rule's spread (1/sqrt(hidden)), not all zeros
    rest = np.delete(e, codes, axis=0)
    assert 0.9 < rest.std() * np.sqrt(hidden) < 1.1, rest.std()
    ends = (".wo_b.weight", ".w2.weight")
    writers = [n for n in t if n.startswith("mtp.0.") and n.endswith(ends)]
    assert len(writers) == EXPERTS + 2
    for name in writers:
        assert not np.any(t[name][codes]), f"{name} writes the code columns"


# mxfp4: GPT-OSS's fused experts only
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "mxfp4"])
def test_every_format_holds_the_mtp_layer(fmt):
    """In every format the MTP tensors are under the same names: the block quantized as a
    decoder layer (its linears' scales beside them), ``e_proj`` and ``h_proj`` quantized too
    (vLLM's ``DeepSeekV4MTP`` builds them with the quantization config, and the real
    checkpoints hold them in FP8) with the unit scale 2^-8 and not listed with the modules the
    checkpoint leaves alone, the rest as they are."""
    model = build_model(_config(hidden=256), dtype=torch.bfloat16)
    made = logical_model(model, 0, format=fmt, acceptance=0.6, mtp=True)
    t = made.tensors
    mtp = {n for n in t if n.startswith("mtp.")}
    assert names(1) <= mtp
    extra = mtp - names(1)
    quantized = FORMATS[fmt].quant is not None
    assert bool(extra) == quantized, extra
    proj = ("mtp.0.e_proj.", "mtp.0.h_proj.")
    assert all(n.startswith(("mtp.0.attn.", "mtp.0.ffn.", *proj)) for n in extra), extra
    assert not any(s.startswith(("mtp.0.e_proj", "mtp.0.h_proj")) for s in made.skipped)
    if quantized:
        assert any(n.startswith("mtp.0.attn.wo_b.") for n in extra)
        main = {n for n in t if n.startswith("layers.1.attn.wo_b.")}
        assert {n.replace("layers.1.", "mtp.0.") for n in main} <= mtp
        for p in proj:  # the same tensors as the block's linear weights
            assert {n[len(p) :] for n in extra if n.startswith(p)} == {
                n[len("mtp.0.attn.wo_b.") :] for n in extra if n.startswith("mtp.0.attn.wo_b.")
            }
            assert t[p + "weight"].dtype == t["mtp.0.attn.wo_b.weight"].dtype
            scale = p + ("weight_scale_2" if fmt == "nvfp4" else
                         "weight_scale_inv" if fmt == "fp8-block" else "weight_scale")  # fmt: skip
            assert t[scale].spec.low == 2.0**-8, t[scale].spec


BOTH = {"mtp.0.e_proj", "mtp.0.h_proj"}


@pytest.mark.parametrize(
    "listed, left",
    [("e_proj", {"mtp.0.e_proj"}), ("mtp.0.h_proj", {"mtp.0.h_proj"}), ("re:mtp\\..*", BOTH)],
)
def test_a_projection_the_configs_list_keeps_stays_unquantized(listed, left):
    """A quantized config whose list of modules left alone names an input projection (its
    ``modules_to_not_convert``): that projection unquantized and listed, the design's 1s
    written as they are, the other quantized as vLLM builds it."""
    from dataclasses import replace

    model = build_model(_config(hidden=256), dtype=torch.bfloat16)
    fmt = replace(FORMATS["fp8-block"], keep=(listed,))
    made = logical_model(model, 0, format=fmt, acceptance=0.6, mtp=True)
    t = made.tensors
    assert {s for s in made.skipped if s in BOTH} == left
    for p in BOTH:
        assert ((p + ".weight_scale_inv") in t) == (p not in left), p
        want = torch.bfloat16 if p in left else torch.float8_e4m3fn
        assert t[p + ".weight"].dtype == want, p


def test_transformers_loads_the_export_and_leaves_the_mtp_layers_out(tmp_path):
    """transformers' class drops ``mtp.*`` (``_keys_to_ignore_on_load_unexpected``): the export
    with MTP layers loads with nothing missing, and its config keeps their count."""
    out = H.export(_config(mtp=2), tmp_path, 0.6)
    assert names(2) <= set(files(out))
    model, info = tf.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert model.config.num_nextn_predict_layers == 2


FORWARD = [(a, 1, {}) for a in (0.3, 0.6, 0.9)] + [(0.6, 2, {})]
# a config the design was not developed on: other hidden size, vocabulary, streams, depth, k
FORWARD += [(0.75, 3, dict(hidden=192, vocab=3000, layers=3, hc=2, seed=7))]
# quantized exports (e_proj and h_proj quantized as vLLM's class builds them), read dequantized
# from their bytes and scales: FP8 block as the real checkpoints, each other format at 0.6
FORWARD += [(a, 1, dict(fmt="fp8-block")) for a in (0.3, 0.6, 0.9)]
FORWARD += [(0.6, 1, dict(fmt=f)) for f in QUANTIZED if f != "fp8-block"]


@pytest.mark.slow
@pytest.mark.parametrize("acceptance,k,other", FORWARD)
def test_deepseek_v4_mtp_by_an_independent_forward(acceptance, k, other, tmp_path):
    other = dict(other)
    seed, fmt = other.pop("seed", 0), other.pop("fmt", "bf16")
    cfg = _config(**other)
    out = _export(cfg, tmp_path, acceptance, fmt, seed)
    m = independent_v4_mtp_acceptance(out, k, tmp_path, prompts=4, tokens=120,
                                      vocab=cfg.vocab_size)  # fmt: skip
    got = H.conditional(m, k)
    print(f"\ndeepseek_v4 {other or ''} {fmt} MTP (independent forward), k={k}, A={acceptance}: "
          f"measured {[round(g, 3) for g in got]}, {len(m)} steps")  # fmt: skip
    assert all(abs(g - acceptance) <= 0.05 for g in got), (got, acceptance)


@pytest.mark.slow
def test_without_an_acceptance_the_independent_forward_is_right_by_chance(tmp_path):
    """The independent forward can fail: the export without an acceptance (the MTP layer filled
    by the rule alone) is accepted about as often as a random token is right."""
    out = H.export(_config(), tmp_path, None)
    m = independent_v4_mtp_acceptance(out, 1, tmp_path, prompts=4, tokens=120)
    print(f"\ndeepseek_v4 MTP (independent forward), no acceptance: {float(np.mean(m >= 1)):.3f}"
          f" over {len(m)} steps")  # fmt: skip
    assert np.mean(m >= 1) < 0.05
