"""Typed Python wrappers of the ``torch.ops.fp8_dummy`` operators and their fake kernels."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch

__all__ = ["cpu_fast_path_info", "init_", "init_many_"]

_TWO_63, _TWO_64 = 1 << 63, 1 << 64


def as_int64(value: object, name: str, op: str = "init_") -> int:
    """A seed or key offset for an operator's ``int`` (int64) argument. The whole unsigned
    64-bit range is accepted, as ``torch.Generator.manual_seed`` and
    ``torch.func._random.key`` accept it: a value in [2^63, 2^64) travels as its two's
    complement (the same 64 bits, which is all the kernels read); negative values down to
    -2^63 are those bits already."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"fp8_dummy.{op}: {name} must be an int, not {type(value).__name__}")
    value = int(value)
    if not -_TWO_63 <= value < _TWO_64:
        raise ValueError(f"fp8_dummy.{op}: {name}={value} does not fit in 64 bits")
    return value - _TWO_64 if value >= _TWO_63 else value


def as_float(value: object, name: str, op: str = "init_") -> float:
    """A bound as the operator's ``float`` argument; the same TypeError as torch's uniform_
    for anything that is not a real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"fp8_dummy.{op}: argument '{name}' must be float, not {type(value).__name__}"
        )
    return float(value)


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
    low, high = as_float(low, "low"), as_float(high, "high")
    if generator is None:
        torch.ops.fp8_dummy.init_.default(t, low, high, as_int64(seed, "seed"))
    else:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"fp8_dummy.init_: generator must be a torch.Generator, not "
                f"{type(generator).__name__}"
            )
        torch.ops.fp8_dummy.init_.generator(t, low, high, generator=generator)
    return t


def init_many_(
    tensors: Iterable[torch.Tensor], low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> list[torch.Tensor]:
    """Fill every tensor of ``tensors`` in place with the bytes ``init_(t, low, high, seed)``
    gives it (each its own fresh generator seeded with ``seed``); return them as a list.
    The list may mix devices; meta tensors are checked and skipped (they hold no data).

    On CUDA the dense FP8 tensors are filled by one kernel launch per (device, dtype)
    instead of one per tensor; the others (float16 and wider, layouts with gaps) one by
    one. Tensors that share memory with another of the list are filled one by one in
    list order after the rest, so the last one wins as in a loop of ``init_``. Every
    tensor's arguments are checked before anything is written.
    """
    tensors = list(tensors)
    for t in tensors:
        _check_layout(t)
    low, high = as_float(low, "low", "init_many_"), as_float(high, "high", "init_many_")
    seed = as_int64(seed, "seed", "init_many_")
    if tensors:  # the dispatcher needs a tensor to pick a device
        torch.ops.fp8_dummy.init_many_.default(tensors, low, high, seed)
    return tensors


def cpu_fast_path_info() -> str:
    """One line on the CPU fast path of :func:`init_` in this process: the torch version's
    uniform_ formula, FMA or not, and what the once-per-process self-check against
    torch's own ``uniform_`` found (the fast path is used only where it passed)."""
    return torch.ops.fp8_dummy_internal.cpu_fast_path_info()


def _check_layout(t: torch.Tensor) -> None:
    if t.layout != torch.strided:  # the dispatcher's own message would not say why
        raise RuntimeError(
            f"fp8_dummy.init_: only strided tensors are supported, got layout {t.layout}"
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
    # This is also the Meta kernel, and the dispatcher sends a whole list here as soon as one
    # tensor is on the meta device. Real (not fake) tensors of other devices in such a list
    # still get their bytes, by their own device's kernel; meta tensors hold no data.
    real = [
        t
        for t in tensors
        if t.device.type != "meta" and not torch._subclasses.fake_tensor.is_fake(t)
    ]
    if real:
        torch.ops.fp8_dummy.init_many_.default(real, low, high, seed)
