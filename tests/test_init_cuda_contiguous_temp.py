"""GPU tests of contiguous_temp and int8/uint8 outputs (skipped without a GPU; run by
scripts/gpu_check.sh): the kernels against torch's own CUDA path on a contiguous temp
(reference.contiguous_path, TensorRT-LLM's) and against the CPU emulator with the device's SM
count, byte for byte; which integer conversion torch's CUDA copy_ does (the one-time probe's
choice: wrap modulo 256 or saturation), against the numpy model of both."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import storage_bytes as storage
from ext import test_ops
from ext.emulator import device_properties, emulate_cuda_init_
from helpers.cuda_checks import poisoned_cpu, poisoned_like, saturates_e4m3fn
from oracles import cpu_reference as cpu_oracle

import fp8_dummy
from fp8_dummy.reference import contiguous_path

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LAYOUTS = {
    "contiguous": lambda make: make((37, 40_961)),
    "transposed": lambda make: make((40_961, 37)).t(),
    "permuted": lambda make: make((3, 5, 7, 4_099)).permute(2, 0, 3, 1),
    "sliced": lambda make: make((41, 20_002))[:, 1::2],
}
DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8]


def integer_mode(dtype: torch.dtype) -> int:
    """pick_fp8_mode of torch's own CUDA conversion: 0 saturate, 2 wrap modulo 256."""
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    table = halves.cuda().to(dtype).view(torch.uint8).cpu()
    return test_ops.pick_fp8_mode(table, dtype)[0]


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
def test_torch_cuda_integer_conversion_is_one_of_ours(dtype):
    """Truncation toward zero in range on every device; out of range (negative values to
    uint8 included) modulo 256 or clamped: the probe reports which, and both are modelled."""
    mode = integer_mode(dtype)
    assert mode in (0, 2), mode
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = torch.isfinite(halves)
    got = halves.cuda().to(dtype).view(torch.uint8).cpu()[finite].numpy()
    name = str(dtype).removeprefix("torch.")
    want = cpu_oracle.half_to_int8(halves[finite].numpy(), name, saturate=mode == 0)
    assert np.array_equal(got, want)
    print(f"torch's CUDA float16 -> {name}: {'saturates' if mode == 0 else 'wraps modulo 256'}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("bounds", [(-3.0, 3.0), (0.0, 64.0), (-500.0, 500.0)], ids=str)
def test_kernel_vs_torch_and_emulator(dtype, layout, bounds):
    t = LAYOUTS[layout](lambda shape: torch.empty(shape, dtype=dtype, device="cuda"))
    ours, ref = poisoned_like(t), poisoned_like(t)
    fp8_dummy.init_(ours, *bounds, 0, contiguous_temp=True)
    contiguous_path(ref, *bounds, 0)
    assert torch.equal(storage(ours), storage(ref))
    emu = poisoned_cpu(t)
    sm, per_sm = device_properties(t.device)
    saturate = saturates_e4m3fn("cuda") if dtype.is_floating_point else integer_mode(dtype) == 0
    emulate_cuda_init_(
        emu, *bounds, 0, sm_count=sm, max_threads_per_sm=per_sm, saturate_e4m3fn=saturate,
        contiguous_temp=True,
    )  # fmt: skip
    assert torch.equal(storage(emu), storage(ours).cpu())


def test_generator_form_and_batched_call():
    g1, g2 = torch.Generator("cuda").manual_seed(5), torch.Generator("cuda").manual_seed(5)
    t = torch.empty(4097, 33, dtype=torch.int8, device="cuda").t()
    ours, ref = poisoned_like(t), poisoned_like(t)
    fp8_dummy.init_(ours, -3.0, 3.0, generator=g1, contiguous_temp=True)
    contiguous_path(ref, -3.0, 3.0, generator=g2)
    assert torch.equal(storage(ours), storage(ref)) and g1.get_offset() == g2.get_offset()
    many = [LAYOUTS[k](lambda s: torch.empty(s, dtype=torch.uint8, device="cuda")) for k in LAYOUTS]
    many = [poisoned_like(x) for x in many]
    refs = [poisoned_like(x) for x in many]
    fp8_dummy.init_many_(many, 0.0, 64.0, 0, contiguous_temp=True)
    for r in refs:
        contiguous_path(r, 0.0, 64.0, 0)
    assert all(torch.equal(storage(a), storage(b)) for a, b in zip(many, refs))
    report = [e for e in fp8_dummy.self_check_report() if "temp=contiguous" in e.key]
    assert report and all(e.proven for e in report), report
