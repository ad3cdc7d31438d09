"""Typed Python wrappers of the ``torch.ops.fp8_dummy`` operators and their fake kernels."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import torch

__all__ = ["cpu_fast_path_info", "init_", "init_many_", "init_stateless_", "random_"]

# The public operators (torch.ops.fp8_dummy), by name and overload: the one list. Their schemas
# (csrc/ops.cpp), fake kernels (below), wrappers and documents are checked against it
# (tests/test_operator_names.py).
OPERATORS = ("init_", "init_.generator", "init_many_", "init_stateless_", "random_")
OPERATORS += ("random_.generator",)

_TWO_63, _TWO_64 = 1 << 63, 1 << 64


def as_int64(value: object, name: str, op: str = "init_") -> int:
    """A seed or key offset for an operator's ``int`` (int64) argument. The whole unsigned
    64-bit range is accepted, as ``torch.Generator.manual_seed`` and
    ``torch.func._random.key`` accept it: a value in [2^63, 2^64) travels as its two's
    complement (the same 64 bits, which is all the kernels read); negative values down to
    -2^63 are those bits already."""
    if type(value) is int and -_TWO_63 <= value < _TWO_63:  # the usual one: no ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"fp8_dummy.{op}: {name} must be an int, not {type(value).__name__}")
    value = int(value)
    if not -_TWO_63 <= value < _TWO_64:
        raise ValueError(f"fp8_dummy.{op}: {name}={value} does not fit in 64 bits")
    return value - _TWO_64 if value >= _TWO_63 else value


def as_float(value: object, name: str, op: str = "init_") -> float:
    """A bound as the operator's ``float`` argument; the same TypeError as torch's uniform_
    for anything that is not a real number."""
    if type(value) is float:  # the usual one: no ABC check
        return value
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
    contiguous_temp: bool = False,
) -> torch.Tensor:
    """Fill ``t`` in place with uniform random numbers in ``[low, high)``; return ``t``.

    The bytes are those of the reference path (see :mod:`fp8_dummy.reference`): for 1-byte
    dtypes (FP8, int8, uint8) ``tmp = empty_like(t, dtype=float16); tmp.uniform_(low, high,
    generator=g); t.copy_(tmp)`` (int8/uint8: copy_'s conversion, truncation toward zero),
    for float16 and wider ``t.uniform_(low, high, generator=g)``.

    ``contiguous_temp``: the temp is ``torch.empty(t.shape, dtype=float16)`` instead, and
    ``t.copy_(tmp.to(t.dtype))``, as TensorRT-LLM's dummy loader does: a transposed,
    permuted or sliced ``t`` gets its random numbers in row-major (logical) order rather than
    in memory order. No temp is made either way. float16 and wider have no temp: the option
    changes nothing for them.

    Without ``generator``, ``g`` is a fresh ``torch.Generator(device=t.device)`` seeded
    with ``seed``. With ``generator``, that generator is used and advanced exactly as
    the reference advances it; ``seed`` is then ignored.
    """
    _check_tensor(t, "init_")
    low, high = as_float(low, "low"), as_float(high, "high")
    contiguous_temp = _as_bool(contiguous_temp, "contiguous_temp", "init_")
    if generator is None:
        torch.ops.fp8_dummy.init_.default(
            t, low, high, as_int64(seed, "seed"), contiguous_temp=contiguous_temp
        )
    else:
        _check_generator(generator, "init_")
        torch.ops.fp8_dummy.init_.generator(
            t, low, high, generator=generator, contiguous_temp=contiguous_temp
        )
    return t


def init_many_(
    tensors: Iterable[torch.Tensor],
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    contiguous_temp: bool = False,
) -> list[torch.Tensor]:
    """Fill every tensor of ``tensors`` in place with the bytes ``init_(t, low, high, seed,
    contiguous_temp=contiguous_temp)`` gives it (each its own fresh generator seeded with
    ``seed``); return them as a list. The list may mix devices; meta tensors are checked and
    skipped (they hold no data).

    On CUDA the dense 1-byte tensors are filled by one kernel launch per (device, dtype)
    instead of one per tensor (with ``contiguous_temp``, the row-major contiguous ones); the
    others (float16 and wider, layouts with gaps) one by one. Tensors that share memory with
    another of the list are filled one by one in list order after the rest, so the last one
    wins as in a loop of ``init_``. Every tensor's arguments are checked before anything is
    written.
    """
    tensors = list(tensors)
    low, high = as_float(low, "low", "init_many_"), as_float(high, "high", "init_many_")
    seed = as_int64(seed, "seed", "init_many_")
    contiguous_temp = _as_bool(contiguous_temp, "contiguous_temp", "init_many_")
    if not tensors:  # the bounds as every dtype takes them: float64's checks
        meta = torch.empty(0, dtype=torch.float64, device="meta")
        torch.ops.fp8_dummy_internal.check_init_args(meta, low, high, "fp8_dummy.init_many_")
        return tensors
    # The operator checks every tensor before its first write, so the usual list goes
    # straight to it: no pass of Python over the list (a model holds thousands of tensors).
    # What it refuses is explained afterwards: a list with meta tensors (its Meta kernel
    # refuses the mix) is filled without them; another tensor of the wrong kind gets
    # _check_tensor's message.
    try:
        torch.ops.fp8_dummy.init_many_.default(
            tensors, low, high, seed, contiguous_temp=contiguous_temp
        )
    except _MixedMeta:  # every tensor checked: the meta ones hold no data, the others filled
        fill = [t for t in tensors if not t.is_meta]
        torch.ops.fp8_dummy.init_many_.default(
            fill, low, high, seed, contiguous_temp=contiguous_temp
        )
    except Exception:
        for i, t in enumerate(tensors):
            if (problem := _tensor_problem(t, "init_many_", f"tensors[{i}]")) is not None:
                raise problem from None
        raise
    return tensors


def init_stateless_(
    t: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    key_offset: int = 0,
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> torch.Tensor:
    """Fill ``t`` in place with the stateless values; return ``t``.

    The element of ``t`` at multi-index ``idx`` takes the value of global element
    ``element_offset + sum(idx[d] * element_strides[d])``; by default ``element_strides``
    are the row-major strides of ``t``'s shape (the element's logical index). ``seed`` and
    ``key_offset`` are the key's (seed, offset) pair, read as unsigned 64-bit numbers: any
    value in [-2^63, 2^64), as ``torch.func._random.key`` takes them.
    """
    op = "init_stateless_"
    _check_tensor(t, op)
    strides = None
    if element_strides is not None:
        strides = [as_index(s, "element_strides", op) for s in element_strides]
    torch.ops.fp8_dummy.init_stateless_.default(
        t,
        as_float(low, "low", op),
        as_float(high, "high", op),
        as_int64(seed, "seed", op),
        key_offset=as_int64(key_offset, "key_offset", op),
        element_offset=as_index(element_offset, "element_offset", op),
        element_strides=strides,
    )
    return t


def as_index(value: object, name: str, op: str) -> int:
    """An element index or stride: an int (a float such as 2.5 is a TypeError, never
    truncated), non-negative, below 2^63 (global indices are int64)."""
    if type(value) is int and 0 <= value < 1 << 63:  # the usual one: no ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"fp8_dummy.{op}: {name} must be ints, not {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 1 << 63:
        raise ValueError(f"fp8_dummy.{op}: {name} must be in [0, 2^63), got {value}")
    return value


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
    _check_tensor(t, "random_")
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"fp8_dummy.random_: {name} must be an int, not {type(value).__name__}")
        if not -_TWO_63 <= value < _TWO_63:  # beyond the operator's int64: the kernel's words
            raise RuntimeError(
                f"fp8_dummy.random_: {name}={value} is out of bounds (int8 takes low in "
                "[-128, 127] and high in [-127, 128], uint8 low in [0, 255] and high in [1, 256])"
            )
    if generator is None:
        torch.ops.fp8_dummy.random_.default(t, low, high, as_int64(seed, "seed", "random_"))
    else:
        _check_generator(generator, "random_")
        torch.ops.fp8_dummy.random_.generator(t, low, high, generator=generator)
    return t


def cpu_fast_path_info() -> str:
    """One line on the CPU fast path of :func:`init_` in this process: the torch version's
    uniform_ formula, FMA or not, and what the once-per-process self-check against
    torch's own ``uniform_`` found (the fast path is used only where it passed)."""
    return torch.ops.fp8_dummy_internal.cpu_fast_path_info()


