"""``python -m fp8_dummy export CONFIG OUT --acceptance A --draft DRAFT``: a draft model for
any target (docs/realistic.md#speculative-decoding): a plain causal LM (Llama's class, untied)
of the target's vocabulary, special ids, context length and tokenizer, of a chosen depth and
width, whose greedy proposal after each token is the target's designed successor where the
stream says the draft is right and the token after it where it is wrong: the target's
verification accepts its proposals at the chosen rate. Its config.json carries
``"fp8_dummy_draft": true``, which is how every holder of the model (the export, vLLM's and
SGLang's realistic loads) knows to write the draft's view of the stream."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from ..._atomic_file import write_file
from ..checkpoint_files import gather
from ..config_file import read_config
from .draft_heads import kv_heads
from .eagle3 import eagle3_config

__all__ = ["DRAFT_KEY", "LAYOUTS", "draft_config", "is_draft", "stage_draft"]

DRAFT_KEY = "fp8_dummy_draft"
LAYOUTS = ("llama", "eagle3")  # a plain causal LM; EAGLE-3's (:mod:`.eagle3`)
_TEXT = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings")


def _text(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def draft_config(target: Any, layers: int = 2, hidden: int | None = None) -> Any:
    """The draft's transformers config: Llama, ``layers`` decoder layers of width ``hidden``
    (default: a quarter of the target's, within [128, 2048], a multiple of 64), head size 64
    (32 below 512), :func:`kv_heads` KV heads, the target's vocabulary, special ids, context
    length and dtype, untied."""
    import transformers

    text = _text(target)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"fp8_dummy: --draft-layers {layers!r}: a positive number of layers")
    if hidden is None:
        hidden = max(128, min(2048, text.hidden_size // 4 // 64 * 64))
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 64 or hidden % 32:
        raise ValueError(f"fp8_dummy: --draft-hidden {hidden!r}: a multiple of 32, at least 64")
    head = 64 if hidden >= 512 else 32
    heads = hidden // head
    kw = {n: getattr(text, n) for n in _TEXT if getattr(text, n, None) is not None}
    cfg = transformers.LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 32 * 32, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads(heads), head_dim=head,
        tie_word_embeddings=False, **kw,
    )  # fmt: skip
    cfg.dtype = getattr(text, "dtype", None) or getattr(target, "dtype", None)
    setattr(cfg, DRAFT_KEY, True)
    return cfg


def is_draft(config: Any) -> bool:
    """A draft model's config (``export --draft`` marks it)."""
    return getattr(config, DRAFT_KEY, False) is True


def stage_draft(
    source: str, layers: int = 2, hidden: int | None = None, layout: str = "llama"
) -> str:
    """A private directory holding the draft's config.json (:func:`draft_config` of the target
    config at ``source``, or EAGLE-3's: :func:`.eagle3.eagle3_config`) and the target's
    checkpoint files beside it (the export's allow-list: tokenizer, generation config; each
    with its own mode): what ``export`` makes the draft's checkpoint from. The caller removes
    it."""
    if layout not in LAYOUTS:
        raise ValueError(f"fp8_dummy: --draft-layout {layout!r}: one of {', '.join(LAYOUTS)}")
    config, _, folder = read_config(source)
    eagle = dict(eagle3_config(config, hidden), **{DRAFT_KEY: True}) if layout == "eagle3" else None
    cfg = draft_config(config, layers, hidden) if eagle is None else None
    copies, _ = gather(folder)
    stage = tempfile.mkdtemp(prefix="fp8_dummy_draft_")
    try:
        for copy in copies:
            write_file(os.path.join(stage, copy.name), copy.data, mode=copy.mode)
        if eagle is not None:
            write_file(os.path.join(stage, "config.json"), json.dumps(eagle, indent=2).encode())
        else:
            cfg.save_pretrained(stage)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage
