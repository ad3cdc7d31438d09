"""The default ``balanced`` routing writes no router's offsets (docs/realistic.md#routing), so
it reads no router's top-k: a model whose config gives none, or gives it where the fill does
not look (NLLB-MoE's config has no top-k field; DBRX nests it in ``ffn_config``; HunYuan-MoE
may give a per-layer list), fills and exports by the plain rule alone. The bytes are checked
against digests recorded from the fill before hash routers were looked for under balanced
(commit 01ad9f9, the same models and seeds): the names and bytes of every tensor."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from types import SimpleNamespace

import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import logical_model
from fp8_dummy.realistic.routing import RoutingError

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

# sha256 over (name, bytes) in order, as 01ad9f9 gives them (see the module's docstring)
NLLB_EXPORT = "58dec1aebc53efc98fd89c470e973da5fd2d6d07a8d0db6f117f57ae2c0db9e3"
PLAIN_INPLACE = "6ee9b4eb29bf974f81bb7f5eb1d95fbdebb5cef67cfe0fd0ee1e4e7bda07fe5d"


def digest(items: Iterable[tuple[str, torch.Tensor]]) -> str:
    h = hashlib.sha256()
    for name, t in items:
        h.update(name.encode())
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _nllb_config():
    return tf.NllbMoeConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=48,
        decoder_ffn_dim=48, encoder_attention_heads=2, decoder_attention_heads=2, num_experts=4,
        expert_capacity=8, encoder_sparse_step=1, decoder_sparse_step=1,
        max_position_embeddings=64,
    )  # fmt: skip


def test_nllb_moe_balanced_export_and_fill_as_before():
    cfg = _nllb_config()
    assert not any(hasattr(cfg, n) for n in ("num_experts_per_tok", "moe_topk", "top_k"))
    with torch.device("meta"):
        empty = tf.AutoModelForSeq2SeqLM.from_config(cfg)
    lm = logical_model(empty, 5)
    # the nested router (``ffn.router.classifier``) is a router, and balanced leaves it be
    router = "model.encoder.layers.0.ffn.router.classifier.weight"
    assert lm.tensors[router].spec.role == "router" and not lm.tensors[router].overrides
    assert digest(lm.items()) == NLLB_EXPORT
    torch.manual_seed(0)
    model = tf.AutoModelForSeq2SeqLM.from_config(cfg)
    fp8_dummy.initialize_realistic_dummy_weights(model, 5)  # the default: balanced
    exported = dict(lm.items())
    placed = model.state_dict()
    for name, t in exported.items():
        assert torch.equal(placed[name].view(torch.uint8), t.view(torch.uint8)), name
    with pytest.raises(RoutingError, match="no number of experts per token"):
        logical_model(empty, 5, routing="zipf:1.2")  # a profile needs the top-k: refused


class _Plain(torch.nn.Module):
    """An engine-like class (not transformers'): routers in ``layers.<i>``, one of its own
    ``gate``, one nested in ``router``, a config without a top-k."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=40, hidden_size=16)
        self.embed_tokens = torch.nn.Embedding(40, 16)
        self.layers = torch.nn.ModuleList()
        for i in range(2):
            block = torch.nn.Module()
            block.up_proj = torch.nn.Linear(16, 24, bias=False)
            block.down_proj = torch.nn.Linear(24, 16, bias=False)
            if i == 0:
                block.gate = torch.nn.Linear(16, 4, bias=False)
            else:
                block.router = torch.nn.Module()
                block.router.classifier = torch.nn.Linear(16, 4)
            self.layers.append(block)


def test_plain_model_without_top_k_fills_balanced_as_before():
    model = _Plain()
    specs = fp8_dummy.initialize_realistic_dummy_weights(model, 11)
    assert specs["layers.0.gate.weight"].role == "router"
    assert specs["layers.1.router.classifier.weight"].role == "router"
    assert digest(model.state_dict().items()) == PLAIN_INPLACE
