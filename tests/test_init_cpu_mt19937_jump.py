"""The CPU stream's mt19937 jump-ahead (csrc/cpu/mt19937_jump.h) against plain stepping, and
the parallel split it makes possible (csrc/cpu/mt19937.h) at any size, thread count
and generator position.

Oracles: torch's own engine stepped word by word (random_ on uint8 draws one word per
element) and numpy's legacy MT19937 (tests/oracles/mt19937_state.py), which shares no code
with torch or with us. The jump is reached through fp8_dummy_test.cpu_mt19937_jump, the
split stream through cpu_mt19937_words (an explicit thread count, so the split and the jumps
run at sizes the public ops would fill on one thread).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ext import test_ops
from oracles import mt19937_state as mt

import fp8_dummy  # noqa: F401  (loads the operators)

ROOT = Path(__file__).resolve().parent.parent
DISTANCES = [0, 1, 2, 623, 624, 625, 1247, 1248, 1249, 19937, 100_003, (1 << 20) + 3]
PRE = [0, 1, 7, 623, 624, 1000]  # words drawn before: fresh, mid-block, at a block's end
INFO = torch.ops.fp8_dummy_internal.cpu_fast_path_info()
HAS_AVX2 = "avx2=unavailable" not in INFO
HAS_AVX512 = "avx512=unavailable" not in INFO
JUMP_AVX2 = [False] + ([True] if HAS_AVX2 else [])
NO_AVX512 = "this CPU has no AVX-512 (avx512f): the level cannot run here"
NO_AVX2 = "this CPU has no AVX2/FMA/F16C: the level cannot run here"


def level_param(level: int):
    marks = []
    if level == 2 and not HAS_AVX512:
        marks = [pytest.mark.skip(reason=NO_AVX512)]
    if level == 1 and not HAS_AVX2:
        marks = [pytest.mark.skip(reason=NO_AVX2)]
    return pytest.param(level, marks=marks, id=["portable", "avx2", "avx512"][level])


LEVELS = [level_param(lv) for lv in (0, 1, 2)]


def generator(seed: int, pre: int) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    if pre:
        torch.empty(pre, dtype=torch.uint8).random_(0, 256, generator=g)
    return g


def torch_step(g: torch.Generator, k: int) -> None:
    """k calls of torch's engine, in pieces (one 32-bit word per uint8 element)."""
    buf = torch.empty(min(k, 1 << 24), dtype=torch.uint8)
    while k:
        c = min(k, buf.numel())
        buf[:c].random_(0, 256, generator=g)
        k -= c


def jumped(g: torch.Generator, k: int, avx2: bool) -> torch.Generator:
    out = torch.Generator()
    out.set_state(g.get_state())
    test_ops.cpu_mt19937_jump(out, k, avx2)
    return out


def test_phi_header_is_what_the_script_computes():
    """csrc/cpu/mt19937_phi.h is the output of scripts/mt19937_phi.py, which derives phi by
    Berlekamp-Massey and checks it annihilates the word sequence."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mt19937_phi.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("avx2", JUMP_AVX2, ids=["portable", "avx2"][: len(JUMP_AVX2)])
@pytest.mark.parametrize("pre", PRE)
def test_jump_matches_stepping(pre, avx2):
    """Every field of torch's state (words, left_, next_, seed) as k calls of torch's engine
    leave it, and numpy's engine stepped k words agrees."""
    for k in DISTANCES:
        g = generator(11 + pre, pre)
        stepped = torch.Generator()
        stepped.set_state(g.get_state())
        torch_step(stepped, k)
        j = jumped(g, k, avx2)
        assert torch.equal(j.get_state(), stepped.get_state()), f"k={k}"
        if k == 0:
            continue
        bg = mt.numpy_engine(g.get_state())
        mt.step(bg, k)
        assert mt.same_position(j.get_state(), bg), f"k={k}"
        # ... and torch's engine continues from it as numpy's does (random_ below 2^28 draws
        # one word per element: its low 27 bits here).
        want = bg.random_raw(700).astype(np.int64) & ((1 << 27) - 1)
        got = torch.empty(700, dtype=torch.int64).random_(0, 1 << 27, generator=j).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"k={k}")


