"""Drop-ins with the signatures of vLLM's dummy-weight functions
(``vllm.model_executor.model_loader.weight_utils``), without depending on vLLM::

    import fp8_dummy.vllm, vllm.model_executor.model_loader.dummy_loader as dummy_loader
    dummy_loader.initialize_dummy_weights = fp8_dummy.vllm.initialize_dummy_weights

Same bytes as vLLM's CUDA/CPU code path (not its TPU path, which draws on the CPU).
"""

from __future__ import annotations

from typing import Any

import torch

from .model import initialize_dummy_weights as _initialize_model
from .ops import init_

__all__ = ["initialize_dummy_weights", "initialize_single_dummy_weight"]


def initialize_dummy_weights(
    model: torch.nn.Module,
    model_config: Any = None,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
) -> None:
    """vLLM's ``initialize_dummy_weights(model, model_config, low, high, seed)``;
    ``model_config`` is accepted and unused, as in vLLM."""
    _initialize_model(model, low, high, seed)


@torch.no_grad()
def initialize_single_dummy_weight(
    param: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> None:
    """vLLM's ``initialize_single_dummy_weight``: meta and integer tensors are skipped."""
    if param.is_meta or not torch.is_floating_point(param):
        return
    init_(param.data, low, high, seed)
