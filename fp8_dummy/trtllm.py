"""TensorRT-LLM: a drop-in for the PyTorch backend's dummy-weight function
``tensorrt_llm._torch.pyexecutor.model_loader.initialize_dummy_weights`` (what
``load_format=LoadFormat.DUMMY`` runs), and the patch that the opt-in start-up hook applies
in every process (``FP8_DUMMY_TRTLLM=1``; fp8_dummy/_startup.py). Importing this module
does not import TensorRT-LLM.

TensorRT-LLM's semantics (docs/trtllm.md, read from its public source): seed 0; every
``model.state_dict()`` value with a fresh generator of its device; 1-byte tensors through a
contiguous float16 temp in bounds set by their dtype (float8_e4m3fn and int8 +-3, uint8
[0, 64)), converted by ``.to(dtype)``, other 1-byte dtypes refused with
NotImplementedError after the tensors before them are filled; floats of 2+ bytes
``uniform_(low, high)``; other dtypes untouched. Ours: the same bytes, no temp
(``init_(..., contiguous_temp=True)``), batched on CUDA.

By hand, in each process that loads the model (the hook does this for every process)::

    import fp8_dummy.trtllm, tensorrt_llm._torch.pyexecutor.model_loader as ml
    fp8_dummy.trtllm.patch(ml)   # keeps TensorRT-LLM's function to prove against
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import sys
from typing import Any, Callable

import torch

from . import reference
from ._engine_common import _cuda_kernels, trtllm_action, warn_fallback
from ._engine_probe import fill_whole_model
from ._startup import TRTLLM_ENV, TRTLLM_LOADER
from .model import run_plan, walk

__all__ = ["initialize_dummy_weights", "patch"]

logger = logging.getLogger(__name__)
# TensorRT-LLM's own function, kept by patch() (the module's binding is then ours).
originals: dict[str, Callable[..., Any]] = {}


class _Refusal(Exception):
    """TensorRT-LLM's own refusal of a tensor, reproduced: raised to the caller as is."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 0
) -> None:
    """TensorRT-LLM's ``initialize_dummy_weights``, byte for byte, without its temps (3 bytes
    of scratch per 1-byte element there, none here): every ``model.state_dict()`` value with
    a fresh generator of its device seeded with ``seed``; float8_e4m3fn and int8 uniform in
    [-3, 3) and uint8 in [0, 64) through a row-major float16 temp (``low``/``high`` do not
    apply), converted as ``.to(dtype)`` (truncation toward zero for the integers); floats
    of 2+ bytes uniform in [low, high); other dtypes untouched. Any other 1-byte dtype
    (float8_e5m2, float8_e8m0fnu, the fnuz formats, bool, packed FP4) raises
    NotImplementedError as TensorRT-LLM does, after the tensors before it are filled, that
    one untouched. Where TensorRT-LLM's model loader is imported, each kind of tensor is first
    proven against its own function (fp8_dummy.self_check_report())."""
    try:
        _fill(_trtllm_function(), model, (low, high, seed))
    except _Refusal as r:
        raise r.error from None


def patch(module: Any) -> None:
    """Replace ``module.initialize_dummy_weights`` (TensorRT-LLM's model loader) with ours,
    keeping TensorRT-LLM's function to prove each kind of tensor against and to fall back to.
    Idempotent; what the opt-in hook calls in every process."""
    if getattr(module, "_fp8_dummy_patched", False):
        return
    own = getattr(module, "initialize_dummy_weights", None)
    if own is None:
        logger.info("fp8_dummy: this TensorRT-LLM has no initialize_dummy_weights: left alone")
        return
    originals.setdefault("function", own)
    module.initialize_dummy_weights = _patched
    module._fp8_dummy_patched = True
    logger.info("fp8_dummy: TensorRT-LLM %s: %s (%s)", _version(), _what_happens(), TRTLLM_ENV)


def _patched(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
    """The loader's function once patched: ours where proven; whatever fails in ours,
    TensorRT-LLM's own (if that raises too, its error is the engine's and propagates)."""
    own = originals["function"]
    try:
        return _fill(own, model, args, kwargs)
    except _Refusal as r:
        raise r.error from None
    except Exception as e:  # noqa: BLE001
        result = own(model, *args, **kwargs)
        warn_fallback("the TensorRT-LLM patch", "TensorRT-LLM", "fill", e)
        return result


def _what_happens() -> str:
    proof = "each kind of tensor after a probe against TensorRT-LLM's own function"
    if torch.version.cuda is not None and not _cuda_kernels():
        return f"dummy weights through fp8_dummy ({proof}); CUDA kernels not built: its own path"
    return f"dummy weights through fp8_dummy ({proof})"


def _fill(
    original: Callable[..., Any] | None,
    model: torch.nn.Module,
    args: tuple = (),
    kwargs: dict | None = None,
) -> None:
    """The model as TensorRT-LLM's function called with (``args``, ``kwargs``) fills it
    (_engine_probe.fill_whole_model: ours where proven against ``original``; none: the
    semantics of docs/trtllm.md alone). Its bytes depend on the layout (the row-major temp)."""
    fill_whole_model(
        "TensorRT-LLM",
        original,
        model,
        (args, kwargs or {}),
        seed=0,
        key=f"trtllm: TensorRT-LLM {_version()}",
        plan=_plan,
        run=_run,
        layout=True,
    )


def _plan(model: torch.nn.Module, low: float, high: float) -> list:
    return [(n, t, trtllm_action(t, low, high)) for n, _, t in walk(model, "state_dict")]


def _run(entries: list, seed: int) -> None:
    """Fill in TensorRT-LLM's order up to its first refusal, then raise that refusal (the
    tensors before it filled, it and those after it untouched)."""
    for i, (_, _, action) in enumerate(entries):
        if action.kind == "error":
            run_plan(entries[:i], seed, reference=_reference, fault_path="trtllm")
            kind, message = action.value
            raise _Refusal(kind(message))
    run_plan(entries, seed, reference=_reference, fault_path="trtllm")


def _reference(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    reference.contiguous_path(t, low, high, seed)  # TensorRT-LLM's path: what we do not fuse


def _trtllm_function() -> Callable[..., Any] | None:
    """TensorRT-LLM's own function if its model loader is loaded (never imported here)."""
    if "function" in originals:
        return originals["function"]
    f = getattr(sys.modules.get(TRTLLM_LOADER), "initialize_dummy_weights", None)
    return None if f is initialize_dummy_weights or f is _patched else f


@functools.cache  # read once: the keys name it for every tensor
def _version() -> str:
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"
