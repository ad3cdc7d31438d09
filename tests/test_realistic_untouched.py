"""Integer tensors the rule leaves untouched (role ``untouched``: vLLM's ``expert_map``,
GPTQ's ``g_idx``; here an integer table a MoE block keeps in its checkpoint) in the logical
checkpoint: they have no values of their own, so every consumer that writes into a buffer of
its own (the export's reused buffers, the engines' stand-ins, :meth:`LogicalModel.made`) gets
0, never the bytes the buffer held before; the in-place fill leaves the model's own tensor as
it is (docs/realistic.md#roles). DeepSeek-V4's hash router's table is not one: the routing
designs it (tests/test_realistic_hash_routing.py)."""

from __future__ import annotations

import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import Block, logical_model  # noqa: E402

NAME = "model.layers.0.mlp.expert_map"


def _model() -> torch.nn.Module:
    """A small Qwen3-MoE whose first MoE block keeps an integer table in its state dict."""
    config = tf.Qwen3MoeConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_hidden_layers=2, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32,
    )  # fmt: skip
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    table = torch.randint(0, 8, (1024, 2), generator=torch.Generator().manual_seed(1))
    model.model.layers[0].mlp.register_buffer("expert_map", table, persistent=True)
    return model


def test_untouched_tensor_is_zero_in_the_logical_checkpoint():
    lm = logical_model(_model(), 0)
    t = lm.tensors[NAME]
    assert t.spec.kind == "skip" and t.spec.role == "untouched" and t.dtype == torch.int64
    gen = torch.Generator().manual_seed(0)
    held = torch.randint(1, 1 << 62, t.shape, generator=gen)  # what a reused buffer held
    lm.write(held, Block.whole(NAME, t.shape))
    assert not held.view(torch.uint8).any()
    block = torch.randint(1, 1 << 62, (300, 2), generator=gen)  # a block of it, as a loader's
    lm.write(block, Block(NAME, t.shape, (300, 2), 400, (2, 1)))
    assert not block.view(torch.uint8).any()
    (made,) = lm.made([NAME])
    assert not made.view(torch.uint8).any()


def test_untouched_tensor_is_left_as_it_is_in_place():
    model = _model()
    table = model.model.layers[0].mlp.expert_map
    before = table.clone()
    fp8_dummy.initialize_realistic_dummy_weights(model, 0)
    assert torch.equal(table.view(torch.uint8), before.view(torch.uint8))
