"""Carrying out a plan: every action as the engines carry it out, the float path through our
operators (CUDA batched by bounds and seed) or the plain-torch reference, aliases filled
once, progress on large models."""

from __future__ import annotations

import functools
import sys

import torch

from ... import _proof, reference
from ..._progress import Progress
from ...ops import init_, init_many_, random_
from ...stateless import init_stateless_
from ...tensors import is_plain
from .checks import distinct
from .collector import no_cycle_collection
from .semantics import ROWS, Action, Kind, Planned, Semantics

__all__ = ["PROGRESS_BATCH_BYTES", "PROGRESS_THRESHOLD_BYTES", "apply", "random_bytes_", "run"]

# Progress by default for models of at least 1 GiB on a terminal; CUDA batches of ~1 GiB then.
PROGRESS_THRESHOLD_BYTES = PROGRESS_BATCH_BYTES = 1 << 30


def apply(t: torch.Tensor, action: Action, seed: int) -> None:
    """Every action but the float path, as the engines carry them out."""
    kind, low, high = action.kind, int(action.low), int(action.high)
    if kind is Kind.FILL:
        t.fill_(action.value)
    elif kind is Kind.BYTE:
        t.view(torch.uint8).fill_(action.value)
    elif kind is Kind.RANDOM:
        random_bytes_(t if low < 0 else t.view(torch.uint8), low, high, seed)
    elif kind is Kind.ZERO:
        t.zero_()
    elif kind is Kind.ENGINE:
        action.value()
    elif kind is not Kind.SKIP:
        raise RuntimeError(f"fp8_dummy: no way to carry out {action}")


def random_bytes_(t: torch.Tensor, low: int, high: int, seed: int) -> torch.Tensor:
    """``t.random_(low, high)``, a fresh generator seeded with ``seed`` (ours for plain tensors)."""
    if is_plain(t) and distinct(t):
        return random_(t, low, high, seed)
    return t.random_(low, high, generator=torch.Generator(device=t.device).manual_seed(seed))


def _identity(t: torch.Tensor) -> tuple[tuple, tuple]:
    """(storage, view) keys; a tensor without accessible storage is its own."""
    local = t.to_local() if hasattr(t, "to_local") else t  # a DTensor writes its local shard
    try:
        storage = (t.device, local.untyped_storage().data_ptr())
        return storage, (t.device, local.data_ptr(), t.dtype, tuple(t.shape), t.stride())
    except (RuntimeError, NotImplementedError, TypeError):
        return ("opaque", id(t)), ("opaque", id(t))


def run(planned: list[Planned], *, mode: str = "generator", progress: bool | None = False) -> None:
    """Carry out a plan: an alias with the same action filled once, a storage touched in other
    ways strictly in order, the rest batched (CUDA: one ``init_many_`` per bounds and seed)."""
    live = [e for e in planned if e[2].kind is not Kind.SKIP]
    ids = [_identity(t) for _, t, _, _ in live]
    uses: dict[tuple, set] = {}
    for (_, t, action, _), (storage, key) in zip(live, ids):
        uses.setdefault(storage, set()).add((key, action))
        # Generator mode on a DTensor draws from the default generator (docs/modes.md): a tied
        # one is filled as often as the engine's loop fills it.
        if mode == "generator" and hasattr(t, "to_local"):
            uses[storage].add(None)
    ordered = {storage for storage, u in uses.items() if len(u) > 1}
    todo, seen = [], set()
    for entry, (storage, key) in zip(live, ids):
        if storage in ordered or key not in seen:
            seen.add(key)
            todo.append((entry, storage in ordered))
    total = sum(e[1].numel() * e[1].element_size() for e, _ in todo)
    if progress is None:
        progress = total >= PROGRESS_THRESHOLD_BYTES and sys.stderr.isatty()
    bar = Progress(len(todo), total) if progress else None
    batches: dict[tuple, list[torch.Tensor]] = {}
    queued = 0
    fault = functools.cache(_proof.fault)

    def done(x: torch.Tensor, sem: Semantics, ours: bool = True) -> None:
        if ours and fault(sem.path):
            _proof.corrupt_(x)
        if bar is not None:
            bar.update(x)

    def flush() -> None:
        for (low, high, seed, sem), batch in batches.items():
            init_many_(batch, low, high, seed, contiguous_temp=sem.temp == ROWS)
            for x in batch:
                done(x, sem)
        batches.clear()

    try:
        with torch.no_grad(), no_cycle_collection():
            for (_, t, action, (sem, seed)), in_order in todo:
                kind, low, high = action.kind, action.low, action.high
                fused = kind is Kind.UNIFORM and mode == "generator"
                if fused and t.is_cuda and not in_order:
                    batches.setdefault((low, high, seed, sem), []).append(t.data)
                    queued += t.numel() * t.element_size()
                    if bar is not None and queued >= PROGRESS_BATCH_BYTES:
                        flush()
                        queued = 0
                    continue
                if kind is Kind.UNIFORM and not fused:
                    init_stateless_(t.data, low, high, seed)
                elif fused:
                    init_(t.data, low, high, seed, contiguous_temp=sem.temp == ROWS)
                elif kind is Kind.REFERENCE:
                    getattr(reference, sem.temp)(t, low, high, seed)
                else:
                    apply(t, action, seed)
                done(t.data, sem, ours=fused)
            flush()
    finally:
        if bar is not None:
            bar.close()
