"""The benchmarks' ``--json``: refused before the benchmark runs where it cannot be written (a
missing or read-only directory, a directory named as the file), then written whole or not at
all, never through a symlink, by the package's one file writer (fp8_dummy/_atomic_file.py,
loaded from this checkout by its path: the SASS scripts run without the built package)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

_FILE = Path(__file__).resolve().parents[1] / "fp8_dummy" / "_atomic_file.py"
_spec = importlib.util.spec_from_file_location("_fp8_dummy_atomic_file", _FILE)
_atomic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_atomic)


def check(parser: argparse.ArgumentParser, path: str | None, option: str = "--json") -> None:
    """``parser.error`` (exit 2) now where ``path`` could not be written at the end."""
    why = _atomic.target_problem(path) if path is not None else None
    if why is not None:
        parser.error(f"argument {option}: {why}")


def write(path: str | Path, data: Any, indent: int = 1) -> None:
    """``data`` as JSON, written atomically."""
    _atomic.write_file(path, (json.dumps(data, indent=indent) + "\n").encode())
