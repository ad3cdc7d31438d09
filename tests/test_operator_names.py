"""Each public operator's name is written once, in fp8_dummy.ops.OPERATORS; every other place
that must repeat it is checked against that list: the schemas, the fake kernels, the Python
wrappers, the documents."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import fp8_dummy
from fp8_dummy.ops import OPERATORS

ROOT = Path(__file__).resolve().parent.parent
BASES = sorted({name.split(".")[0] for name in OPERATORS})


def test_the_schemas_define_exactly_the_listed_operators():
    text = (ROOT / "csrc" / "ops.cpp").read_text()
    assert sorted(re.findall(r'"([a-z_]+(?:\.[a-z]+)?)\(Tensor', text)) == sorted(OPERATORS)
    for name in BASES:
        assert hasattr(torch.ops.fp8_dummy, name), name


def test_every_listed_operator_has_its_fake_kernel_and_wrapper():
    from torch._library.simple_registry import singleton

    for name in OPERATORS:
        assert singleton.find(f"fp8_dummy::{name}").fake_impl.kernel is not None, name
    for name in BASES:
        assert name in fp8_dummy.ops.__all__ and name in fp8_dummy.__all__, name


def test_the_documents_name_every_operator():
    for doc in ("docs/api.md", "csrc/README.md"):
        text = (ROOT / doc).read_text()
        for name in OPERATORS:
            assert f"`{name}" in text, (doc, name)
