"""The designed greedy stream (docs/realistic.md#speculative-decoding) through the model's own
forward where the residual gets more than the lookup and the branches: a position table added
to the lookup (GPT-2's ``wpe``, OPT's learned, Marian's sinusoidal, CTRL's computed one), a
LayerNorm's mean subtracted from every column (BART's post-norm residual, GPT-2's and OPT's
final norm), an attention output stored (in, out) and square (GPT-2's ``Conv1D`` ``c_proj``).
The greedy token after every position of random prompts is the stream's successor of the
token there, and the added tables hold 0 in the code columns S and S2."""

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

ARCHS = ["gpt2", "opt", "bart", "marian", "ctrl"]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_greedy_stream_holds_with_positions_and_layer_norms(arch):
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
    ids = torch.as_tensor(rng.integers(0, vocab, (24, 16)))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[..., :vocab]
    greedy = logits.argmax(-1).numpy()
    want = stream.successor[ids.numpy()]
    assert (greedy == want).all(), f"{(greedy != want).mean():.3f} of the positions differ"
    lay = S.layout(hidden)
    tables = [(n, p) for n, p in model.named_parameters() if "position" in n or ".wpe." in n]
    assert tables or arch == "ctrl", "the class adds a position table"  # CTRL's: a buffer
    for name, p in tables:
        cols = list(lay.s) + list(lay.s2)
        assert not p.detach()[:, cols].view(torch.uint8).any(), name
