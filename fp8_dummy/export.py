"""``python -m fp8_dummy export CONFIG OUT``: the logical dummy model (fp8_dummy/checkpoint.py)
written as a Hugging Face checkpoint (safetensors shards, their index, config.json), made a
window of the file at a time in one of three buffers while a thread writes another: memory
stays at three windows (:data:`CHUNK` each) whatever the model's size.
Everything is checked before the first byte is written; each file is written under a
temporary name in OUT and renamed when complete, the index last of all (docs/export.md)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from ._lazy_tensor import Block
from ._progress import Progress
from .checkpoint import CheckpointTensor, LogicalModel, build_model, config_of, logical_model
from .formats import FORMATS, UnsupportedFormatError, config_format
from .stateless import row_major_strides

__all__ = ["export", "main"]

# Bytes of the file made (in one of BUFFERS buffers) at a time: small enough that the buffers
# stay in the CPU's last-level cache, so the kernel's copy into the page cache reads what the
# op has just written from cache, not from memory. Against two of 64 MiB on the 2-vCPU EPYC VM
# (32 MiB of L3), into ext4, medians of 10 alternating runs: system time 0.60 -> 0.47 s
# (fp8-channel, 1.5 GB), 0.62 -> 0.29 s (nvfp4, 1.07 GB), the baseline's own 0.43 and 0.31 s.
# A third buffer lets the making run a window ahead of a write that lost its core: 8-10 %
# less time than two (fp8-block, fp8-channel, nvfp4; medians of 8-10 runs).
CHUNK = 8 << 20
BUFFERS = 3
_ALIGN = 64  # a window sits in its buffer at its file offset modulo this: dtypes stay aligned
INDEX = "model.safetensors.index.json"
_NAMES = {
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
_WEIGHTS = re.compile(r".*\.(safetensors|bin|pt|pth|gguf)$|.*\.index\.json$|^config\.json$")
_FLOATS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class ExportError(ValueError):
    """An export refused before anything is written."""


def parse_size(text: str | int) -> int:
    """``5GB``, ``500MB``, ``2GiB`` or a number of bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*", str(text), re.IGNORECASE)
    if not m:
        raise ExportError(f"fp8_dummy export: shard size {text!r} (e.g. 5GB, 500MB, 2GiB)")
    unit = m.group(2).upper().rstrip("B")
    base = 1024 if unit.endswith("I") else 1000
    power = "KMGT".find(unit[:1]) + 1 if unit else 0
    size = int(float(m.group(1)) * base**power)
    if size <= 0:
        raise ExportError(f"fp8_dummy export: shard size {text!r} must be positive")
    return size


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


