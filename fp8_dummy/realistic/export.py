"""``python -m fp8_dummy export CONFIG OUT``: the logical dummy model (:mod:`.logical`)
written as a Hugging Face checkpoint (safetensors shards, their index, config.json): the
arguments and the model checked before the first byte is written, then each shard written a
window at a time (:mod:`.safetensors_writer`) under a temporary name in OUT and renamed when
complete, the index last of all (docs/export.md)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import replace
from typing import Any

import torch

from .._progress import Progress
from .formats import FORMATS, UnsupportedFormatError, config_format
from .hf_model import build_model, config_of
from .logical import CheckpointTensor, LogicalModel, logical_model
from .safetensors_writer import SAFETENSORS_DTYPES, header, make_buffers, shards, write_tensors
from .speculative import parse_acceptance, stage_draft

__all__ = ["export", "main"]

INDEX = "model.safetensors.index.json"
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


class _Raw:
    """Writes straight to the file descriptor (a buffered file object copies large writes
    through its buffer)."""

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
    acceptance: Any = None,
) -> dict:
    """Write the logical model of ``config`` (a config.json, a directory holding one, or a
    transformers config) to the directory ``out``; a summary (tensors, bytes, seconds).
    ``format``: one of :data:`FORMATS`; None: the config's own (:func:`config_format`);
    ``acceptance``: the designed speculative stream (docs/realistic.md#speculative-decoding).
    The MTP layers the config's checkpoint carries are written too."""
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
        lm = logical_model(
            model, seed, routing=routing, format=replace(fmt, dtype=floats),
            acceptance=acceptance, mtp=True,
        )  # fmt: skip
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
    missing = [n for n, t in lm.tensors.items() if t.dtype not in SAFETENSORS_DTYPES]
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
    pool = make_buffers()
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"

        def write(f, group=group):
            head = header(group)
            f.write(head)
            os.ftruncate(f.fd, len(head) + sum(t.nbytes for t in group))
            write_tensors(f.fd, lm, group, len(head), tick, pool)

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


def prepare_draft(source: str, out: str, seed: int, acceptance: Any, **shape: Any) -> str:
    """``--draft``: the draft model of the target config at ``source`` staged in a private
    directory (:func:`.speculative.stage_draft`) for ``out``, all checked before anything is
    written; the staged directory, which ``export`` then writes to ``out``."""
    if parse_acceptance(acceptance) is None:
        raise ExportError("fp8_dummy export: --draft needs --acceptance (the draft's rate)")
    _check_out(out)
    stage = stage_draft(source, **shape)
    try:
        logical_model(build_model(config_of(stage)), seed, acceptance=acceptance)  # the checks
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage


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
    p.add_argument(
        "--acceptance", default=None,
        help="the draft's acceptance: A in [0, 1], a per-position list A1,A2,.. or 'default'",
    )  # fmt: skip
    p.add_argument("--draft", default=None, help="also a draft model into this directory")
    p.add_argument("--draft-layers", type=int, default=2, help="the draft's layers (default 2)")
    p.add_argument("--draft-hidden", type=int, default=None, help="the draft's hidden size")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    stage = None
    try:
        if a.draft is not None:
            stage = prepare_draft(a.config, a.draft, a.seed, a.acceptance, layers=a.draft_layers,
                                  hidden=a.draft_hidden)  # fmt: skip
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
            acceptance=a.acceptance,
        )
        if stage is not None:
            d = export(stage, a.draft, seed=a.seed, acceptance=a.acceptance,
                       shard_size=a.shard_size, progress=not a.quiet)  # fmt: skip
            print(f"fp8_dummy export: draft {d['tensors']} tensors -> {a.draft}")
    except (ExportError, FileNotFoundError, ValueError, TypeError) as e:
        print(str(e), file=sys.stderr)
        return 2
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    rate = s["bytes"] / max(s["seconds"], 1e-9) / 1e9
    print(
        f"fp8_dummy export: {s['tensors']} tensors, {s['bytes'] / 1e9:.3f} GB in "
        f"{s['shards']} shard(s), {s['seconds']:.1f} s ({rate:.2f} GB/s) -> {a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
