"""vLLM's dummy-weight functions (``vllm.model_executor.model_loader.weight_utils``), byte for
byte with the installed vLLM's (docs/engines.md): the float path fused where proven against
vLLM's own function, every other branch vLLM's own (without vLLM: its semantics reproduced);
and the invariant fill (:mod:`.invariant`). The plugin (:mod:`.plugin`) installs them.
Importing this imports no vLLM."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .. import core
from .invariant import UncoveredParameterError, initialize_invariant_dummy_weights, tensor_seed
from .rules import generation, semantics, version

__all__ = [
    "UncoveredParameterError",
    "generation",
    "initialize_dummy_weights",
    "initialize_invariant_dummy_weights",
    "initialize_single_dummy_weight",
    "tensor_seed",
    "version",
]

# vLLM's own functions, kept by the plugin before it replaces them in the dummy loader.
originals: dict[str, Callable[..., Any]] = {}

for _gen in (33, 30):
    core.SEMANTICS[f"vllm-0.{_gen}"] = semantics(_gen)


def original_single() -> Callable[..., Any] | None:
    """vLLM's own ``initialize_single_dummy_weight``, or None without vLLM."""
    if "single" in originals:
        return originals["single"]
    if version() is None:
        return None
    try:
        from vllm.model_executor.model_loader import weight_utils
    except Exception:  # noqa: BLE001 (a vLLM whose loader does not import: ours alone)
        return None
    f = getattr(weight_utils, "initialize_single_dummy_weight", None)
    return None if f is initialize_single_dummy_weight else f


def loader_call(gen: int) -> Callable[[str], core.Call]:
    """How vLLM's dummy loader calls the per-tensor function for a tensor (0.33: by its local
    name; before: the older signature's defaults)."""
    if gen >= 33:
        return lambda local: ((), {"name": local})
    return lambda local: ((-1e-3, 1e-3, 1234), {})


def initialize_single_dummy_weight(
    param: torch.Tensor,
    low: float | None = None,
    high: float | None = None,
    seed: int = 1234,
    name: str = "",
) -> None:
    """vLLM's ``initialize_single_dummy_weight``, the installed version's semantics (0.30-0.32:
    None bounds read as +-1e-3, their default; ``name`` is used from 0.33 on)."""
    fill_single(param, ((low, high, seed), {"name": name}))


def fill_single(param: torch.Tensor, call: core.Call) -> None:
    """One tensor as vLLM's loader asked for it (``call``: the arguments after the tensor)."""
    sem = semantics()
    try:
        p, _ = core.bind(sem, *call)
    except TypeError:  # a later vLLM's arguments: its own function decides (core.plan)
        p = {"name": ""}
    if generation() < 33 and "low" in p:  # the older signature: no name, these defaults
        low, high = (
            (-1e-3 if p["low"] is None else p["low"]),
            (1e-3 if p["high"] is None else p["high"]),
        )
        call = ((low, high, p["seed"]), {})
    core.fill([(p["name"], param)], sem, call, engine=original_single())


def initialize_dummy_weights(
    model: torch.nn.Module,
    model_config: Any = None,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
) -> None:
    """vLLM <= 0.30's whole-model function: the per-tensor one over ``model.state_dict()``
    (``model_config`` unused, as in vLLM). CUDA tensors batched; the same bytes."""
    original = original_single() if generation() < 33 else None
    sem = semantics(None if original else 30, "state_dict")
    core.fill(core.walk(model, "state_dict"), sem, ((low, high, seed), {}), engine=original)
