"""The plain-PyTorch paths that fp8_dummy replaces (the engines' dummy weight loaders).

Used by the tests and benchmarks as the definition of the expected bytes, and by the
engine drop-ins where a tensor is not ours to fill.
"""

from __future__ import annotations

import torch

__all__ = ["contiguous_path", "new_path", "old_path"]


def _generator(t: torch.Tensor, seed: int) -> torch.Generator:
    g = torch.Generator(device=t.device)
    g.manual_seed(seed)
    return g


def new_path(
    p: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Current vLLM path: a float16 temp for dtypes under 16 bits, else uniform_ in place."""
    g = generator if generator is not None else _generator(p, seed)
    if p.dtype.itemsize < 2:
        t = torch.empty_like(p, dtype=torch.float16)
        t.uniform_(low, high, generator=g)
        p.copy_(t)
    else:
        p.uniform_(low, high, generator=g)
    return p


def old_path(
    p: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Older vLLM path: convert to float16, fill, convert back, copy (same bytes, more traffic)."""
    g = generator if generator is not None else _generator(p, seed)
    if p.dtype.itemsize < 2:
        t = p.data.to(torch.float16)
        t = t.uniform_(low, high, generator=g).to(p.dtype)
        p.data.copy_(t)
    else:
        p.uniform_(low, high, generator=g)
    return p


def contiguous_path(
    p: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """TensorRT-LLM's temp: for dtypes under 16 bits a contiguous float16 tensor of ``p``'s
    shape (``torch.empty``, not ``empty_like``: random numbers in row-major order whatever
    ``p``'s strides), converted with ``.to(p.dtype)`` (int8/uint8: truncation toward zero),
    then copied in; else ``uniform_`` in place. 3 bytes of scratch per 1-byte element."""
    g = generator if generator is not None else _generator(p, seed)
    if p.dtype.itemsize < 2:
        t = torch.empty(p.shape, dtype=torch.float16, device=p.device)
        t.uniform_(low, high, generator=g)
        p.data.copy_(t.to(p.dtype))
    else:
        p.uniform_(low, high, generator=g)
    return p
