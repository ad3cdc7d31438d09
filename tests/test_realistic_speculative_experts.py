"""The designed greedy stream (docs/realistic.md#speculative-decoding) through the model's own
forward where the experts' output projection is a 3-D weight under a name the rule's list does
not hold: GraniteMoE's and its shared and hybrid variants' ``output_linear.weight`` (in memory
transformers' ``experts.down_proj``), JetMoE's ``output_linear`` [E, out, in] of its MLP's and
its attention's experts (the attention's run after its ``kv_proj``). Their rows on the code
columns S are 0 like every branch output's, so the greedy token after every position of
random prompts is the stream's successor of the token there."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import entropy_sweep  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

# granitemoehybrid's Mamba layers run transformers' reference scan here (~30 s): slow tier
ARCHS = ["granitemoe", "granitemoeshared", pytest.param("granitemoehybrid", marks=pytest.mark.slow)]
ARCHS += ["jetmoe"]
OUTPUTS = {"jetmoe": ["mlp.output_linear", "self_attention.experts.output_linear"]}


@pytest.mark.parametrize("arch", ARCHS)
def test_the_greedy_stream_holds_through_experts_output_linear(arch):
    rng = np.random.default_rng(zlib.crc32(arch.encode()))
    hidden = int(rng.choice([64, 96, 128]))
    model, why = entropy_sweep.build(arch, 2, hidden, int(rng.choice([512, 1024, 1500])))
    assert model is not None, why
    config = model.config
    vocab = config.get_text_config().vocab_size
    seed = int(rng.integers(0, 1000))
    fp8_dummy.initialize_realistic_dummy_weights(model, seed, acceptance=0.6)
    allowed, where = S.allowed_tokens(vocab, config)
    stream = S.design_stream(S.parse_acceptance(0.6), seed, vocab, allowed, where)
    ids = torch.as_tensor(rng.integers(0, vocab, (24, 12)))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[..., :vocab]
    exact = (logits.argmax(-1).numpy() == stream.successor[ids.numpy()]).mean()
    assert exact == 1.0, f"the greedy token is the designed successor at {exact:.3f}"
    # the experts' output weights hold 0 on S (their output dimension, the one before the last)
    lay = S.layout(hidden)
    params = dict(model.named_parameters())
    for layer in range(2):
        for local in OUTPUTS.get(arch, ["block_sparse_moe.experts.down_proj"]):
            name = f"model.layers.{layer}.{local}"
            p = params.get(name, params.get(f"{name}.weight"))
            assert p is not None and p.dim() == 3 and p.shape[1] == hidden, name
            assert not p.detach()[:, list(lay.s)].view(torch.uint8).any(), name
