"""MoE routing a benchmark chooses, made by the weights alone (docs/realistic.md#routing).

A profile (``"balanced"``, ``"zipf:A"``, or a recorded load in a JSON file) gives each MoE
layer a target: the share of the token-expert assignments each expert should get. The fill
realizes it through the router's own arithmetic. The realistic fill makes every router's
logits ``z = W h`` close to independent N(0, 1) per expert and token (unit-RMS ``h`` after the
norm, ``W`` of variance 1/fan_in), so adding a per-expert offset ``b`` before the selection
makes the router pick expert ``e`` with a probability that is a smooth, computable function of
``b``. The offsets are solved for so that those probabilities are the target's, and written:

- into the router's bias where it is added before the selection (GPT-OSS);
- into ``e_score_correction_bias`` where the selection adds one to the sigmoid scores
  (DeepSeek-V3/R1, GLM-4.5), grouped top-k included;
- for routers without a bias (Mixtral, Qwen2/3-MoE, OLMoE), through the residual stream: the
  last hidden dimension ``j`` carries a constant (the embeddings' column ``j`` is 1, no
  residual branch writes row ``j``, no other projection reads column ``j``), so after the
  norm ``h_j`` is the same for every token and the router's column ``j``, set to ``b``, adds
  ``b`` to the logits.

Everything here is a pure function of (seed, layer index, profile, router shape, config), so
every layout and every engine that names its layers ``layers.<i>`` gets the same routing.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Profile", "Router", "RoutingError", "chosen_routing", "find_routers", "parse_routing"]
__all__ += ["describe", "plan_routing"]
__all__ += ["apply_overrides", "inclusion_probabilities", "layer_targets", "solve_offsets"]
__all__ += ["simulate", "zipf_target"]

ENV = "FP8_DUMMY_ROUTING"
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_TOPK = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k", "moe_k")
CARRIER = 1.0  # the constant the residual stream's last dimension carries
_GRID = 2.0**-12  # offsets are rounded to this grid: the same bytes on every machine


class RoutingError(ValueError):
    """A routing profile or target no router can reach; raised before anything is written."""


@dataclass(frozen=True)
class Profile:
    """A parsed ``routing`` argument."""

    kind: str  # balanced | zipf | file
    alpha: float = 0.0
    loads: tuple[tuple[float, ...], ...] = ()
    source: str = "balanced"


def chosen_routing(given: Any = None) -> Any:
    """An engine's choice: its own configuration's value, else ``$FP8_DUMMY_ROUTING``, else
    ``"balanced"``."""
    if given is not None:
        return given
    return os.environ.get(ENV, "").strip() or "balanced"


def parse_routing(routing: Any) -> Profile:
    """``"balanced"``, ``"zipf:A"`` (A >= 0) or a path to ``{"expert_load": [[...], ...]}``."""
    if isinstance(routing, Profile):
        return routing
    if routing is None or routing == "balanced":
        return Profile("balanced")
    if not isinstance(routing, (str, os.PathLike)):
        raise TypeError(f"fp8_dummy: routing must be a str or a path, not {type(routing).__name__}")
    text = os.fspath(routing)
    if text.startswith("zipf:"):
        try:
            alpha = float(text[5:])
        except ValueError:
            alpha = math.nan
        if not (math.isfinite(alpha) and alpha >= 0):
            raise RoutingError(f"fp8_dummy: routing {text!r}: zipf:A needs a finite A >= 0")
        return Profile("zipf", alpha=alpha, source=text)
    if not os.path.isfile(text):
        raise RoutingError(
            f"fp8_dummy: routing {text!r} is not 'balanced', 'zipf:A' or a readable JSON file"
        )
    try:
        with open(text, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RoutingError(f"fp8_dummy: routing file {text}: not readable JSON ({e})") from None
    loads = data.get("expert_load") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not all(isinstance(r, list) for r in loads) or not loads:
        raise RoutingError(
            f"fp8_dummy: routing file {text}: needs {{'expert_load': [[numbers per expert] "
            "for each MoE layer]}"
        )
    rows = []
    for i, row in enumerate(loads):
        values = []
        for e, v in enumerate(row):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not ok or not math.isfinite(v) or v < 0:
                raise RoutingError(
                    f"fp8_dummy: routing file {text}: MoE layer {i}, expert {e}: {v!r} is not a "
                    "finite non-negative number"
                )
            values.append(float(v))
        if not sum(values) > 0:
            raise RoutingError(f"fp8_dummy: routing file {text}: MoE layer {i} has no load")
        rows.append(tuple(values))
    return Profile("file", loads=tuple(rows), source=text)


@dataclass
class Router:
    """One MoE layer's router, as the fill sees it."""

    layer: int  # the decoder layer's index (its ``layers.<i>``)
    weight: str  # the router weight's full name, [experts, hidden]
    experts: int
    hidden: int
    top_k: int
    score: str = "softmax"  # softmax (selection on logits) | sigmoid (on sigmoid scores)
    groups: int = 1
    topk_group: int = 1
    group_score: str = "top2"  # top2 (sum of a group's two best) | max
    realize: str = "residual"  # bias | correction | residual
    bias: str = ""  # the tensor the offsets go to (bias, correction)
    target: np.ndarray | None = field(default=None, repr=False)
    offsets: np.ndarray | None = field(default=None, repr=False)


