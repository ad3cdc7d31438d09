"""GLM-5-Next's MTP layers (docs/realistic.md#speculative-decoding): ``model.language_model.layers.
{L+i}.`` under the names vLLM's ``Glm5NextMTP`` loader reads (written out here from that class,
not from the fill): the decoder block without its hyper-connections (vLLM's MTP layer runs one
stream: no ``hc_attn_*``/``hc_ffn_*``), its attention the indexed MLA with its indexer, its MLP
the MoE; ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H], ``shared_head.norm`` and the embedding's copy
``embed_tokens``; no ``shared_head.head`` (vLLM's class shares the target's lm_head and its
loader fails on one). The design through the exported files alone, and the acceptance through
an independent forward of the MTP layer written here from vLLM's class's computation
(``Glm5NextMultiTokenPredictorLayer``): transformers' class drops the MTP layers and cannot run
them (its config declares no ``num_mtp_layers``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)
from helpers.speculative_forward import accepted, greedy_sequences  # noqa: E402

EXPERTS = 16  # the test config's routed experts
# The MTP block's checkpoint names as vLLM's Glm5NextMTP.load_weights reads them (its
# stacked_params_mapping: q_a_proj and kv_a_proj_with_mqa into fused_qkv_a_proj, wk and
# weights_proj into the indexer's wk_weights_proj; the experts one by one)
ATTENTION = ["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight",
             "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight",
             "o_proj.weight", "indexer.wq_b.weight", "indexer.wk.weight",
             "indexer.weights_proj.weight", "indexer.k_norm.weight", "indexer.k_norm.bias",
             "indexer.index_kpool_compress_ape", "indexer.index_kpool_compress_gate"]  # fmt: skip
BLOCK = [f"self_attn.{n}" for n in ATTENTION]
BLOCK += ["input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate.weight"]
BLOCK += ["mlp.gate.e_score_correction_bias"]
PROJS = ("gate", "up", "down")
BLOCK += [f"mlp.shared_experts.{p}_proj.weight" for p in PROJS]
BLOCK += [f"mlp.experts.{e}.{p}_proj.weight" for e in range(EXPERTS) for p in PROJS]
OWN = ["enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"]
OWN += ["embed_tokens.weight"]
MAIN = "model.language_model."


def _config(mtp=1, **more):
    return H.config("glm5_next", hidden=128, vocab=1024, mtp=mtp, **more)


def _files(out):
    index = json.loads((out / "model.safetensors.index.json").read_text())
    return set(index["weight_map"])


@pytest.mark.parametrize("mtp,acceptance", [(1, 0.6), (2, None)])
def test_glm5_next_mtp_under_vllms_names(mtp, acceptance, tmp_path):
    """Exactly the names vLLM's class reads for each of ``num_nextn_predict_layers``, after the
    main layers, with the designed stream and without; none of the block's hyper-connections."""
    cfg = _config(mtp)
    layers = cfg.text_config.num_hidden_layers
    out = H.export(cfg, tmp_path, acceptance)
    names = _files(out)
    made = {n for n in names if n.startswith(MAIN + "layers.")
            and int(n.split(".")[3]) >= layers}  # fmt: skip
    want = {f"{MAIN}layers.{layers + i}.{n}" for i in range(mtp) for n in BLOCK + OWN}
    assert made == want, (sorted(made - want), sorted(want - made))
    assert not any(".hc_" in n for n in made)
    assert any(n.endswith(".hc_attn_fn") for n in names - made)  # the main layers keep them
    t = H.read(out)
    for i in range(mtp):
        p = f"{MAIN}layers.{layers + i}."
        assert t[p + "eh_proj.weight"].shape == (128, 256)
        assert np.array_equal(t[p + "embed_tokens.weight"], t[MAIN + "embed_tokens.weight"])


@pytest.mark.parametrize("acceptance", [pytest.param(0.3, marks=pytest.mark.slow), 0.6,
                                        pytest.param(0.9, marks=pytest.mark.slow)])  # fmt: skip
def test_the_design_through_the_files(acceptance, tmp_path):
    """From the exported weights alone (helpers/speculative.py's oracle): no residual writer of
    the main or the MTP layers writes the code columns, the MTP layer's ``eh_proj`` reads its
    embedding half there, and greedy verification of its proposals accepts at the rate."""
    cfg = _config()
    out = H.export(cfg, tmp_path, acceptance)
    t = H.read(out)
    maps = H.weight_maps(t, 128)
    (proposal,) = maps["proposals"].values()
    m = H.simulate(maps["successor"], proposal, 1, range(2, 1024, 7), 400)
    got = H.conditional(m, 1)[0]
    assert abs(got - acceptance) <= 0.05, (got, acceptance)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _swiglu(x, w: dict, p: str, limit: float) -> torch.Tensor:
    """vLLM's clamped SwiGLU MLP (``SiluAndMulWithClamp``): the gate clamped above, the up
    projection on both sides."""
    g = (x @ w[p + "gate_proj.weight"].T).clamp(max=limit)
    u = (x @ w[p + "up_proj.weight"].T).clamp(-limit, limit)
    return (torch.nn.functional.silu(g) * u) @ w[p + "down_proj.weight"].T


