"""vLLM (docs/engines.md): drop-ins for its dummy-weight functions, byte for byte with the
installed vLLM's, and its plugin (``vllm.general_plugins``): its dummy loader fills the whole
model as one plan where proven (:mod:`.loader`), else calls these per tensor, and the load
formats ``fp8_dummy`` and :mod:`.invariant`'s are registered (off: FP8_DUMMY_VLLM=0)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import ModuleType
from typing import Any, Callable

import torch

from ... import _after_import
from ...stateless import tensor_seed
from .. import core
from . import invariant, loader
from .invariant import UncoveredParameterError, initialize_invariant_dummy_weights
from .rules import generation, major_minor, semantics, version

__all__ = ["UncoveredParameterError", "generation", "initialize_dummy_weights"]
__all__ += ["initialize_invariant_dummy_weights", "initialize_single_dummy_weight"]
__all__ += ["register", "tensor_seed", "version"]

WEIGHT_UTILS = "vllm.model_executor.model_loader.weight_utils"
originals: dict[str, Callable[..., Any]] = {}  # vLLM's own, kept by the plugin's patches
core.SEMANTICS.update({f"vllm-0.{g}": semantics(g) for g in (33, 30)})


def original_single() -> Callable[..., Any] | None:
    """vLLM's own ``initialize_single_dummy_weight`` where vLLM has imported it, else None."""
    if "single" in originals:  # the plugin's patch (None: tests of our rules alone)
        return originals["single"]
    name = "initialize_single_dummy_weight"
    return core.own_function(WEIGHT_UTILS, name, initialize_single_dummy_weight)


def initialize_single_dummy_weight(
    param: torch.Tensor, low: float | None = None, high: float | None = None, seed: int = 1234,
    name: str = "",
) -> None:  # fmt: skip
    """vLLM's ``initialize_single_dummy_weight``, the installed version's semantics (before
    0.33: None bounds are the older signature's defaults, +-1e-3; no ``name``)."""
    given = {"low": low, "high": high, "seed": seed, "name": name}
    if generation() < 33:
        given = {k: v for k, v in given.items() if v is not None and k != "name"}
    fill_single(param, **given)


def fill_single(param: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """One tensor as vLLM's loader asked for it (the arguments after the tensor)."""
    tensors = [(kwargs.get("name", ""), param)]
    core.fill(tensors, semantics(), (args, kwargs), engine=original_single())


def initialize_dummy_weights(
    model: torch.nn.Module, model_config: Any = None, low: float = -1e-3, high: float = 1e-3,
    seed: int = 1234,
) -> None:  # fmt: skip
    """vLLM <= 0.30's whole-model function: the per-tensor one over ``model.state_dict()``."""
    original = original_single() if generation() < 33 else None
    sem = semantics(None if original else 30, "state_dict")
    core.fill(model, sem, ((low, high, seed), {}), engine=original)


# ---- the plugin -----------------------------------------------------------------------------

ENV = "FP8_DUMMY_VLLM"
DUMMY_LOADER = "vllm.model_executor.model_loader.dummy_loader"
LOADER_PACKAGE = "vllm.model_executor.model_loader"
LOAD_FORMAT = "fp8_dummy"
logger = logging.getLogger("vllm.fp8_dummy")  # a child of vLLM's: its log, its format


def guarded(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return core.guarded("the vLLM plugin", "vLLM", what, fn, *args, **kwargs)


def register() -> None:
    """The entry point (idempotent; never raises)."""
    guarded("register", _register)


def _register() -> None:
    if not core.enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to vLLM", ENV, os.environ[ENV])
        return
    v = version()
    if v is not None and major_minor(v) < (0, 28):
        logger.info("fp8_dummy: vLLM %s predates the versions matched (0.28+), not used", v)
    elif v is not None:
        _after_import.after_import(
            DUMMY_LOADER, lambda m: guarded("patch of the dummy loader", _patch, m)
        )
        _after_import.after_import(LOADER_PACKAGE, _register_load_formats)


def what_happens() -> str:
    """The log line's account of what goes through fp8_dummy in this process."""
    v = version()
    newer = v is not None and major_minor(v) >= (0, 34)
    text = core.account("vLLM", f"where vLLM {v}, newer than 0.33, passes " if newer else "")
    if "load_weights" in originals:
        text += "; --load-format dummy fills the whole model as one plan once its walk is proven"
    return text


def _patch(module: ModuleType) -> None:
    own = getattr(module, "initialize_single_dummy_weight", None)
    if own is None:  # a loader that does not call the function by this name: nothing to prove
        logger.info("fp8_dummy: vLLM %s: no initialize_single_dummy_weight: not used", version())
    if own is None or getattr(module, "_fp8_dummy_patched", False):
        return
    originals.setdefault("single", own)
    module.initialize_single_dummy_weight = _single
    if generation() < 30 and hasattr(module, "initialize_dummy_weights"):  # its loader's call
        originals.setdefault("model", module.initialize_dummy_weights)
        module.initialize_dummy_weights = _model
    cls = getattr(module, "DummyModelLoader", None)
    method = getattr(cls, "load_weights", None)
    if cls is not None and loader.recognized(method):  # else its loop calls ours per tensor
        originals.setdefault("load_weights", method)
        cls.load_weights = _load_weights
    module._fp8_dummy_patched = True
    logger.info("fp8_dummy: vLLM %s: %s", version(), what_happens())


def _single(param: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """The loader's per-tensor function: ours where proven; whatever fails in ours, vLLM's
    (while the loader's walk is probed: the call recorded, nothing filled)."""
    if (calls := loader.recording.get()) is not None:
        calls.append((param, args, kwargs))
        return
    guarded("per-tensor fill", fill_single, param, *args, theirs=originals["single"], **kwargs)


def _load_weights(self: Any, model: torch.nn.Module, model_config: Any) -> None:
    """``DummyModelLoader.load_weights`` under the plugin: the whole model as one plan (as
    ``--load-format fp8_dummy``) once its walk is proven; a model with online-quantized
    layers, an unproven walk, and whatever fails in ours: vLLM's own method (whose loop calls
    the per-tensor function above)."""
    if guarded("whole-model dummy load", _load_as_one_plan, self, model, model_config) is not True:
        originals["load_weights"](self, model, model_config)


def _load_as_one_plan(self: Any, model: torch.nn.Module, model_config: Any) -> bool:
    dl = sys.modules[DUMMY_LOADER]
    if not loader.walk_proven(self, dl, originals["load_weights"], model_config):
        return False
    steps = loader.walk(model, dl, online=False)  # online layers: in vLLM's order, by vLLM
    if steps is None:
        return False
    loader.fill(self, steps, original_single())
    return True


def _model(*args: Any, **kw: Any) -> None:
    guarded("whole-model fill", initialize_dummy_weights, *args, theirs=originals["model"], **kw)


def _register_load_formats(package: ModuleType) -> None:
    guarded(f"registration of --load-format {LOAD_FORMAT}", _register_load_format, package)
    formats = f"--load-format {invariant.LOAD_FORMAT} and {invariant.REALISTIC}"
    if guarded(f"registration of {formats}", invariant.register_load_format, package) is False:
        logger.info("fp8_dummy: vLLM %s: its dummy loader lacks what %s need", version(), formats)


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
        """``--load-format fp8_dummy``: ``dummy``'s bytes, all checked first, CUDA batched."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            loader.fill(self, loader.walk(model, dl), original_single())

    return FP8DummyModelLoader
