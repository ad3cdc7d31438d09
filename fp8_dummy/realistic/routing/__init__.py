"""MoE routing a benchmark chooses, made by the weights alone (docs/realistic.md#routing).

A profile (``"balanced"``, ``"zipf:A"``, or a recorded load in a JSON file) gives each MoE
layer a target: the share of the token-expert assignments each expert should get. The fill
realizes it through the router's own arithmetic: per-expert offsets added to the logits before
the selection, solved for so that the router's probabilities are the target's, and written
into the weights. This package's face; its files:

- ``profiles.py``: the profile parsed, each layer's target, which expert holds which
  popularity rank, each router's offsets for its target;
- ``solve.py``: the router model (inclusion probabilities by quadrature, the router's own
  selection simulated) and the solve of the offsets;
- ``offsets.py``: the routers found among a model's tensors, and the overrides of the fill that
  write their offsets (a bias, a correction bias, or the residual stream's carrier);
- ``report.py``: ``python -m fp8_dummy routing``, the load a profile gives, predicted and
  measured."""

from __future__ import annotations

from .offsets import (
    CARRIER,
    HASH,
    Kept,
    Override,
    apply_overrides,
    find_routers,
    hash_specs,
    hash_table,
    plan_routing,
)
from .profiles import (
    ENV,
    Profile,
    RoutingError,
    chosen_routing,
    layer_targets,
    parse_routing,
    permutation,
    zipf_target,
)
from .solve import (
    Router,
    describe,
    inclusion_probabilities,
    select,
    simulate,
    solve_offsets,
    solve_zero,
)

__all__ = ["CARRIER", "ENV", "HASH", "Kept", "Override", "Profile", "Router", "RoutingError"]
__all__ += ["apply_overrides", "chosen_routing", "describe", "find_routers"]
__all__ += ["hash_specs", "hash_table", "inclusion_probabilities", "layer_targets"]
__all__ += ["parse_routing", "permutation", "plan_routing", "select"]
__all__ += ["simulate", "solve_offsets", "solve_zero", "zipf_target"]
