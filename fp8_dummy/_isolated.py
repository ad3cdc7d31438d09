"""Proofs in a child process, their verdicts kept on disk. A kernel that never ran on this GPU
may fault (an illegal address, a hang), which a proof of its bytes cannot catch in-process: so
a plugin's first proof on a device runs in a fresh Python with a timeout, as vLLM runs its P2P
check, and its verdict is cached (keyed by the device's name, the driver, torch, fp8_dummy's
version and the proof's key) so that later starts skip the child."""

from __future__ import annotations

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
    """Calls ``target`` ("package.module:function") with the JSON values ``args`` in a fresh
    Python: (its result, "") or (None, why none came: the signal or exit status that ended
    the child with its stderr's last line, or the timeout)."""
    cmd = [sys.executable, "-m", __name__, target, json.dumps(list(args))]
    try:  # killed on a timeout or an interrupt: no orphan left
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{_HANG} {timeout:g} s (a hang? the child was killed)"
    out, err, rc = proc.stdout, proc.stderr, proc.returncode
    results = [line for line in out.splitlines() if line.startswith(_RESULT)]
    if results:
        return json.loads(results[-1][len(_RESULT) :]), ""
    last = (err.strip().splitlines() or ["nothing on stderr"])[-1]
    how = f"killed by signal {-rc} ({signal.strsignal(-rc)})" if rc < 0 else f"exit status {rc}"
    return None, f"the child process ended without a result, {how}: {last}"


def driver_version() -> str:
    """The NVIDIA driver's version ("580.159.03"), or "" where nvidia-smi cannot tell."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return ""


def _save(path: Path, record: dict[str, Any]) -> None:
    """Whole or not at all (a temp file renamed): a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, path)
    except OSError:  # a read-only cache: proved again at the next start
        tmp.unlink(missing_ok=True)


def proven_in_child(
    key: str,
    probe: str,
    args: Sequence[Any] = (),
    *,
    device: str = "cuda:0",
    timeout: float = 120.0,
) -> bool:
    """Whether the path named ``key`` holds on ``device``, proven in a child process once per
    device, driver, torch and fp8_dummy version. There ``probe`` ("package.module:function")
    is called with ``args`` (JSON values) and returns None when its output equals the
    reference's, else what differs (as :func:`fp8_dummy._proof.proven`'s probes do); raising,
    crashing or not answering within ``timeout`` seconds is a refusal. The verdict is cached
    on disk (a crash's too: the warning names the file to delete to prove again; a timeout
    is tried again at the next start) and enters this process's proof mechanism under
    ``key``: ``self_check_report()``, one warning if refused, one probe per process. True:
    the caller may use its path; False: the reference (an engine's own weights)."""
    import torch

    from ._proof import proven
    from ._version import __version__

    def verdict() -> str | None:
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
            result, why = run_child(probe, args, timeout)
            why = why or ("" if result is None else str(result))
            where = "in a child process; not cached: a timeout may be a busy machine's"
            if not why.startswith(_HANG):
                _save(path, {"key": key, "environment": env, "detail": why})
                where = f"in a child process; cached in {path}"
        return f"{why} ({where})" if why else None

    return proven(key, verdict)


if __name__ == "__main__":  # the child: python -m fp8_dummy._isolated TARGET ARGS_JSON
    module, _, function = sys.argv[1].partition(":")
    answer = getattr(importlib.import_module(module), function)(*json.loads(sys.argv[2]))
    print(_RESULT + json.dumps(answer), flush=True)
