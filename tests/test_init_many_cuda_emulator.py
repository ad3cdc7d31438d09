"""The batching logic of the CUDA init_many_ kernel, on the CPU: its emulator runs the
kernel's own work table, tile lookup and per-item code block by block (and checks that
every work item is visited once); every tensor must get the bytes of its own per-tensor
emulation (fresh generator, offset 0) and of the numpy oracle."""

from __future__ import annotations

import random

import pytest
import torch
from ext import test_ops

np = pytest.importorskip("numpy")  # the oracle is numpy

from conftest import storage_bytes  # noqa: E402
from ext.emulator import H200, emulate_cuda_init_, emulate_cuda_init_many_  # noqa: E402
from helpers.cuda_checks import FP8_NAMES as FP8  # noqa: E402
from helpers.cuda_checks import expected_bytes, outside_view  # noqa: E402
from oracles import cuda_reference as oracle  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)

SMALL = (3, 1536)  # T = 4608: many grid steps, cheap to emulate
DEVICES = {"H200": H200, "small": SMALL}


def as_ints(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8 if t.element_size() == 1 else torch.int16)


def poisoned(tensors):
    for t in tensors:
        storage_bytes(t).fill_(0x55)
    return tensors


def mixed_list(device):
    """Batched tensors of every FP8 dtype (sizes around the device's T, odd shapes, dense
    non-contiguous layouts, unaligned starts) and per-tensor ones (gaps, float16)."""
    full = device[0] * device[1]
    sizes = [1, 3, 255, 256, 257, 4097, full - 1, full, full + 1, 4 * full + 3]
    out = [torch.empty(n, dtype=getattr(torch, FP8[i % 5])) for i, n in enumerate(sizes)]
    for name in FP8:
        dt = getattr(torch, name)
        out += [
            torch.empty(37, 41, dtype=dt),
            torch.empty(301, 517, dtype=dt).t(),
            torch.empty(3, 17, 29, 31, dtype=dt).to(memory_format=torch.channels_last),
            torch.empty(100_003, dtype=dt)[5:],  # byte stores at the ends
            torch.empty((), dtype=dt),
            torch.empty(0, 5, dtype=dt),
            torch.empty(97, 2 * 263, dtype=dt)[:, ::2],  # gaps: per-tensor
        ]
    many_dims = torch.empty([4] * 8, dtype=torch.float8_e5m2)[(slice(None, None, 2),) * 8]
    return out + [torch.empty(3, 1231, dtype=torch.float16), many_dims]


@pytest.mark.parametrize("grid", [0, 1, 7, 100_000])
@pytest.mark.parametrize(
    "device",
    # The H200's whole grid emulated (seconds a case) in the slow tier; the small GPU here.
    [
        pytest.param(DEVICES["H200"], id="H200", marks=pytest.mark.slow),
        pytest.param(DEVICES["small"], id="small"),
    ],
)
def test_mixed_list_matches_oracle_and_per_tensor(device, grid):
    tensors = poisoned(mixed_list(device))
    launches = emulate_cuda_init_many_(
        tensors, -500.0, 500.0, 99, sm_count=device[0], max_threads_per_sm=device[1], grid=grid
    )
    assert launches == 5  # one per FP8 dtype
    for t in tensors:
        if t.numel() == 0:
            assert bool((storage_bytes(t) == 0x55).all())
            continue
        want, _ = expected_bytes(t, -500.0, 500.0, 99, 0, device)
        assert torch.equal(as_ints(t), as_ints(want)), (t.shape, t.dtype, t.stride())
        outside = outside_view(t).repeat_interleave(t.element_size())
        assert bool((storage_bytes(t)[outside] == 0x55).all())  # nothing else written


@pytest.mark.parametrize("saturate", [True, False])
def test_two_thousand_small_tensors_match_per_tensor(saturate):
    rng = random.Random(5)
    tensors = [
        torch.empty(rng.choice([1, 3, 255, 257, rng.randint(1, 5000)]), dtype=getattr(torch, n))
        for n in (rng.choice(FP8) for _ in range(2000))
    ]
    emulate_cuda_init_many_(
        poisoned(tensors), 0.0, 60000.0, 1234, sm_count=SMALL[0],
        max_threads_per_sm=SMALL[1], saturate_e4m3fn=saturate, grid=37,
    )  # fmt: skip
    for t in tensors:
        ref = torch.empty_like(t)
        emulate_cuda_init_(
            ref, 0.0, 60000.0, 1234, sm_count=SMALL[0], max_threads_per_sm=SMALL[1],
            saturate_e4m3fn=saturate,
        )  # fmt: skip
        assert torch.equal(as_ints(t), as_ints(ref))


