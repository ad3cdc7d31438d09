"""The engine-agnostic core (docs/engines.md): an engine's function as data (:class:`Semantics`),
the one fill, checking every tensor before it writes any, the one proof, and the guard."""

from __future__ import annotations

import enum
import functools
import importlib.metadata  # importlib.import_module too
import inspect
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _proof, reference
from .._build import build_info
from .._progress import Progress
from ..ops import as_int64, init_, init_many_, random_
from ..stateless import init_stateless_

__all__ = ["Action", "Kind", "Semantics", "fill", "plan", "proven", "run"]

# Progress by default for models of at least 1 GiB on a terminal; CUDA batches of ~1 GiB then.
PROGRESS_THRESHOLD_BYTES = PROGRESS_BATCH_BYTES = 1 << 30
ISOLATE = "FP8_DUMMY_ISOLATE"  # 0: every proof in-process; all: CPU keys in a child too (tests)
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
_WIDE = (torch.int8, torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)
FUSED_DTYPES = {getattr(torch, n) for n in _FP8 if hasattr(torch, n)} | set(_WIDE)
ROWS = "contiguous_path"  # a row-major temp: the bytes depend on the layout
_CHECK = torch.ops.fp8_dummy_internal.check_init_args


class Kind(enum.Enum):
    SKIP = "skip"  # untouched
    FILL = "fill"  # t.fill_(value)
    BYTE = "byte"  # every byte set to value
    RANDOM = "random"  # random_(low, high) on the tensor (low < 0) or its uint8 view
    ZERO = "zero"
    UNIFORM = "uniform"  # the float path in [low, high): fused where proven
    REFERENCE = "reference"  # the float path through the plain-torch reference
    ENGINE = "engine"  # the engine's own function: value() (None: not known here)
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
_OURS = (Kind.UNIFORM, Kind.SKIP, Kind.ERROR)


def error(kind: type[Exception], message: str) -> Action:
    return Action(Kind.ERROR, value=(kind, message))


@dataclass(frozen=True)
class Semantics:
    """An engine's dummy-weight function as data (docs/engines.md, "The core")."""

    path: str  # the proof keys' and FP8_DUMMY_FAULT's name
    name: str  # the engine and version the keys name
    rule: Rule  # (t, low, high, name as passed, else local) -> Action
    params: tuple[tuple[str, Any], ...]  # its parameters after the tensor or model, defaults
    order: str = "state_dict"  # or "modules": each module's parameters, persistent buffers
    temp: str = "new_path"  # its float path: a function of fp8_dummy.reference
    per_tensor: bool = False  # its function takes a tensor (else a model)


SEMANTICS: dict[str, Semantics] = {}  # by name, for fp8_dummy.initialize_dummy_weights


def bind(sem: Semantics, args: tuple, kwargs: dict) -> tuple[dict, bool]:
    """(the arguments with the defaults, whether a name was given); TypeError: not its call."""
    names = [n for n, _ in sem.params]
    if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[: len(args)]):
        raise TypeError(f"not {sem.name}'s signature")
    given = dict(zip(names, args), **kwargs)
    return {**dict(sem.params), **given}, "name" in given


def walk(model: torch.nn.Module, order: str) -> list[tuple[str, torch.Tensor]]:
    """(dotted name, tensor) in an engine's order (:class:`Semantics`' ``order``)."""
    if order == "state_dict":
        return list(model.state_dict().items())
    return [
        (f"{prefix}.{local}" if prefix else local, t)
        for prefix, layer in model.named_modules()
        for local, t in {**layer._parameters, **layer._buffers}.items()
        if t is not None and local not in layer._non_persistent_buffers_set
    ]


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided


def fusable(t: torch.Tensor) -> bool:
    """A dtype and device of ours, a plain tensor or Parameter (subclasses may update more)."""
    plain = _plain(t) or (isinstance(t, torch.nn.Parameter) and type(t.data) is torch.Tensor)
    if not plain or t.dtype not in FUSED_DTYPES or t.layout != torch.strided:
        return False
    return (t.device.type == "cpu" or t.device.type == "cuda" and cuda_kernels()) and distinct(t)


def distinct(t: torch.Tensor) -> bool:
    """Dense, or shown distinct by our ops' rule (torch writes "too hard" overlaps too)."""
    return torch._debug_has_internal_overlap(t) == 0 or _refusal(_CHECK, t, 0.0, 0.0) is None


def _refusal(check: Callable, *args: Any) -> str | None:
    """The message of the RuntimeError ``check(*args)`` raises, else None."""
    try:
        check(*args)
    except RuntimeError as e:
        return str(e)
    return None


@functools.cache
def cuda_kernels() -> bool:
    """Our CUDA kernels are built (a CPU-only build registers kernels that raise); not ROCm."""
    return torch.version.hip is None and bool(build_info()["cuda"])


@functools.lru_cache(maxsize=64)
def _bounds_refused(dtype: torch.dtype, low: float, high: float) -> str | None:
    return _refusal(_CHECK, torch.empty(0, dtype=dtype, device="meta"), low, high, "uniform_")


