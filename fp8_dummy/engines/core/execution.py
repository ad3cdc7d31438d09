"""Carrying out a plan: every action as the engines carry it out, the float path through our
operators (CUDA batched by bounds and seed) or the plain-torch reference, aliases filled
once, progress on large models."""

from __future__ import annotations

import array
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch

from ... import _proof, reference
from ..._progress import Progress
from ...collector import no_cycle_collection
from ...ops import as_int64, init_, random_
from ...stateless import init_stateless_
from ...tensors import is_plain
from . import kept
from .checks import distinct
from .deciding import kindwise
from .kept import STALE, Kept, KeptFill
from .kinds import any_dispatching, dispatching, init_many_held, init_many_kept, reads_only
from .semantics import ROWS, Action, Kind, Planned, Semantics

__all__ = ["PROGRESS_BATCH_BYTES", "PROGRESS_THRESHOLD_BYTES", "Program", "apply", "program"]
__all__ += ["filled_one", "random_bytes_", "run"]

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


def _fill_order(live: list[Planned], mode: str, numbers: dict[int, int]) -> list[int]:
    """[index, in_order, ...] of the ``live`` entries a fill runs (C++: fill_order): an alias
    with the same action filled once, a storage touched in other ways strictly in order. A
    DTensor goes in as its local shard; a tensor whose class dispatches itself without one
    is a storage of its own. ``numbers``: each action object's number (equal actions, one)."""
    if not live:
        return []
    actions = [numbers[id(e[2])] for e in live]
    tensors = [e[1] for e in live]
    flags = [0] * len(live)
    if any_dispatching(tensors):
        for i, t in enumerate(tensors):
            if dispatching(t):
                if hasattr(t, "to_local"):  # a DTensor writes its local shard
                    t = tensors[i] = t.to_local()
                    # Generator mode on a DTensor draws from the default generator
                    # (docs/modes.md): a tied one is filled as often as the engine's loop.
                    flags[i] = 2 if mode == "generator" else 0
                if dispatching(t):
                    tensors[i], flags[i] = _OPAQUE, 1
    return torch.ops.fp8_dummy_internal.fill_order(tensors, actions, flags)


def _numbers(actions: dict[int, Action]) -> dict[int, int]:
    """Each action object (a kind's entries share one) numbered by value: equal actions one
    number, an action that does not hash its own."""
    numbers: dict[int, int] = {}
    values: dict[Action, int] = {}
    for key, action in actions.items():
        try:
            numbers[key] = values.setdefault(action, len(values))
        except TypeError:
            numbers[key] = -1 - len(numbers)
    return numbers


_OPAQUE = torch.empty(0)
fault = functools.lru_cache(maxsize=16)(_proof.fault)  # FP8_DUMMY_FAULT is read once


def init_many_(tensors: list[torch.Tensor], low: float, high: float, seed: int, *,
               contiguous_temp: bool = False) -> None:  # fmt: skip
    """:func:`fp8_dummy.init_many_` on a plan's batch, without its Python checks per tensor:
    the plan made them (a plain strided tensor of ours, not meta; the bounds), and the
    operator makes every check again before its first write."""
    seed = as_int64(seed, "seed", "init_many_")
    torch.ops.fp8_dummy.init_many_.default(
        tensors, low, high, seed, contiguous_temp=contiguous_temp
    )


def filled_one(entry: tuple, sem: Semantics, call: Any, engine: Callable | None) -> bool:
    """A fill of one tensor whose kind's decision is kept and is the float path alone (an
    engine's per-tensor function, called by its loader for every tensor): carried out at once,
    as :func:`run` carries it out, without a plan's machinery; False: the plan decides."""
    name, t = entry
    context = (sem, call, engine, "generator", None, torch.is_inference_mode_enabled())
    key = kept.one_key(context, name, t, sem.reads)
    decided = None if key is None else kept.find_one(key)
    if decided is None or not decided[5] or decided[0].kind is not Kind.UNIFORM:
        return False
    action, (sem, seed) = decided[:2]
    with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
        init_many_([t], action.low, action.high, seed, contiguous_temp=sem.temp == ROWS)
        if fault(sem.path):
            _proof.corrupt_(t)
    return True


class Program(NamedTuple):
    """How a plan runs: ``others`` (index into the plan, in order), each in its turn, and
    ``batches``: ((low, high, seed, semantics), indices), each one call of ``init_many_``
    (tensors of a storage of their own, or aliases filled once: any order holds); ``size``:
    the bytes it writes once counted (a kept plan's tensors keep their sizes and dtypes)."""

    others: list[tuple[int, bool]]
    batches: list[tuple[tuple, Sequence[int]]]  # a range: every tensor, in order
    size: list[int]


