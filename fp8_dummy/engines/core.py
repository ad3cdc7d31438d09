"""The engine-agnostic core (docs/engines.md): an engine's dummy-weight function as data
(:class:`Semantics`: what it does to each tensor, an :class:`Action`), the one fill that plans
and checks every tensor before it writes any, and the proof of our fill against the engine's
own function called as its loader calls it (without the engine: against its semantics through
the plain-torch path). Names no engine."""

from __future__ import annotations

import enum
import functools
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _proof, reference
from .._build import build_info
from .._progress import Progress
from ..ops import init_, init_many_, random_
from ..stateless import init_stateless_

__all__ = ["Action", "Kind", "Semantics", "fill", "fill_model", "plan", "proven", "run"]

# Progress by default only for models of at least 1 GiB on a terminal; CUDA batches of about
# 1 GiB while it shows (else one batch per call).
PROGRESS_THRESHOLD_BYTES = PROGRESS_BATCH_BYTES = 1 << 30
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
FUSED_DTYPES = {getattr(torch, n) for n in _FP8 if hasattr(torch, n)} | {
    torch.int8,  # through the float16 temp: truncation toward zero
    torch.uint8,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
}


class Kind(enum.Enum):
    SKIP = "skip"  # untouched
    FILL = "fill"  # t.fill_(value)
    BYTE = "byte"  # every byte set to value
    RANDOM = "random"  # random_(low, high) on the tensor (low < 0) or its uint8 view
    ZERO = "zero"
    UNIFORM = "uniform"  # the float path in [low, high): fused where proven
    REFERENCE = "reference"  # the float path through the plain-torch reference
    ENGINE = "engine"  # the engine's own function: value() (None: not known yet)
    ERROR = "error"  # the engine raises: value = (exception type, message)


@dataclass(frozen=True)
class Action:
    kind: Kind
    low: float = 0.0
    high: float = 0.0
    value: Any = None


SKIP = Action(Kind.SKIP)
Rule = Callable[[torch.Tensor, Any, Any, str], Action]
Call = tuple[tuple, dict]


def error(kind: type[Exception], message: str) -> Action:
    return Action(Kind.ERROR, value=(kind, message))


@dataclass(frozen=True)
class Semantics:
    """An engine's dummy-weight function as data. ``rule(t, low, high, name)``: its action on
    one tensor (``name``: as its caller passed it, else the tensor's local name); ``params``:
    its parameters after the tensor or model, with defaults; ``order``: the tensors a
    whole-model fill visits ("modules": each module's own parameters and persistent buffers,
    "state_dict"); ``temp``: its float path ("like": reference.new_path, "old": old_path,
    "rows": contiguous_path); ``per_tensor``: its function takes a tensor, not a model;
    ``path``: the proof keys' and FP8_DUMMY_FAULT's name; ``name``: engine and version."""

    path: str
    name: str
    rule: Rule
    params: tuple[tuple[str, Any], ...]
    order: str = "state_dict"
    temp: str = "like"
    per_tensor: bool = False


SEMANTICS: dict[str, Semantics] = {}  # by name, for fp8_dummy.initialize_dummy_weights


def bind(sem: Semantics, args: tuple, kwargs: dict) -> tuple[dict, bool]:
    """(the call's arguments with the defaults, whether it gave a name); TypeError for a call
    the function does not take (a later release's arguments)."""
    names = [n for n, _ in sem.params]
    if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[: len(args)]):
        raise TypeError(f"not {sem.name}'s signature: {call_text(args, kwargs)}")
    given = dict(zip(names, args), **kwargs)
    return {**dict(sem.params), **given}, "name" in given


def call_text(args: tuple, kwargs: dict) -> str:
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if k != "name"]
    return "(" + ", ".join(["...", *shown]) + ")"


def walk(model: torch.nn.Module, order: str) -> list[tuple[str, torch.Tensor]]:
    """(dotted name, tensor) in an engine's order (:class:`Semantics`' ``order``)."""
    if order == "state_dict":
        return list(model.state_dict().items())
    out = []
    for prefix, layer in model.named_modules():
        for local, t in {**layer._parameters, **layer._buffers}.items():
            if t is not None and local not in layer._non_persistent_buffers_set:
                out.append((f"{prefix}.{local}" if prefix else local, t))
    return out


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided


