"""Proofs in a child process with a timeout, their verdicts cached on disk: a kernel that never
ran on this GPU may fault or hang, which no in-process proof survives (docs/engines.md)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
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
        try:
            return json.loads(results[-1][len(_RESULT) :]), ""
        except ValueError as e:  # a torn or foreign line: no answer, never an exception here
            return None, f"the child process's answer does not parse ({e}): {results[-1][:200]}"
    last = (err.strip().splitlines() or ["nothing on stderr"])[-1]
    how = f"killed by signal {-rc} ({signal.strsignal(-rc)})" if rc < 0 else f"exit status {rc}"
    return None, f"the child process ended without a result, {how}: {last}"


def verdict(key: str, target: str, args: Sequence[Any], device: str, timeout=120.0) -> str | None:
    """A probe for :func:`fp8_dummy._proof.proven` in a child: ``target(*args)`` returns None
    (the reference's bytes) or what differs; a crash or a timeout is a refusal, running out of
    memory none (MemoryError). Cached on disk (:mod:`._verdict_cache`: per key, library build,
    torch build, device and fault state, believed only from a directory and file of this
    user's), but for a timeout (tried at the next start)."""
    from . import _verdict_cache as cache

    env = cache.identity(device)
    found = cache.load(key, env)
    if found is not None:
        why, path = found
        return (
            f"{why} (cached at an earlier start in {path}: delete it to prove again)"
            if why
            else None
        )
    result, why = run_child(target, args, timeout)
    if result is None and ("out of memory" in why or "allocate memory" in why):
        raise MemoryError(why) from None  # no verdict: _proof.proven tries again later
    why = why or ("" if result is None else str(result))
    where = "in a child process; not cached: a timeout may be a busy machine's"
    if cache.faulted():
        where = "in a child process; not cached: FP8_DUMMY_FAULT is set"
    elif not why.startswith(_HANG):
        path = cache.store(key, env, why)
        where = "in a child process; " + (f"cached in {path}" if path else "not cached")
    return f"{why} ({where})" if why else None


if __name__ == "__main__":  # the child: python -m fp8_dummy._isolated TARGET ARGS_JSON
    module, _, function = sys.argv[1].partition(":")
    answer = getattr(importlib.import_module(module), function)(*json.loads(sys.argv[2]))
    print(_RESULT + json.dumps(answer), flush=True)
