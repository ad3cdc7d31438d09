"""The kinds of a model's tensors: a model of thousands of tensors holds a few dozen kinds (a
local name, a class, the facts of the tensor every answer of the plan reads, the attributes
the engine's rule reads), and the plan asks its questions once per kind. The tensors' facts
come from one C++ call for the whole list (``fp8_dummy_internal.tensor_kinds``: dtype, device,
dimensions, meta, inference, contiguity, overlap; and where the bytes are, which a kept plan
is checked against), not from Python objects per tensor; the keys are numbered in C too
(``fp8_dummy._C._kinds``), the Python loop where the library has no such function."""

from __future__ import annotations

import array
import contextlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ..._library import C as _C
from ...tensors import shape_locals

__all__ = ["Kinds", "dispatching", "facts_match", "init_many_kept", "kinds_of", "reads_only"]
__all__ += ["any_dispatching", "init_many_held", "tensor_facts"]

_KINDS = torch.ops.fp8_dummy_internal.tensor_kinds
_MATCH = torch.ops.fp8_dummy_internal.facts_match
_KEPT = torch.ops.fp8_dummy_internal.init_many_kept
_KINDS_HELD = torch.ops.fp8_dummy_internal.tensor_kinds_held.default
_HELD = torch.ops.fp8_dummy_internal.init_many_held.default
_C_KINDS = getattr(_C, "_kinds", None)  # kinds_of's numbering in C (python_kinds.cpp)
_C_CLASSES = getattr(_C, "_classes", None)  # a list's distinct classes (python_classes.cpp)
_own_dispatch: dict[type, bool] = {}


def dispatching(t: torch.Tensor | type) -> bool:
    """A tensor (or class) whose class dispatches torch's operators itself (DTensor, fake
    tensors): it never goes into our facts' C++ call (its class would run that operator)."""
    kind = t if isinstance(t, type) else type(t)
    known = _own_dispatch.get(kind)
    if known is None:
        known = _own_dispatch[kind] = (
            getattr(kind, "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__
        )
    return known


def any_dispatching(tensors: list[torch.Tensor]) -> bool:
    """Whether any of the tensors' classes dispatches itself (:func:`dispatching`), asked once
    per class: the classes found in C where the library can (a model holds one to three)."""
    if _C_CLASSES is not None and type(tensors) is list:
        classes = _C_CLASSES(tensors)
    else:
        classes = set(map(type, tensors))
    return any([dispatching(kind) for kind in classes])


def tensor_facts(
    tensors: list[torch.Tensor], hold: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.ScriptObject] | None:
    """Each tensor's kind number, then the facts a kept plan is checked against, as one int64
    tensor (see common/model_facts.cpp); None where a tensor dispatches itself. ``hold``:
    (facts, the list held for :func:`init_many_held`), or None."""
    if not tensors or any_dispatching(tensors):
        return None
    # No autograd: its fallback would look at every tensor of the list for gradients.
    with torch.no_grad(), reads_only():
        return _KINDS_HELD(tensors) if hold else _KINDS(tensors)


def facts_match(tensors: list[torch.Tensor], facts: torch.Tensor) -> bool:
    """Whether the tensors' facts are still ``facts`` (a :func:`tensor_facts` answer), compared
    in C++ as they are read."""
    if not tensors or any_dispatching(tensors):
        return False
    with torch.no_grad(), reads_only():
        return _MATCH(tensors, facts)


def init_many_kept(tensors: list[torch.Tensor], facts: torch.Tensor, fill: Sequence[int],
                   low: float, high: float, seed: int, contiguous_temp: bool) -> bool:  # fmt: skip
    """:func:`facts_match` and, where it holds, ``init_many_`` on ``tensors[i] for i in fill``
    (ascending), in one C++ call reading the list once; False: nothing written. Called
    outside any ``TorchDispatchMode`` and with plain classes' tensors only (the plan kept)."""
    with torch._C.DisableTorchFunctionSubclass():
        return _KEPT(tensors, facts, fill, low, high, seed, contiguous_temp)


def init_many_held(held: torch.ScriptObject, count: int, fill: Sequence[int], low: float,
                   high: float, seed: int, contiguous_temp: bool) -> None:  # fmt: skip
    """``init_many_`` on the tensors ``fill`` names (ascending, distinct) of the ``count``
    tensors :func:`tensor_facts` held, without turning the list into an operator's argument
    again (all of them: the list itself)."""
    if not fill:
        return
    every = len(fill) == count and fill[0] == 0 and fill[-1] == count - 1
    # A tensor, not a list: torch's call of an operator taking a held object looks through
    # each list argument's items in Python.
    which = None if every else torch.frombuffer(array.array("q", fill), dtype=torch.long)
    with torch._C.DisableTorchFunctionSubclass():
        _HELD(held, which, low, high, seed, contiguous_temp)


def reads_only() -> contextlib.AbstractContextManager:
    """Where our C++ reads of many tensors' facts run: outside the classes' own
    ``__torch_function__`` (an engine's parameter classes) and any ``TorchDispatchMode`` (reads of
    metadata are no operation of the user's)."""
    if torch._C._len_torch_dispatch_stack() == 0:
        return torch._C.DisableTorchFunctionSubclass()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.utils._python_dispatch._disable_current_modes())
    stack.enter_context(torch._C.DisableTorchFunctionSubclass())
    return stack


