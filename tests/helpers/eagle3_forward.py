"""An EAGLE-3 draft (``export --draft-layout eagle3``) run independently of fp8_dummy and of any
engine, written from the math of vLLM 0.33's ``Eagle3LlamaForCausalLM`` (llama_eagle3.py and
the proposer that drives it): ``fc`` over the concatenated auxiliary hidden states of the
target (the residual stream before layers ``eagle_aux_hidden_state_layer_ids``), then the one
decoder layer: ``input_layernorm`` of the token's embedding and ``hidden_norm`` of the hidden
state concatenated into q/k/v (neox RoPE, causal softmax at head_dim^-0.5, grouped KV heads),
the residual ``hidden_norm(h)`` where ``norm_before_residual`` (else h), ``o_proj``,
``post_attention_layernorm``, the SiLU MLP, ``norm`` and ``lm_head`` (``d2t`` maps a smaller
draft vocabulary). Position i of the first pass holds the token after target position i and
the target's hidden states at i; each later draft step appends the previous proposal with the
previous step's pre-norm output, one position on. Verified against the target's greedy
tokens (transformers' forward of the exported target).

``engine="sglang"``: SGLang 0.5.23's ``LlamaForCausalLMEagle3`` (llama_eagle3.py, and its
target's capture in llama.py), whose math is vLLM's but for two readings of the config: the
residual is the raw hidden state whatever ``norm_before_residual`` says, and auxiliary layer
id i is layer i's output (the residual stream before layer i + 1); and, run, where the
draft's width is the target's, its EAGLE worker gives the draft the target's embedding
(``set_embed``). Both engines capture each listed layer once, in ascending order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import transformers as tf

from .speculative import read
from .speculative_forward import accepted, greedy_sequences


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of x [n, heads, hd] at positions ``pos``."""
    hd = x.shape[-1]
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos.double()[:, None] * inv[None]
    cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
    a, b = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class Eagle3:
    """The draft's forward over a sequence of (token, hidden state, position) entries."""

    def __init__(self, folder: Path, engine: str = "vllm"):
        assert engine in ("vllm", "sglang"), engine
        self.engine = engine
        self.c = json.loads((folder / "config.json").read_text())
        self.w = {n: torch.from_numpy(v).float() for n, v in read(folder).items()}

    def aux_states(self, states: tuple) -> list[torch.Tensor]:
        """The auxiliary hidden states the engine captures from transformers' ``hidden_states``
        (entry i: the residual stream before layer i) of one sequence."""
        shift = 1 if self.engine == "sglang" else 0
        ids = sorted(set(self.c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]))
        return [states[i + shift][0] for i in ids]

    def combine(self, aux: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(aux, -1) @ self.w["fc.weight"].T

    def forward(self, ids: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor):
        """(logits over the target's vocabulary of the last entry, pre-norm output of each)."""
        c, w, p = self.c, self.w, "midlayer."
        eps, hd = c["rms_norm_eps"], c["head_dim"]
        nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        e = _rms(w["embed_tokens.weight"][ids], w[p + "input_layernorm.weight"], eps)
        h = _rms(hidden, w[p + "hidden_norm.weight"], eps)
        residual = h if c.get("norm_before_residual") and self.engine == "vllm" else hidden
        x = torch.cat([e, h], -1)
        n = x.shape[0]
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
        q, k = _rope(q, pos, c["rope_theta"]), _rope(k, pos, c["rope_theta"])
        group = nh // nkv
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * hd**-0.5
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, nh * hd)
        r = residual + attn @ w[p + "self_attn.o_proj.weight"].T
        m = _rms(r, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
        out = r + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        logits = _rms(out[-1], w["norm.weight"], eps) @ w["lm_head.weight"].T
        if "d2t" in w:  # draft id i is target id i + d2t[i]
            full = torch.full((c["vocab_size"],), float("-inf"))
            full[torch.arange(logits.numel()) + w["d2t"].long()] = logits
            logits = full
        return logits, out


def eagle3_acceptance(target_dir: Path, draft_dir: Path, k: int, prompts: int = 4,
                      tokens: int = 150, vocab: int = 1024,
                      engine: str = "vllm") -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy EAGLE-3 decoding with k draft tokens, by the
    ``engine``'s math."""
    target = tf.AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    draft = Eagle3(draft_dir, engine)
    if engine == "sglang" and draft.c["hidden_size"] == draft.c["target_hidden_size"]:
        draft.w["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().float()
    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            states = target(seq[None], output_hidden_states=True).hidden_states
            hidden = draft.combine(draft.aux_states(states))
            n = start  # the target has made seq[n]: the drafts start after it
            while n < start + tokens:
                toks, hs, pos = seq[1 : n + 1], hidden[:n], torch.arange(n)
                drafts = []
                for _ in range(k):
                    logits, out = draft.forward(toks, hs, pos)
                    drafts.append(int(logits.argmax()))
                    toks = torch.cat([toks, torch.tensor([drafts[-1]])])
                    hs, pos = torch.cat([hs, out[-1:]]), torch.cat([pos, pos[-1:] + 1])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    return np.asarray(counts)
