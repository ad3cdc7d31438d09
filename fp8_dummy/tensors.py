"""The tensor facts the realistic model (:mod:`fp8_dummy.realistic`) and the engines
(:mod:`fp8_dummy.engines`) share, so that neither imports the other's internals: which dtypes
are 1-byte floats, packed FP4 and E8M0 scales, which are written through a byte view; the walk
over a model's tensors in an engine's order; whether a tensor is a plain strided one, and why
an in-place write of it cannot work."""

from __future__ import annotations

import torch

__all__ = ["BYTE_VIEWED", "E8M0", "FLOAT8", "FP4", "PACKED_FP4", "is_plain", "unwritable"]
__all__ += ["refusal", "walk", "walk_lists"]

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
    try:
        found = _module_tensors(model)
    except KeyError:
        found = None
    if found is not None:
        return found
    pairs = [
        (f"{prefix}.{local}" if prefix else local, t)
        for prefix, layer in model.named_modules()
        for local, t in {**layer._parameters, **layer._buffers}.items()
        if t is not None and local not in layer._non_persistent_buffers_set
    ]
    return [n for n, _ in pairs], [t for _, t in pairs]


_NAMED_MODULES = torch.nn.Module.named_modules
_OWN_ORDER: set[type] = set()  # module classes that keep Module's named_modules


def _module_tensors(model: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]] | None:
    """The ``"modules"`` walk in ``named_modules()``'s order (depth first, each module once)
    without its generator per level, in plain loops over each module's own dictionaries (no
    comprehension's frame per module): half the walk's time on a model of thousands of small
    modules. None where a module has a ``named_modules`` of its own (it decides); KeyError
    where one lacks Module's dictionaries."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    name, add, seen, stack = names.append, tensors.append, set(), [("", model)]
    while stack:
        prefix, m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        kind = type(m)
        if kind not in _OWN_ORDER:
            if kind.named_modules is not _NAMED_MODULES:
                return None
            _OWN_ORDER.add(kind)
        d = m.__dict__  # KeyError below: no Module dictionaries (the caller walks its way)
        dot = prefix + "." if prefix else ""
        if d["_buffers"]:
            skip = d["_non_persistent_buffers_set"]
            for k, t in {**d["_parameters"], **d["_buffers"]}.items():
                if t is not None and k not in skip:
                    name(dot + k)
                    add(t)
        else:
            for k, t in d["_parameters"].items():
                if t is not None:
                    name(dot + k)
                    add(t)
        if d["_modules"]:
            for k, child in reversed(d["_modules"].items()):
                if child is not None:
                    stack.append((dot + k, child))
    return names, tensors


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
