"""SGLang: a drop-in for ``sglang.srt.model_loader.weight_utils.initialize_dummy_weights``
and a plugin (entry point ``fp8_dummy`` of the group ``sglang.srt.plugins``) that installs
it through SGLang's hook registry. Importing this module does not import SGLang.

One-line install, for SGLang without plugins (its dummy loader imports the function by
name, so the loader's binding is the one to replace)::

    import fp8_dummy.sglang, sglang.srt.model_loader.loader as loader
    loader.initialize_dummy_weights = fp8_dummy.sglang.initialize_dummy_weights

``FP8_DUMMY_SGLANG=0`` (or false/off/no) turns the plugin off; so does SGLang's own
allow-list ``SGLANG_PLUGINS`` without ``fp8_dummy`` in it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
from typing import Any, Callable

import torch

from . import reference
from ._engine_common import _cuda_kernels, enabled, sglang_action, warn_fallback
from ._engine_probe import fill_whole_model
from .model import run_plan, walk

__all__ = ["initialize_dummy_weights", "register"]

ENV = "FP8_DUMMY_SGLANG"
TARGET = "sglang.srt.model_loader.weight_utils.initialize_dummy_weights"
logger = logging.getLogger(__name__)  # SGLang configures the root logger


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> None:
    """SGLang 0.5.23's ``initialize_dummy_weights``, byte for byte: every floating tensor of
    ``model.state_dict()`` (parameters and persistent buffers) with a fresh generator of
    its device seeded with ``seed``; names ending in ``weight_scale_inv`` or
    ``weight_scale_2`` set to 1.0; the rest uniform in [low, high) through the float16
    temp for 8-bit floats, ``uniform_`` otherwise. Integer tensors are untouched. Where
    SGLang raises (a meta tensor that is not such a scale, packed FP4), so does this,
    before anything is written. CUDA tensors are batched (:func:`fp8_dummy.init_many_`).
    """
    _fill(_sglang_function(), model, (low, high, seed))


def register() -> None:
    """The plugin's entry point: an AROUND hook on SGLang's ``initialize_dummy_weights``
    (SGLang rebinds every ``from ... import`` copy of it, the loader's included)."""
    try:
        _register()
    except Exception as e:  # noqa: BLE001 (a plugin must never break SGLang's start)
        warn_fallback("the SGLang plugin", "SGLang", "registration", e)


def _register() -> None:
    if not enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to SGLang", ENV, os.environ[ENV])
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:  # an SGLang without hooks: the one-line install is the way
        logger.info("fp8_dummy: this SGLang has no hook registry; see fp8_dummy.sglang")
        return
    HookRegistry.register(TARGET, _around, HookType.AROUND)
    logger.info(
        "fp8_dummy: SGLang %s: dummy weights through fp8_dummy (%s)", _version(), _what_happens()
    )


def _what_happens() -> str:
    proof = "each kind of tensor after a probe against SGLang's own function"
    if torch.version.cuda is not None and not _cuda_kernels():
        return f"{proof}; CUDA kernels not built: CUDA dummy weights left to SGLang"
    if torch.version.hip is not None:
        return f"{proof}; ROCm tensors left to SGLang"
    return proof


def _around(original: Callable[..., Any], model: torch.nn.Module, *args: Any, **kw: Any) -> Any:
    """The hook: ours where proven; whatever fails in ours, SGLang's own function (if that
    raises too, its error is the engine's and propagates)."""
    try:
        return _fill(original, model, args, kw)
    except Exception as e:  # noqa: BLE001
        result = original(model, *args, **kw)
        warn_fallback("the SGLang plugin", "SGLang", "fill", e)
        return result


def _fill(
    original: Callable[..., Any] | None,
    model: torch.nn.Module,
    args: tuple = (),
    kwargs: dict | None = None,
) -> None:
    """The model as SGLang's function called with (``args``, ``kwargs``) fills it
    (_engine_probe.fill_whole_model: ours where proven against ``original``)."""
    fill_whole_model(
        "SGLang 0.5.23",
        original,
        model,
        (args, kwargs or {}),
        seed=1234,
        key=f"sglang: SGLang {_version()}",
        plan=_plan,
        run=_run,
    )


def _plan(model: torch.nn.Module, low: float, high: float) -> list:
    return [(n, t, sglang_action(t, low, high, n)) for n, _, t in walk(model, "state_dict")]


def _run(entries: list, seed: int) -> None:
    run_plan(entries, seed, reference=_reference_old, fault_path="sglang")


def _reference_old(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    reference.old_path(t, low, high, seed)  # SGLang's own float path (.to(float16))


def _sglang_function() -> Callable[..., Any] | None:
    """SGLang's own function if SGLang's weight_utils is loaded (never imported here)."""
    module = sys.modules.get("sglang.srt.model_loader.weight_utils")
    f = getattr(module, "initialize_dummy_weights", None)
    while f is not None and getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__  # under our hook: the function it wraps
    return None if f is initialize_dummy_weights else f


def _version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"
