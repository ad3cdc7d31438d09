"""HY-V4's MTP layer, which transformers cannot run (its config declares no ``num_mtp_layers``,
its class drops ``model.mtp_layers.*``), computed here in torch from the architecture's math on
the export's tensors alone, as vLLM's ``HYV4MTP`` composes it: the embedding (zero at
position 0) and the target's last hidden state, each RMS-normalized (``enorm``, ``hnorm``),
projected by ``eh_proj``; the block, HY-V4's decoder layer on one residual stream (vLLM builds
it with ``enable_ihc`` off): MLA attention (q and kv through their low-rank parts, RoPE on the
rope parts, interleaved as vLLM's class applies it; each head's learned sink logit in the
softmax; the output gated elementwise by ``sigmoid(linear_gate)``), then the MoE (sigmoid
router, its bias for the choice only, the top-k weights normalized and scaled by
``routed_scaling_factor``; SwiGLU experts clamped at ``swiglu_limit``; the shared expert);
``final_layernorm`` and the target's lm_head. The lightning indexer chooses every position
where its top-k is at least the sequence (checked), so the attention is causal over all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers as tf

from .speculative import read
from .speculative_forward import accepted, greedy_sequences


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Interleaved RoPE over the last dimension (pairs 2j, 2j+1) of x [T, ..., d] at 0..T-1."""
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(x.shape[0], dtype=torch.float64)[:, None] * freq  # [T, d/2]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
    cos, sin = angle.cos().float().view(shape), angle.sin().float().view(shape)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


class _Layer:
    """One MTP layer's tensors (``model.mtp_layers.{i}.``) and the config's sizes."""

    def __init__(self, t: dict, i: int, cfg) -> None:
        p = f"model.mtp_layers.{i}."
        self.w = {n[len(p) :]: torch.from_numpy(v).float() for n, v in t.items() if n.startswith(p)}
        self.cfg = cfg
        self.eps = cfg.rms_norm_eps

    def inputs(self, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        w = self.w
        e, h = _rms(e, w["enorm.weight"], self.eps), _rms(h, w["hnorm.weight"], self.eps)
        return torch.cat([e, h], -1) @ w["eh_proj.weight"].T

    def attention(self, a: torch.Tensor) -> torch.Tensor:
        c, w, n = self.cfg, self.w, a.shape[0]
        assert n <= c.index_topk, "the indexer would choose among the positions"
        heads, nope, rope = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim
        dv = c.v_head_dim
        s = "self_attn."
        q = _rms(a @ w[s + "q_a_proj.weight"].T, w[s + "q_a_layernorm.weight"], self.eps)
        q = (q @ w[s + "q_b_proj.weight"].T).view(n, heads, nope + rope)
        ckv = a @ w[s + "kv_a_proj_with_mqa.weight"].T
        latent = _rms(ckv[:, : c.kv_lora_rank], w[s + "kv_a_layernorm.weight"], self.eps)
        kv = (latent @ w[s + "kv_b_proj.weight"].T).view(n, heads, nope + dv)
        theta = c.rope_parameters["rope_theta"]
        q_pe, k_pe = _rope(q[..., nope:], theta), _rope(ckv[:, c.kv_lora_rank :], theta)
        scores = torch.einsum("qhd,khd->hqk", q[..., :nope], kv[..., :nope])
        scores = (scores + torch.einsum("qhd,kd->hqk", q_pe, k_pe)) * (nope + rope) ** -0.5
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        sink = w[s + "learnable_sink_param"].view(heads, 1, 1).expand(heads, n, 1)
        probs = torch.cat([scores, sink], -1).softmax(-1)[..., :n]  # the sink takes its share
        o = torch.einsum("hqk,khd->qhd", probs, kv[..., nope:])
        o = o * torch.sigmoid(a @ w[s + "linear_gate.weight"].T).view(n, heads, dv)
        return o.reshape(n, heads * dv) @ w[s + "o_proj.weight"].T

    def moe(self, m: torch.Tensor) -> torch.Tensor:
        c, w = self.cfg, self.w
        scores = torch.sigmoid(m @ w["mlp.gate.weight"].T)
        chosen = (scores + w["mlp.gate.e_score_correction_bias"]).topk(c.num_experts_per_tok, -1)[1]
        weights = scores.gather(-1, chosen)
        weights = weights / weights.sum(-1, keepdim=True) * c.routed_scaling_factor
        limit, out = c.swiglu_limit, torch.zeros_like(m)
        up_down = w["mlp.experts.gate_up_proj"], w["mlp.experts.down_proj"]
        for token in range(m.shape[0]):
            for slot in range(chosen.shape[1]):
                e = int(chosen[token, slot])
                gate, up = (up_down[0][e] @ m[token]).chunk(2)
                act = torch.nn.functional.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)
                out[token] += weights[token, slot] * (up_down[1][e] @ act)
        sh = "mlp.shared_experts."
        gate, up = m @ w[sh + "gate_proj.weight"].T, m @ w[sh + "up_proj.weight"].T
        return out + (torch.nn.functional.silu(gate) * up) @ w[sh + "down_proj.weight"].T

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The block and the final norm on the projected inputs x [T, H]."""
        w = self.w
        x = x + self.attention(_rms(x, w["input_layernorm.weight"], self.eps))
        x = x + self.moe(_rms(x, w["post_attention_layernorm.weight"], self.eps))
        return _rms(x, w["final_layernorm.weight"], self.eps)


def independent_hy_v4_mtp_acceptance(out: Path, k: int, prompts: int = 4, tokens: int = 120,
                                     vocab: int = 1024) -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy MTP decoding with k draft tokens (the first MTP
    layer reused, each step on the sequence with the drafts so far, its input the previous
    step's output as vLLM's proposer feeds it), verified against transformers' greedy tokens
    of the target: the export's main model."""
    t = read(out)
    target = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any(n.startswith("model.mtp_layers.1.") for n in t), "vLLM uses them in turn"
    layer = _Layer(t, 0, target.config)
    embed = torch.from_numpy(t["model.embed_tokens.weight"]).float()
    head = torch.from_numpy(t["lm_head.weight"]).float()
    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            hidden = target.model(seq[None]).last_hidden_state[0]
            n = start  # the target has made seq[n]: the drafts start after it
            # up to the tokens asked for, or to where the target stopped (an end of sequence)
            while n < min(start + tokens, len(seq) - k - 1):
                e = embed[seq[1 : n + 1]].clone()
                e[0] = 0  # vLLM's class zeroes the embedding at position 0
                x = layer.inputs(e, hidden[:n])
                drafts = []
                for _ in range(k):
                    y = layer(x)[-1]
                    drafts.append(int((head @ y).argmax()))
                    x = torch.cat([x, layer.inputs(embed[drafts[-1]][None], y[None])])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    return np.asarray(counts)