def fusable(t: torch.Tensor) -> bool:
    """Whether our operator may fill ``t``'s float path: a dtype and device it supports, a plain
    tensor or a Parameter over one (wrapper subclasses may update side tensors)."""
    if t.dtype not in FUSED_DTYPES or t.layout != torch.strided:
        return False
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        if not isinstance(t, torch.nn.Parameter) or type(t.data) is not torch.Tensor:
            return False
    return t.device.type == "cpu" or (t.device.type == "cuda" and cuda_kernels())


@functools.cache
def cuda_kernels() -> bool:
    """Our CUDA kernels are built (a CPU-only build registers kernels that raise); not ROCm."""
    return torch.version.hip is None and bool(build_info()["cuda"])


@functools.lru_cache(maxsize=64)
def _bounds_refused(dtype: torch.dtype, low: float, high: float) -> str | None:
    try:
        meta = torch.empty(0, dtype=dtype, device="meta")
        torch.ops.fp8_dummy_internal.check_init_args(meta, low, high, "uniform_")
    except RuntimeError as e:
        return str(e)
    return None


def checked(t: torch.Tensor, action: Action) -> Action:
    """``action``, or the error torch raises for it on ``t`` (bounds for the dtype, elements
    sharing memory, FP4's missing kernels), so that it is refused before anything is written."""
    kind = action.kind
    if t.is_meta or kind not in (Kind.UNIFORM, Kind.RANDOM, Kind.FILL):
        return action
    if t.dtype == FP4 and kind is not Kind.RANDOM:
        op = "copy_" if kind is Kind.UNIFORM else "fill_"
        return error(NotImplementedError, f"{op} is not implemented for float4_e2m1fn_x2")
    if kind is Kind.UNIFORM and t.dtype in FUSED_DTYPES:
        refused = _bounds_refused(t.dtype, action.low, action.high)
        if refused is not None:
            return error(RuntimeError, refused)
    if kind is not Kind.FILL and _plain(t) and torch._debug_has_internal_overlap(t) == 1:
        return error(RuntimeError, "more than one element refers to a single memory location")
    return action


