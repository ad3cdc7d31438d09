"""The plan of a fill: each tensor's action from the engine's rule, torch's refusals raised
before anything is written, and whether our fused path may stand in, proven once per kind of
call against the engine's function or the reference on a poisoned probe (docs/engines.md,
"Proof"); :func:`fill` plans and runs."""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import os
from typing import Any, Callable

import torch

from ... import _proof
from ...collector import no_cycle_collection
from ...tensors import shape_names, shape_names_at
from . import execution, kept
from .deciding import decider, entries, kindwise
from .execution import run
from .kinds import kinds_of
from .plugins import enabled
from .semantics import ROWS, SKIP, Action, Call, Kind, Planned, Semantics
from .semantics import is_scale_tensor as default_scales
from .walks import Walked, walked

__all__ = ["ISOLATE", "child_probe", "fill", "plan", "probe_model", "probe_tensor"]
__all__ += ["proven"]

ISOLATE = "FP8_DUMMY_ISOLATE"  # 0: every proof in-process; all: CPU keys in a child too (tests)
# Set while plan() gathers the keys its fill will prove in a child (_prove_together): proven()
# then records each undecided key there (its child's request, or None) instead of proving.
_gathering: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "fp8_dummy_child_proofs", default=None
)
# The plan being made (its arguments), until its first key that needs a child gathers the rest.
_planning: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "fp8_dummy_plan", default=None
)


def probe_tensor(t: torch.Tensor, strided: bool = False) -> torch.Tensor:
    """67 x 129 poisoned elements like ``t`` (dtype, device, 0/1/2+ dims), row-major or not."""
    shape = {0: (), 1: (67 * 129,)}.get(t.dim(), (67, 129) + (1,) * (t.dim() - 2))
    make = functools.partial(torch.empty, dtype=t.dtype, device=t.device)
    if strided and t.dim() >= 2:
        p = make((129, 67) + shape[2:]).transpose(0, 1)
    else:
        p = make((2 * shape[0],))[::2] if strided and t.dim() == 1 else make(shape)
    torch.empty(0, dtype=torch.uint8, device=t.device).set_(p.untyped_storage()).fill_(0x55)
    return p


def probe_model(name: str, like: torch.Tensor, strided: bool = False) -> torch.nn.Module:
    """A module tree whose only tensor is a probe tensor under the dotted ``name``."""
    root = m = torch.nn.Module()
    *path, leaf = name.split(".")
    for part in path:
        m.add_module(part, torch.nn.Module())
        m = getattr(m, part)
    m.register_buffer(leaf, probe_tensor(like, strided))
    return root


