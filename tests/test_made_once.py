"""Objects made once and kept, a failure not kept (csrc/common/made_once.h: the module walks'
interned names, fp8_dummy._C._walk_shape and _state_dict_shape), through the test extension
with a maker that fails at chosen calls: a call after a failure makes what is missing and says
so, never reads an empty slot as made; a slot made once is never made again. Against the rule
in plain Python."""

from __future__ import annotations

import random

import pytest
from ext import test_ops

SLOTS = 4


def rule(failing: list[int]) -> list[int]:
    """The slots in order, each maker call for the first empty one; a failed call leaves it
    empty and ends that round, the next round goes on from it."""
    slots: list[int] = []
    out: list[int] = []
    calls = 0
    for _ in range(len(failing) + 1):
        made = True
        while len(slots) < SLOTS:
            n, calls = calls, calls + 1
            if n in failing:
                made = False
                break
            slots.append(n)
        out += [int(made), calls]
        if made:
            break
    return out + slots + [-1] * (SLOTS - len(slots))


def test_nothing_fails_one_call_makes_every_slot():
    assert test_ops.made_once([]) == [1, SLOTS, 0, 1, 2, 3]


def test_a_failure_is_made_again_at_the_next_call():
    # The third slot's making fails: that call says so, the next makes it and the fourth, and
    # the slots made before are kept, not made again.
    assert test_ops.made_once([2]) == [0, 3, 1, 5, 0, 1, 3, 4]


@pytest.mark.parametrize("seed", range(20))
def test_random_failures_follow_the_rule(seed):
    rng = random.Random(seed)
    failing = sorted(rng.sample(range(SLOTS + 6), rng.randint(0, 6)))
    out = test_ops.made_once(failing)
    assert out == rule(failing)
    made = out[-SLOTS:]
    assert len(set(made)) == SLOTS and not set(made) & set(failing)
