"""A routing profile and each MoE layer's target (docs/realistic.md#routing): the ``routing``
argument parsed (``"balanced"``, ``"zipf:A"``, a recorded load in a JSON file), the share of
the token-expert assignments each expert should get, which expert holds which popularity rank
(a permutation per seed and layer), and each router's offsets for its target."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...stateless import tensor_seed
from .solve import Router, leave_one_out, solve_offsets, solve_zero

__all__ = ["ENV", "Profile", "RoutingError", "chosen_routing", "layer_targets", "parse_routing"]
__all__ += ["permutation", "zipf_target"]


ENV = "FP8_DUMMY_ROUTING"
_SMALLEST = 280 * math.log(10)  # -ln of the smallest popularity zipf's target computes with


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
    except RecursionError:
        raise RoutingError(f"fp8_dummy: routing file {text}: nested too deeply") from None
    loads = data.get("expert_load") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not all(isinstance(r, list) for r in loads) or not loads:
        raise RoutingError(
            f"fp8_dummy: routing file {text}: needs {{'expert_load': [[numbers per expert] "
            "for each MoE layer]}"
        )
    rows = []
    for i, row in enumerate(loads):
        values = [_load(text, i, e, v) for e, v in enumerate(row)]
        top = max(values, default=0.0)
        if not top > 0:
            raise RoutingError(f"fp8_dummy: routing file {text}: MoE layer {i} has no load")
        if not math.isfinite(sum(values)):  # relative to the largest, where the sum overflows
            values = [v / top for v in values]
        rows.append(tuple(values))
    return Profile("file", loads=tuple(rows), source=text)


def _load(text: str, layer: int, expert: int, v: Any) -> float:
    """One expert's recorded load: a finite non-negative number (an integer too large for a
    float is not one)."""
    try:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    except OverflowError:
        ok = False
    if not ok or v < 0:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise RoutingError(
            f"fp8_dummy: routing file {text}: MoE layer {layer}, expert {expert}: {shown} is "
            "not a finite non-negative number"
        )
    return float(v)


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


def zipf_target(experts: int, k: int, alpha: float) -> np.ndarray:
    """Inclusion probabilities (sum k) of k draws without replacement from popularity
    proportional to rank^-alpha, by popularity rank: exponential clocks of rates p, the
    first k to ring, integrated over time."""
    if alpha * math.log(experts) > _SMALLEST:  # the last rank's popularity would underflow
        raise RoutingError(
            f"fp8_dummy: routing zipf:{alpha:g}: with {experts} experts, rank {experts}'s "
            f"popularity {experts}^-A underflows; A must be at most "
            f"{math.floor(_SMALLEST / math.log(experts))} here"
        )
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
    pi = (mass * leave_one_out(mid, k)).sum(0)
    pi *= k / pi.sum()
    if not np.isfinite(pi).all():
        raise RoutingError(f"fp8_dummy: routing zipf:{alpha:g}: no finite target ({experts})")
    return pi


def layer_targets(
    profile: Profile, routers: Sequence[Router], seed: int, progress: Any = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each router's (target inclusion probabilities (sum k), offsets), expert by expert;
    ``progress(done)`` after each layer."""
    out = []
    if profile.kind == "file":
        for i, (r, pi) in enumerate(zip(routers, _file_targets(profile, routers))):
            if r.zero:
                b, r.lift = solve_zero(r, pi, solve_offsets(r, pi))
            else:
                b = solve_offsets(r, pi)
            out.append((pi, b))
            if progress is not None:
                progress(i + 1)
        return out
    for r in routers:
        if progress is not None:
            progress(len(out))
        if profile.kind == "balanced":
            pi = np.full(r.experts, r.top_k / r.experts)
            b = np.zeros(r.experts)
            if r.zero:  # every layer alike: one solve
                b, r.lift = _balanced_zero(r.experts, r.zero, r.top_k, r.shift)
                b = b.copy()  # the cached solve's own array stays unwritten
            out.append((pi, b))
            continue
        if r.zero:
            out.append(_zero_layer(r, profile.alpha, seed))
            continue
        # Popularity ranks to experts: with grouped top-k, which ranks share a group is drawn
        # once per seed (so one solve serves every layer); each layer then permutes the groups
        # and the experts within each group. Without groups: one permutation per layer.
        size = r.experts // r.groups
        base = permutation(tensor_seed(seed, "routing.groups"), r.experts) if r.groups > 1 else None
        pi_c, b_c = _canonical(r.experts, r.top_k, profile.alpha, _kind(r), tuple(base or ()))
        # a layer's second router (JetMoE's) draws its own hot experts
        key = tensor_seed(seed, f"routing.layers.{r.layer}" + (f".{r.index}" if r.index else ""))
        groups = permutation(key, r.groups)
        where = np.empty(r.experts, dtype=np.int64)
        for g in range(r.groups):
            inner = permutation(key + 1 + g, size)
            where[g * size : (g + 1) * size] = [groups[g] * size + m for m in inner]
        pi, b = np.empty(r.experts), np.empty(r.experts)
        pi[where], b[where] = pi_c, b_c
        out.append((pi, b))
    return out


def _zero_layer(r: Router, alpha: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Zipf's (target, offsets) for a layer of a router with zero experts: which popularity
    ranks are zero experts is drawn once per seed (so one solve serves every layer, as with
    groups); each layer then permutes the routed experts and the zero experts apart."""
    routed = r.experts - r.zero
    base = permutation(tensor_seed(seed, "routing.zero"), r.experts)
    pi_c, b_c, r.lift = _canonical_zero(r.experts, r.zero, r.top_k, alpha, r.shift, tuple(base))
    key = tensor_seed(seed, f"routing.layers.{r.layer}" + (f".{r.index}" if r.index else ""))
    zeros = routed + np.asarray(permutation(key + 1, r.zero), dtype=np.int64)
    where = np.concatenate([permutation(key, routed), zeros])
    pi, b = np.empty(r.experts), np.empty(r.experts)
    pi[where], b[where] = pi_c, b_c
    return pi, b


@functools.lru_cache(maxsize=16)
def _canonical_zero(experts: int, zero: int, k: int, alpha: float, shift: float, base: tuple):
    """Zipf's target, offsets and lift with the zero experts the last ``zero`` slots, rank r
    at slot base[r]: started from the solve that ignores the classes."""
    pi = np.empty(experts)
    pi[list(base)] = zipf_target(experts, k, alpha)
    r = Router(0, "", experts, 0, k, zero=zero, shift=shift)
    b, lift = solve_zero(r, pi, solve_offsets(r, pi))
    return pi, b, lift


@functools.lru_cache(maxsize=16)
def _balanced_zero(experts: int, zero: int, k: int, shift: float) -> tuple[np.ndarray, float]:
    r = Router(0, "", experts, 0, k, zero=zero, shift=shift)
    return solve_zero(r, np.full(experts, k / experts))


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
