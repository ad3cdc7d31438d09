"""What the integrations run inside an engine's import or load: the plugins' switch, and the
guard with its one warning (a plugin must never break the engine)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable

__all__ = ["enabled", "fallback", "guarded", "warn_fallback"]


def enabled(variable: str) -> bool:
    """The plugins' switch: on unless the variable is 0, false, off or no."""
    return os.environ.get(variable, "").strip().lower() not in ("0", "false", "off", "no")


_warned: set[tuple[str, str]] = set()


def warn_fallback(who: str, engine: str, what: str, e: Exception) -> None:
    """The one warning (per step and process) that a step of ours failed and the engine's own
    dummy weights are used. ``who``: "the vLLM plugin", ...; ``engine``: "vLLM", ..."""
    if (who, what) not in _warned:
        _warned.add((who, what))
        warnings.warn(
            f"fp8_dummy: {who}'s {what} failed ({type(e).__name__}: {e}); "
            f"{engine}'s own dummy weights are used",
            RuntimeWarning,
            stacklevel=3,
        )


def guarded(who: str, engine: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; any exception is warned about once and gives None (never raised)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 (a plugin must never break the engine)
        warn_fallback(who, engine, what, e)
        return None


def fallback(
    who: str, engine: str, what: str, ours: Callable, theirs: Callable, *a: Any, **kw: Any
):
    """``ours(*a, **kw)``; if it raises, ``theirs`` (the engine's own function: its errors are
    the engine's and propagate), then the one warning."""
    try:
        return ours(*a, **kw)
    except Exception as e:  # noqa: BLE001
        result = theirs(*a, **kw)
        warn_fallback(who, engine, what, e)
        return result
