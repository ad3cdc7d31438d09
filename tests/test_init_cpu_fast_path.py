"""CPU FP8 paths (exact and fast) against torch's reference path and an independent numpy
oracle: numpy's legacy MT19937 for the word stream, an exact model of the installed torch's
float16 uniform_ transform (docs/contract.md R4), and a numpy model of float16 -> FP8 (R5).

The path is forced with FP8_DUMMY_CPU_PATH (read on every call): exact, fast (the widest
SIMD level the CPU has), avx512, avx2, portable (the fast path at that level; a level the
CPU lacks is skipped, saying so), auto.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import BOUNDS, FP8_DTYPES, cpu_formula, cpu_reference_refuses, torch_version
from ext import test_ops
from oracles import cpu_reference as oracle

import fp8_dummy
from fp8_dummy.reference import new_path

# A forced level proves itself too: a refusal would hide it behind the reference's bytes, so
# it fails the test here.
pytestmark = pytest.mark.filterwarnings("error:fp8_dummy. self-check refused:RuntimeWarning")
TORCH_VERSION = torch_version()
FORMULA = int(cpu_formula()["formula"].removesuffix("bit"))
PATHS = ["exact", "fast", "avx512", "avx2", "portable", "auto"]
SIZES = [0, 1, 3, 623, 624, 625, 4097, (1 << 20) + 5, 7919, 31337]
FMA = torch.backends.cpu.get_cpu_capability() != "DEFAULT"


# Torch versions whose CPU uniform_ we have read: the self-check must find their transform.
KNOWN_VERSIONS = [(2, minor) for minor in range(9, 16)]
FAST_INFO = fp8_dummy.cpu_fast_path_info()
FAST_ON = "fast path off" not in FAST_INFO
UNAVAILABLE = {
    level: f"this CPU does not run the {level} level (cpu_fast_path_info: {FAST_INFO})"
    for level in ("avx512", "avx2")
    if f"{level}=unavailable" in FAST_INFO
}


def needs_fast_path() -> None:
    """Tests that force the fast path skip, with the self-check's reason, where it is off
    (a torch whose uniform_ matches none of the known transforms)."""
    if not FAST_ON:
        pytest.skip(f"no CPU fast path with this torch: {FAST_INFO}")


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    if request.param in UNAVAILABLE:
        pytest.skip(UNAVAILABLE[request.param])
    if request.param not in ("exact", "auto"):
        needs_fast_path()
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", request.param)
    return request.param


def as_bytes(t: torch.Tensor) -> np.ndarray:
    """The tensor's elements' bytes in logical order."""
    return t.view(torch.uint8).numpy().copy()


def run_both(make, low, high, seed=1234, pre=0, poison=0x55):
    """(op bytes, reference bytes, op generator state, reference generator state)."""
    ours, ref = make(), make()
    ours.view(torch.uint8).fill_(poison)
    g_ours, g_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    if pre:
        torch.rand(pre, generator=g_ours)
        torch.rand(pre, generator=g_ref)
    fp8_dummy.init_(ours, low, high, generator=g_ours)
    new_path(ref, low, high, generator=g_ref)
    return as_bytes(ours), as_bytes(ref), g_ours.get_state(), g_ref.get_state()


# ------------------------------------------------- numpy oracle (tests/oracles/cpu_reference.py)


def transform(words: np.ndarray, low: float, high: float, formula: int, fma: bool):
    """torch's CPU float16 uniform_ value for each word, as float16."""
    return oracle.cpu_uniform_half(words, low, high, f"{formula}bit", fma)


