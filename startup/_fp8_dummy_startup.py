"""fp8_dummy's TensorRT-LLM start-up hook (docs/trtllm.md), installed beside
fp8_dummy_startup.pth, whose line imports it only when FP8_DUMMY_TRTLLM asks. It loads
fp8_dummy/_after_import.py by path (fp8_dummy imports torch, which must wait for TensorRT-LLM)
and patches TensorRT-LLM's model loader once it is imported. Standard library only; never
raises: whatever fails leaves TensorRT-LLM's own function, with one warning."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

ENV = "FP8_DUMMY_TRTLLM"  # the names fp8_dummy/engines/trtllm.py uses too
LOADER = "tensorrt_llm._torch.pyexecutor.model_loader"
HOOK = "_fp8_dummy_after_import"  # fp8_dummy/_after_import.py, loaded once per process


def _warn(what: str, e: Exception) -> None:
    warnings.warn(
        f"fp8_dummy: the TensorRT-LLM hook{what} ({type(e).__name__}: {e}); "
        "TensorRT-LLM's own dummy weights are used",
        RuntimeWarning,
        stacklevel=3,
    )


def _patch(module: object) -> None:
    try:
        from fp8_dummy.engines import trtllm  # torch and fp8_dummy only now, inside its import

        trtllm.patch(module)
    except Exception as e:  # noqa: BLE001 (TensorRT-LLM must import whatever happens here)
        _warn("'s patch of TensorRT-LLM's model loader failed", e)


def install() -> None:
    try:
        if os.environ.get(ENV, "").strip().lower() not in ("1", "true", "on", "yes"):
            return
        hook = sys.modules.get(HOOK)  # a .pth can run twice (a venv's lib64 -> lib link)
        if hook is None:
            package = importlib.util.find_spec("fp8_dummy")  # finds the package, imports nothing
            if package is None or not package.submodule_search_locations:
                raise ImportError("fp8_dummy is not importable in this process")
            path = os.path.join(list(package.submodule_search_locations)[0], "_after_import.py")
            spec = importlib.util.spec_from_file_location(HOOK, path)
            if spec is None or spec.loader is None or not os.path.isfile(path):
                raise ImportError(f"cannot load {path}")
            hook = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(hook)
            sys.modules[HOOK] = hook
        hook.after_import(LOADER, _patch)
    except Exception as e:  # noqa: BLE001 (a start-up hook must never stop Python)
        _warn(" could not be installed", e)