def test_overlapping_tensors_are_filled_in_list_order():
    # Partial overlaps and an exact alias: per-tensor, after the batch, in list order.
    def views(buf):
        return [buf[:6000], buf[2:9000:2], buf[4000:], buf[:6000], buf[9000:9500]]

    a = torch.empty(10_000, dtype=torch.float8_e4m3fn)
    b = torch.empty(10_000, dtype=torch.float8_e4m3fn)
    emulate_cuda_init_many_(views(a), -1.0, 1.0, 3, sm_count=SMALL[0], max_threads_per_sm=SMALL[1])
    for v in views(b):
        emulate_cuda_init_(v, -1.0, 1.0, 3, sm_count=SMALL[0], max_threads_per_sm=SMALL[1])
    assert torch.equal(as_ints(a), as_ints(b))


SPLIT = [1, 257, 270_336, 270_337, 2**30 - 1, 2**30, 2**30 + 1, 152_064 * 8192, 3 * 2**30 + 5]


@pytest.mark.parametrize("device", DEVICES.values(), ids=DEVICES.keys())
def test_table_has_each_tensors_own_launches(device):
    # Each tensor: the launches (and counter offsets) of its own fresh generator, the >
    # 2^30 split included; tiles numbered one piece after the other.
    flat = test_ops.cuda_batch_table(SPLIT, *device)
    rows = [flat[i : i + 7] for i in range(1, len(flat), 7)]
    want = []
    for i, n in enumerate(SPLIT):
        want += [(i, start, count, threads, off) for start, count, threads, off in
                 oracle.launches(n, *device, 0)[0]]  # fmt: skip
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in rows] == want
    tile = 0
    for _, _, count, threads, steps, _, first_tile in rows:
        assert first_tile == tile and steps == oracle.grid(count, *device)[1] // 4
        tile += -(-(threads // 4) * steps // 256)
    assert flat[0] == tile


def test_a_work_items_step_by_multiply_and_shift_is_the_division():
    """The batched kernel finds a work item's step as item / groups by a multiply and a shift
    (exact for items and group counts below 2^28): checked against integer division at the
    edges of its range, every power of two and its neighbours, and random pairs."""
    rng = np.random.default_rng(5)
    top = 2**28
    divisors = sorted(
        {64, 65, 127, 255, 256, 257, 4095, top - 1}
        | {d for k in range(6, 28) for d in (2**k - 1, 2**k, 2**k + 1) if 64 <= d < top}
        | set(rng.integers(64, top, 40).tolist())
        | {64 * int(b) for b in rng.integers(1, 2**22, 20)}  # T / 4 of real grids
    )
    ns, ds = [], []
    for d in divisors:
        last = (top - 1) // d
        for q in {0, 1, 2, last - 1, last} | set(rng.integers(0, last + 1, 8).tolist()):
            for n in (q * d - 1, q * d, q * d + d - 1):
                if 0 <= n < top:
                    ns.append(n)
                    ds.append(d)
        ns += [top - 1, d - 1]
        ds += [d, d]
    got = test_ops.cuda_batch_divide(ns, ds)
    assert got == [n // d for n, d in zip(ns, ds)]


def test_bad_inputs():
    with pytest.raises(RuntimeError, match="1-byte and float16"):
        emulate_cuda_init_many_([torch.empty(4)], -1.0, 1.0, 3, sm_count=132)
    t = torch.empty(8, dtype=torch.float8_e4m3fn)
    storage_bytes(t).fill_(0x55)
    with pytest.raises(RuntimeError, match="from=1 > to=0"):
        emulate_cuda_init_many_([t, torch.empty(4, dtype=torch.float16)], 1.0, 0.0, 3, sm_count=4)
    assert bool((storage_bytes(t) == 0x55).all())
