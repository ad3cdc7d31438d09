"""The stateless mode (fp8_dummy.init_stateless_) on the CPU: bytes against an
independent numpy model and, where the installed torch has a CPU kernel for
aten::_philox_uniform_ (2.14+), against torch.func._random itself; layouts, shards,
thread counts, SIMD paths, argument checks, opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
from conftest import BOUNDS

np = pytest.importorskip("numpy")  # the oracle is numpy

from oracles import stateless as so  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)
from fp8_dummy.stateless import (  # noqa: E402
    init_shard_,
    init_stateless_,
    shard_slices,
    split_bounds,
)

FP8 = list(so.FP8)
DTYPES = FP8 + list(so.WIDE)
SATURATE = so.e4m3fn_saturates()


def expect(shape, dtype, low, high, seed, key_offset=0):
    n = int(np.prod(shape)) if len(shape) else 1
    return so.expected_bytes(np.arange(n), dtype, low, high, seed, key_offset, SATURATE)


def check(t, shape, dtype, low, high, seed, key_offset=0):
    got = so.tensor_bits(t)
    want = expect(shape, dtype, low, high, seed, key_offset)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} of {got.size} differ, first at {bad[:5]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("low,high", BOUNDS)
def test_oracle_bounds(dtype, low, high):
    t = torch.empty(4099, dtype=dtype)
    init_stateless_(t, low, high, 1234)
    check(t, (4099,), dtype, low, high, 1234)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 63, 64, 65, 4097])
def test_oracle_sizes(dtype, n):
    t = torch.empty(n, dtype=dtype)
    init_stateless_(t, -1.0, 1.0, 7)
    check(t, (n,), dtype, -1.0, 1.0, 7)


@pytest.mark.parametrize(
    "dtype", [torch.float8_e4m3fn, torch.float16, torch.bfloat16, torch.float64], ids=str
)
def test_oracle_large_and_seeds(dtype):
    n = (1 << 20) + 3
    t = torch.empty(n, dtype=dtype)
    init_stateless_(t, -0.3, 0.7, 2**40 + 3)
    check(t, (n,), dtype, -0.3, 0.7, 2**40 + 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_dim_and_shard_element(dtype):
    t = init_stateless_(torch.empty((), dtype=dtype), -1.0, 1.0, 3)
    check(t, (), dtype, -1.0, 1.0, 3)
    # A 0-dim "shard": global element 12345 of some tensor.
    u = init_stateless_(torch.empty((), dtype=dtype), -1.0, 1.0, 3, element_offset=12345)
    want = so.expected_bytes(np.array([12345]), dtype, -1.0, 1.0, 3, 0, SATURATE)
    assert (so.tensor_bits(u) == want).all()


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("key_offset", [0, 1, 8, 2**32 - 1, -3])
def test_key_offsets(dtype, key_offset):
    # key_offset is the key's uint64 offset; -3 is 2^64 - 3, whose counters wrap.
    t = torch.empty(3, 37, dtype=dtype)
    init_stateless_(t, -1.0, 1.0, 99, key_offset=key_offset)
    check(t, (3, 37), dtype, -1.0, 1.0, 99, key_offset)


@pytest.mark.parametrize("seed", [0, 1, -1, 2**63 - 1])
def test_seeds(seed):
    t = torch.empty(300, dtype=torch.float8_e4m3fn)
    init_stateless_(t, -1.0, 1.0, seed)
    check(t, (300,), torch.float8_e4m3fn, -1.0, 1.0, seed)


@pytest.mark.parametrize("shape", [(7, 13), (2, 3, 5, 7), (1, 129, 1), (65, 1)])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float32], ids=str)
def test_shapes(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    init_stateless_(t, -1.0, 1.0, 5)
    check(t, shape, dtype, -1.0, 1.0, 5)


def test_random_shapes_and_views():
    gen = np.random.default_rng(2024)
    for _ in range(25):
        shape = tuple(int(x) for x in gen.integers(1, 9, size=gen.integers(1, 5)))
        dtype = DTYPES[int(gen.integers(len(DTYPES)))]
        base = torch.empty(shape, dtype=dtype)
        perm = [int(x) for x in gen.permutation(len(shape))]
        view = base.permute(perm)
        if view.dim() and view.shape[-1] > 2:
            view = view[..., 1:]
        seed, key_offset = int(gen.integers(0, 2**62)), int(gen.integers(0, 2**40))
        init_stateless_(view, -2.0, 3.0, seed, key_offset=key_offset)
        check(view, tuple(view.shape), dtype, -2.0, 3.0, seed, key_offset)


def _layouts(dtype):
    base = torch.empty(40, 66, dtype=dtype)
    yield "transposed", base.t()
    yield "every_other_column", base[:, ::2]
    yield "storage_offset", base[3:, 5:60]
    yield "permuted_3d", torch.empty(4, 6, 10, dtype=dtype).permute(2, 0, 1)
    yield "reversed_strides_gap", base.t()[::3]


@pytest.mark.parametrize(
    "dtype", [torch.float8_e4m3fn, torch.float16, torch.bfloat16, torch.float64], ids=str
)
@pytest.mark.parametrize("poison", [0x55, 0xAA])
def test_layouts_value_by_logical_index(dtype, poison):
    # Element at logical index i gets value i whatever the memory layout; bytes outside
    # the view are untouched.
    for name, view in _layouts(dtype):
        storage = view.untyped_storage()
        raw = torch.empty(0, dtype=torch.uint8).set_(storage)
        raw.fill_(poison)
        init_stateless_(view, -1.0, 1.0, 3)
        check(view, tuple(view.shape), dtype, -1.0, 1.0, 3)
        mask = torch.zeros(raw.numel(), dtype=torch.bool)
        item = view.element_size()
        offs = torch.as_strided(
            torch.arange(storage.nbytes() // item), view.shape, view.stride(), view.storage_offset()
        ).reshape(-1)
        for b in range(item):
            mask[offs * item + b] = True
        assert (raw[~mask] == poison).all(), name


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(64, 48), (96, 33), (7, 5, 9)])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_shards_reassemble(dtype, shape, world):
    full = torch.empty(shape, dtype=dtype)
    init_stateless_(full, -1.0, 1.0, 11)
    for dim in (0, -1):
        parts = []
        for rank in range(world):
            sshape, offsets = shard_slices(shape, dim, rank, world)
            part = torch.empty(sshape, dtype=dtype)
            init_shard_(part, shape, offsets, -1.0, 1.0, 11)
            parts.append(part)
        whole = torch.cat(parts, dim=dim)
        assert torch.equal(whole.view(torch.uint8), full.view(torch.uint8)), (dim, world)


def test_block_shard_and_shard_into_views():
    shape = (30, 41)
    full = torch.empty(shape, dtype=torch.float8_e5m2)
    init_stateless_(full, -2.0, 2.0, 1)
    # A 2-D block, filled straight into a non-contiguous view of a bigger buffer.
    buf = torch.full((50, 50), 0x55, dtype=torch.uint8).view(torch.float8_e5m2)
    view = buf.t()[3:20, 10:23]  # shape (17, 13): global rows 10..22, cols 3..19 transposed
    block = view.t()  # (13, 17): global rows 10..22, cols 3..19
    init_shard_(block, shape, (10, 3), -2.0, 2.0, 1)
    assert torch.equal(block.view(torch.uint8), full[10:23, 3:20].view(torch.uint8))


def test_explicit_element_strides_columns():
    # A column of the global matrix: element stride 41 along the shard's only dimension.
    full = torch.empty(30, 41, dtype=torch.float16)
    init_stateless_(full, -1.0, 1.0, 1)
    col = torch.empty(30, dtype=torch.float16)
    init_stateless_(col, -1.0, 1.0, 1, element_offset=7, element_strides=[41])
    assert torch.equal(col, full[:, 7])


def test_split_bounds_matches_tensor_split():
    for size in (0, 1, 5, 33, 48):
        for world in (1, 2, 3, 4, 7):
            x = torch.arange(size)
            for rank, part in enumerate(torch.tensor_split(x, world)):
                start, stop = split_bounds(size, rank, world)
                assert part.tolist() == list(range(start, stop))


def test_thread_count_independent():
    n = (1 << 21) + 5
    before = torch.get_num_threads()
    try:
        out = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            t = torch.empty(n, dtype=torch.float8_e4m3fn)
            init_stateless_(t, -1.0, 1.0, 42)
            out.append(t.view(torch.uint8).clone())
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("level", ["0", "1", "2", "3"])
@pytest.mark.parametrize(
    "dtype", [torch.float8_e4m3fn, torch.float16, torch.bfloat16, torch.float64], ids=str
)
@pytest.mark.parametrize("low,high", [(-1.0, 1.0), (-1e-3, 1e-3), (-0.02, 0.03), (0.25, 0.25)])
def test_simd_paths(monkeypatch, level, dtype, low, high):
    # Narrow FP8 bounds take the AVX-512 run-count path (few distinct bytes), wide ones
    # the gathers (level 2) or the VBMI byte permutes (3, where the CPU has VBMI; else it
    # caps to 2); unaligned rows give heads and tails; counters carry into word 1.
    monkeypatch.setenv("FP8_DUMMY_STATELESS_SIMD", level)
    t = torch.empty(3, 1000, dtype=dtype)[:, 1:]
    init_stateless_(t, low, high, 8, key_offset=2**32 - 5)
    check(t, (3, 999), dtype, low, high, 8, 2**32 - 5)
    for fp8 in FP8:
        u = init_stateless_(torch.empty(4096 + 7, dtype=fp8), low, high, 9)
        check(u, (4096 + 7,), fp8, low, high, 9)


def _philox_uniform_on_cpu() -> str | None:
    """None if torch.func._random.uniform_ runs on CPU tensors, else why not."""
    try:
        import torch.func._random as R
    except ImportError:
        return f"torch {torch.__version__} has no torch.func._random"
    try:
        R.uniform_(R.key(0), torch.empty(1, dtype=torch.float16), low=0.0, high=1.0)
    except (NotImplementedError, RuntimeError) as exc:
        return f"torch {torch.__version__}: aten::_philox_uniform_ has no CPU kernel ({exc!s:.60})"
    return None


NO_COMPOSITE = _philox_uniform_on_cpu()


def composite(shape, dtype, low, high, seed, key_offset=0):
    """The definition: torch.func._random.uniform_ on a contiguous tensor (float16 for FP8,
    then copy_)."""
    key = torch.tensor([seed & so.U64, key_offset & so.U64], dtype=torch.uint64)
    temp = torch.empty(shape, dtype=torch.float16 if dtype in so.FP8 else dtype)
    torch.ops.aten._philox_uniform_(temp, key, low, high)
    return temp.to(dtype)


@pytest.mark.skipif(NO_COMPOSITE is not None, reason=str(NO_COMPOSITE))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_against_torch_func_random(dtype):
    import torch.func._random as R

    for low, high in BOUNDS + [(-0.3, 0.7), (0.1, 0.2000001), (1.0, 1.0000001)]:
        for seed, key_offset, n in [(1234, 0, 100003), (2**40 + 3, 8, 4097), (7, 2**64 - 3, 65)]:
            want = composite((n,), dtype, low, high, seed, key_offset)
            got = torch.empty(n, dtype=dtype)
            init_stateless_(
                got,
                low,
                high,
                seed - (1 << 64) * (seed >> 63),
                key_offset=key_offset - (1 << 64) * (key_offset >> 63),
            )
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (low, high, seed)
    # The public spelling with key(): the same bytes.
    ref = torch.empty(5000, dtype=torch.float16 if dtype in so.FP8 else dtype)
    R.uniform_(R.key(1234), ref, low=-1e-3, high=1e-3)
    got = init_stateless_(torch.empty(5000, dtype=dtype))
    assert torch.equal(got.view(torch.uint8), ref.to(dtype).view(torch.uint8))


def test_rejects_bad_arguments():
    t = torch.empty(4, 6, dtype=torch.float8_e4m3fn)

    def refused(match, *args, **kwargs):  # every message names init_stateless_, not init_
        with pytest.raises(RuntimeError, match=rf"^fp8_dummy\.init_stateless_: .*{match}"):
            torch.ops.fp8_dummy.init_stateless_(*args, **kwargs)

    refused("one entry per dimension", t, element_strides=[1])
    refused("must be >= 0", t, element_strides=[6, -1])
    refused("share a global index", t, element_strides=[0, 1])
    refused("element_offset must be >= 0", t, element_offset=-1)
    refused("overflow", t, element_offset=2**62, element_strides=[2**61, 1])
    refused("unsupported dtype", torch.empty(3, dtype=torch.int32))
    refused(r"\[from, to\)", t, 1.0, 0.0)
    refused("out of bounds", t, -1e6, 1.0)
    refused("more than one element", torch.empty(1, dtype=torch.float16).expand(4))
    refused("out of bounds", t.to("meta"), -1e6, 1.0)  # the Meta kernel's checks
    with pytest.raises(ValueError, match="outside the global size"):
        init_shard_(torch.empty(3, 4, dtype=torch.float16), (4, 4), (2, 0))
