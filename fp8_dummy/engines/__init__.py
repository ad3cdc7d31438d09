"""The serving-engine integrations (docs/engines.md): :mod:`.core`, which names no engine, and
an adapter per engine registering its semantics. Importing this imports no engine."""

from __future__ import annotations

from typing import Callable, Literal

import torch

from . import core, sglang, trtllm, vllm
from .core import SEMANTICS, Semantics, is_scale_tensor

__all__ = ["SEMANTICS", "Semantics", "initialize_dummy_weights", "is_scale_tensor"]
__all__ += ["sglang", "trtllm", "vllm"]


def initialize_dummy_weights(
    model: torch.nn.Module, low: float | None = None, high: float | None = None,
    seed: int | None = None, *, semantics: str | core.Semantics = "vllm-0.33",
    mode: Literal["generator", "stateless"] = "generator",
    scales: Literal["random", "neutral"] = "random",
    is_scale: Callable[[str, torch.Tensor], bool] = core.is_scale_tensor,
    progress: bool | None = None,
) -> None:  # fmt: skip
    """Fill the model's weights in place with an engine's dummy-weight bytes (``semantics``: a
    name of :data:`core.SEMANTICS` or a :class:`Semantics`; None: the engine's defaults), all
    checked before anything is written. ``mode="stateless"``: floats by ``init_stateless_``;
    ``scales="neutral"``: scales (``is_scale(name, t)``) set to 1.0 (docs/api.md)."""
    sem = core.SEMANTICS.get(semantics) if isinstance(semantics, str) else semantics
    if sem is None:
        raise ValueError(f"semantics must be one of {tuple(core.SEMANTICS)}, got {semantics!r}")
    if mode not in ("generator", "stateless"):
        raise ValueError(f"mode must be 'generator' or 'stateless', got {mode!r}")
    if scales not in ("random", "neutral"):
        raise ValueError(f"scales must be 'random' or 'neutral', got {scales!r}")
    given = {"low": low, "high": high, "seed": seed}
    call = ((), {k: v for k, v in given.items() if v is not None})
    neutral = is_scale if scales == "neutral" else None
    core.fill(model, sem, call, mode=mode, progress=progress, neutral=neutral)
