"""GPU tests of the batched CUDA init_many_ (skipped without a GPU; run by
scripts/gpu_check.sh): bytes against torch's reference loop and per-tensor init_, the
number of kernel launches, no generator touched, no scratch beyond the work table."""

from __future__ import annotations

import random
import sys

import pytest
import torch
from conftest import FP8_DTYPES as FP8
from conftest import needs_gpu_memory
from conftest import storage_bytes as storage
from ext.emulator import device_properties, emulate_cuda_init_many_
from helpers.cuda_checks import as_ints, saturates_e4m3fn
from helpers.models import EveryDtype, loop_reference

import fp8_dummy
import fp8_dummy.engines.core.execution
from fp8_dummy.reference import new_path

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def poison(tensors):
    for t in tensors:
        storage(t).fill_(0x55)
    return tensors


def small_tensors(count=2000, seed=0):
    rng = random.Random(seed)
    full = device_properties(0)[0] * device_properties(0)[1]
    sizes = [1, 3, 255, 256, 257, 4097, full - 1, full + 1]
    return [
        torch.empty(rng.choice(sizes + [rng.randint(1, 20_000)] * 8), dtype=rng.choice(FP8),
                    device="cuda")
        for _ in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("scales", ["random", "neutral"])
def test_model_of_every_dtype_matches_the_loop(scales):
    a, b = EveryDtype("cuda"), EveryDtype("cuda")
    poison([t for t in list(a.state_dict().values()) + list(b.state_dict().values())
            if t.is_floating_point()])  # fmt: skip
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=13, scales=scales)
    loop_reference(b, -1.0, 1.0, 13, scales)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(storage(x), storage(y)), name


def test_progress_batches_in_runs(monkeypatch, capsys):
    # With progress shown, CUDA tensors go in runs of PROGRESS_BATCH_BYTES: same bytes.
    monkeypatch.setattr(fp8_dummy.engines.core.execution, "PROGRESS_BATCH_BYTES", 3000)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # the plain-line display
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    a, b = EveryDtype("cuda"), EveryDtype("cuda")
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=2, progress=True)
    loop_reference(b, -1.0, 1.0, 2)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(storage(x), storage(y)), name
    assert "[fp8_dummy] 18/18 tensors" in capsys.readouterr().err


@pytest.mark.parametrize("bounds", [(-1e-3, 1e-3), (-500.0, 500.0), (0.0, 60000.0)], ids=str)
def test_two_thousand_tensors_match_per_tensor_init(bounds):
    ours, ref = poison(small_tensors()), poison(small_tensors())
    fp8_dummy.init_many_(ours, *bounds, 1234)
    for t in ref:
        torch.ops.fp8_dummy.init_.default(t, *bounds, 1234)
    for a, b in zip(ours, ref):
        assert torch.equal(storage(a), storage(b)), (a.dtype, a.shape)
    # ... and the emulator of the batched kernel (the CPU tests' model) with this GPU's shape.
    emu = poison([torch.empty_like(t, device="cpu") for t in ours[:200]])
    emulate_cuda_init_many_(emu, *bounds, 1234, sm_count=device_properties(0)[0],
                            max_threads_per_sm=device_properties(0)[1],
                            saturate_e4m3fn=saturates_e4m3fn("cuda"))  # fmt: skip
    for e, t in zip(emu, ours):
        assert torch.equal(as_ints(e), as_ints(t.cpu()))


def test_mixed_layouts_sizes_and_overlaps_match_the_loop():
    def make():
        buf = torch.empty(300_000, dtype=torch.float8_e4m3fn, device="cuda")
        return [
            torch.empty(5_000_011, dtype=torch.float8_e5m2, device="cuda"),
            torch.empty(1001, 517, dtype=torch.float8_e4m3fn, device="cuda").t(),
            torch.empty(8, 17, 29, 31, dtype=torch.float8_e8m0fnu, device="cuda").to(
                memory_format=torch.channels_last),
            torch.empty(100_003, dtype=torch.float8_e4m3fnuz, device="cuda")[3:],
            torch.empty(397, 2 * 263, dtype=torch.float8_e5m2fnuz, device="cuda")[:, ::2],
            torch.empty(77, dtype=torch.bfloat16, device="cuda"),
            buf[:200_000], buf[100_000:], buf[:200_000],  # overlaps: list order
        ]  # fmt: skip

    ours, ref = poison(make()), poison(make())
    fp8_dummy.init_many_(ours, -500.0, 500.0, 7)
    for t in ref:
        new_path(t, -500.0, 500.0, 7)
    for a, b in zip(ours, ref):
        assert torch.equal(storage(a), storage(b)), (a.dtype, a.shape)


def kernel_names(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = [n for n in names if "memcpy" not in n.lower() and "memset" not in n.lower()]
    if not names:
        pytest.skip("the profiler saw no CUDA kernels (CUPTI unavailable?)")
    return names


def test_one_launch_per_dtype_group():
    tensors = small_tensors(2000)
    gaps = torch.empty(64, 2 * 64, dtype=torch.float8_e4m3fn, device="cuda")[:, ::2]
    singles = [torch.empty(1000, dtype=torch.float16, device="cuda"), gaps]
    fp8_dummy.init_many_(tensors + singles)  # warm-up: conversion probes
    torch.cuda.synchronize()
    names = kernel_names(lambda: fp8_dummy.init_many_(tensors + singles))
    groups = len({t.dtype for t in tensors})
    assert sum("init_many" in n for n in names) == groups
    assert len(names) <= groups + len(singles), names


def test_no_generator_is_touched_and_no_scratch_beyond_the_table():
    tensors = small_tensors(500)
    fp8_dummy.init_many_(tensors)  # warm-up: probes, pinned buffer
    torch.cuda.synchronize()
    state = torch.cuda.get_rng_state()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fp8_dummy.init_many_(tensors)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base <= 2**20  # the table: 64 B per tensor
    assert torch.equal(state, torch.cuda.get_rng_state())


@needs_gpu_memory(16)
def test_split_above_2_pow_30_in_a_batch():
    big = torch.empty(2**30 + 4099, dtype=torch.float8_e5m2, device="cuda")
    small = torch.empty(1234, dtype=torch.float8_e5m2, device="cuda")
    fp8_dummy.init_many_([small, big], -500.0, 500.0, 8)
    for t in (small, big):
        ref = torch.empty_like(t)
        new_path(ref, -500.0, 500.0, 8)
        assert torch.equal(as_ints(t), as_ints(ref))
        del ref
    torch.cuda.empty_cache()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_two_devices_in_one_call():
    ts = [torch.empty(300_001, dtype=torch.float8_e4m3fn, device=f"cuda:{i}") for i in (0, 1, 1)]
    fp8_dummy.init_many_(ts, -1.0, 1.0, 42)
    for t in ts:
        ref = torch.empty_like(t)
        new_path(ref, -1.0, 1.0, 42)
        assert torch.equal(as_ints(t), as_ints(ref))
