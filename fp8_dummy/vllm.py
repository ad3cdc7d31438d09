"""Drop-ins with the signatures of vLLM's dummy-weight functions
(``vllm.model_executor.model_loader.weight_utils``), byte-identical to the installed vLLM's.

- :func:`initialize_single_dummy_weight`: vLLM's current signature ``(param, low=None,
  high=None, seed=1234, name="")``. The float16-temp branch (and ``uniform_`` for wider
  floats) runs fused; every other branch (``dummy_weight_value``, E8M0 and integer
  tensors, TPU, ROCm) is vLLM's own function when vLLM is installed, so branches vLLM adds
  later keep their meaning; without vLLM, the latest matched semantics (0.33) reproduced.
- :func:`initialize_dummy_weights`: vLLM <= 0.30's whole-model function.

The semantics follow the installed version (``vllm.__version__``): 0.28-0.29, 0.30-0.32
and 0.33 differ (see docs/engines.md). Importing this module does not import vLLM.
The plugin (``fp8_dummy.vllm_plugin``) installs these into vLLM's dummy loader.
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from typing import Any, Callable

import torch

from . import reference
from ._engine_common import Action, SelfCheck, fusable, vllm_action
from .model import apply_action, run_plan, walk
from .ops import init_
from .vllm_invariant import initialize_invariant_dummy_weights  # issue 21

__all__ = [
    "generation",
    "initialize_dummy_weights",
    "initialize_invariant_dummy_weights",
    "initialize_single_dummy_weight",
    "version",
]

# Set by the plugin to vLLM's own functions before it replaces them in the loader.
originals: dict[str, Callable[..., Any]] = {}
_checks: dict[Any, SelfCheck] = {}
_platform: tuple[bool, bool] | None = None


def version() -> str | None:
    """The installed vLLM's version, or None. Read from the package metadata unless vLLM
    is imported already (no import of vLLM for this)."""
    module = sys.modules.get("vllm")
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    return _metadata_version()


@functools.cache
def _metadata_version() -> str | None:  # cached: the walk over sys.path costs ~1 ms a call
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def generation(v: str | None = None) -> int:
    """Which dummy-weight semantics a vLLM version has: 28 (0.28, 0.29), 30 (0.30-0.32) or
    33 (0.33 and later, and when vLLM is not installed: the latest matched)."""
    return _generation_of(version() if v is None else v)


@functools.cache
def _generation_of(v: str | None) -> int:
    if v is None:
        return 33
    try:
        major, minor = (int(x) for x in v.split("+")[0].split(".")[:2])
    except ValueError:
        return 33
    if (major, minor) >= (0, 33):
        return 33
    return 30 if (major, minor) >= (0, 30) else 28


def _vllm_platform() -> tuple[bool, bool]:
    """(is_tpu, is_rocm) as vLLM sees the platform; without vLLM: (False, ROCm torch)."""
    global _platform
    if _platform is None:
        if version() is None:
            _platform = (False, torch.version.hip is not None)
        else:
            from vllm.platforms import current_platform

            _platform = (bool(current_platform.is_tpu()), bool(current_platform.is_rocm()))
    return _platform


def original_single() -> Callable[..., Any] | None:
    """vLLM's own ``initialize_single_dummy_weight``, or None without vLLM."""
    if "single" in originals:
        return originals["single"]
    if version() is None:
        return None
    from vllm.model_executor.model_loader import weight_utils

    f = weight_utils.initialize_single_dummy_weight
    return None if f is initialize_single_dummy_weight else f


def self_check(original: Callable[..., Any] | None) -> SelfCheck:
    """The once-per-(device, dtype) check of our fused fill against ``original`` (vLLM's
    function called with explicit bounds: its float path), or the reference path."""
    if original not in _checks:
        if original is None:
            _checks[None] = SelfCheck("vLLM dummy weights", reference.new_path)
        else:
            _checks[original] = SelfCheck(
                "vLLM initialize_single_dummy_weight",
                lambda t, low, high, seed: original(t, low, high, seed),
            )
    return _checks[original]


def plan_single(
    param: torch.Tensor,
    low: float | None,
    high: float | None,
    seed: int,
    name: str,
    gen: int,
    original: Callable[..., Any] | None,
) -> Action:
    """The action for one tensor: ``uniform`` where we fill it (fused, self-checked),
    else a call of vLLM's own function with the arguments the loader gave, else (no vLLM)
    our reproduction of vLLM's branch."""
    tpu, rocm = _vllm_platform()
    action = vllm_action(param, low, high, name, gen, tpu=tpu, rocm=rocm)
    if action.kind == "skip" or original is None:
        return action
    if (
        action.kind == "uniform"
        and fusable(param)
        and self_check(original).passed(param, action.low, action.high)
    ):
        return action
    if gen >= 33:
        return Action("call", value=lambda: original(param, low, high, seed, name=name))
    lo = -1e-3 if low is None else low  # the older signature has these defaults
    hi = 1e-3 if high is None else high
    return Action("call", value=lambda: original(param, lo, hi, seed))


@torch.no_grad()
def initialize_single_dummy_weight(
    param: torch.Tensor,
    low: float | None = None,
    high: float | None = None,
    seed: int = 1234,
    name: str = "",
) -> None:
    """vLLM's ``initialize_single_dummy_weight``, the installed version's semantics.

    vLLM >= 0.33: meta tensors skipped; a ``dummy_weight_value`` attribute is filled in;
    E8M0 tensors and uint8 tensors whose ``name`` contains "scale" get byte 120; int8,
    uint8 and packed FP4 tensors random bytes; other integers untouched (zeroed on
    ROCm); floats uniform in [low, high), ±1.0 for 8-bit floats and ±1e-3 otherwise
    where a bound is None. vLLM 0.30-0.32: meta skipped, ``dummy_weight_value``, floats
    only, None bounds read as ±1e-3 (those versions default to it). 0.28-0.29: the
    same without ``dummy_weight_value``. ``name`` is used from 0.33 on.
    """
    gen = generation()
    original = original_single()
    action = plan_single(param, low, high, seed, name, gen, original)
    if action.kind == "error":
        kind, message = action.value
        raise kind(f"fp8_dummy: {message}")
    if action.kind == "uniform":  # one tensor: straight to the operator, no planning
        lo, hi = action.low, action.high
        if fusable(param) and self_check(original).passed(param, lo, hi):
            init_(param.data, lo, hi, seed)
        else:  # only without vLLM (with it, plan_single hands these to vLLM)
            reference.new_path(param, lo, hi, seed)
        return
    apply_action(param, action, seed)


def initialize_dummy_weights(
    model: torch.nn.Module,
    model_config: Any = None,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
) -> None:
    """vLLM <= 0.30's ``initialize_dummy_weights(model, model_config, low, high, seed)``:
    every tensor of ``model.state_dict()`` through that version's single-tensor function
    (floating tensors only; state_dict's detached tensors carry no
    ``dummy_weight_value``). ``model_config`` is accepted and unused, as in vLLM. CUDA
    tensors are batched (:func:`fp8_dummy.init_many_`); same bytes."""
    gen = min(generation(), 30)
    installed = generation() < 33  # vLLM's own single function has these semantics
    original = original_single() if installed else None
    entries = [
        (name, t, plan_single(t, low, high, seed, "", gen, original))
        for name, _, t in walk(model, "state_dict")
    ]
    run_plan(entries, seed, check=self_check(original))
