"""The lm_head's scale where a class's structure changes what of the code reaches the lm_head's
input (fp8_dummy/realistic/speculative/code_gain.py; docs/realistic.md#how-the-weights-
realize-it): BART's, MVP's and mBART's normalized lookup, Beam's depth-scaled residual adds,
Qwen4-Exp's gated stream mix after its final norm. Through transformers' own forward of a
small model of each (two layers, random width and vocabulary; and the entropy sweep's
config: tests/helpers/entropy_sweep.py) filled with acceptance 0.6:
the greedy token is the designed successor at every position of random prompts (greedy
verification accepts at the designed rate), the next-token entropy at temperature 1 lies
between 1 nat and 80% of ln(vocabulary), and the code's coefficient at the lm_head's input
is the one the rule predicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import entropy_sweep  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import speculative as S  # noqa: E402
from fp8_dummy.realistic.logical import logical_model  # noqa: E402
from fp8_dummy.realistic.speculative import design  # noqa: E402

ARCHS = ["bart", "mvp", "mbart", "beam", "qwen4_exp_text"]


def _code_coefficients(model, hidden: int, ids: torch.Tensor) -> np.ndarray:
    """The current token's code's coefficient in the lm_head's input at the last position of
    each prompt: its S columns' projection on the token's code of unit RMS."""
    lay = S.layout(hidden)
    cols = slice(lay.s.start, lay.s.stop)
    code = model.get_input_embeddings().weight.detach()[ids[:, -1], cols].double()
    code = code / code.pow(2).mean(-1, keepdim=True).sqrt()
    seen = []
    head = model.get_output_embeddings()
    hook = head.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach()))
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        hook.remove()
    h = seen[0][:, -1, cols].double()
    return ((h * code).sum(-1) / (code * code).sum(-1)).numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_the_band_and_the_greedy_stream(arch):
    model, hidden, greedy, want = entropy_sweep.greedy_against_stream(arch, 12)
    assert (greedy == want).all(), f"{(greedy != want).mean():.3f} of the positions differ"
    vocab = model.config.get_text_config().vocab_size
    h = entropy_sweep.entropies(model, vocab)
    print(f"\n{arch}: hidden {hidden}, vocabulary {vocab}: {h.min():.2f}-{h.max():.2f} nats")
    assert h.min() >= 1.0 and h.max() <= 0.8 * math.log(vocab), (h.min(), h.max())
    # and at the entropy sweep's config (hidden 64, vocabulary 1,024), where each was outside
    r = entropy_sweep.measure(arch)
    a = r["with"]
    print(f"{arch}: the sweep's config: {a.min():.2f}-{a.max():.2f} nats")
    assert a.min() >= 1.0 and a.max() <= r["bound"], (a.min(), a.max())


@pytest.mark.parametrize("arch", ARCHS)
def test_the_code_arrives_as_the_rule_says(arch):
    """The geometric middle of the code's coefficient over random prompts is within 25% of
    1/ρ for the ρ the rule centres the scale for (1/1.2 in a plain stack: Llama's)."""
    model, hidden, _, _ = entropy_sweep.greedy_against_stream(arch, 12)
    v = model.config.get_text_config().vocab_size
    ids = torch.randint(0, v, (24, 12), generator=torch.Generator().manual_seed(3))
    c = _code_coefficients(model, hidden, ids)
    rho = _rho(model)
    assert rho != design.RHO, "the class has a rule"
    middle = math.sqrt(c.min() * c.max())
    print(f"\n{arch}: c {c.min():.3f}-{c.max():.3f}, middle {middle:.3f}, rule 1/{rho:.3f}")
    assert abs(math.log(middle * rho)) < math.log(1.25), (middle, 1 / rho)


def test_a_plain_stack_keeps_its_scale():
    """Llama's ρ is the design's 1.2: its lm_head's bytes are those of before the rules."""
    model, hidden, _, _ = entropy_sweep.greedy_against_stream("llama", 12)
    assert _rho(model) == design.RHO


def _rho(model) -> float:
    """The ρ the logical model's lm_head scale is centred for (its design's facts)."""
    return logical_model(model, 0, acceptance=0.6).speculative["rho"]


def test_the_report_prints_the_entropy_around_the_class_rho(tmp_path, capsys):
    """``python -m fp8_dummy acceptance``: the entropy by ρ around the one the scale is
    centred for: Beam's √(2L + 1) for two layers (√5), a plain stack's 1.2 (Llama)."""
    import json

    from helpers import realistic_sweep as sweep

    from fp8_dummy.realistic.speculative.report import main

    found = {}
    for mt in ("beam", "llama"):
        cfg = sweep.small_config(mt, 2)
        cfg.tie_word_embeddings = False
        cfg.save_pretrained(tmp_path / mt)
        out = tmp_path / f"{mt}.json"
        assert main([str(tmp_path / mt), "--acceptance", "0.6", "--json", str(out)]) == 0
        found[mt] = json.loads(out.read_text())["entropy"]
    capsys.readouterr()
    root5 = math.sqrt(5)
    assert list(found["beam"]) == [f"{root5 * r / 1.2:.3g}" for r in (1.0, 1.2, 1.4)]
    assert list(found["llama"]) == ["1", "1.2", "1.4"]
    # the same codes and stream (seed 0, the same sizes): the same distributions at each
    for b, p in zip(found["beam"].values(), found["llama"].values()):
        assert b["mean"] == pytest.approx(p["mean"], abs=0.02)