def _as_bool(value: object, name: str, op: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"fp8_dummy.{op}: {name} must be a bool, not {type(value).__name__}")
    return value


def _check_generator(generator: object, op: str) -> None:
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"fp8_dummy.{op}: generator must be a torch.Generator, not {type(generator).__name__}"
        )


class _MixedMeta(RuntimeError):
    """The Meta kernel's refusal of a list that mixes meta tensors with others (raised
    before anything is written; init_many_ above then fills the others)."""


def _is_fake(t: torch.Tensor) -> bool:
    return torch._subclasses.fake_tensor.is_fake(t)


def _check_tensor(t: object, op: str, name: str = "t") -> None:
    if (problem := _tensor_problem(t, op, name)) is not None:
        raise problem


def _tensor_problem(t: object, op: str, name: str) -> Exception | None:
    """What makes ``t`` no argument of ``op`` (the dispatcher's own message names a backend,
    not the reason); None: nothing of this kind."""
    if not isinstance(t, torch.Tensor):
        return TypeError(f"fp8_dummy.{op}: {name} must be a Tensor, got {type(t).__name__}")
    kind = f"quantized ({t.dtype})" if t.is_quantized else "nested" if t.is_nested else t.layout
    if kind != torch.strided:
        return RuntimeError(
            f"fp8_dummy.{op}: {name} is a {kind} tensor; only strided tensors (torch.strided "
            "layout, not quantized or nested) are supported"
        )
    return None


