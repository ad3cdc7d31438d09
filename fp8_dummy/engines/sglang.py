"""SGLang 0.5.23: a drop-in for ``sglang.srt.model_loader.weight_utils.initialize_dummy_weights``
and its plugin (entry point ``fp8_dummy`` of ``sglang.srt.plugins``: an AROUND hook through
SGLang's hook registry, which rebinds every imported copy, the dummy loader's included).
``FP8_DUMMY_SGLANG=0`` (or ``SGLANG_PLUGINS`` without ``fp8_dummy``) turns it off. For an
SGLang without plugins: ``sglang.srt.model_loader.loader.initialize_dummy_weights =
fp8_dummy.sglang.initialize_dummy_weights``. Importing this imports no SGLang."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import sys
from typing import Any, Callable

import torch

from . import _hooks, core

__all__ = ["SEMANTICS", "initialize_dummy_weights", "register"]

ENV = "FP8_DUMMY_SGLANG"
TARGET = "sglang.srt.model_loader.weight_utils.initialize_dummy_weights"
logger = logging.getLogger(__name__)  # SGLang configures the root logger


def rule(t: torch.Tensor, low: float, high: float, name: str) -> core.Action:
    """The loop body for one ``state_dict`` entry: floating tensors only; names ending in
    ``weight_scale_inv``/``weight_scale_2`` 1.0; meta tensors refused (no generator)."""
    if not torch.is_floating_point(t):
        return core.SKIP
    if name.endswith(("weight_scale_inv", "weight_scale_2")):
        return core.SKIP if t.is_meta else core.Action(core.Kind.FILL, value=1.0)
    if t.is_meta:
        return core.error(RuntimeError, "meta tensor: SGLang cannot make a generator for it")
    return core.Action(core.Kind.UNIFORM, float(low), float(high))


PARAMS = (("low", -1e-3), ("high", 1e-3), ("seed", 1234))
SEMANTICS = core.Semantics("sglang", "SGLang 0.5.23 semantics", rule, PARAMS, temp="old")
core.SEMANTICS["sglang-0.5"] = SEMANTICS


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> None:
    """SGLang's function, byte for byte: every floating ``state_dict`` tensor with a fresh
    generator seeded with ``seed``; ``*weight_scale_inv``/``*weight_scale_2`` set to 1.0; the
    rest uniform in [low, high). Where SGLang raises, this raises before writing anything.
    Proven against SGLang's own function where it is loaded, else its semantics."""
    _fill(_sglang_function(), model, (low, high, seed), {})


def _fill(original: Callable | None, model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
    sem = SEMANTICS if original is None else _installed()
    return core.fill_model(model, sem, (args, kwargs), engine=original)


@functools.cache
def _installed() -> core.Semantics:
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    return core.Semantics("sglang", f"SGLang {version}", rule, PARAMS, temp="old")


def _sglang_function() -> Callable[..., Any] | None:
    """SGLang's own function if its weight_utils is loaded (never imported here)."""
    f = getattr(
        sys.modules.get("sglang.srt.model_loader.weight_utils"), "initialize_dummy_weights", None
    )
    while f is not None and getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__  # under our hook: the function it wraps
    return None if f is initialize_dummy_weights else f


def register() -> None:
    """The entry point: the AROUND hook on SGLang's function. Never raises."""
    _hooks.guarded("the SGLang plugin", "SGLang", "registration", _register)


def _register() -> None:
    if not _hooks.enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to SGLang", ENV, os.environ[ENV])
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:  # an SGLang without hooks: the one-line install is the way
        logger.info("fp8_dummy: this SGLang has no hook registry; see fp8_dummy.sglang")
        return
    HookRegistry.register(TARGET, _around, HookType.AROUND)
    what = "each kind of tensor after a probe against SGLang's own function"
    if torch.version.cuda is not None and not core.cuda_kernels():
        what += "; CUDA kernels not built: CUDA dummy weights left to SGLang"
    logger.info("fp8_dummy: %s: dummy weights through fp8_dummy (%s)", _installed().name, what)


def _around(original: Callable[..., Any], model: torch.nn.Module, *args: Any, **kw: Any) -> Any:
    """The hook: ours where proven; whatever fails in ours, SGLang's own function."""

    def ours(m: torch.nn.Module, *a: Any, **k: Any) -> Any:
        return _fill(original, m, a, k)

    return _hooks.fallback(
        "the SGLang plugin", "SGLang", "fill", ours, original, model, *args, **kw
    )
