"""The norms' offset probe (fp8_dummy/realistic/offsets.py): norms alike are probed once, and
every norm gets what its own probe finds (the oracle: the probe run on each norm alone), also
where norms of one class differ by an attribute or a buffer the probe's answer depends on."""

from __future__ import annotations

import pytest
import torch

import fp8_dummy.realistic.offsets as offsets

transformers = pytest.importorskip("transformers", reason="installed by setup_env.sh")
from helpers import realistic_sweep as sweep  # noqa: E402


class ShiftNorm(torch.nn.Module):
    """(c + w) * x / rms(x), c an attribute or a buffer."""

    def __init__(self, width: int, c: float, buffer: bool = False) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(width))
        if buffer:
            self.register_buffer("c", torch.tensor(c))
        else:
            self.c = c

    def forward(self, x):
        return (self.c + self.weight) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _each_alone(model: torch.nn.Module) -> dict[str, float]:
    found = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if offsets.is_norm(name, m) and isinstance(w, torch.Tensor) and w.dim() == 1:
            c = offsets._offset(m, w)
            if c is not None:
                found[name] = c
    return found


def _counted(monkeypatch) -> list:
    calls: list = []
    probe = offsets._offset
    monkeypatch.setattr(offsets, "_offset", lambda m, w: calls.append(m) or probe(m, w))
    return calls


@pytest.mark.parametrize("mt", ["gemma", "llama", "olmo2", "qwen3_moe"])
def test_norms_alike_are_probed_once_and_get_their_own_answer(mt: str, monkeypatch):
    model, why = sweep.build(mt, 4)
    if model is None:
        pytest.skip(why)
    want = _each_alone(model)
    calls = _counted(monkeypatch)
    assert offsets.norm_offsets(model) == want
    norms = sum(offsets.is_norm(n, m) for n, m in model.named_modules())
    assert 0 < len(calls) < norms, (len(calls), norms)


@pytest.mark.parametrize("buffer", [False, True])
def test_norms_of_one_class_that_differ_are_probed_apart(buffer: bool, monkeypatch):
    model = torch.nn.ModuleDict(
        {f"norm{i}": ShiftNorm(16, c, buffer) for i, c in enumerate([1.0, 0.5, 1.0, 0.5])}
    )
    model.add_module("wide_norm", ShiftNorm(32, 1.0, buffer))
    model.add_module("odd_norm", ShiftNorm(16, 1.0, buffer).to(torch.bfloat16))
    want = {"norm0": 1.0, "norm1": 0.5, "norm2": 1.0, "norm3": 0.5}
    want.update(wide_norm=1.0, odd_norm=1.0)
    assert _each_alone(model) == want
    calls = _counted(monkeypatch)
    assert offsets.norm_offsets(model) == want
    assert len(calls) == (6 if buffer else 4)  # a buffer's values: each norm on its own
    model["norm3"].register_forward_hook(lambda m, a, out: out + a[0])  # a hook: on its own
    calls.clear()
    found = offsets.norm_offsets(model)
    assert len(calls) == (6 if buffer else 5)
    assert found == _each_alone(model) and found["norm3"] != 0.5
