"""Worker processes of the multi-process tests: a free TCP port for a gloo group, and a set of
processes started together and waited for together (one that hangs stops them all)."""

from __future__ import annotations

import socket
import subprocess


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