def _header(tensors: Sequence[CheckpointTensor]) -> bytes:
    """A safetensors header: the JSON table of dtype, shape and byte range, padded to 8."""
    table: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        table[t.name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(table, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _blocks(t: CheckpointTensor):
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


def _windows(tensors: Sequence[CheckpointTensor], start: int):
    """Consecutive blocks grouped into windows of the file of at most :data:`CHUNK` bytes:
    (first byte, end, [(tensor, block, shape, byte in file), ...], tensors finished in it)."""
    pieces, done, first, end = [], [], start, start
    at = start
    for t in tensors:
        for block, shape, offset in _blocks(t):
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


def _buffers() -> list[torch.Tensor]:
    """The window buffers an export makes and writes its shards through (kept from shard to
    shard). (Advising 64 MiB ones to transparent huge pages, 32 faults instead of 16,384,
    changed nothing measurable: bench_export's system time was the same.)"""
    return [torch.empty(CHUNK + _ALIGN, dtype=torch.uint8) for _ in range(BUFFERS)]


def _write_tensors(
    fd: int,
    lm: LogicalModel,
    tensors: Sequence[CheckpointTensor],
    start: int,
    done,
    buffers: Sequence[torch.Tensor] | None = None,
) -> None:
    """The tensors' bytes written to ``fd`` from byte ``start``, a window at a time: each window
    made in one of the ``buffers`` (:func:`_buffers`; kept from shard to shard) while a thread
    writes those made before with ``pwrite`` (the op and the write both release the GIL, so
    making and writing overlap). Not through a mapping of the file: a page first touched
    through a mapping faults and is zeroed before it is filled, where ``write`` fills the page
    cache directly (1.3x the time on tmpfs, measured)."""
    pool = list(buffers) if buffers is not None else _buffers()
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
        for first, end, pieces, finished in _windows(tensors, start):
            buf = free.get()
            if failed:
                break
            lo = first % _ALIGN
            if lo + end - first > size:  # _blocks keeps each within CHUNK: never, unless changed
                raise RuntimeError(
                    f"fp8_dummy export: a window of {end - first} bytes, buffers of {size}"
                )
            for t, block, shape, at in pieces:
                _fill(lm, t, block, shape, buf, at - first + lo)
            work.put((buf, lo, lo + end - first, first, finished))
    finally:
        work.put(None)
        thread.join()
    if failed:
        raise failed[0]


def _fill(
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


class _Raw:
    """Writes straight to the file descriptor (a buffered file object copies large writes
    through its buffer: ten times slower here)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self.fd, view) :]


def _atomic(path: str, write: Any) -> None:
    """``write(file)`` into a temporary name beside ``path`` (never through a link), then the
    rename: a file under its final name is complete."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        try:
            write(_Raw(fd))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_out(out: str) -> None:
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise ExportError(f"fp8_dummy export: {out} exists and is not a directory")
        if os.listdir(out):
            raise ExportError(f"fp8_dummy export: {out} exists and is not empty (nothing changed)")


def _free(out: str) -> int:
    p = os.path.abspath(out)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    return shutil.disk_usage(p).free


def export(
    config: str | os.PathLike | Any,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    format: str | None = None,
    routing: Any = "balanced",
    dtype: str | None = None,
    shard_size: str | int = "5GB",
    allow_unknown: bool = False,
    progress: bool = True,
) -> dict:
    """Write the logical model of ``config`` (a config.json, a directory holding one, or a
    transformers config) to the directory ``out``; a summary (tensors, bytes, seconds).
    ``format``: one of :data:`FORMATS`; None: the config's own (:func:`config_format`)."""
    out = os.fspath(out)
    _check_out(out)
    if format is not None and format not in FORMATS:
        raise ExportError(
            f"fp8_dummy export: unknown format {format!r}; the formats: {', '.join(FORMATS)}"
        )
    if dtype is not None and dtype not in _FLOATS:
        raise ExportError(f"fp8_dummy export: --dtype {dtype!r}: one of {', '.join(_FLOATS)}")
    limit = parse_size(shard_size)
    source = None
    if isinstance(config, (str, os.PathLike)):
        source = os.fspath(config)
        config = config_of(source)
    try:
        fmt = FORMATS[format] if format is not None else config_format(config)
    except UnsupportedFormatError as e:
        raise ExportError(f"{e} (--format chooses one)") from None
    floats = _FLOATS[dtype] if dtype else fmt.dtype
    if fmt.quant is None and dtype is not None and floats != fmt.dtype:
        raise ExportError(
            f"fp8_dummy export: --format {fmt.name} is {fmt.dtype}; --dtype {dtype} "
            "contradicts it (--dtype sets the unquantized tensors of fp8 formats)"
        )
    model = build_model(config, dtype=floats)
    try:  # the unquantized tensors in --dtype: the format's own float dtype replaced
        lm = logical_model(model, seed, routing=routing, format=replace(fmt, dtype=floats))
    except UnsupportedFormatError as e:  # the architecture cannot take the format
        raise ExportError(str(e)) from None
    unknown = [n for n, t in lm.tensors.items() if t.spec.role == "unknown"]
    if unknown and not allow_unknown:
        listed = ", ".join(unknown[:8]) + (
            f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        )
        raise ExportError(
            f"fp8_dummy export: {type(model).__name__}: no role covers {listed} (their values "
            "would be a guess: σ = 1/√(last dimension)); --allow-unknown to export anyway"
        )
    missing = [n for n, t in lm.tensors.items() if t.dtype not in _NAMES]
    if missing:
        raise ExportError(
            f"fp8_dummy export: format {fmt.name}: dtypes safetensors cannot hold: "
            f"{', '.join(missing[:8])}"
        )
    tensors = list(lm.tensors.values())
    total = sum(t.nbytes for t in tensors)
    free = _free(out)
    if free < total + (64 << 20):
        raise ExportError(
            f"fp8_dummy export: {total / 1e9:.2f} GB to write, {free / 1e9:.2f} GB free at {out}"
        )
    # -- written from here on
    start = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    if source is not None:
        folder = os.path.dirname(source) if os.path.isfile(source) else source
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not _WEIGHTS.match(name):
                _atomic(os.path.join(out, name), lambda f, p=path: f.write(open(p, "rb").read()))
    _atomic(os.path.join(out, "config.json"), lambda f: f.write(_config_json(config, lm, floats)))
    groups = shards(tensors, limit)
    bar = Progress(len(tensors), total) if progress else None

    def tick(t: CheckpointTensor) -> None:
        if bar is not None:
            bar.update(torch.empty(t.shape, dtype=t.dtype, device="meta"))

    weight_map = {}
    buffers = _buffers()
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"

        def write(f, group=group):
            header = _header(group)
            f.write(header)
            os.ftruncate(f.fd, len(header) + sum(t.nbytes for t in group))
            _write_tensors(f.fd, lm, group, len(header), tick, buffers)

        _atomic(os.path.join(out, name), write)
        weight_map.update({t.name: name for t in group})
    if bar is not None:
        bar.close()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    _atomic(os.path.join(out, INDEX), lambda f: f.write(json.dumps(index, indent=2).encode()))
    seconds = time.perf_counter() - start
    return {"tensors": len(tensors), "bytes": total, "shards": len(groups), "seconds": seconds}


def _config_json(config: Any, lm: LogicalModel, floats: torch.dtype) -> bytes:
    data = json.loads(config.to_json_string(use_diff=True))
    data["dtype"] = str(floats).removeprefix("torch.")
    data.pop("torch_dtype", None)
    data.pop("quantization_config", None)
    quant = lm.quantization_config()
    if quant is not None:
        data["quantization_config"] = quant
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8_dummy export", description=__doc__)
    p.add_argument("config", help="a config.json, or a directory holding one")
    p.add_argument("out", help="the checkpoint's directory (absent or empty)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--format", default=None, help=f"one of {', '.join(FORMATS)} (default: the config's)"
    )
    p.add_argument("--routing", default="balanced", help="balanced, zipf:A or a load's JSON")
    p.add_argument("--dtype", default=None, help="the unquantized tensors' dtype: bf16, fp16, fp32")
    p.add_argument("--shard-size", default="5GB")
    p.add_argument("--allow-unknown", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    try:
        s = export(
            a.config,
            a.out,
            seed=a.seed,
            format=a.format,
            routing=a.routing,
            dtype=a.dtype,
            shard_size=a.shard_size,
            allow_unknown=a.allow_unknown,
            progress=not a.quiet,
        )
    except (ExportError, FileNotFoundError, ValueError, TypeError) as e:
        print(str(e), file=sys.stderr)
        return 2
    rate = s["bytes"] / max(s["seconds"], 1e-9) / 1e9
    print(
        f"fp8_dummy export: {s['tensors']} tensors, {s['bytes'] / 1e9:.3f} GB in "
        f"{s['shards']} shard(s), {s['seconds']:.1f} s ({rate:.2f} GB/s) -> {a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
