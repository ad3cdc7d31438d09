"""The logical checkpoint's tensors made whole (``LogicalModel.made``, what the engines'
loaders are fed for small tensors: :func:`fp8_dummy.realistic.values.made_whole`, which calls
the operator itself for plain draws and constants) against the checked writer each tensor's
stand-in writes through (``LogicalModel.fill``: :func:`~fp8_dummy.realistic.values.fill_` with
the whole block's offset and strides), byte for byte, in every format and for every kind of
spec: draws, codes, constants, E8M0 scales, centered weights, routing overrides."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

tf = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import speculative as H  # noqa: E402
from test_realistic_routing import configs  # noqa: E402

from fp8_dummy.realistic import FORMATS, build_model, logical_model  # noqa: E402
from fp8_dummy.realistic.formats import UnsupportedFormatError  # noqa: E402

# the formats' kinds (MXFP4's E8M0 scales on GPT-OSS's fused experts), centered experts
# (Nemotron-H's squared ReLU), routers' overrides (every MoE)
_CONFIGS = {
    "qwen3_moe": lambda: configs(h=64, experts=8, k=2, layers=2)["qwen3_moe"],
    "gpt_oss": lambda: configs(h=64, experts=8, k=2, layers=2)["gpt_oss"],
    "nemotron_h": lambda: H.config("nemotron_h"),
}
_KINDS = {
    "qwen3_moe": {"uniform", "codes", "const", "overrides"},
    "gpt_oss": {"uniform", "codes", "e8m0", "overrides"},
    "nemotron_h": {"uniform", "centered", "overrides"},
}


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape or (1,)).view(torch.uint8)


def _written(lm, name: str) -> torch.Tensor:
    t = lm.tensors[name]
    dst = torch.empty(t.shape, dtype=t.dtype)
    _bytes(dst).fill_(0x5A)  # poisoned: a byte the writer leaves is seen
    return lm.fill(name, dst)


@pytest.mark.parametrize("arch", sorted(_CONFIGS))
def test_made_whole_is_the_writers_bytes_in_every_format(arch):
    rng = random.Random(arch)
    model = build_model(_CONFIGS[arch]())
    kinds: set[str] = set()
    for fmt in FORMATS:
        seed = rng.randrange(1 << 64)  # keys on both sides of 2^63
        try:
            lm = logical_model(model, seed, format=fmt, routing="zipf:1.2")
        except UnsupportedFormatError:  # MXFP4 on a model without fused experts
            continue
        names = list(lm.tensors)
        rng.shuffle(names)  # any order, any batch
        for name, made in zip(names, lm.made(names)):
            t = lm.tensors[name]
            assert made.shape == t.shape and made.dtype == t.dtype, name
            assert torch.equal(_bytes(made), _bytes(_written(lm, name))), (fmt, name)
            kinds.add(t.spec.kind)
            kinds |= {"centered"} if t.spec.center else set()
            kinds |= {"overrides"} if t.overrides else set()
    # the kinds the direct calls take and those left to the checked writer, all met
    assert _KINDS[arch] <= kinds, kinds
