"""The routing's carrier (docs/realistic.md#routing: the residual's last dimension j holds a
constant for routers without a bias) where the residual gets more than the lookup and the
branches, and weights are stored (in, out): a GPT-2-style model (``Conv1D`` weights, the
attention's ``c_proj`` square, a learned position table) with a bias-free router in each
block. The vocabulary's table holds the carrier in column j, the position table 0 there (a
row of it is added to every lookup: the rule's values would make h_j vary with the position, a
second carrier would double it), every
branch output writes 0 to output j along the dimension it stores its outputs in, every other
projection reads 0 from input j; all other bytes are the balanced fill's. Through the logical
(transformers) path and the in-place path of a plain module alike."""

from __future__ import annotations

import types
import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
import transformers as tf  # noqa: E402
from helpers import realistic_sweep as sweep  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic.routing import CARRIER  # noqa: E402


def _gpt2(hidden: int, vocab: int, positions: int, plain: bool | str) -> torch.nn.Module:
    cfg = tf.GPT2Config(n_embd=hidden, n_layer=2, n_head=4, vocab_size=vocab,
                        n_positions=positions, bos_token_id=0, eos_token_id=0)  # fmt: skip
    cfg.num_experts_per_tok = 2
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(cfg).eval()
    for block in model.transformer.h:  # a bias-free router: its offsets ride the carrier
        block.mlp.gate = torch.nn.Linear(hidden, 8, bias=False)
    if not plain:
        return model
    body = torch.nn.Module()  # the same tensors in a module transformers does not place
    body.wte, body.wpe, body.h = model.transformer.wte, model.transformer.wpe, model.transformer.h
    # no vocab_size, or one the table's rows exceed (an engine pads its table to a multiple,
    # or splits it across ranks): the vocabulary's table is then the largest of the width
    body.config = types.SimpleNamespace(num_experts_per_tok=2)
    if plain == "padded":
        body.config.vocab_size = vocab - 5
    return body


# (in, out) weights: where a branch output's outputs and a projection's inputs are
OUT_LAST = ("attn.c_proj.weight", "mlp.c_proj.weight")
IN_FIRST = ("attn.c_attn.weight", "mlp.c_fc.weight")


@pytest.mark.parametrize("plain", [False, True, "padded"], ids=["logical", "in-place", "padded"])
def test_the_carrier_on_in_out_weights_and_position_tables(plain):
    rng = np.random.default_rng(zlib.crc32(str(plain).encode()))
    hidden = int(rng.choice([64, 96, 128]))
    vocab, positions = int(rng.choice([700, 1024, 1500])), int(rng.choice([128, 256, 512]))
    seed = int(rng.integers(0, 1000))
    routed = _gpt2(hidden, vocab, positions, plain)
    balanced = _gpt2(hidden, vocab, positions, plain)
    fp8_dummy.initialize_realistic_dummy_weights(routed, seed, routing="zipf:1")
    fp8_dummy.initialize_realistic_dummy_weights(balanced, seed)
    j = hidden - 1
    got = {n.removeprefix("transformer."): p.detach() for n, p in routed.named_parameters()}
    want = {n.removeprefix("transformer."): p.detach().clone() for n, p in
            balanced.named_parameters()}  # fmt: skip
    want["wte.weight"][:, j] = CARRIER
    want["wpe.weight"][:, j] = 0.0
    for i in range(2):
        for local in OUT_LAST:
            want[f"h.{i}.{local}"][:, j] = 0.0
        for local in IN_FIRST:
            want[f"h.{i}.{local}"][j, :] = 0.0
        gate = got[f"h.{i}.mlp.gate.weight"]
        assert gate[:, j].contiguous().view(torch.uint8).any(), "the offsets in column j"
        want[f"h.{i}.mlp.gate.weight"][:, j] = gate[:, j]
    assert set(got) == set(want)
    differ = [n for n, t in got.items() if not torch.equal(t.view(torch.uint8),
                                                            want[n].view(torch.uint8))]  # fmt: skip
    assert not differ, differ


def test_the_sweep_builds_an_encoder_decoders_decoder_at_its_layers():
    """An encoder-decoder family's causal LM (BART's) runs its decoder's layers, which
    num_hidden_layers (the encoder's there) leaves at the config's default."""
    for layers in (2, 3):
        model, why = sweep.build("bart", layers)
        assert model is not None, why
        built = len(model.model.decoder.layers)
        assert built == layers, built
