"""The tensor facts the realistic model (:mod:`fp8_dummy.realistic`) and the engines
(:mod:`fp8_dummy.engines`) share, so that neither imports the other's internals: which dtypes
are 1-byte floats, packed FP4 and E8M0 scales, which are written through a byte view; the walk
over a model's tensors in an engine's order; whether a tensor is a plain strided one, and why
an in-place write of it cannot work."""

from __future__ import annotations

import torch

from ._library import C as _C

__all__ = ["BYTE_VIEWED", "E8M0", "FLOAT8", "FP4", "PACKED_FP4", "is_plain", "unwritable"]
__all__ += ["refusal", "shape_locals", "shape_names", "shape_names_at", "state_dict_shape"]
__all__ += ["walk", "walk_lists", "walk_shape"]

FP4 = getattr(torch, "float4_e2m1fn_x2", None)  # two e2m1 codes a byte
E8M0 = getattr(torch, "float8_e8m0fnu", None)  # a power of two a byte (MX scales)
# The 1-byte floats with a sign and a mantissa (what a scaled FP8 weight is stored in), in
# torch's order of their introduction: a tuple, so that whoever lists them lists them alike.
FLOAT8 = tuple(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)
PACKED_FP4 = frozenset(d for d in (torch.uint8, FP4) if d is not None)  # two e2m1 codes a byte
# Written through their uint8 view: no arithmetic of torch's covers them (or they hold codes).
BYTE_VIEWED = frozenset(d for d in (torch.uint8, FP4, E8M0) if d is not None)


def walk(model: torch.nn.Module, order: str) -> list[tuple[str, torch.Tensor]]:
    """(dotted name, tensor) in an engine's order: ``"state_dict"``, or ``"modules"`` (each
    module's parameters, then its persistent buffers, as vLLM's dummy loader visits them)."""
    return list(zip(*walk_lists(model, order)))


def walk_lists(model: torch.nn.Module, order: str) -> tuple[list[str], list[torch.Tensor]]:
    """:func:`walk` as two lists, the names and the tensors."""
    if order == "state_dict":
        found = model.state_dict()
        return list(found), list(found.values())
    shaped = walk_shape(model)
    if shaped is not None:
        return shape_names(shaped[0]), shaped[1]
    pairs = [
        (f"{prefix}.{local}" if prefix else local, t)
        for prefix, layer in model.named_modules()
        for local, t in {**layer._parameters, **layer._buffers}.items()
        if t is not None and local not in layer._non_persistent_buffers_set
    ]
    return [n for n, _ in pairs], [t for _, t in pairs]


_NAMED_MODULES = torch.nn.Module.named_modules
_OWN_ORDER: set[type] = set()  # module classes that keep Module's named_modules


def walk_shape(model: torch.nn.Module) -> tuple[list, list[torch.Tensor]] | None:
    """The ``"modules"`` walk (:func:`walk_shape_python`'s): its loop in C where the library
    has it (``fp8_dummy._C._walk_shape``, the same dictionaries read in the same order), the
    Python loop where it has not or leaves a module to it (a container that is not an exact
    dict)."""
    if _C_WALK is not None:
        shaped = _C_WALK(model, _OWN_ORDER, _NAMED_MODULES, "")
        if shaped is not False:
            return shaped
    return walk_shape_python(model)


_C_WALK = getattr(_C, "_walk_shape", None)


def walk_shape_python(model: torch.nn.Module) -> tuple[list, list[torch.Tensor]] | None:
    """The ``"modules"`` walk (``named_modules()``'s order: depth first, each module once) as
    its shape and its tensors, in plain loops over each module's own dictionaries (no
    generator per level). The shape: per module visited, its parent's place in the visit
    (an int, -1: the root), its key, then its tensors' keys (strings); the names are a
    function of it (:func:`shape_names`), and it is made of the dictionaries' own key
    objects: no string made per tensor (a kept plan compares shapes, not names). None where
    a module has a ``named_modules`` of its own (it decides) or lacks Module's dictionaries."""
    shape: list = []
    tensors: list[torch.Tensor] = []
    put, add, seen, stack = shape.append, tensors.append, set(), [(-1, "", model)]
    visit = 0
    while stack:
        parent, key, m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        kind = type(m)
        if kind not in _OWN_ORDER:
            if kind.named_modules is not _NAMED_MODULES:
                return None
            _OWN_ORDER.add(kind)
        d = m.__dict__
        try:
            params, buffers, children = d["_parameters"], d["_buffers"], d["_modules"]
        except KeyError:
            return None
        put(parent)
        put(key)
        if buffers:
            skip = d["_non_persistent_buffers_set"]
            for k, t in {**params, **buffers}.items():
                if t is not None and k not in skip:
                    put(k)
                    add(t)
        else:
            for k, t in params.items():
                if t is not None:
                    put(k)
                    add(t)
        if children:
            for k, child in reversed(children.items()):
                if child is not None:
                    stack.append((visit, k, child))
        visit += 1
    return shape, tensors


