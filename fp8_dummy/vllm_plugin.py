"""The vLLM plugin (entry point ``fp8_dummy`` of the group ``vllm.general_plugins``).

vLLM calls :func:`register` in every process it starts (API server, engine core,
workers) once fp8_dummy is installed. It then routes ``--load-format dummy`` through
fp8_dummy with unchanged bytes: the dummy loader's ``initialize_single_dummy_weight``
becomes :func:`fp8_dummy.vllm.initialize_single_dummy_weight` (fused float16-temp path,
vLLM's own function for every other branch, a self-check per device and dtype), and
(vLLM 0.28/0.29) its ``initialize_dummy_weights`` our batched one. It also registers the
load format ``fp8_dummy``: the same bytes, whole model at once, batched launches.

``FP8_DUMMY_VLLM=0`` (or false/off/no) turns it off; so does vLLM's own allow-list
``VLLM_PLUGINS`` without ``fp8_dummy`` in it. Nothing here imports vLLM before vLLM does:
the patch is applied when vLLM imports its model-loader modules (or at once if it has).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import ModuleType
from typing import Any, Callable

import torch

from . import vllm as fv
from ._engine_common import _cuda_kernels, enabled, warn_fallback
from ._startup import _AfterImport, after_import
from ._versions import major_minor
from .model import run_plan

ENV = "FP8_DUMMY_VLLM"
DUMMY_LOADER = "vllm.model_executor.model_loader.dummy_loader"
LOADER_PACKAGE = "vllm.model_executor.model_loader"
LOAD_FORMAT = "fp8_dummy"
# A child of vLLM's logger, so the line shows in vLLM's log with its format.
logger = logging.getLogger("vllm.fp8_dummy")


def register() -> None:
    """The entry point: install fp8_dummy in vLLM's dummy loader (idempotent). Never raises:
    vLLM calls it in every process it starts, dummy weights or not."""
    guarded("register", _register)


def guarded(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, any exception caught: vLLM's own functions stay in place and one
    warning per callback says what failed (a plugin must never break the engine)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 (whatever it is, vLLM must go on)
        warn_fallback("the vLLM plugin", "vLLM", what, e)
        return None


def _register() -> None:
    if not enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to vLLM", ENV, os.environ[ENV])
        return
    v = fv.version()
    if v is None:
        return
    if not _at_least(v, (0, 28)):
        logger.info("fp8_dummy: vLLM %s predates the versions matched (0.28+), not used", v)
        return
    after_import(
        DUMMY_LOADER, lambda m: guarded("patch of the dummy loader", _patch_dummy_loader, m)
    )
    after_import(LOADER_PACKAGE, _register_load_formats)


def unregister() -> None:
    """Give the dummy loader its own functions back (tests; the load format stays)."""
    module = sys.modules.get(DUMMY_LOADER)
    if module is not None and getattr(module, "_fp8_dummy_patched", False):
        module.initialize_single_dummy_weight = fv.originals["single"]
        if "model" in fv.originals:
            module.initialize_dummy_weights = fv.originals["model"]
        module._fp8_dummy_patched = False
    for finder in [f for f in sys.meta_path if isinstance(f, _AfterImport)]:
        sys.meta_path.remove(finder)


def _at_least(v: str, wanted: tuple[int, int]) -> bool:
    release = major_minor(v)
    return release is None or release >= wanted  # a version we cannot read is a new one


def what_happens() -> str:
    """The log line's account of which tensors go through fp8_dummy in this process."""
    newest = "0.33"
    v = fv.version()
    proof = "each kind of tensor after a probe against vLLM's own function"
    if not _at_least(v or "0", (0, 34)):
        where = f"through fp8_dummy ({proof})"
    else:
        where = f"through fp8_dummy where vLLM {v}, newer than {newest}, passes {proof}"
    if torch.version.hip is not None:
        return f"CPU dummy weights {where}; ROCm tensors left to vLLM (our kernels are CUDA's)"
    if torch.version.cuda is not None and not _cuda_kernels():
        return (
            f"CPU dummy weights {where}; CUDA kernels not built (a CPU-only build of "
            "fp8_dummy): CUDA dummy weights left to vLLM"
        )
    return f"dummy weights {where}"


