"""Each kind of tensor's decision, made at its first tensor in the walk's order: the engine's
rule, torch's refusals, which tensors our kernels take and the proof (``proven``, the one place
of the engine proof, :func:`.planning.proven`); and a plan's entries from the decisions, with
what is each tensor's own (the engine's function bound to it, the stateless mode's checks, a
refusal raised)."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from ...ops import as_int64
from ...tensors import is_plain, refusal
from .checks import checked, fusable
from .semantics import ROWS, Action, Kind, Planned, bind, error

__all__ = ["bound", "decider", "entries", "kindwise"]

_OURS = (Kind.UNIFORM, Kind.SKIP, Kind.ERROR)


def kindwise(d: tuple) -> bool:
    """Whether a kind's decision gives each of its tensors' entries without asking the tensor:
    nothing of its own, or only the engine's function bound to it (a per-tensor engine's
    branch: no stateless check, no refusal, as :func:`entries` makes it)."""
    return d[5] or (d[2] is not None and not d[3])


def bound(bind_engine: tuple, t: torch.Tensor) -> Action:
    """The action of a tensor whose kind keeps the engine's branch: its function bound to it."""
    engine, args, kwargs = bind_engine
    return Action(Kind.ENGINE, value=functools.partial(engine, t, *args, **kwargs))


def entries(names, ts, kind_of, decided, decide, mode, check) -> list[Planned] | None:
    """The plan's entries: each kind's decision (made at its first tensor by ``decide``,
    remembered in ``decided`` unless a proof did not pass), then what is the tensor's own:
    the engine's function bound to it, the stateless mode's checks, a refusal raised."""
    if all(d is not None and d[5] for d in decided):  # a kept plan of kinds alone
        acts, metas = [d[0] for d in decided], [d[1] for d in decided]
        return [(n, t, acts[k], metas[k]) for n, t, k in zip(names, ts, kind_of)]
    out: list[Planned] = []
    for name, t, k in zip(names, ts, kind_of):
        d = decided[k]
        if d is None:
            d = decide(name, t)
            if d is None:
                return None  # a whole-model engine fills the model itself
            if d[4]:
                decided[k] = d
        if d[5]:  # nothing of its own
            out.append((name, t, d[0], d[1]))
            continue
        action, meta, bind_engine, stateless = d[:4]
        if bind_engine is not None:  # a per-tensor engine keeps its branches
            action = bound(bind_engine, t)
        if stateless and check and is_plain(t):
            # no engine path to leave a refused layout to: the op's checks, up front
            check_stateless = torch.ops.fp8_dummy_internal.check_stateless_args
            if (why := refusal(check_stateless, t, action.low, action.high, 0, None)) is not None:
                action = error(RuntimeError, why)
        if check and action.kind is Kind.ERROR:
            kind, message = action.value
            raise kind(f"fp8_dummy: {name}: {message}" if name else f"fp8_dummy: {message}")
        if check and action.kind is Kind.ENGINE and action.value is None:
            raise RuntimeError(f"fp8_dummy: {name}: only the engine's own function fills it")
        out.append((name, t, action, meta))
    return out


def decider(sem, call, engine, prove, mode, neutral, check, proven: Callable):
    """``decide(name, t)``: what the plan does to tensors of ``t``'s kind, as (action, (sem,
    seed), the engine's function to bind to each tensor or None, whether the stateless
    mode's checks run per tensor, whether the decision holds for the whole kind); None: a
    whole-model engine fills the model itself. And a memo whose "keep" says whether every
    proof asked passed (a plan with a refusal, or a probe to retry, is not kept)."""
    whole = engine is not None and not sem.per_tensor
    # What depends only on the local name (the call's arguments, their binding, the seed's
    # check) is worked out once per name; a kind of tensor whose proof's key is proven is
    # not looked up again (its key is not even made: the proof's keys are a function of these).
    bound: dict[str, tuple] = {}
    kinds_proven: set[tuple] = set()
    memo = {"keep": True}

    def is_proven(name: str, local: str, t: torch.Tensor, args: tuple, kwargs: dict) -> bool:
        strided = sem.temp == ROWS and t.dim() > 0 and not t.is_contiguous()
        kind = (local, t.device, t.dtype, min(t.dim(), 2), strided)
        if kind in kinds_proven:
            return True
        ok = proven(sem, engine, name, t, (args, kwargs))
        if ok:  # a refusal, or a probe to retry, is asked again
            kinds_proven.add(kind)
        else:
            memo["keep"] = False
        return ok

    def decide(name: str, t: torch.Tensor) -> tuple | None:
        asked: list[bool] = []

        def proves() -> bool:
            asked.append(is_proven(name, local, t, args, kwargs))
            return asked[-1]

        local = name.rsplit(".", 1)[-1]
        if (entry := bound.get(local)) is None:
            args, kwargs = call(local) if callable(call) else call
            try:
                p, named = bind(sem, args, kwargs)
                if check and engine is None and "seed" in p:  # refused before any write
                    as_int64(p["seed"], "seed", sem.path)
                entry = bound[local] = (args, kwargs, p, named, False)
            except TypeError:  # a later release's arguments: its own function decides
                if engine is None:
                    raise
                entry = bound[local] = (args, kwargs, None, False, True)
        args, kwargs, p, named, theirs_only = entry
        theirs = None if engine is None else (engine, args, kwargs)
        if theirs_only:
            return None if whole else (Action(Kind.ENGINE), (sem, 0), theirs, False, True, False)
        action = checked(t, sem.rule(t, p.get("low"), p.get("high"), p["name"] if named else local))
        if neutral is not None and action.kind is Kind.UNIFORM and neutral(name, t):
            action = Action(Kind.FILL, value=1.0)
        if whole and prove and not t.is_meta and not proves():
            return None
        if action.kind is Kind.UNIFORM and mode == "generator":
            ours = fusable(t)
            if ours and prove and not whole and not proves():
                ours = False
            if not ours:
                action = Action(Kind.REFERENCE, action.low, action.high)
        bind_engine = None
        if theirs is not None and not whole and action.kind not in _OURS:
            bind_engine = theirs
        stateless = mode == "stateless" and action.kind is Kind.UNIFORM
        raises = action.kind is Kind.ERROR or action.kind is Kind.ENGINE and action.value is None
        alone = bind_engine is None and not stateless and not (check and raises)
        return action, (sem, p["seed"]), bind_engine, stateless, all(asked), alone

    return decide, memo
