"""Code that runs while other packages import, so it imports nothing but the standard
library (no torch, no fp8_dummy): the after-import hook the engine plugins use, and the
TensorRT-LLM opt-in.

TensorRT-LLM has no plugin entry points, and its workers are processes of their own (MPI
or Ray), so a patch made in the user's script does not reach them. fp8_dummy's wheel
therefore installs ``fp8_dummy_startup.pth`` next to the package: Python runs its one line
at the start of every process, and the line does nothing unless ``FP8_DUMMY_TRTLLM`` is
1, true, on or yes. Then it loads this file (by path, without importing the fp8_dummy
package: see ``startup/_fp8_dummy_startup.py``) and calls :func:`install_trtllm`, which
waits for TensorRT-LLM to import its model loader and then replaces that module's
``initialize_dummy_weights`` with :func:`fp8_dummy.trtllm.patch`'s. Every step is guarded:
whatever fails leaves TensorRT-LLM's own function in place and warns once.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import warnings
from types import ModuleType
from typing import Any, Callable

__all__ = ["TRTLLM_ENV", "TRTLLM_LOADER", "after_import", "install_trtllm", "trtllm_asked"]

TRTLLM_ENV = "FP8_DUMMY_TRTLLM"
TRTLLM_LOADER = "tensorrt_llm._torch.pyexecutor.model_loader"


def trtllm_asked() -> bool:
    """Whether the TensorRT-LLM opt-in is on in this process (off unless asked)."""
    return os.environ.get(TRTLLM_ENV, "").strip().lower() in ("1", "true", "on", "yes")


def install_trtllm() -> None:
    """The opt-in: once TensorRT-LLM imports its model loader (at once if it has), patch it
    through ``fp8_dummy.trtllm.patch``. Never raises."""
    try:
        if trtllm_asked():
            after_import(TRTLLM_LOADER, _patch_trtllm)
    except Exception as e:  # noqa: BLE001 (a start-up hook must never break the process)
        _warn("installation", e)


def _patch_trtllm(module: ModuleType) -> None:
    try:
        from fp8_dummy import trtllm  # torch and fp8_dummy only now, inside TensorRT-LLM's import

        trtllm.patch(module)
    except Exception as e:  # noqa: BLE001 (TensorRT-LLM must import whatever happens here)
        _warn("patch of TensorRT-LLM's model loader", e)


def _warn(what: str, e: Exception) -> None:
    warnings.warn(
        f"fp8_dummy: the TensorRT-LLM hook's {what} failed ({type(e).__name__}: {e}); "
        "TensorRT-LLM's own dummy weights are used",
        RuntimeWarning,
        stacklevel=2,
    )


def _ours(finder: object) -> bool:
    """Whether a meta path finder is an _AfterImport of any copy of this file: the start-up
    shim loads it by path, the package imports it as fp8_dummy._startup, and a .pth file can
    run twice (a venv's lib64 -> lib link), so classes differ but the mark does not."""
    return getattr(finder, "_fp8_dummy_after_import", False) is True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after ``name`` is first imported (so we neither
    import the engine's module early nor miss it)."""

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
    """``callback(module)`` now if ``name`` is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    elif not any(_ours(f) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))
