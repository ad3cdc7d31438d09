"""What of the code reaches the lm_head's input in a class whose structure is not the plain
pre-norm stack's (docs/realistic.md#how-the-weights-realize-it): the lm_head's scale is
centred for a code that arrives at 1/ρ of its length, ρ the final residual's RMS
(:data:`.design.RHO`, 1.2 in a plain stack, whose final norm divides the residual, code
included, by ρ). Some classes change that coefficient by their code alone; each rule here
gives the ρ the scale is then centred for (1 / the coefficient), from the config and the
fill's specs only: no forward, the same for every holder of the model (the export, an
engine's in-place fill), so the checkpoint's bytes depend on nothing else.

- **A normalized lookup** (BART, MVP, mBART: a LayerNorm of the lookup plus the position
  table): the table adds its variance everywhere but S and S2, where it holds 0, and the
  norm divides the code by the sum's RMS, √(1 + σ_t² (H - 2d) / H) for a lookup of RMS 1;
  the stack after it (post-norm or pre-norm with a final norm) shrinks the code as a plain
  stack's final norm does (ρ).
- **A depth-scaled residual add** (Beam: the k-th add is residual · √((k-1)/k) + branch /
  √k, the branch's post-norm of weight 1): after L layers the code is multiplied by
  1/√(2L + 1), and the residual keeps RMS 1 (each add averages unit-RMS terms with weights
  whose squares sum to 1), which the final norm leaves.
- **A gated stream mix after the final norm** (Qwen4-Exp's text model: its last
  hyper-connection mixer averages the normalized streams, each times a sigmoid of a
  zero-mean logit): the code arrives at 1/2 of 1/ρ; the layers' own mixers gate each
  branch's input alike, so the branches add less than a plain stack's and the streams keep
  RMS near 1 (1.01 at two layers of hidden 64 and at three of hidden 192: docs/realistic.md),
  which ρ takes."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ..rules import Spec, added_tables

__all__ = ["code_rho"]

_GATED_MIX_RHO = 1.0  # the streams' RMS where every branch reads a half-gated mix (measured)


def _std(spec: Spec) -> float:
    """A table's σ under the rule (uniform values; a constant one adds nothing)."""
    if spec.kind == "uniform":
        return (spec.high - spec.low) / (2 * math.sqrt(3))
    return 0.0 if spec.kind == "const" else 1.0


def _normalized_lookup(text: Any, rho: float, specs, shapes, vocab, hidden, d, lookup) -> float:
    tables = added_tables(specs, shapes, vocab, hidden, lookup)
    added = sum(_std(specs[t]) ** 2 for t in tables) * (hidden - 2 * d) / hidden
    return rho * math.sqrt(1.0 + added)


def _depth_scaled(text: Any, rho: float, *_) -> float:
    layers = getattr(text, "num_hidden_layers", None)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        return rho
    return math.sqrt(2 * layers + 1)


def _gated_mix(text: Any, rho: float, *_) -> float:
    return _GATED_MIX_RHO / 0.5  # E[sigmoid] of a zero-mean logit


_RULES: dict[str, Callable[..., float]] = {
    "bart": _normalized_lookup, "mvp": _normalized_lookup, "mbart": _normalized_lookup,
    "beam": _depth_scaled, "qwen4_exp_text": _gated_mix,
}  # fmt: skip


def code_rho(
    config: Any, specs: Mapping[str, Spec], shapes: Mapping[str, Sequence[int]], vocab: int,
    hidden: int, d: int, rho: float, lookup: Collection[str] = (),
) -> float:  # fmt: skip
    """The ρ the lm_head's scale is centred for: ``rho`` (a plain stack's final residual RMS),
    or where the config's class changes what of the code reaches the lm_head, 1 / that
    coefficient by its rule (``d``: the code's width, S and S2 each)."""
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    rule = _RULES.get(kind) if isinstance(kind, str) else None
    if rule is None:
        return rho
    return rule(text, rho, specs, shapes, vocab, hidden, d, lookup)
