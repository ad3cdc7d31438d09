"""fp8_dummy.random_ on the CPU: the bytes and the final generator state of torch's own
t.random_(low, high, generator=g) for int8 and uint8 tensors (and float4_e2m1fn_x2 viewed as
uint8), every layout, every path (FP8_DUMMY_CPU_PATH), 1-8 threads, mid-block generators.
Oracles: torch's random_ itself, and numpy's legacy MT19937 (one word per element,
value = low + word % (high - low), in TensorIterator's order: increasing stride innermost).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import storage_bytes
from oracles import mt19937_state as mt

import fp8_dummy

# A forced level proves itself too: a refusal would hide it behind the reference's bytes, so
# it fails the test here.
pytestmark = pytest.mark.filterwarnings("error:fp8_dummy. self-check refused:RuntimeWarning")
INFO = torch.ops.fp8_dummy_internal.cpu_random_info()
PATHS = ["auto", "exact", "fast", "avx512", "avx2", "portable"]
# (dtype, low, high): the engines' two calls first, then other ranges (powers of two or not).
RANGES = [
    (torch.int8, -128, 128),
    (torch.uint8, 0, 256),
    (torch.uint8, 3, 200),
    (torch.uint8, 0, 1),
    (torch.uint8, 255, 256),
    (torch.int8, -5, 7),
    (torch.int8, -128, -64),
    (torch.int8, 100, 128),
    (torch.uint8, 16, 48),
]
SIZES = [1, 5, 623, 624, 625, 4097, 100_003]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    if f"{request.param}=unavailable" in INFO:
        pytest.skip(f"this CPU does not run the {request.param} level ({INFO})")
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", request.param)
    return request.param


def generator(seed: int, pre: int = 0) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    if pre:
        torch.rand(pre, generator=g)
    return g


def oracle(g: torch.Generator, n: int, low: int, high: int) -> np.ndarray:
    """The uint8 bytes of n elements in draw order, from where g stands (g not advanced)."""
    words = mt.words_after(g.get_state(), n).astype(np.int64)
    return ((words % (high - low)) + low).astype(np.uint8)


def both(make, low, high, seed=1234, pre=0):
    """(ours, torch's, our generator, torch's generator) after the same call."""
    ours, ref = make(), make()
    storage_bytes(ours).fill_(0x55)
    storage_bytes(ref).fill_(0x55)
    g1, g2 = generator(seed, pre), generator(seed, pre)
    assert fp8_dummy.random_(ours, low, high, generator=g1) is ours
    ref.random_(low, high, generator=g2)
    return ours, ref, g1, g2


def test_self_check_passed_on_every_level_the_cpu_has():
    for level in ("avx512", "avx2", "portable"):
        if f"{level}=unavailable" not in INFO:
            assert f"{level}=pass" in INFO, INFO


@pytest.mark.parametrize("dtype,low,high", RANGES, ids=str)
def test_matches_torch_and_oracle(path, dtype, low, high):
    for n in SIZES:
        for pre in (0, 7, 624):
            ours, ref, g1, g2 = both(lambda n=n: torch.empty(n, dtype=dtype), low, high, 9, pre)
            assert torch.equal(ours.view(torch.uint8), ref.view(torch.uint8)), (n, pre)
            assert torch.equal(g1.get_state(), g2.get_state()), (n, pre)
            want = oracle(generator(9, pre), n, low, high)
            np.testing.assert_array_equal(ours.view(torch.uint8).numpy(), want, err_msg=f"n={n}")


def test_seed_argument_is_a_fresh_generator(path):
    for seed in (0, 1234, 2**32 + 5, -1):
        t = fp8_dummy.random_(torch.empty(3001, dtype=torch.int8), -128, 128, seed)
        r = torch.empty(3001, dtype=torch.int8).random_(-128, 128, generator=generator(seed))
        assert torch.equal(t, r), seed
    assert torch.ops.fp8_dummy.random_(torch.empty(4, dtype=torch.uint8), 0, 256) is None


def test_default_generator(path):
    torch.manual_seed(5)
    ref = torch.empty(5000, dtype=torch.uint8).random_(0, 256)
    after = torch.get_rng_state()
    torch.manual_seed(5)
    t = torch.empty(5000, dtype=torch.uint8)
    torch.ops.fp8_dummy.random_.generator(t, 0, 256, generator=None)
    assert torch.equal(t, ref)
    assert torch.equal(torch.get_rng_state(), after)


def test_float4_viewed_as_uint8(path):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    ours, ref, g1, g2 = both(
        lambda: torch.empty(257, 33, dtype=torch.float4_e2m1fn_x2).view(torch.uint8), 0, 256
    )
    assert torch.equal(ours, ref)
    assert torch.equal(g1.get_state(), g2.get_state())


def _as_strided(shape, strides, size):
    return lambda dt: torch.empty(size, dtype=dt).as_strided(shape, strides)


LAYOUTS = {
    "contiguous": lambda dt: torch.empty(37, 53, dtype=dt),
    "transposed": lambda dt: torch.empty(53, 37, dtype=dt).t(),
    "permuted_3d": lambda dt: torch.empty(5, 7, 11, dtype=dt).permute(2, 0, 1),
    "channels_last": lambda dt: torch.empty(3, 5, 7, 11, dtype=dt).to(
        memory_format=torch.channels_last
    ),
    "gaps": lambda dt: torch.empty(37, 106, dtype=dt)[:, ::2],
    "transposed_gaps": lambda dt: torch.empty(106, 37, dtype=dt)[::2].t(),
    "channels_last_gaps": lambda dt: torch.empty(3, 5, 7, 22, dtype=dt).to(
        memory_format=torch.channels_last
    )[..., ::2],
    # Rows 701 apart, 700 long: distinct, shown by the sorted-strides rule. (Interleaved
    # views it cannot show distinct, such as strides (3, 2) for sizes (2, 3), are refused:
    # tests/test_overlapping_layouts.py.)
    "interleaved_big": _as_strided((300, 700), (701, 1), 300 * 701),
    "storage_offset": lambda dt: torch.empty(5000, dtype=dt)[17:4000],
    "strided_1d": lambda dt: torch.empty(9000, dtype=dt)[::3],
    "big_gaps": lambda dt: torch.empty(1100, 1200, dtype=dt)[3:, ::2],
    "size_one_dims": lambda dt: torch.empty(1, 40, 1, 30, dtype=dt)[:, ::2],
    "scalar": lambda dt: torch.empty((), dtype=dt),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts(path, layout):
    """Every byte of the storage (so bytes outside a view stay as they were) as torch's
    random_ on the same layout leaves it; its order is TensorIterator's, not the tensor's."""
    for dtype, low, high in RANGES[:3]:
        ours, ref, g1, g2 = both(lambda dtype=dtype: LAYOUTS[layout](dtype), low, high, 3, 5)
        assert torch.equal(storage_bytes(ours), storage_bytes(ref)), (layout, dtype, low)
        assert torch.equal(g1.get_state(), g2.get_state()), (layout, dtype, low)


def test_layout_order_against_oracle():
    """Transposed with gaps: element (i, j) at i * 1 + j * 74 gets draw j * 37 + i (the
    smallest stride innermost), which differs from the logical (row-major) order."""
    t = torch.empty(106, 37, dtype=torch.uint8)[::2].t()  # shape (37, 53), strides (1, 74)
    fp8_dummy.random_(t, 0, 256, generator=generator(8))
    want = oracle(generator(8), t.numel(), 0, 256).reshape(53, 37).T
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.slow  # long streams on 1-8 threads
@pytest.mark.parametrize("level", ["fast", "portable"])
def test_threads_give_same_bytes(monkeypatch, level):
    """1-8 threads above the split size (2 Mi words per thread), from mid-block."""
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", level)
    n = (17 << 20) + 13
    g_ref = generator(31, 3)
    ref = torch.empty(n, dtype=torch.int8).random_(-128, 128, generator=g_ref)
    want_head = oracle(generator(31, 3), 1 << 16, -128, 128)
    old = torch.get_num_threads()
    try:
        for threads in range(1, 9):
            torch.set_num_threads(threads)
            t = torch.full((n,), 0x55, dtype=torch.int8)
            g = generator(31, 3)
            fp8_dummy.random_(t, -128, 128, generator=g)
            assert torch.equal(t, ref), threads
            assert torch.equal(g.get_state(), g_ref.get_state()), threads
            np.testing.assert_array_equal(t[: 1 << 16].view(torch.uint8).numpy(), want_head)
    finally:
        torch.set_num_threads(old)


def test_inconsistent_state_falls_back(path):
    """A state torch's engine reads past its block (set_state checks left_ and next_ apart):
    torch's own random_ runs, so the bytes are still torch's."""
    g = generator(4, 10)
    state = g.get_state()
    state[mt.LEFT : mt.LEFT + 4] = torch.tensor([600], dtype=torch.int32).view(torch.uint8)
    state[mt.NEXT : mt.NEXT + 8] = torch.tensor([400], dtype=torch.int64).view(torch.uint8)
    g1, g2 = torch.Generator(), torch.Generator()
    g1.set_state(state)
    g2.set_state(state)
    t = fp8_dummy.random_(torch.empty(100, dtype=torch.uint8), 0, 256, generator=g1)
    r = torch.empty(100, dtype=torch.uint8).random_(0, 256, generator=g2)
    assert torch.equal(t, r)
    assert torch.equal(g1.get_state(), g2.get_state())


BAD = [
    (lambda: torch.empty(8, dtype=torch.uint8), 5, 5),
    (lambda: torch.empty(8, dtype=torch.uint8), 6, 5),
    (lambda: torch.empty(8, dtype=torch.uint8), -1, 5),
    (lambda: torch.empty(8, dtype=torch.uint8), 0, 257),
    (lambda: torch.empty(8, dtype=torch.int8), -129, 0),
    (lambda: torch.empty(8, dtype=torch.int8), 0, 200),
    (lambda: torch.empty(1, dtype=torch.uint8).expand(8), 0, 256),
    (lambda: torch.empty(1, dtype=torch.int8).expand(8), 9, 3),  # overlap is reported first
    (lambda: torch.empty(0, dtype=torch.uint8), 0, 300),  # empty: still checked
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_errors_are_torchs(case):
    make, low, high = BAD[case]
    with pytest.raises(RuntimeError) as expected:
        make().random_(low, high)
    t = make()
    storage_bytes(t).fill_(0x55)
    g = generator(1)
    before = g.get_state()
    with pytest.raises(RuntimeError) as got:
        fp8_dummy.random_(t, low, high, generator=g)
    # torch's message; bounds out of range add the dtype's allowed range
    ours, theirs = str(got.value).split("\n")[0], str(expected.value).split("\n")[0]
    theirs = "fp8_dummy.random_: " + theirs
    assert ours == theirs or ours.startswith(theirs + " (") and "takes low in [" in ours, ours
    assert (storage_bytes(t) == 0x55).all()
    assert torch.equal(g.get_state(), before)


def test_other_errors():
    for dtype in (torch.int16, torch.float32, torch.bool, torch.float8_e4m3fn):
        with pytest.raises(RuntimeError, match="fp8_dummy.random_: unsupported dtype"):
            fp8_dummy.random_(torch.empty(4, dtype=dtype), 0, 2)
    with pytest.raises(RuntimeError, match="only strided tensors"):
        fp8_dummy.random_(torch.empty(4, dtype=torch.uint8).to_sparse(), 0, 2)
    t = torch.empty(0, dtype=torch.uint8)
    g = generator(2)
    before = g.get_state()
    fp8_dummy.random_(t, 0, 256, generator=g)  # nothing drawn
    assert torch.equal(g.get_state(), before)


def test_opcheck():
    t = torch.empty(33, 17, dtype=torch.uint8)
    torch.library.opcheck(torch.ops.fp8_dummy.random_.default, (t, 0, 256, 7))
    torch.library.opcheck(torch.ops.fp8_dummy.random_.generator, (t, 0, 100), {"generator": None})


@pytest.mark.slow  # torch.compile
def test_compile_fullgraph():
    def f(x):
        fp8_dummy.random_(x, -128, 128, 99)
        return x

    x = torch.empty(300, 7, dtype=torch.int8)
    torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(
        x, torch.empty(300, 7, dtype=torch.int8).random_(-128, 128, generator=generator(99))
    )


def test_fake_kernel_checks():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        t = torch.empty(10, dtype=torch.uint8)
        fp8_dummy.random_(t, 0, 256)
        with pytest.raises(RuntimeError, match="from=5 >= to=5"):
            fp8_dummy.random_(t, 5, 5)
