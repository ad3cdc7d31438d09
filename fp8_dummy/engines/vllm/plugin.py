"""The vLLM plugin (entry point ``fp8_dummy`` of ``vllm.general_plugins``; docs/engines.md), run
by vLLM in every process it starts: once vLLM imports its dummy loader (never earlier), its
``initialize_single_dummy_weight`` (0.28/0.29: also ``initialize_dummy_weights``) becomes ours,
and the load formats ``fp8_dummy`` and ``fp8_dummy_invariant`` are registered. Every callback
is guarded. ``FP8_DUMMY_VLLM=0`` (or ``VLLM_PLUGINS`` without ``fp8_dummy``) turns it off."""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any, Callable

import torch

from ... import _after_import, _versions
from .. import core
from .. import vllm as fv
from . import invariant
from .rules import generation, semantics, version

ENV = "FP8_DUMMY_VLLM"
DUMMY_LOADER = "vllm.model_executor.model_loader.dummy_loader"
LOADER_PACKAGE = "vllm.model_executor.model_loader"
LOAD_FORMAT = "fp8_dummy"
logger = logging.getLogger("vllm.fp8_dummy")  # a child of vLLM's: its log, its format


def guarded(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    return core.guarded("the vLLM plugin", "vLLM", what, fn, *args)


def register() -> None:
    """The entry point (idempotent; never raises)."""
    guarded("register", _register)


def _register() -> None:
    if not core.enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to vLLM", ENV, os.environ[ENV])
        return
    v = version()
    if v is not None and (_versions.major_minor(v) or (1, 0)) < (0, 28):
        logger.info("fp8_dummy: vLLM %s predates the versions matched (0.28+), not used", v)
    elif v is not None:
        _after_import.after_import(
            DUMMY_LOADER, lambda m: guarded("patch of the dummy loader", _patch, m)
        )
        _after_import.after_import(LOADER_PACKAGE, _register_load_formats)


def what_happens() -> str:
    """The log line's account of what goes through fp8_dummy in this process."""
    v = version()
    newer = v is not None and (_versions.major_minor(v) or (1, 0)) >= (0, 34)
    return core.account("vLLM", f"where vLLM {v}, newer than 0.33, passes " if newer else "")


def _patch(module: ModuleType) -> None:
    own = getattr(module, "initialize_single_dummy_weight", None)
    if own is None:  # a loader that does not call the function by this name: nothing to prove
        logger.info("fp8_dummy: vLLM %s: no initialize_single_dummy_weight: not used", version())
    if own is None or getattr(module, "_fp8_dummy_patched", False):
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

    def ours(p: torch.Tensor, *a: Any, **k: Any) -> None:
        fv.fill_single(p, (a, k))

    who = ("the vLLM plugin", "vLLM", "per-tensor fill")
    core.fallback(*who, ours, fv.originals["single"], param, *args, **kwargs)


def _model(*args: Any, **kwargs: Any) -> None:
    who = ("the vLLM plugin", "vLLM", "whole-model fill")
    core.fallback(*who, fv.initialize_dummy_weights, fv.originals["model"], *args, **kwargs)


def _register_load_formats(package: ModuleType) -> None:
    guarded(f"registration of --load-format {LOAD_FORMAT}", _register_load_format, package)
    what = f"registration of --load-format {invariant.LOAD_FORMAT}"
    guarded(what, invariant.register_load_format, package)


def _register_load_format(package: ModuleType) -> None:
    if LOAD_FORMAT in getattr(package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        return
    dl = importlib.import_module(DUMMY_LOADER)  # a lazy package may not have imported it yet
    # The per-tensor function too: without it nothing proves our plan against this vLLM.
    needed = ("DummyModelLoader", "get_layerwise_info", "get_layer_tensors")
    needed += ("initialize_single_dummy_weight",)
    if hasattr(package, "register_model_loader") and all(hasattr(dl, n) for n in needed):
        package.register_model_loader(LOAD_FORMAT)(_loader_class(dl))


def _loader_class(dl: ModuleType) -> type:
    class FP8DummyModelLoader(dl.DummyModelLoader):
        """``--load-format fp8_dummy``: the bytes of ``dummy``, the whole model's float tensors
        filled together (CUDA: one launch per device, dtype and bounds); online-quantized
        layers through vLLM's own processing, in order. Every tensor is checked first."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            sem, own, call = semantics(), fv.original_single(), fv.loader_call(generation())
            steps: list = [[]]  # tensors between online-quantized layers, in the loader's order
            for layer in model.modules():
                info = dl.get_layerwise_info(layer)
                if info.can_load():
                    steps += [(layer, info), []]
                    continue
                for name, t in dl.get_layer_tensors(layer).items():
                    if name not in layer._non_persistent_buffers_set:
                        steps[-1].append((name, t))
            steps = [
                s if isinstance(s, tuple) else core.plan(s, sem, call, engine=own) for s in steps
            ]
            for step in steps:
                if isinstance(step, tuple):
                    self._process_online_quant_layer(*step)
                else:
                    core.run(step)

    return FP8DummyModelLoader
