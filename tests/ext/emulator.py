"""CPU emulation of torch's CUDA reference path (``fp8_dummy_test::emulate_cuda_init_``).

The bytes of ``empty_like(t, float16).uniform_(low, high, generator=g)`` (or, with
``contiguous_temp``, a ``torch.empty(t.shape, float16)`` temp) followed by
``t.copy_(temp)`` on a GPU with a given number of SMs and threads per SM, computed on
the CPU by the same torch-free headers our CUDA kernel runs. Lets CPU-only CI check
the CUDA semantics, and GPU tests compare kernel, emulator and the real reference.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import test_ops

__all__ = [
    "A100",
    "H200",
    "Launch",
    "cuda_launch_plan",
    "cuda_probe_numel",
    "device_properties",
    "emulate_cuda_init_",
    "emulate_cuda_init_many_",
    "emulate_cuda_kernel_init_",
    "emulate_proven_cuda_init_",
    "emulate_proven_cuda_init_many_",
    "emulate_proven_cuda_init_stateless_",
]

# (SM count, max threads per SM)
H200 = (132, 2048)
A100 = (108, 2048)


class Launch(NamedTuple):
    """One kernel launch of the reference uniform_ on the float16 temp."""

    start: int  # first element (in the temp's memory order)
    count: int  # elements
    threads: int  # grid threads T
    steps: int  # Philox calls per thread
    offset: int  # generator offset the launch uses


def device_properties(device: torch.device | str | int | None = None) -> tuple[int, int]:
    """(SM count, max threads per SM) of a CUDA device."""
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, props.max_threads_per_multi_processor


def emulate_cuda_init_(
    t: torch.Tensor,
    low: float,
    high: float,
    seed: int,
    *,
    offset: int = 0,
    sm_count: int,
    max_threads_per_sm: int = 2048,
    saturate_e4m3fn: bool = True,
    contiguous_temp: bool = False,
) -> int:
    """Fill the CPU tensor ``t`` (1-byte: FP8, int8, uint8; or float16) with the bytes the CUDA
    reference path would write for a generator at (``seed``, ``offset``); return the offset
    afterwards.

    ``saturate_e4m3fn``: float8_e4m3fn values above 448 saturate (torch >= 2.13, and
    sm_89+ hardware from 2.12) or become NaN above 464 (torch <= 2.11); int8/uint8 values
    outside the type's range are clamped, or (False) wrap modulo 256. ``contiguous_temp``:
    the temp is ``torch.empty(t.shape)`` (row-major order), as ``init_``'s option.
    """
    return test_ops.emulate_cuda_init_(
        t,
        low,
        high,
        seed,
        offset,
        sm_count,
        max_threads_per_sm,
        saturate_e4m3fn,
        contiguous_temp=contiguous_temp,
    )


def emulate_cuda_init_many_(
    tensors: list[torch.Tensor],
    low: float,
    high: float,
    seed: int,
    *,
    sm_count: int,
    max_threads_per_sm: int = 2048,
    saturate_e4m3fn: bool = True,
    grid: int = 0,
    contiguous_temp: bool = False,
) -> int:
    """``init_many_`` as the CUDA kernel runs it, on CPU tensors (1-byte or float16): the
    batched ones through the kernel's own work table, tile lookup and per-item code, block
    by block on a simulated launch of ``grid`` blocks (0: one wave of ``sm_count`` x 8),
    checking that every work item is visited exactly once; the others through
    :func:`emulate_cuda_init_`. Each tensor gets the bytes of its own fresh generator.
    Returns the number of batched launches (one per FP8 dtype)."""
    return test_ops.emulate_cuda_init_many_(
        tensors,
        low,
        high,
        seed,
        sm_count,
        max_threads_per_sm,
        saturate_e4m3fn,
        grid,
        contiguous_temp=contiguous_temp,
    )


def cuda_launch_plan(
    numel: int, sm_count: int, max_threads_per_sm: int = 2048, offset: int = 0
) -> tuple[list[Launch], int]:
    """The reference's launches for ``numel`` float16 elements and the offset after them
    (tensors over 2^30 elements are split); allocates nothing."""
    flat = test_ops.cuda_launch_plan(numel, sm_count, max_threads_per_sm, offset)
    runs = [Launch(*flat[i : i + 5]) for i in range(1, len(flat), 5)]
    return runs, flat[0]


def emulate_cuda_kernel_init_(
    t: torch.Tensor,
    low: float,
    high: float,
    seed: int,
    *,
    offset: int = 0,
    sm_count: int,
    max_threads_per_sm: int = 2048,
    saturate_e4m3fn: bool = True,
    grid: int = 0,
    contiguous_temp: bool = False,
) -> int:
    """Our per-tensor CUDA kernel (not the reference) on the CPU tensor ``t`` (1-byte): every
    work item through the kernel's own work walk and per-item code, thread after thread of
    a simulated grid of ``grid`` blocks (0: the launcher's wave at the blocks per SM the
    kernel's launch bounds ask for, ``test_ops.cuda_kernel_grid``). The same bytes and
    returned offset as :func:`emulate_cuda_init_` when the kernel is right."""
    return test_ops.emulate_cuda_kernel_init_(
        t,
        low,
        high,
        seed,
        offset,
        sm_count,
        max_threads_per_sm,
        saturate_e4m3fn,
        grid,
        contiguous_temp=contiguous_temp,
    )


def cuda_probe_numel(sm_count: int, max_threads_per_sm: int = 2048, numel: int = 1) -> int:
    """Elements of the CUDA init_ probe of a call of ``numel`` elements on such a GPU: two
    full grid steps of the reference and a partial one; two such pieces for a call over
    2^30 elements (csrc/cuda_plan/cuda_proof.h)."""
    return test_ops.cuda_probe_numel(sm_count, max_threads_per_sm, numel)


def emulate_proven_cuda_init_(
    t: torch.Tensor,
    low: float,
    high: float,
    seed: int,
    *,
    offset: int = 0,
    sm_count: int,
    max_threads_per_sm: int = 2048,
    saturate_e4m3fn: bool = True,
    generator_form: bool = False,
    contiguous_temp: bool = False,
    split_probe: bool = False,
) -> int:
    """``init_`` as the CUDA launcher runs it, with the emulated kernel: proven on its key
    (the launcher's probe and verdict) before it fills ``t``, else the emulated reference.
    Refusals are in :func:`fp8_dummy.self_check_report` and warn once. ``split_probe``: the
    key and probe of a call over 2^30 elements (two pieces at non-zero offsets)."""
    after = test_ops.emulate_proven_cuda_init_(
        t,
        low,
        high,
        seed,
        offset,
        sm_count,
        max_threads_per_sm,
        saturate_e4m3fn,
        generator_form,
        contiguous_temp=contiguous_temp,
        split_probe=split_probe,
    )
    return after


def emulate_proven_cuda_init_many_(
    tensors: list[torch.Tensor],
    low: float,
    high: float,
    seed: int,
    *,
    sm_count: int,
    max_threads_per_sm: int = 2048,
    saturate_e4m3fn: bool = True,
    contiguous_temp: bool = False,
) -> int:
    """``init_many_`` as the CUDA launcher runs it, with the emulated batched kernel, proven
    per dtype before use; returns the number of batched launches."""
    launches = test_ops.emulate_proven_cuda_init_many_(
        tensors,
        low,
        high,
        seed,
        sm_count,
        max_threads_per_sm,
        saturate_e4m3fn,
        contiguous_temp=contiguous_temp,
    )
    return launches


def emulate_proven_cuda_init_stateless_(
    t: torch.Tensor,
    low: float,
    high: float,
    seed: int,
    *,
    key_offset: int = 0,
    element_offset: int = 0,
    element_strides: list[int] | None = None,
    sm_count: int = 132,
) -> None:
    """``init_stateless_`` as its CUDA launcher runs it, with the kernel's per-element rule
    on the CPU, proven against the CPU kernel (linear or general layout) before use."""
    test_ops.emulate_proven_cuda_init_stateless_(
        t, low, high, seed, key_offset, element_offset, element_strides, sm_count
    )
