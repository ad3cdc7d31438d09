"""``python -m fp8_dummy export CONFIG OUT``: the logical dummy model (:mod:`.logical`)
written as a Hugging Face checkpoint (safetensors shards, their index, config.json, the
files a checkpoint holds beside them: :mod:`.checkpoint_files`): the arguments, OUT and the
model checked before the first byte is written, then every file made in a private staging
directory, each shard a window at a time (:mod:`.safetensors_writer`), and the whole published
as OUT with one rename (:mod:`.publish`; docs/export.md)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import warnings
from dataclasses import replace
from typing import Any

import torch

from .._atomic_file import write_file
from .._progress import Progress
from .checkpoint_files import UnreadableError, gather
from .config_file import ConfigError, read_config
from .config_formats import config_format
from .exported_config import config_json
from .formats import FORMATS, UnsupportedFormatError
from .hf_model import build_model
from .logical import CheckpointTensor, logical_model
from .publish import OutError, PublishError, check_out, staged
from .safetensors_writer import SAFETENSORS_DTYPES, header, make_buffers, shards, write_tensors
from .speculative import LAYOUTS, parse_acceptance, stage_draft
from .speculative.eagle3 import EAGLE3, eagle3_tensors, is_eagle3

__all__ = ["export", "main"]

INDEX = "model.safetensors.index.json"
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
    transformers config) to the directory ``out``, published whole or not at all; a summary
    (tensors, bytes, shards, seconds, the files left out). ``format``: one of
    :data:`FORMATS`; None: the config's own (:func:`config_format`); ``acceptance``: the
    designed speculative stream (docs/realistic.md#speculative-decoding). The MTP layers the
    config's checkpoint carries are written too. Bad input raises :class:`ExportError` before
    anything is written; a failed write raises OSError."""
    out = os.fspath(out)
    try:
        check_out(out)
    except OutError as e:
        raise ExportError(str(e)) from None
    if format is not None and format not in FORMATS:
        raise ExportError(
            f"fp8_dummy export: unknown format {format!r}; the formats: {', '.join(FORMATS)}"
        )
    if dtype is not None and dtype not in _FLOATS:
        raise ExportError(f"fp8_dummy export: --dtype {dtype!r}: one of {', '.join(_FLOATS)}")
    limit = parse_size(shard_size)
    raw, copies, left = None, [], []
    if isinstance(config, (str, os.PathLike)):
        try:
            config, raw, folder = read_config(config)
            copies, left = gather(folder)
        except (ConfigError, UnreadableError) as e:
            raise ExportError(str(e)) from None
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
    try:
        model = build_model(config, dtype=floats)
    except Exception as e:  # noqa: BLE001 (the model class's own refusal of the config)
        raise ExportError(
            f"fp8_dummy export: the config makes no model: {type(e).__name__}: {e}"
        ) from None
    try:  # the unquantized tensors in --dtype: the format's own float dtype replaced
        lm = logical_model(
            model, seed, routing=routing, format=replace(fmt, dtype=floats),
            acceptance=acceptance, mtp=True, refuse_unloadable=True,
        )  # fmt: skip
    except UnsupportedFormatError as e:  # the architecture cannot take the format
        raise ExportError(str(e)) from None
    architecture = type(model).__name__
    if is_eagle3(config):  # the one-layer Llama twin renamed, widened and designed
        lm, architecture = eagle3_model(lm), EAGLE3
    _check_tensors(lm, architecture, fmt.name, allow_unknown)
    tensors = list(lm.tensors.values())
    total = sum(t.nbytes for t in tensors)
    free = _free(out)
    if free < total + (64 << 20):
        raise ExportError(
            f"fp8_dummy export: {total / 1e9:.2f} GB to write, {free / 1e9:.2f} GB free at {out}"
        )
    settings = config_json(config, lm, floats, raw, architecture)
    # -- written from here on, into the staging directory; published whole at the end
    start = time.perf_counter()
    groups = shards(tensors, limit)
    bar = Progress(len(tensors), total) if progress else None

    def tick(t: CheckpointTensor) -> None:
        if bar is not None:
            bar.update(torch.empty(t.shape, dtype=t.dtype, device="meta"))

    weight_map = {}
    pool = make_buffers()
    with staged(out) as stage:
        for copy in copies:
            write_file(os.path.join(stage, copy.name), copy.data, mode=copy.mode)
        for i, group in enumerate(groups):
            name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"

            def write(fd: int, group=group) -> None:
                head = header(group)
                view = memoryview(head)
                while view:
                    view = view[os.write(fd, view) :]
                os.ftruncate(fd, len(head) + sum(t.nbytes for t in group))
                write_tensors(fd, lm, group, len(head), tick, pool)

            write_file(os.path.join(stage, name), write)
            weight_map.update({t.name: name for t in group})
        if bar is not None:
            bar.close()
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_file(os.path.join(stage, INDEX), json.dumps(index, indent=2).encode())
        # the config last: a staging directory left by a killed export is no model to anyone
        write_file(os.path.join(stage, "config.json"), settings)
    seconds = time.perf_counter() - start
    return {"tensors": len(tensors), "bytes": total, "shards": len(groups), "seconds": seconds,
            "left_out": left}  # fmt: skip


