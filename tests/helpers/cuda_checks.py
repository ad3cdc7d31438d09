"""Helpers of the CUDA tests and of the CPU emulator tests: expected bytes from the numpy
oracle, poisoned tensors with a given layout, exact integer views."""

from __future__ import annotations

import functools

import torch
from conftest import storage_bytes
from ext import test_ops

from fp8_dummy._versions import major_minor

FP8_NAMES = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]


def torch_saturates_e4m3fn() -> bool:
    return major_minor(torch.__version__) >= (2, 13)


def expected_bytes(t, low, high, seed, offset, device, saturate=True):
    """The reference's bytes for t (logical order, uint8 view of t's shape) from the
    oracle, laid out through torch's own empty_like (the definition of the memory
    order), and the offset after."""
    import numpy as np  # the oracle is numpy: imported where used, as tests skip without it
    from oracles import cuda_reference as oracle

    n = t.numel()
    halves, after = oracle.reference_halves(n, low, high, seed, offset, *device)
    if t.dtype == torch.float16:
        values = halves.view(np.uint8)
        temp = torch.empty_like(t, dtype=torch.float16)
    else:
        values = oracle.fp8_table(str(t.dtype).split(".")[1], saturate)[halves.view(np.uint16)]
        temp = torch.empty_like(t, dtype=torch.uint8)
    storage_bytes(temp).copy_(torch.from_numpy(values.copy()))
    return temp, after


def outside_view(t: torch.Tensor) -> torch.Tensor:
    """Mask over t's storage (in elements) of the elements t does not cover."""
    inside = torch.zeros(t.untyped_storage().nbytes() // t.element_size(), dtype=torch.bool)
    inside.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    return ~inside


def as_ints(t: torch.Tensor) -> torch.Tensor:
    """t's bytes as integers of its width, for exact comparisons (never allclose)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(ints[t.element_size()])


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor with t's shape, strides and storage offset, all storage bytes 0x55."""
    storage = torch.full((t.untyped_storage().nbytes(),), 0x55, dtype=torch.uint8, device=t.device)
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    return out.set_(storage.untyped_storage(), t.storage_offset(), t.shape, t.stride())


@functools.cache
def saturates_e4m3fn(device: str) -> bool:
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    table = halves.to(device).to(torch.float8_e4m3fn).view(torch.uint8).cpu()
    mode, _ = test_ops.pick_fp8_mode(table, torch.float8_e4m3fn)
    assert mode in (0, 1), "torch's e4m3fn conversion on this GPU matches none of ours"
    return mode == 0


def poisoned_cpu(t: torch.Tensor) -> torch.Tensor:
    storage_ = torch.full((t.untyped_storage().nbytes(),), 0x55, dtype=torch.uint8)
    return torch.empty(0, dtype=t.dtype).set_(
        storage_.untyped_storage(), t.storage_offset(), t.shape, t.stride()
    )
