"""fp8_dummy.init_ on the CPU: byte-identical to the reference path and to the numpy
oracle, for every dtype, layout, size, seed and bound; generator state; bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import (
    BOUNDS,
    FP8_DTYPES,
    WIDE_DTYPES,
    as_bytes,
    cpu_formula,
    cpu_reference_refuses,
    poison,
    storage_bytes,
)
from oracles import cpu_reference as oracle

import fp8_dummy
from fp8_dummy import reference

SIZES = [0, 1, 3, 4097, (1 << 20) + 5]
LAYOUTS = {
    "contiguous": lambda make: make((37, 53)),
    "transposed": lambda make: make((53, 37)).t(),
    "permuted": lambda make: make((3, 5, 7, 11)).permute(2, 0, 3, 1),
    "gaps": lambda make: make((41, 66))[:, ::2],
    "gaps_permuted": lambda make: make((66, 41)).t()[:, ::2],
    "channels_last": lambda make: make((2, 6, 5, 7)).to(memory_format=torch.channels_last),
    "channels_last_gaps": lambda make: make((2, 6, 5, 14)).to(memory_format=torch.channels_last)[
        ..., ::2
    ],
    "offset": lambda make: make((1001,))[17:900],
    "zero_dim": lambda make: make((5,))[2],
    "size_one_dims": lambda make: make((1, 9, 1, 13)),
}


def empty(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def run_both(t: torch.Tensor, low, high, seed) -> tuple[torch.Tensor, torch.Tensor]:
    """init_ on t (poisoned) and the reference on a poisoned clone with t's layout."""
    ref = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    ref_view = ref
    if t.storage_offset() or storage_bytes(t).numel() != storage_bytes(ref).numel():
        # keep t's exact storage layout (offsets, gaps) for the reference as well
        base = torch.empty(storage_bytes(t).numel(), dtype=torch.uint8).view(t.dtype)
        ref_view = base.as_strided(t.size(), t.stride(), t.storage_offset())
    poison(t)
    poison(ref_view)
    fp8_dummy.init_(t, low, high, seed)
    reference.new_path(ref_view, low, high, seed)
    return t, ref_view


def refused_alike(make_view, low, high, seed) -> None:
    """Where torch's own CPU kernel refuses the bounds, init_ refuses them with its message,
    before writing a byte or moving the generator."""
    ours, ref = poison(make_view()), make_view()
    g_ours, g_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    with pytest.raises(RuntimeError) as want:
        reference.new_path(ref, low, high, generator=g_ref)
    before = storage_bytes(ours).clone()
    with pytest.raises(RuntimeError) as got:
        fp8_dummy.init_(ours, low, high, generator=g_ours)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
    assert torch.equal(storage_bytes(ours), before)
    assert torch.equal(g_ours.get_state(), g_ref.get_state())


def oracle_bytes(t: torch.Tensor, low, high, seed) -> np.ndarray:
    temp_strides = torch.empty_like(t, dtype=torch.float16, device="meta").stride()
    name = str(t.dtype).removeprefix("torch.")
    return oracle.reference_bytes(
        tuple(t.shape), temp_strides, name, seed, low, high, **cpu_formula()
    ).reshape(-1)


# Every bound at every small size; the large size with three bounds (enough to see
# rounding and clamping, and the run stays short).
SIZE_BOUNDS = [(n, b) for n in SIZES for b in BOUNDS if n <= 4097 or b in BOUNDS[:3]]


@pytest.mark.parametrize("dtype", FP8_DTYPES + WIDE_DTYPES, ids=str)
@pytest.mark.parametrize("size,bounds", SIZE_BOUNDS, ids=str)
def test_sizes_and_bounds(dtype, size, bounds):
    low, high = bounds
    seed = random.Random(size * 31 + int(high)).randrange(2**40)
    if cpu_reference_refuses(dtype, low, high) and size > 0:
        refused_alike(lambda: empty((size,), dtype), low, high, seed)
        return
    t, ref = run_both(empty((size,), dtype), low, high, seed)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))
    if dtype in FP8_DTYPES:
        assert np.array_equal(as_bytes(t).numpy(), oracle_bytes(t, low, high, seed))