def probe_tensor(t: torch.Tensor, strided: bool = False) -> torch.Tensor:
    """A poisoned (0x55) tensor like ``t``: dtype, device, 0, 1 or 2+ dims, 67 x 129 elements;
    ``strided``: not row-major (transposed, or every other element)."""
    shape = {0: (), 1: (67 * 129,)}.get(t.dim(), (67, 129) + (1,) * (t.dim() - 2))
    if strided and t.dim() >= 2:
        p = torch.empty((129, 67) + shape[2:], dtype=t.dtype, device=t.device).transpose(0, 1)
    elif strided and t.dim() == 1:
        p = torch.empty((2 * shape[0],), dtype=t.dtype, device=t.device)[::2]
    else:
        p = torch.empty(shape, dtype=t.dtype, device=t.device)
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
    """Whether our fill may stand in for the engine's function on tensors like ``t`` (once per
    engine and version, device, dtype, local name, dims, layout where the temp is row-major,
    and the call): the engine's function (``engine``, called as its loader did: ``call`` is
    the arguments after the tensor or model; None: the semantics through the plain-torch
    path) on a poisoned probe, and ours, compared byte for byte (fp8_dummy/_proof.py)."""
    args, kwargs = call
    strided = sem.temp == "rows" and t.dim() > 0 and not t.is_contiguous()
    local = name.rsplit(".", 1)[-1]
    key = f"{sem.path}: {sem.name} {t.device} {t.dtype} name={local!r} dims={min(t.dim(), 2)}"
    if sem.temp == "rows":
        key += f" layout={'strided' if strided else 'contiguous'}"
    key += f" call={call_text(args, kwargs)}"
    whole = engine is not None and not sem.per_tensor

    def probe() -> str | None:
        def make() -> Any:
            return probe_model(name, t, strided) if whole else probe_tensor(t, strided)

        theirs, ours = make(), make()
        planned = _plan(walk(ours, sem.order) if whole else [(name, ours)], sem, call, None, False)
        refusal = next((a.value for _, _, a, _ in planned if a.kind is Kind.ERROR), None)
        try:
            if engine is None:
                run(plan([(name, theirs)], sem, call, fused=False))
            else:
                engine(theirs, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 (the same refusal as ours is a match)
            if refusal is not None and isinstance(e, refusal[0]):
                return None
            return f"the engine raised {type(e).__name__}: {e}; ours did not"
        if refusal is not None:
            return f"ours raises {refusal[0].__name__}: {refusal[1]}; the engine did not"
        run(planned)
        if whole:
            ours, theirs = ours.get_buffer(name), theirs.get_buffer(name)
        return _proof.first_difference(ours, theirs)

    return _proof.proven(key, probe)


Planned = tuple[str, torch.Tensor, Action, "tuple[Semantics, int]"]


def plan(
    tensors: list[tuple[str, torch.Tensor]],
    sem: Semantics,
    call: Call | Callable[[str], Call] = ((), {}),
    *,
    engine: Callable | None = None,
    prove: bool = True,
    fused: bool = True,
    mode: str = "reference",
    neutral: Callable[[str, torch.Tensor], bool] | None = None,
) -> list[Planned] | None:
    """What the fill does to each ``(name, tensor)``; every refusal is raised here, before
    anything is written. ``call``: the arguments after the tensor or model (or a function of
    the local name giving them); ``engine``: the engine's own function, proven against and
    fallen back to; ``neutral(name, t)``: float-path tensors set to 1.0 instead. None: a
    whole-model ``engine`` refused a kind of tensor and must fill the model itself."""
    planned = _plan(tensors, sem, call, engine, prove, fused, mode, neutral)
    for name, _, action, _ in planned or ():
        if action.kind is Kind.ERROR:
            kind, message = action.value
            raise kind(f"fp8_dummy: {name}: {message}" if name else f"fp8_dummy: {message}")
        if action.kind is Kind.ENGINE and action.value is None:
            raise RuntimeError(f"fp8_dummy: {name}: only the engine's own function fills it")
    return planned


def _plan(tensors, sem, call, engine, prove, fused=True, mode="reference", neutral=None):
    whole = engine is not None and not sem.per_tensor
    out: list[Planned] = []
    for name, t in tensors:
        local = name.rsplit(".", 1)[-1]
        args, kwargs = call(local) if callable(call) else call
        theirs = None if engine is None else functools.partial(engine, t, *args, **kwargs)
        try:
            p, named = bind(sem, args, kwargs)
        except TypeError:  # a later release's arguments: its own function decides
            if engine is None:
                raise
            if whole:
                return None
            out.append((name, t, Action(Kind.ENGINE, value=theirs), (sem, 0)))
            continue
        action = checked(t, sem.rule(t, p.get("low"), p.get("high"), p["name"] if named else local))
        if neutral is not None and action.kind is Kind.UNIFORM and neutral(name, t):
            action = Action(Kind.FILL, value=1.0)
        if whole and prove and not t.is_meta and not proven(sem, engine, name, t, (args, kwargs)):
            return None
        if action.kind is Kind.UNIFORM and mode == "reference":
            ours = fused and fusable(t)
            if ours and prove and not whole and not proven(sem, engine, name, t, (args, kwargs)):
                ours = False
            if not ours:
                action = Action(Kind.REFERENCE, action.low, action.high)
        # A per-tensor engine function keeps every branch but the float path we proved.
        if theirs is not None and not whole and action.kind not in _OURS:
            action = Action(Kind.ENGINE, value=theirs)
        out.append((name, t, action, (sem, p["seed"])))
    return out


_OURS = (Kind.UNIFORM, Kind.SKIP, Kind.ERROR)


_REFERENCE = {
    "like": reference.new_path,
    "old": reference.old_path,
    "rows": reference.contiguous_path,
}


def apply(t: torch.Tensor, action: Action, seed: int) -> None:
    """Every action but the float path, as the engines carry them out."""
    kind = action.kind
    if kind is Kind.FILL:
        t.fill_(action.value)
    elif kind is Kind.BYTE:
        t.view(torch.uint8).fill_(action.value)
    elif kind is Kind.RANDOM:
        random_bytes_(
            t if action.low < 0 else t.view(torch.uint8), int(action.low), int(action.high), seed
        )
    elif kind is Kind.ZERO:
        t.zero_()
    elif kind is Kind.ENGINE:
        action.value()
    elif kind is not Kind.SKIP:
        raise RuntimeError(f"fp8_dummy: no way to carry out {action}")


def random_bytes_(t: torch.Tensor, low: int, high: int, seed: int) -> torch.Tensor:
    """``t.random_(low, high)`` with a fresh generator of its device seeded with ``seed``:
    ``fp8_dummy.random_`` for plain tensors, torch's own for subclasses (DTensor, ...)."""
    if _plain(t):
        return random_(t, low, high, seed)
    return t.random_(low, high, generator=torch.Generator(device=t.device).manual_seed(seed))


def _is_dtensor(t: torch.Tensor) -> bool:
    return hasattr(t, "to_local") and hasattr(t, "placements")


def _identity(t: torch.Tensor) -> tuple[tuple, tuple]:
    """(storage, view) keys; a tensor without accessible storage is its own."""
    local = t.to_local() if _is_dtensor(t) else t  # a DTensor writes its local shard's storage
    try:
        storage = (t.device, local.untyped_storage().data_ptr())
        return storage, (t.device, local.data_ptr(), t.dtype, tuple(t.shape), t.stride())
    except (RuntimeError, NotImplementedError, TypeError):
        return ("opaque", id(t)), ("opaque", id(t))


def run(planned: list[Planned], *, mode: str = "reference", progress: bool | None = False) -> None:
    """Carry out a plan. Order matters only where tensors share memory: an exact alias with the
    same action is filled once; a storage touched any other way, strictly in order; the rest
    is free to be batched (CUDA: one ``init_many_`` per bounds, seed and temp)."""
    live = [e for e in planned if e[2].kind is not Kind.SKIP]
    ids = [_identity(t) for _, t, _, _ in live]
    views: dict[tuple, set[tuple]] = {}
    first: dict[tuple, Action] = {}
    ordered: set[tuple] = set()
    for (_, t, action, _), (storage, key) in zip(live, ids):
        views.setdefault(storage, set()).add(key)
        # Reference mode on a DTensor draws from the default generator (docs/modes.md): a tied
        # one is filled as often as the engine's loop fills it.
        redrawn = mode == "reference" and _is_dtensor(t)
        if first.setdefault(key, action) != action or len(views[storage]) > 1 or redrawn:
            ordered.add(storage)
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
    batch_bytes = 0

    def flush() -> None:
        for (low, high, seed, sem), batch in batches.items():
            init_many_(batch, low, high, seed, contiguous_temp=sem.temp == "rows")
            for x in batch:
                if _proof.fault(sem.path):
                    _proof.corrupt_(x)
                if bar is not None:
                    bar.update(x)
        batches.clear()

    try:
        with torch.no_grad():
            for (_, t, action, (sem, seed)), in_order in todo:
                if action.kind is Kind.UNIFORM and mode == "stateless":
                    init_stateless_(t.data, action.low, action.high, seed)
                elif action.kind is Kind.UNIFORM and t.is_cuda and not in_order:
                    batches.setdefault((action.low, action.high, seed, sem), []).append(t.data)
                    batch_bytes += t.numel() * t.element_size()
                    if bar is not None and batch_bytes >= PROGRESS_BATCH_BYTES:
                        flush()
                        batch_bytes = 0
                    continue
                elif action.kind is Kind.UNIFORM:
                    init_(t.data, action.low, action.high, seed, contiguous_temp=sem.temp == "rows")
                    if _proof.fault(sem.path):
                        _proof.corrupt_(t.data)
                elif action.kind is Kind.REFERENCE:
                    _REFERENCE[sem.temp](t, action.low, action.high, seed)
                else:
                    apply(t, action, seed)
                if bar is not None:
                    bar.update(t)
            flush()
    finally:
        if bar is not None:
            bar.close()
        _proof.emit_pending()  # the operators' own refusals, shown from here


def fill(tensors, sem: Semantics, call: Any = ((), {}), *, mode="reference", progress=False, **kw):
    """:func:`plan`, then :func:`run` (a list of tensors; a whole model: :func:`fill_model`)."""
    run(plan(tensors, sem, call, mode=mode, **kw), mode=mode, progress=progress)


def fill_model(model: torch.nn.Module, sem: Semantics, call: Call = ((), {}), *, engine=None):
    """The model as ``sem``'s function called with ``call`` fills it; with the engine's own
    whole-model function, ours only where every kind of tensor met is proven, else that."""
    planned = plan(walk(model, sem.order), sem, call, engine=engine)
    if planned is None:
        return engine(model, *call[0], **call[1])
    return run(planned)


_SCALE = ("scale", "scale_inv")


def is_scale_tensor(name: str, tensor: torch.Tensor) -> bool:
    """``scales="neutral"``'s default rule: a 0-dim tensor, or a last name component that ends
    in ``scale``/``scale_inv`` or contains ``_scale_`` (``weight_scale_2``, ``k_scale``...)."""
    local = name.rsplit(".", 1)[-1]
    return tensor.dim() == 0 or local.endswith(_SCALE) or "_scale_" in local