class Kinds(NamedTuple):
    kind_of: list[int]  # per tensor: its kind
    firsts: list[int]  # per kind: its first tensor (the plan asks it)
    facts: torch.Tensor | None  # None: the plan is not kept
    attrs: list | None = None  # per tensor: the rule's attributes (a tuple each if several)
    held: torch.ScriptObject | None = None  # the list held for its fill (kinds_of's ``hold``)


def kinds_of(names: list[str] | None, tensors: list[torch.Tensor], reads: Any,
             shape: list | None = None, hold: bool = False) -> Kinds:  # fmt: skip
    """The tensors' kinds, numbered in order of first appearance. ``reads``: the attributes
    the rule reads (a tuple), or None: every tensor a kind of its own (the rule is asked for
    each). ``names`` None: the local names read from the walk's ``shape``, no dotted name
    made. ``hold``: the list held for a fill of it (:func:`init_many_held`)."""
    n = len(tensors)
    facts = tensor_facts(tensors, hold) if reads is not None else None
    if facts is None:
        return Kinds(list(range(n)), list(range(n)), None)
    held = None
    if hold:
        facts, held = facts
    fact_kinds = facts[:n].tolist()
    if names is not None:
        locals_ = [name.rpartition(".")[2] for name in names]
    if _C_KINDS is not None and len(reads) <= 1:
        items = shape if names is None else locals_
        try:  # the same keys in the same dict, numbered in C
            made = _C_KINDS(items, names is None, tensors, fact_kinds, reads[0] if reads else None)
            return Kinds(*made[:2], facts, made[2], held)
        except TypeError:  # a key that does not hash: the loop below gives it a kind of its own
            pass
    if names is None:
        locals_ = shape_locals(shape)
    attrs = None
    if not reads:
        keys = list(zip(locals_, map(type, tensors), fact_kinds))
    elif len(reads) == 1:
        attrs = [getattr(t, reads[0], None) for t in tensors]
        keys = list(zip(locals_, map(type, tensors), fact_kinds, attrs))
    else:
        attrs = [tuple(getattr(t, a, None) for a in reads) for t in tensors]
        keys = list(zip(locals_, map(type, tensors), fact_kinds, attrs))
    index: dict = {}
    try:  # a new key's number is the count before it: len(index) is read before it goes in
        kind_of = [index.setdefault(key, len(index)) for key in keys]
    except TypeError:  # an attribute that does not hash: a kind of its own
        kind_of = _numbered(keys)
    # Kinds are numbered in order of first appearance: each one's first tensor is found
    # after the one before's.
    firsts, at = [], 0
    for k in range(max(kind_of, default=-1) + 1):
        at = kind_of.index(k, at)
        firsts.append(at)
    return Kinds(kind_of, firsts, facts, attrs, held)


def _numbered(keys: list) -> list[int]:
    """:func:`kinds_of`'s numbering where a key does not hash (that tensor a kind of its own)."""
    index: dict = {}
    kind_of, count = [], 0
    for key in keys:
        try:
            k = index.setdefault(key, count)
        except TypeError:
            k = count
        count += k == count
        kind_of.append(k)
    return kind_of
