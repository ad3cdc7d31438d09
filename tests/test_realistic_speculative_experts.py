"""The designed greedy stream (docs/realistic.md#speculative-decoding) through the model's own
forward where the experts' output projection is a 3-D weight under a name the rule's list does
not hold: GraniteMoE's and its shared and hybrid variants' ``output_linear.weight`` (in memory
transformers' ``experts.down_proj``), JetMoE's ``output_linear`` [E, out, in] of its MLP's and
its attention's experts (the attention's run after its ``kv_proj``). Their rows on the code
columns S are 0 like every branch output's, so the greedy token after every position of
random prompts is the stream's successor of the token there."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import entropy_sweep  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import speculative as S  # noqa: E402

# granitemoehybrid's Mamba layers run transformers' reference scan here (~30 s): slow tier
ARCHS = ["granitemoe", "granitemoeshared", pytest.param("granitemoehybrid", marks=pytest.mark.slow)]
ARCHS += ["jetmoe"]
OUTPUTS = {"jetmoe": ["mlp.output_linear", "self_attention.experts.output_linear"]}


@pytest.mark.parametrize("arch", ARCHS)
def test_the_greedy_stream_holds_through_experts_output_linear(arch):
    model, hidden, greedy, want = entropy_sweep.greedy_against_stream(arch, 12)
    exact = (greedy == want).mean()
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
