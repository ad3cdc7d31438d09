"""What the report commands share (``python -m fp8_dummy routing``, ``python -m fp8_dummy
acceptance``): their common arguments and the checks made of them before any work (each a
one-line usage error, exit status 2: ``--json`` a place a file can be written, the seed in the
fill's domain, the config readable), and the report's JSON, written by the package's one
atomic writer (fp8_dummy/_atomic_file.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._atomic_file import target_problem, write_file
from ..ops import as_int64
from .config_file import ConfigError, read_config

__all__ = ["common_arguments", "common_seed", "positive", "report_config", "write_json"]


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


def common_seed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--json`` checked writable and the seed read as the fill reads it (modulo 2^64), before
    anything is computed; the seed."""
    if args.json is not None and (why := target_problem(args.json)) is not None:
        parser.error(f"--json: {why}")
    try:
        return as_int64(args.seed, "--seed", parser.prog) % (1 << 64)
    except (TypeError, ValueError) as e:
        parser.error(str(e))


def report_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The transformers config ``args.config`` names (a usage error where there is none)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        parser.error("the report builds the model with transformers: pip install transformers")
    try:
        return read_config(args.config)[0]
    except ConfigError as e:
        parser.error(str(e))


def write_json(path: Path, report: Any) -> None:
    """``report`` as JSON at ``path``, complete or not at all."""
    write_file(path, json.dumps(report, indent=1).encode())
