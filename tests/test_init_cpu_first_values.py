"""The CPU's first values (csrc/cpu/first_values.cpp): a seed-form call gives every small
tensor the first values of one stream, made once per (seed, dtype, bounds) by the reference
itself; each tensor must hold exactly what torch's own per-tensor generator gives it (a fresh
torch.Generator().manual_seed(seed), the reference path) and, for 1-byte dtypes, what the numpy
model of mt19937 and torch's transform gives. Random sizes up to the limit and just past it,
layouts in memory order (row-major, transposed, permuted, 0-dim) and not (gaps, a transposed
view under the contiguous temp: the usual path), every dtype, several seeds and bounds; the
proof's keys; a path chosen with FP8_DUMMY_CPU_PATH runs instead (a mistyped one refused).
Above the limit, the seeded generator's first state and the FP8 byte runs, made once and
reused, give every tensor its own generator's bytes too."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, cpu_formula, poison, storage_bytes
from oracles import cpu_reference

import fp8_dummy
from fp8_dummy import reference

LIMIT = 4096  # cpu::kFirstValues
FIRST = "cpu.init_: first values "  # its keys
INT8 = [torch.int8, torch.uint8]


def layouts(rng: random.Random, n: int) -> list:
    """Makers of tensors of about n elements: 1-D, row-major 2-D, transposed, permuted 3-D,
    with gaps."""
    rows = rng.randint(1, max(1, n // 3))
    cols = max(1, n // rows)
    return [
        lambda make: make(n),
        lambda make: make(rows, cols),
        lambda make: make(cols, rows).t(),
        lambda make: make(2, max(1, n // 6), 3).permute(2, 0, 1),
        lambda make: make(rows, 2 * cols)[:, ::2],
    ]


def numpy_bytes(t: torch.Tensor, seed: int, low: float, high: float) -> np.ndarray:
    """The reference's bytes for a 1-byte tensor, from the numpy model (its values in the
    order of the reference's empty_like temp, whose strides torch's rule gives)."""
    strides = torch.empty_like(t, dtype=torch.float16).stride()
    name = str(t.dtype).split(".")[1]
    if t.dtype in INT8:
        n = t.numel()
        halves = cpu_reference.cpu_uniform_half(
            cpu_reference.mt19937_words(seed, n), low, high, cpu_formula()["formula"],
            cpu_formula()["fma"],
        )  # fmt: skip
        flat = cpu_reference.half_to_int8(halves, name)
        return flat[cpu_reference.temp_positions(tuple(t.shape), strides)]
    return cpu_reference.reference_bytes(tuple(t.shape), strides, name, seed, low, high,
                                         **cpu_formula())  # fmt: skip


@pytest.mark.parametrize("dtype", FP8_DTYPES + INT8 + WIDE_DTYPES, ids=str)
def test_small_tensors_hold_their_own_generators_bytes(dtype):
    rng = random.Random(hash(str(dtype)) & 0xFFFF)
    for seed, (low, high) in ((1234, (-1.0, 1.0)), (rng.getrandbits(40), (-1e-3, 1e-3))):
        if dtype in INT8:
            low, high = -99.0, 300.0  # int8 and uint8 wrap
        sizes = [1, 2, 623, 624, 625, LIMIT - 1, LIMIT, LIMIT + 1] + rng.sample(range(3, LIMIT), 4)
        makers = [m for n in sizes for m in layouts(rng, n)] + [lambda make: make(())]
        make = lambda *shape: poison(torch.empty(*shape, dtype=dtype))  # noqa: E731
        ours, theirs = [m(make) for m in makers], [m(make) for m in makers]
        fp8_dummy.init_many_(ours, low, high, seed)
        for t in theirs:
            reference.new_path(t, low, high, seed)
        for a, b in zip(ours, theirs):
            what = (dtype, tuple(a.shape), a.stride())
            assert torch.equal(storage_bytes(a), storage_bytes(b)), what  # gaps untouched too
            if a.element_size() == 1 and a.numel():
                want = numpy_bytes(a, seed, low, high)
                got = a.contiguous().view(torch.uint8).numpy()
                assert np.array_equal(got, want.view(np.uint8)), what


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.int8, torch.bfloat16], ids=str)
def test_init_of_one_small_tensor_and_the_contiguous_temp(dtype):
    # init_ takes the first values too; under TensorRT-LLM's row-major temp a transposed
    # 1-byte tensor is not in memory order (the usual path), a row-major one is.
    for temp in (False, True):
        for t in (torch.empty(37, 11, dtype=dtype), torch.empty(11, 37, dtype=dtype).t()):
            ref = poison(torch.empty_strided(t.shape, t.stride(), dtype=dtype))
            fp8_dummy.init_(poison(t), -1.0, 1.0, seed=77, contiguous_temp=temp)
            path = reference.contiguous_path if temp else reference.new_path
            path(ref, -1.0, 1.0, 77)
            assert torch.equal(storage_bytes(t), storage_bytes(ref)), (temp, t.stride())


def test_the_path_proves_itself_per_dtype_and_temp():
    # Under init_'s path name (FP8_DUMMY_FAULT=cpu.init_ corrupts it too: test_proof_faults.py).
    fp8_dummy.init_many_([torch.empty(5, dtype=torch.float8_e5m2), torch.empty(3)], seed=5)
    fp8_dummy.init_(torch.empty(5, dtype=torch.float8_e5m2), seed=6, contiguous_temp=True)
    report = fp8_dummy.self_check_report()
    keys = {e.key: e.proven for e in report if e.key.startswith(FIRST)}
    assert keys.get(f"{FIRST}Float8_e5m2 temp=empty_like") is True, keys
    assert keys.get(f"{FIRST}Float8_e5m2 temp=contiguous") is True, keys
    assert keys.get(f"{FIRST}Float temp=none") is True, keys
    # a forgotten verdict is proven again at the next call (no proof remembered past it)
    assert torch.ops.fp8_dummy_internal.proof_forget(f"{FIRST}Float8_e5m2 ") == 2
    fp8_dummy.init_(torch.empty(5, dtype=torch.float8_e5m2), seed=7)
    keys = [e.key for e in fp8_dummy.self_check_report() if e.key.startswith(FIRST)]
    assert f"{FIRST}Float8_e5m2 temp=empty_like" in keys, keys


def test_a_path_asked_for_runs_instead(monkeypatch):
    # FP8_DUMMY_CPU_PATH=exact: torch's own uniform_ for every tensor, no first values' key;
    # a mistyped value is refused by init_ as for a large tensor.
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", "exact")
    torch.ops.fp8_dummy_internal.proof_forget(f"{FIRST}Float8_e4m3fnuz")
    t, ref = (torch.empty(100, dtype=torch.float8_e4m3fnuz) for _ in "ab")
    fp8_dummy.init_many_([t], -1.0, 1.0, seed=8)
    reference.new_path(ref, -1.0, 1.0, 8)
    assert torch.equal(t.view(torch.uint8), ref.view(torch.uint8))
    keys = [e.key for e in fp8_dummy.self_check_report() if "Float8_e4m3fnuz" in e.key]
    assert not [k for k in keys if k.startswith(FIRST)], keys
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", "fastest")
    with pytest.raises(RuntimeError, match="FP8_DUMMY_CPU_PATH must be one of"):
        fp8_dummy.init_(torch.empty(3, dtype=torch.float8_e4m3fn))


def test_larger_tensors_reuse_the_seeded_state_and_byte_runs_exactly():
    # Above the first values: the seeded generator's first state made once per seed and
    # copied, the FP8 byte runs found once per (dtype, bounds); seeds and bounds interleaved
    # (each cache replaced and found again), every tensor its own generator's bytes.
    rng = random.Random(5)
    calls = [(s, b) for s in (3, 2**40 + 3, 3) for b in ((-1e-3, 1e-3), (-1.0, 1.0), (-1e-3, 1e-3))]
    for seed, (low, high) in calls:
        n = rng.randint(LIMIT + 1, 6 * LIMIT)
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16):
            ours, ref = (poison(torch.empty(n, dtype=dtype)) for _ in "ab")
            fp8_dummy.init_(ours, low, high, seed=seed)
            reference.new_path(ref, low, high, seed)
            assert torch.equal(storage_bytes(ours), storage_bytes(ref)), (seed, low, dtype, n)
    # a generator of the caller's: advanced as the reference advances it, cache or not
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ours, ref = (torch.empty(3 * LIMIT, dtype=torch.float8_e4m3fn) for _ in "ab")
    fp8_dummy.init_(ours, -1e-3, 1e-3, generator=g1)
    reference.new_path(ref, -1e-3, 1e-3, generator=g2)
    assert torch.equal(ours.view(torch.uint8), ref.view(torch.uint8))
    assert torch.equal(g1.get_state(), g2.get_state())
