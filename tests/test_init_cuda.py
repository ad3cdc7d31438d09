"""GPU tests of fp8_dummy.init_ (skipped without a GPU; run by scripts/gpu_check.sh):
the kernel against torch's real reference path and against the CPU emulator with the
device's own SM count, byte for byte, and the generator's state afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import BOUNDS, WIDE_DTYPES, needs_gpu_memory
from conftest import FP8_DTYPES as FP8
from conftest import storage_bytes as storage
from ext.emulator import device_properties, emulate_cuda_init_
from helpers.cuda_checks import as_ints, poisoned_cpu, poisoned_like, saturates_e4m3fn

import fp8_dummy
from fp8_dummy.reference import new_path

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def full_threads() -> int:
    sm, per_sm = device_properties(0)
    return sm * (per_sm // 256) * 256


def check(t, low, high, seed, emulate=True):
    """init_ (seed overload) vs new_path vs the emulator, all bytes of the storage."""
    ours, ref = poisoned_like(t), poisoned_like(t)
    torch.ops.fp8_dummy.init_.default(ours, low, high, seed)
    new_path(ref, low, high, seed)
    assert torch.equal(storage(ours), storage(ref))
    if emulate and (t.dtype in FP8 or t.dtype == torch.float16):
        emu = poisoned_cpu(t)
        sm, per_sm = device_properties(t.device)
        emulate_cuda_init_(
            emu,
            low,
            high,
            seed,
            sm_count=sm,
            max_threads_per_sm=per_sm,
            saturate_e4m3fn=saturates_e4m3fn(str(t.device)),
        )
        assert torch.equal(storage(emu), storage(ours).cpu())


@pytest.mark.parametrize("dtype", FP8 + WIDE_DTYPES, ids=str)
@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
def test_dtypes_and_bounds(dtype, bounds):
    check(torch.empty(3, 40_961, dtype=dtype, device="cuda"), *bounds, seed=1234)


@pytest.mark.parametrize("offset", [0, 1])
def test_sizes_around_the_grid(offset):
    full = full_threads()
    for n in (1, 255, 256, 257, 4097, full - 1, full, full + 1, 5_000_011):
        t = torch.empty(n + offset, dtype=torch.float8_e4m3fn, device="cuda")[offset:]
        check(t, -1.0, 1.0, seed=n)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_128_mi_elements(dtype):
    check(
        torch.empty(128 * 2**20, dtype=dtype, device="cuda"),
        -500.0,
        500.0,
        seed=7,
        emulate=dtype == torch.float8_e4m3fn,
    )


@pytest.mark.parametrize("seed", [0, 1, 2**32 + 7, 2**63 - 1, -1])
def test_seeds(seed):
    check(torch.empty(100_003, dtype=torch.float8_e5m2, device="cuda"), -1.0, 1.0, seed)


LAYOUTS = {
    "transposed": lambda dt: torch.empty(1301, 517, dtype=dt, device="cuda").t(),
    "gaps": lambda dt: torch.empty(397, 2 * 263, dtype=dt, device="cuda")[:, ::2],
    "channels_last": lambda dt: torch.empty(8, 17, 29, 31, dtype=dt, device="cuda").to(
        memory_format=torch.channels_last
    ),
    "storage_offset": lambda dt: torch.empty(1_000_003, dtype=dt, device="cuda")[3:],
    "permuted_gaps": lambda dt: torch.empty(9, 31, 3 * 37, dtype=dt, device="cuda").permute(
        2, 0, 1
    )[::3],
    "many_dims": lambda dt: torch.empty([4] * 8, dtype=dt, device="cuda")[
        (slice(None, None, 2),) * 8
    ],
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("dtype", FP8 + [torch.float16], ids=str)
def test_layouts(layout, dtype):
    check(layout(dtype), -500.0, 500.0, seed=99)


def test_generator_state_afterwards():
    for n in (1, 257, full_threads() * 4 + 1, 3_000_001):
        t = torch.empty(n, dtype=torch.float8_e4m3fn, device="cuda")
        ref = torch.empty_like(t)
        g1 = torch.Generator(device="cuda").manual_seed(11)
        g2 = torch.Generator(device="cuda").manual_seed(11)
        g1.set_offset(40)
        g2.set_offset(40)
        for _ in range(2):  # the second call starts from the advanced state
            torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=g1)
            new_path(ref, -1.0, 1.0, generator=g2)
            assert torch.equal(as_ints(t), as_ints(ref))
            assert torch.equal(g1.get_state(), g2.get_state())


def test_default_generator():
    t = torch.empty(77_777, dtype=torch.float8_e5m2, device="cuda")
    ref = torch.empty_like(t)
    torch.cuda.manual_seed(5)
    torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=None)
    state = torch.cuda.get_rng_state()
    torch.cuda.manual_seed(5)
    new_path(ref, -1.0, 1.0, generator=torch.cuda.default_generators[0])
    assert torch.equal(as_ints(t), as_ints(ref))
    assert torch.equal(state, torch.cuda.get_rng_state())


def test_zero_elements_leave_the_generator_alone():
    g = torch.Generator(device="cuda").manual_seed(3)
    state = g.get_state()
    torch.ops.fp8_dummy.init_.generator(
        torch.empty(0, 8, dtype=torch.float8_e4m3fn, device="cuda"), -1.0, 1.0, generator=g
    )
    assert torch.equal(state, g.get_state())


def test_no_scratch():
    t = torch.empty(16 * 2**20, dtype=torch.float8_e4m3fn, device="cuda")
    torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 1)  # first call probes the conversion
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 2)
    torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=None)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base == 0


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_cuda_graph_capture_and_replay(dtype):
    t = torch.empty(1_234_567, dtype=dtype, device="cuda")
    ref = torch.empty_like(t)
    torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=None)  # warm-up (probe)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=None)
    for _ in range(3):  # each replay draws fresh numbers, as eager calls would
        state = torch.cuda.get_rng_state()
        graph.replay()
        after = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        new_path(ref, -1.0, 1.0, generator=torch.cuda.default_generators[0])
        torch.cuda.synchronize()
        assert torch.equal(as_ints(t), as_ints(ref))
        assert torch.equal(after, torch.cuda.get_rng_state())


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_seed_form_capture_and_replay(dtype):
    # The seed form makes no generator (a fresh one is at offset 0): capture-safe, and every
    # replay writes the bytes of a fresh generator seeded with the seed, as eager calls do.
    t = torch.empty(1_234_567, dtype=dtype, device="cuda")
    ref = torch.empty_like(t)
    torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 5)  # warm-up (the conversion probe)
    torch.cuda.synchronize()
    default_state = torch.cuda.get_rng_state()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 77)
    new_path(ref, -1.0, 1.0, 77)
    for _ in range(3):
        t.view(torch.uint8).fill_(0x55)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(as_ints(t), as_ints(ref))
    assert torch.equal(torch.cuda.get_rng_state(), default_state)  # no generator touched


def test_seed_form_init_many_inside_capture():
    ts = [torch.empty(n, dtype=dt, device="cuda") for n, dt in ((3001, FP8[0]), (70_000, FP8[1]))]
    refs = [torch.empty_like(t) for t in ts]
    fp8_dummy.init_many_(ts, -0.5, 2.0, 11)  # warm-up (probes)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp8_dummy.init_many_(ts, -0.5, 2.0, 12)
    for t in ts:
        t.view(torch.uint8).fill_(0x55)
    graph.replay()
    torch.cuda.synchronize()
    for t, r in zip(ts, refs):
        new_path(r, -0.5, 2.0, 12)
        assert torch.equal(as_ints(t), as_ints(r))


def test_seed_form_capture_before_the_probe_refuses_clearly():
    # A fresh process: inside capture the one-time conversion probe cannot run and the seed
    # form cannot make the generator the reference path would need (torch's own path fails
    # there too): a clear error that says what to do.
    code = textwrap.dedent("""
        import torch, fp8_dummy
        t = torch.empty(100_001, dtype=torch.float8_e4m3fn, device="cuda")
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 3)
        except RuntimeError as e:
            assert "outside capture" in str(e), e
            print("refused")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "refused" in out.stdout, out.stderr[-3000:]


