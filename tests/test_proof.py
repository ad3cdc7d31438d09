"""The one proof mechanism (csrc/common/proof.h, fp8_dummy/_proof.py; docs/contract.md,
"Proof before use"): the report, the probes' planning for the CUDA paths on GPUs of
several sizes, our per-tensor CUDA kernel emulated through its own work walk (the carry
across grid steps), and the proven CUDA paths emulated, each against the emulated
reference and the independent numpy model (tests/oracles/cuda_reference.py). The refusals
themselves: tests/test_proof_faults.py."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import poison, storage_bytes
from ext import emulator, test_ops
from oracles import cuda_reference as cref
from oracles import stateless as sref

import fp8_dummy

# (SM count, threads per SM): an H200, an A100, a small GPU, a tiny one.
GPUS = [(132, 2048), (108, 2048), (16, 1536), (2, 1024)]


@pytest.mark.parametrize("sm, mt", GPUS)
def test_probe_runs_two_full_grid_steps_and_a_partial_one(sm, mt):
    n = emulator.cuda_probe_numel(sm, mt)
    launches, _ = emulator.cuda_launch_plan(n, sm, mt)
    assert len(launches) == 1
    (run,) = launches
    assert run.threads == sm * (mt // 256) * 256  # the whole grid: T of a large tensor
    per_step = 4 * run.threads
    assert run.steps == 3 and n > 2 * per_step and n % per_step not in (0, per_step // 2)
    assert n % 2 == 1  # an odd remainder: the last work items are partial


@pytest.mark.parametrize("sm, mt", GPUS)
def test_batched_probe_spans_steps_sizes_and_an_odd_address(sm, mt):
    # the sizes the launcher probes with (csrc/cuda_plan/cuda_proof.h): the work table covers
    # pieces of 3, 1 and 2 grid steps and tiny ones in one launch
    t = sm * (mt // 256) * 256
    sizes = [emulator.cuda_probe_numel(sm, mt), 1, 255, 4 * t + 1, 65537]
    table = test_ops.cuda_batch_table(sizes, sm, mt)
    steps = {table[1 + 7 * i + 4] for i in range(len(sizes))}
    assert {1, 2, 3} <= steps, steps


def test_report_lists_what_a_call_needed():
    w = poison(torch.empty(300, 41, dtype=torch.float8_e5m2))
    fp8_dummy.init_(w, -2.0, 2.0, seed=3)
    before = fp8_dummy.self_check_report()
    keys = [e.key for e in before]
    assert any(e.path == "cpu.init_" and "Float8_e5m2" in e.key for e in before), keys
    assert all(isinstance(e.proven, bool) and e.key.startswith(e.path + ":") for e in before)
    for _ in range(5):  # one probe per key, not per call: the report does not grow
        fp8_dummy.init_(poison(torch.empty(300, 41, dtype=torch.float8_e5m2)), -2.0, 2.0, 3)
    assert [e.key for e in fp8_dummy.self_check_report()] == keys


def _oracle_bytes(n, low, high, seed, offset, sm, mt, name="float8_e4m3fn"):
    halves, after = cref.reference_halves(n, low, high, seed, offset, sm, mt)
    return cref.fp8_table(name)[halves.view(np.uint16)], after


@pytest.mark.parametrize("sm, mt", [(16, 1536), (2, 1024)])
@pytest.mark.parametrize("grid", [0, 1, 7, 37])
def test_kernel_emulation_walks_every_item_across_steps(sm, mt, grid):
    # grids whose thread count is no multiple of the work groups: the walk's carry runs
    n = emulator.cuda_probe_numel(sm, mt)
    t = poison(torch.empty(n, dtype=torch.float8_e4m3fn))
    after = emulator.emulate_cuda_kernel_init_(
        t, -1.0, 1.0, 77, offset=8, sm_count=sm, max_threads_per_sm=mt, grid=grid
    )
    want, want_after = _oracle_bytes(n, -1.0, 1.0, 77, 8, sm, mt)
    assert after == want_after
    assert np.array_equal(t.view(torch.uint8).numpy(), want)


# The blocks per SM the per-tensor kernel's __launch_bounds__ ask for (cuda/init_kernel.cuh),
# which its launcher's resident wave holds at least: the linear kernel, the strided one.
BLOCKS_PER_SM = {True: 2, False: 1}


def test_the_kernels_launch_bounds_are_the_emulators_blocks_per_sm():
    # One source: the kernel's launch bounds name the constants the emulator's grid reads.
    root = Path(__file__).resolve().parents[1] / "csrc"
    kernel = (root / "cuda" / "init_kernel.cuh").read_text()
    assert "__launch_bounds__(kBlock, kLinear ? kLinearBlocksPerSm : kStridedBlocksPerSm)" in kernel
    items = (root / "cuda_plan" / "cuda_work_item.h").read_text()
    for name, linear in (("kLinearBlocksPerSm", True), ("kStridedBlocksPerSm", False)):
        assert f"constexpr int {name} = {BLOCKS_PER_SM[linear]};" in items
    assert "constexpr int kBlock = 256;" in items


@pytest.mark.parametrize("seed", range(12))
def test_kernel_emulation_grid_is_the_launchers_wave(seed):
    # The default grid: one block per 256 work items, at most the launch bounds' blocks per SM.
    rng = random.Random(seed)
    sm, mt = rng.choice(GPUS)
    numel = rng.choice([1, 255, rng.randint(2, 1 << 22), rng.randint(1 << 22, 1 << 31)])
    linear = rng.random() < 0.5
    launches, _ = emulator.cuda_launch_plan(numel, sm, mt)
    group = 16 if linear else 4
    want = [
        min(-(-(r.threads // group * r.steps) // 256), sm * BLOCKS_PER_SM[linear]) for r in launches
    ]
    assert test_ops.cuda_kernel_grid(numel, sm, mt, linear) == want


@pytest.mark.parametrize("start", [0, 4, 8, 12, 1, 2, 3])
def test_kernel_emulation_linear_starts_and_tails(start):
    # the linear kernel's work items of 16 subsequences store a word's 16 bytes at once only
    # where data + start is 16-byte aligned and the whole item is inside the piece; 4-byte
    # aligned starts, odd ones and the tails take the checked stores: every start modulo 16
    # class, sizes around an item, a grid step (4T) and random ones
    sm, mt = 2, 1024
    rng = np.random.default_rng(1000 + start)
    t4 = 4 * sm * (mt // 256) * 256
    sizes = [1, 15, 16, 17, 63, 64, 65, t4 - 1, t4, t4 + 1, 2 * t4 + 63, 2 * t4 + 64]
    sizes += [int(n) for n in rng.integers(1, 3 * t4, size=4)]
    seed = int(rng.integers(0, 2**40))
    # offset 2^34 - 4: the Philox position (offset / 4 + step) carries into its high word
    for n, offset in [(n, offset) for n in sizes for offset in (4, 2**34 - 4)]:
        base = poison(torch.empty(n + 32, dtype=torch.float8_e4m3fn))
        assert base.data_ptr() % 16 == 0
        v = base[start : start + n]
        after = emulator.emulate_cuda_kernel_init_(
            v, -2.0, 2.0, seed, offset=offset, sm_count=sm, max_threads_per_sm=mt
        )
        want, want_after = _oracle_bytes(n, -2.0, 2.0, seed, offset, sm, mt)
        assert after == want_after
        assert np.array_equal(v.view(torch.uint8).numpy(), want), (start, n)
        outside = storage_bytes(base).numpy()
        assert (outside[:start] == 0x55).all() and (outside[start + n :] == 0x55).all(), n


def test_kernel_emulation_on_gaps_and_odd_addresses():
    sm, mt = 2, 1024
    base = poison(torch.empty(3001, 12, dtype=torch.float8_e5m2))
    flat = poison(torch.empty(30002, dtype=torch.float8_e5m2))
    for v in (base[:, 1::2], flat[1:30001]):
        ref = poison(torch.empty_like(v))
        emulator.emulate_cuda_kernel_init_(v, -3.0, 3.0, 5, sm_count=sm, max_threads_per_sm=mt)
        emulator.emulate_cuda_init_(ref, -3.0, 3.0, 5, sm_count=sm, max_threads_per_sm=mt)
        assert torch.equal(v.contiguous().view(torch.uint8), ref.contiguous().view(torch.uint8))
    assert bool((storage_bytes(base).view(3001, 12)[:, 0::2] == 0x55).all())  # gaps untouched
    assert int(storage_bytes(flat)[0]) == int(storage_bytes(flat)[-1]) == 0x55


@pytest.mark.parametrize("generator_form", [False, True])
def test_proven_cuda_init_emulated(generator_form):
    sm, mt = 16, 1536
    t = poison(torch.empty(5000, 33, dtype=torch.float8_e4m3fn)[:, ::2])
    offset = 4 if generator_form else 0
    after = emulator.emulate_proven_cuda_init_(
        t,
        -1.0,
        1.0,
        9,
        offset=offset,
        sm_count=sm,
        max_threads_per_sm=mt,
        generator_form=generator_form,
    )
    n = t.numel()
    want, want_after = _oracle_bytes(n, -1.0, 1.0, 9, offset, sm, mt)
    # the temp of a view with gaps is dense in t's dimension order: row-major here
    assert np.array_equal(t.contiguous().view(torch.uint8).numpy().reshape(-1), want)
    assert after == want_after
    entries = [e for e in fp8_dummy.self_check_report() if e.path == "cuda.init_"]
    assert any("emulated (16 SMs" in e.key and "layout=gaps" in e.key for e in entries)
    assert all(e.proven for e in entries)


def test_proven_cuda_init_many_emulated():
    sm, mt = 16, 1536
    ts = [poison(torch.empty(n, dtype=torch.float8_e5m2)) for n in (1, 4097, 300_001)]
    assert (
        emulator.emulate_proven_cuda_init_many_(
            ts, -1.0, 1.0, 21, sm_count=sm, max_threads_per_sm=mt
        )
        == 1
    )
    for t in ts:
        want, _ = _oracle_bytes(t.numel(), -1.0, 1.0, 21, 0, sm, mt, "float8_e5m2")
        assert np.array_equal(t.view(torch.uint8).numpy(), want)
    keys = [e.key for e in fp8_dummy.self_check_report() if e.path == "cuda.init_many_"]
    assert any("Float8_e5m2" in k for k in keys), keys


@pytest.mark.parametrize(
    "dtype, low, high",
    [(torch.float8_e4m3fn, -1.0, 1.0), (torch.bfloat16, -1.0, 1.0), (torch.float64, -1.0, 1.0)]
    + [(torch.int8, -128, 128), (torch.uint8, 3, 200)],
)
def test_proven_cuda_stateless_emulated(dtype, low, high):
    t = poison(torch.empty(400, 61, dtype=dtype)[:, 3:50])
    emulator.emulate_proven_cuda_init_stateless_(t, low, high, 4, element_offset=11, sm_count=8)
    rows, cols = np.meshgrid(np.arange(400), np.arange(47), indexing="ij")
    want = sref.expected_bytes(11 + (rows * 47 + cols).reshape(-1), dtype, low, high, 4)
    assert np.array_equal(sref.tensor_bits(t.contiguous()).reshape(-1), want)


# An H200 (132 SMs x 2048 threads) and a 20-SM GPU; calls up to 2^34 elements.
@pytest.mark.parametrize("sm, mt", [(132, 2048), (20, 2048)])
@pytest.mark.parametrize("numel", [1, 4096, 2**30, 2**30 + 1, 2**31 + 3, 2**33 + 1, 2**34])
def test_probe_allocates_at_most_64_mib(sm, mt, numel):
    # csrc/cuda_plan/cuda_proof.h: at most 7 device bytes per probe element (two probes with
    # gaps, the reference's float16 temp, the contiguous temp's .to()).
    n = emulator.cuda_probe_numel(sm, mt, numel)
    assert n * 7 <= 64 << 20, n
    one = emulator.cuda_probe_numel(sm, mt)
    (run,) = emulator.cuda_launch_plan(one, sm, mt)[0]
    assert run.steps == 3  # each piece still spans two full grid steps and a partial one
    if numel > 2**30:  # the split: two pieces, not 2^30 elements
        assert 2 * one <= n <= 2 * one + 40, n
    else:
        assert n == one


@pytest.mark.parametrize("generator_form", [False, True])
@pytest.mark.parametrize(
    "layout", ["dense", "unaligned", "gaps", "row-major-strided", "contiguous-dense"]
)
def test_split_probe_emulated(layout, generator_form):
    """The key of a call over 2^30 elements is proven on two pieces at non-zero offsets (the
    second at the other alignment), not on 2^30 elements: here on a small tensor."""
    sm, mt = 3, 1024
    dtype = torch.float8_e5m2
    make = {
        "dense": lambda: torch.empty(4001, dtype=dtype),
        "unaligned": lambda: torch.empty(4002, dtype=dtype)[1:],
        "gaps": lambda: torch.empty(61, 80, dtype=dtype)[:, ::2],
        "row-major-strided": lambda: torch.empty(80, 61, dtype=dtype).t(),
        "contiguous-dense": lambda: torch.empty(61, 40, dtype=dtype),
    }[layout]
    contiguous = layout in ("row-major-strided", "contiguous-dense")
    prefix = "cuda.init_: emulated (3 SMs x 1024 threads)"  # other tests' keys left aside
    torch.ops.fp8_dummy_internal.proof_forget(prefix)
    t, ref = poison(make()), poison(make())
    offset = 4 if generator_form else 0
    kwargs = dict(offset=offset, sm_count=sm, max_threads_per_sm=mt, contiguous_temp=contiguous)
    after = emulator.emulate_proven_cuda_init_(
        t, -2.0, 2.0, 9, generator_form=generator_form, split_probe=True, **kwargs
    )
    want = emulator.emulate_cuda_init_(ref, -2.0, 2.0, 9, **kwargs)
    assert after == want and torch.equal(storage_bytes(t), storage_bytes(ref))
    keys = [e for e in fp8_dummy.self_check_report() if e.key.startswith(prefix)]
    assert len(keys) == 1 and "split=yes" in keys[0].key and keys[0].proven, keys
