"""TensorRT-LLM's PyTorch backend (docs/trtllm.md): a drop-in for its model loader's
``initialize_dummy_weights`` (``LoadFormat.DUMMY``), and :func:`patch`, which the opt-in
start-up hook (``FP8_DUMMY_TRTLLM=1``, startup/_fp8_dummy_startup.py) applies in every
process. The same bytes without its temps (``init_(..., contiguous_temp=True)``)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import torch

from . import core

__all__ = ["BYTE_BOUNDS", "SEMANTICS", "initialize_dummy_weights", "patch"]

# Also in startup/_fp8_dummy_startup.py, which names them before torch is imported.
ENV = "FP8_DUMMY_TRTLLM"
LOADER = "tensorrt_llm._torch.pyexecutor.model_loader"
# 1-byte dtypes: their bounds, whatever low/high say (uint8: packed FP4 and its scales).
BYTE_BOUNDS = {torch.int8: (-3.0, 3.0), torch.uint8: (0.0, 64.0), torch.float8_e4m3fn: (-3.0, 3.0)}
logger = logging.getLogger(__name__)
originals: dict[str, Callable[..., Any]] = {}  # TensorRT-LLM's own function, kept by patch()


def rule(t: torch.Tensor, low: float, high: float, name: str) -> core.Action:
    """Each ``state_dict`` value: a generator of its device first (none for meta); 1-byte
    dtypes in their own bounds through a row-major temp, others refused; wider floats."""
    if t.device.type == "meta":
        return core.error(RuntimeError, "meta tensor: TensorRT-LLM cannot make a generator for it")
    if t.element_size() < 2:
        if t.dtype not in BYTE_BOUNDS:
            return core.error(NotImplementedError, f"Unknown quantized type: {t.dtype}.")
        return core.Action(core.Kind.UNIFORM, *BYTE_BOUNDS[t.dtype])
    if torch.is_floating_point(t):
        return core.Action(core.Kind.UNIFORM, float(low), float(high))
    return core.SKIP


PARAMS = (("low", -1e-3), ("high", 1e-3), ("seed", 0))
SEMANTICS = core.Semantics("trtllm", "TensorRT-LLM 1.2 semantics", rule, PARAMS, temp=core.ROWS)
core.SEMANTICS["trtllm-1.2"] = SEMANTICS


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 0
) -> None:
    """TensorRT-LLM's function, byte for byte, without its 3 bytes of scratch per 1-byte
    element. Where it raises (NotImplementedError for a 1-byte dtype it does not know), this
    raises too, but before anything is written. Proven against TensorRT-LLM's own function
    where its model loader is loaded, else against its semantics."""
    own = originals.get("function")
    own = own or core.own_function(
        LOADER, "initialize_dummy_weights", initialize_dummy_weights, _patched
    )
    _fill(own, model, (low, high, seed), {})


def _fill(original: Callable | None, model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
    version = core.installed("tensorrt_llm", "tensorrt-llm") or "unknown version"
    sem = dataclasses.replace(SEMANTICS, name=f"TensorRT-LLM {version}") if original else SEMANTICS
    return core.fill(model, sem, (args, kwargs), engine=original)


def patch(module: Any) -> None:
    """Replace ``module.initialize_dummy_weights`` (TensorRT-LLM's model loader) with ours,
    keeping TensorRT-LLM's to prove against and fall back to. Idempotent."""
    own = getattr(module, "initialize_dummy_weights", None)
    if own is None or getattr(module, "_fp8_dummy_patched", False):
        return
    originals.setdefault("function", own)
    module.initialize_dummy_weights = _patched
    module._fp8_dummy_patched = True
    logger.info("fp8_dummy: TensorRT-LLM (%s): %s", ENV, core.account("TensorRT-LLM"))


def _patched(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
    """The loader's function once patched: ours where proven; whatever fails in ours (its
    refusals included), TensorRT-LLM's own."""
    own = originals["function"]

    def ours(m: torch.nn.Module, *a: Any, **k: Any) -> Any:
        return _fill(own, m, a, k)

    who = ("the TensorRT-LLM patch", "TensorRT-LLM", "fill")
    return core.fallback(*who, ours, own, model, *args, **kwargs)
