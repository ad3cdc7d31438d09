"""Inkling's multimodal checkpoint (``inkling_mm_model``) in the realistic wing
(docs/realistic.md#speculative-decoding), made small here (its vision and audio towers from
small sub-configs): every tensor of its checkpoint but the MLPs' fused gate/up projections is a
strided view of one in-memory tensor; those interleave the rows of two in-memory tensors, or of
the two halves of one (an independent oracle: transformers' save conversion of tensors holding
their own indices), and are placed by parts (:mod:`fp8_dummy.realistic.interleaved`): the
in-memory fill and the export hold the same model."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

# the fused gate/up projections of the checkpoint: a dense MLP's, the routed experts', the
# shared experts'
FUSED = re.compile(
    r"\.mlp\.(w13_dn\.weight|experts\.w13_weight|shared_experts\.shared_w13_weight)$"
)


def _saved(cfg) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the small real model's tensors, each element holding its own index in all of them
    (float64: exact), the checkpoint transformers' own save conversion makes of them)."""
    from transformers.core_model_loading import revert_weight_conversion

    model = tf.AutoModelForImageTextToText.from_config(cfg)
    tagged, start = {}, 0
    for name, t in model.state_dict().items():
        tagged[name] = torch.arange(start, start + t.numel(), dtype=torch.float64).view(t.shape)
        start += t.numel()
    saved = revert_weight_conversion(model, dict(tagged))
    return tagged, {n: (t[0] if isinstance(t, list) else t).long() for n, t in saved.items()}


def _strided(ids: torch.Tensor) -> bool:
    """Whether the indices are ``offset + Σ i_d · stride_d`` (a strided view) for some strides."""
    flat = ids.reshape(-1)
    expected = torch.full_like(ids, int(flat[0]))
    for d, size in enumerate(ids.shape):
        if size > 1:
            step = int(ids.select(d, 1).reshape(-1)[0] - flat[0])
            shape = [1] * ids.dim()
            shape[d] = size
            expected = expected + torch.arange(size).view(shape) * step
    return torch.equal(expected, ids)


def test_only_the_fused_gate_up_projections_are_no_views():
    """The small multimodal model (a dense layer, then a MoE one with a shared expert; its
    towers): transformers' save conversion run on tensors whose elements are their own indices.
    Every checkpoint tensor but the fused gate/up projections is a strided view of one
    in-memory tensor (the towers' included); each fused one interleaves rows: a dense MLP's
    ``w13_dn`` and the shared experts' ``shared_w13_weight`` those of its ``gate_proj`` and
    ``up_proj`` (two tensors), the experts' ``w13_weight`` those of ``gate_up_proj``'s two
    halves (one tensor, in no strided order)."""
    # the experts' width apart from the hidden size: the rows' dimension is unambiguous
    cfg = H.inkling_mm(mtp=1, mlp_layer_types=["dense", "sparse"], moe_intermediate_size=48)
    tagged, saved = _saved(cfg)
    spans = [(int(t.reshape(-1)[0]), t.numel(), n) for n, t in tagged.items()]

    def sources(ids: torch.Tensor) -> set[str]:
        return {n for lo, k, n in spans if ((ids >= lo) & (ids < lo + k)).any()}

    unplaced = {n for n, ids in saved.items() if len(sources(ids)) != 1 or not _strided(ids)}
    assert unplaced == {n for n in saved if FUSED.search(n)}
    assert {FUSED.search(n).group(1) for n in unplaced} == {
        "w13_dn.weight", "experts.w13_weight", "shared_experts.shared_w13_weight"
    }  # fmt: skip
    assert any(n.startswith("model.visual.") for n in saved)
    assert any(n.startswith("model.audio.") for n in saved)
    mem = "model.language_model.layers"
    for name in unplaced:
        i = int(re.search(r"\.layers\.(\d+)\.", name).group(1))
        ids = saved[name]
        mlp = f"{mem}.{i}.mlp."
        if name.endswith("w13_dn.weight"):
            gate, up = tagged[mlp + "gate_proj.weight"], tagged[mlp + "up_proj.weight"]
        elif "shared_w13" in name:
            gate = tagged[mlp + "shared_experts.gate_proj"]
            up = tagged[mlp + "shared_experts.up_proj"]
        else:
            gate, up = tagged[mlp + "experts.gate_up_proj"].chunk(2, dim=-2)
        # the rows (the last but one dimension): the gate's and the up's in turn
        assert ids.shape[-2] == 2 * gate.shape[-2] and ids.shape[-1] == gate.shape[-1]
        assert torch.equal(ids[..., 0::2, :], gate.long())
        assert torch.equal(ids[..., 1::2, :], up.long())