def to_fp8(h: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float16 -> FP8 bytes as the installed torch's CPU copy_ converts."""
    name = str(dtype).removeprefix("torch.")
    return oracle.half_to_fp8(h, name, cpu_formula()["saturate_e4m3fn"])


def reference_oracle(n, low, high, dtype, seed=1234, skip=0):
    h = transform(oracle.mt19937_words(seed, n, skip), low, high, FORMULA, FMA)
    return to_fp8(h, dtype)


# ---------------------------------------------------------------- tests


def test_fast_path_configured():
    info = torch.ops.fp8_dummy_internal.cpu_fast_path_info()
    if TORCH_VERSION in KNOWN_VERSIONS:
        assert FAST_ON, info  # on every torch we know, the evidence finds the transform
    needs_fast_path()
    assert f"formula={FORMULA}" in info, info
    assert f"fma={int(FMA)}" in info or FORMULA == 11, info
    assert "portable=pass" in info, info
    if "avx2" in os.environ.get("FP8_DUMMY_EXPECT", "avx2") and "avx2=unavailable" not in info:
        assert "avx2=pass" in info, info
    if "avx512=unavailable" not in info:
        assert "avx512=pass" in info, info


@pytest.mark.parametrize("level", ["avx512", "avx2"])
def test_forcing_a_level_the_cpu_lacks_says_so(monkeypatch, level):
    if level not in UNAVAILABLE:
        pytest.skip(f"this CPU runs {level}: nothing to refuse")
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", level)
    t = torch.full((100,), 0x55, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=f"FP8_DUMMY_CPU_PATH={level}: this CPU does not run"):
        fp8_dummy.init_(t.view(torch.float8_e4m3fn))
    assert (t == 0x55).all()


@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=str)
@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
def test_oracle_matches_reference(dtype, bounds):
    """The numpy oracle itself against torch's reference path."""
    if cpu_reference_refuses(dtype, *bounds):
        pytest.skip("torch's own CPU kernel refuses these bounds (tests/test_init_cpu.py)")
    n = 65536 + 3
    ref = torch.empty(n, dtype=dtype)
    new_path(ref, *bounds, seed=77)
    np.testing.assert_array_equal(reference_oracle(n, *bounds, dtype, seed=77), as_bytes(ref))


@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=str)
@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
def test_matches_reference_and_oracle(path, dtype, bounds):
    if cpu_reference_refuses(dtype, *bounds):
        t = torch.empty(5000, dtype=dtype).view(torch.uint8).fill_(0x55).view(dtype)
        g = torch.Generator().manual_seed(3)
        state = g.get_state()
        with pytest.raises(RuntimeError, match=r"to - from <= std::numeric_limits<T>::max\(\)"):
            fp8_dummy.init_(t, *bounds, generator=g)
        assert (t.view(torch.uint8) == 0x55).all() and torch.equal(g.get_state(), state)
        return
    rs = np.random.RandomState(hash((str(dtype), bounds)) % 2**32)
    for n in SIZES + [int(rs.randint(1, 5000)) * 2 + 1]:
        for poison in (0x55, 0xAA) if n <= 4097 else (0x55,):
            ours, ref, s_ours, s_ref = run_both(
                lambda n=n: torch.empty(n, dtype=dtype), *bounds, poison=poison
            )
            np.testing.assert_array_equal(ours, ref, err_msg=f"n={n}")
            assert torch.equal(s_ours, s_ref), f"generator state differs, n={n}"
    n = 65536 + 3
    ours = torch.empty(n, dtype=dtype)
    fp8_dummy.init_(ours, *bounds, seed=77)
    np.testing.assert_array_equal(as_bytes(ours), reference_oracle(n, *bounds, dtype, seed=77))


@pytest.mark.parametrize("pre", [1, 7, 623, 624, 1000])
def test_mid_block_and_consecutive_calls(path, pre):
    """The generator already drawn from, then several calls in a row."""
    g_ours, g_ref = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    torch.rand(pre, generator=g_ours)
    torch.rand(pre, generator=g_ref)
    for n in (5, 625, 1, 4097, 623, 70000):
        ours = torch.full((n,), 0x55, dtype=torch.uint8).view(torch.float8_e4m3fn)
        ref = torch.empty(n, dtype=torch.float8_e4m3fn)
        fp8_dummy.init_(ours, -1.0, 1.0, generator=g_ours)
        new_path(ref, -1.0, 1.0, generator=g_ref)
        np.testing.assert_array_equal(as_bytes(ours), as_bytes(ref))
        assert torch.equal(g_ours.get_state(), g_ref.get_state())
    # ... and the oracle agrees on where the stream stands: continue with plain torch.rand.
    assert torch.equal(torch.rand(3, generator=g_ours), torch.rand(3, generator=g_ref))