def _patch_dummy_loader(module: ModuleType) -> None:
    if getattr(module, "_fp8_dummy_patched", False):
        return
    own = getattr(module, "initialize_single_dummy_weight", None)
    if own is None:  # a loader that does not call the function by this name
        logger.info(
            "fp8_dummy: vLLM %s's dummy loader has no initialize_single_dummy_weight: "
            "dummy weights left to vLLM",
            fv.version(),
        )
        return
    gen = fv.generation()
    fv.originals.setdefault("single", own)
    module.initialize_single_dummy_weight = _single
    if gen < 30 and hasattr(module, "initialize_dummy_weights"):  # its loader calls this one
        fv.originals.setdefault("model", module.initialize_dummy_weights)
        module.initialize_dummy_weights = _model
    module._fp8_dummy_patched = True
    logger.info("fp8_dummy: vLLM %s: %s", fv.version(), what_happens())


def _single(param: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    """The dummy loader's per-tensor function: ours where its proof passes for the call as
    the loader made it, else vLLM's own; whatever fails in ours, vLLM's own."""
    own = fv.originals["single"]
    if len(args) > 4 or set(kwargs) - _KNOWN or kwargs.keys() & set(_KNOWN_ORDER[: len(args)]):
        # an argument of a later vLLM we do not know: its own function decides
        return own(param, *args, **kwargs)
    name = kwargs.get("name", args[3] if len(args) > 3 else "")
    try:
        return fv.fill_single(param, (args, kwargs), name)
    except Exception as e:  # noqa: BLE001 (the engine's own function decides, and says)
        own(param, *args, **kwargs)  # vLLM's own behaviour, its own errors included
        guarded("per-tensor fill", _raise, e)  # it did not fail: ours did; say so once
        return None


# vLLM 0.33's (param, low=None, high=None, seed=1234, name=""): what _single understands.
_KNOWN_ORDER = ("low", "high", "seed", "name")
_KNOWN = set(_KNOWN_ORDER)


def _model(*args: Any, **kwargs: Any) -> None:
    try:
        return fv.initialize_dummy_weights(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        fv.originals["model"](*args, **kwargs)
        guarded("whole-model fill", _raise, e)
        return None


def _raise(e: Exception) -> None:
    raise e


def _register_load_format(package: ModuleType) -> None:
    if LOAD_FORMAT in getattr(package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        return
    if not hasattr(package, "register_model_loader"):
        return  # a loader registry we do not know: only the per-tensor patch
    dl = importlib.import_module(DUMMY_LOADER)  # a lazy package may not have imported it yet
    # The per-tensor function too: without it nothing proves our plan against this vLLM.
    needed = ("DummyModelLoader", "get_layerwise_info", "get_layer_tensors")
    needed += ("initialize_single_dummy_weight",)
    if not all(hasattr(dl, n) for n in needed):
        return  # a loader we do not know the shape of: only the per-tensor patch
    package.register_model_loader(LOAD_FORMAT)(_loader_class(dl))


def _loader_class(dl: ModuleType) -> type:
    class FP8DummyModelLoader(dl.DummyModelLoader):
        """``--load-format fp8_dummy``: the bytes of ``dummy``, with the float tensors of
        the whole model filled together (one launch per device, dtype and bounds on
        CUDA). Online-quantized layers go through vLLM's own processing, in order.
        vLLM code that tests ``load_format == "dummy"`` does not see this format."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            gen, original = fv.generation(), fv.original_single()
            bounds = (None, None) if gen >= 33 else (-1e-3, 1e-3)
            entries: list = []
            for layer in model.modules():
                info = dl.get_layerwise_info(layer)
                if info.can_load():
                    run_plan(entries, 1234, fault_path="vllm")  # keep the loader's order
                    entries = []
                    self._process_online_quant_layer(layer, info)
                    continue
                for name, t in dl.get_layer_tensors(layer).items():
                    if name not in layer._non_persistent_buffers_set:
                        given = name if gen >= 33 else ""
                        # as the dummy loader calls the per-tensor function
                        call = ((), {"name": name}) if gen >= 33 else None
                        action = fv.plan_single(t, *bounds, 1234, given, gen, original, call)
                        entries.append((name, t, action))
            run_plan(entries, 1234, fault_path="vllm")

    return FP8DummyModelLoader


def _register_load_formats(package: ModuleType) -> None:
    # One callback per module (after_import keeps one per name): fp8_dummy, then
    # fp8_dummy_invariant (fp8_dummy/vllm_invariant.py), each guarded on its own.
    guarded("registration of --load-format fp8_dummy", _register_load_format, package)
    guarded("registration of --load-format fp8_dummy_invariant", _register_invariant, package)


def _register_invariant(package: ModuleType) -> None:
    from .vllm_invariant import register_load_format

    register_load_format(package)
