"""Philox4x32-10: our torch-free header (through the internal philox4x32_10 op) and the numpy
oracle, against Random123's published known answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from ext import test_ops

np = pytest.importorskip("numpy")  # the oracle is numpy

from oracles.cuda_reference import philox  # noqa: E402

import fp8_dummy  # noqa: E402,F401  (registers the ops)

# Random123's published known-answer vectors for Philox4x32-10 (its kat_vectors file),
# copied into the repository so that a fresh clone runs these tests.
KAT = Path(__file__).resolve().parent / "data" / "philox_kat.txt"


def kat_vectors():
    rows = []
    for line in KAT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            words = [int(x, 16) for x in line.split()]
            assert len(words) == 10, line
            rows.append((words[:4], words[4:6], words[6:]))
    assert rows, "no vectors in the known-answer file"
    return rows


def test_header_matches_known_answers():
    for counter, key, expected in kat_vectors():
        assert test_ops.philox4x32_10(counter, key) == expected


def test_oracle_matches_known_answers():
    for counter, key, expected in kat_vectors():
        out = philox(*[np.uint64(c) for c in counter], *key)
        assert [int(x) for x in out] == expected


def test_header_matches_oracle_on_random_inputs():
    rng = np.random.default_rng(3)
    for _ in range(200):
        counter = [int(x) for x in rng.integers(0, 2**32, 4)]
        key = [int(x) for x in rng.integers(0, 2**32, 2)]
        out = philox(*[np.uint64(c) for c in counter], *key)
        assert test_ops.philox4x32_10(counter, key) == [int(x) for x in out]
