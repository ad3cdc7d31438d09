"""A whole-model plan kept for the next fill of the same tensors (a server filling its weights
again, a benchmark's repeats). It is used only where nothing that decides it changed: the same
call (semantics, arguments, engine, mode, the scales' rule, inference mode), the same names
(or the same shape of the walk, of which they are a function),
the same class of each tensor, the same values of the attributes the engine's rule reads, the
same facts of every tensor (dtype, device, dimensions, inference, storage, data pointer,
offset, sizes, strides: one C++ call, :func:`.kinds.facts_match`) and no verdict of the proof
registry recorded or forgotten since: the plan is a function of these alone, so the tensor
objects need not be the same ones (``state_dict()`` makes new ones each time). A plan whose
proofs did not all pass is not kept (a probe to retry is retried). It holds no tensor: a kept
plan keeps no model alive."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ...tensors import shape_names
from .deciding import bound
from .kinds import Kinds, dispatching, facts_match

__all__ = ["Kept", "KeptFill", "KeptPlan", "find", "find_one", "forget", "keep", "keep_one"]
__all__ += ["STALE", "one_key"]

STALE = "stale"  # run()'s answer where an unchecked kept plan's facts no longer hold

_MOST = 4  # plans kept (the newest): a process fills one model, or a few
_lock = threading.Lock()
_plans: list[Kept] = []


def _generation() -> int:
    return torch.ops.fp8_dummy_internal.proof_generation()


@dataclass(eq=False)
class Kept:
    context: tuple  # the call: (semantics, call, engine, mode, scales' rule, inference mode)
    names: list[str] | None  # None: made from the shape when first asked (:meth:`named`)
    types: list[type]  # each tensor's class
    attrs: list | None  # the rule's attributes, per tensor
    facts: torch.Tensor
    generation: int  # the proof registry's, when kept
    kind_of: list[int]
    decided: list[tuple]  # per kind: the plan's decision
    shape: list | None = None  # the module walk's shape (the names are a function of it)
    programs: dict[str, Any] = field(default_factory=dict)  # run()'s Program, by mode

    def named(self) -> list[str]:
        """The tensors' dotted names (a plan kept from a walk's shape makes them here, once)."""
        if self.names is None:
            self.names = shape_names(self.shape)
        return self.names


class KeptPlan(list):
    """A plan's entries (a list, as :func:`.planning.plan` returns) that knows the kept plan
    it came from, where :func:`.execution.run` keeps its fill order."""

    kept: Kept | None = None


class KeptFill(NamedTuple):
    """A kept plan found for a fill whose every kind's decision is all there is to it (no
    check per tensor; at most the engine's function bound to it: :func:`.deciding.kindwise`):
    run as it is, each entry made only where the run asks for it (:func:`.execution.run`).
    ``unchecked``: its facts are checked by the fill's first call, which writes nothing where
    they changed (run() then returns :data:`STALE`)."""

    kept: Kept  # its names are the tensors' (:meth:`Kept.named`)
    tensors: list[torch.Tensor]
    unchecked: bool = False  # the tensors' facts are the fill's to check first
    held: torch.ScriptObject | None = None  # a new plan's list, held by its facts' call

    def __len__(self) -> int:
        return len(self.tensors)

    def entry(self, i: int) -> tuple:
        return self.kept.named()[i], *self.step(i)

    def step(self, i: int) -> tuple:
        """:meth:`entry` without the name, which a run reads nowhere: a new plan's dotted names
        are made only where something asks for them."""
        action, meta, bind_engine = self.kept.decided[self.kept.kind_of[i]][:3]
        t = self.tensors[i]
        if bind_engine is not None:  # its kind keeps the engine's branch: bound to it here
            action = bound(bind_engine, t)
        return t, action, meta


def _attrs(tensors: list[torch.Tensor], reads: tuple) -> list | None:
    if not reads:
        return None
    if len(reads) == 1:
        return [getattr(t, reads[0], None) for t in tensors]
    return [tuple(getattr(t, a, None) for a in reads) for t in tensors]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (values that do not compare, e.g. tensors: not the same)
        return False


def find(context: tuple, names: list[str] | None, tensors: list[torch.Tensor], reads,
         facts: bool = True, shape: list | None = None) -> Kept | None:  # fmt: skip
    """The kept plan of exactly this call on exactly these tensors, or None; without
    ``facts``, the newest that holds but for the tensors' facts, left to the fill to check
    (:func:`.kinds.init_many_kept`, before its first write). With ``shape`` (a module walk's,
    :func:`fp8_dummy.tensors.walk_shape`) the walk's shape is compared instead of the names
    (they are a function of it): a plan kept from another walk is not this one."""
    if reads is None:
        return None
    with _lock:
        candidates = _plans[::-1]
    generation = None
    for k in candidates:
        if len(k.types) != len(tensors) or not _same(k.context, context):
            continue
        if k.shape != shape or (shape is None and k.names != names):
            continue
        if list(map(type, tensors)) != k.types:
            continue
        if generation is None:
            generation = _generation()
        if k.generation != generation or not _same(_attrs(tensors, reads), k.attrs):
            continue
        if not facts or facts_match(tensors, k.facts):
            return k
    return None


def keep(context: tuple, names: list[str] | None, tensors: list[torch.Tensor], reads,
         kinds: Kinds, decided: list[tuple], shape: list | None = None) -> Kept:  # fmt: skip
    """Keeps a plan just made (every kind decided, every proof passed); ``names`` None: made
    from ``shape`` if ever asked."""
    types = list(map(type, tensors))
    names = list(names) if names is not None else None
    attrs = kinds.attrs if kinds.attrs is not None else _attrs(tensors, reads)
    entry = Kept(context, names, types, attrs, kinds.facts, _generation(),
                 kinds.kind_of, list(decided), shape)  # fmt: skip
    with _lock:
        _plans.append(entry)
        del _plans[:-_MOST]
    return entry


# ---- one tensor at a time (an engine's per-tensor function, called by its loader per tensor): the
# decision is kept per kind of tensor, its facts read in Python (a C++ call costs more here).
_ONES = 4096  # decisions kept at most (then all forgotten)
_ones: dict[tuple, tuple[int, tuple]] = {}


def one_key(context: tuple, name: str, t: torch.Tensor, reads) -> tuple | None:
    """The kind of a plan of the one tensor ``t``: the call and every fact of ``t`` the plan
    reads; None where it is not kept (a rule that reads anything, a class that dispatches
    itself, elements that may share memory, arguments that do not hash)."""
    if reads is None or dispatching(t):
        return None
    sem, call, *rest = context
    call = (call,) if callable(call) else (call[0], tuple(call[1].items()))
    with torch._C.DisableTorchFunctionSubclass():
        if t.layout != torch.strided or torch._debug_has_internal_overlap(t) != 0:
            return None
        facts = (type(t), t.dtype, t.device, t.dim(), t.is_inference(), t.is_contiguous())
    key = (sem, *call, *rest, name.rpartition(".")[2], facts)
    key += tuple(_attrs([t], reads) or ())
    try:
        hash(key)
    except TypeError:
        return None
    return key


def find_one(key: tuple) -> tuple | None:
    """The kept decision of a one-tensor plan of this kind, or None."""
    found = _ones.get(key)
    return found[1] if found is not None and found[0] == _generation() else None


def keep_one(key: tuple, decided: tuple) -> None:
    if len(_ones) >= _ONES:
        _ones.clear()
    _ones[key] = (_generation(), decided)


def forget() -> None:
    """Tests: no plan kept."""
    with _lock:
        _plans.clear()
        _ones.clear()