# The temp's order changes no argument check: the fake kernels take contiguous_temp and
# check as the kernels do.
@torch.library.register_fake("fp8_dummy::init_")
def _init_fake(
    t: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    contiguous_temp: bool = False,
) -> None:
    torch.ops.fp8_dummy_internal.check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_.generator")
def _init_generator_fake(
    t: torch.Tensor,
    low: float,
    high: float,
    *,
    generator: torch.Generator | None,
    contiguous_temp: bool = False,
) -> None:
    torch.ops.fp8_dummy_internal.check_init_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_many_")
def _init_many_fake(
    tensors: list[torch.Tensor],
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    contiguous_temp: bool = False,
) -> None:
    # Also the Meta kernel, which the dispatcher picks for a whole list as soon as one tensor
    # is on the meta device: it would leave the others unwritten, so such a list is refused
    # here (the wrapper, init_many_ above, takes the meta tensors out first).
    for i, t in enumerate(tensors):
        torch.ops.fp8_dummy_internal.check_init_args(t, low, high, "fp8_dummy.init_many_", i)
    real = [i for i, t in enumerate(tensors) if t.device.type != "meta" and not _is_fake(t)]
    if real and len(real) < len(tensors):
        raise _MixedMeta(
            f"fp8_dummy.init_many_: tensors[{real[0]}] is on {tensors[real[0]].device} in a "
            "list with meta tensors; torch.ops.fp8_dummy.init_many_ fills one kind: call "
            "fp8_dummy.init_many_, which checks the meta tensors and fills the others"
        )


@torch.library.register_fake("fp8_dummy::random_")
def _random_fake(t: torch.Tensor, low: int, high: int, seed: int = 1234) -> None:
    torch.ops.fp8_dummy_internal.check_random_args(t, low, high)


@torch.library.register_fake("fp8_dummy::random_.generator")
def _random_generator_fake(
    t: torch.Tensor, low: int, high: int, *, generator: torch.Generator | None
) -> None:
    torch.ops.fp8_dummy_internal.check_random_args(t, low, high)


@torch.library.register_fake("fp8_dummy::init_stateless_")
def _init_stateless_fake(
    t: torch.Tensor,
    low: float = -1e-3,
    high: float = 1e-3,
    seed: int = 1234,
    *,
    key_offset: int = 0,
    element_offset: int = 0,
    element_strides: Sequence[int] | None = None,
) -> None:
    torch.ops.fp8_dummy_internal.check_stateless_args(t, low, high, element_offset, element_strides)
