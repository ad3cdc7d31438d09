"""init_ / init_many_ with contiguous_temp=True (TensorRT-LLM's float16 temp,
``torch.empty(shape)``: row-major order whatever the layout) and int8/uint8 outputs (copy_'s
float16 -> integer conversion) on the CPU, exact and fast paths: byte for byte against
torch's own ops on a contiguous temp and against the independent numpy oracle (numpy's
MT19937, the temp's row-major positions, truncation toward zero and modulo 256)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, as_bytes, cpu_formula, poison, storage_bytes
from oracles import cpu_reference as oracle

import fp8_dummy
from fp8_dummy import reference

BYTE_DTYPES = FP8_DTYPES + [torch.int8, torch.uint8]
LAYOUTS = {
    "contiguous": lambda make: make((37, 53)),
    "transposed": lambda make: make((53, 37)).t(),
    "permuted": lambda make: make((3, 5, 7, 11)).permute(2, 0, 3, 1),
    "sliced": lambda make: make((41, 66))[:, ::2],
    "sliced_transposed": lambda make: make((66, 41)).t()[:, ::2],
    "channels_last": lambda make: make((2, 6, 5, 7)).to(memory_format=torch.channels_last),
    "offset": lambda make: make((1001,))[17:900],
    "zero_dim": lambda make: make((5,))[2],
}
# TensorRT-LLM's bounds, vLLM's, and ones whose integer values wrap modulo 256.
BOUNDS = [(-3.0, 3.0), (0.0, 64.0), (-1e-3, 1e-3), (-500.0, 500.0), (-200.0, 300.0)]


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return torch.empty(shape, device="meta").stride()


def oracle_bytes(t: torch.Tensor, low: float, high: float, seed: int, temp_strides) -> np.ndarray:
    cfg = cpu_formula()
    name = str(t.dtype).removeprefix("torch.")
    return oracle.reference_bytes(tuple(t.shape), temp_strides, name, seed, low, high, **cfg)


def twin(t: torch.Tensor) -> torch.Tensor:
    """A poisoned tensor with t's exact storage layout (offset, gaps, strides)."""
    base = torch.empty(storage_bytes(t).numel(), dtype=torch.uint8).view(t.dtype)
    return poison(base.as_strided(t.size(), t.stride(), t.storage_offset()))


# A refused proof would hide a broken fast path behind the exact one: fail on its warning
# (the forced fast path proves itself too).
pytestmark = pytest.mark.filterwarnings("error:fp8_dummy. self-check refused:RuntimeWarning")


@pytest.fixture(params=["auto", "exact", "fast"])
def cpu_path(request, monkeypatch):
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", request.param)
    return request.param


@pytest.mark.parametrize("dtype", BYTE_DTYPES + WIDE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_every_dtype(dtype, layout, cpu_path):
    low, high = (0.0, 64.0) if dtype == torch.uint8 else (-3.0, 3.0)
    t = poison(LAYOUTS[layout](lambda shape: torch.empty(shape, dtype=dtype)))
    ref = twin(t)
    fp8_dummy.init_(t, low, high, 0, contiguous_temp=True)
    reference.contiguous_path(ref, low, high, 0)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))  # outside the view too
    if dtype in BYTE_DTYPES:
        want = oracle_bytes(t, low, high, 0, row_major(tuple(t.shape)))
        assert np.array_equal(as_bytes(t).numpy(), want.reshape(-1))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_bounds_and_integer_wrap(dtype, bounds, layout, cpu_path):
    low, high = bounds
    t = poison(LAYOUTS[layout](lambda shape: torch.empty(shape, dtype=dtype)))
    fp8_dummy.init_(t, low, high, 1234, contiguous_temp=True)
    want = oracle_bytes(t, low, high, 1234, row_major(tuple(t.shape)))
    assert np.array_equal(as_bytes(t).numpy(), want.reshape(-1))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("layout", ["transposed", "sliced_transposed"])
def test_integers_with_empty_like_temp(dtype, layout, cpu_path):
    """Without the option, int8/uint8 follow the empty_like temp (memory order)."""
    t = poison(LAYOUTS[layout](lambda shape: torch.empty(shape, dtype=dtype)))
    ref = twin(t)
    fp8_dummy.init_(t, -130.0, 130.0, 7)
    reference.new_path(ref, -130.0, 130.0, 7)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))
    temp = torch.empty_like(t, dtype=torch.float16, device="meta").stride()
    assert np.array_equal(as_bytes(t).numpy(), oracle_bytes(t, -130.0, 130.0, 7, temp).reshape(-1))


@pytest.mark.parametrize("trial", range(10))
def test_random_views(trial, cpu_path):
    rng = random.Random(trial)
    dtype = rng.choice(BYTE_DTYPES)
    ndim = rng.randint(1, 4)
    shape = [rng.randint(1, 9) for _ in range(ndim)]
    steps = [rng.choice([1, 1, 2, 3]) for _ in range(ndim)]
    base = torch.empty([s * st + 1 for s, st in zip(shape, steps)], dtype=dtype)
    view = base[tuple(slice(1, None, st) for st in steps)].permute(*rng.sample(range(ndim), ndim))
    low, high = rng.choice(BOUNDS)
    seed = rng.randrange(-(2**63), 2**63)
    want = oracle_bytes(view, low, high, seed, row_major(tuple(view.shape))).reshape(-1)
    for byte in (0x55, 0xAA):
        poison(base, byte)
        before = storage_bytes(base).clone()
        fp8_dummy.init_(view, low, high, seed, contiguous_temp=True)
        assert np.array_equal(as_bytes(view).numpy(), want)
        outside = torch.ones(base.numel(), dtype=torch.bool)
        outside.view(base.shape)[tuple(slice(1, None, st) for st in steps)] = False
        assert torch.equal(storage_bytes(base)[outside], before[outside])


