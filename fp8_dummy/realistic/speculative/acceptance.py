"""The ``acceptance`` argument (docs/realistic.md#speculative-decoding): how often the draft's
greedy proposal is the target's greedy token, parsed and checked once for every entry point
(the in-memory fill, ``export --acceptance``, vLLM's extra config, SGLang's environment).

A number A in [0, 1] is memoryless: each draft token is right with probability A given that
those before it were, for any number of draft tokens (positions 1..i all right: A^i). A list
``[r1, ..., rk]`` is for an engine that drafts k tokens and reads as vLLM's
``synthetic_acceptance_rates``: ``ri`` is the probability that positions 1..i are all right
(unconditional, so non-increasing), and a (k+1)-th position, if an engine drafts one, is never
right. ``"default"`` is :data:`DEFAULT` (DeepSeek-V3's reported second-token acceptance);
None: no designed process (today's bytes)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT", "ENV", "MAX_POSITIONS", "Acceptance", "AcceptanceError"]
__all__ += ["chosen_acceptance", "parse_acceptance"]

# DeepSeek-V3 Technical Report (arXiv:2412.19437), section 5.4.3: "the acceptance rate of the
# second token prediction ranges between 85% and 90% across various generation topics".
DEFAULT = 0.85
ENV = "FP8_DUMMY_ACCEPTANCE"
MAX_POSITIONS = 64  # the longest per-position list (no engine drafts more tokens per step)


class AcceptanceError(ValueError):
    """An acceptance no draft can realize; raised before anything is written."""


@dataclass(frozen=True)
class Acceptance:
    """A parsed ``acceptance``: ``rates``, one number (memoryless: each position right with
    that probability given the earlier ones were) or k (for k draft tokens: positions 1..i
    all right with probability ``rates[i-1]``)."""

    rates: tuple[float, ...]
    memoryless: bool = True
    source: str = ""

    @property
    def positions(self) -> int | None:
        """The number of draft tokens a list is for (None: any)."""
        return None if self.memoryless else len(self.rates)

    def reach(self, i: int) -> float:
        """P(positions 1..i all right), i >= 0."""
        if self.memoryless:
            return self.rates[0] ** i
        return (1.0, *self.rates)[i] if i <= len(self.rates) else 0.0


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            v = float(str(v).strip())
        except ValueError:
            raise AcceptanceError(
                f"fp8_dummy: acceptance {what}: {v!r} is not a number in [0, 1]"
            ) from None
    v = float(v)
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise AcceptanceError(f"fp8_dummy: acceptance {what}: {v!r} is not a number in [0, 1]")
    return v


def parse_acceptance(acceptance: Any, positions: int | None = None) -> Acceptance | None:
    """None (no designed process), ``"default"``, a number in [0, 1], a list of them (or its
    text ``"0.9,0.7"``). ``positions``: the number of draft tokens the engine proposes per
    step, where known; a list must have that length."""
    if acceptance is None or isinstance(acceptance, Acceptance):
        out = acceptance
    elif isinstance(acceptance, str) and acceptance.strip().lower() in ("", "none", "off"):
        out = None
    elif isinstance(acceptance, str) and acceptance.strip().lower() == "default":
        out = Acceptance((DEFAULT,), True, "default")
    elif isinstance(acceptance, str) and "," in acceptance:
        out = _listed(acceptance.split(","), acceptance)
    elif isinstance(acceptance, (list, tuple)):
        out = _listed(list(acceptance), repr(list(acceptance)))
    else:
        out = Acceptance((_number(acceptance, "A"),), True, str(acceptance).strip())
    if out is not None and positions is not None and out.positions not in (None, positions):
        raise AcceptanceError(
            f"fp8_dummy: acceptance {out.source}: a list for {out.positions} draft tokens, "
            f"the engine drafts {positions} per step (give {positions} numbers, or one)"
        )
    return out


def _listed(parts: Sequence[Any], source: str) -> Acceptance:
    if not 1 <= len(parts) <= MAX_POSITIONS:
        raise AcceptanceError(
            f"fp8_dummy: acceptance {source}: a list of 1 to {MAX_POSITIONS} numbers, one per "
            f"draft position (got {len(parts)})"
        )
    rates = tuple(_number(v, f"position {i + 1}") for i, v in enumerate(parts))
    for i in range(1, len(rates)):
        if rates[i] > rates[i - 1]:
            raise AcceptanceError(
                f"fp8_dummy: acceptance {source}: position {i + 1}'s {rates[i]:g} is above "
                f"position {i}'s {rates[i - 1]:g}: each is the share of steps that accept every "
                "position up to it (vLLM's synthetic_acceptance_rates), so none increases"
            )
    return Acceptance(rates, False, "[" + ", ".join(f"{r:g}" for r in rates) + "]")


def chosen_acceptance(given: Any = None) -> Any:
    """An engine's choice: its own configuration's value, else ``$FP8_DUMMY_ACCEPTANCE``,
    else None (no designed process)."""
    if given is not None:
        return given
    return os.environ.get(ENV, "").strip() or None
