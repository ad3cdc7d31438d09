"""What an SSM scan without an output norm multiplies its input by
(docs/realistic.md#the-rule-per-architecture): a selective scan's output is
``sum_s (C_t . B_s) dt_s decay_ts x_s + D x_t``, each term a product of C and B summed over
the state's N dimensions; where no norm follows the scan (a gated RMSNorm takes any scale
out: Mamba-2's, Bamba's, Nemotron-H's), that dot product's RMS passes into the branch's
output projection, which the rule's 1/√(2L) assumes reads unit-RMS activations. The output
projection's σ is divided by it (as a MoE's combine-weight sum divides its experts'), from the
config alone, so every holder of the model (the export of any size, an engine's in-place
fill) writes the same bytes; no forward is run.

- **Jamba**: B and C are RMS-normalized over the state (``b_layernorm``, ``c_layernorm``,
  weight 1): two independent unit-RMS N-vectors, whose dot product has RMS √N
  (``mamba_d_state``, 16 by default: 4).
- **A mixer whose config carries ``mixer_rms_eps``** (FalconMamba's): that field is the
  epsilon of the weightless RMS norms the mixer applies to B, C and dt over their own width
  before the scan (the kernel path and the reference path alike), so B and C are unit-RMS
  N-vectors as Jamba's and the gain is √N (``state_size``, 16 by default: 4). The config's
  field, not the model type, selects it: it exists because the mixer has those norms, and
  the norms' weights are non-persistent buffers, absent from a checkpoint's names. Plain
  Mamba's config has no such field (its B and C are a linear map of silu of the
  convolution, C·B of RMS √N E[silu(Z)²], 1.42 at N = 16) and keeps the plain rule: it is in
  the entropy band without it (docs/realistic.md#speculative-decoding).
- **Falcon-H1** without its gated norm (``mamba_rms_norm`` false, the default): B and C are
  silu of the causal convolution of the input projection, each entry silu(Z) of a
  unit-variance Z under the rule (the normalized input, the projection's σ = 1/√fan-in, the
  depthwise kernel's 1/√kernel, biases 0), of mean m and second moment s²; the dot product
  of two such N-vectors has RMS √(N² m⁴ + N (s⁴ − m⁴)) (12.3 at N = 256, the default).
  Its dt is one per head (``mamba_n_heads``, H), softplus of a unit-variance logit, and
  scales the whole head: a token's mean square over the output projection's input averages
  H heads' dt², each of relative variance v = E[dt⁴] / E[dt²]² − 1 (1.75), so it spreads
  across tokens by √(v / H) of its mean. The gain is further multiplied by √(1 + 2 √(v / H)),
  the RMS at that mean square plus two of its standard deviations (a normal's 97.7%: the
  worst of 16 prompts' last tokens within): 1.39 at H = 8 (a prompt in 16 was at 5.87 nats
  against the bound 5.55 there, its final residual RMS 1.99, with the mean alone), 1.11
  at H = 128, the default.

The scan's other factors (the decay, the silu gate, D, dt's mean square) are each of order 1
and left to the rule. Measured on the entropy sweep's configs
(2026-12-06): the final residual RMS at the last of 12 tokens went from 1.01-1.93 to
1.00-1.20 (Jamba), from 2.22-5.02 to 1.01-1.22 (Falcon-H1) and from 1.07-1.48 to
0.96-1.10 (FalconMamba), two layers, hidden 64."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["scan_gains"]

# E[silu(Z)] and E[silu(Z)^2] for Z ~ N(0, 1), by quadrature (float64, |z| <= 12, step 1.2e-4)
SILU_MEAN = 0.20662096414326067
SILU_SQUARE = 0.3557755198196829
# E[softplus(Z)^2] and E[softplus(Z)^4] for Z ~ N(0, 1), the same quadrature
SOFTPLUS_SQUARE = 0.9212459088653356
SOFTPLUS_FOURTH = 2.337752153847272


def _normalized(text: Any, field: str = "mamba_d_state") -> float:
    """√N for unit-RMS B and C of N = the config's ``field`` entries."""
    n = _state(text, field)
    return math.sqrt(n) if n else 1.0


def _silu_products(text: Any) -> float:
    n = _state(text)
    if not n or getattr(text, "mamba_rms_norm", False) is not False:
        return 1.0  # the gated norm after the scan takes its scale out
    m4 = SILU_MEAN**4
    products = math.sqrt(n * n * m4 + n * (SILU_SQUARE**2 - m4))
    return products * _dt_spread(_state(text, "mamba_n_heads") or 1)


def _dt_spread(heads: int) -> float:
    """√(1 + 2 √(v / H)): the RMS of a token's mean square over H heads' dt² at two standard
    deviations above its mean (v: one dt²'s relative variance)."""
    v = SOFTPLUS_FOURTH / SOFTPLUS_SQUARE**2 - 1
    return math.sqrt(1 + 2 * math.sqrt(v / heads))


def _state(text: Any, field: str = "mamba_d_state") -> int:
    n = getattr(text, field, None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


# model type -> (the scan's output projection, by its owner's last two name parts; its gain)
_RULES: dict[str, tuple[str, Callable[[Any], float]]] = {
    "jamba": ("mamba.out_proj", _normalized),
    "falcon_h1": ("mamba.out_proj", _silu_products),
}


def scan_gains(config: Any, owners: Iterable[str]) -> dict[str, float]:
    """Module name -> what the scan multiplies its input by, for each of ``owners`` (module
    names) that is the output projection of a scan the config's class runs without an output
    norm; empty for any other class."""
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    rule = _RULES.get(kind) if isinstance(kind, str) else None
    if rule is None and _number(getattr(text, "mixer_rms_eps", None)):
        # the epsilon of a mixer's RMS norms of B, C and dt: the mixer has them (FalconMamba)
        rule = ("mixer.out_proj", lambda t: _normalized(t, "state_size"))
    if rule is None:
        return {}
    suffix, gain_of = rule
    gain = gain_of(text)
    if gain == 1.0:
        return {}
    return {o: gain for o in owners if o == suffix or o.endswith(f".{suffix}")}
