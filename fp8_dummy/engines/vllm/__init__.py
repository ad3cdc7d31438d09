"""vLLM's dummy-weight functions (``model_loader.weight_utils``), byte for byte with the installed
vLLM's (docs/engines.md): the float path fused where proven against vLLM's own function, every
other branch vLLM's own (without vLLM, its semantics); the invariant fill (:mod:`.invariant`).
:mod:`.plugin` installs them. Importing this imports no vLLM."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .. import core
from .invariant import UncoveredParameterError, initialize_invariant_dummy_weights, tensor_seed
from .rules import generation, semantics, version

__all__ = ["UncoveredParameterError", "generation", "initialize_dummy_weights"]
__all__ += ["initialize_invariant_dummy_weights", "initialize_single_dummy_weight"]
__all__ += ["tensor_seed", "version"]

WEIGHT_UTILS = "vllm.model_executor.model_loader.weight_utils"
originals: dict[str, Callable[..., Any]] = {}  # vLLM's own, kept by the plugin's patch
core.SEMANTICS.update({f"vllm-0.{g}": semantics(g) for g in (33, 30)})


def original_single() -> Callable[..., Any] | None:
    """vLLM's own ``initialize_single_dummy_weight`` where vLLM has imported it, else None."""
    own = originals.get("single")
    name = "initialize_single_dummy_weight"
    return own or core.own_function(WEIGHT_UTILS, name, initialize_single_dummy_weight)


def loader_call(gen: int) -> Callable[[str], core.Call]:
    """How the dummy loader calls the per-tensor function (0.33: with the tensor's local
    name; before: the older signature's defaults)."""
    return (lambda n: ((), {"name": n})) if gen >= 33 else (lambda n: ((-1e-3, 1e-3, 1234), {}))


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
    core.fill(model, sem, ((low, high, seed), {}), engine=original)