@pytest.mark.slow  # a long stream (2^32 + 1249 words)
def test_jump_long_distances_match_numpy_stepping():
    """2^20 + 3 and 2^32 + 1249 words from mid-block, against numpy stepping every word
    (about 20 s: the stepping, linear in the distance, is the cost). Over 2^32 both as the
    distance and as the power of x the jump raises (624 per block after the first:
    2^32 + 368 here): a 32-bit cut of either jumps elsewhere (the 64-bit arithmetic of
    the distance). 2^32 + 1 would leave the power below 2^32."""
    g = generator(2024, 7)
    bg = mt.numpy_engine(g.get_state())
    done = 0
    for k in ((1 << 20) + 3, (1 << 32) + 1249):
        mt.step(bg, k - done)
        done = k
        for avx2 in JUMP_AVX2:
            j = jumped(g, k, avx2)
            assert mt.same_position(j.get_state(), bg), (k, avx2)


def test_jump_composes():
    """A jump of a + b is a jump of a, then of b, for distances around block boundaries and
    powers of two (the left_/next_ bookkeeping of a jumped state feeds the next jump)."""
    g = generator(5, 300)
    for a, b in [(1, 623), (624, 624), (625, 2**20), (2**31 - 1, 2**31 + 1), (2**40, 3)]:
        once = jumped(g, a + b, HAS_AVX2)
        twice = jumped(jumped(g, a, False), b, HAS_AVX2)
        assert torch.equal(once.get_state(), twice.get_state()), (a, b)


def test_jump_rejects_bad_arguments():
    with pytest.raises(RuntimeError, match="distance must be >= 0"):
        test_ops.cpu_mt19937_jump(torch.Generator(), -1, False)
    g = torch.Generator().manual_seed(4)
    torch.rand(10, generator=g)
    state = g.get_state()
    state[mt.LEFT : mt.LEFT + 4] = torch.tensor([600], dtype=torch.int32).view(torch.uint8)
    state[mt.NEXT : mt.NEXT + 8] = torch.tensor([400], dtype=torch.int64).view(torch.uint8)
    g.set_state(state)
    with pytest.raises(RuntimeError, match="misread"):
        test_ops.cpu_mt19937_jump(g, 5, False)


SPLIT_SIZES = [1, 2, 623, 624, 625, 3 * 624 + 5, 7919, 100_003, (1 << 20) + 1]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("pre", PRE)
def test_split_stream_matches_numpy(pre, level):
    """The words and the final state for 1-8 threads (ranges of 0 or 1 word included), odd
    sizes, from every kind of position: numpy's words, torch's state after the same draw."""
    for n in SPLIT_SIZES:
        g0 = generator(77 + n % 5, pre)
        want = mt.words_after(g0.get_state(), n)
        stepped = torch.Generator()
        stepped.set_state(g0.get_state())
        torch_step(stepped, n)
        for threads in range(1, 9):
            g = torch.Generator()
            g.set_state(g0.get_state())
            got = test_ops.cpu_mt19937_words(g, n, threads, level)
            np.testing.assert_array_equal(
                got.numpy().view(np.uint32), want, err_msg=f"n={n} threads={threads}"
            )
            assert torch.equal(g.get_state(), stepped.get_state()), f"n={n} threads={threads}"


@pytest.mark.parametrize("level", LEVELS)
def test_split_stream_random_sizes(level):
    rs = np.random.RandomState(15)
    for _ in range(12):
        n, pre, threads = (
            int(rs.randint(1, 300_000)),
            int(rs.randint(0, 2000)),
            int(rs.randint(1, 9)),
        )
        g = generator(int(rs.randint(0, 2**31)), pre)
        want = mt.words_after(g.get_state(), n)
        got = test_ops.cpu_mt19937_words(g, n, threads, level)
        np.testing.assert_array_equal(got.numpy().view(np.uint32), want, err_msg=f"n={n}")
