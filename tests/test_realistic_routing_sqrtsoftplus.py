"""The routing solver's model of DeepSeek-V4's sqrt(softplus) scores (docs/realistic.md#routing):
P(sqrt(softplus(z)) + b <= x) for z ~ N(0, 1) at every distance u = x - b, far ones (u² past
float64's exp range) included, with no floating-point warning (an error under ``-W error``),
against its value computed here in a form that cannot overflow: Φ(u² + log(1 - e^(-u²)))."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fp8_dummy.realistic.routing.solve import _inclusion, _score_cdf


def _oracle(u: float) -> float:
    if u <= 0:
        return 0.0
    v = u * u
    inverse = v + math.log(-math.expm1(-v))  # softplus⁻¹(u²) = log(e^(u²) - 1)
    return 0.5 * math.erfc(-inverse / math.sqrt(2))


@pytest.mark.parametrize("seed", range(3))
def test_the_score_cdf_at_every_distance_without_overflow(seed):
    rng = np.random.default_rng(seed)
    b = np.sort(rng.uniform(-4, 4, 5))
    x = np.concatenate([rng.uniform(-8, 40, 400), b + 26.7, b + 29.9, b + 31.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _score_cdf(x, b, "sqrtsoftplus")
    want = np.array([[_oracle(xi - bj) for bj in b] for xi in x])
    assert np.abs(got - want).max() < 1e-7  # the solver's normal-CDF table: error below 1e-8
    assert (got[x[:, None] - b[None] > 5] == 1.0).all()


def test_inclusion_with_offsets_far_apart_without_warnings():
    """Offsets 30 apart (distances past 26.6, where expm1(u²) leaves float64): each of the k
    highest is picked by every token, the others by none."""
    b = np.array([-31.0, 30.0, -1.0, 0.0, 31.5, -30.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pi, _ = _inclusion(b, 2, "sqrtsoftplus")
    assert np.abs(pi - np.array([0, 1, 0, 0, 1, 0])).max() < 1e-6, pi
