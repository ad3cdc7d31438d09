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
from ._engine_common import Action, fusable, probe_tensor, vllm_action
from ._proof import corrupt_, fault, first_difference, proven
from ._versions import major_minor
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
    release = major_minor(v)
    if release is None or release >= (0, 33):
        return 33
    return 30 if release >= (0, 30) else 28


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
    try:
        from vllm.model_executor.model_loader import weight_utils
    except Exception:  # noqa: BLE001 (a vLLM whose loader does not import: ours alone)
        return None
    f = getattr(weight_utils, "initialize_single_dummy_weight", None)
    return None if f is initialize_single_dummy_weight else f


def fused_fill_(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    """Our fill of a tensor vLLM sends through its float path (FP8_DUMMY_FAULT=vllm corrupts
    one byte of it, for the tests of the proof)."""
    init_(t, low, high, seed)
    if fault("vllm"):
        corrupt_(t)


def _call_text(args: tuple, kwargs: dict) -> str:
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if k != "name"]
    return "(" + ", ".join(["t", *shown, "name=..."]) + ")"


def proven_fused(
    param: torch.Tensor,
    call: tuple[tuple, dict],
    name: str,
    gen: int,
    original: Callable[..., Any] | None,
) -> bool:
    """Whether our fused fill may stand in for vLLM's float path for tensors like ``param``.

    Once per (vLLM version, device, dtype, local name, number of dimensions, the loader's
    arguments), a probe: vLLM's own function called on a small poisoned tensor exactly as
    the loader called it (``call``: the arguments after the tensor), and our plan of that
    call, compared byte for byte (fp8_dummy/_proof.py). Without vLLM, the reference path
    (docs/engines.md) is the function. A version we have not matched is used only where
    its probes pass; a refusal warns once, naming the version and the key."""
    args, kwargs = call
    version_text = version() or "not installed"
    local = name.rsplit(".", 1)[-1]
    key = (
        f"vllm: vLLM {version_text} {param.device} {param.dtype} name={local!r} "
        f"dims={min(param.dim(), 2)} call={_call_text(args, kwargs)}"
    )

    def probe() -> str | None:
        theirs, ours = probe_tensor(param), probe_tensor(param)
        if original is None:
            low, high, seed = _bound(args, kwargs)
            action = vllm_action(ours, low, high, name, gen)
            reference.new_path(theirs, action.low, action.high, seed)
        else:
            original(theirs, *args, **kwargs)
            low, high, seed = _bound(args, kwargs)
            action = vllm_action(ours, low, high, name, gen)
        if action.kind != "uniform":
            return f"our plan is {action.kind!r}, not the float path"
        fused_fill_(ours, action.low, action.high, seed)
        return first_difference(ours, theirs)

    return proven(key, probe)


def _bound(args: tuple, kwargs: dict) -> tuple[float | None, float | None, int]:
    """(low, high, seed) of a call of vLLM's signature (after the tensor)."""
    values = dict(zip(("low", "high", "seed"), args))
    values.update({k: v for k, v in kwargs.items() if k in ("low", "high", "seed")})
    return values.get("low"), values.get("high"), values.get("seed", 1234)


def plan_single(
    param: torch.Tensor,
    low: float | None,
    high: float | None,
    seed: int,
    name: str,
    gen: int,
    original: Callable[..., Any] | None,
    call: tuple[tuple, dict] | None = None,
) -> Action:
    """The action for one tensor: ``uniform`` where we fill it (fused, proven), else a call
    of vLLM's own function with the arguments the loader gave (``call``, the arguments after
    the tensor; default: these values as keywords), else (no vLLM) our reproduction of
    vLLM's branch."""
    tpu, rocm = _vllm_platform()
    action = vllm_action(param, low, high, name, gen, tpu=tpu, rocm=rocm)
    if action.kind == "skip":
        return action
    if call is None:
        call = ((low, high, seed), {"name": name}) if gen >= 33 else ((low, high, seed), {})
        if gen < 33:  # the older signature has these defaults
            call = ((-1e-3 if low is None else low, 1e-3 if high is None else high, seed), {})
    if (
        action.kind == "uniform"
        and fusable(param)
        and proven_fused(param, call, name, gen, original)
    ):
        return action
    if original is None:
        return action if action.kind != "uniform" else Action("reference", action.low, action.high)
    args, kwargs = call
    return Action("call", value=lambda: original(param, *args, **kwargs))


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

    The float path runs fused where its probe against vLLM's own function passed (once per
    kind of tensor, :func:`proven_fused`); everything else is vLLM's own function.
    """
    fill_single(param, ((low, high, seed), {"name": name}), name)


def fill_single(param: torch.Tensor, call: tuple[tuple, dict], name: str) -> None:
    """One tensor as vLLM's loader asked for it: ``call`` = the arguments after the tensor."""
    gen = generation()
    original = original_single()
    low, high, seed = _bound(*call)
    if gen < 33:
        call = ((-1e-3 if low is None else low, 1e-3 if high is None else high, seed), {})
    action = plan_single(param, low, high, seed, name, gen, original, call)
    if action.kind == "error":
        kind, message = action.value
        raise kind(f"fp8_dummy: {message}")
    if action.kind == "uniform":  # one tensor: straight to the operator, no planning
        fused_fill_(param.data, action.low, action.high, seed)
    elif action.kind == "reference":
        reference.new_path(param, action.low, action.high, seed)
    else:
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
    run_plan(entries, seed, fault_path="vllm")
