"""The CPU twin a meta model's facts are probed on (fp8_dummy/realistic/twin.py): its random
draws made by the stateless fill, so that it is the same in every process and leaves the
caller's generator alone; its facts those of the same model with transformers' own draws (the
oracle: derive on models built by transformers under several global seeds); a draw the fill
cannot stand for runs as torch runs it."""

from __future__ import annotations

import math

import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import derive
from fp8_dummy.realistic.twin import SEED, _Draws, build_twin

transformers = pytest.importorskip("transformers", reason="installed by setup_env.sh")
from helpers import realistic_sweep as sweep  # noqa: E402

# the fast tier's kinds of fact (test_realistic_architectures.py) and the MoEs the engines load
TYPES = ["llama", "qwen3_moe", "deepseek_v3", "mixtral", "gemma", "olmo2", "gemma2", "afmoe"]
TYPES += ["axk1", "gpt_neox", "doge"]


def _cls_config(mt: str):
    config = sweep.small_config(mt, 3)
    model, why = sweep.build(mt, 3)
    if model is None:
        pytest.skip(why)
    return type(model), config


def _bytes(model: torch.nn.Module) -> dict[str, bytes]:
    return {n: t.contiguous().view(torch.uint8).numpy().tobytes() for n, t in
            model.state_dict().items()}  # fmt: skip


@pytest.mark.parametrize("mt", TYPES)
def test_the_facts_are_those_of_transformers_own_draws(mt: str):
    cls, config = _cls_config(mt)
    twin = derive(build_twin(cls, config, torch.bfloat16))
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.device("cpu"):
            own = cls._from_config(config, dtype=torch.bfloat16)
        assert derive(own) == twin, (mt, seed)


@pytest.mark.parametrize("mt", ["llama", "qwen3_moe"])
def test_the_twin_is_the_same_whatever_the_generator_and_leaves_it_alone(mt: str):
    cls, config = _cls_config(mt)
    made = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        state = torch.get_rng_state()
        made.append(_bytes(build_twin(cls, config, torch.bfloat16)))
        assert torch.equal(torch.get_rng_state(), state), "the caller's generator moved"
    assert made[0] == made[1]
    torch.manual_seed(3)
    with torch.device("cpu"):
        own = _bytes(cls._from_config(config, dtype=torch.bfloat16))
    assert own.keys() == made[0].keys()
    assert own != made[0], "transformers' own draws were kept"


def test_a_draw_is_the_stateless_fill_of_its_mean_and_deviation():
    t = torch.full((37, 5), float("nan"))
    u = torch.full((3, 11), float("nan"), dtype=torch.bfloat16)
    with _Draws() as draws:
        torch.nn.init.normal_(t, mean=1.0, std=0.5)
        u.uniform_(-2, 3)
    half = 0.5 * math.sqrt(3.0)
    want_t = fp8_dummy.init_stateless_(torch.empty_like(t), 1 - half, 1 + half, SEED, key_offset=1)
    want_u = fp8_dummy.init_stateless_(torch.empty_like(u), -2.0, 3.0, SEED, key_offset=2)
    assert draws.count == 2
    assert torch.equal(t.view(torch.uint8), want_t.view(torch.uint8))
    assert torch.equal(u.view(torch.uint8), want_u.view(torch.uint8))


def test_draws_the_fill_cannot_stand_for_run_as_torch_runs_them():
    cases = [
        lambda: torch.nn.init.normal_(torch.empty(64, dtype=torch.float64)),  # a dtype
        lambda: torch.nn.init.uniform_(torch.empty(64), 0.0, 1e6),  # beyond float16
        lambda: torch.empty(64).normal_(0, 1, generator=torch.Generator().manual_seed(5)),
        lambda: torch.nn.init.normal_(torch.empty(64), 0.0, 0.0),  # no interval
    ]
    for case in cases:
        torch.manual_seed(7)
        with torch.no_grad():
            want = case()
        torch.manual_seed(7)
        with _Draws() as draws, torch.no_grad():
            got = case()
        assert draws.count == 0
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    leaf = torch.nn.Parameter(torch.empty(8))
    with _Draws(), pytest.raises(RuntimeError, match="leaf Variable"):
        leaf.normal_()  # outside no_grad: torch's own error


def test_a_draw_the_fill_refuses_is_torchs(monkeypatch):
    import fp8_dummy.realistic.twin as twin

    def refuse(*args, **kwargs):
        raise ValueError("fp8_dummy: refused")

    monkeypatch.setattr(twin.ops, "init_stateless_", refuse)
    torch.manual_seed(11)
    want = torch.nn.init.normal_(torch.empty(64), 0.0, 0.02)
    torch.manual_seed(11)
    with _Draws():
        got = torch.nn.init.normal_(torch.empty(64), 0.0, 0.02)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_the_twin_is_built_on_the_cpu_whatever_the_callers_device():
    """Inside a caller's device context (an engine builds its model in one; meta here), the
    twin is the CPU's, byte for byte the one built outside any context."""
    cls, config = _cls_config("qwen3_moe")
    plain = build_twin(cls, config, torch.bfloat16)
    with torch.device("meta"):
        inside = build_twin(cls, config, torch.bfloat16)
    assert {t.device.type for t in inside.state_dict().values()} == {"cpu"}
    assert _bytes(inside) == _bytes(plain)
