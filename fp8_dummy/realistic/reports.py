"""What the report commands share (``python -m fp8_dummy routing``, ``python -m fp8_dummy
acceptance``): their common arguments and checks, and the report's JSON, written through an
unpredictable temporary in the target's directory and renamed (never through a link)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["common_arguments", "config_file", "positive", "write_json"]


def positive(text: str) -> int:
    """An argument that must be a positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def common_arguments(p: argparse.ArgumentParser) -> None:
    """CONFIG, ``--seed`` and ``--json``, which every report takes."""
    p.add_argument("config", help="a transformers config.json, or a directory holding one")
    p.add_argument("--seed", type=int, default=0, help="the realistic fill's seed (default 0)")
    p.add_argument("--json", type=Path, default=None, help="also write the report here")


def config_file(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The config.json ``args.config`` names, and ``--json``'s directory, checked (a usage
    error otherwise)."""
    path = Path(args.config)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        parser.error(f"{args.config}: no config.json there")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: directory {args.json.parent} does not exist")
    return path


def write_json(path: Path, report: Any) -> None:
    """``report`` as JSON at ``path``, complete or not at all."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=1))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
