"""numpy's MT19937 (its legacy engine, written independently of torch's) stepped from a torch
CPU generator's state: the plain-stepping oracle of the jump-ahead and the parallel stream.

torch's CPU get_state() (5056 bytes) starts with the engine: the seed (uint64 at 0), left_
(int32 at 8), seeded_ (int32 at 12), next_ (uint64 at 16) and the 624 state words (uint64
each, from 24). left_ - 1 words of the block remain, from next_ on; numpy's `pos` counts the
words already used, so pos = 625 - left_ (624 for a freshly seeded engine: twist first).
"""

from __future__ import annotations

import numpy as np
import torch

LEFT, NEXT, WORDS = 8, 16, 24
N = 624


def fields(state: torch.Tensor) -> tuple[int, int, np.ndarray]:
    """(left_, next_, the 624 words) of a torch CPU generator state."""
    raw = state.numpy().tobytes()
    left = int(np.frombuffer(raw, np.int32, 1, LEFT)[0])
    nxt = int(np.frombuffer(raw, np.uint64, 1, NEXT)[0])
    words = np.frombuffer(raw, np.uint64, N, WORDS).astype(np.uint32)
    return left, nxt, words


def numpy_engine(state: torch.Tensor) -> np.random.MT19937:
    """numpy's MT19937 where torch's generator stands (a consistent state: next_ is the
    number of words used, or the engine is freshly seeded)."""
    left, nxt, words = fields(state)
    assert nxt == N + 1 - left or (left == 1 and nxt == 0), (left, nxt)
    bg = np.random.MT19937()
    bg.state = {"bit_generator": "MT19937", "state": {"key": words, "pos": N + 1 - left}}
    return bg


def step(bg: np.random.MT19937, k: int, chunk: int = 1 << 30) -> None:
    """Advance numpy's engine by k words, one at a time (numpy's own loop, no output)."""
    while k:
        c = min(k, chunk)
        bg.random_raw(c, output=False)
        k -= c


def same_position(state: torch.Tensor, bg: np.random.MT19937) -> bool:
    """Whether torch's state is where numpy's engine is: the same words, the same number of
    them used, and torch's next_ consistent with it (as k calls of torch's engine leave it)."""
    left, nxt, words = fields(state)
    key, pos = bg.state["state"]["key"], int(bg.state["state"]["pos"])
    if pos == 0:  # numpy twists lazily at 624 and keeps pos 624; torch too (left_ = 1)
        return False
    return bool(np.array_equal(words, key)) and N + 1 - left == pos and nxt == pos


def words_after(state: torch.Tensor, n: int) -> np.ndarray:
    """The next n outputs (uint32) of the stream torch's generator is at."""
    return numpy_engine(state).random_raw(n).astype(np.uint32)