def eagle3_model(lm: Any) -> Any:
    """The logical model of an EAGLE-3 draft from its Llama twin's (:mod:`.speculative.eagle3`)."""
    twin = {n: (t.shape, t.dtype, t.spec, t.key, t.overrides) for n, t in lm.tensors.items()}
    made = eagle3_tensors(twin, lm.config, lm.seed)
    return replace(lm, tensors={n: CheckpointTensor(n, *e) for n, e in made.items()})


def _check_tensors(lm: Any, model: str, fmt: str, allow_unknown: bool) -> None:
    """What no engine can use, refused: tensors no role covers (unless allowed), dtypes
    safetensors cannot hold, tensors with no elements (a size of 0 in the config)."""
    unknown = [n for n, t in lm.tensors.items() if t.spec.role == "unknown"]
    if unknown and not allow_unknown:
        raise ExportError(
            f"fp8_dummy export: {model}: no role covers {_listed(unknown)} (their values "
            "would be a guess: σ = 1/√(last dimension)); --allow-unknown to export anyway"
        )
    missing = [n for n, t in lm.tensors.items() if t.dtype not in SAFETENSORS_DTYPES]
    if missing:
        raise ExportError(
            f"fp8_dummy export: format {fmt}: dtypes safetensors cannot hold: {_listed(missing)}"
        )
    empty = [f"{n} {list(t.shape)}" for n, t in lm.tensors.items() if 0 in t.shape]
    if empty:
        raise ExportError(
            f"fp8_dummy export: {model}: tensors with no elements (a size of 0 in the config): "
            f"{_listed(empty)}"
        )


def _listed(names: list[str]) -> str:
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def prepare_draft(source: str, out: str, seed: int, acceptance: Any, **shape: Any) -> str:
    """``--draft``: the draft model of the target config at ``source`` staged in a private
    directory (:func:`.speculative.stage_draft`) for ``out``, all checked before anything is
    written; the staged directory, which ``export`` then writes to ``out``."""
    if parse_acceptance(acceptance) is None:
        raise ExportError("fp8_dummy export: --draft needs --acceptance (the draft's rate)")
    try:
        check_out(out)
        stage = stage_draft(source, **shape)
    except (OutError, ConfigError, UnreadableError) as e:
        raise ExportError(str(e)) from None
    try:
        config, _, _ = read_config(stage)
        lm = logical_model(build_model(config), seed, acceptance=acceptance)  # the checks
        if is_eagle3(config):
            eagle3_model(lm)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the staging directory is removed."""


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
    p.add_argument(
        "--draft-layout", choices=LAYOUTS, default="llama",
        help="the draft's layout: a plain causal LM (llama) or EAGLE-3's (eagle3)",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main_thread else None

    def terminated(*_: Any) -> None:
        raise _Terminated

    if main_thread:
        signal.signal(signal.SIGTERM, terminated)
    stage = None
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if a.draft is not None:
                stage = prepare_draft(a.config, a.draft, a.seed, a.acceptance,
                                      layers=a.draft_layers, hidden=a.draft_hidden,
                                      layout=a.draft_layout)  # fmt: skip
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
    except (KeyboardInterrupt, _Terminated):
        print(f"fp8_dummy export: interrupted: nothing published at {a.out}", file=sys.stderr)
        return 130
    except PublishError as e:
        print(e.strerror, file=sys.stderr)
        return 1
    except OSError as e:  # a full disk, a file too large, an I/O error
        why = f"{e.strerror} ({e.filename})" if e.strerror and e.filename else e.strerror or e
        print(f"fp8_dummy export: writing failed: {why}; nothing published at {a.out}",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if main_thread:
            signal.signal(signal.SIGTERM, before)
    for w in dict.fromkeys(str(w.message) for w in seen):
        print(f"fp8_dummy export: warning: {w}", file=sys.stderr)
    for name in s["left_out"]:
        print(f"fp8_dummy export: not copied: {name}", file=sys.stderr)
    rate = s["bytes"] / max(s["seconds"], 1e-9) / 1e9
    print(
        f"fp8_dummy export: {s['tensors']} tensors, {s['bytes'] / 1e9:.3f} GB in "
        f"{s['shards']} shard(s), {s['seconds']:.1f} s ({rate:.2f} GB/s) -> {a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
