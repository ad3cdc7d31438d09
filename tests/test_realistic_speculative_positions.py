"""The designed greedy stream (docs/realistic.md#speculative-decoding) through the model's own
forward where the residual gets more than the lookup and the branches: a position table added
to the lookup (GPT-2's ``wpe``, OPT's learned, Marian's sinusoidal, CTRL's computed one), a
LayerNorm's mean subtracted from every column (BART's post-norm residual, GPT-2's and OPT's
final norm), an attention output stored (in, out) and square (GPT-2's ``Conv1D`` ``c_proj``).
The greedy token after every position of random prompts is the stream's successor of the
token there, and the added tables hold 0 in the code columns S and S2."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import entropy_sweep  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import speculative as S  # noqa: E402

ARCHS = ["gpt2", "opt", "bart", "marian", "ctrl"]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_greedy_stream_holds_with_positions_and_layer_norms(arch):
    model, hidden, greedy, want = entropy_sweep.greedy_against_stream(arch, 16)
    assert (greedy == want).all(), f"{(greedy != want).mean():.3f} of the positions differ"
    lay = S.layout(hidden)
    tables = [(n, p) for n, p in model.named_parameters() if "position" in n or ".wpe." in n]
    assert tables or arch == "ctrl", "the class adds a position table"  # CTRL's: a buffer
    for name, p in tables:
        cols = list(lay.s) + list(lay.s2)
        assert not p.detach()[:, cols].view(torch.uint8).any(), name
