"""The vLLM plugin (entry point ``fp8_dummy`` of ``vllm.general_plugins``; docs/engines.md),
run by vLLM in every process it starts: once vLLM imports its dummy loader (never earlier),
``initialize_single_dummy_weight`` (0.28/0.29: also ``initialize_dummy_weights``) becomes
ours, and the load formats ``fp8_dummy`` and ``fp8_dummy_invariant`` are registered. Every
callback is guarded: whatever fails leaves vLLM's own functions, with one warning.
``FP8_DUMMY_VLLM=0`` (or vLLM's ``VLLM_PLUGINS`` without ``fp8_dummy``) turns it off."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import ModuleType
from typing import Any, Callable

import torch

from ... import _after_import, _versions
from .. import _hooks, core
from .. import vllm as fv
from . import invariant
from .rules import generation, semantics, version

ENV = "FP8_DUMMY_VLLM"
DUMMY_LOADER = "vllm.model_executor.model_loader.dummy_loader"
LOADER_PACKAGE = "vllm.model_executor.model_loader"
LOAD_FORMAT = "fp8_dummy"
WHO = "the vLLM plugin"
logger = logging.getLogger("vllm.fp8_dummy")  # a child of vLLM's: its log, its format


def guarded(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    return _hooks.guarded(WHO, "vLLM", what, fn, *args)


def register() -> None:
    """The entry point (idempotent; never raises)."""
    guarded("register", _register)


def _register() -> None:
    if not _hooks.enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to vLLM", ENV, os.environ[ENV])
        return
    v = version()
    if v is None:
        return
    if not _at_least(v, (0, 28)):
        logger.info("fp8_dummy: vLLM %s predates the versions matched (0.28+), not used", v)
        return
    _after_import.after_import(
        DUMMY_LOADER, lambda m: guarded("patch of the dummy loader", _patch, m)
    )
    _after_import.after_import(LOADER_PACKAGE, _register_load_formats)


def unregister() -> None:
    """Give the dummy loader its own functions back (tests; the load formats stay)."""
    module = sys.modules.get(DUMMY_LOADER)
    if module is not None and getattr(module, "_fp8_dummy_patched", False):
        module.initialize_single_dummy_weight = fv.originals["single"]
        if "model" in fv.originals:
            module.initialize_dummy_weights = fv.originals["model"]
        module._fp8_dummy_patched = False
    _after_import.forget()


def _at_least(v: str, wanted: tuple[int, int]) -> bool:
    release = _versions.major_minor(v)
    return release is None or release >= wanted  # an unreadable version is a new one


def what_happens() -> str:
    """The log line's account of what goes through fp8_dummy in this process."""
    v = version()
    proof = "each kind of tensor after a probe against vLLM's own function"
    where = f"through fp8_dummy ({proof})"
    if _at_least(v or "0", (0, 34)):
        where = f"through fp8_dummy where vLLM {v}, newer than 0.33, passes {proof}"
    if torch.version.hip is not None:
        return f"CPU dummy weights {where}; ROCm tensors left to vLLM (our kernels are CUDA's)"
    if torch.version.cuda is not None and not core.cuda_kernels():
        return (
            f"CPU dummy weights {where}; CUDA kernels not built (a CPU-only build of "
            "fp8_dummy): CUDA dummy weights left to vLLM"
        )
    return f"dummy weights {where}"


def _patch(module: ModuleType) -> None:
    if getattr(module, "_fp8_dummy_patched", False):
        return
    own = getattr(module, "initialize_single_dummy_weight", None)
    if own is None:  # a loader that does not call the function by this name: nothing to prove
        logger.info(
            "fp8_dummy: vLLM %s's dummy loader has no initialize_single_dummy_weight: "
            "dummy weights left to vLLM",
            version(),
        )
        return
    fv.originals.setdefault("single", own)
    module.initialize_single_dummy_weight = _single
    if generation() < 30 and hasattr(module, "initialize_dummy_weights"):  # its loader's call
        fv.originals.setdefault("model", module.initialize_dummy_weights)
        module.initialize_dummy_weights = _model
    module._fp8_dummy_patched = True
    logger.info("fp8_dummy: vLLM %s: %s", version(), what_happens())


def _single(param: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """The loader's per-tensor function: ours where proven for the call as the loader made it;
    whatever fails in ours, vLLM's own."""
    ours = lambda p, *a, **k: fv.fill_single(p, (a, k))  # noqa: E731
    _hooks.fallback(
        WHO, "vLLM", "per-tensor fill", ours, fv.originals["single"], param, *args, **kwargs
    )


def _model(*args: Any, **kwargs: Any) -> None:
    own = fv.originals["model"]
    _hooks.fallback(
        WHO, "vLLM", "whole-model fill", fv.initialize_dummy_weights, own, *args, **kwargs
    )


def _register_load_formats(package: ModuleType) -> None:
    guarded("registration of --load-format fp8_dummy", _register_load_format, package)
    guarded(
        f"registration of --load-format {invariant.LOAD_FORMAT}",
        invariant.register_load_format,
        package,
    )


def _register_load_format(package: ModuleType) -> None:
    if LOAD_FORMAT in getattr(package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        return
    if not hasattr(package, "register_model_loader"):
        return  # a registry we do not know: only the per-tensor patch
    dl = importlib.import_module(DUMMY_LOADER)  # a lazy package may not have imported it yet
    # The per-tensor function too: without it nothing proves our plan against this vLLM.
    needed = ("DummyModelLoader", "get_layerwise_info", "get_layer_tensors")
    if all(hasattr(dl, n) for n in (*needed, "initialize_single_dummy_weight")):
        package.register_model_loader(LOAD_FORMAT)(_loader_class(dl))


def _loader_class(dl: ModuleType) -> type:
    class FP8DummyModelLoader(dl.DummyModelLoader):
        """``--load-format fp8_dummy``: the bytes of ``dummy``, the whole model's float tensors
        filled together (CUDA: one launch per device, dtype and bounds); online-quantized
        layers through vLLM's own processing, in order. Every tensor is checked first."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            sem, original, call = semantics(), fv.original_single(), fv.loader_call(generation())
            groups: list = [[]]  # tensors between online-quantized layers, in the loader's order
            for layer in model.modules():
                info = dl.get_layerwise_info(layer)
                if info.can_load():
                    groups += [(layer, info), []]
                    continue
                for name, t in dl.get_layer_tensors(layer).items():
                    if name not in layer._non_persistent_buffers_set:
                        groups[-1].append((name, t))
            plans = [
                g if isinstance(g, tuple) else core.plan(g, sem, call, engine=original)
                for g in groups
            ]
            for p in plans:
                if isinstance(p, tuple):
                    self._process_online_quant_layer(*p)
                else:
                    core.run(p)

    return FP8DummyModelLoader
