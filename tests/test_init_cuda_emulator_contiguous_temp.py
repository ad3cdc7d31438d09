"""The CUDA path with contiguous_temp (TensorRT-LLM's row-major temp) and int8/uint8 outputs,
on the CPU emulator: torch's CUDA reference emulated and our kernels emulated (per-tensor
through its work walk, batched through its work table, both behind their launchers'
proofs), against the independent numpy model (tests/oracles/cuda_reference.py: Philox,
the uniform mapping, the launches; the element order row-major; the integer conversion
truncation, then modulo 256 or clamped: the two modes the one-time probe of torch's CUDA
conversion chooses between). Plus the conversion tables, the mode choice, and a broken
kernel caught by its proof (FP8_DUMMY_FAULT)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import as_bytes, poison, storage_bytes
from ext import emulator, test_ops
from oracles import cpu_reference as cpu_oracle
from oracles import cuda_reference as oracle

import fp8_dummy

DEVICES = {"H200": emulator.H200, "small": (3, 1536)}
LAYOUTS = {
    "contiguous": lambda make: make((37, 531)),
    "transposed": lambda make: make((531, 37)).t(),
    "permuted": lambda make: make((3, 5, 7, 110)).permute(2, 0, 3, 1),
    "sliced": lambda make: make((41, 662))[:, 1::2],
}
DTYPES = ["float8_e4m3fn", "float8_e5m2", "int8", "uint8"]


def expected(t: torch.Tensor, low, high, seed, offset, device, saturate) -> tuple[np.ndarray, int]:
    """Logical-order bytes: with a row-major temp, element i (logical) takes value i."""
    halves, after = oracle.reference_halves(t.numel(), low, high, seed, offset, *device)
    name = str(t.dtype).removeprefix("torch.")
    if name in ("int8", "uint8"):
        return cpu_oracle.half_to_int8(halves, name, saturate), after
    return oracle.fp8_table(name, saturate)[halves.view(np.uint16)], after


def make(layout: str, name: str) -> torch.Tensor:
    return poison(LAYOUTS[layout](lambda shape: torch.empty(shape, dtype=getattr(torch, name))))


@pytest.mark.parametrize("device", DEVICES.values(), ids=DEVICES.keys())
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("bounds", [(-3.0, 3.0), (0.0, 64.0), (-500.0, 500.0)], ids=str)
def test_reference_and_kernel_emulations(device, name, layout, bounds):
    low, high = bounds
    saturate = name == "float8_e4m3fn"  # the integers: modulo 256, as torch's CPU copy_
    kw = dict(sm_count=device[0], max_threads_per_sm=device[1], saturate_e4m3fn=saturate)
    want, want_after = expected(make(layout, name), low, high, 99, 8, device, saturate)
    for fill in (emulator.emulate_cuda_init_, emulator.emulate_cuda_kernel_init_):
        t = make(layout, name)
        outside = storage_bytes(t).clone()
        after = fill(t, low, high, 99, offset=8, contiguous_temp=True, **kw)
        assert after == want_after
        assert np.array_equal(as_bytes(t).numpy(), want), fill.__name__
        mask = torch.ones_like(outside, dtype=torch.bool)
        mask.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(False)
        assert torch.equal(storage_bytes(t)[mask], outside[mask])  # nothing outside the view


@pytest.mark.parametrize("name", ["int8", "uint8"])
def test_integer_saturation_mode(name):
    t = make("transposed", name)
    emulator.emulate_cuda_kernel_init_(
        t, -500.0, 500.0, 3, sm_count=3, max_threads_per_sm=1536, contiguous_temp=True
    )
    want, _ = expected(t, -500.0, 500.0, 3, 0, (3, 1536), True)
    assert np.array_equal(as_bytes(t).numpy(), want)


def test_kernel_grids_carry_across_steps():
    for grid in (1, 7, 100):
        t = make("transposed", "int8")
        emulator.emulate_cuda_kernel_init_(
            t, -3.0, 3.0, 5, sm_count=3, max_threads_per_sm=1536, grid=grid, contiguous_temp=True
        )
        want, _ = expected(t, -3.0, 3.0, 5, 0, (3, 1536), False)
        assert np.array_equal(as_bytes(t).numpy(), want), grid


def test_the_option_changes_only_non_row_major_tensors():
    kw = dict(sm_count=3, max_threads_per_sm=1536)
    a, b = make("transposed", "uint8"), make("transposed", "uint8")
    emulator.emulate_cuda_init_(a, 0.0, 64.0, 1, contiguous_temp=True, **kw)
    emulator.emulate_cuda_init_(b, 0.0, 64.0, 1, **kw)
    assert not torch.equal(as_bytes(a), as_bytes(b))
    c, d = make("contiguous", "uint8"), make("contiguous", "uint8")
    emulator.emulate_cuda_init_(c, 0.0, 64.0, 1, contiguous_temp=True, **kw)
    emulator.emulate_cuda_init_(d, 0.0, 64.0, 1, **kw)
    assert torch.equal(as_bytes(c), as_bytes(d))


def test_batched_and_proven_paths():
    """init_many_ emulated: row-major contiguous 1-byte tensors in the batched kernel, the
    transposed and sliced ones per tensor; each tensor its own fresh generator."""
    kw = dict(sm_count=3, max_threads_per_sm=1536, saturate_e4m3fn=False)
    ts = [make(layout, name) for name in ("int8", "uint8") for layout in LAYOUTS]
    launches = emulator.emulate_cuda_init_many_(ts, -3.0, 3.0, 7, contiguous_temp=True, **kw)
    assert launches == 2  # one per dtype: the contiguous ones
    proven = [make(layout, "int8") for layout in LAYOUTS]
    emulator.emulate_proven_cuda_init_many_(proven[:1], -3.0, 3.0, 7, contiguous_temp=True, **kw)
    for t in ts + proven[:1]:
        want, _ = expected(t, -3.0, 3.0, 7, 0, (3, 1536), False)
        assert np.array_equal(as_bytes(t).numpy(), want)
    for t in proven[1:]:  # the per-tensor launcher, proven first
        emulator.emulate_proven_cuda_init_(t, -3.0, 3.0, 7, contiguous_temp=True, **kw)
        want, _ = expected(t, -3.0, 3.0, 7, 0, (3, 1536), False)
        assert np.array_equal(as_bytes(t).numpy(), want)
    keys = [e for e in fp8_dummy.self_check_report() if "temp=contiguous" in e.key]
    assert any("Char" in e.key and "row-major-strided" in e.key for e in keys), keys
    assert any(e.path == "cuda.init_many_" and "overflow=wrap" in e.key for e in keys), keys
    assert all(e.proven for e in keys if e.key.startswith("cuda.")), keys


@pytest.mark.parametrize("name", ["int8", "uint8"])
def test_conversion_tables_and_mode_choice(name):
    dtype = getattr(torch, name)
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.isfinite(halves)
    for saturate in (False, True):
        table = test_ops.fp8_convert_table(dtype, saturate).numpy()
        want = cpu_oracle.half_to_int8(halves[finite], name, saturate)
        assert np.array_equal(table[finite], want)
    # torch's own CPU conversion: modulo 256 (mode 2); a clamping one: mode 0
    torch_table = torch.from_numpy(halves.copy()).to(dtype).view(torch.uint8)
    assert test_ops.pick_fp8_mode(torch_table, dtype)[0] == 2
    clamped = np.zeros(65536, dtype=np.uint8)
    clamped[finite] = cpu_oracle.half_to_int8(halves[finite], name, True)
    pick = test_ops.pick_fp8_mode(torch.from_numpy(clamped), dtype)
    assert pick[0] == 0


def test_broken_kernels_are_refused():
    """FP8_DUMMY_FAULT=cpu.init_,cuda.init_: the contiguous-temp int8 calls of the CPU fast
    path and of the emulated CUDA kernel corrupt a byte; their proofs refuse them, and the
    bytes returned are the reference's (a fresh process: the switch is read once)."""
    script = textwrap.dedent(
        f"""
        import sys, warnings, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import fp8_dummy
        from ext import emulator
        from fp8_dummy import reference
        t = torch.empty(531, 37, dtype=torch.int8).t()
        r = torch.empty(531, 37, dtype=torch.int8).t()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fp8_dummy.init_(t, -3.0, 3.0, 0, contiguous_temp=True)
            reference.contiguous_path(r, -3.0, 3.0, 0)
            assert torch.equal(t, r)
            e, f = torch.empty_like(t), torch.empty_like(t)
            emulator.emulate_proven_cuda_init_(e, -3.0, 3.0, 0, sm_count=3,
                max_threads_per_sm=1536, saturate_e4m3fn=False, contiguous_temp=True)
            emulator.emulate_cuda_init_(f, -3.0, 3.0, 0, sm_count=3, max_threads_per_sm=1536,
                saturate_e4m3fn=False, contiguous_temp=True)
            assert torch.equal(e, f)
        refused = [x.key for x in fp8_dummy.self_check_report() if not x.proven]
        assert any(k.startswith("cpu.init_: Char") and "temp=contiguous" in k for k in refused)
        assert any(k.startswith("cuda.init_") and "temp=contiguous" in k for k in refused)
        assert sum("self-check refused" in str(x.message) for x in w) >= 2
        print("ok")
        """
    )
    env = {**os.environ, "FP8_DUMMY_FAULT": "cpu.init_,cuda.init_", "FP8_DUMMY_CPU_PATH": "auto"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
