"""The router model and the solve of its offsets. The realistic fill makes every router's
logits ``z = W h`` close to independent N(0, 1) per expert and token (unit-RMS ``h`` after the
norm, ``W`` of variance 1/fan_in), so a per-expert offset ``b`` added before the selection makes
the router pick expert ``e`` with a probability that is a smooth, computable function of ``b``:
here by quadrature (:func:`inclusion_probabilities`), or by the router's own selection on
hashed noise (:func:`simulate`, grouped top-k). :func:`solve_offsets` finds the ``b`` whose
probabilities are a target's, rounded to a grid: the same bytes on every machine."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["Router", "describe", "inclusion_probabilities", "leave_one_out", "select"]
__all__ += ["simulate", "solve_offsets", "solve_zero"]

_GRID = 2.0**-12  # offsets are rounded to this grid: the same bytes on every machine


@dataclass
class Router:
    """One MoE layer's router, as the fill sees it."""

    layer: int  # the decoder layer's index (its ``layers.<i>``)
    weight: str  # the router weight's full name, [experts, hidden]
    experts: int
    hidden: int
    top_k: int
    # softmax (selection on logits) | sigmoid (on sigmoid scores) | sqrtsoftplus (on
    # sqrt(softplus) scores: DeepSeek-V4's)
    score: str = "softmax"
    groups: int = 1
    topk_group: int = 1
    group_score: str = "top2"  # top2 (sum of a group's two best) | max
    realize: str = "residual"  # bias | correction | residual | hash
    bias: str = ""  # the tensor the offsets go to (bias, correction); hash: the router's table
    # its place among its layer's routers (JetMoE's attention and MLP each route): 0 for the
    # first, which keys the layer's draws alone
    index: int = 0
    # zero (identity) experts: the last ``zero`` rows (LongCat-Flash's), selected on softmax
    # probabilities with ``lift`` added to theirs (written into ``lifted``, its correction
    # bias), their logits ``shift`` below the routed ones' (:func:`solve_zero`)
    zero: int = 0
    shift: float = 0.0
    lift: float = 0.0
    lifted: str = ""
    target: np.ndarray | None = field(default=None, repr=False)
    offsets: np.ndarray | None = field(default=None, repr=False)


def describe(r: Router) -> str:
    """The router kind in a few words: its scoring, grouping, and where the offsets go."""
    if r.realize == "hash":  # the table picks: no scoring selects
        return "token hash -> table"
    group = f" {r.topk_group}/{r.groups} groups" if r.groups > 1 else ""
    return f"{r.score}{group} -> {r.realize}"


def leave_one_out(q: np.ndarray, k: int) -> np.ndarray:
    """For each point x (rows) and expert e (columns): P(fewer than k of the other experts
    are ahead), the others ahead independently with probabilities q[x, j]. Prefix and
    suffix count distributions (truncated at k) convolved, O(points * E * k). numpy: these
    are many small steps, where torch's per-operation cost and threads dominate."""
    points, n = q.shape
    pre = np.zeros((n + 1, points, k))
    suf = np.zeros((n + 1, points, k))
    pre[0, :, 0] = 1
    suf[n, :, 0] = 1
    for j in range(n):
        qj = q[:, j : j + 1]
        np.multiply(pre[j], 1 - qj, out=pre[j + 1])
        pre[j + 1, :, 1:] += pre[j, :, :-1] * qj
    for j in range(n - 1, -1, -1):
        qj = q[:, j : j + 1]
        np.multiply(suf[j + 1], 1 - qj, out=suf[j])
        suf[j, :, 1:] += suf[j + 1, :, :-1] * qj
    below = np.cumsum(suf[1:], axis=-1)  # P(at most c ahead among the experts after e)
    # sum over a + b <= k - 1 of pre_e(a) * suf_{e+1}(b)
    return np.einsum("epa,epa->pe", pre[:n], below[..., ::-1])