def test_capture_before_any_eager_call_is_still_exact():
    # A fresh process: the conversion probe cannot run inside capture, so this first
    # call takes the exact reference path; the bytes must still be the reference's.
    code = textwrap.dedent("""
        import torch, fp8_dummy
        from fp8_dummy.reference import new_path
        t = torch.empty(100_001, dtype=torch.float8_e4m3fn, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=None)
        state = torch.cuda.get_rng_state()
        g.replay()
        ref = torch.empty_like(t)
        torch.cuda.set_rng_state(state)
        new_path(ref, -1.0, 1.0, generator=torch.cuda.default_generators[0])
        assert torch.equal(t.view(torch.uint8), ref.view(torch.uint8))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_second_device():
    with torch.cuda.device(0):
        t = torch.empty(300_001, dtype=torch.float8_e4m3fn, device="cuda:1")
        ref = torch.empty_like(t)
        torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 42)
        new_path(ref, -1.0, 1.0, 42)
        assert torch.equal(as_ints(t), as_ints(ref))
        g1 = torch.Generator(device="cuda:1").manual_seed(9)
        g2 = torch.Generator(device="cuda:1").manual_seed(9)
        torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=g1)
        new_path(ref, -1.0, 1.0, generator=g2)
        assert torch.equal(as_ints(t), as_ints(ref))
        assert torch.equal(g1.get_state(), g2.get_state())


@needs_gpu_memory(16)
def test_split_above_2_pow_30():
    n = 2**30 + 4099  # the float16 temp needs two 32-bit pieces
    t = torch.empty(n, dtype=torch.float8_e5m2, device="cuda")
    ref = torch.empty_like(t)
    g1 = torch.Generator(device="cuda").manual_seed(8)
    g2 = torch.Generator(device="cuda").manual_seed(8)
    torch.ops.fp8_dummy.init_.generator(t, -500.0, 500.0, generator=g1)
    new_path(ref, -500.0, 500.0, generator=g2)
    assert torch.equal(as_ints(t), as_ints(ref))
    assert g1.get_offset() == g2.get_offset()
    del ref
    torch.cuda.empty_cache()


def test_bad_inputs():
    t = torch.empty(8, dtype=torch.float8_e4m3fn, device="cuda")
    with pytest.raises(RuntimeError, match="from=1 > to=0"):
        torch.ops.fp8_dummy.init_.default(t, 1.0, 0.0, 1)
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.ops.fp8_dummy.init_.default(t, 0.0, 1e5, 1)
    with pytest.raises(RuntimeError, match="device type 'cuda'"):
        torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.ops.fp8_dummy.init_.default(
            torch.empty(1, 8, dtype=torch.float8_e4m3fn, device="cuda").expand(4, 8), -1.0, 1.0, 1
        )
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        torch.ops.fp8_dummy.init_.default(
            torch.empty(8, dtype=torch.int32, device="cuda"), -1.0, 1.0, 1
        )
