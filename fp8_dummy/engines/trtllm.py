"""TensorRT-LLM's PyTorch backend (docs/trtllm.md): a drop-in for its model loader's
``initialize_dummy_weights``, and :func:`patch`, which the opt-in start-up hook
(``FP8_DUMMY_TRTLLM=1``, startup/_fp8_dummy_startup.py) applies in every process."""

from __future__ import annotations

import dataclasses
import functools
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
    """Each ``state_dict`` value: its generator first; 1-byte dtypes in their own bounds."""
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
SEMANTICS = core.Semantics(
    "trtllm", "TensorRT-LLM 1.2 semantics", rule, PARAMS, temp=core.ROWS, reads=()
)
core.SEMANTICS["trtllm-1.2"] = SEMANTICS


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 0
) -> None:
    """TensorRT-LLM's function, byte for byte, without its 3 bytes of scratch per 1-byte
    element; where it raises, this raises before anything is written (docs/trtllm.md)."""
    mine = (initialize_dummy_weights, _patched)
    own = originals.get("function") or core.own_function(LOADER, "initialize_dummy_weights", *mine)
    _fill(own, model, low, high, seed)


def _fill(own: Callable | None, model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    v = core.installed("tensorrt_llm", "tensorrt-llm") or "unknown version"
    sem = dataclasses.replace(SEMANTICS, name=f"TensorRT-LLM {v}") if own else SEMANTICS
    return core.fill(model, sem, (args, kwargs), engine=own)


def patch(module: Any) -> None:
    """Replace TensorRT-LLM's model loader's function with ours, keeping its own. Idempotent."""
    own = getattr(module, "initialize_dummy_weights", None)
    if own is None or getattr(module, "_fp8_dummy_patched", False):
        return
    originals.setdefault("function", own)
    module.initialize_dummy_weights = _patched
    module._fp8_dummy_patched = True
    v = core.installed("tensorrt_llm", "tensorrt-llm") or "unknown version"
    logger.info("fp8_dummy: TensorRT-LLM %s: %s", v, core.account("TensorRT-LLM"))


def _patched(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
    """Ours where proven; whatever fails in ours (refusals too), TensorRT-LLM's own function."""
    own, who = originals["function"], ("the TensorRT-LLM patch", "TensorRT-LLM", "fill")
    return core.guarded(*who, functools.partial(_fill, own), model, *args, theirs=own, **kwargs)
