"""What the engine plugins share inside the engine: its installed version and own function,
the on/off switch, the log line, and the guard that falls back to the engine's own dummy
weights with one warning when our fill fails."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import warnings
from typing import Any, Callable

import torch

from . import checks

__all__ = ["account", "enabled", "guarded", "installed", "own_function"]


@functools.cache  # the walk over sys.path costs ~1 ms
def installed(*dists: str) -> str | None:
    """The installed version of the first of these distributions, or None."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def own_function(module: str, name: str, *ours: Callable) -> Callable | None:
    """The engine's own ``module.name`` (unwrapped) if imported already and not one of ``ours``."""
    f = getattr(sys.modules.get(module), name, None)
    while getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__
    return None if f is None or f in ours else f


def enabled(variable: str) -> bool:
    """The plugins' switch: on unless the variable is 0, false, off or no."""
    return os.environ.get(variable, "").strip().lower() not in ("0", "false", "off", "no")


def account(engine: str, where: str = "") -> str:
    """The plugins' log line: what goes through fp8_dummy in this process."""
    text = f"dummy weights through fp8_dummy ({where}each kind of tensor after a probe against "
    text += f"{engine}'s own function)"
    if torch.version.hip is not None:
        return f"{text}; ROCm tensors left to {engine} (our kernels are CUDA's)"
    if torch.version.cuda is not None and not checks.cuda_kernels():
        return f"{text}; CUDA kernels not built: CUDA dummy weights left to {engine}"
    return text


_warned: set[tuple[str, str]] = set()


def guarded(who: str, engine: str, what: str, fn: Callable, *a: Any, theirs=None, **kw) -> Any:
    """``fn(*a, **kw)``; if it raises, ``theirs(*a, **kw)`` (the engine's own function: its
    errors are the engine's) or None, and one warning per step (``who``: "the X plugin")."""
    try:
        return fn(*a, **kw)
    except Exception as e:  # noqa: BLE001 (a plugin must never break the engine)
        result = None if theirs is None else theirs(*a, **kw)
        if (who, what) not in _warned:
            _warned.add((who, what))
            text = f"fp8_dummy: {who}'s {what} failed ({type(e).__name__}: {e}); "
            warnings.warn(text + f"{engine}'s own dummy weights are used", RuntimeWarning, 2)
        return result
