"""A safetensors file written a window at a time (the format: an 8-byte header length, the
JSON header of each tensor's dtype, shape and byte range, then the tensors back to back): each
window of the file made by the logical model's writer (:meth:`~.logical.LogicalModel.write`) in
one of :data:`BUFFERS` buffers while a thread hands those made before to the kernel, so that
memory stays at the buffers whatever the model's size (docs/export.md, Memory and speed)."""

from __future__ import annotations

import itertools
import json
import math
import os
import queue
import threading
from collections.abc import Sequence
from typing import Any

import torch

from ..stateless import row_major_strides
from .lazy_tensor import Block
from .logical import CheckpointTensor, LogicalModel

__all__ = ["BUFFERS", "CHUNK", "SAFETENSORS_DTYPES", "header", "make_buffers", "shards"]
__all__ += ["tensor_blocks", "windows", "write_tensors"]

# Bytes of the file made at a time, in one of BUFFERS buffers: small enough that the buffers
# stay in a CPU's last-level cache, so the kernel's copy into the page cache reads what the op
# has just written from cache, not from memory; a third buffer lets the making run a window
# ahead of a write that lost its core.
CHUNK = 8 << 20
BUFFERS = 3
_ALIGN = 64  # a window sits in its buffer at its file offset modulo this: dtypes stay aligned
SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def shards(tensors: Sequence[CheckpointTensor], limit: int) -> list[list[CheckpointTensor]]:
    """Tensors in order, a new shard when the next would pass ``limit`` bytes (a tensor larger
    than the limit gets a shard of its own, as transformers does)."""
    out: list[list[CheckpointTensor]] = [[]]
    size = 0
    for t in tensors:
        if out[-1] and size + t.nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(t)
        size += t.nbytes
    return [s for s in out if s]


def header(tensors: Sequence[CheckpointTensor]) -> bytes:
    """A safetensors header: the JSON table of dtype, shape and byte range, padded to 8."""
    table: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        table[t.name] = {
            "dtype": SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(table, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def tensor_blocks(t: CheckpointTensor):
    """(block, its shape, its first byte in the tensor): the tensor cut, in its own order, into
    blocks of at most :data:`CHUNK` bytes (one element at least): runs of whole rows, or where
    a row is larger (an expert of a stacked tensor), runs of the outermost dimension whose
    slices fit, one index of the dimensions before it at a time."""
    strides = row_major_strides(t.shape)
    if not t.shape or t.nbytes <= CHUNK:
        yield Block.whole(t.name, t.shape), t.shape, 0
        return
    item = t.dtype.itemsize
    d = 0  # the dimension the blocks step along: its slices fit a window
    while d < len(t.shape) - 1 and strides[d] * item > CHUNK:
        d += 1
    step = max(1, CHUNK // (strides[d] * item))
    for outer in itertools.product(*map(range, t.shape[:d])):
        base = sum(i * s for i, s in zip(outer, strides))
        for start in range(0, t.shape[d], step):
            shape = (1,) * d + (min(step, t.shape[d] - start), *t.shape[d + 1 :])
            first = base + start * strides[d]
            yield Block(t.name, t.shape, shape, first, tuple(strides)), shape, first * item


def windows(tensors: Sequence[CheckpointTensor], start: int):
    """Consecutive blocks grouped into windows of the file of at most :data:`CHUNK` bytes:
    (first byte, end, [(tensor, block, shape, byte in file), ...], tensors finished in it)."""
    pieces, done, first, end = [], [], start, start
    at = start
    for t in tensors:
        for block, shape, offset in tensor_blocks(t):
            size = math.prod(shape) * t.dtype.itemsize
            if pieces and end + size - first > CHUNK:
                yield first, end, pieces, done
                pieces, done, first = [], [], at + offset
            pieces.append((t, block, shape, at + offset))
            end = at + offset + size
        done.append(t)
        at += t.nbytes
    if pieces or done:
        yield first, end, pieces, done


def make_buffers() -> list[torch.Tensor]:
    """The window buffers an export makes and writes its shards through (kept from shard to
    shard)."""
    return [torch.empty(CHUNK + _ALIGN, dtype=torch.uint8) for _ in range(BUFFERS)]


def write_tensors(
    fd: int,
    lm: LogicalModel,
    tensors: Sequence[CheckpointTensor],
    start: int,
    done,
    buffers: Sequence[torch.Tensor] | None = None,
) -> None:
    """The tensors' bytes written to ``fd`` from byte ``start``, a window at a time: each window
    made in one of the ``buffers`` (:func:`make_buffers`; kept from shard to shard) while a thread
    writes those made before with ``pwrite`` (the op and the write both release the GIL, so
    making and writing overlap). Not through a mapping of the file: a page first touched
    through a mapping faults and is zeroed before it is filled, where ``write`` fills the page
    cache directly."""
    pool = list(buffers) if buffers is not None else make_buffers()
    size = min(b.numel() for b in pool)
    free: queue.Queue = queue.Queue()
    work: queue.Queue = queue.Queue()
    for buf in pool:
        free.put(buf)
    failed: list[BaseException] = []

    def writer() -> None:
        while (item := work.get()) is not None:
            buf, lo, hi, offset, finished = item
            try:
                if not failed:
                    view = memoryview(buf.numpy())[lo:hi]
                    while view:
                        n = os.pwrite(fd, view, offset)
                        view, offset = view[n:], offset + n
                    for t in finished:
                        done(t)
            except BaseException as e:  # raised again in the caller's thread
                failed.append(e)
            free.put(buf)

    thread = threading.Thread(target=writer, name="fp8_dummy-export-writer", daemon=True)
    thread.start()
    try:
        for first, end, pieces, finished in windows(tensors, start):
            buf = free.get()
            if failed:
                break
            lo = first % _ALIGN
            if (
                lo + end - first > size
            ):  # tensor_blocks keeps each within CHUNK: never, unless changed
                raise RuntimeError(
                    f"fp8_dummy export: a window of {end - first} bytes, buffers of {size}"
                )
            for t, block, shape, at in pieces:
                _make_block(lm, t, block, shape, buf, at - first + lo)
            work.put((buf, lo, lo + end - first, first, finished))
    finally:
        work.put(None)
        thread.join()
    if failed:
        raise failed[0]


def _make_block(
    lm: LogicalModel, t: CheckpointTensor, block: Block, shape: tuple, buf: torch.Tensor, at: int
) -> None:
    """One block made at byte ``at`` of the buffer (through an aligned temporary where the
    file puts it off its dtype's alignment: safetensors packs tensors back to back)."""
    count = math.prod(shape)
    if count == 0:
        return
    nbytes = count * t.dtype.itemsize
    if at % t.dtype.itemsize == 0:
        lm.write(buf[at : at + nbytes].view(t.dtype).view(shape), block)
    else:
        tmp = torch.empty(shape, dtype=t.dtype)
        lm.write(tmp, block)
        buf[at : at + nbytes].copy_(tmp.reshape(-1).view(torch.uint8))