def proven(sem: Semantics, engine: Callable | None, name: str, t: torch.Tensor, call: Call) -> bool:
    """Whether our fill may stand in for ``engine`` (None: the semantics through the reference)
    called with ``call`` (the arguments after the tensor or model) on tensors like ``t``: a
    poisoned probe per key, CUDA's first in a child process (docs/engines.md, "Proof")."""
    args, kwargs = call
    strided = sem.temp == ROWS and t.dim() > 0 and not t.is_contiguous()
    local = name.rsplit(".", 1)[-1]
    key = f"{sem.path}: {sem.name} {t.device} {t.dtype} name={local!r} dims={min(t.dim(), 2)}"
    if sem.temp == ROWS:
        key += f" layout={'strided' if strided else 'contiguous'}"
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if k != "name"]
    key += f" call=({', '.join(['...', *shown])})"

    def child_spec() -> tuple[list | None, Action, int]:
        """The child's arguments where this key's probe runs in a child (else None), and our
        action and seed on the probe."""
        tensors = [(name, probe_tensor(t, strided))]
        ((_, _, action, (_, seed)),) = plan(tensors, sem, call, prove=False, check=False)
        every = os.environ.get(ISOLATE, "").strip().lower() == "all"
        if action.kind is not Kind.UNIFORM or not (every or t.is_cuda and enabled(ISOLATE)):
            return None, action, seed
        target = engine and f"{engine.__module__}:{getattr(engine, '__qualname__', '<')}"
        if target is not None and ("<" in target or hasattr(engine, "__self__")):
            raise TypeError(f"a child process cannot import {engine!r} to probe it")
        spec = [target, [sem.path, sem.name, sem.temp, sem.per_tensor], name,
                [str(t.dtype)[6:], str(t.device), t.dim()], strided, [list(args), kwargs],
                [action.low, action.high, seed]]  # fmt: skip
        return spec, action, seed

    def probe() -> str | None:
        spec, action, seed = child_spec()
        if spec is None:
            return _probe(sem, engine, call, name, t, strided, action, seed)
        from ... import _isolated  # here: the child runs it as __main__

        def together() -> None:  # the plan's first key that needs a child: its others join it
            if pending := _planning.get():
                _prove_together(*pending)
                pending.clear()

        target = f"{__name__}:child_probe"
        return _isolated.verdict(key, target, spec, str(t.device), before_child=together)

    gathered = _gathering.get()
    if gathered is None:
        return _proof.proven(key, probe)
    if key not in gathered and torch.ops.fp8_dummy_internal.proof_lookup(key) < 0:
        try:  # once per key: the probe's plan is not remade for each tensor of the kind
            spec = child_spec()[0]
        except Exception:  # noqa: BLE001 (the key's own proof meets it again and decides)
            spec = None
        request = (key, f"{__name__}:child_probe", spec, str(t.device))
        gathered[key] = request if spec is not None else None
    return True  # a stand-in: gathering writes nothing and decides nothing


def _prove_together(tensors, sem, call, engine, mode, neutral) -> None:
    """The keys of a fill whose first proof runs in a child, proven in one child together (a
    child each costs a start of Python, torch and CUDA, seconds on a GPU server): plan's
    checks and rules on every tensor, no write, then :func:`fp8_dummy._isolated.prove_together`.
    Run by the plan's first key that needs a child (so never where every key is decided: in
    this process, or by a verdict cached at an earlier start). A key that one leaves
    undecided is proven in a child of its own, as without it."""
    gathered: dict = {}
    token = _gathering.set(gathered)
    try:
        plan(tensors, sem, call, engine=engine, mode=mode, neutral=neutral, check=False)
    except Exception:  # noqa: BLE001 (the plan proper raises it, before anything is written)
        return
    finally:
        _gathering.reset(token)
    requests = [r for r in gathered.values() if r is not None]
    if len(requests) > 1:
        from ... import _isolated

        _isolated.prove_together(requests)


def _probe(sem, engine, call, name, like, strided, action, seed) -> str | None:
    """The engine's function (None: the reference) on a probe like ``like``, our ``action`` on
    another: None if the bytes (or the exception types) are the same, else what differs."""
    whole = engine is not None and not sem.per_tensor
    make = functools.partial(probe_model, name) if whole else probe_tensor
    made = [make(like, strided) for _ in "ab"]
    theirs, ours = (m.get_buffer(name) for m in made) if whole else made
    refusal = action.value if action.kind is Kind.ERROR else None
    try:
        if engine is not None:
            engine(made[0], *call[0], **call[1])
        elif refusal is None:  # only the float path is proven without the engine's function
            run([(name, theirs, Action(Kind.REFERENCE, action.low, action.high), (sem, seed))])
        else:
            raise refusal[0](refusal[1])
    except Exception as e:  # noqa: BLE001 (the same refusal as ours is a match)
        if refusal is not None and isinstance(e, refusal[0]):
            return None
        return f"the engine raised {type(e).__name__}: {e}; ours did not"
    if refusal is not None:
        return f"ours raises {refusal[0].__name__}: {refusal[1]}; the engine did not"
    run([(name, ours, action, (sem, seed))])
    return _proof.first_difference(ours, theirs)


