"""Integer tensors the rule leaves untouched (role ``untouched``: DeepSeek-V4's hash router's
``tid2eid``, vLLM's ``expert_map``) in the logical checkpoint: they have no values of their own,
so every consumer that writes into a buffer of its own (the export's reused buffers, the
engines' stand-ins, :meth:`LogicalModel.made`) gets 0, never the bytes the buffer held before;
the in-place fill leaves the model's own tensor as it is (docs/realistic.md#roles)."""

from __future__ import annotations

import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from test_realistic_speculative_deepseek_v4 import config  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import Block, config_checkpoint  # noqa: E402

NAME = "layers.0.ffn.gate.tid2eid"  # the checkpoint's name (no "model.")


def test_untouched_tensor_is_zero_in_the_logical_checkpoint():
    lm = config_checkpoint(config(128, 1024, 2, 4), 0)
    t = lm.tensors[NAME]
    assert t.spec.kind == "skip" and t.dtype == torch.int64 and t.shape == (1024, 2)
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
    model = tf.AutoModelForCausalLM.from_config(config(128, 1024, 2, 4)).eval()
    table = model.model.layers[0].mlp.gate.tid2eid
    table.copy_(torch.randint(0, 16, table.shape, generator=torch.Generator().manual_seed(1)))
    before = table.clone()
    fp8_dummy.initialize_realistic_dummy_weights(model, 0)
    assert torch.equal(table.view(torch.uint8), before.view(torch.uint8))