@pytest.mark.parametrize("dtype", FP8_DTYPES + WIDE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("bounds", [BOUNDS[0], BOUNDS[2], BOUNDS[3]], ids=str)
def test_layouts(dtype, layout, bounds):
    low, high = bounds
    t = LAYOUTS[layout](lambda shape: empty(shape, dtype))
    t, ref = run_both(t, low, high, seed=1234)
    # Whole storage: elements equal, and bytes outside the view left as they were.
    assert torch.equal(storage_bytes(t), storage_bytes(ref))
    if dtype in FP8_DTYPES:
        assert np.array_equal(as_bytes(t).numpy(), oracle_bytes(t, low, high, 1234))


@pytest.mark.parametrize("trial", range(12))
def test_random_shapes_and_views(trial):
    """Random shapes, permutations, steps and offsets; two poisons so that a byte
    never written cannot pass by coincidence."""
    rng = random.Random(trial)
    dtype = rng.choice(FP8_DTYPES)
    ndim = rng.randint(1, 4)
    shape = [rng.randint(1, 9) for _ in range(ndim)]
    steps = [rng.choice([1, 1, 2, 3]) for _ in range(ndim)]
    base = torch.empty([s * st + 1 for s, st in zip(shape, steps)], dtype=dtype)
    view = base[tuple(slice(1, None, st) for st in steps)]
    view = view.permute(*rng.sample(range(ndim), ndim))
    low, high = rng.choice([b for b in BOUNDS if not cpu_reference_refuses(dtype, *b)])
    seed = rng.randrange(-(2**63), 2**63)
    expected = oracle_bytes(view, low, high, seed)
    for byte in (0x55, 0xAA):
        poison(base, byte)
        before = storage_bytes(base).clone()
        fp8_dummy.init_(view, low, high, seed)
        assert np.array_equal(as_bytes(view).numpy(), expected)
        # bytes outside the view are untouched
        mask = torch.ones(base.numel(), dtype=torch.bool)
        mask.view(base.shape)[tuple(slice(1, None, st) for st in steps)] = False
        assert torch.equal(storage_bytes(base)[mask], before[mask])


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 + 5, 2**63 - 1, -1, -(2**63)])
def test_seeds(seed):
    t, ref = run_both(empty((999,), torch.float8_e4m3fn), -1.0, 1.0, seed)
    assert torch.equal(as_bytes(t), as_bytes(ref))
    assert np.array_equal(as_bytes(t).numpy(), oracle_bytes(t, -1.0, 1.0, seed))


@pytest.mark.parametrize("dtype", [FP8_DTYPES[0], FP8_DTYPES[1], torch.bfloat16], ids=str)
def test_generator_overload_state(dtype):
    g_op = torch.Generator().manual_seed(77)
    g_ref = torch.Generator().manual_seed(77)
    torch.rand(7, generator=g_op)  # leave both generators mid-stream
    torch.rand(7, generator=g_ref)
    a = poison(empty((300_007,), dtype))
    b = poison(empty((300_007,), dtype))
    fp8_dummy.init_(a, -2.0, 3.0, generator=g_op)
    reference.new_path(b, -2.0, 3.0, generator=g_ref)
    assert torch.equal(as_bytes(a), as_bytes(b))
    assert torch.equal(g_op.get_state(), g_ref.get_state())
    # and the next call continues the same stream
    fp8_dummy.init_(a[:999], -2.0, 3.0, generator=g_op)
    reference.new_path(b[:999], -2.0, 3.0, generator=g_ref)
    assert torch.equal(as_bytes(a), as_bytes(b))
    if dtype in FP8_DTYPES:  # oracle: 7 words skipped, then 300_007, then 999 more
        n, name = 300_007, str(dtype).removeprefix("torch.")
        cfg = cpu_formula()
        words = oracle.mt19937_words(77, n + 999, skip=7)
        halves = oracle.cpu_uniform_half(words, -2.0, 3.0, cfg["formula"], cfg["fma"])
        halves = np.concatenate([halves[n:], halves[999:n]])
        expected = oracle.half_to_fp8(halves, name, cfg["saturate_e4m3fn"])
        assert np.array_equal(as_bytes(a).numpy(), expected)


def test_default_generator():
    """generator=None at the op level means the device's default generator."""
    a = poison(empty((5000,), torch.float8_e5m2))
    b = poison(empty((5000,), torch.float8_e5m2))
    torch.manual_seed(4321)
    torch.ops.fp8_dummy.init_.generator(a, -1.0, 1.0, generator=None)
    after_op = torch.default_generator.get_state()
    torch.manual_seed(4321)
    reference.new_path(b, -1.0, 1.0, generator=torch.default_generator)
    assert torch.equal(as_bytes(a), as_bytes(b))
    assert torch.equal(after_op, torch.default_generator.get_state())


def test_seed_overload_leaves_default_generator_alone():
    torch.manual_seed(5)
    before = torch.default_generator.get_state()
    fp8_dummy.init_(empty((1000,), torch.float8_e4m3fn))
    assert torch.equal(before, torch.default_generator.get_state())


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float32], ids=str)
def test_zero_elements_draw_nothing(dtype):
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    fp8_dummy.init_(empty((0, 7), dtype), -1.0, 1.0, generator=g)
    assert torch.equal(before, g.get_state())