def program(planned: list[Planned], mode: str) -> Program:
    """The plan's :class:`Program` from its entries (a kept plan's: :func:`_kept_program`).
    What is asked of an entry's action and (semantics, seed) is asked once per object: a
    kind's entries share them, so the pass per entry is lookups by identity."""
    objects = {id(e[2]): e[2] for e in planned}
    skipped = {key for key, action in objects.items() if action.kind is Kind.SKIP}
    if skipped:
        live = [i for i, e in enumerate(planned) if id(e[2]) not in skipped]
    else:
        live = list(range(len(planned)))
    if len(live) == 1 and not dispatching(planned[live[0]][1]):  # one tensor: nothing to order
        order = [0, 0]
    else:
        numbers = _numbers({key: a for key, a in objects.items() if key not in skipped})
        with torch.no_grad(), reads_only():  # no autograd fallback looking at each tensor
            order = _fill_order([planned[i] for i in live], mode, numbers)
    # The actions batched when no storage orders them: uniform, drawn as the generator draws
    fused = {key for key, a in objects.items() if a.kind is Kind.UNIFORM and mode == "generator"}
    others: list[tuple[int, bool]] = []
    batches: dict[tuple, list[int]] = {}
    batch_of: dict[int, dict[int, list[int]]] = {}  # by action, then meta object
    for j, in_order in zip(order[0::2], order[1::2]):
        i = live[j]
        _, _, action, meta = planned[i]
        if in_order or id(action) not in fused:
            others.append((i, bool(in_order)))
            continue
        by_meta = batch_of.get(id(action))
        if by_meta is None:
            by_meta = batch_of[id(action)] = {}
        batch = by_meta.get(id(meta))
        if batch is None:
            key = (action.low, action.high, meta[1], meta[0])
            batch = by_meta[id(meta)] = batches.setdefault(key, [])
        batch.append(i)
    return Program(others, list(batches.items()), [])


def _program_by_kinds(kept: Kept, mode: str) -> Program | None:
    """:func:`program` of a kept plan from its kinds, without a pass of Python over its
    entries, where the kinds say it all: every entry is its kind's decision (shared; or the
    engine's function bound to its tensor, run with the others), and every tensor has a
    storage of its own (the facts' last word): no alias to fill once, no storage
    to fill in order. Each kind goes to a group (its batch: bounds, seed and semantics; the
    others; or skipped) and the tensors to their kind's group by one stable sort: in each
    group, the plan's order. None: :func:`program` walks the entries."""
    facts, decided = kept.facts, kept.decided
    if facts is None or int(facts[-1]) != 1 or not all(map(kindwise, decided)):
        return None
    keys: dict[tuple, int] = {}  # a batch's key: its group, numbered as its first kind comes
    group: list[int] = []  # per kind; -1: the others, -2: skipped
    for action, meta, bind_engine in (d[:3] for d in decided):
        if bind_engine is not None:  # the engine's function, bound to each tensor
            group.append(-1)
        elif action.kind is Kind.SKIP:
            group.append(-2)
        elif action.kind is Kind.UNIFORM and mode == "generator":
            group.append(keys.setdefault((action.low, action.high, meta[1], meta[0]), len(keys)))
        else:
            group.append(-1)
    if not kept.kind_of:
        return Program([], [], [])
    count = len(keys)
    if count == 1 and min(group) == 0:  # one batch of every tensor (a loop alike for all): no sort
        return Program([], [(next(iter(keys)), range(len(kept.kind_of)))], [])
    of_kind = torch.tensor([g if g >= 0 else count - 1 - g for g in group], dtype=torch.long)
    kinds = torch.frombuffer(array.array("q", kept.kind_of), dtype=torch.long)
    groups = of_kind[kinds]
    sizes = torch.bincount(groups, minlength=count + 2).tolist()
    pieces = torch.sort(groups, stable=True).indices.split(sizes)
    batches = [(key, pieces[g].tolist()) for key, g in keys.items() if sizes[g]]
    return Program([(i, False) for i in pieces[count].tolist()], batches, [])


def _kept_program(kept: Kept, mode: str, entries: Callable[[], list[Planned]]) -> Program:
    """A kept plan's :class:`Program`, made once for its fills: from its kinds alone where
    they say it all, else from its ``entries()``."""
    if (prog := kept.programs.get(mode)) is None:
        prog = kept.programs[mode] = _program_by_kinds(kept, mode) or program(entries(), mode)
    return prog


