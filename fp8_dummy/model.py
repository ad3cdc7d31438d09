"""Whole-model dummy initialization with vLLM's semantics."""

from __future__ import annotations

import re
import sys
from typing import Callable, Literal

import torch

from ._progress import Progress
from .ops import init_, init_many_
from .stateless import init_stateless_

__all__ = ["initialize_dummy_weights", "is_scale_tensor"]

# Show progress by default only for models at least this large, on a terminal.
PROGRESS_THRESHOLD_BYTES = 1 << 30
# With progress shown, CUDA tensors are batched in runs of about this many bytes (in
# state_dict order), so the display advances per run; without, one batch per call.
PROGRESS_BATCH_BYTES = 1 << 30

_SCALE_NAME = re.compile(r"(scale|scale_inv|_scale_[^.]*)$")


def is_scale_tensor(name: str, tensor: torch.Tensor) -> bool:
    """The default rule of ``scales="neutral"``: a 0-dim tensor, or one whose last name
    component ends in ``scale`` or ``scale_inv`` or contains ``_scale_`` followed by a
    suffix (``weight_scale``, ``input_scale``, ``k_scale``, ``weight_scale_inv``,
    ``weight_scale_2``). Such tensors multiply FP8 values; random ±1e-3 there turns a
    model's activations into noise or zeros, so benchmarks want 1.0 instead."""
    return tensor.dim() == 0 or bool(_SCALE_NAME.search(name.rsplit(".", 1)[-1]))


def initialize_dummy_weights(
    model: torch.nn.Module,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    mode: Literal["reference", "stateless"] = "reference",
    scales: Literal["random", "neutral"] = "random",
    is_scale: Callable[[str, torch.Tensor], bool] = is_scale_tensor,
    progress: bool | None = None,
) -> None:
    """Fill every floating-point tensor of ``model.state_dict()`` in place.

    By default the bytes are those of vLLM's loop: for each tensor, in ``state_dict()``
    order, a fresh generator of its device seeded with ``seed``, then the reference
    path (:func:`fp8_dummy.reference.new_path`). Meta tensors are skipped (vLLM defers
    them), integer tensors are left alone. A tensor that appears under several names
    (tied weights) gets the same values each time, so it is filled once. CUDA tensors
    are filled by :func:`fp8_dummy.init_many_` (one kernel launch per device and FP8
    dtype, same bytes); CPU tensors one by one.

    mode: ``"reference"`` (the default): the bytes above, which on CUDA depend on the
        GPU model for large tensors, as vLLM's do. ``"stateless"``: each tensor filled
        by :func:`fp8_dummy.init_stateless_` with ``seed`` (the same bytes on every
        device; see the README's "Modes").
    scales: ``"neutral"`` sets the tensors for which ``is_scale(name, tensor)`` holds to
        1.0 instead of random values (opt-in: it changes those bytes). On CUDA they are
        set before the batched random tensors are filled (only a scale tensor sharing
        memory with a non-scale one could tell).
    progress: show tensors done, bytes done and throughput (tqdm if installed, else one
        line on stderr). ``None``: only for models of at least 1 GiB on a terminal.
    """
    if mode not in ("reference", "stateless"):
        raise ValueError(f"mode must be 'reference' or 'stateless', got {mode!r}")
    if scales not in ("random", "neutral"):
        raise ValueError(f"scales must be 'random' or 'neutral', got {scales!r}")
    todo = []
    seen: set[tuple[object, ...]] = set()
    for name, tensor in model.state_dict().items():
        if not torch.is_floating_point(tensor) or tensor.is_meta:
            continue
        # A DTensor's own data_ptr() is 0 (no storage): key it by its local tensor's. In
        # reference mode a DTensor's fill draws from the default generator (docs/modes.md),
        # so a tied one filled twice differs from once: fill it as often as the loop does.
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        key = (tensor.device, local.data_ptr(), tensor.dtype, tensor.shape, tensor.stride())
        if key not in seen or (mode == "reference" and local is not tensor):
            seen.add(key)
            todo.append((name, tensor))
    total_bytes = _nbytes([t for _, t in todo])
    if progress is None:
        progress = total_bytes >= PROGRESS_THRESHOLD_BYTES and sys.stderr.isatty()
    bar = Progress(len(todo), total_bytes) if progress else None
    batch: list[torch.Tensor] = []  # random CUDA tensors, for one init_many_ call
    batch_bytes = 0

    def flush() -> None:
        init_many_(batch, low, high, seed)
        if bar is not None:
            for t in batch:
                bar.update(t)
        batch.clear()

    try:
        for name, tensor in todo:
            neutral = scales == "neutral" and is_scale(name, tensor)
            if tensor.is_cuda and not neutral and mode == "reference":
                batch.append(tensor)
                batch_bytes += tensor.numel() * tensor.element_size()
                if bar is not None and batch_bytes >= PROGRESS_BATCH_BYTES:
                    flush()
                    batch_bytes = 0
                continue
            if neutral:
                tensor.fill_(1.0)
            elif mode == "stateless":
                init_stateless_(tensor, low, high, seed)
            else:
                init_(tensor, low, high, seed)
            if bar is not None:
                bar.update(tensor)
        flush()
    finally:
        if bar is not None:
            bar.close()


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
