"""Worker processes of the multi-process tests: a free TCP port for a gloo group, and a set of
processes started together and waited for together (one that hangs stops them all)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A port on 127.0.0.1 no one listens on now (for a gloo group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_together(commands: list[list[str]], env: dict, timeout: float) -> list[str]:
    """Each command's combined output, all started at once; past ``timeout`` seconds for
    any of them, every one is killed and TimeoutExpired raised."""
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise
    return logs


def environment(**more: str) -> dict:
    """The workers' environment: one thread each (they share this machine's cores)."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **more)


def gather(commands: list[list[str]], files: list, env: dict, timeout: float = 900) -> list[dict]:
    """The commands run together (:func:`run_together`); each one's findings, read from its
    JSON file, none of them an error (else the test fails with the worker's output)."""
    logs = run_together(commands, env, timeout)
    results = []
    for i, (path, log) in enumerate(zip(files, logs)):
        assert path.exists(), f"worker {i} ({path.name}) wrote nothing:\n{log[-3000:]}"
        result = json.loads(path.read_text())
        assert "error" not in result, f"worker {i} ({path.name}):\n{result['error']}"
        results.append(result)
    return results


def report(path, run: Callable[..., dict], *args: Any, **first: Any) -> None:
    """In a worker: ``run(*args)``'s findings (after ``first``), or its traceback under
    "error", written to ``path`` as JSON for the parent test."""
    result = dict(first)
    try:
        result.update(run(*args))
    except Exception:  # noqa: BLE001 (reported to the parent test)
        result["error"] = traceback.format_exc()
    Path(path).write_text(json.dumps(result))


def pair(worker, tmp: Path, repo: Path) -> list[dict]:
    """``worker`` in two processes (ranks of one gloo group), each given ``tmp`` and the
    repository; their findings, from ``tmp``/<rank>.json."""
    import sys

    port = free_port()
    commands = [
        [sys.executable, str(worker), str(r), str(port), str(tmp), str(repo)] for r in (0, 1)
    ]
    return gather(commands, [tmp / f"{r}.json" for r in (0, 1)], environment())
