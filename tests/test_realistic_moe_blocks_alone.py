"""The combine probe's forwards as the MoE blocks' own (fp8_dummy/realistic/combine.py): where
the dataflow probe's forward of the model called every MoE block once with its input alone,
:func:`derive` calls the blocks so, each on the probe's fixed input with its own stand-ins,
instead of the model's forward (what comes before a block is never read there). Against the
probes run on the model's forward (the oracle): the same combine gains and non-negative
inputs, PhiMoE's among them (its second block's combine weights sum to a constant on that
block's stand-ins and not on the first's: each block must get its own), and the model's
forward where a block takes more than its input."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import realistic_sweep as sweep  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import combine, derive, nonnegative, probes  # noqa: E402
from fp8_dummy.realistic.hf_model import build_model  # noqa: E402
from fp8_dummy.realistic.twin import build_twin  # noqa: E402

ARCHS = ["nemotron_h", "inkling_text", "qwen3_moe", "deepseek_v3", "phimoe", "mixtral"]


def _model(arch: str):
    if arch in ("phimoe", "mixtral"):
        meta = build_model(sweep.small_config(arch, 2))
        return build_twin(type(meta), meta.config, next(meta.parameters()).dtype).eval()
    layers = 3 if arch == "nemotron_h" else 2
    return tf.AutoModelForCausalLM.from_config(H.config(arch, layers=layers, mtp=0)).eval()


def _on_the_models_forward(model) -> tuple:
    layers = probes.decoder_layers(model)
    return combine.combine_gains(model, layers, []), nonnegative.nonnegative_inputs(
        model, layers, []
    )


def _runs(monkeypatch) -> dict:
    runs = {"model": 0, "alone": 0}

    def counted(key, own):
        def run(*args):
            runs[key] += 1
            return own(*args)

        return run

    monkeypatch.setattr(combine, "forward", counted("model", combine.forward))
    monkeypatch.setattr(combine, "_run_alone", counted("alone", combine._run_alone))
    return runs


@pytest.mark.parametrize("arch", ARCHS)
def test_the_blocks_alone_give_the_models_forwards_facts(arch, monkeypatch):
    model = _model(arch)
    gains, centered = _on_the_models_forward(model)
    if arch == "phimoe":  # the facts compared are found, not empty on both sides
        assert gains
    runs = _runs(monkeypatch)
    found = derive(model)
    assert (found.combine, found.centered) == (gains, centered)
    assert runs["model"] == 0 and runs["alone"] == (2 if gains else 1)


def test_a_block_taking_more_than_its_input_is_run_in_the_models_forward(monkeypatch):
    model = _model("qwen3_moe")
    gains, centered = _on_the_models_forward(model)
    block = model.model.layers[1].mlp
    own = block.forward
    # the block called with a keyword beside its input (a hook of the model's own, there in
    # every forward): the blocks are not called alone, the model's forward runs them
    monkeypatch.setattr(block, "forward", lambda x, extra=None: own(x))
    block.register_forward_pre_hook(lambda _, a, kw: (a, {**kw, "extra": 1}), with_kwargs=True)
    runs = _runs(monkeypatch)
    found = derive(model)
    assert (found.combine, found.centered) == (gains, centered)
    assert runs == {"model": 1, "alone": 0}