@functools.lru_cache(maxsize=1)
def _ndtr_table() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-12.0, 12.0, 1 << 16)
    return x, torch.special.ndtr(torch.from_numpy(x)).numpy()


def _ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF, interpolated in a 65,536-point table (error below 1e-8):
    the solve calls it on small arrays many times, where a torch call costs milliseconds."""
    return np.interp(x, *_ndtr_table())


def _score_cdf(x: np.ndarray, b: np.ndarray, score: str) -> np.ndarray:
    """P(score_e <= x) for score_e = g(z) + b_e, z ~ N(0, 1), g the identity, sigmoid or
    sqrt(softplus) (its inverse at u > 0: log(expm1(u²)))."""
    u = x[:, None] - b[None]
    if score == "softmax":
        return _ndtr(u)
    if score == "sqrtsoftplus":
        # u² within float64's exp (below 709): past 26 the inverse (u² itself) is far beyond
        # the normal CDF's reach, so the clip changes no value, and expm1 never overflows
        inside = np.clip(u, 1e-150, 26.0)
        return np.where(u <= 0, 0.0, _ndtr(np.log(np.expm1(inside * inside))))
    inside = np.clip(u, 1e-300, 1 - 1e-16)
    cdf = _ndtr(np.log(inside) - np.log1p(-inside))
    return np.where(u <= 0, 0.0, np.where(u >= 1, 1.0, cdf))


def inclusion_probabilities(offsets: np.ndarray, k: int, score: str = "softmax") -> np.ndarray:
    """P(expert e among the top k of g(z_e) + offsets_e), z i.i.d. N(0, 1): exact up to the
    quadrature (an x grid over the scores; the others' counts by :func:`leave_one_out`)."""
    return _inclusion(offsets, k, score)[0]


def _inclusion(offsets: np.ndarray, k: int, score: str) -> tuple[np.ndarray, np.ndarray]:
    """The inclusion probabilities and each one's derivative in its own offset: moving b_e
    moves e's score distribution along x, against the others' count, so dπ_e/db_e is the sum
    over x of e's mass times the slope in x of P(fewer than k others above x)."""
    b = np.asarray(offsets, dtype=np.float64)
    # the scores' reach: z within ±9; sigmoid's (0, 1); sqrt(softplus)'s (0, 3.1) there
    top = {"softmax": 9.0, "sigmoid": 1.0}.get(score, 3.1)
    lo, hi = (b.min() - 9, b.max() + 9) if score == "softmax" else (b.min(), b.max() + top)
    edges = np.linspace(lo, hi, 401)
    mid = (edges[1:] + edges[:-1]) / 2
    cdf = _score_cdf(edges, b, score)
    mass = cdf[1:] - cdf[:-1]
    loo = leave_one_out(1 - _score_cdf(mid, b, score), k)
    return (mass * loo).sum(0), (mass * np.gradient(loo, mid, axis=0)).sum(0)


@functools.lru_cache(maxsize=2)
def _noise(experts: int, tokens: int, key: int) -> torch.Tensor:
    """N(0, 1) samples from integer hashing (Box-Muller): the same on every machine."""
    n = experts * tokens
    idx = np.arange(n, dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        u = [_mix(idx + np.uint64(i) + np.uint64(key)) for i in (0, 1)]
    u1 = (u[0] >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54
    u2 = (u[1] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    z = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
    return torch.from_numpy(z.reshape(tokens, experts))


def _mix(x: np.ndarray) -> np.ndarray:
    x = x * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def select(z: torch.Tensor, offsets: torch.Tensor, r: Router) -> torch.Tensor:
    """The experts the router picks for logits ``z`` [tokens, E]: its own algorithm."""
    if r.zero:  # softmax probabilities, the zero experts' lifted (the correction bias)
        p = torch.softmax(z + offsets, -1)
        routed = r.experts - r.zero
        return torch.cat([p[:, :routed], p[:, routed:] + r.lift], -1).topk(r.top_k, -1)[1]
    g = {"sigmoid": torch.sigmoid, "sqrtsoftplus": lambda x: F.softplus(x).sqrt()}
    score = g.get(r.score, lambda x: x)(z) + offsets
    if r.groups > 1:
        grouped = score.view(score.shape[0], r.groups, -1)
        g = grouped.max(-1).values if r.group_score == "max" else grouped.topk(2, -1)[0].sum(-1)
        keep = torch.zeros_like(g, dtype=torch.bool)
        keep.scatter_(1, g.topk(r.topk_group, -1)[1], True)
        score = score.masked_fill(~keep.repeat_interleave(r.experts // r.groups, 1), -math.inf)
    return score.topk(r.top_k, -1)[1]


def simulate(r: Router, offsets: np.ndarray, tokens: int = 16384, key: int = 1) -> np.ndarray:
    """The inclusion probabilities :func:`select` gives on ``tokens`` N(0, 1) logit draws."""
    z = _noise(r.experts, tokens, key)
    picked = select(z, torch.as_tensor(offsets, dtype=torch.float64), r)
    return np.bincount(picked.flatten().numpy(), minlength=r.experts) / tokens


def _descend(b: np.ndarray, step, iterations: int, tol: float, grow: float, least: float):
    """The one loop of both solves: ``step(b)`` -> (error in log space, slope of each
    expert's log share in its own offset); steps err / slope (clipped to 1), the rate
    halved while a step makes the worst error worse and grown by ``grow`` after one that
    does not; ends at a worst error below ``tol`` or a rate below ``least``."""
    (err, slope), rate = step(b), 1.0
    for _ in range(iterations):
        worst = np.abs(err).max()
        if worst < tol:
            break
        trial = b + rate * np.clip(err / slope, -1, 1)
        trial -= trial.mean()
        trial_err, trial_slope = step(trial)
        if np.abs(trial_err).max() < worst:
            b, err, slope, rate = trial, trial_err, trial_slope, min(1.0, rate * grow)
        else:
            rate /= 2
            if rate < least:
                break
    return b


def _newton(b: np.ndarray, want: np.ndarray, live: np.ndarray, k: int, score: str) -> np.ndarray:
    """b with log π(b) = want where ``live``, π by quadrature: Newton steps on each expert's
    own derivative (exact, from the quadrature). It converges to 1e-9, far below the 2^-12
    grid the offsets are rounded to, so that the last bits another machine's arithmetic
    changes cannot change a rounded offset."""
    floor = np.exp(want.min()) * 1e-3

    def step(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pi, d = _inclusion(x, k, score)
        pi = np.maximum(pi, floor)
        err = np.where(live, want - np.log(pi), 0.0)
        return err, np.clip(d / pi, 0.05, 50.0)

    return _descend(b, step, iterations=200, tol=1e-9, grow=2.0, least=1e-6)


def _fixed_point(b, want, live, probabilities, slope, iterations=60, tol=1e-4) -> np.ndarray:
    """b such that log probabilities(b) = want where ``live``, at one fixed ``slope`` (a
    simulation has no derivative to offer)."""
    floor = np.exp(want.min()) * 1e-3

    def step(x: np.ndarray) -> tuple[np.ndarray, float]:
        err = np.where(live, want - np.log(np.maximum(probabilities(x), floor)), 0.0)
        return err, slope

    return _descend(b, step, iterations, tol, grow=1.5, least=1e-3)


def solve_offsets(r: Router, target: np.ndarray) -> np.ndarray:
    """Offsets b with which the router's selection has ``target``'s inclusion probabilities
    (sum k): a fixed point in log space, exact quadrature without groups; with grouped top-k
    refined on fixed noise draws (the groups' loads then follow from the target where the
    grouping can reach them, else the nearest the iteration gets to)."""
    k = r.top_k
    floor = 1e-4 * k / r.experts
    want = np.log(np.maximum(target, floor))
    if np.allclose(target, target[0]) and r.groups == 1:
        return np.zeros(r.experts)
    b = want - want.mean()
    # the score's slope at z = 0: sigmoid's 1/4, sqrt(softplus)'s 0.30
    b = b * {"softmax": 1.0, "sigmoid": 0.2, "sqrtsoftplus": 0.3}[r.score]
    slope = {"softmax": 1.0, "sigmoid": 5.0, "sqrtsoftplus": 3.3}[r.score]
    b = _newton(b, want, target > floor, k, r.score)
    if r.groups > 1:
        z = _noise(r.experts, 8192, 12345)

        def grouped(x: np.ndarray) -> np.ndarray:
            picked = select(z, torch.as_tensor(x, dtype=torch.float64), r)
            return np.bincount(picked.flatten().numpy(), minlength=r.experts) / 8192

        b = _fixed_point(b, want, target > floor, grouped, slope, iterations=30, tol=2e-2)
    return np.round(b / _GRID) * _GRID


def _lift(z: torch.Tensor, b: np.ndarray, r: Router, picks: float) -> float:
    """The zero experts' lift: the value below which ``picks`` of each token's top-k routed
    probabilities lie on average (their pooled quantile at picks / k). The zero experts'
    own probabilities are far below every routed top-k one (their logits ``shift`` lower),
    so each routed one below the lift gives its slot to a zero expert: ``picks`` zero
    experts per token."""
    routed = r.experts - r.zero
    p = torch.softmax(z + torch.as_tensor(b), -1)[:, :routed]
    top = p.topk(min(r.top_k, routed), -1)[0]
    pooled = np.sort(top.flatten().numpy())
    missing = r.top_k - top.shape[1]  # fewer routed experts than k: zero experts fill those
    n = int(round(picks * z.shape[0])) - missing * z.shape[0]
    if n <= 0:
        return 0.0
    if n >= pooled.size:
        return float(np.ceil(pooled[-1] / _LIFT_GRID) * _LIFT_GRID) + 1.0
    return float(np.round((pooled[n - 1] + pooled[n]) / 2 / _LIFT_GRID) * _LIFT_GRID)


_LIFT_GRID = 2.0**-30  # the lift's grid: the same bytes on every machine


def solve_zero(r: Router, target: np.ndarray, start: np.ndarray | None = None) -> tuple:
    """(logit offsets, lift) with which a router with zero experts (the last ``r.zero``) has
    ``target``'s inclusion probabilities: the zero experts' logits ``r.shift`` below the
    routed ones', so that their softmax probabilities, which weigh their identity output,
    are small; the lift (:func:`_lift`) puts them in the top-k as often as the target
    says, and which of them by their own offsets. Refined on fixed noise draws from
    ``start`` (logit offsets that ignore the classes), the lift recomputed at every step.
    ``r`` is left as it is: the caller stores the lift (``r.lift``, which :func:`select` and
    the correction bias read)."""
    routed = r.experts - r.zero
    z = _noise(r.experts, 8192, 12345)
    picks = float(target[routed:].sum())
    down = np.where(np.arange(r.experts) >= routed, -r.shift, 0.0)

    def probabilities(x: np.ndarray) -> np.ndarray:
        lifted = replace(r, lift=_lift(z, x + down, r, picks))
        picked = select(z, torch.as_tensor(x + down, dtype=torch.float64), lifted)
        return np.bincount(picked.flatten().numpy(), minlength=r.experts) / z.shape[0]

    b = np.zeros(r.experts) if start is None else np.asarray(start, dtype=np.float64)
    k = r.top_k
    floor = 1e-4 * k / r.experts
    if not np.allclose(target[:routed], target[0]) or not np.allclose(target[routed:], target[-1]):
        want = np.log(np.maximum(target, floor))
        b = _fixed_point(b, want, target > floor, probabilities, 1.0, iterations=40, tol=2e-2)
    b = np.round(b / _GRID) * _GRID + down
    return b, _lift(z, b, r, picks)