def test_in_memory_and_export_hold_the_same_model(tmp_path):
    """The in-memory fill with acceptance and the export of the same small multimodal config
    and seed (a dense layer, then a MoE one): the same bytes, every tensor, as transformers'
    own load of the export (its conversion splitting each fused gate/up projection) holds
    them; the checkpoint's names placed, no warning."""
    cfg = H.inkling_mm(mlp_layer_types=["dense", "sparse"], moe_intermediate_size=48)
    out = H.export(cfg, tmp_path, 0.6)
    loaded = tf.AutoModelForImageTextToText.from_pretrained(out, dtype=torch.bfloat16)
    model = tf.AutoModelForImageTextToText.from_config(loaded.config, dtype=torch.bfloat16)
    for name, t in model.state_dict(keep_vars=True).items():
        t.data = t.data.to(loaded.state_dict()[name].dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, acceptance=0.6)
    theirs = loaded.state_dict()
    assert set(theirs) == set(model.state_dict())
    bad = [
        n for n, t in model.state_dict().items()
        if not torch.equal(t.view(torch.uint8), theirs[n].view(torch.uint8))
    ]  # fmt: skip
    assert not bad, bad


# vLLM's InklingMTP loader's names of MTP layer i's block (``transformer_block.``), as the
# multimodal checkpoint's main layers hold them (its ``use_global_scale``: the dense MLP's scale)
BLOCK = ["attn_norm.weight", "attn.wq_du.weight", "attn.wk_dv.weight", "attn.wv_dv.weight",
         "attn.wr_du.weight", "attn.wo_ud.weight", "attn.rel_logits_proj.proj",
         "attn.q_norm.weight", "attn.k_norm.weight", "attn.k_sconv.weight", "attn.v_sconv.weight",
         "attn_sconv.weight", "mlp_norm.weight", "mlp.w13_dn.weight", "mlp.w2_md.weight",
         "mlp.global_scale", "mlp_sconv.weight"]  # fmt: skip


def test_the_mtp_layers_under_the_checkpoints_names(tmp_path):
    """Two MTP layers with the chained hidden state's norm, counted by the checkpoint's
    ``mtp_config``: ``model.mtp.layers.{i}.`` ``hidden_norm``, ``embed_norm``, ``input_proj``
    [H, 2H], the block under ``transformer_block.`` by the multimodal checkpoint's own names
    (written out here from vLLM's loader), ``model.mtp.chain_norm``; the main model's names
    unchanged (those of the export without MTP layers)."""
    cfg = H.inkling_mm(mtp=2, chain_hidden_post_norm=True, use_global_scale=False)
    assert S.mtp_layers(cfg) == ("inkling", 2) and S.mtp_prefixes(cfg) == ("model.mtp.",)
    out = H.export(cfg, tmp_path / "a", 0.6)
    names = set(H.read(out))
    want = {"model.mtp.chain_norm.weight"}
    for i in range(2):
        p = f"model.mtp.layers.{i}."
        want |= {p + n for n in ("hidden_norm.weight", "embed_norm.weight", "input_proj.weight")}
        want |= {f"{p}transformer_block.{n}" for n in BLOCK}
    assert {n for n in names if n.startswith("model.mtp.")} == want
    # vLLM's own keys for the tensors transformers' model always holds (its defaults: off),
    # over the caller's false
    text = json.loads((out / "config.json").read_text())["text_config"]
    assert (text["use_global_scale"], text["use_embed_norm"]) == (True, True)
    plain = H.inkling_mm(mtp=0, chain_hidden_post_norm=True)
    assert S.mtp_layers(plain) == (None, 0)
    assert names - want == set(H.read(H.export(plain, tmp_path / "b", None)))


