"""The plain-PyTorch paths fp8_dummy replaces (the engines' dummy-weight loaders): the tests' and
benchmarks' expected bytes, and the engine drop-ins' fallback (docs/api.md)."""

from __future__ import annotations

import torch

__all__ = ["contiguous_path", "new_path", "old_path"]

# Under 16 bits, each path's float16 temp of p, and whether it copies it back as
# p.data.copy_(temp.to(p.dtype)) (else p.copy_(temp)); 16 bits and more: uniform_ in place.
_TEMPS = {
    "new": (lambda p: torch.empty_like(p, dtype=torch.float16), False),
    "old": (lambda p: p.data.to(torch.float16), True),
    "contiguous": (lambda p: torch.empty(p.shape, dtype=torch.float16, device=p.device), True),
}


def _path(path: str, p: torch.Tensor, low, high, seed, generator) -> torch.Tensor:
    g = generator if generator is not None else torch.Generator(p.device).manual_seed(seed)
    if p.dtype.itemsize >= 2:
        p.uniform_(low, high, generator=g)
        return p
    temp, to_dtype = _TEMPS[path]
    t = temp(p).uniform_(low, high, generator=g)
    if to_dtype:
        p.data.copy_(t.to(p.dtype))
    else:
        p.copy_(t)
    return p


def new_path(
    p: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234, *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # fmt: skip
    """Current vLLM path: a float16 temp for dtypes under 16 bits, else uniform_ in place."""
    return _path("new", p, low, high, seed, generator)


def old_path(
    p: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234, *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # fmt: skip
    """Older vLLM path: convert to float16, fill, convert back, copy (same bytes, more traffic)."""
    return _path("old", p, low, high, seed, generator)


def contiguous_path(
    p: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234, *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # fmt: skip
    """TensorRT-LLM's: under 16 bits a row-major float16 temp of ``p``'s shape (whatever its
    strides), ``.to(p.dtype)`` (int8/uint8: toward zero), copied in; else ``uniform_``."""
    return _path("contiguous", p, low, high, seed, generator)
