"""Proofs in a child process with a timeout, their verdicts cached on disk: a kernel that never
ran on this GPU may fault or hang, which no in-process proof survives (docs/engines.md)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_RESULT, _HANG = "fp8_dummy-child-result: ", "no answer in"
# Verdicts a child proving several keys gave (prove_together), taken by verdict(): key -> ""
# (the reference's bytes) or what differs.
_together: dict[str, str] = {}


# The child's start: isolated (``-I``: neither the working directory nor PYTHON* variables nor
# the user's site directory on its path), then the import path it is given, then this module.
_START = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv.pop(1)); import runpy; "
    f"runpy.run_module({__name__!r}, run_name='__main__', alter_sys=True)"
)


def import_path(target: str) -> list[str]:
    """Where the child imports from: this library's own directory, the target module's, and the
    absolute entries of this process's import path (where the library, torch and an engine's
    code were found); never the working directory (the caller may have moved to a place others
    write; as a relative entry or an absolute one) nor the current environment's PYTHONPATH."""
    module = target.partition(":")[0].split(".")[0]
    roots = [str(Path(__file__).resolve().parents[1])]
    spec = importlib.util.find_spec(module) if module else None
    for where in (getattr(spec, "submodule_search_locations", None) or [])[:1]:
        roots.append(str(Path(where).resolve().parent))
    if spec is not None and spec.origin and not spec.submodule_search_locations:
        roots.append(str(Path(spec.origin).resolve().parent))
    here = os.path.realpath(os.getcwd())
    roots += [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) != here]
    return list(dict.fromkeys(roots))


def run_child(target: str, args: Sequence[Any] = (), timeout: float = 120.0) -> tuple[Any, str]:
    """``target`` ("package.module:function") called with the JSON ``args`` in a fresh Python:
    (its result, "") or (None, why none came: a signal, an exit status or the timeout)."""
    path = json.dumps(import_path(target))
    cmd = [sys.executable, "-I", "-c", _START, path, target, json.dumps(list(args))]
    # The child proves in-process (no grandchildren), and without the start-up hook, which
    # would patch the engine it probes; it runs in this library's directory, not the caller's.
    env = dict(os.environ, FP8_DUMMY_ISOLATE="0", FP8_DUMMY_TRTLLM="0")
    cwd = str(Path(__file__).resolve().parent)
    try:  # killed on a timeout or an interrupt: no orphan left
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
        )
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


def verdict(
    key: str, target: str, args: Sequence[Any], device: str, timeout=120.0,
    before_child: Callable[[], None] | None = None,
) -> str | None:  # fmt: skip
    """A probe for :func:`fp8_dummy._proof.proven` in a child: ``target(*args)`` returns None
    (the reference's bytes) or what differs; a crash or a timeout is a refusal, running out of
    memory none (MemoryError). Cached on disk (:mod:`._verdict_cache`: per key, library build,
    torch build, device and fault state, believed only from a directory and file of this
    user's), but for a timeout (tried at the next start). ``before_child``: called when no
    verdict is at hand, before a child is started (the plan then proves its keys together)."""
    from . import _verdict_cache as cache

    env = cache.identity(device)
    if key not in _together:
        found = cache.load(key, env)
        if found is not None:
            why, path = found
            return (
                f"{why} (cached at an earlier start in {path}: delete it to prove again)"
                if why
                else None
            )
        if before_child is not None:
            before_child()  # may prove this key with others (prove_together)
    why = _together.pop(key, None)
    if why is None:
        result, why = run_child(target, args, timeout)
        if result is None and _out_of_memory(why):
            raise MemoryError(why) from None  # no verdict: _proof.proven tries again later
        why = why or ("" if result is None else str(result))
    where = "in a child process; not cached: a timeout may be a busy machine's"
    if cache.faulted():
        where = "in a child process; not cached: FP8_DUMMY_FAULT is set"
    elif not why.startswith(_HANG):
        path = cache.store(key, env, why)
        where = "in a child process; " + (f"cached in {path}" if path else "not cached")
    return f"{why} ({where})" if why else None


def _out_of_memory(why: str) -> bool:
    return "out of memory" in why or "allocate memory" in why


def prove_together(requests: Sequence[tuple[str, str, Any, str]], timeout=120.0) -> None:
    """The first proofs of several keys, ``(key, target, args, device)`` as :func:`verdict`
    takes them, in one child: each answer is kept for the key's :func:`verdict`. Keys already
    cached are left out. A child that dies or hangs, and every key from one that raised on,
    decide nothing: those keys are proven in children of their own, which name the one at
    fault (a fault on a GPU can poison what the same process runs after it)."""
    from . import _verdict_cache as cache

    def open_(key: str, device: str) -> bool:  # neither answered here nor cached on disk
        return key not in _together and cache.load(key, cache.identity(device)) is None

    todo = [r for r in requests if open_(r[0], r[3])]
    if len(todo) < 2:
        return
    answers, _ = run_child(f"{__name__}:_each", [[[t, a] for _, t, a, _ in todo]], timeout)
    if not isinstance(answers, list):
        return
    for (key, *_), answer in zip(todo, answers):
        if not (isinstance(answer, list) and len(answer) == 2 and answer[0] == "done"):
            break  # this key raised: it and the keys after it, each in its own child
        _together[key] = "" if answer[1] is None else str(answer[1])


def _each(calls: list) -> list:
    """The child of :func:`prove_together`: ``target(*args)`` of each call in turn, ["done",
    its answer], until one raises: ["raised", why], and no call after it runs."""
    out = []
    for target, args in calls:
        module, _, function = target.partition(":")
        try:
            out.append(["done", getattr(importlib.import_module(module), function)(*args)])
        except Exception as e:  # noqa: BLE001 (reported; its key is proven alone)
            out.append(["raised", f"{type(e).__name__}: {e}"])
            break
    return out


if __name__ == "__main__":  # the child: python -I -c _START PATH_JSON TARGET ARGS_JSON
    module, _, function = sys.argv[1].partition(":")
    answer = getattr(importlib.import_module(module), function)(*json.loads(sys.argv[2]))
    print(_RESULT + json.dumps(answer), flush=True)
