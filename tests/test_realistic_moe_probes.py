"""The MoE blocks' two forward probes share a forward (fp8_dummy/realistic/arch.py): the combine
probe's first forward (fixed inputs, stand-in parameters, hooks that only record) is the one
the experts' activations probe runs, so :func:`derive` runs it once and reads both facts from
it. Against each probe run alone, with its own forwards (the oracle): the same facts on
Nemotron-H (non-negative activations), Inkling (combine weights summing to 8) and plain MoEs;
where that shared forward fails, the activations probe runs its own and finds its facts. The
second forward of the combine probe runs only where a sum is c != 1."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import combine, derive, nonnegative  # noqa: E402
from fp8_dummy.realistic.probes import decoder_layers  # noqa: E402

ARCHS = ["nemotron_h", "inkling_text", "qwen3_moe", "deepseek_v3"]


def _model(arch: str):
    layers = 3 if arch == "nemotron_h" else 2
    return tf.AutoModelForCausalLM.from_config(H.config(arch, layers=layers, mtp=0)).eval()


def _counted(monkeypatch, module, fail_first: bool = False) -> list:
    """Calls of ``module``'s forwards (the probes' model forward, and the combine probe's
    blocks called alone: one run of every block); the first one failed without running where
    ``fail_first``."""
    calls: list = []

    def counted(own):
        def run(*args):
            calls.append(1)
            if fail_first and len(calls) == 1:
                return "RuntimeError: made to fail"
            return own(*args)

        return run

    monkeypatch.setattr(module, "forward", counted(module.forward))
    if hasattr(module, "_run_alone"):
        monkeypatch.setattr(module, "_run_alone", counted(module._run_alone))
    return calls


def _alone(model) -> tuple:
    layers = decoder_layers(model)
    return combine.combine_gains(model, layers, []), nonnegative.nonnegative_inputs(
        model, layers, []
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_one_forward_serves_both_probes(arch, monkeypatch):
    model = _model(arch)
    gains, centered = _alone(model)
    if arch == "nemotron_h":
        assert centered  # the facts compared are found, not empty on both sides
    if arch == "inkling_text":
        assert set(gains.values()) == {8.0}
    ours, theirs = _counted(monkeypatch, combine), _counted(monkeypatch, nonnegative)
    found = derive(model)
    assert (found.combine, found.centered) == (gains, centered)
    # the activations probe ran no forward of its own; the second forward (combine weights
    # doubled) only where a sum is c != 1 (Inkling's 8), none for sums of 1 (Qwen3-MoE's)
    assert (len(ours), len(theirs)) == (2 if gains else 1, 0)
    if arch == "qwen3_moe":
        assert not gains


def test_where_the_shared_forward_fails_the_activations_probe_runs_its_own(monkeypatch):
    model = _model("nemotron_h")
    _, centered = _alone(model)
    ours = _counted(monkeypatch, combine, fail_first=True)
    theirs = _counted(monkeypatch, nonnegative)
    with pytest.warns(RuntimeWarning, match="combine weights failed"):
        found = derive(model)
    assert found.combine == {} and found.centered == centered and centered
    assert (len(ours), len(theirs)) == (1, 1)