def _moe(x, w: dict, p: str, text) -> torch.Tensor:
    """vLLM's ``Glm5NextMoE``: sigmoid scores, the top-k chosen with the score correction bias
    (one group), weighted by their scores renormalized and scaled; plus the shared expert."""
    scores = torch.sigmoid(x @ w[p + "gate.weight"].T)
    top = (scores + w[p + "gate.e_score_correction_bias"]).topk(text.num_experts_per_tok, -1)[1]
    weights = scores.gather(-1, top)
    weights = weights / weights.sum(-1, keepdim=True) * text.routed_scaling_factor
    out = _swiglu(x, w, p + "shared_experts.", text.swiglu_limit)
    for slot in range(top.shape[1]):
        for e in top[:, slot].unique().tolist():
            rows = top[:, slot] == e
            y = _swiglu(x[rows], w, f"{p}experts.{e}.", text.swiglu_limit)
            out[rows] += weights[rows, slot, None] * y
    return out


def _attention(x, w: dict, p: str, text) -> torch.Tensor:
    """vLLM's ``Glm5NextMLAAttention`` without RoPE (``mla_use_nope``): causal attention of the
    queries ``q_b(q_a_layernorm(q_a(x)))`` over the keys and values ``kv_b(kv_a_layernorm(
    kv_a(x)))``. Its indexer's top-k (the config's 256) is at least every sequence here, so its
    selection keeps every earlier token: the sparse attention is the dense causal one."""
    n, heads, eps = x.shape[0], text.num_attention_heads, text.rms_norm_eps
    nope, v_dim = text.qk_nope_head_dim, text.v_head_dim
    assert text.qk_rope_head_dim == 0 and text.index_topk >= n
    q = _rms(x @ w[p + "q_a_proj.weight"].T, w[p + "q_a_layernorm.weight"], eps)
    q = (q @ w[p + "q_b_proj.weight"].T).view(n, heads, nope)
    kv = _rms(x @ w[p + "kv_a_proj_with_mqa.weight"].T, w[p + "kv_a_layernorm.weight"], eps)
    kv = (kv @ w[p + "kv_b_proj.weight"].T).view(n, heads, nope + v_dim)
    k, v = kv[..., :nope], kv[..., nope:]
    scores = torch.einsum("qhd,khd->hqk", q, k) * nope**-0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, heads * v_dim)
    return out @ w[p + "o_proj.weight"].T


def independent_glm5_next_mtp_acceptance(out, k: int, prompts: int = 3, tokens: int = 80,
                                         vocab: int = 1024) -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy MTP decoding with k draft tokens, the first MTP
    layer reused for each, computed as vLLM's ``Glm5NextMultiTokenPredictorLayer`` does: the
    embedding (zero at position 0) normalized by ``enorm`` and the target's last hidden state by
    ``hnorm``, concatenated and projected by ``eh_proj``; the block (``input_layernorm``, the
    attention, its residual, ``post_attention_layernorm``, the MoE, its residual: one stream,
    no hyper-connections); ``shared_head.norm``; the target's lm_head. The normalized output is
    the next step's hidden state. The target is transformers' class of the export."""
    target = tf.AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    text = target.config.text_config
    assert text.num_nextn_predict_layers == 1, "vLLM uses the MTP layers in turn: one here"
    p = f"{MAIN}layers.{text.num_hidden_layers}."
    w = {n[len(p) :]: torch.from_numpy(v).float() for n, v in H.read(out).items()
         if n.startswith(p)}  # fmt: skip
    head = target.lm_head.weight.float()
    embed, eps = target.get_input_embeddings(), text.rms_norm_eps

    def inputs(e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        cat = torch.cat([_rms(e, w["enorm.weight"], eps), _rms(h, w["hnorm.weight"], eps)], -1)
        return cat @ w["eh_proj.weight"].T

    def layer(x: torch.Tensor) -> torch.Tensor:
        s = x + _attention(_rms(x, w["input_layernorm.weight"], eps), w, "self_attn.", text)
        y = _moe(_rms(s, w["post_attention_layernorm.weight"], eps), w, "mlp.", text)
        return _rms(y + s, w["shared_head.norm.weight"], eps)

    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            hidden = target.model(seq[None]).last_hidden_state[0].float()
            n = start  # the target has made seq[n]: the drafts start after it
            while n < start + tokens:
                e = embed(seq[1 : n + 1]).float()
                e[0] = 0  # vLLM's MTP input masks position 0
                x = inputs(e, hidden[:n])
                drafts = []
                for _ in range(k):
                    h = layer(x)[-1:]
                    drafts.append(int((h @ head.T).argmax()))
                    x = torch.cat([x, inputs(embed(torch.tensor([drafts[-1]])).float(), h)])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    return np.asarray(counts)


@pytest.mark.slow
@pytest.mark.parametrize("acceptance,k", [(0.3, 1), (0.6, 1), (0.9, 1), (0.6, 2)])
def test_glm5_next_mtp_by_an_independent_forward(acceptance, k, tmp_path):
    out = H.export(_config(), tmp_path, acceptance)
    m = independent_glm5_next_mtp_acceptance(out, k)
    got = H.conditional(m, k)
    print(f"\nglm5_next MTP (independent forward), k={k}, A={acceptance}: "
          f"measured {[round(g, 3) for g in got]}, {len(m)} steps")  # fmt: skip
    assert all(abs(g - acceptance) <= 0.05 for g in got), (got, acceptance)


@pytest.mark.slow
def test_without_an_acceptance_the_independent_forward_is_right_by_chance(tmp_path):
    """The independent forward can fail: the export without an acceptance (the MTP layer filled
    by the rule alone) is accepted about as often as a random token is right."""
    out = H.export(_config(), tmp_path, None)
    m = independent_glm5_next_mtp_acceptance(out, 1)
    print(f"\nglm5_next MTP (independent forward), no acceptance: {float(np.mean(m >= 1)):.3f}")
    assert np.mean(m >= 1) < 0.05