def checked(t: torch.Tensor, action: Action) -> Action:
    """``action``, or the error torch would raise for it on ``t`` (bounds, overlap, FP4, an
    inference tensor outside inference mode), with what to do about it."""
    kind = action.kind
    if t.is_meta or kind in (Kind.SKIP, Kind.ENGINE, Kind.ERROR):
        return action
    if (why := unwritable(t, independent=False)) is not None:
        return error(RuntimeError, why)
    if kind not in (Kind.UNIFORM, Kind.RANDOM, Kind.FILL):
        return action
    if t.dtype == FP4 and kind is not Kind.RANDOM:
        op = "copy_" if kind is Kind.UNIFORM else "fill_"
        return error(NotImplementedError, f"{op} is not implemented for float4_e2m1fn_x2")
    refused = None
    if kind is Kind.UNIFORM and t.dtype in FUSED_DTYPES:
        refused = _bounds_refused(t.dtype, action.low, action.high)
    if kind is not Kind.FILL and _plain(t) and torch._debug_has_internal_overlap(t) == 1:
        refused = "more than one element refers to a single memory location"
    return action if refused is None else error(RuntimeError, refused)


def unwritable(t: torch.Tensor, independent: bool = True) -> str | None:
    """Why no in-place write of ``t`` can work here, with what to do, or None: an inference
    tensor outside inference mode (torch refuses the write), or, for ``independent`` values
    (not one constant), elements sharing memory (an expanded or broadcast tensor, an
    overlapping ``as_strided``; too hard for torch's quick test: ``init_stateless_``'s checks
    decide)."""
    if t.is_meta:
        return None
    if t.is_inference() and not torch.is_inference_mode_enabled():
        return (
            "an inference tensor (made under torch.inference_mode()) cannot be written "
            "outside inference mode: fill the model inside torch.inference_mode(), or create "
            "it outside"
        )
    if not independent or not _plain(t):
        return None
    overlap = torch._debug_has_internal_overlap(t)
    stateless = torch.ops.fp8_dummy_internal.check_stateless_args
    if overlap == 1 or overlap == 2 and _refusal(stateless, t, 0.0, 1.0, 0, None) is not None:
        return (
            f"several of its elements share one memory location (shape {tuple(t.shape)}, "
            f"strides {t.stride()}: an expanded or broadcast tensor, or an overlapping "
            "as_strided view), so it cannot hold independent values: give it storage of its "
            "own (.clone() or .contiguous()) before filling"
        )
    return None


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

    def probe() -> str | None:
        tensors = [(name, probe_tensor(t, strided))]
        ((_, _, action, (_, seed)),) = plan(tensors, sem, call, prove=False, check=False)
        every = os.environ.get(ISOLATE, "").strip().lower() == "all"
        if action.kind is not Kind.UNIFORM or not (every or t.is_cuda and enabled(ISOLATE)):
            return _probe(sem, engine, call, name, t, strided, action, seed)
        target = engine and f"{engine.__module__}:{getattr(engine, '__qualname__', '<')}"
        if target is not None and ("<" in target or hasattr(engine, "__self__")):
            raise TypeError(f"a child process cannot import {engine!r} to probe it")
        spec = [target, [sem.path, sem.name, sem.temp, sem.per_tensor], name,
                [str(t.dtype)[6:], str(t.device), t.dim()], strided, [list(args), kwargs],
                [action.low, action.high, seed]]  # fmt: skip
        from .. import _isolated  # here: the child runs it as __main__

        return _isolated.verdict(key, f"{__name__}:child_probe", spec, str(t.device))

    return _proof.proven(key, probe)


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


Planned = tuple[str, torch.Tensor, Action, "tuple[Semantics, int]"]


def plan(
    tensors: list[tuple[str, torch.Tensor]], sem: Semantics,
    call: Call | Callable[[str], Call] = ((), {}), *, engine: Callable | None = None,
    prove: bool = True, mode: str = "reference",
    neutral: Callable[[str, torch.Tensor], bool] | None = None, check: bool = True,
) -> list[Planned] | None:  # fmt: skip
    """What the fill does to each ``(name, tensor)``, every refusal raised before anything is
    written (``check``). ``call``: the arguments after the tensor or model, or a function of
    the local name giving them; ``engine``: proven against, fallen back to; ``neutral(name,
    t)``: set to 1.0. None: a whole-model ``engine`` must fill the model itself."""
    _proof.check_fault_switch()  # a mistyped FP8_DUMMY_FAULT: refused before any write
    whole = engine is not None and not sem.per_tensor
    out: list[Planned] = []
    for name, t in tensors:
        local = name.rsplit(".", 1)[-1]
        args, kwargs = call(local) if callable(call) else call
        theirs = None if engine is None else functools.partial(engine, t, *args, **kwargs)
        try:
            p, named = bind(sem, args, kwargs)
            if check and engine is None and "seed" in p:  # refused before any tensor is written
                as_int64(p["seed"], "seed", sem.path)
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
            ours = fusable(t)
            if ours and prove and not whole and not proven(sem, engine, name, t, (args, kwargs)):
                ours = False
            if not ours:
                action = Action(Kind.REFERENCE, action.low, action.high)
        if theirs is not None and not whole and action.kind not in _OURS:
            action = Action(Kind.ENGINE, value=theirs)  # a per-tensor engine keeps its branches
        if check and mode == "stateless" and action.kind is Kind.UNIFORM and _plain(t):
            # no engine path to leave a refused layout to: the op's checks, up front
            stateless = torch.ops.fp8_dummy_internal.check_stateless_args
            if (why := _refusal(stateless, t, action.low, action.high, 0, None)) is not None:
                action = error(RuntimeError, why)
        if check and action.kind is Kind.ERROR:
            kind, message = action.value
            raise kind(f"fp8_dummy: {name}: {message}" if name else f"fp8_dummy: {message}")
        if check and action.kind is Kind.ENGINE and action.value is None:
            raise RuntimeError(f"fp8_dummy: {name}: only the engine's own function fills it")
        out.append((name, t, action, (sem, p["seed"])))
    return out


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
    if _plain(t) and distinct(t):
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