def describe(r: Router) -> str:
    """The router kind in a few words: its scoring, grouping, and where the offsets go."""
    group = f" {r.topk_group}/{r.groups} groups" if r.groups > 1 else ""
    return f"{r.score}{group} -> {r.realize}"


def _config_value(config: Any, names: Sequence[str]) -> Any:
    for c in (config, getattr(config, "text_config", None)):
        for n in names:
            v = getattr(c, n, None) if c is not None else None
            if v is not None:
                return v
    return None


def find_routers(
    roles: Mapping[str, str], shapes: Mapping[str, Sequence[int]], config: Any
) -> list[Router]:
    """The routers among the tensors (full name -> role, logical shape), in layer order."""
    k = _config_value(config, _TOPK)
    score = _config_value(config, ("scoring_func",))
    groups = int(_config_value(config, ("n_group",)) or 1)
    topk_group = int(_config_value(config, ("topk_group",)) or groups)
    method = _config_value(config, ("topk_method",))
    routers = []
    for name, role in roles.items():
        shape = shapes[name]
        if role != "router" or len(shape) != 2 or not name.endswith(".weight"):
            continue
        found = _LAYER.search(name)
        if found is None:
            continue
        owner = name[: -len(".weight")]
        if not isinstance(k, int) or not 1 <= k <= shape[0]:
            raise RoutingError(
                f"fp8_dummy: {name}: the config gives no number of experts per token "
                f"({'/'.join(_TOPK)}) in [1, {shape[0]}]"
            )
        r = Router(int(found.group(1)), name, int(shape[0]), int(shape[1]), k)
        if f"{owner}.e_score_correction_bias" in roles:
            r.realize, r.bias = "correction", f"{owner}.e_score_correction_bias"
            r.score = "sigmoid" if score in (None, "sigmoid") else "softmax"
        elif f"{owner}.bias" in roles:
            r.realize, r.bias = "bias", f"{owner}.bias"
        if groups > 1 and topk_group < groups and r.experts % groups == 0:
            r.groups, r.topk_group = groups, topk_group
            r.group_score = "max" if method == "group_limited_greedy" else "top2"
        routers.append(r)
    return sorted(routers, key=lambda r: (r.layer, r.weight))


# -- targets -------------------------------------------------------------------------------