def test_large_split_over_threads(cpu_path):
    """Over 4 Mi elements the fast path splits the stream over threads: a transposed tensor
    scatters each thread's row-major range."""
    t = poison(torch.empty(2053, 2049, dtype=torch.int8).t())
    ref = twin(t)
    fp8_dummy.init_(t, -3.0, 3.0, 0, contiguous_temp=True)
    reference.contiguous_path(ref, -3.0, 3.0, 0)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.uint8], ids=str)
def test_generator_form_state(dtype, cpu_path):
    g_ours, g_ref = torch.Generator().manual_seed(77), torch.Generator().manual_seed(77)
    torch.rand(7, generator=g_ours), torch.rand(7, generator=g_ref)  # mid-stream
    t = poison(torch.empty(301, 997, dtype=dtype).t())
    ref = twin(t)
    fp8_dummy.init_(t, 0.0, 64.0, generator=g_ours, contiguous_temp=True)
    reference.contiguous_path(ref, 0.0, 64.0, generator=g_ref)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))
    assert torch.equal(g_ours.get_state(), g_ref.get_state())


def test_option_matters():
    """The two temps give different bytes for a transposed tensor (so the tests above can
    fail), the same for a contiguous one."""
    a = torch.empty(64, 32, dtype=torch.float8_e4m3fn).t()
    b = torch.empty(64, 32, dtype=torch.float8_e4m3fn).t()
    fp8_dummy.init_(a, -3.0, 3.0, 0, contiguous_temp=True)
    fp8_dummy.init_(b, -3.0, 3.0, 0)
    assert not torch.equal(as_bytes(a), as_bytes(b))
    c, d = torch.empty(32, 64, dtype=torch.int8), torch.empty(32, 64, dtype=torch.int8)
    fp8_dummy.init_(c, -3.0, 3.0, 0, contiguous_temp=True)
    fp8_dummy.init_(d, -3.0, 3.0, 0)
    assert torch.equal(c, d)


def test_init_many_matches_a_loop():
    shapes = [(37, 53), (53, 37), (41, 66)]
    make = [lambda s=s: torch.empty(s, dtype=torch.int8) for s in shapes]
    ours = [poison(make[0]()), poison(make[1]().t()), poison(make[2]()[:, ::2])]
    ours.append(poison(torch.empty(9, 7, dtype=torch.bfloat16).t()))
    refs = [twin(t) for t in ours]
    fp8_dummy.init_many_(ours, -3.0, 3.0, 5, contiguous_temp=True)
    for r in refs:
        reference.contiguous_path(r, -3.0, 3.0, 5)
    for t, r in zip(ours, refs):
        assert torch.equal(storage_bytes(t), storage_bytes(r))


def test_torch_cpu_integer_conversion_is_truncation_modulo_256():
    """The fact the CPU paths rest on (docs/trtllm.md): torch's CPU float16 -> int8/uint8
    conversion of every finite float16 value, vectorized or not, is truncation toward zero
    then modulo 256 (negative values to uint8 wrap: -1.5 -> 255)."""
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = torch.isfinite(halves)
    for dtype in (torch.int8, torch.uint8):
        name = str(dtype).removeprefix("torch.")
        want = oracle.half_to_int8(halves[finite].numpy(), name)
        contiguous = halves.to(dtype)[finite].view(torch.uint8).numpy()
        strided = torch.empty(2 * 65536, dtype=dtype)[::2].copy_(halves)[finite]
        assert np.array_equal(contiguous, want)
        assert np.array_equal(strided.view(torch.uint8).numpy(), want)
    assert torch.tensor([-1.5], dtype=torch.float16).to(torch.uint8).item() == 255


def test_bad_option_type():
    with pytest.raises(TypeError, match="contiguous_temp must be a bool"):
        fp8_dummy.init_(torch.empty(3, dtype=torch.int8), contiguous_temp=1)
    with pytest.raises(TypeError, match="contiguous_temp must be a bool"):
        fp8_dummy.init_many_([torch.empty(3, dtype=torch.int8)], contiguous_temp="yes")


def test_proof_keys_name_the_temp_and_dtype(monkeypatch):
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", "auto")
    fp8_dummy.init_(torch.empty(64, 3000, dtype=torch.uint8).t(), 0.0, 64.0, contiguous_temp=True)
    keys = [e for e in fp8_dummy.self_check_report() if e.path == "cpu.init_"]
    if not any("simd=" in e.key for e in keys):
        pytest.skip("no CPU fast path in this process (exact path only)")
    mine = [e for e in keys if "Byte" in e.key and "temp=contiguous" in e.key]
    assert mine and all(e.proven for e in mine), keys