_MODULE = torch.nn.Module
_PLAIN_STATE: set[type] = set()  # module classes whose state_dict is Module's own
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_DEEPEST = 512  # module nesting; deeper (a cycle): state_dict() itself decides
_DISABLED = torch._C._disabled_torch_function_impl  # Parameter's __torch_function__


def state_dict_shape(model: torch.nn.Module) -> tuple[list, list[torch.Tensor]] | None:
    """``model.state_dict()``'s walk (a module reached twice, walked twice; its tensors under
    each name) as a :func:`walk_shape` shape and its tensors, without the dictionary, the
    metadata and a detached tensor per plain tensor: the parameters and buffers themselves,
    detached (as state_dict) where of another class, past its ``__torch_function__`` where
    that is Parameter's (disabled: torch's detach then gives a plain tensor either way). None
    where a module has hooks, its own state_dict, _save_to_state_dict or extra state, a
    buffer under a parameter's name (set in the dictionaries directly: state_dict() keeps one
    entry, in the parameter's place, with the buffer), or a tensor's class a
    ``__torch_function__`` of its own, or a child that a ``detach()`` replaced before the
    walk came to it (state_dict() decides). Its loop in C
    where the library has it (``fp8_dummy._C._state_dict_shape``: the same dictionaries read
    in the same order, the same questions asked of the same objects), the Python loop
    (:func:`state_dict_shape_python`) where it has not or leaves the model to it (a container
    that is not an exact dict, a dictionary that a ``detach()`` changed while it is read)."""
    if _C_STATE_WALK is not None:
        with torch._C.DisableTorchFunctionSubclass():
            shaped = _C_STATE_WALK(
                model, _PLAIN_STATE, _MODULE, _OWN_STATE, _PLAIN_TENSORS, _DISABLED, _DEEPEST
            )
        if shaped is not False:
            return shaped
    return state_dict_shape_python(model)


_C_STATE_WALK = getattr(_C, "_state_dict_shape", None)
_OWN_STATE = (_MODULE.state_dict, _MODULE._save_to_state_dict, _MODULE.get_extra_state)


def state_dict_shape_python(model: torch.nn.Module) -> tuple[list, list[torch.Tensor]] | None:
    """:func:`state_dict_shape`'s walk in plain loops over each module's own dictionaries."""
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return _state_dict_shape(model)
    except _OwnTorchFunction:
        return None


def _state_dict_shape(model: torch.nn.Module) -> tuple[list, list[torch.Tensor]] | None:
    shape: list = []
    tensors: list[torch.Tensor] = []
    put, add, stack, depths = shape.append, tensors.append, [(-1, "", model, None)], []
    plain = _PLAIN_TENSORS
    while stack:
        parent, key, m, held = stack.pop()
        # state_dict() reads a parent's children as it comes to each: one a detach() replaced
        # since it was pushed is not this walk's to read.
        if held is not None and held.get(key) is not m:
            return None
        kind = type(m)
        if kind not in _PLAIN_STATE:
            if (
                not isinstance(m, _MODULE)
                or kind.state_dict is not _MODULE.state_dict
                or (
                    kind._save_to_state_dict is not _MODULE._save_to_state_dict
                    or getattr(kind, "get_extra_state", None) is not _MODULE.get_extra_state
                )
            ):
                return None
            _PLAIN_STATE.add(kind)
        d = m.__dict__
        try:
            if d["_state_dict_pre_hooks"] or d["_state_dict_hooks"]:
                return None
            params, buffers, children = d["_parameters"], d["_buffers"], d["_modules"]
            skip = d["_non_persistent_buffers_set"]
        except KeyError:
            return None
        depth = depths[parent] + 1 if parent >= 0 else 0
        if depth > _DEEPEST:
            return None
        visit = len(depths)
        depths.append(depth)
        put(parent)
        put(key)
        for k, t in params.items():
            if t is not None:
                put(k)
                add(t if type(t) in plain else _detached(t))
        if buffers:
            for k, t in buffers.items():
                if t is not None and k not in skip:
                    if params.get(k) is not None:  # state_dict's one entry: the buffer
                        return None
                    put(k)
                    add(t if type(t) in plain else _detached(t))
        if children:
            for k, child in reversed(children.items()):
                if child is not None:
                    stack.append((visit, k, child, children))
    return shape, tensors


