"""The Python side of the one proof mechanism (``csrc/common/proof.h``): the engine
integrations' probes run here, and their verdicts go into the same cache and report as the
C++ paths'. A refusal warns once, as a RuntimeWarning at the caller's line; from then on
that key's tensors take the reference. See docs/contract.md, "Proof before use"."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Callable, NamedTuple

import torch

from ._library import C as _C

__all__ = ["ProofEntry", "first_difference", "proven", "self_check_report"]

# Frames in these directories are ours or torch's: a warning points past them, at the caller.
_INTERNAL = (os.path.dirname(__file__), os.path.dirname(torch.__file__))


def _warn(message: str) -> None:
    """Shows a refusal (called by the library, csrc/python_module.cpp) at the first frame outside
    fp8_dummy and torch."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, RuntimeWarning, stacklevel=level)


_C._set_warning_hook(_warn)

# One probe at a time in Python (the C++ side has its own lock): concurrent loaders asking
# for one key run its probe once.
_lock = threading.RLock()


class ProofEntry(NamedTuple):
    """One key of :func:`self_check_report`."""

    key: str  # the path and everything that selects its code (device, dtype, bounds class...)
    path: str  # the path's name (what precedes the key's first ':'; FP8_DUMMY_FAULT's names)
    proven: bool  # True: the path is used for this key; False: the reference is
    detail: str  # refused: why; unproven: "unproven: the probe failed: ... (will retry)"

    @property
    def unproven(self) -> bool:
        """No verdict yet: its probe failed for lack of memory; a later call probes again."""
        return self.detail.startswith("unproven:")


def self_check_report() -> list[ProofEntry]:
    """Every path that replaces a reference without being asked, as proven, refused or
    unproven in this process, one entry per key, in the order they were first needed: the
    CPU fast paths of ``init_`` and ``random_`` (and the search for torch's ``uniform_``
    transform), the CUDA per-tensor, batched and stateless kernels (per device, dtype,
    bounds class, layout kind and generator form), and the engine integrations. A key that
    is not proven is filled by the reference path."""
    flat = torch.ops.fp8_dummy_internal.proof_report()
    out = []
    for i in range(0, len(flat), 3):
        key, verdict, detail = flat[i : i + 3]
        out.append(ProofEntry(key, key.split(":", 1)[0], verdict == "proven", detail))
    return out


def _transient(e: BaseException) -> bool:
    """Lack of memory: no verdict on the path (CPU allocations fail as RuntimeError)."""
    text = str(e)
    return isinstance(e, (MemoryError, torch.OutOfMemoryError)) or (
        "out of memory" in text or "allocate memory" in text
    )


def proven(key: str, probe: Callable[[], str | None]) -> bool:
    """Whether the path named ``key`` is proven: the first call runs ``probe``, which returns
    None when its output equals the reference's, else what differs; a probe that raises is a
    refusal, or for lack of memory no verdict (the next call probes again). Cached for the
    process in the C++ registry, like every other key."""
    check_fault_switch()
    state = torch.ops.fp8_dummy_internal.proof_lookup(key)
    if state >= 0:
        return bool(state)
    with _lock:
        state = torch.ops.fp8_dummy_internal.proof_lookup(key)
        if state >= 0:
            return bool(state)
        retry = False
        try:
            why = probe()
        except Exception as e:  # noqa: BLE001 (any failure of the probe means: the reference)
            retry = _transient(e)
            why = f"the probe failed: {type(e).__name__}: {e}"
            why = f"unproven: {why} (will retry)" if retry else why
        return torch.ops.fp8_dummy_internal.proof_record(key, why is None, why or "", retry)


def fault(path: str) -> bool:
    """Whether FP8_DUMMY_FAULT (read once, in C++) names ``path``: that path then corrupts
    one byte of its output (tests of the mechanism, docs/development.md). RuntimeError if it
    names an unknown fault (the message lists the valid ones)."""
    return torch.ops.fp8_dummy_internal.proof_fault(path)


_switch_read: list[bool] = []  # the switch is read once per process: once valid, valid


def check_fault_switch() -> None:
    """RuntimeError, naming the valid faults, if FP8_DUMMY_FAULT names an unknown one: called
    before anything is written, so that a mistyped switch never tests nothing silently."""
    if not _switch_read:
        fault("")
        _switch_read.append(True)


def corrupt_(t: torch.Tensor) -> None:
    """Flips the lowest bit of ``t``'s first byte in memory (the injected fault)."""
    if t.numel():
        raw = torch.empty(0, dtype=torch.uint8, device=t.device)
        raw.set_(t.untyped_storage(), t.storage_offset() * t.element_size(), (1,), (1,))
        raw.bitwise_xor_(1)


def first_difference(ours: torch.Tensor, theirs: torch.Tensor) -> str | None:
    """None if the two tensors hold the same bytes (logical elements, any layout), else the
    first differing element with both bytes."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return f"shape or dtype differ: {tuple(ours.shape)} {ours.dtype} vs reference's " + (
            f"{tuple(theirs.shape)} {theirs.dtype}"
        )
    a = ours.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    b = theirs.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return None
    i, size = int(diff[0]), ours.element_size()
    return (
        f"first differing byte at element {i // size} (byte {i % size}): "
        f"0x{int(a[i]):02x}, the reference 0x{int(b[i]):02x}"
    )
