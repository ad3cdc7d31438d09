"""Python's cycle collector paused while a fill walks, plans and runs, and while a logical
checkpoint is made (:func:`no_cycle_collection`: the engines' ``fill()``, ``plan()`` and
``run()``; the realistic wing's ``config_checkpoint`` and ``logical_model``). Each makes a few
small objects per tensor, none in a cycle (refcounting frees them), yet enough of them to set
off full collections of the engine's whole heap, each the size of that heap (docs/engines.md,
The core, has the measurements)."""

from __future__ import annotations

import functools
import gc
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["no_cycle_collection", "paused"]

_lock = threading.Lock()
_depth = 0  # pauses under way, in every thread
_was_enabled = False  # the collector's state before the first of them


class no_cycle_collection:  # noqa: N801 (a context manager, named as one is used)
    """The collector paused for the block, resumed as it was after the last block under way
    (fills in several threads, or nested: a plan's probes plan too). A class, not a
    generator: a fill of one tensor (an engine's per-tensor function) enters it twice."""

    def __enter__(self) -> None:
        global _depth, _was_enabled
        with _lock:
            if _depth == 0:
                _was_enabled = gc.isenabled()
                gc.disable()
            _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def paused(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with the collector paused (:class:`no_cycle_collection`)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        with no_cycle_collection():
            return function(*args, **kwargs)

    return run


def _after_fork_in_child() -> None:
    """A child forked during a fill runs none of it: the collector as it was before the fill,
    and a lock no thread of the child holds."""
    global _lock, _depth
    _lock = threading.Lock()
    if _depth:
        _depth = 0
        if _was_enabled:
            gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
