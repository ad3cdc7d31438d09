"""DeepSeek-V4's MTP layers, which transformers cannot run (its class drops ``mtp.*`` and its
config declares no ``num_mtp_layers``), run independently of fp8_dummy and of any engine as
vLLM's ``DeepSeekV4MTP`` and SGLang's ``DeepseekV4ForCausalLMNextN`` compute them: the target's
``hc_mult`` residual streams before its head's collapse (``hc_head``), each normalized by
``hnorm`` and projected by ``h_proj``, plus ``e_proj`` of the ``enorm``-normalized embedding of
the next token (vLLM zeroes it at position 0), are the streams the MTP block reads; the block
(transformers' own hyper-connected decoder layer: sliding attention, a routed MoE), the MTP
layer's own collapse (``hc_head_fn``/``hc_head_base``/``hc_head_scale``, transformers' own
``DeepseekV4HyperHead``), its ``norm`` and its ``head`` give the proposal. The block, the
collapse, the norm and the head are a one-layer model of transformers' ``deepseek_v4`` class
loaded from the export's ``mtp.{i}.`` tensors; the streams it returns before the collapse are
the next draft step's hidden state. Reused for k draft tokens, each on the sequence with the
drafts so far, and verified against the target's greedy tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from safetensors import safe_open
from safetensors.torch import save_file

from .speculative_forward import accepted, greedy_sequences

# The MTP layer's own tensors (the rest under its prefix is its block)
OWN = ("enorm.weight", "hnorm.weight", "e_proj.weight", "h_proj.weight", "norm.weight")
OWN += ("head.weight", "emb.tok_emb.weight", "hc_head_fn", "hc_head_base", "hc_head_scale")


def files(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor of an export, as the file holds it."""
    index = json.loads((out / "model.safetensors.index.json").read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(out / shard), framework="pt") as f:
            tensors.update({n: f.get_tensor(n) for n in f.keys()})
    return tensors


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _block_model(out: Path, t: dict[str, torch.Tensor], p: str, work: Path) -> torch.nn.Module:
    """MTP layer ``p``'s block, collapse, norm and head as a one-layer DeepSeek-V4 model (the
    block's attention sliding, its MoE routed: as vLLM builds it)."""
    one = work / f"mtp-{p.strip('.').replace('.', '-')}"
    one.mkdir(parents=True, exist_ok=True)
    cfg = tf.AutoConfig.from_pretrained(out)
    cfg.num_hidden_layers, cfg.layer_types, cfg.mlp_layer_types = 1, ["sliding_attention"], ["moe"]
    cfg.num_nextn_predict_layers = 0
    cfg.save_pretrained(one)
    ours = {"layers.0." + n[len(p) :]: v for n, v in t.items()
            if n.startswith(p) and n[len(p) :] not in OWN}  # fmt: skip
    ours.update({name: t[p + name] for name in ("hc_head_fn", "hc_head_base", "hc_head_scale")})
    ours["norm.weight"], ours["head.weight"] = t[p + "norm.weight"], t[p + "head.weight"]
    ours["embed.weight"] = t[p + "emb.tok_emb.weight"]  # not read: the block gets streams
    save_file({n: v.contiguous() for n, v in ours.items()}, str(one / "model.safetensors"))
    model, info = tf.AutoModelForCausalLM.from_pretrained(
        one, dtype=torch.float32, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


class _Streams:
    """Hooks on a DeepSeek-V4 model: its first layer reads the given streams instead of the
    embedding's copies, and the streams before its head's collapse are kept."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.given: torch.Tensor | None = None
        self.last: torch.Tensor | None = None
        model.model.layers[0].register_forward_pre_hook(self._give, with_kwargs=True)
        model.model.hc_head.register_forward_pre_hook(self._keep)

    def _give(self, module, args, kwargs):
        if self.given is None:
            return None
        return (self.given, *args[1:]), kwargs

    def _keep(self, module, args):
        self.last = args[0]


def independent_v4_mtp_acceptance(out: Path, k: int, work: Path, prompts: int = 4,
                                  tokens: int = 120, vocab: int = 1024) -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy MTP decoding with k draft tokens, DeepSeek-V4's
    first MTP layer (``mtp.0.``) reused for each (as vLLM reuses its one), run as above."""
    t = files(out)
    target = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    hc, eps = target.config.hc_mult, target.config.rms_norm_eps
    layer = _block_model(out, t, "mtp.0.", work)
    mtp, main = _Streams(layer), _Streams(target)
    w = {n: t["mtp.0." + n].float() for n in OWN[:4]}
    embed = target.get_input_embeddings()

    def streams(e: torch.Tensor, h: torch.Tensor, first: bool) -> torch.Tensor:
        """The MTP block's input streams [T, hc, H] from embeddings [T, H], streams [T, hc, H]."""
        e = _rms(e, w["enorm.weight"], eps)
        if first:
            e[0] = 0  # vLLM's MTP input kernel masks position 0
        x = _rms(h, w["hnorm.weight"], eps) @ w["h_proj.weight"].T  # each stream alike
        return x + (e @ w["e_proj.weight"].T)[:, None, :]

    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            target(seq[None], use_cache=False)
            hidden = main.last[0]  # [T, hc, H]: the target's streams before its collapse
            assert hidden.shape[1] == hc
            n = start
            while n < start + tokens:
                x = streams(embed(seq[1 : n + 1]), hidden[:n], True)
                drafts = []
                for _ in range(k):
                    mtp.given = x[None]
                    zeros = torch.zeros(1, x.shape[0], x.shape[-1])  # replaced by the streams
                    logits = layer(inputs_embeds=zeros, use_cache=False).logits[0, -1]
                    drafts.append(int(logits.argmax()))
                    h = mtp.last[0, -1:]  # the MTP layer's streams: the next step's hidden
                    x = torch.cat([x, streams(embed(torch.tensor([drafts[-1]])), h, False)])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    return np.asarray(counts)
