"""Qwen4-Exp's MTP layers (docs/realistic.md#speculative-decoding) under the names and shapes
vLLM 0.33's ``Qwen4ExpMTP`` reads (written out here from its class and ``load_weights``, not
from the fill): ``mtp.layers.{i}.`` a hyper-connected decoder layer (QSA attention with its
indexer, MoE with the shared expert, ``attn_hyper_connection``, ``mlp_hyper_connection``), and
once for all of them ``mtp.pre_fc_norm_embedding`` [H], ``mtp.pre_fc_norm_hidden`` [hc·H],
``mtp.fc_embedding`` and ``mtp.fc_hidden`` [H, H], the head's stream collapse
``mtp.hyper_connection_mixer.*``. The design through the exported files alone (``fc_embedding``
copies S2 of the normalized embedding into S, ``fc_hidden`` and the block write no S, the
collapse's gate rows on S are 0), and (the slow tier) the acceptance, the MTP router's load and
the streams' RMS through an independent forward of the MTP layers as vLLM's class computes them
(tests/helpers/qwen4_exp_mtp_forward.py): transformers' class drops ``mtp.*``."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.qwen4_exp_mtp_forward import independent_qwen4_exp_mtp_acceptance  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import config_checkpoint  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

EXPERTS = H.QWEN4_EXP["num_experts"]
# the block's checkpoint names vLLM's loader reads (its QSA attention packs q/k/v and the
# indexer's index_qk_proj; its hyper-connections pack input_mix_weight_down with
# block_inject_weight)
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm", "indexer.index_qk_proj",
             "indexer.q_layernorm", "indexer.k_layernorm"]  # fmt: skip
BLOCK = [f"self_attn.{n}.weight" for n in ATTENTION]
BLOCK += ["mlp.gate.weight", "mlp.shared_expert_gate.weight"]
BLOCK += [f"mlp.shared_expert.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
BLOCK += [f"mlp.experts.{e}.{p}.weight" for e in range(EXPERTS)
          for p in ("gate_proj", "up_proj", "down_proj")]  # fmt: skip
HC = ["hc_norm", "input_mix_weight_down", "input_mix_weight_up"]
BLOCK += [f"{b}_hyper_connection.{n}.weight" for b in ("attn", "mlp") for n in HC]
BLOCK += [f"{b}_hyper_connection.block_inject_weight.weight" for b in ("attn", "mlp")]
OWN = ["pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc_embedding", "fc_hidden"]
OWN += [f"hyper_connection_mixer.{n}" for n in HC]
OWN = [f"mtp.{n}.weight" for n in OWN]


def names(n: int) -> set[str]:
    return {f"mtp.layers.{i}.{name}" for i in range(n) for name in BLOCK} | set(OWN)


def _config(hidden=128, vocab=1024, mtp=1, hc=4):
    return H.config("qwen4_exp_text", hidden=hidden, vocab=vocab, layers=4, mtp=mtp, hc_count=hc)


@pytest.mark.parametrize("mtp", [1, 2])
def test_qwen4_exp_mtp_under_the_names_vllm_reads(mtp):
    """Exactly the names vLLM's ``Qwen4ExpMTP`` reads for each of ``mtp_num_hidden_layers``,
    their shapes (``fc_embedding``/``fc_hidden`` [H, H], ``pre_fc_norm_hidden`` and the
    collapse's norm [hc·H], its gate [hc·H, r]), the main model's tensors as without them; one
    layer where the config names none (vLLM's reading), none at 0."""
    h, hc = 128, 4
    cfg = _config(h, mtp=mtp, hc=hc)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    assert {n for n in t if n.startswith("mtp.")} == names(mtp)
    main = config_checkpoint(_config(h, mtp=0, hc=hc), 0, acceptance=0.5).tensors
    assert {n for n in t if not n.startswith("mtp.")} == set(main)
    r = cfg.hc_lowrank
    shapes = {"mtp.fc_embedding.weight": (h, h), "mtp.fc_hidden.weight": (h, h),
              "mtp.pre_fc_norm_embedding.weight": (h,), "mtp.pre_fc_norm_hidden.weight": (hc * h,),
              "mtp.hyper_connection_mixer.hc_norm.weight": (hc * h,),
              "mtp.hyper_connection_mixer.input_mix_weight_down.weight": (r, hc * h),
              "mtp.hyper_connection_mixer.input_mix_weight_up.weight": (hc * h, r)}  # fmt: skip
    for name, shape in shapes.items():
        assert tuple(t[name].shape) == shape, name
    for i in range(mtp):  # the block is the main QSA layer's (layer 3) shape for shape
        for name in BLOCK:
            assert t[f"mtp.layers.{i}.{name}"].shape == t[f"model.layers.3.{name}"].shape, name
    assert S.mtp_layers(cfg) == ("qwen4_exp", mtp) and S.mtp_prefixes(cfg) == ("mtp.",)
    assert S.mtp_layers(_config(mtp=0)) == (None, 0)
    unset = _config(mtp=0)
    del unset.mtp_num_hidden_layers
    assert S.mtp_layers(unset) == ("qwen4_exp", 1)


def test_a_config_without_the_indexer_is_refused_with_mtp_layers():
    """Three linear-attention layers and no QSA fields: the main model builds, but the MTP
    block's QSA layer cannot (transformers' attention always builds the indexer): refused with
    the fields named; with ``mtp_num_hidden_layers`` 0, made without MTP layers."""
    cfg = _config()
    cfg.num_hidden_layers, cfg.layer_types = 3, cfg.layer_types[:3]
    for key in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget"):
        setattr(cfg, key, None)
    with pytest.raises(ValueError, match="needs the config's indexer_n_heads.*mtp_num_hidden"):
        config_checkpoint(cfg, 0)
    cfg.mtp_num_hidden_layers = 0
    assert not any(n.startswith("mtp.") for n in config_checkpoint(cfg, 0).tensors)


def test_the_mtp_layer_is_valued_as_the_main_models():
    """Each block tensor has the spec of the main QSA layer's tensor of the same name (its own
    values), the collapse the main final mixer's, the two norms the final mixer's norm's (an
    effective gain of 1 for a (1 + w) norm: 0)."""
    t = config_checkpoint(_config(), 0, acceptance=0.5).tensors
    for name in BLOCK:
        main = t[f"model.layers.3.{name}"]
        assert t[f"mtp.layers.0.{name}"].spec == main.spec, name
        assert t[f"mtp.layers.0.{name}"].key != main.key, "its own values, not a copy"
    for n in HC:
        mine, main = (t[f"{p}.hyper_connection_mixer.{n}.weight"] for p in ("mtp", "model"))
        assert mine.spec == main.spec and mine.key != main.key, n
    norm = t["model.hyper_connection_mixer.hc_norm.weight"].spec
    assert (norm.kind, norm.low) == ("const", 0.0), norm
    for name in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"):
        assert t[name].spec == norm, name


@pytest.mark.parametrize("hidden, vocab, hc, mtp", [(128, 1024, 4, 1), (192, 2048, 2, 2)])
def test_the_exported_mtp_layer_carries_the_design(hidden, vocab, hc, mtp, tmp_path):
    """From the exported files alone: ``fc_embedding``'s rows on the code columns S each read
    one column of S2 (the view's code) of the normalized embedding with weight exactly 1,
    ``fc_hidden``'s rows on S are 0, no residual writer of the MTP blocks (``o_proj``, the
    experts' and the shared expert's ``down_proj``) writes S; so S of every stream the block
    reads, and of its output, is the view's code times a positive factor. The collapse's gate
    rows on S of every stream are 0 (each code column gated by sigmoid(0) = 1/2), the rest
    keep the rule's spread; the head (the lm_head) reads S only."""
    out = H.export(_config(hidden, vocab, mtp, hc), tmp_path, 0.6)
    t = H.read(out)
    head = t["lm_head.weight"]
    codes = np.flatnonzero(np.abs(head).sum(0))
    assert 0 < codes.size < hidden // 2
    view = codes - codes.size  # S2: the d columns before S
    e, h = t["mtp.fc_embedding.weight"], t["mtp.fc_hidden.weight"]
    assert np.array_equal(e[codes][:, view], np.eye(codes.size))
    assert not np.any(np.delete(e[codes], view, axis=1))
    assert not np.any(h[codes])
    rest = np.delete(e, codes, axis=0)
    assert 0.9 < rest.std() * np.sqrt(hidden) < 1.1, rest.std()
    up = t["mtp.hyper_connection_mixer.input_mix_weight_up.weight"]
    rows = np.concatenate([k * hidden + codes for k in range(hc)])
    assert not np.any(up[rows])
    r = up.shape[1]
    assert 0.9 < np.delete(up, rows, axis=0).std() * np.sqrt(r) < 1.1
    # the main model's own final mixer is left as the rule makes it
    assert np.any(t["model.hyper_connection_mixer.input_mix_weight_up.weight"][rows])
    writers = [
        n
        for n in t
        if n.startswith("mtp.layers.") and n.endswith(("o_proj.weight", "down_proj.weight"))
    ]
    assert len(writers) == mtp * (EXPERTS + 2)
    for name in writers:
        assert not np.any(t[name][codes]), f"{name} writes the code columns"


FORWARD = [(a, 1, 1) for a in (0.3, 0.6, 0.9)] + [(0.6, 2, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("acceptance,k,mtp", FORWARD)
def test_qwen4_exp_mtp_by_an_independent_forward(acceptance, k, mtp, tmp_path):
    """vLLM's MTP computation written independently (tests/helpers/qwen4_exp_mtp_forward.py)
    on the export: each position's draft right at the acceptance, within 0.05, against
    transformers' own target's greedy tokens; the MTP routers' load balanced (the default
    profile: max/mean under 1.5 over the drafted positions, 250-370 of them, two picks each of
    8 experts, whose counts' sampling spread alone is ~12% of their mean) and the streams its
    collapse reads at RMS within [0.25, 4]."""
    cfg = _config(mtp=mtp)
    out = H.export(cfg, tmp_path, acceptance)
    stats: dict = {}
    m = independent_qwen4_exp_mtp_acceptance(out, k, tmp_path, prompts=4, tokens=120,
                                             vocab=cfg.vocab_size, stats=stats)  # fmt: skip
    got = H.conditional(m, k)
    loads, rms = stats["loads"], stats["rms"]
    balance = loads.max(1) / loads.mean(1)
    print(
        f"\nqwen4_exp MTP (independent forward), {mtp} layer(s), k={k}, A={acceptance}: "
        f"measured {[round(g, 3) for g in got]}, {len(m)} steps; router max/mean "
        f"{np.round(balance, 3).tolist()}, stream RMS {rms.min():.2f}-{rms.max():.2f}"
    )
    assert all(abs(g - acceptance) <= 0.05 for g in got), (got, acceptance)
    assert (balance < 1.5).all(), loads
    assert 0.25 <= rms.min() and rms.max() <= 4, (rms.min(), rms.max())
