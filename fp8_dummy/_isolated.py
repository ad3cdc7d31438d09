"""Proofs in a child process with a timeout, their verdicts cached on disk: a kernel that never
ran on this GPU may fault or hang, which no in-process proof survives (docs/engines.md)."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_RESULT, _HANG = "fp8_dummy-child-result: ", "no answer in"


def run_child(target: str, args: Sequence[Any] = (), timeout: float = 120.0) -> tuple[Any, str]:
    """``target`` ("package.module:function") called with the JSON ``args`` in a fresh Python:
    (its result, "") or (None, why none came: a signal, an exit status or the timeout)."""
    cmd = [sys.executable, "-m", __name__, target, json.dumps(list(args))]
    # The child imports what this process can (its sys.path), proves in-process (no
    # grandchildren), and without the start-up hook, which would patch the engine it probes.
    path = os.pathsep.join([*filter(None, sys.path), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, FP8_DUMMY_ISOLATE="0", FP8_DUMMY_TRTLLM="0")
    try:  # killed on a timeout or an interrupt: no orphan left
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"{_HANG} {timeout:g} s (a hang? the child was killed)"
    out, err, rc = proc.stdout, proc.stderr, proc.returncode
    results = [line for line in out.splitlines() if line.startswith(_RESULT)]
    if results:
        return json.loads(results[-1][len(_RESULT) :]), ""
    last = (err.strip().splitlines() or ["nothing on stderr"])[-1]
    how = f"killed by signal {-rc} ({signal.strsignal(-rc)})" if rc < 0 else f"exit status {rc}"
    return None, f"the child process ended without a result, {how}: {last}"


@functools.cache  # asked once per key and start
def driver_version() -> str:
    """The NVIDIA driver's version ("580.159.03"), or "" where nvidia-smi cannot tell."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return ""


def verdict(key: str, target: str, args: Sequence[Any], device: str, timeout=120.0) -> str | None:
    """A probe for :func:`fp8_dummy._proof.proven` in a child: ``target(*args)`` returns None
    (the reference's bytes) or what differs; a crash or a timeout is a refusal, running out of
    memory none (MemoryError). Cached per key, device, driver, torch and fp8_dummy version, but
    for a timeout (tried at the next start)."""
    import torch

    from ._version import __version__

    cuda = torch.device(device).type == "cuda"
    env = [torch.cuda.get_device_name(device) if cuda else "cpu", driver_version() if cuda
           else "", torch.__version__, __version__]  # fmt: skip
    name = hashlib.sha256(json.dumps([key, env]).encode()).hexdigest()[:32] + ".json"
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fp8_dummy"
    path = path / "proofs" / name  # a file per verdict: ranks starting at once never clash
    try:
        why = str(json.loads(path.read_text())["detail"])
        where = f"cached at an earlier start in {path}: delete it to prove again"
    except (OSError, ValueError, TypeError, KeyError):  # none yet, or corrupt: prove
        result, why = run_child(target, args, timeout)
        if result is None and ("out of memory" in why or "allocate memory" in why):
            raise MemoryError(why) from None  # no verdict: _proof.proven tries again later
        why = why or ("" if result is None else str(result))
        where = "in a child process; not cached: a timeout may be a busy machine's"
        if not why.startswith(_HANG):  # whole or not at all: a temp file renamed
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_text(json.dumps({"key": key, "environment": env, "detail": why}))
                os.replace(tmp, path)
                where = f"in a child process; cached in {path}"
            except OSError:  # a read-only cache: proved again at the next start
                tmp.unlink(missing_ok=True)
                where = "in a child process; not cached: the cache is not writable"
    return f"{why} ({where})" if why else None


if __name__ == "__main__":  # the child: python -m fp8_dummy._isolated TARGET ARGS_JSON
    module, _, function = sys.argv[1].partition(":")
    answer = getattr(importlib.import_module(module), function)(*json.loads(sys.argv[2]))
    print(_RESULT + json.dumps(answer), flush=True)
