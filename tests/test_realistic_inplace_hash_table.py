"""The in-place fill of a class transformers does not place (an engine's) plans a hash
router's table (DeepSeek-V4's ``tid2eid``) before its checks, as the logical model does
(docs/realistic.md#routing): a table on the meta device stays deferred, and one that cannot be
written is refused before any tensor is, every other tensor's bytes as they were."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import fp8_dummy

VOCAB, EXPERTS, K, HIDDEN = 40, 8, 2, 16


class _Gate(torch.nn.Module):
    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(EXPERTS, HIDDEN))
        self.register_buffer("tid2eid", table)


class _Model(torch.nn.Module):
    """Two hash-routed layers: ``layers.<i>.ffn.gate`` with its weight and table."""

    def __init__(self, first: torch.Tensor) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=VOCAB, hidden_size=HIDDEN, num_experts_per_tok=K)
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(torch.nn.Module() for _ in range(2))
        for i, layer in enumerate(self.layers):
            table = first if i == 0 else torch.zeros(VOCAB, K, dtype=torch.int64)
            layer.ffn = torch.nn.Module()
            layer.ffn.gate = _Gate(table)
            layer.ffn.down_proj = torch.nn.Linear(24, HIDDEN, bias=False)


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_a_table_on_the_meta_device_stays_deferred(routing):
    """Its layer still a hash router's (no offsets sent through the residual stream instead):
    every placed tensor's bytes as where the table is placed too."""
    model = _Model(torch.empty(VOCAB, K, dtype=torch.int64, device="meta"))
    specs = fp8_dummy.initialize_realistic_dummy_weights(model, 3, routing=routing)
    assert specs["layers.0.ffn.gate.tid2eid"].role == "deferred"
    assert specs["layers.1.ffn.gate.tid2eid"].role == "hash"  # the placed one: written
    table = model.layers[1].ffn.gate.tid2eid
    assert table.min() >= 0 and table.max() < EXPERTS and (table[:, 0] != table[:, 1]).all()
    placed = _Model(torch.zeros(VOCAB, K, dtype=torch.int64))
    fp8_dummy.initialize_realistic_dummy_weights(placed, 3, routing=routing)
    want = placed.state_dict()
    for name, t in model.state_dict().items():
        if name != "layers.0.ffn.gate.tid2eid":
            assert torch.equal(t.view(torch.uint8), want[name].view(torch.uint8)), name


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_an_unwritable_table_is_refused_before_anything_is_written(routing):
    with torch.inference_mode():  # an inference tensor: torch refuses writes outside the mode
        table = torch.zeros(VOCAB, K, dtype=torch.int64)
    model = _Model(table)
    poison = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if t is not table:
            t.data.view(torch.uint8).fill_(0xA5)
            poison[name] = t.detach().clone()
    with pytest.raises(RuntimeError, match=r"layers\.0\.ffn\.gate\.tid2eid: an inference tensor"):
        fp8_dummy.initialize_realistic_dummy_weights(model, 3, routing=routing)
    for name, t in model.state_dict(keep_vars=True).items():
        if name in poison:
            assert torch.equal(t.view(torch.uint8), poison[name].view(torch.uint8)), name
