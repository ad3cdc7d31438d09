"""The placement of a checkpoint tensor whose rows interleave in-memory ones
(fp8_dummy/realistic/interleaved.py) answers only for such tensors: a conversion that writes
into a tensor (its result would share memory without holding its values), or one without an
interleaved result, keeps the caller's refusal (None). Inkling's own case:
tests/test_realistic_speculative_inkling_mm.py."""

from __future__ import annotations

import pytest
import torch

from fp8_dummy.realistic.interleaved import interleaved_blocks


def _tensors() -> dict[str, torch.Tensor]:
    return {"a.weight": torch.empty(4, 6), "b.weight": torch.empty(4, 6)}


def _scaled(t):
    return {"a.weight": t["a.weight"].mul_(2.0), "b.weight": t["b.weight"]}


def _copied(t):
    return {"a.weight": t["a.weight"].copy_(t["b.weight"]), "b.weight": t["b.weight"]}


def _set(t):
    t["a.weight"][0] = 1.0
    return {"a.weight": t["a.weight"], "b.weight": t["b.weight"]}


def _added_out(t):
    torch.add(t["a.weight"], 1.0, out=t["b.weight"])
    return {"a.weight": t["a.weight"], "b.weight": t["b.weight"]}


def _added_in_place(t):
    a = t["a.weight"]
    a += 1.0
    return {"a.weight": a, "b.weight": t["b.weight"]}


@pytest.mark.parametrize("convert", [_scaled, _copied, _set, _added_out, _added_in_place])
def test_a_conversion_that_writes_into_a_tensor_is_not_placed(convert):
    assert interleaved_blocks(convert, _tensors(), []) is None


def test_a_conversion_without_an_interleaved_result_keeps_its_refusal():
    def views(t):  # every result a view: the caller's view map's answer, not this one's
        return {"a.weight": t["a.weight"].t(), "b.weight": t["b.weight"][1:]}

    assert interleaved_blocks(views, _tensors(), []) is None