def child_probe(engine, sem, name, like, strided, call, action) -> str | None:
    """:func:`_probe` of our float path in a child process, rebuilt from :func:`proven`'s data."""
    if engine is not None:
        module, _, qualname = engine.partition(":")
        found = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
        engine = inspect.unwrap(found)
    sem = Semantics(*sem[:2], lambda *_: SKIP, (), temp=sem[2], per_tensor=sem[3])
    like = torch.empty((1,) * like[2], dtype=getattr(torch, like[0]), device=like[1])
    uniform = Action(Kind.UNIFORM, *action[:2])
    return _probe(sem, engine, call, name, like, strided, uniform, action[2])


def plan(
    tensors: list[tuple[str, torch.Tensor]] | Walked, sem: Semantics,
    call: Call | Callable[[str], Call] = ((), {}), *, engine: Callable | None = None,
    prove: bool = True, mode: str = "generator",
    neutral: Callable[[str, torch.Tensor], bool] | None = None, check: bool = True,
) -> list[Planned] | None:  # fmt: skip
    """What the fill does to each ``(name, tensor)`` (or :class:`Walked` lists), every refusal
    raised before anything is written (``check``). ``call``: the arguments after the tensor or
    model, or a function of the local name giving them; ``engine``: proven against, fallen
    back to; ``neutral(name, t)``: set to 1.0. None: a whole-model ``engine`` must fill the
    model itself."""
    return _planned(tensors, sem, call, engine, prove, mode, neutral, check, False)


def _planned(tensors, sem, call, engine, prove, mode, neutral, check, lazy):
    """:func:`plan` (``tensors``: (name, tensor)s or :class:`Walked`), and for :func:`fill`
    (``lazy``) a kept plan found as it is (:class:`.kept.KeptFill`: no entries made; with
    ``lazy`` 2 its facts left to the fill's first call)."""
    _proof.check_fault_switch()  # a mistyped FP8_DUMMY_FAULT: refused before any write
    tensors = tensors if isinstance(tensors, Walked) else list(tensors)
    gather = prove and _gathering.get() is None
    token = _planning.set([tensors, sem, call, engine, mode, neutral] if gather else None)
    try:
        with no_cycle_collection():
            return _plan(tensors, sem, call, engine, prove, mode, neutral, check, lazy)
    finally:
        _planning.reset(token)