class _OwnTorchFunction(Exception):
    pass


def _detached(t: torch.Tensor) -> torch.Tensor:
    """``t.detach()`` as state_dict makes it, for a class whose ``__torch_function__`` is
    disabled (run where torch functions are: the same plain tensor)."""
    if type(t).__torch_function__ is not _DISABLED:
        raise _OwnTorchFunction
    return t.detach()


def shape_names(shape: list) -> list[str]:
    """The dotted names of a :func:`walk_shape` shape's tensors, in its order."""
    names: list[str] = []
    prefixes: list[str] = []
    dot, parent = "", None
    for item in shape:
        if parent is not None:  # the module's key after its parent's place
            above = prefixes[parent] if parent >= 0 else ""
            prefixes.append(f"{above}.{item}" if above else item)
            dot, parent = prefixes[-1] + "." if prefixes[-1] else "", None
        elif type(item) is int:
            parent = item
        else:
            names.append(dot + item)
    return names


def shape_locals(shape: list) -> list[str]:
    """The local names (each dotted name's last part) of a :func:`walk_shape` shape's tensors,
    in its order: no dotted name made."""
    out: list[str] = []
    put, key = out.append, False
    for item in shape:
        if key:  # a module's key, after its parent's place
            key = False
        elif type(item) is int:
            key = True
        else:
            put(item)
    return out


def shape_names_at(shape: list, wanted: list[int]) -> list[str]:
    """The dotted names of the tensors ``wanted`` (ascending places in the walk's order) of a
    :func:`walk_shape` shape, as :func:`shape_names` makes them: only theirs made."""
    modules: list[tuple[int, str]] = []  # (parent, key), in the order the walk visits them
    out: list[str] = []
    if not wanted:
        return out
    places = iter(wanted)
    want, count, parent = next(places), 0, None
    for item in shape:
        if parent is not None:
            modules.append((parent, item))
            parent = None
        elif type(item) is int:
            parent = item
        else:
            if count == want:
                keys, m = [], len(modules) - 1
                while m >= 0:
                    m, key = modules[m]
                    keys.append(key)
                prefix = ""
                for key in reversed(keys):
                    prefix = f"{prefix}.{key}" if prefix else key
                out.append(f"{prefix}.{item}" if prefix else item)
                want = next(places, -1)
                if want < 0:
                    break
            count += 1
    return out


def is_plain(t: torch.Tensor) -> bool:
    """A tensor or Parameter of torch's own class, strided (no subclass, no sparse layout)."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided


def refusal(check, *args) -> str | None:
    """The message of the RuntimeError ``check(*args)`` raises, else None."""
    try:
        check(*args)
    except RuntimeError as e:
        return str(e)
    return None


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
    if not independent or not is_plain(t):
        return None
    overlap = torch._debug_has_internal_overlap(t)
    stateless = torch.ops.fp8_dummy_internal.check_stateless_args
    if overlap == 1 or overlap == 2 and refusal(stateless, t, 0.0, 1.0, 0, None) is not None:
        return (
            f"several of its elements share one memory location (shape {tuple(t.shape)}, "
            f"strides {t.stride()}: an expanded or broadcast tensor, or an overlapping "
            "as_strided view), so it cannot hold independent values: give it storage of its "
            "own (.clone() or .contiguous()) before filling"
        )
    return None