def run(planned: list[Planned], *, mode: str = "reference", progress: bool | None = False) -> None:
    """Carry out a plan: an alias with the same action filled once, a storage touched in other
    ways strictly in order, the rest batched (CUDA: one ``init_many_`` per bounds and seed)."""
    live = [e for e in planned if e[2].kind is not Kind.SKIP]
    ids = [_identity(t) for _, t, _, _ in live]
    uses: dict[tuple, set] = {}
    for (_, t, action, _), (storage, key) in zip(live, ids):
        uses.setdefault(storage, set()).add((key, action))
        # Reference mode on a DTensor draws from the default generator (docs/modes.md): a tied
        # one is filled as often as the engine's loop fills it.
        if mode == "reference" and hasattr(t, "to_local"):
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
        with torch.no_grad():
            for (_, t, action, (sem, seed)), in_order in todo:
                kind, low, high = action.kind, action.low, action.high
                fused = kind is Kind.UNIFORM and mode == "reference"
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


def fill(what: Any, sem: Semantics, call: Any = ((), {}), *, engine=None, progress=False, **kw):
    """:func:`plan` and :func:`run` on a model (what ``sem.order`` visits) or (name, tensor)s."""
    model = isinstance(what, torch.nn.Module)
    planned = plan(walk(what, sem.order) if model else what, sem, call, engine=engine, **kw)
    if planned is None:
        return engine(what, *call[0], **call[1])
    return run(planned, mode=kw.get("mode", "reference"), progress=progress)


def is_scale_tensor(name: str, tensor: torch.Tensor) -> bool:
    """``scales="neutral"``'s rule: 0-dim, or a local name ending in ``scale``/``scale_inv`` or
    containing ``_scale_`` (``weight_scale_2``)."""
    local = name.rsplit(".", 1)[-1]
    return tensor.dim() == 0 or local.endswith(("scale", "scale_inv")) or "_scale_" in local


# ---- inside the engine: its version and own function, the switch, the guard ----------------


@functools.cache  # the walk over sys.path costs ~1 ms
def installed(*dists: str) -> str | None:
    """The installed version of the first of these distributions, or None."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def own_function(module: str, name: str, *ours: Callable) -> Callable | None:
    """The engine's own ``module.name`` (unwrapped) if imported already and not one of ``ours``."""
    f = getattr(sys.modules.get(module), name, None)
    while getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__
    return None if f is None or f in ours else f


def enabled(variable: str) -> bool:
    """The plugins' switch: on unless the variable is 0, false, off or no."""
    return os.environ.get(variable, "").strip().lower() not in ("0", "false", "off", "no")


def account(engine: str, where: str = "") -> str:
    """The plugins' log line: what goes through fp8_dummy in this process."""
    text = f"dummy weights through fp8_dummy ({where}each kind of tensor after a probe against "
    text += f"{engine}'s own function)"
    if torch.version.hip is not None:
        return f"{text}; ROCm tensors left to {engine} (our kernels are CUDA's)"
    if torch.version.cuda is not None and not cuda_kernels():
        return f"{text}; CUDA kernels not built: CUDA dummy weights left to {engine}"
    return text


_warned: set[tuple[str, str]] = set()


def guarded(who: str, engine: str, what: str, fn: Callable, *a: Any, theirs=None, **kw) -> Any:
    """``fn(*a, **kw)``; if it raises, ``theirs(*a, **kw)`` (the engine's own function: its
    errors are the engine's) or None, and one warning per step (``who``: "the X plugin")."""
    try:
        return fn(*a, **kw)
    except Exception as e:  # noqa: BLE001 (a plugin must never break the engine)
        result = None if theirs is None else theirs(*a, **kw)
        if (who, what) not in _warned:
            _warned.add((who, what))
            text = f"fp8_dummy: {who}'s {what} failed ({type(e).__name__}: {e}); "
            warnings.warn(text + f"{engine}'s own dummy weights are used", RuntimeWarning, 2)
        return result
