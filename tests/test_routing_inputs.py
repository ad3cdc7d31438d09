"""Routing profiles and ``python -m fp8_dummy routing`` given what a hostile or unlucky user
gives them: a profile never writes NaN or Inf (a Zipf exponent whose tail underflows, a load
file whose sum overflows, numbers too large for a float, arrays nested too deeply), bad
input is one line before any work, and ``--json`` writes like every file of the package
(through an unpredictable temporary, never through a symlink, refused up front where it
cannot be written). Every attack writes under the test's temporary directory only."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic.routing import RoutingError, parse_routing, report  # noqa: E402
from fp8_dummy.realistic.routing.offsets import plan_routing  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
SMALL.update(num_key_value_heads=2, vocab_size=256)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)


def qwen(tmp_path=None):
    cfg = transformers.AutoConfig.for_model("qwen3_moe", **SMALL, **MOE)
    if tmp_path is not None:
        cfg.save_pretrained(tmp_path / "cfg")
    return cfg


def snapshot(model: torch.nn.Module) -> list[bytes]:
    tensors = model.state_dict().values()
    return [t.detach().contiguous().view(torch.uint8).numpy().tobytes() for t in tensors]


@pytest.mark.parametrize("alpha", ["400", "1e308"])
def test_a_zipf_exponent_whose_tail_underflows_is_refused_before_writing(alpha):
    model = transformers.AutoModelForCausalLM.from_config(qwen())
    before = snapshot(model)
    with pytest.raises(RoutingError, match="underflows"):
        fp8_dummy.initialize_realistic_dummy_weights(model, routing=f"zipf:{alpha}")
    assert snapshot(model) == before


def test_a_large_finite_exponent_writes_finite_weights():
    model = transformers.AutoModelForCausalLM.from_config(qwen())
    fp8_dummy.initialize_realistic_dummy_weights(model, routing="zipf:50")
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())


def test_the_export_refuses_an_underflowing_exponent(tmp_path, capsys):
    from fp8_dummy.realistic import export as E

    qwen(tmp_path)
    code = E.main([str(tmp_path / "cfg"), str(tmp_path / "out"), "--routing", "zipf:400"])
    assert code == 2 and "underflows" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _load_file(tmp_path, text: str):
    path = tmp_path / "load.json"
    path.write_text(text)
    return str(path)


def test_a_load_whose_sum_overflows_keeps_its_shape(tmp_path):
    """[1e308, 1e308, 1, ...]: experts 0 and 1 take every token's two picks, not a balanced
    profile (the sum overflowed to inf, every share became 0)."""
    rows = [[1e308, 1e308] + [1.0] * 6 for _ in range(2)]
    path = _load_file(tmp_path, json.dumps({"expert_load": rows}))
    model = transformers.AutoModelForCausalLM.from_config(qwen())
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(qwen())
    lm = fp8_dummy.realistic.logical_model(meta, 0, routing=path)
    router = lm.tensors["model.layers.0.mlp.gate.weight"]
    assert router.overrides, "offsets written: the profile is not balanced"
    offsets = np.asarray(router.overrides[-1][2])
    assert offsets[:2].min() > offsets[2:].max() + 1, offsets
    fp8_dummy.initialize_realistic_dummy_weights(model, routing=path)
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"expert_load": [[' + "9" * 400 + ", 1]]}", "not a finite non-negative number"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"expert_load": [[1e999, 1]]}', "not a finite"),
    ],
)
def test_numbers_no_float_holds_are_refused_by_name(tmp_path, text, why):
    with pytest.raises(RoutingError, match=why):
        parse_routing(_load_file(tmp_path, text))


def test_offsets_not_finite_in_the_routers_dtype_are_refused():
    """A target out of the router's reach whose offsets a float16 router cannot hold."""
    specs = {"model.layers.0.mlp.gate.weight": fp8_dummy.realistic.Spec("router", "uniform")}
    shapes = {"model.layers.0.mlp.gate.weight": (4, 64)}
    dtypes = {"model.layers.0.mlp.gate.weight": torch.float16}

    def huge(profile, routers, seed, progress=None):
        return [(np.full(4, 0.5), np.array([1e6, -1e6, 0.0, 0.0]))]

    from fp8_dummy.realistic.routing import offsets

    real = offsets.layer_targets
    offsets.layer_targets = huge
    try:
        with pytest.raises(RoutingError, match="not all finite in torch.float16"):
            plan_routing(parse_routing("zipf:1"), 0, qwen(), specs, shapes, dtypes=dtypes)
    finally:
        offsets.layer_targets = real


@pytest.mark.parametrize(
    "config, why",
    [
        ('{"model_type": "no_such_model"}', "no_such_model"),
        ("{not json", "is not JSON"),
        ("[1, 2, 3]", "holds a list"),
    ],
)
def test_the_report_refuses_a_bad_config_in_one_line(tmp_path, capsys, config, why):
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(SystemExit) as e:
        report.main([str(tmp_path), "--routing", "zipf:1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err


@pytest.mark.parametrize("seed", ["-2", str(2**64 - 1)])
def test_the_report_takes_every_seed_the_fill_takes(tmp_path, capsys, seed):
    qwen(tmp_path)
    args = [str(tmp_path / "cfg"), "--routing", "zipf:1", "--seed", seed, "--measure", "no"]
    assert report.main(args) == 0
    assert "softmax -> residual" in capsys.readouterr().out


def test_report_json_never_writes_through_a_planted_link(tmp_path, capsys):
    """The report's temporary file was ``.<name>.<pid>.tmp``: a link planted there made the
    report overwrite its target. Now neither that nor a link at the name itself is followed."""
    qwen(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs")
    out = tmp_path / "report.json"
    os.symlink(victim, tmp_path / f".report.json.{os.getpid()}.tmp")
    args = [str(tmp_path / "cfg"), "--routing", "zipf:1", "--measure", "no", "--json", str(out)]
    assert report.main(args) == 0
    assert victim.read_text() == "theirs"
    assert json.loads(out.read_text())["routing"] == "zipf:1"
    out.unlink()
    os.symlink(victim, out)  # a link at the name: replaced, its target untouched
    assert report.main(args) == 0
    assert victim.read_text() == "theirs" and not out.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [
        f".report.json.{os.getpid()}.tmp"
    ], "no temporary file of ours left"


@pytest.mark.parametrize("where", ["a directory", "a missing directory", "a read-only directory"])
def test_report_json_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch, where
):
    qwen(tmp_path)
    target = {
        "a directory": tmp_path,
        "a missing directory": tmp_path / "missing" / "r.json",
        "a read-only directory": tmp_path / "ro" / "r.json",
    }[where]
    if where == "a read-only directory":
        target.parent.mkdir()
        target.parent.chmod(0o555)

    def never(*a, **k):
        raise AssertionError("the report was computed before --json was refused")

    monkeypatch.setattr(report, "build_report", never)
    try:
        with pytest.raises(SystemExit) as e:
            report.main([str(tmp_path / "cfg"), "--routing", "zipf:1", "--json", str(target)])
    finally:
        if where == "a read-only directory":
            target.parent.chmod(0o755)
    assert e.value.code == 2
    assert "--json" in capsys.readouterr().err
    assert not [p for p in tmp_path.rglob("*.tmp")]