def test_default_generator(path):
    torch.manual_seed(5)
    ref = new_path(
        torch.empty(3000, dtype=torch.float8_e5m2), -1.0, 1.0, generator=torch.default_generator
    )
    after_ref = torch.get_rng_state()
    torch.manual_seed(5)
    ours = torch.empty(3000, dtype=torch.float8_e5m2)
    assert torch.ops.fp8_dummy.init_.generator(ours, -1.0, 1.0, generator=None) is None
    np.testing.assert_array_equal(as_bytes(ours), as_bytes(ref))
    assert torch.equal(torch.get_rng_state(), after_ref)
    torch.manual_seed(5)
    t = torch.empty(3000, dtype=torch.float8_e5m2)
    fp8_dummy.init_(t, -1.0, 1.0, generator=torch.default_generator)
    np.testing.assert_array_equal(as_bytes(t), as_bytes(ref))
    assert torch.equal(torch.get_rng_state(), after_ref)


LAYOUTS = {
    "contiguous": lambda dt: torch.empty(37, 53, dtype=dt),
    "transposed": lambda dt: torch.empty(53, 37, dtype=dt).t(),
    "gaps": lambda dt: torch.empty(37, 106, dtype=dt)[:, ::2],
    "channels_last": lambda dt: torch.empty(3, 5, 7, 11, dtype=dt).to(
        memory_format=torch.channels_last
    ),
    "storage_offset": lambda dt: torch.empty(5000, dtype=dt)[17:4000],
    "strided_1d": lambda dt: torch.empty(9000, dtype=dt)[::3],
    "big_gaps": lambda dt: torch.empty(1100, 1200, dtype=dt)[3:, ::2],
    "scalar": lambda dt: torch.empty((), dtype=dt),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts(path, layout):
    make = LAYOUTS[layout]
    for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        for bounds in ((-1e-3, 1e-3), (-500.0, 500.0)):
            base_ours, base_ref = make(dtype), make(dtype)
            # The whole storage, so bytes outside the view must stay as they were.
            for b in (base_ours, base_ref):
                b.untyped_storage().copy_(
                    torch.full(
                        (b.untyped_storage().nbytes(),), 0x55, dtype=torch.uint8
                    ).untyped_storage()
                )
            g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
            fp8_dummy.init_(base_ours, *bounds, generator=g1)
            new_path(base_ref, *bounds, generator=g2)
            s1 = torch.tensor(base_ours.untyped_storage(), dtype=torch.uint8)
            s2 = torch.tensor(base_ref.untyped_storage(), dtype=torch.uint8)
            assert torch.equal(s1, s2), (layout, dtype, bounds)
            assert torch.equal(g1.get_state(), g2.get_state())


def test_seed_argument(path):
    for seed in (0, 1234, 2**32 + 5, -1):
        t, r = (
            torch.empty(2000, dtype=torch.float8_e4m3fn),
            torch.empty(2000, dtype=torch.float8_e4m3fn),
        )
        fp8_dummy.init_(t, -1.0, 1.0, seed)
        new_path(r, -1.0, 1.0, seed)
        np.testing.assert_array_equal(as_bytes(t), as_bytes(r))


STATE_LEFT, STATE_NEXT = 8, 16  # byte offsets in CPU get_state(): int32 left, uint64 next


def test_inconsistent_state_falls_back(path):
    """A state torch's engine reads past its block (set_state checks left and next apart):
    the op must leave it to torch (the exact path), giving torch's own bytes."""
    g = torch.Generator().manual_seed(4)
    torch.rand(10, generator=g)
    state = g.get_state()
    state[STATE_LEFT : STATE_LEFT + 4] = torch.tensor([600], dtype=torch.int32).view(torch.uint8)
    state[STATE_NEXT : STATE_NEXT + 8] = torch.tensor([400], dtype=torch.int64).view(torch.uint8)
    g1, g2 = torch.Generator(), torch.Generator()
    g1.set_state(state)
    g2.set_state(state)
    t, r = torch.empty(100, dtype=torch.float8_e4m3fn), torch.empty(100, dtype=torch.float8_e4m3fn)
    fp8_dummy.init_(t, -1.0, 1.0, generator=g1)
    new_path(r, -1.0, 1.0, generator=g2)
    np.testing.assert_array_equal(as_bytes(t), as_bytes(r))
    assert torch.equal(g1.get_state(), g2.get_state())


def test_bad_env_value(monkeypatch):
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", "turbo")
    with pytest.raises(RuntimeError, match="FP8_DUMMY_CPU_PATH"):
        fp8_dummy.init_(torch.empty(4, dtype=torch.float8_e4m3fn))


# ------------------------------------------------ both formulas, through the test op


@pytest.mark.parametrize("formula", [24, 11])
@pytest.mark.parametrize("fma", [True, False])
@pytest.mark.parametrize("level", ["portable", "avx2", "avx512"])
def test_transform_formulas(formula, fma, level):
    if level in UNAVAILABLE:
        pytest.skip(UNAVAILABLE[level])
    words = oracle.mt19937_words(99, 200003)
    for low, high in BOUNDS + [(-3.0, 60000.0), (0.0, 1.0), (-1.0, 0.0), (-65504.0, 0.0)]:
        got = test_ops.cpu_transform(
            torch.from_numpy(words.view(np.int32)),
            low,
            high,
            formula,
            fma,
            ["portable", "avx2", "avx512"].index(level),
        )
        want = transform(words, low, high, formula, fma)
        np.testing.assert_array_equal(
            got.view(torch.int16).numpy(), want.view(np.int16), err_msg=f"[{low}, {high}]"
        )


def test_fma_matters_at_these_bounds():
    """The FMA and non-FMA models differ on [-500, 500]: the tests above can tell them apart."""
    words = oracle.mt19937_words(99, 200003)
    a = transform(words, -500.0, 500.0, 24, True)
    b = transform(words, -500.0, 500.0, 24, False)
    assert (a != b).sum() > 10


@pytest.mark.slow  # a fresh Python process
def test_default_cpu_capability_subprocess():
    """torch's DEFAULT kernels (no FMA): the fast path must notice and still match."""
    script = textwrap.dedent("""
        import os, numpy as np, torch, fp8_dummy
        from fp8_dummy.reference import new_path
        info = torch.ops.fp8_dummy_internal.cpu_fast_path_info()
        assert "capability=DEFAULT" in info and "fma=0" in info, info
        assert "avx2=FAIL" not in info and "portable=pass" in info, info
        assert "avx512=FAIL" not in info, info
        for path in ("auto", "fast", "portable"):
            os.environ["FP8_DUMMY_CPU_PATH"] = path
            for lo, hi in ((-500.0, 500.0), (-1.0, 1.0), (0.0, 60000.0)):
                t = torch.empty(200003, dtype=torch.float8_e4m3fn)
                r = torch.empty(200003, dtype=torch.float8_e4m3fn)
                fp8_dummy.init_(t, lo, hi, 3)
                new_path(r, lo, hi, 3)
                assert torch.equal(t.view(torch.uint8), r.view(torch.uint8)), (path, lo, hi)
        print("ok")
    """)
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    env.pop("FP8_DUMMY_CPU_PATH", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
