"""GPU tests of fp8_dummy.random_ (skipped without a GPU; run by scripts/gpu_check.sh): on
CUDA it is torch's own random_ behind our checks, so the bytes and the generator's offset
must be torch's, for both overloads and the engines' calls."""

from __future__ import annotations

import pytest
import torch
from conftest import storage_bytes

import fp8_dummy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CALLS = [(torch.int8, -128, 128), (torch.uint8, 0, 256), (torch.uint8, 3, 200)]


@pytest.mark.parametrize("dtype,low,high", CALLS, ids=str)
def test_matches_torch(dtype, low, high):
    for shape in [(5,), (4097, 3), (1 << 20, 7)]:
        ours = torch.full(shape, 0x55, dtype=torch.uint8, device="cuda").view(dtype)
        ref = torch.empty(shape, dtype=dtype, device="cuda")
        fp8_dummy.random_(ours, low, high, 77)
        ref.random_(low, high, generator=torch.Generator(device="cuda").manual_seed(77))
        assert torch.equal(storage_bytes(ours), storage_bytes(ref))
        g1 = torch.Generator(device="cuda").manual_seed(5)
        g2 = torch.Generator(device="cuda").manual_seed(5)
        fp8_dummy.random_(ours.t() if ours.dim() == 2 else ours, low, high, generator=g1)
        (ref.t() if ref.dim() == 2 else ref).random_(low, high, generator=g2)
        assert torch.equal(storage_bytes(ours), storage_bytes(ref))
        assert g1.get_offset() == g2.get_offset()


def test_errors_and_wrong_generator():
    t = torch.full((8,), 0x55, dtype=torch.uint8, device="cuda")
    with pytest.raises(RuntimeError, match="from=5 >= to=5"):
        fp8_dummy.random_(t, 5, 5)
    with pytest.raises(RuntimeError, match="generator of device type 'cuda'"):
        fp8_dummy.random_(t, 0, 256, generator=torch.Generator())
    assert (t == 0x55).all()
