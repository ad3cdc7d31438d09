"""Typed Python wrappers of the ``torch.ops.fp8_dummy`` operators and their fake kernels."""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["cpu_fast_path_info", "init_", "init_many_", "random_"]


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
    _check_layout(t)
    if generator is None:
        torch.ops.fp8_dummy.init_.default(t, low, high, seed)
    else:
        torch.ops.fp8_dummy.init_.generator(t, low, high, generator=generator)
    return t


def init_many_(
    tensors: Iterable[torch.Tensor], low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> list[torch.Tensor]:
    """Fill every tensor of ``tensors`` in place with the bytes ``init_(t, low, high, seed)``
    gives it (each its own fresh generator seeded with ``seed``); return them as a list.

    On CUDA the dense FP8 tensors are filled by one kernel launch per (device, dtype)
    instead of one per tensor; the others (float16 and wider, layouts with gaps) one by
    one. Tensors that share memory with another of the list are filled one by one in
    list order after the rest, so the last one wins as in a loop of ``init_``. Every
    tensor's arguments are checked before anything is written.
    """
    tensors = list(tensors)
    for t in tensors:
        _check_layout(t)
    if tensors:  # the dispatcher needs a tensor to pick a device
        torch.ops.fp8_dummy.init_many_.default(tensors, low, high, seed)
    return tensors


def random_(
    t: torch.Tensor,
    low: int,
    high: int,
    seed: int = 1234,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Fill the int8 or uint8 tensor ``t`` in place with the bytes of
    ``t.random_(low, high, generator=g)``; return ``t``.

    This is the serving engines' dummy init of int8 weights (``random_(-128, 128)``) and of
    uint8 and packed-FP4 weights (``t.view(torch.uint8).random_(0, 256)``: view
    ``float4_e2m1fn_x2`` tensors as uint8 first). Without ``generator``, ``g`` is a fresh
    ``torch.Generator(device=t.device)`` seeded with ``seed``; with it, that generator is
    used and left in the state torch's ``random_`` leaves it in (``seed`` is then ignored).
    torch's checks and messages, before anything is written. On the CPU the stream is made
    by several threads (byte-identical to torch's serial loop); on CUDA it is torch's own
    ``random_``.
    """
    _check_layout(t, "random_")
    if generator is None:
        torch.ops.fp8_dummy.random_.default(t, low, high, seed)
    else:
        torch.ops.fp8_dummy.random_.generator(t, low, high, generator=generator)
    return t


def cpu_fast_path_info() -> str:
    """One line on the CPU fast path of :func:`init_` in this process: the torch version's
    uniform_ formula, FMA or not, and what the once-per-process self-check against
    torch's own ``uniform_`` found (the fast path is used only where it passed)."""
    return torch.ops.fp8_dummy_internal.cpu_fast_path_info()


def _check_layout(t: torch.Tensor, op: str = "init_") -> None:
    if t.layout != torch.strided:  # the dispatcher's own message would not say why
        raise RuntimeError(
            f"fp8_dummy.{op}: only strided tensors are supported, got layout {t.layout}"
        )


@torch.library.register_fake("fp8_dummy::init_")
def _init_fake(t: torch.Tensor, low: float = -1e-3, high: float = 1e-3, seed: int = 1234) -> None:
    torch.ops.fp8_dummy_internal.check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_.generator")
def _init_generator_fake(
    t: torch.Tensor, low: float, high: float, *, generator: torch.Generator | None
) -> None:
    torch.ops.fp8_dummy_internal.check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_many_")
def _init_many_fake(
    tensors: list[torch.Tensor], low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> None:
    for t in tensors:
        torch.ops.fp8_dummy_internal.check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::random_")
def _random_fake(t: torch.Tensor, low: int, high: int, seed: int = 1234) -> None:
    torch.ops.fp8_dummy_internal.check_random_args(t, low, high)


@torch.library.register_fake("fp8_dummy::random_.generator")
def _random_generator_fake(
    t: torch.Tensor, low: int, high: int, *, generator: torch.Generator | None
) -> None:
    torch.ops.fp8_dummy_internal.check_random_args(t, low, high)
