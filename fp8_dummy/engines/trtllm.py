"""TensorRT-LLM (PyTorch backend): a drop-in for
``tensorrt_llm._torch.pyexecutor.model_loader.initialize_dummy_weights`` (what
``load_format=LoadFormat.DUMMY`` runs), and :func:`patch`, which the opt-in start-up hook
(``FP8_DUMMY_TRTLLM=1``, startup/_fp8_dummy_startup.py) applies in every process. Its
semantics (docs/trtllm.md, from its public source): seed 0; every ``state_dict`` value with a
fresh generator; 1-byte tensors through a row-major float16 temp in bounds set by their dtype,
other 1-byte dtypes refused; floats of 2+ bytes ``uniform_(low, high)``. Ours: the same bytes,
no temp (``init_(..., contiguous_temp=True)``). Importing this imports no TensorRT-LLM."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import sys
from typing import Any, Callable

import torch

from . import _hooks, core

__all__ = ["BYTE_BOUNDS", "SEMANTICS", "initialize_dummy_weights", "patch"]

# Also in startup/_fp8_dummy_startup.py, which must name them before torch is imported
# (tests/test_engines_trtllm_hook.py checks that they agree).
ENV = "FP8_DUMMY_TRTLLM"
LOADER = "tensorrt_llm._torch.pyexecutor.model_loader"
# 1-byte dtypes: their bounds, whatever low/high say (uint8: packed FP4 and its scales).
BYTE_BOUNDS = {torch.int8: (-3.0, 3.0), torch.uint8: (0.0, 64.0)}
if hasattr(torch, "float8_e4m3fn"):
    BYTE_BOUNDS[torch.float8_e4m3fn] = (-3.0, 3.0)
logger = logging.getLogger(__name__)
originals: dict[str, Callable[..., Any]] = {}  # TensorRT-LLM's own function, kept by patch()


def rule(t: torch.Tensor, low: float, high: float, name: str) -> core.Action:
    if t.device.type == "meta":  # its generator comes first
        return core.error(RuntimeError, "meta tensor: TensorRT-LLM cannot make a generator for it")
    if t.element_size() < 2:
        if t.dtype not in BYTE_BOUNDS:
            return core.error(NotImplementedError, f"Unknown quantized type: {t.dtype}.")
        return core.Action(core.Kind.UNIFORM, *BYTE_BOUNDS[t.dtype])
    if torch.is_floating_point(t):
        return core.Action(core.Kind.UNIFORM, float(low), float(high))
    return core.SKIP


PARAMS = (("low", -1e-3), ("high", 1e-3), ("seed", 0))
SEMANTICS = core.Semantics("trtllm", "TensorRT-LLM 1.2 semantics", rule, PARAMS, temp="rows")
core.SEMANTICS["trtllm-1.2"] = SEMANTICS


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 0
) -> None:
    """TensorRT-LLM's function, byte for byte, without its temps (3 bytes of scratch per 1-byte
    element there): float8_e4m3fn and int8 uniform in [-3, 3), uint8 in [0, 64) (row-major,
    converted as ``.to(dtype)``), floats of 2+ bytes in [low, high), other dtypes untouched.
    Any other 1-byte dtype raises NotImplementedError, as TensorRT-LLM does, but before
    anything is written (docs/trtllm.md). Proven against TensorRT-LLM's own function where its
    model loader is loaded, else against its semantics (fp8_dummy.self_check_report())."""
    _fill(_trtllm_function(), model, (low, high, seed), {})


def _fill(original: Callable | None, model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
    sem = SEMANTICS if original is None else _installed()
    return core.fill_model(model, sem, (args, kwargs), engine=original)


@functools.cache
def _installed() -> core.Semantics:
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
    return core.Semantics("trtllm", f"TensorRT-LLM {version}", rule, PARAMS, temp="rows")


def _trtllm_function() -> Callable[..., Any] | None:
    """TensorRT-LLM's own function if its model loader is loaded (never imported here)."""
    if "function" in originals:
        return originals["function"]
    f = getattr(sys.modules.get(LOADER), "initialize_dummy_weights", None)
    return None if f in (initialize_dummy_weights, _patched) else f


def patch(module: Any) -> None:
    """Replace ``module.initialize_dummy_weights`` (TensorRT-LLM's model loader) with ours,
    keeping TensorRT-LLM's to prove against and fall back to. Idempotent."""
    if getattr(module, "_fp8_dummy_patched", False):
        return
    own = getattr(module, "initialize_dummy_weights", None)
    if own is None:
        logger.info("fp8_dummy: this TensorRT-LLM has no initialize_dummy_weights: left alone")
        return
    originals.setdefault("function", own)
    module.initialize_dummy_weights = _patched
    module._fp8_dummy_patched = True
    what = "each kind of tensor after a probe against TensorRT-LLM's own function"
    if torch.version.cuda is not None and not core.cuda_kernels():
        what += "; CUDA kernels not built: its own path"
    logger.info(
        "fp8_dummy: %s: dummy weights through fp8_dummy (%s; %s)", _installed().name, what, ENV
    )


def _patched(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
    """The loader's function once patched: ours where proven; whatever fails in ours (its
    refusals included), TensorRT-LLM's own."""
    own = originals["function"]

    def ours(m: torch.nn.Module, *a: Any, **k: Any) -> Any:
        return _fill(own, m, a, k)

    return _hooks.fallback(
        "the TensorRT-LLM patch", "TensorRT-LLM", "fill", ours, own, model, *args, **kwargs
    )
