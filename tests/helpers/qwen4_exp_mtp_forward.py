"""Qwen4-Exp's MTP layers, which transformers cannot run (its class drops ``mtp.*``), run
independently of fp8_dummy and of any engine as vLLM's ``Qwen4ExpMTP`` computes them: the
target's ``hc_count`` residual streams before its final mixer, normalized together (one
``(1 + w)`` RMS norm over all ``hc_count``·H of them: ``pre_fc_norm_hidden``) and each projected
by the shared ``fc_hidden``, plus ``fc_embedding`` of the ``pre_fc_norm_embedding``-normalized
embedding of the next token (added to every stream with unit weight: the block's first
combine), are the streams the MTP block reads; the block (transformers' own hyper-connected
decoder layer: QSA attention, MoE), the MTP layer's own mixer (``hyper_connection_mixer``: a
per-stream norm, a low-rank gate, the gated mean over the streams) and the target's lm_head give
the proposal. The block and the mixer are a one-layer model of transformers' ``qwen4_exp_text``
class loaded from the export's ``mtp.`` tensors; the streams it hands its mixer are the next
draft step's hidden state (vLLM's ``multi_hidden``). The MTP layers are used in turn (vLLM's
``spec_step_idx`` modulo their count), each draft on the sequence with the drafts so far, and
verified against the target's greedy tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers as tf
from safetensors.torch import save_file

from .deepseek_v4_mtp_forward import files
from .speculative_forward import accepted, greedy_sequences

# The MTP layers' own tensors (one set for all of them)
OWN = ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight")
OWN += ("mtp.fc_embedding.weight", "mtp.fc_hidden.weight")


def gemma_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM's ``GemmaRMSNorm``: x / rms(x) · (1 + w), in float32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())


def _block_model(out: Path, t: dict[str, torch.Tensor], i: int, work: Path) -> torch.nn.Module:
    """MTP layer i's block, the MTP mixer and the lm_head as a one-layer Qwen4-Exp text model
    (its attention the QSA one: as vLLM builds it)."""
    one = work / f"mtp-{i}"
    one.mkdir(parents=True, exist_ok=True)
    cfg = tf.AutoConfig.from_pretrained(out).get_text_config()
    cfg.num_hidden_layers, cfg.layer_types = 1, ["indexed_attention"]
    cfg.mtp_num_hidden_layers, cfg.ple_layer_ids = 0, []
    cfg.architectures = ["Qwen4ExpForCausalLM"]
    cfg.save_pretrained(one)
    p = f"mtp.layers.{i}."
    ours = {"model.layers.0." + n[len(p) :]: v for n, v in t.items() if n.startswith(p)}
    mixer = "mtp.hyper_connection_mixer."
    ours.update({"model.hyper_connection_mixer." + n[len(mixer) :]: v
                 for n, v in t.items() if n.startswith(mixer)})  # fmt: skip
    ours["lm_head.weight"] = t["lm_head.weight"]
    ours["model.embed_tokens.weight"] = t["model.embed_tokens.weight"]  # not read: streams given
    save_file({n: v.contiguous() for n, v in ours.items()}, str(one / "model.safetensors"))
    model, info = tf.AutoModelForCausalLM.from_pretrained(
        one, dtype=torch.float32, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


class _Streams:
    """Hooks on a Qwen4-Exp model: its first layer reads the given streams instead of the
    embedding's copies, and the streams its final mixer reads are kept."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.given: torch.Tensor | None = None
        self.last: torch.Tensor | None = None
        model.model.layers[0].register_forward_pre_hook(self._give, with_kwargs=True)
        model.model.hyper_connection_mixer.register_forward_pre_hook(self._keep)

    def _give(self, module, args, kwargs):
        if self.given is None:
            return None
        if args:
            return (self.given, *args[1:]), kwargs
        return args, dict(kwargs, hidden_states=self.given)

    def _keep(self, module, args):
        self.last = args[0]


def independent_qwen4_exp_mtp_acceptance(out: Path, k: int, work: Path, prompts: int = 4,
                                         tokens: int = 120, vocab: int = 1024,
                                         stats: dict | None = None) -> np.ndarray:  # fmt: skip
    """The tokens accepted per step of greedy MTP decoding with k draft tokens, the MTP layers
    used in turn, run as above; ``stats`` (where given) gets each MTP router's expert counts
    over the drafted positions (``loads``, [layers, experts]) and the RMS of each stream the MTP
    mixer reads there (``rms``)."""
    t = files(out)
    target = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    text = target.config.get_text_config()
    hc, h, eps = text.hc_count, text.hidden_size, text.rms_norm_eps
    n_mtp = getattr(text, "mtp_num_hidden_layers", 1)
    layers = [_block_model(out, t, i, work) for i in range(n_mtp)]
    hooks = [_Streams(layer) for layer in layers]
    loads = np.zeros((n_mtp, text.num_experts))
    rms: list[float] = []

    def count(i: int):
        def hook(module, args, output):  # the router's picks at the drafted (last) position
            loads[i] += np.bincount(output[2][-1].numpy(), minlength=text.num_experts)

        return hook

    for i, layer in enumerate(layers):
        layer.model.layers[0].mlp.gate.register_forward_hook(count(i))
    main = _Streams(target)
    w = {n: t[n].float() for n in OWN}
    embed = target.get_input_embeddings()

    def streams(e: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The MTP block's input streams [T, hc·H] from embeddings [T, H], streams [T, hc·H]."""
        e = gemma_rms(e, w["mtp.pre_fc_norm_embedding.weight"], eps)
        e = e @ w["mtp.fc_embedding.weight"].T
        x = gemma_rms(hidden, w["mtp.pre_fc_norm_hidden.weight"], eps)  # all streams together
        x = x.view(-1, hc, h) @ w["mtp.fc_hidden.weight"].T  # each stream alike
        return (x + e[:, None, :]).flatten(-2)

    counts = []
    with torch.no_grad():
        for start, seq in greedy_sequences(target, prompts, tokens + k + 1, vocab):
            target(seq[None], use_cache=False)
            hidden = main.last[0]  # [T, hc·H]: the target's streams before its final mixer
            assert hidden.shape[-1] == hc * h
            n = start
            while n < start + tokens:
                x = streams(embed(seq[1 : n + 1]), hidden[:n])
                drafts = []
                for step in range(k):
                    layer, hook = layers[step % n_mtp], hooks[step % n_mtp]
                    hook.given = x[None]
                    zeros = torch.zeros(1, x.shape[0], h)  # replaced by the streams
                    logits = layer(inputs_embeds=zeros, use_cache=False).logits[0, -1]
                    drafts.append(int(logits.argmax()))
                    last = hook.last[0, -1:]  # the streams before the MTP mixer: the next hidden
                    rms += last.view(hc, h).pow(2).mean(-1).sqrt().tolist()
                    x = torch.cat([x, streams(embed(torch.tensor([drafts[-1]])), last)])
                counts.append(accepted(drafts, seq, n))
                n += counts[-1] + 1
    if stats is not None:
        stats.update(loads=loads, rms=np.asarray(rms))
    return np.asarray(counts)
