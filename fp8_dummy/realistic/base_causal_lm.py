"""A causal LM around the base model transformers ships for a config it maps to no model
class at all, for the model types whose real checkpoints are causal LMs (:data:`BASE_ONLY`).

Step-3.5-Flash's text checkpoint (``step3p5``, vLLM's and SGLang's ``Step3p5ForCausalLM``)
is ``model.embed_tokens``, ``model.layers.N.*``, ``model.norm`` and ``lm_head``: transformers
5.20 has its config class (``Step3p7TextConfig``) and its decoder (``Step3p7TextModel``, the
language model of Step-3.7's multimodal class) but registers neither with any auto class for
this model type. The causal LM made here is that decoder under ``model`` and an ``lm_head``
[V, H] (tied to the embedding where the config says so), a transformers model (its class a
subclass of the decoder's ``PreTrainedModel``), whose checkpoint conversion is the one
transformers gives the multimodal model: its renamings of the text decoder's tensors
(``mlp.experts.gate_up_proj`` -> ``moe.gate_proj``/``moe.up_proj``, ``mlp.gate`` ->
``moe.gate``, ``mlp.shared_experts`` -> ``share_expert``...) are the text checkpoint's names,
and its renamings of the multimodal prefixes (``model.language_model.``, ``vision_model.``)
find no name of this model. The conversion is the instance's own (``_weight_conversions``,
what transformers' save reverts), not a registration: no other model's conversion changes.
Every other model type is built as before (None here)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BASE_ONLY", "base_causal_lm"]

# model type -> (transformers' base model class of that config, the model type whose checkpoint
# conversion names its checkpoint, the checkpoint's architecture: the made class's name, which
# an export writes in config.json's ``architectures`` where the caller's config names none)
BASE_ONLY = {"step3p5": ("Step3p7TextModel", "step3p7", "Step3p5ForCausalLM")}


def base_causal_lm(config: Any, kw: dict) -> torch.nn.Module | None:
    """The causal LM of ``config`` (on the current device; ``kw``: ``from_config``'s), or None
    where its model type is not one of :data:`BASE_ONLY`, or the config is not an instance of
    the base model's own config class."""
    import transformers
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    entry = BASE_ONLY.get(getattr(type(config), "model_type", None))
    if entry is None:
        return None
    base = getattr(transformers, entry[0], None)
    if base is None or not isinstance(config, base.config_class):
        return None
    gating = getattr(config, "gating", True)
    if gating is not True and gating != "per-head":  # the engines build no other gate
        raise ValueError(
            f"fp8_dummy: {entry[2]} with gating {gating!r}: vLLM's and SGLang's classes build "
            "its attention's gate per head alone (gating true, as Step's configs say)"
        )
    model = _causal_lm_class(base, entry[2])._from_config(config, **kw)
    model._weight_conversions = get_checkpoint_conversion_mapping(entry[1]) or []
    return model


_CLASSES: dict[tuple[type, str], type] = {}


def _causal_lm_class(base: type, name: str) -> type:
    """One causal-LM class per base model class and name (made once: its name is its
    identity)."""
    if (base, name) not in _CLASSES:
        _CLASSES[base, name] = _make(base, name)
    return _CLASSES[base, name]


def _make(base: type, name: str) -> type:
    from transformers import GenerationMixin
    from transformers.modeling_outputs import CausalLMOutputWithPast

    pretrained = next(c for c in base.__mro__[1:] if "PreTrainedModel" in c.__name__)

    def __init__(self, config):  # noqa: N807
        pretrained.__init__(self, config)
        self.model = base(config)
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
            **kwargs,
        )  # fmt: skip
        logits = self.lm_head(out.last_hidden_state)
        return CausalLMOutputWithPast(
            logits=logits, hidden_states=getattr(out, "hidden_states", None)
        )

    return type(
        name,
        (pretrained, GenerationMixin),
        {
            "__module__": __name__,
            "config_class": base.config_class,
            "base_model_prefix": "model",
            "_tied_weights_keys": {"lm_head.weight": "model.embed_tokens.weight"},
            "__init__": __init__,
            "get_output_embeddings": get_output_embeddings,
            "forward": forward,
        },
    )
