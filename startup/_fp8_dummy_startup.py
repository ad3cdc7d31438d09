"""fp8_dummy's start-up shim, installed by its wheel at the top of site-packages beside
``fp8_dummy_startup.pth``, whose line imports it only when ``FP8_DUMMY_TRTLLM`` asks for
the TensorRT-LLM hook (docs/trtllm.md). It loads ``fp8_dummy/_startup.py`` by path (the
fp8_dummy package itself imports torch, which must wait until TensorRT-LLM imports it) and
installs the hook. Standard library only; never raises."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

HOOKS = "_fp8_dummy_startup_hooks"  # fp8_dummy/_startup.py, loaded once per process


def install() -> None:
    try:
        module = sys.modules.get(HOOKS)  # a .pth can run twice (a venv's lib64 -> lib link)
        if module is None:
            package = importlib.util.find_spec("fp8_dummy")  # finds the package, imports nothing
            if package is None or not package.submodule_search_locations:
                raise ImportError("fp8_dummy is not importable in this process")
            path = os.path.join(list(package.submodule_search_locations)[0], "_startup.py")
            spec = importlib.util.spec_from_file_location(HOOKS, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[HOOKS] = module
        module.install_trtllm()
    except Exception as e:  # noqa: BLE001 (a start-up hook must never stop Python)
        warnings.warn(
            f"fp8_dummy: the TensorRT-LLM hook could not be installed ({type(e).__name__}: "
            f"{e}); TensorRT-LLM's own dummy weights are used",
            RuntimeWarning,
            stacklevel=2,
        )
