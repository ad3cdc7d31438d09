"""Where the routing's offsets are written: the routers among a model's tensors (the weights
of role ``router``, :func:`.rules.router_holders`, in a decoder layer: ``layers.<i>``,
``h.<i>``, ``blocks.<i>`` (:data:`.rules.LAYER_INDEX`), or an MTP layer kept apart
(``mtp.<i>``, ``mtp.layers.<i>``, ``mtp_layers.<i>``), counted after the main model's; its
top-k, scoring and grouping from the config)
and the overrides of the fill that realize each router's offsets: into the router's bias where
it is added before the selection (GPT-OSS); into ``e_score_correction_bias`` where the
selection adds one to the sigmoid scores (DeepSeek-V3/R1, GLM-4.5), grouped top-k included;
into the table of a hash router (DeepSeek-V4's ``tid2eid``: :func:`hash_table`);
for routers without a bias (Mixtral, Qwen2/3-MoE, OLMoE), through the residual stream: the last
hidden dimension ``j`` carries a constant (the vocabulary's column ``j`` is 1, a table added
to the lookup (position, token type) holds 0 there, no residual branch writes output ``j``, no
other projection reads input ``j``; a weight stored (in, out) along its own dimensions), so
after the norm ``h_j`` is the same for every token and the router's column ``j``, set to ``b``,
adds ``b`` to the logits.

Everything is a pure function of (seed, layer index, profile, router shape, config), so every
layout and every engine that numbers its layers alike gets the same routing."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from ...stateless import row_major_strides, tensor_seed
from ..rules import LAYER_INDEX, Spec, added_tables
from .profiles import Profile, RoutingError, layer_targets
from .solve import Router

__all__ = ["CARRIER", "HASH", "Kept", "Override", "apply_overrides", "find_routers"]
__all__ += ["hash_specs", "hash_table", "plan_routing"]

_TOPK = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k", "moe_k")


CARRIER = 1.0  # the constant the residual stream's last dimension carries
# a hash router's table (token id -> its k experts): 0, then every column written by the plan
HASH = Spec("hash", "const", 0.0)


def _config_value(config: Any, names: Sequence[str]) -> Any:
    for c in (config, getattr(config, "text_config", None)):
        for n in names:
            v = getattr(c, n, None) if c is not None else None
            if v is not None:
                return v
    return None


def find_routers(
    roles: Mapping[str, str], shapes: Mapping[str, Sequence[int]], config: Any,
    hashed_only: bool = False,
) -> list[Router]:  # fmt: skip
    """The routers among the tensors (full name -> role, logical shape), in layer order (an
    MTP layer's after the main model's: :func:`_router_layer`); ``hashed_only``: the
    hash routers alone, the others not looked at (their top-k unread: a balanced fill writes
    no other router's offsets)."""
    k = _config_value(config, _TOPK)
    score = _config_value(config, ("scoring_func",))
    groups = int(_config_value(config, ("n_group",)) or 1)
    topk_group = int(_config_value(config, ("topk_group",)) or groups)
    method = _config_value(config, ("topk_method",))
    vocab = _config_value(config, ("vocab_size",))
    # a hash router's table: an integer tensor (role untouched) [vocab, k] beside its weight
    tables = {n.rpartition(".")[0]: n for n, role in roles.items() if role in ("untouched", "hash")
              and isinstance(k, int) and tuple(shapes[n]) == (vocab, k)}  # fmt: skip
    main = _main_layers(roles, config)
    routers = []
    for name, role in roles.items():
        shape = shapes[name]
        if role != "router" or len(shape) != 2 or not name.endswith(".weight"):
            continue
        found = LAYER_INDEX.search(name)
        if found is None:
            continue
        owner = name[: -len(".weight")]
        if hashed_only and owner not in tables:
            continue
        experts = int(shape[0])
        correction = shapes.get(f"{owner}.e_score_correction_bias")
        if correction is not None and len(correction) == 1 and 1 <= correction[0] < experts:
            # shared experts scored beside the routed ones (Inkling's router: rows after the
            # correction bias's are never selected): the routed experts are the bias's
            experts = int(correction[0])
        if not isinstance(k, int) or not 1 <= k <= experts:
            raise RoutingError(
                f"fp8_dummy: {name}: the config gives no number of experts per token "
                f"({'/'.join(_TOPK)}) in [1, {experts}]"
            )
        r = Router(_router_layer(name, found, main), name, experts, int(shape[1]), k)
        if owner in tables:  # DeepSeek-V4's first layers: the table picks, the weight weighs
            r.realize, r.bias = "hash", tables[owner]
            routers.append(r)
            continue
        if f"{owner}.e_score_correction_bias" in roles:
            r.realize, r.bias = "correction", f"{owner}.e_score_correction_bias"
            # the scores the correction is added to: sigmoid's, sqrt(softplus)'s (DeepSeek-V4's)
            r.score = "sigmoid" if score in (None, "sigmoid") else "softmax"
            r.score = "sqrtsoftplus" if score == "sqrtsoftplus" else r.score
        elif f"{owner}.bias" in roles:
            r.realize, r.bias = "bias", f"{owner}.bias"
            if score == "sqrtsoftplus":  # DeepSeek-V4's checkpoint name of the correction bias
                r.realize, r.score = "correction", score  # its class adds to the scores
        lifted = f"{owner.rpartition('.')[0]}.e_score_correction_bias"
        zero = _config_value(config, ("zero_expert_num",))
        beside = tuple(shapes.get(lifted, ())) == (experts,)
        if isinstance(zero, int) and 0 < zero < experts and beside:
            # LongCat-Flash's zero (identity) experts, the router's last rows; its correction
            # bias (beside the router's ``classifier``) is added to the softmax probabilities
            r.zero, r.lifted = zero, lifted
        if groups > 1 and topk_group < groups and r.experts % groups == 0:
            r.groups, r.topk_group = groups, topk_group
            r.group_score = "max" if method == "group_limited_greedy" else "top2"
        routers.append(r)
    routers.sort(key=lambda r: (r.layer, r.weight))
    zeroed = [r for r in routers if r.zero]
    if zeroed:
        # the zero experts' logits this far below the routed ones': each one picked weighs its
        # identity output (the normalized residual, in the residual's own direction, so that
        # every layer's adds up) by s·p, p then at most e^(z - shift) / (the routed experts'
        # sum), so that over every MoE layer they add about e^-2 (scale s, k picks a token)
        scale = _config_value(config, ("routed_scaling_factor",))
        scale = float(scale) if isinstance(scale, (int, float)) and scale > 0 else 1.0
        shift = math.log(max(math.e, scale * k * len(zeroed))) + 2.0
        for r in zeroed:
            r.shift = round(shift * 4096) / 4096
    for before, r in zip(routers, routers[1:]):
        r.index = before.index + 1 if before.layer == r.layer else 0
    return routers


def _main_layers(roles: Mapping[str, str], config: Any) -> int:
    """The main model's layer count: the config's, or one past the highest main layer among
    the names where that is more (a multimodal config whose own count is not its text
    model's)."""
    n = _config_value(config, ("num_hidden_layers",))
    found = ((name, LAYER_INDEX.search(name)) for name in roles)
    named = 1 + max((int(m.group(1)) for name, m in found if m and not _mtp(name, m)), default=-1)
    return max(n, named) if isinstance(n, int) else named


# an MTP layer's tensors apart from the main model's: DeepSeek-V4's ``mtp.<i>.``, Qwen3-Next's
# and Nemotron-H's ``mtp.layers.<i>.``, Inkling's ``model.mtp.layers.<i>.``, HY-V4's
# ``model.mtp_layers.<i>.``
_MTP = re.compile(r"(?:^|\.)mtp(?:_layers)?\.")


def _mtp(name: str, found: re.Match) -> bool:
    return _MTP.search(name, 0, found.end()) is not None


def _router_layer(name: str, found: re.Match, main: int) -> int:
    """A router's layer: ``layers.<i>``'s i; in an MTP layer kept apart (``mtp.<i>``,
    ``mtp.layers.<i>``, ``mtp_layers.<i>``): main + i, the index the layouts that number MTP
    layers on from the main ones give it (DeepSeek-V3's ``model.layers.<main + i>``), so that it
    orders after the main model's layers (a recorded load's rows pair with the routers in that
    order) and keys its own draws as that layer."""
    index = int(found.group(1))
    return main + index if _mtp(name, found) else index


# An override: (dimension, index along it, value): a float, or a vector along the other
# dimension of a 2-D tensor (a 1-D tensor: along its only dimension, index None); a float
# over a range of indices (a ``range`` of step 1); a :class:`Kept` (an integer tensor's bits).
Override = tuple[int, Any, Any]


class Kept(NamedTuple):
    """An override's value that keeps only the bits ``mask`` of each integer it names, the rest
    zeroed: one of the two e2m1 codes a byte holds (NVFP4), the other code untouched."""

    mask: int


def plan_routing(
    profile: Profile,
    seed: int,
    config: Any,
    specs: Mapping[str, Any],
    shapes: Mapping[str, Sequence[int]],
    progress: Any = None,
    dtypes: Mapping[str, torch.dtype] | None = None,
    transposed: Collection[str] = (),
    lookup: Collection[str] = (),
) -> tuple[list[Router], dict[str, list[Override]]]:
    """The routers, each with its offsets, and the overrides of the fill that realize them
    (full name -> overrides of the logical tensor), all checked before anything is written;
    ``progress(layers solved)``, if given, as the offsets are solved; ``dtypes``: each
    tensor's, to refuse a router whose offsets would have to go into 1-byte codes;
    ``transposed``: the names of the weights stored (in, out) (:func:`.rules.stored_in_out`);
    ``lookup``: the vocabulary's tables as the model's class names them
    (:func:`.rules.added_tables`)."""
    roles = {n: s.role for n, s in specs.items()}
    zero = _config_value(config, ("zero_expert_num",))
    if profile.kind == "balanced" and not (isinstance(zero, int) and zero > 0):
        # the fill's own bytes; a hash router's table balanced
        routers = find_routers(roles, shapes, config, hashed_only=True)
        for r, (pi, _) in zip(routers, layer_targets(profile, routers, seed)):
            r.target = pi
        return routers, _hash_overrides(routers, seed, shapes)
    routers = find_routers(roles, shapes, config)
    if not routers:
        raise RoutingError(
            f"fp8_dummy: routing {profile.source!r}: the model has no router the realistic fill "
            "recognises (in a decoder layer: layers.<i>, h.<i>, blocks.<i> or mtp.<i>; the 2-D "
            "weight of a module named gate or router, or the one 2-D weight inside it)"
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
        if r.realize != "hash":  # a table's entries are experts' indices, no offsets
            _check_finite(r, (dtypes or {}).get(r.weight if r.realize == "residual" else r.bias))
    overrides = _hash_overrides(routers, seed, shapes)
    residual = [r for r in routers if r.realize == "residual"]
    for r in routers:
        if r.realize in ("bias", "correction"):
            overrides.setdefault(r.bias, []).append((0, None, r.offsets))
        if r.zero:
            lift = np.where(np.arange(r.experts) >= r.experts - r.zero, r.lift, 0.0)
            overrides.setdefault(r.lifted, []).append((0, None, lift))
    if residual:
        hidden = residual[0].hidden
        j = hidden - 1
        vocab = _config_value(config, ("vocab_size",))
        vocab = vocab if isinstance(vocab, int) else None
        tables = set(added_tables(specs, shapes, vocab, hidden, lookup))
        for name, spec in specs.items():
            shape = list(shapes[name])
            if spec.kind != "uniform" or len(shape) < 2:
                continue  # constants, codes of packed formats: left as the role says
            # a weight stored (in, out) (GPT-2's Conv1D, transformers' transposed experts)
            # has its outputs last: a square one's shape alone cannot tell which is which
            last, before = len(shape) - 1, len(shape) - 2
            out, inp = (last, before) if name in transposed else (before, last)
            if spec.role == "embedding" and shape[-1] == hidden:
                # a table added to the lookup (position, token type) holds 0: the carrier
                # stays CARRIER whatever the position
                value = 0.0 if name in tables else CARRIER
                overrides.setdefault(name, []).append((len(shape) - 1, j, value))
            elif spec.role == "residual_out" and shape[out] == hidden:
                overrides.setdefault(name, []).append((out, j, 0.0))
            elif spec.role in ("linear", "router", "unknown") and shape[inp] == hidden:
                overrides.setdefault(name, []).append((inp, j, 0.0))
        for r in residual:
            if r.hidden != hidden:
                raise RoutingError(f"fp8_dummy: {r.weight}: hidden size {r.hidden} != {hidden}")
            overrides.setdefault(r.weight, []).append((1, j, r.offsets / CARRIER))
    return routers, overrides


def hash_table(target: np.ndarray, vocab: int, k: int, key: int) -> np.ndarray:
    """A hash router's table [vocab, k]: k distinct experts per token id, expert e in
    vocab · target[e] rows (``target`` normalized to sum k, each at most 1; rounded by largest
    remainder, ties to the lower expert), so that tokens drawn uniformly from the vocabulary
    give each expert its target share, exactly where every id is drawn equally often. The
    experts, each repeated its count, fill the table column by column in an order drawn from
    ``key``: a run of at most ``vocab`` never meets a row twice, so a row's k experts are
    distinct. The rows are then dealt to the token ids by a permutation drawn from ``key``,
    independent of any token's meaning: any large set of ids (the designed stream's, a
    tokenizer's ordinary tokens) sees a uniform sample of the rows."""
    target = np.asarray(target, dtype=np.float64)
    experts = target.size
    want = np.minimum(target * (vocab * k / target.sum()), vocab)
    counts = np.floor(want).astype(np.int64)
    short = vocab * k - int(counts.sum())
    # the largest remainders first (ties: the lower expert), never past vocab rows
    first = np.lexsort((np.arange(experts), -(want - counts), counts >= vocab))
    counts[first[:short]] += 1
    order = _shuffle(key, experts)
    table = np.repeat(order, counts[order]).reshape(k, vocab).T
    out = np.empty_like(table)
    out[_shuffle(key + 1, vocab)] = table
    return out


def _shuffle(key: int, n: int) -> np.ndarray:
    """A permutation of range(n) from a 64-bit key: the order of SplitMix64's outputs at 1..n
    (numpy's uint64 arithmetic wraps as the mix means it to: the same on every machine)."""
    z = np.uint64(key & 0xFFFFFFFFFFFFFFFF) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(
        0x9E3779B97F4A7C15
    )
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.argsort(z ^ (z >> np.uint64(31)), kind="stable")


def _hash_overrides(
    routers: Sequence[Router], seed: int, shapes: Mapping[str, Sequence[int]]
) -> dict[str, list[Override]]:
    """Each hash router's table (:func:`hash_table` of its target, keyed by the table's name
    and ``seed``), column by column."""
    out: dict[str, list[Override]] = {}
    for r in routers:
        if r.realize == "hash":
            vocab = int(shapes[r.bias][0])
            table = hash_table(r.target, vocab, r.top_k, tensor_seed(seed, r.bias))
            out[r.bias] = [(1, c, table[:, c]) for c in range(table.shape[1])]
    return out


def hash_specs(routers: Sequence[Router]) -> dict[str, Spec]:
    """The specs of the hash routers' tables among ``routers`` (:data:`HASH`): written by the
    plan's overrides, not left untouched."""
    return {r.bias: HASH for r in routers if r.realize == "hash"}


def _check_finite(r: Router, dtype: torch.dtype | None) -> None:
    """A router's offsets finite, and in the dtype of the tensor they are written into."""
    b = np.asarray(r.offsets, dtype=np.float64) / (CARRIER if r.realize == "residual" else 1.0)
    written = torch.as_tensor(b)
    if dtype is not None and dtype.is_floating_point:
        written = written.to(dtype)
    if not (np.isfinite(b).all() and torch.isfinite(written).all()):
        raise RoutingError(
            f"fp8_dummy: {r.weight}: the routing's offsets are not all finite in "
            f"{dtype or 'float64'} (largest {np.abs(b).max():.3g}): this profile's target "
            "is out of the router's reach"
        )


def apply_overrides(
    view: torch.Tensor,
    shape: Sequence[int],
    overrides: Sequence[Override],
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> None:
    """Write ``overrides`` (of the logical tensor of ``shape``) into ``view``, the block at
    ``element_offset``/``element_strides``: each of its dimensions runs along one dimension of
    ``shape`` with a step (a narrowed, strided or transposed block), or is fixed at the
    offset's index there (a selected one: a loader's view of one expert of a fused tensor)."""
    logical = row_major_strides(shape)
    strides = list(element_strides) if element_strides is not None else logical
    origin, rest = [], element_offset
    for s in logical:
        origin.append(rest // s)
        rest %= s
    axes = _axes(shape, logical, origin, view.shape, strides)
    for dim, index, value in overrides:
        axis = axes.get(dim)  # (the view's dimension, its step), None: fixed at origin[dim]
        if index is None:  # a 1-D vector over the whole tensor
            if axis is None:
                view.fill_(float(np.asarray(value)[origin[0]]))
                continue
            sel = torch.arange(view.shape[axis[0]]) * axis[1] + origin[0]
            view.copy_(torch.as_tensor(np.asarray(value)[sel.numpy()], dtype=view.dtype))
            continue
        if isinstance(index, range):  # a float over indices [start, stop): the block's share
            if axis is None:
                if index.start <= origin[dim] < index.stop:
                    view.fill_(float(value))
                continue
            d, step = axis
            first = max(0, -(-(index.start - origin[dim]) // step))
            last = min(view.shape[d], -(-(index.stop - origin[dim]) // step))
            if last > first:
                view.narrow(d, first, last - first).fill_(float(value))
            continue
        if axis is None:
            if index != origin[dim]:
                continue  # this block does not hold that index
            target = view
        else:
            pos, mod = divmod(index - origin[dim], axis[1])
            if mod or not 0 <= pos < view.shape[axis[0]]:
                continue  # this block does not hold that index
            target = view.select(axis[0], pos)
        if isinstance(value, Kept):
            target.bitwise_and_(value.mask)
            continue
        if np.ndim(value) == 0:
            target.fill_(float(value))
            continue
        other = 0 if dim == 1 else 1
        across = axes.get(other)
        if across is None:
            target.fill_(float(np.asarray(value)[origin[other]]))
            continue
        sel = torch.arange(view.shape[across[0]]) * across[1] + origin[other]
        target.copy_(torch.as_tensor(np.asarray(value)[sel.numpy()], dtype=view.dtype))


def _axes(shape, logical, origin, view_shape, strides) -> dict[int, tuple[int, int]]:
    """The dimensions of ``shape`` a block runs along: dimension -> (the block's dimension, its
    step). A block's dimension of stride s runs along the last dimension k whose stride
    divides s and whose extent holds its steps (an earlier one's stride is a multiple of k's,
    a later one's steps would leave its extent); one of size 1 or stride 0 along none."""
    found: dict[int, tuple[int, int]] = {}
    for d, (size, st) in enumerate(zip(view_shape, strides)):
        if size == 1 or st == 0:
            continue
        for k in reversed(range(len(shape))):
            step, mod = divmod(st, logical[k])
            if not mod and origin[k] + step * (size - 1) < shape[k] and k not in found:
                found[k] = (d, step)
                break
        else:
            raise ValueError(
                f"fp8_dummy: a block of stride {st} runs along no dimension of {tuple(shape)}"
            )
    return found
