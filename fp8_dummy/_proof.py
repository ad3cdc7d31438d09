"""The Python side of the one proof mechanism (``csrc/common/proof.h``): the engine
integrations' probes run here, and their verdicts go into the same cache and report as
the C++ paths' (the CPU fast paths, the CUDA kernels). A refusal warns once, from C++, with
the key and the first differing byte; from then on that key's tensors take the reference.
See docs/contract.md, "Proof before use"."""

from __future__ import annotations

import atexit
import ctypes
import sys
import threading
import warnings
from typing import Callable, NamedTuple

import torch

from . import _C

__all__ = ["ProofEntry", "emit_pending", "first_difference", "proven", "self_check_report"]


def _pending_counter() -> ctypes.c_int64 | None:
    """The C++ count of refusal warnings not yet shown (common/proof.cpp), read in place."""
    try:
        return ctypes.c_int64.in_dll(ctypes.CDLL(_C.__file__), "fp8_dummy_proof_pending")
    except (OSError, ValueError, AttributeError):
        return None  # then every emit_pending() asks the library


# A torch.ops call does not turn C++ warnings into Python ones: refusals wait in C++ until
# the Python wrapper that made the call shows them (emit_pending), or, left over, at exit.
torch.ops.fp8_dummy_internal.proof_defer_warnings(True)
_PENDING = _pending_counter()


def emit_pending(stacklevel: int = 3) -> None:
    """Shows the refusals found since the last call as RuntimeWarnings (one per refused
    key). Called by every wrapper after its operator; costs a memory read when none."""
    if _PENDING is not None and _PENDING.value == 0:
        return
    for message in torch.ops.fp8_dummy_internal.proof_take_warnings():
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


@atexit.register
def _left_over() -> None:
    try:
        for message in torch.ops.fp8_dummy_internal.proof_take_warnings():
            print(f"RuntimeWarning: {message}", file=sys.stderr)
    except Exception:  # noqa: BLE001 (interpreter shutdown: nothing left to tell)
        pass


# One probe at a time in Python (the C++ side has its own lock): concurrent loaders asking
# for one key run its probe once.
_lock = threading.RLock()


class ProofEntry(NamedTuple):
    """One key of :func:`self_check_report`."""

    key: str  # the path and everything that selects its code (device, dtype, bounds class...)
    path: str  # the path's name (what precedes the key's first ':'; FP8_DUMMY_FAULT's names)
    proven: bool  # True: the path is used for this key; False: the reference is
    detail: str  # refused: why (the first differing byte, or the probe's error)


def self_check_report() -> list[ProofEntry]:
    """Every path that replaces a reference without being asked, as proven or refused in
    this process, one entry per key, in the order they were first needed: the CPU fast
    paths of ``init_`` and ``random_`` (and the search for torch's ``uniform_`` transform),
    the CUDA per-tensor, batched and stateless kernels (per device, dtype, bounds class,
    layout kind and generator form), and the vLLM / SGLang integrations. A key appears once
    its first call needed it; a refused key is filled by the reference path."""
    emit_pending()
    flat = torch.ops.fp8_dummy_internal.proof_report()
    out = []
    for i in range(0, len(flat), 3):
        key, verdict, detail = flat[i : i + 3]
        out.append(ProofEntry(key, key.split(":", 1)[0], verdict == "proven", detail))
    return out


def proven(key: str, probe: Callable[[], str | None]) -> bool:
    """Whether the path named ``key`` is proven: the first call runs ``probe``, which returns
    None when its output equals the reference's, else what differs; a probe that raises is a
    refusal. Cached for the process in the C++ registry, like every other key."""
    state = torch.ops.fp8_dummy_internal.proof_lookup(key)
    if state >= 0:
        return bool(state)
    with _lock:
        state = torch.ops.fp8_dummy_internal.proof_lookup(key)
        if state >= 0:
            return bool(state)
        try:
            why = probe()
        except Exception as e:  # noqa: BLE001 (any failure of the probe means: the reference)
            why = f"the probe failed: {type(e).__name__}: {e}"
        verdict = torch.ops.fp8_dummy_internal.proof_record(key, why is None, why or "")
    emit_pending(stacklevel=4)
    return verdict


def fault(path: str) -> bool:
    """Whether FP8_DUMMY_FAULT (read once, in C++) names ``path``: that path then corrupts
    one byte of its output (tests of the mechanism, docs/development.md)."""
    return torch.ops.fp8_dummy_internal.proof_fault(path)


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
