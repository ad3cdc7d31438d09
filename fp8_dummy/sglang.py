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
import warnings
from typing import Any, Callable

import torch

from . import reference
from ._engine_common import SelfCheck, enabled, sglang_action
from .model import run_plan, walk

__all__ = ["initialize_dummy_weights", "register"]

ENV = "FP8_DUMMY_SGLANG"
TARGET = "sglang.srt.model_loader.weight_utils.initialize_dummy_weights"
logger = logging.getLogger(__name__)  # SGLang configures the root logger
_checks: dict[Any, SelfCheck] = {}
_rules_ok: dict[Any, bool] = {}


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
    _fill(_sglang_function(), model, low, high, seed)


def register() -> None:
    """The plugin's entry point: an AROUND hook on SGLang's ``initialize_dummy_weights``
    (SGLang rebinds every ``from ... import`` copy of it, the loader's included)."""
    if not enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to SGLang", ENV, os.environ[ENV])
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:  # an SGLang without hooks: the one-line install is the way
        logger.info("fp8_dummy: this SGLang has no hook registry; see fp8_dummy.sglang")
        return
    HookRegistry.register(TARGET, _around, HookType.AROUND)
    logger.info("fp8_dummy: dummy weights through fp8_dummy (SGLang %s)", _version())


def _around(original: Callable[..., Any], model: torch.nn.Module, *args: Any, **kw: Any) -> Any:
    known = set(kw) <= {"low", "high", "seed"} and len(args) + len(kw) <= 3
    if not known:  # arguments of a later SGLang: its own function decides
        return original(model, *args, **kw)
    bound = dict(zip(("low", "high", "seed"), args), **kw)
    return _fill(original, model, **bound)


def _fill(
    original: Callable[..., Any] | None,
    model: torch.nn.Module,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
) -> None:
    if original is not None and not _same_rules(original):
        original(model, low, high, seed)
        return
    entries = [(n, t, sglang_action(t, low, high, n)) for n, _, t in walk(model, "state_dict")]
    run_plan(entries, seed, check=_self_check(original), reference=_reference_old)


def _reference_old(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    reference.old_path(t, low, high, seed)  # SGLang's own float path (.to(float16))


def _sglang_function() -> Callable[..., Any] | None:
    """SGLang's own function if SGLang's weight_utils is loaded (never imported here)."""
    module = sys.modules.get("sglang.srt.model_loader.weight_utils")
    f = getattr(module, "initialize_dummy_weights", None)
    while f is not None and getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__  # under our hook: the function it wraps
    return None if f is initialize_dummy_weights else f


def _self_check(original: Callable[..., Any] | None) -> SelfCheck:
    if original not in _checks:
        if original is None:
            _checks[None] = SelfCheck("SGLang dummy weights", _reference_old)
        else:

            def theirs(t: torch.Tensor, low: float, high: float, seed: int) -> None:
                probe = torch.nn.Module()
                probe.register_buffer("probe", t)
                original(probe, low, high, seed)

            _checks[original] = SelfCheck("SGLang initialize_dummy_weights", theirs)
    return _checks[original]


def _same_rules(original: Callable[..., Any]) -> bool:
    """Once per function: do SGLang's rules (names, integers, nesting) give our bytes on a
    tiny CPU model? A later SGLang may change them; then its function is used."""
    if original not in _rules_ok:
        pair = [_probe_model(), _probe_model()]
        try:
            original(pair[0], -0.5, 0.5, 7)
            _fill(None, pair[1], -0.5, 0.5, 7)
            same = all(
                torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                for a, b in zip(pair[0].state_dict().values(), pair[1].state_dict().values())
            )
        except Exception:  # noqa: BLE001 (any difference means: use SGLang's function)
            same = False
        if not same:
            warnings.warn(
                "fp8_dummy: this SGLang's initialize_dummy_weights follows other rules than "
                "0.5.23's; it is used as is",
                RuntimeWarning,
                stacklevel=2,
            )
        _rules_ok[original] = same
    return _rules_ok[original]


def _probe_model() -> torch.nn.Module:
    m = torch.nn.Module()
    m.inner = torch.nn.Module()
    for name, dtype in (
        ("weight", torch.float8_e4m3fn),
        ("weight_scale_inv", torch.float32),
        ("weight_scale_2", torch.float32),
        ("weight_scale", torch.float32),
        ("qweight", torch.int8),
        ("packed", torch.uint8),
        ("norm", torch.bfloat16),
    ):
        t = torch.empty(5, 7, dtype=dtype)
        t.view(torch.uint8).fill_(0x55)
        m.inner.register_buffer(name, t)
    m.register_buffer("steps", torch.arange(3))
    return m


def _version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"
