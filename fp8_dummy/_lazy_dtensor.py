"""Import ``fp8_dummy.dtensor`` (DTensor rules for our ops) exactly when DTensor exists.

``import torch.distributed.tensor`` takes seconds, so ``import fp8_dummy`` does not do it.
A DTensor can only exist once that module is imported, and the rules must be registered
before ``torch.ops.fp8_dummy.*`` first meets one. So: register now if it is already
imported, else hook its import (one ``sys.meta_path`` finder that steps aside after it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

import torch

_TARGET = "torch.distributed.tensor"


def _register() -> None:
    try:
        from . import dtensor  # noqa: F401  (registers on import)
    except Exception as e:  # never break the user's import of torch.distributed.tensor
        warnings.warn(f"fp8_dummy: DTensor support not registered: {e!r}", stacklevel=2)


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from recursing
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module) -> None:  # noqa: ANN001
            run(module)
            del loader.exec_module  # back to the class's method
            _register()

        loader.exec_module = exec_module  # this loader instance only
        return spec


def install() -> None:
    """Called by ``fp8_dummy/__init__.py``."""
    if not torch.distributed.is_available():
        return
    if _TARGET in sys.modules:
        _register()
    elif not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
