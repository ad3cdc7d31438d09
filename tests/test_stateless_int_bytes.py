"""The stateless mode's integer bytes (int8, uint8; packed FP4 through its uint8 view) on
the CPU: bytes against the independent numpy model, any view and shard, thread counts and
SIMD levels, argument checks before any write. The GPU side: tests/test_stateless_cuda.py;
the CUDA kernel's index logic on the host: tests/test_stateless_api.py."""

from __future__ import annotations

import os

import pytest
import torch

np = pytest.importorskip("numpy")  # the oracle is numpy

from oracles import stateless as so  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)
from fp8_dummy.stateless import init_shard_, init_stateless_, shard_slices  # noqa: E402

BOUNDS = {
    torch.int8: [(-128, 128), (-128, -127), (-5, 3), (0, 100), (100, 128)],
    torch.uint8: [(0, 256), (255, 256), (7, 200), (0, 2), (128, 131)],
}
CASES = [(dt, lo, hi) for dt, bounds in BOUNDS.items() for lo, hi in bounds]


def poisoned(shape, dtype) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(0x55)
    return t


def want(e, dtype, low, high, seed, key_offset=0):
    return so.expected_bytes(np.asarray(e), dtype, low, high, seed, key_offset)


@pytest.mark.parametrize("dtype,low,high", CASES, ids=str)
@pytest.mark.parametrize("n", [1, 3, 63, 64, 65, 4099])
def test_oracle(dtype, low, high, n):
    t = init_stateless_(poisoned((n,), dtype), low, high, 1234, key_offset=9)
    assert (so.tensor_bits(t) == want(np.arange(n), dtype, low, high, 1234, 9)).all()
    values = t.to(torch.int64)
    assert int(values.min()) >= low and int(values.max()) < high


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
def test_full_range_is_not_degenerate(dtype):
    # vLLM's ranges: every byte value occurs in a large tensor, seeds and offsets differ.
    low, high = BOUNDS[dtype][0]
    a = init_stateless_(poisoned((1 << 16) + 7, dtype), low, high, 1234)
    b = init_stateless_(poisoned((1 << 16) + 7, dtype), low, high, 1235)
    assert torch.unique(a.view(torch.uint8)).numel() == 256
    assert not torch.equal(a, b)
    assert (so.tensor_bits(a) == want(np.arange(a.numel()), dtype, low, high, 1234)).all()


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
def test_views_and_untouched_bytes(dtype):
    low, high = BOUNDS[dtype][2]
    for make in (
        lambda b: b.t(),
        lambda b: b[:, ::3],
        lambda b: b[3:, 5:60],
        lambda b: b.view(-1)[1:2001],  # unaligned start
    ):
        base = poisoned((41, 67), dtype)
        view = make(base)
        init_stateless_(view, low, high, 5)
        assert (so.tensor_bits(view) == want(np.arange(view.numel()), dtype, low, high, 5)).all()
        mask = torch.ones_like(base, dtype=torch.bool)
        make(mask).fill_(False)
        assert (base.view(torch.uint8)[mask] == 0x55).all()


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_shards_reassemble(dtype, dim):
    low, high = BOUNDS[dtype][0]
    full = init_stateless_(poisoned((37, 53), dtype), low, high, 77)
    parts = []
    for rank in range(3):
        shape, offsets = shard_slices((37, 53), dim, rank, 3)
        parts.append(init_shard_(poisoned(shape, dtype), (37, 53), offsets, low, high, 77))
    assert torch.equal(torch.cat(parts, dim).view(torch.uint8), full.view(torch.uint8))


def test_packed_fp4_through_uint8_view():
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    if fp4 is None:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    t = torch.empty(33, 18, dtype=torch.uint8).view(fp4)
    t.view(torch.uint8).fill_(0x55)
    init_stateless_(t.view(torch.uint8), 0, 256, 8)
    got = so.tensor_bits(t.view(torch.uint8))
    assert (got == want(np.arange(t.numel()), torch.uint8, 0, 256, 8)).all()


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("simd", ["0", "1", "2"])
def test_threads_and_simd_levels(threads, simd, monkeypatch):
    # Every SIMD level this CPU has (higher ones cap to it) and thread count: same bytes.
    monkeypatch.setenv("FP8_DUMMY_STATELESS_SIMD", simd)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        n = (1 << 18) + 5
        t = init_stateless_(poisoned((n,), torch.int8), -128, 128, 2**40 + 1, key_offset=-3)
    finally:
        torch.set_num_threads(before)
    assert (so.tensor_bits(t) == want(np.arange(n), torch.int8, -128, 128, 2**40 + 1, -3)).all()
    assert os.environ["FP8_DUMMY_STATELESS_SIMD"] == simd


@pytest.mark.parametrize("simd", ["0", "1", "2", "3"])
@pytest.mark.parametrize("dtype,low,high", CASES, ids=str)
def test_simd_levels_every_range(simd, dtype, low, high, monkeypatch):
    # Power-of-two ranges take the AVX-512 byte packer (128 bytes at a time) where the CPU
    # has it: rows of a view give unaligned heads and tails around it, and the counters
    # carry into word 1; the poison outside the view stays.
    monkeypatch.setenv("FP8_DUMMY_STATELESS_SIMD", simd)
    base = poisoned((3, 1000), dtype)
    init_stateless_(base[:, 1:], low, high, 5, key_offset=2**32 - 40)
    got = so.tensor_bits(base[:, 1:])
    assert (got == want(np.arange(3 * 999), dtype, low, high, 5, 2**32 - 40)).all()
    assert (base.view(torch.uint8)[:, 0] == 0x55).all()


@pytest.mark.parametrize(
    "dtype,low,high",
    [
        (torch.int8, -1e-3, 1e-3),  # the float defaults
        (torch.int8, -129, 0),
        (torch.int8, 0, 129),
        (torch.uint8, -1, 5),
        (torch.uint8, 0, 257),
        (torch.uint8, 5, 5),
        (torch.uint8, 0.5, 3),
        (torch.int8, float("nan"), 3),
    ],
    ids=str,
)
def test_bad_bounds_raise_before_writing(dtype, low, high):
    t = poisoned((5, 7), dtype)
    with pytest.raises(RuntimeError, match="integer bounds"):
        init_stateless_(t, low, high, 3)
    assert (t.view(torch.uint8) == 0x55).all()


def test_other_integer_dtypes_refused():
    for dtype in (torch.int16, torch.int32, torch.bool):
        with pytest.raises(RuntimeError, match="unsupported dtype"):
            init_stateless_(torch.zeros(4, dtype=dtype), 0, 2, 3)


def test_opcheck_and_meta():
    t = torch.empty(5, 7, dtype=torch.int8)
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_stateless_.default,
        (t, -128.0, 128.0, 3),
        {"key_offset": 2, "element_offset": 10, "element_strides": [9, 1]},
    )
    with pytest.raises(RuntimeError, match="integer bounds"):
        init_stateless_(torch.empty(3, dtype=torch.uint8, device="meta"), 0, 300, 1)
