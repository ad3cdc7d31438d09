"""Whole-model dummy initialization with vLLM's semantics."""

from __future__ import annotations

import torch

from .ops import init_

__all__ = ["initialize_dummy_weights"]


def initialize_dummy_weights(
    model: torch.nn.Module,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
) -> None:
    """Fill every floating-point tensor of ``model.state_dict()`` in place.

    Same bytes as vLLM's loop: for each tensor, in ``state_dict()`` order, a fresh
    generator of its device seeded with ``seed``, then the reference path
    (:func:`fp8_dummy.reference.new_path`). A tensor that appears under several names
    (tied weights) gets the same values each time, so it is filled once.
    """
    seen: set[tuple[object, ...]] = set()
    for tensor in model.state_dict().values():
        if not torch.is_floating_point(tensor):
            continue
        key = (tensor.device, tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.stride())
        if key in seen:
            continue
        seen.add(key)
        init_(tensor, low, high, seed)
