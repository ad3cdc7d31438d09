"""Step-3.5-Flash's text checkpoint run by transformers' own decoder, ``Step3p7TextModel``
(transformers maps the model type to no class that loads the checkpoint), for
tests/helpers/speculative_forward.py: the checkpoint's tensors renamed to the decoder's here,
from the names vLLM's ``Step3p5ForCausalLM`` reads (the packed experts' gate and up rows
concatenated into ``mlp.experts.gate_up_proj``, ``moe.gate`` and ``moe.router_bias`` the
router's, ``share_expert`` the shared experts), not through fp8_dummy. As vLLM's classes run
it: the target's hidden state handed to the MTP layer is the last layer's output before the
final norm (vLLM's ``Step3p5Model`` returns it so; its ``compute_logits`` normalizes), and an
MTP block's likewise (its ``shared_head.norm`` only for the logits)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import torch
import transformers as tf

# checkpoint name -> the decoder's (after ``model.``), the packed experts apart
_RENAMES = ((re.compile(r"\.moe\.gate\.weight$"), ".mlp.gate.weight"),
            (re.compile(r"\.moe\.router_bias$"), ".mlp.gate.e_score_correction_bias"),
            (re.compile(r"\.moe\.down_proj\.weight$"), ".mlp.experts.down_proj"),
            (re.compile(r"\.share_expert\."), ".mlp.shared_experts."))  # fmt: skip


class Step3p5:
    """A causal LM of ``config`` whose tensors are ``t`` (checkpoint names, numpy or torch)."""

    def __init__(self, config, t: dict) -> None:
        self.config = config
        self.model = tf.Step3p7TextModel(config).float().eval()
        state = {}
        for name, v in t.items():
            v = torch.as_tensor(v).float()
            if name.endswith("moe.up_proj.weight"):
                continue
            if name.endswith("moe.gate_proj.weight"):
                up = torch.as_tensor(t[name.replace("gate_proj", "up_proj")]).float()
                state[name.replace("moe.gate_proj.weight", "mlp.experts.gate_up_proj")] = torch.cat(
                    [v, up], 1
                )
                continue
            for pattern, new in _RENAMES:
                name = pattern.sub(new, name)
            state[name] = v
        self.lm_head = state.pop("lm_head.weight")
        own = {n.removeprefix("model."): v for n, v in state.items()}
        missing, unexpected = self.model.load_state_dict(own, strict=False)
        assert not unexpected, unexpected
        assert all("rotary" in n or "inv_freq" in n for n in missing), missing
        self._pre_norm: list = []
        self.model.norm.register_forward_hook(lambda m, a, o: self._pre_norm.append(a[0]))

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def __call__(self, input_ids=None, inputs_embeds=None, output_hidden_states=False):
        self._pre_norm.clear()
        out = self.model(input_ids=input_ids, inputs_embeds=inputs_embeds)
        logits = out.last_hidden_state @ self.lm_head.T
        return SimpleNamespace(logits=logits, hidden_states=(self._pre_norm[-1],))

    def generate(self, ids, do_sample=False, max_new_tokens=1):
        assert not do_sample
        seq = ids
        with torch.no_grad():
            for _ in range(max_new_tokens):
                nxt = self(seq).logits[:, -1].argmax(-1, keepdim=True)
                seq = torch.cat([seq, nxt], 1)
        return seq


def target(folder: Path, t: dict) -> Step3p5:
    """The main model: the checkpoint's tensors but its MTP layers' (``model.layers.{L+i}.``)."""
    config = tf.AutoConfig.from_pretrained(folder)
    layer = re.compile(r"^model\.layers\.(\d+)\.")
    main = {n: v for n, v in t.items()
            if (m := layer.match(n)) is None
            or int(m.group(1)) < config.num_hidden_layers}  # fmt: skip
    return Step3p5(config, main)


def mtp_block(folder: Path, t: dict, prefix: str) -> Step3p5:
    """The MTP layer under ``prefix`` as a one-layer model: its block (the config's MTP layer
    types), ``shared_head.norm`` the final norm, ``shared_head.output`` the head."""
    whole = tf.AutoConfig.from_pretrained(folder)
    kw = {k: v for k, v in whole.to_dict().items() if k not in ("model_type", "per_layer_config")}
    kw.update(num_hidden_layers=1, num_nextn_predict_layers=0,
              layer_types=whole.mtp_layer_types[:1], mlp_layer_types=whole.mtp_mlp_layer_types[:1],
              mtp_layer_types=None, mtp_mlp_layer_types=None, swiglu_limits=None,
              swiglu_limits_shared=None)  # fmt: skip
    small = tf.Step3p7TextConfig(**kw)
    ours = {"model.embed_tokens.weight": t["model.embed_tokens.weight"],
            "model.norm.weight": t[prefix + "shared_head.norm.weight"],
            "lm_head.weight": t[prefix + "shared_head.output.weight"]}  # fmt: skip
    own = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")
    for n, v in t.items():
        if n.startswith(prefix) and not n[len(prefix) :].startswith(own):
            ours["model.layers.0." + n[len(prefix) :]] = v
    return Step3p5(small, ours)
