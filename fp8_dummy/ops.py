"""Typed Python wrappers of the ``torch.ops.fp8_dummy`` operators and their fake kernels."""

from __future__ import annotations

import torch

__all__ = ["init_"]


def init_(
    t: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Fill ``t`` in place with uniform random numbers in ``[low, high)``; return ``t``.

    The bytes are those of the reference path (see :mod:`fp8_dummy.reference`): for FP8
    dtypes ``tmp = empty_like(t, dtype=float16); tmp.uniform_(low, high, generator=g);
    t.copy_(tmp)``, for float16 and wider ``t.uniform_(low, high, generator=g)``.

    Without ``generator``, ``g`` is a fresh ``torch.Generator(device=t.device)`` seeded
    with ``seed``. With ``generator``, that generator is used and advanced exactly as
    the reference advances it; ``seed`` is then ignored.
    """
    if t.layout != torch.strided:  # the dispatcher's own message would not say why
        raise RuntimeError(
            f"fp8_dummy.init_: only strided tensors are supported, got layout {t.layout}"
        )
    if generator is None:
        torch.ops.fp8_dummy.init_.default(t, low, high, seed)
    else:
        torch.ops.fp8_dummy.init_.generator(t, low, high, generator=generator)
    return t


@torch.library.register_fake("fp8_dummy::init_")
def _init_fake(t: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234) -> None:
    torch.ops.fp8_dummy._check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_.generator")
def _init_generator_fake(
    t: torch.Tensor, low: float, high: float, *, generator: torch.Generator | None
) -> None:
    torch.ops.fp8_dummy._check_init_args(t, low, high)
