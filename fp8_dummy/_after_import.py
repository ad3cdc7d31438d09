"""The one after-import hook of the package (DTensor rules, the engine plugins, the
TensorRT-LLM start-up shim): standard library only, as the shim (startup/_fp8_dummy_startup.py)
loads this file by path before torch is imported."""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType
from typing import Any, Callable

__all__ = ["after_import"]


def _ours(finder: object) -> bool:
    """An _AfterImport of any copy of this file (loaded by path and as a module; a .pth can
    run twice through a venv's lib64 -> lib link): the classes differ, the mark does not."""
    return getattr(finder, "_fp8_dummy_after_import", False) is True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after ``name`` is first imported."""

    _fp8_dummy_after_import = True

    def __init__(self, name: str, callback: Callable[[ModuleType], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = None
        for finder in sys.meta_path:  # whoever would have found it (never another of ours)
            if not _ours(finder) and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return None
        inner, callback = spec.loader, self.callback

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return inner.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                inner.exec_module(module)
                module.__loader__ = module.__spec__.loader = inner
                callback(module)

        spec.loader = Loader()
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        return spec


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """``callback(module)`` now if ``name`` is imported, else right after its import (so an
    engine's module is neither imported early nor missed)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    elif not any(_ours(f) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))