def _plan(tensors, sem, call, engine, prove, mode, neutral, check, lazy=False):
    """:func:`plan`'s body: each kind of tensor (:mod:`.kinds`) decided at its first tensor,
    in the walk's order (so the first refusal raised is the first tensor's); a plan of these
    very tensors kept from an earlier call (:mod:`.kept`) where nothing that decides it
    changed."""
    if isinstance(tensors, Walked):
        names, ts, shape = tensors
    else:
        names, ts, shape = [n for n, _ in tensors], [t for _, t in tensors], None
    keep = prove and check and _gathering.get() is None and neutral in (None, default_scales)
    if names is None and not (keep and len(ts) > 1):
        names = shape_names(shape)
    context = (sem, call, engine, mode, neutral, torch.is_inference_mode_enabled())
    one = kept.one_key(context, names[0], ts[0], sem.reads) if keep and len(ts) == 1 else None
    if one is not None and (decision := kept.find_one(one)) is not None:
        return entries(names, ts, [0], [decision], lambda *_: None, mode, check)
    # A fill (lazy 2) leaves a kept plan's facts to its first call, which checks them in the
    # same pass over the list as its fill (outside any TorchDispatchMode: that call writes).
    defer = lazy == 2 and torch._C._len_torch_dispatch_stack() == 0
    on = (context, names, ts, sem.reads)
    found = kept.find(*on, not defer, shape) if keep and one is None else None
    if found is not None and lazy and all(map(kindwise, found.decided)):
        return kept.KeptFill(found, ts, defer)  # its names: the same (or the same shape)
    if found is not None and defer:
        found = kept.find(*on, True, shape)
    if found is not None:
        names = names if names is not None else shape_names(shape)
        out = entries(names, ts, found.kind_of, found.decided, lambda *_: None, mode, check)
        return _kept_plan(out, found)
    new_fill = lazy and keep and one is None  # its list held for its fill where it is kept
    reads = sem.reads if neutral in (None, default_scales) else None
    kinds = kinds_of(names, ts, reads, shape, hold=new_fill)
    decide, memo = decider(sem, call, engine, prove, mode, neutral, check, proven)
    decided: list = [None] * len(kinds.firsts)
    if new_fill and kinds.facts is not None:
        # A fill's new plan: each kind decided at its first tensor, in order; where every
        # decision holds for its kind with nothing of a tensor's own but the engine's function
        # bound to it, the plan is kept and run from its kinds: no entry per tensor made
        # before the run asks for it, no dotted name but the firsts'.
        firsts = kinds.firsts
        at = shape_names_at(shape, firsts) if names is None else [names[i] for i in firsts]
        for k, i in enumerate(firsts):
            d = decide(at[k], ts[i])
            if d is None:
                return None  # a whole-model engine fills the model itself
            if not (d[4] and kindwise(d)):
                decide = _first_given(d, decide)  # the entries' first question: this one
                break
            decided[k] = d
        else:
            entry = kept.keep(context, names, ts, sem.reads, kinds, decided, shape)
            return kept.KeptFill(entry, ts, held=kinds.held)
    names = names if names is not None else shape_names(shape)
    out = entries(names, ts, kinds.kind_of, decided, decide, mode, check)
    if keep and out is not None and memo["keep"] and one is not None:
        kept.keep_one(one, decided[0])
    elif keep and out is not None and memo["keep"] and kinds.facts is not None:
        return _kept_plan(out, kept.keep(context, names, ts, sem.reads, kinds, decided, shape))
    return out


def _first_given(first: tuple, decide: Callable) -> Callable:
    """``decide`` whose first answer is ``first``, already made: the kinds before it are
    decided, so the entries' first question is that kind's first tensor's."""
    given = [first]

    def decide_(name: str, t: torch.Tensor) -> tuple | None:
        return given.pop() if given else decide(name, t)

    return decide_


def _kept_plan(out: list[Planned] | None, entry: kept.Kept) -> list[Planned] | None:
    if out is None:
        return None
    planned = kept.KeptPlan(out)
    planned.kept = entry
    return planned


_FILL = {"prove": True, "mode": "generator", "neutral": None, "check": True}  # fill()'s defaults


def fill(what: Any, sem: Semantics, call: Any = ((), {}), *, engine=None, progress=False, **kw):
    """:func:`plan` and :func:`run` on a model (what ``sem.order`` visits) or (name, tensor)s."""
    with no_cycle_collection():  # the walk too: its lists are the size of the model
        return _fill(what, sem, call, engine, progress, kw)


def _fill(what, sem, call, engine, progress, kw):
    model = isinstance(what, torch.nn.Module)
    objects = sem.reads != () or sem.per_tensor  # the rule's attributes, the engine's calls
    tensors = walked(what, sem.order, objects) if model else what
    opts = dict(_FILL)
    if unknown := set(kw) - set(opts):
        raise TypeError(f"fill() got unexpected keyword arguments {sorted(unknown)}")
    opts.update(kw)
    one = not model and isinstance(tensors, list) and len(tensors) == 1 and opts == _FILL
    if one and execution.filled_one(tensors[0], sem, call, engine):
        return None
    for lazy in (2, 1):  # 1: the kept plan's facts no longer held, nothing written
        planned = _planned(tensors, sem, call, engine, *opts.values(), lazy)
        if planned is None:
            return engine(what, *call[0], **call[1])
        if run(planned, mode=opts["mode"], progress=progress) is not kept.STALE:
            return None
    return None