@pytest.mark.parametrize("acceptance", [0.3, 0.6, 0.9])
def test_the_weights_alone_give_the_designed_acceptance(acceptance, tmp_path):
    """From the export's files alone (tests/helpers/speculative.py's oracle: no fill code): no
    residual branch writes the code columns (the attention's ``wo_ud``, the MLPs' ``w2_md``,
    the experts' ``w2_weight`` and ``shared_w2_weight``), the target's greedy successors form
    one cycle over the stream's tokens, the MTP input projection reads its embedding half only
    (the hidden state first), and greedy verification replayed with it for k = 1 to 3 accepts
    at the designed rate per position."""
    cfg = H.inkling_mm(mtp=1)
    t = H.read(H.export(cfg, tmp_path, acceptance))
    text = cfg.get_text_config()
    maps = H.weight_maps(t, text.hidden_size, hidden_first=True)
    succ = maps["successor"]
    x, seen = 2, set()
    while x not in seen:
        seen.add(x)
        x = int(succ[x])
    assert seen == set(range(2, text.vocab_size)), "one cycle over the stream's tokens"
    (proposal,) = maps["proposals"].values()
    starts = np.random.default_rng(0).integers(2, text.vocab_size, 40)
    for k in (1, 2, 3):
        got = H.conditional(H.simulate(succ, proposal, k, starts, 200), k)
        assert all(abs(g - acceptance) < 0.03 for g in got), (k, got)


def test_transformers_mtp_model_loads_the_mtp_layers(tmp_path):
    """transformers' own ``MtpModel`` on the multimodal model finds every MTP tensor under the
    checkpoint's names (it raises on a missing one; its conversion splits ``w13_dn``'s rows in
    turn into ``gate_proj`` and ``up_proj``) and holds the export's values."""
    from transformers.modeling_layers import MtpModel

    cfg = H.inkling_mm(mtp=2, chain_hidden_post_norm=True)
    out = H.export(cfg, tmp_path, "0.9,0.5")
    t = H.read(out)
    model = tf.AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32)
    mtp = MtpModel.from_pretrained(model, device_map={"": "cpu"})
    ours = {n: p.detach().double().numpy() for n, p in mtp.named_parameters()}
    pairs = {"shared_post_norm.weight": t["model.mtp.chain_norm.weight"]}
    for i in range(2):
        p, b = f"model.mtp.layers.{i}.", f"model.mtp.layers.{i}.transformer_block."
        pairs[f"layers.{i}.eh_proj.weight"] = t[p + "input_proj.weight"]
        pairs[f"layers.{i}.enorm.weight"] = t[p + "embed_norm.weight"]
        pairs[f"layers.{i}.hnorm.weight"] = t[p + "hidden_norm.weight"]
        pairs[f"layers.{i}.mtp_block.self_attn.o_proj.weight"] = t[b + "attn.wo_ud.weight"]
        pairs[f"layers.{i}.mtp_block.mlp.gate_proj.weight"] = t[b + "mlp.w13_dn.weight"][0::2]
        pairs[f"layers.{i}.mtp_block.mlp.up_proj.weight"] = t[b + "mlp.w13_dn.weight"][1::2]
        pairs[f"layers.{i}.mtp_block.mlp.down_proj.weight"] = t[b + "mlp.w2_md.weight"]
    for mine, theirs in pairs.items():
        assert np.array_equal(ours[mine], theirs), mine


@pytest.mark.slow
@pytest.mark.parametrize("acceptance", [0.3, 0.6, 0.9])
def test_transformers_mtp_generation(acceptance, tmp_path, monkeypatch):
    """transformers' own MTP speculative decoding (``generate(use_mtp=True)``, greedy) of the
    multimodal export accepts its draft token at the designed rate, within 0.05 (several
    minutes each: its short convolutions' reference implementation on the CPU)."""
    out = H.export(H.inkling_mm(mtp=1), tmp_path, acceptance)
    m = H.mtp_acceptance(out, 1, monkeypatch)
    (got,) = H.conditional(m, 1)
    print(f"\nInkling multimodal MTP, A={acceptance}: measured {got:.3f}, {len(m)} steps")
    assert abs(got - acceptance) <= 0.05