def run(
    planned: list[Planned] | KeptFill, *, mode: str = "generator", progress: bool | None = False
) -> str | None:
    """Carry out a plan: an alias with the same action filled once, a storage touched in other
    ways strictly in order, the rest batched (one ``init_many_`` per bounds, seed and temp).
    :data:`.kept.STALE`: an unchecked kept plan whose facts changed, nothing written."""
    kept = getattr(planned, "kept", None)
    if isinstance(planned, KeptFill):  # a kept plan found as it is: entries made on demand
        step, tensor = planned.step, planned.tensors.__getitem__
        prog = _kept_program(kept, mode, lambda: list(map(planned.entry, range(len(planned)))))
    else:
        step, tensor = lambda i: planned[i][1:], lambda i: planned[i][1]
        if kept is not None and len(planned) == len(kept.kind_of):
            prog = _kept_program(kept, mode, lambda: planned)
        else:
            prog = program(planned, mode)
    if progress is None:
        progress = sys.stderr.isatty() and _bytes(tensor, prog) >= PROGRESS_THRESHOLD_BYTES
    first = 0  # batches filled by an unchecked kept plan's first call
    if isinstance(planned, KeptFill) and planned.unchecked:
        first = 1 if prog.batches and not progress else 0
        with torch.no_grad(), no_cycle_collection():
            if not _first_call(planned, prog, first):
                return STALE
    count = len(prog.others) + sum(len(idx) for _, idx in prog.batches)
    bar = Progress(count, _bytes(tensor, prog)) if progress else None

    def done(x: torch.Tensor, sem: Semantics, ours: bool = True) -> None:
        if ours and fault(sem.path):
            _proof.corrupt_(x)
        if bar is not None:
            bar.update(x)

    try:
        with torch.no_grad(), no_cycle_collection():
            for i, _ in prog.others:
                t, action, (sem, seed) = step(i)
                kind, low, high = action.kind, action.low, action.high
                fused = kind is Kind.UNIFORM and mode == "generator"
                if kind is Kind.UNIFORM and not fused:
                    init_stateless_(t.data, low, high, seed)
                elif fused:
                    init_(t.data, low, high, seed, contiguous_temp=sem.temp == ROWS)
                elif kind is Kind.REFERENCE:
                    getattr(reference, sem.temp)(t, low, high, seed)
                else:
                    apply(t, action, seed)
                done(t.data, sem, ours=fused)
            # The operator itself: the plan checked every tensor (plain, strided, not meta)
            # and its bounds, and the operator checks them all again before its first write.
            held = getattr(planned, "held", None) if bar is None else None
            with torch._C.DisableTorchFunctionSubclass():
                for (low, high, seed, sem), idx in prog.batches[first:]:
                    rows = sem.temp == ROWS
                    # A new plan's list, held since its facts: the operator's own message on
                    # a refusal, which the plan's checks of every tensor leave unreached.
                    if held is not None:
                        seed = as_int64(seed, "seed", "init_many_")
                        init_many_held(held, len(planned), idx, low, high, seed, rows)
                        if fault(sem.path):
                            for i in idx:
                                done(tensor(i), sem)
                        continue
                    for batch in _pieces(list(map(tensor, idx)), bar is not None):
                        init_many_(batch, low, high, seed, contiguous_temp=rows)
                        if fault(sem.path) or bar is not None:
                            for x in batch:
                                done(x, sem)
    finally:
        if bar is not None:
            bar.close()


def _first_call(planned: KeptFill, prog: Program, fill: int) -> bool:
    """An unchecked kept plan's facts checked and, with ``fill``, its first batch filled, in
    one call reading the list once (a storage of their own: before the others as well as
    after); False: the facts changed, nothing written."""
    facts = planned.kept.facts
    if not fill:
        return init_many_kept(planned.tensors, facts, [], 0.0, 0.0, 0, False)
    (low, high, seed, sem), idx = prog.batches[0]
    seed = as_int64(seed, "seed", "init_many_")
    if not init_many_kept(planned.tensors, facts, idx, low, high, seed, sem.temp == ROWS):
        return False
    if fault(sem.path):
        for i in idx:
            _proof.corrupt_(planned.tensors[i])
    return True


def _pieces(tensors: list[torch.Tensor], progress: bool) -> Iterator[list[torch.Tensor]]:
    """The batch, or with progress shown pieces of about PROGRESS_BATCH_BYTES."""
    if not progress:
        yield tensors
        return
    piece, queued = [], 0
    for t in tensors:
        piece.append(t)
        queued += t.numel() * t.element_size()
        if queued >= PROGRESS_BATCH_BYTES:
            yield piece
            piece, queued = [], 0
    if piece:
        yield piece


def _bytes(tensor: Callable[[int], torch.Tensor], prog: Program) -> int:
    """The bytes the program writes, counted at its first run (a pass over every tensor)."""
    if not prog.size:
        every = [i for i, _ in prog.others] + [i for _, idx in prog.batches for i in idx]
        prog.size.append(sum(tensor(i).numel() * tensor(i).element_size() for i in every))
    return prog.size[0]
