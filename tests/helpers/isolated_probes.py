"""Stand-in probes for fp8_dummy._isolated (tests/test_proof_isolated.py): each appends a line
to `marker` (so a test can count the child processes that ran it), then holds, differs,
raises, runs out of memory, crashes the process as an illegal memory access would, or hangs."""

from __future__ import annotations

import os
import signal
import time


def _mark(marker: str, what: str) -> None:
    with open(marker, "a") as f:
        f.write(f"{what} {os.getpid()}\n")


def holds(marker: str) -> None:
    _mark(marker, "holds")
    return None


def differs(marker: str) -> str:
    _mark(marker, "differs")
    return "first differing byte at element 3 (byte 0): 0x01, the reference 0x00"


def raises(marker: str) -> None:
    _mark(marker, "raises")
    raise ValueError("the probe could not run")


def runs_out_of_memory(marker: str) -> None:
    _mark(marker, "runs_out_of_memory")
    raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def crashes(marker: str) -> None:
    _mark(marker, "crashes")
    os.kill(os.getpid(), signal.SIGSEGV)


def exits(marker: str) -> None:
    _mark(marker, "exits")
    os._exit(3)


def answers_garbage() -> None:
    """An answer line that does not parse, then an exit before the real one is printed."""
    print("fp8_dummy-child-result: {not json", flush=True)
    os._exit(0)


def hangs(marker: str) -> None:
    _mark(marker, "hangs")
    time.sleep(600)


def answers(value: object) -> object:
    return value
