"""Which tensors a quantized or narrower checkpoint keeps in float32 (``fp32_rule``, the rule
``kept_fp32`` asks once a tensor): a float32 tensor of a model built narrower, and any tensor
a module named in the class's ``_keep_in_fp32_modules_strict`` holds, a name matched by whole
dotted parts only; checked against that statement computed here on random names."""

from __future__ import annotations

import random

import pytest
import torch

from fp8_dummy.realistic.hf_model import fp32_rule, kept_fp32

PARTS = ["model", "layers", "0", "12", "mlp", "gate", "gates", "e_score_correction_bias", "a.b",
         "experts", "weight", "bias", "x+y", "x"]  # fmt: skip
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int64]


def model(keep):
    m = torch.nn.Module()
    if keep is not None:
        m._keep_in_fp32_modules_strict = keep
    return m


def expected(name: str, dtype: torch.dtype, built: torch.dtype, keep) -> bool:
    if dtype == torch.float32 and built != torch.float32:
        return True
    return any(f".{k}." in f".{name}." for k in keep or ())


@pytest.mark.parametrize("keep", [None, [], ["gate"], ["e_score_correction_bias", "a.b", "x+y"]])
@pytest.mark.parametrize("built", [torch.bfloat16, torch.float32])
def test_the_rule_keeps_what_the_statement_says(keep, built):
    g = random.Random(7)
    m = model(keep)
    rule = fp32_rule(m, built)
    for _ in range(400):
        name = ".".join(g.choice(PARTS) for _ in range(g.randint(1, 6)))
        dtype = g.choice(DTYPES)
        want = expected(name, dtype, built, keep)
        assert rule(name, dtype) is want, (name, dtype)
        assert kept_fp32(m, name, dtype, built) is want