def _splitmix(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def permutation(key: int, n: int) -> list[int]:
    """A permutation of range(n) from a 64-bit key (Fisher-Yates on SplitMix64: the same on
    every machine and numpy version). Element r is the expert of popularity rank r."""
    order, state = list(range(n)), key & 0xFFFFFFFFFFFFFFFF
    for i in range(n - 1, 0, -1):
        state, x = _splitmix(state)
        j = x % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def _leave_one_out(q: np.ndarray, k: int) -> np.ndarray:
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


def zipf_target(experts: int, k: int, alpha: float) -> np.ndarray:
    """Inclusion probabilities (sum k) of k draws without replacement from popularity
    proportional to rank^-alpha, by popularity rank: exponential clocks of rates p, the
    first k to ring, integrated over time."""
    p = np.arange(1, experts + 1, dtype=np.float64) ** -alpha
    p /= p.sum()
    if k == 1:
        return p
    if k == experts:
        return np.ones(experts)
    t = np.geomspace(1e-4 / p.max(), 60 / p.min(), 3000)
    t = np.concatenate([[0.0], t])
    cdf = -np.expm1(-t[:, None] * p[None])  # P(clock rang by t)
    mass = cdf[1:] - cdf[:-1]
    mid = -np.expm1(-((t[1:] + t[:-1]) / 2)[:, None] * p[None])
    pi = (mass * _leave_one_out(mid, k)).sum(0)
    return pi * (k / pi.sum())


def layer_targets(
    profile: Profile, routers: Sequence[Router], seed: int, progress: Any = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each router's (target inclusion probabilities (sum k), offsets), expert by expert;
    ``progress(done)`` after each layer."""
    from .stateless import tensor_seed

    out = []
    if profile.kind == "file":
        for i, (r, pi) in enumerate(zip(routers, _file_targets(profile, routers))):
            out.append((pi, solve_offsets(r, pi)))
            if progress is not None:
                progress(i + 1)
        return out
    for r in routers:
        if progress is not None:
            progress(len(out))
        if profile.kind == "balanced":
            out.append((np.full(r.experts, r.top_k / r.experts), np.zeros(r.experts)))
            continue
        # Popularity ranks to experts: with grouped top-k, which ranks share a group is drawn
        # once per seed (so one solve serves every layer); each layer then permutes the groups
        # and the experts within each group. Without groups: one permutation per layer.
        size = r.experts // r.groups
        base = permutation(tensor_seed(seed, "routing.groups"), r.experts) if r.groups > 1 else None
        pi_c, b_c = _canonical(r.experts, r.top_k, profile.alpha, _kind(r), tuple(base or ()))
        key = tensor_seed(seed, f"routing.layers.{r.layer}")
        groups = permutation(key, r.groups)
        where = np.empty(r.experts, dtype=np.int64)
        for g in range(r.groups):
            inner = permutation(key + 1 + g, size)
            where[g * size : (g + 1) * size] = [groups[g] * size + m for m in inner]
        pi, b = np.empty(r.experts), np.empty(r.experts)
        pi[where], b[where] = pi_c, b_c
        out.append((pi, b))
    return out


def _kind(r: Router) -> tuple:
    return (r.score, r.groups, r.topk_group, r.group_score)


@functools.lru_cache(maxsize=64)
def _canonical(experts: int, k: int, alpha: float, kind: tuple, base: tuple) -> tuple:
    """Zipf's target and offsets in the canonical layout (rank r at slot base[r], or r)."""
    by_rank = zipf_target(experts, k, alpha)
    pi = np.empty(experts)
    pi[list(base) if base else slice(None)] = by_rank
    r = Router(0, "", experts, 0, k, *kind)
    return pi, solve_offsets(r, pi)


def _file_targets(profile: Profile, routers: Sequence[Router]) -> list[np.ndarray]:
    if len(profile.loads) != len(routers):
        raise RoutingError(
            f"fp8_dummy: routing file {profile.source}: {len(profile.loads)} MoE layers, "
            f"the model has {len(routers)} ({', '.join(str(r.layer) for r in routers)})"
        )
    out = []
    for i, (r, row) in enumerate(zip(routers, profile.loads)):
        if len(row) != r.experts:
            raise RoutingError(
                f"fp8_dummy: routing file {profile.source}: MoE layer {i} (layer {r.layer}) "
                f"has {len(row)} experts, {r.weight} has {r.experts}"
            )
        share = np.asarray(row) / sum(row)
        worst = int(share.argmax())
        if share[worst] * r.top_k > 1 + 1e-9:
            raise RoutingError(
                f"fp8_dummy: routing file {profile.source}: MoE layer {i} (layer {r.layer}), "
                f"expert {worst}: share {share[worst]:.4g} above 1/k = {1 / r.top_k:.4g}: "
                f"no router picking {r.top_k} distinct experts per token reaches it"
            )
        out.append(np.minimum(share * r.top_k, 1.0))
    return out


# -- the router model and the solve ---------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _ndtr_table() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-12.0, 12.0, 1 << 16)
    return x, torch.special.ndtr(torch.from_numpy(x)).numpy()


def _ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF, interpolated in a 65,536-point table (error below 1e-8):
    the solve calls it on small arrays many times, where a torch call costs milliseconds."""
    return np.interp(x, *_ndtr_table())


def _score_cdf(x: np.ndarray, b: np.ndarray, score: str) -> np.ndarray:
    """P(score_e <= x) for score_e = g(z) + b_e, z ~ N(0, 1), g the identity or sigmoid."""
    u = x[:, None] - b[None]
    if score == "softmax":
        return _ndtr(u)
    inside = np.clip(u, 1e-300, 1 - 1e-16)
    cdf = _ndtr(np.log(inside) - np.log1p(-inside))
    return np.where(u <= 0, 0.0, np.where(u >= 1, 1.0, cdf))


def inclusion_probabilities(offsets: np.ndarray, k: int, score: str = "softmax") -> np.ndarray:
    """P(expert e among the top k of g(z_e) + offsets_e), z i.i.d. N(0, 1): exact up to the
    quadrature (an x grid over the scores; the others' counts by :func:`_leave_one_out`)."""
    return _inclusion(offsets, k, score)[0]


def _inclusion(offsets: np.ndarray, k: int, score: str) -> tuple[np.ndarray, np.ndarray]:
    """The inclusion probabilities and each one's derivative in its own offset: moving b_e
    moves e's score distribution along x, against the others' count, so dπ_e/db_e is the sum
    over x of e's mass times the slope in x of P(fewer than k others above x)."""
    b = np.asarray(offsets, dtype=np.float64)
    lo, hi = (b.min() - 9, b.max() + 9) if score == "softmax" else (b.min(), b.max() + 1)
    edges = np.linspace(lo, hi, 401)
    mid = (edges[1:] + edges[:-1]) / 2
    cdf = _score_cdf(edges, b, score)
    mass = cdf[1:] - cdf[:-1]
    loo = _leave_one_out(1 - _score_cdf(mid, b, score), k)
    return (mass * loo).sum(0), (mass * np.gradient(loo, mid, axis=0)).sum(0)


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
    score = (z.sigmoid() if r.score == "sigmoid" else z) + offsets
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
    if r.score == "sigmoid":
        b = b * 0.2
    slope = 1.0 if r.score == "softmax" else 5.0
    b = _newton(b, want, target > floor, k, r.score)
    if r.groups > 1:
        z = _noise(r.experts, 8192, 12345)

        def grouped(x: np.ndarray) -> np.ndarray:
            picked = select(z, torch.as_tensor(x, dtype=torch.float64), r)
            return np.bincount(picked.flatten().numpy(), minlength=r.experts) / 8192

        b = _fixed_point(b, want, target > floor, grouped, slope, iterations=30, tol=2e-2)
    return np.round(b / _GRID) * _GRID


# -- the fill's side: which element of which tensor gets what --------------------------------

# An override: (dimension, index along it, value): a float, or a vector along the other
# dimension of a 2-D tensor (a 1-D tensor: along its only dimension, index None).
Override = tuple[int, Any, Any]


def plan_routing(
    profile: Profile,
    seed: int,
    config: Any,
    specs: Mapping[str, Any],
    shapes: Mapping[str, Sequence[int]],
    progress: Any = None,
    dtypes: Mapping[str, torch.dtype] | None = None,
) -> tuple[list[Router], dict[str, list[Override]]]:
    """The routers, each with its offsets, and the overrides of the fill that realize them
    (full name -> overrides of the logical tensor), all checked before anything is written;
    ``progress(layers solved)``, if given, as the offsets are solved; ``dtypes``: each
    tensor's, to refuse a router whose offsets would have to go into 1-byte codes."""
    if profile.kind == "balanced":
        return [], {}
    roles = {n: s.role for n, s in specs.items()}
    routers = find_routers(roles, shapes, config)
    if not routers:
        raise RoutingError(
            f"fp8_dummy: routing {profile.source!r}: the model has no router the realistic fill "
            "recognises (a 2-D weight of a module named gate or router in layers.<i>)"
        )
    for r in routers:
        dtype = (dtypes or {}).get(r.weight)
        if r.realize == "residual" and dtype is not None and dtype.itemsize == 1:
            raise RoutingError(
                f"fp8_dummy: {r.weight}: a {dtype} router (quantized) cannot carry the routing's "
                "offsets in its codes: keep the router unquantized, as checkpoints do (for vLLM's "
                "fp8 quantization: the router in its ignored layers)"
            )
    for r, (pi, b) in zip(routers, layer_targets(profile, routers, seed, progress)):
        r.target, r.offsets = pi, b
    overrides: dict[str, list[Override]] = {}
    residual = [r for r in routers if r.realize == "residual"]
    for r in routers:
        if r.realize != "residual":
            overrides.setdefault(r.bias, []).append((0, None, r.offsets))
    if residual:
        hidden = residual[0].hidden
        j = hidden - 1
        for name, spec in specs.items():
            shape = list(shapes[name])
            if spec.kind != "uniform" or len(shape) < 2:
                continue  # constants, codes of packed formats: left as the role says
            if spec.role == "embedding" and shape[-1] == hidden:
                overrides.setdefault(name, []).append((len(shape) - 1, j, CARRIER))
            elif spec.role == "residual_out" and shape[-2] == hidden:
                overrides.setdefault(name, []).append((len(shape) - 2, j, 0.0))
            elif spec.role in ("linear", "router", "unknown") and shape[-1] == hidden:
                overrides.setdefault(name, []).append((len(shape) - 1, j, 0.0))
        for r in residual:
            if r.hidden != hidden:
                raise RoutingError(f"fp8_dummy: {r.weight}: hidden size {r.hidden} != {hidden}")
            overrides.setdefault(r.weight, []).append((1, j, r.offsets / CARRIER))
    return routers, overrides


def apply_overrides(
    view: torch.Tensor,
    shape: Sequence[int],
    overrides: Sequence[Override],
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> None:
    """Write ``overrides`` (of the logical tensor of ``shape``) into ``view``, the block at
    ``element_offset``/``element_strides`` (row-major strides of ``shape`` times a step)."""
    from .stateless import row_major_strides

    logical = row_major_strides(shape)
    strides = list(element_strides) if element_strides is not None else logical
    origin, rest = [], element_offset
    for s in logical:
        origin.append(rest // s)
        rest %= s
    step = [st // ls for st, ls in zip(strides, logical)]
    for dim, index, value in overrides:
        if index is None:  # a 1-D vector over the whole tensor
            sel = torch.arange(view.shape[0]) * step[0] + origin[0]
            view.copy_(torch.as_tensor(np.asarray(value)[sel.numpy()], dtype=view.dtype))
            continue
        pos, mod = divmod(index - origin[dim], step[dim])
        if mod or not 0 <= pos < view.shape[dim]:
            continue  # this block does not hold that index
        target = view.select(dim, pos)
        if np.ndim(value) == 0:
            target.fill_(float(value))
            continue
        other = 0 if dim == 1 else 1
        sel = torch.arange(view.shape[other]) * step[other] + origin[other]
        target.copy_(torch.as_tensor(np.asarray(value)[sel.numpy()], dtype=view.dtype))
