"""Checkpoint tensors a conversion makes by moving in-memory elements without computing any
(:func:`gathered_blocks`): a reshape no strided view holds (transformers' ``PermuteForRope``
on Step-3.7's vision q/k rows: each head's rows (2, half) read as (half, 2)), a concatenation
of several in-memory tensors (its reverse of ``Chunk``: the vision tower's fused
``attn.in_proj_weight`` made of ``q_proj``, ``k_proj`` and ``v_proj``), or both.

Such a tensor is no strided view of one in-memory tensor, but it is made of parts that are:
a reshape of a strided view ``source.as_strided(vs, st, off).reshape(...)`` lies, in the
checkpoint tensor's row-major order, at the strided block of shape ``vs`` with row-major
strides; a concatenation puts each piece at a narrow of it. So each part is a
:class:`.interleaved.Part` (an in-memory view holding a strided block of the checkpoint
tensor), the tensor an :class:`.interleaved.InterleavedBlock`, which the in-memory fill
writes part by part (:func:`.inplace.fill_model`) from the checkpoint tensor's own elements:
the export, an engine's load of it (keyed by checkpoint names alone) and the in-memory fill
hold the same bytes.

How the parts are found, exactly: the conversion runs once on meta tensors under a tape that
records each operation; a result that is no view of one source is replayed, its sources
replaced by integer tensors of element ids (source number, row-major index), through the
recorded operations, each of which must be one that only moves elements (:data:`MOVES`: a
reshape, a transpose, a concatenation, a split, ...), given no dtype and no tensor but the
one moved: anything that computes (arithmetic, a dtype change, a value made from nothing), a
``view(dtype)`` (it reinterprets bytes) or an index by a tensor's values is refused by name,
as is any error of the replay. The ids the result holds say where each of its elements
comes from; they are factored into strided parts (the rows split by source where a
concatenation put them, each dimension split into factors until every factor is a constant
step in memory), and the parts are checked to give back every id of the result, each
in-memory element used once, or the tensor is refused (NotAffineError)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from ..stateless import row_major_strides
from .interleaved import InterleavedBlock, Part, mutates, parts_of
from .lazy_tensor import Block, NotAffineError
from .meta_views import CONTIGUOUS, stand_ins, storage_key

__all__ = ["MAX_PARTS", "MOVES", "gathered_blocks", "parts_from_ids"]

# A checkpoint tensor of more parts than this is refused: each part is a write of its own in
# the in-memory fill (a fused qkv of RoPE-permuted q/k is 3 parts; a row-by-row gather would
# be thousands, no layout a conversion means)
MAX_PARTS = 1024

# The operations that only move elements (by the name torch's function has at the Python
# level: method, function or property): replayed on ids, their result says where each
# element came from.
MOVES = frozenset({
    "view", "reshape", "view_as", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "transpose", "swapaxes", "swapdims", "t", "permute", "movedim", "moveaxis",
    "cat", "concat", "concatenate", "stack", "chunk", "split", "tensor_split", "unbind",
    "narrow", "select", "__getitem__", "contiguous", "clone", "detach", "T", "mT",
})  # fmt: skip

# Properties that only move elements, as the tape sees them (their getters, each named
# ``__get__``): by the property's name.
_PROPERTIES = {torch.Tensor.T.__get__: "T", torch.Tensor.mT.__get__: "mT"}


def _name(func: Any) -> str:
    try:
        found = _PROPERTIES.get(func)
    except TypeError:  # unhashable: no property's getter
        found = None
    return found or getattr(func, "__name__", repr(func))


class _Tape(TorchFunctionMode):
    """Records each operation a conversion runs (its result's id -> the call), so that a
    result can be replayed on ids; ``contiguous()`` answered by the tensor itself, as
    :mod:`.meta_views` answers it (the same elements, the same order)."""

    def __init__(self, sources: set[int]):
        super().__init__()
        self.sources = sources
        self.made: dict[int, tuple] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is CONTIGUOUS and args and type(args[0]) is torch.Tensor:
            return args[0]
        if mutates(func, kwargs):  # a replay would not see the values written
            raise NotAffineError(f"the conversion writes into a tensor ({_name(func)})")
        out = func(*args, **kwargs)
        for i, o in enumerate(tree_flatten(out)[0]):
            if isinstance(o, torch.Tensor) and id(o) not in self.sources and id(o) not in self.made:
                self.made[id(o)] = (o, func, args, kwargs, i)  # o kept: its id stays its own
        return out


def gathered_blocks(
    convert: Callable[[dict[str, torch.Tensor]], Mapping[str, Any]],
    tensors: Mapping[str, torch.Tensor],
) -> dict[str, Block]:
    """``convert`` (in-memory name -> tensor) -> (checkpoint name -> tensor) run on meta
    tensors: each checkpoint tensor a :class:`Block` where it is a strided view of one
    in-memory tensor, else an :class:`.interleaved.InterleavedBlock` of the parts its
    elements come from; NotAffineError (naming the tensor and why) where a result is made by
    anything but moving elements, or its elements are no few strided parts. Every result's
    operations are checked before any is replayed; results made alike (a model's layers)
    are replayed once (:func:`_structure`)."""
    metas, owner = stand_ins(tensors)
    names = {id(m): name for name, m in metas.items()}
    tape = _Tape(set(names))
    try:
        with torch.no_grad(), tape:
            out = convert(metas)
    except NotAffineError:
        raise
    except Exception as e:  # noqa: BLE001 (said as the reason nothing is placed)
        raise NotAffineError(f"the conversion raised {type(e).__name__}: {e}") from None
    blocks: dict[str, Block] = {}
    todo = []
    for name, t in out.items():
        t = t[0] if isinstance(t, list) and t else t
        if type(t) is not torch.Tensor or not t.is_meta:
            raise NotAffineError(f"{name}: the conversion made no tensor of the model's")
        found = owner.get(storage_key(t))
        if found is not None:  # a view of one in-memory tensor: a plain block
            shape = tuple(tensors[found].shape)
            blocks[name] = Block(found, shape, tuple(t.shape), t.storage_offset(), t.stride())
            _same_dtype(name, blocks[name], t.dtype, tensors)
            continue
        slots: dict[str, int] = {}
        try:
            structure = _structure(t, tape.made, names, tensors, slots, {})
        except NotAffineError as e:
            raise NotAffineError(f"{name}: {e}") from None
        todo.append((name, t, structure, list(slots)))
    shapes = {n: tuple(t.shape) for n, t in tensors.items()}
    placed: dict[Any, tuple[Block, list[str]]] = {}  # structure -> (its block, its sources)
    for name, t, structure, sources in todo:
        if structure not in placed:
            placed[structure] = (_placed(name, t, tape.made, sources, metas, shapes), sources)
        block, first = placed[structure]
        if first is not sources:
            block = _renamed(block, name, dict(zip(first, sources)))
        _same_dtype(name, block, t.dtype, tensors)
        blocks[name] = block
    return blocks


def _structure(
    t: torch.Tensor, made: dict, names: dict, tensors: Mapping, slots: dict, memo: dict
) -> Any:
    """How ``t`` is made, from the tape, each operation checked to only move elements
    (:func:`_moves`): its in-memory sources as slots (``slots``: name -> number, in the order
    first met) with their shapes and dtypes, each operation as its function, its arguments
    but tensors, the structures of those, and which of its results ``t`` is. Two results of
    one structure are the same moving of elements of their own sources: the same parts,
    slot for slot."""
    key = id(t)
    if key in memo:
        return memo[key]
    if key in names:
        name = names[key]
        slot = slots.setdefault(name, len(slots))
        found: Any = ("in", slot, tuple(tensors[name].shape), tensors[name].dtype)
    else:
        record = made.get(key)
        if record is None:
            raise NotAffineError("made from no in-memory tensor")
        _, func, args, kwargs, i = record
        _moves(func, args, kwargs)
        leaves, spec = tree_flatten((args, kwargs))
        said = tuple(
            _structure(a, made, names, tensors, slots, memo)
            if isinstance(a, torch.Tensor)
            else (type(a).__name__, repr(a))
            for a in leaves
        )
        found = (func, str(spec), said, i)
    memo[key] = found
    return found


def _placed(
    name: str, t: torch.Tensor, made: dict, sources: list[str], metas: Mapping, shapes: Mapping
) -> Block:
    """The block of the result ``t`` (checkpoint name ``name``) made of the in-memory
    ``sources`` (its slots, in order): replayed on their ids, the ids read as parts."""
    numbers = {id(metas[n]): (k, shapes[n]) for k, n in enumerate(sources)}
    bits, dtype = _id_layout(sources, shapes)
    try:
        ids = _replay(t, made, numbers, {}, bits, dtype)
    except NotAffineError as e:
        raise NotAffineError(f"{name}: {e}") from None
    except Exception as e:  # noqa: BLE001 (said as the reason nothing is placed)
        raise NotAffineError(f"{name}: its replay on element ids raised {_said(e)}") from None
    try:
        return parts_from_ids(name, ids, sources, shapes)
    except NotAffineError:
        raise
    except Exception as e:  # noqa: BLE001 (said as the reason nothing is placed)
        raise NotAffineError(f"{name}: finding its parts raised {_said(e)}") from None


def _renamed(block: Block, name: str, to: Mapping[str, str]) -> Block:
    """``block`` of another result of the same structure, as the checkpoint tensor ``name``
    made of the in-memory tensors ``to`` names for its sources, slot for slot."""
    if not isinstance(block, InterleavedBlock):
        return replace(block, source=to[block.source])
    parts = tuple(
        replace(p, source=to[p.source], block=replace(p.block, source=name)) for p in block.parts
    )
    return replace(block, source=to[block.source], parts=parts)


def _same_dtype(name: str, block: Block, dtype: torch.dtype, tensors: Mapping) -> None:
    """NotAffineError unless every in-memory tensor ``block`` reads is of the checkpoint
    tensor's ``dtype``: the checkpoint's is its source's (a ``cat`` of bf16 and fp32 promotes
    one of them: computed, not moved)."""
    for p in parts_of(name, block) or (Part(block.source, 0, (), block),):
        if tensors[p.source].dtype != dtype:
            have = tensors[p.source].dtype
            raise NotAffineError(f"{name}: changes the dtype ({p.source}: {have}, it: {dtype})")


def _said(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


def _id_layout(sources: list[str], shapes: Mapping) -> tuple[int, torch.dtype]:
    """(b, dtype) of the ids of elements of ``sources``: an element's id is its source's
    number << b | its row-major index, b the bits of the largest index; int32 where every
    id fits (half the memory and time of int64 on a fused qkv's millions), else int64."""
    bits = max(max(math.prod(shapes[s]) - 1, 1).bit_length() for s in sources)
    top = (len(sources) << bits) - 1
    if top >= 1 << 63:
        raise NotAffineError("its sources have too many elements to number")
    return bits, torch.int32 if top < 1 << 31 else torch.int64


def _replay(
    t: torch.Tensor, made: dict, numbers: dict, memo: dict, bits: int, dtype: torch.dtype
) -> torch.Tensor:
    """The ids of ``t``'s elements: the recorded operations that made it (checked by
    :func:`_structure`), run on the ids of its sources (each a source's own ``arange``, its
    number in the bits above ``bits``)."""
    key = id(t)
    if key in memo:
        return memo[key]
    if key in numbers:
        k, shape = numbers[key]
        value = (torch.arange(math.prod(shape), dtype=dtype) | (k << bits)).view(shape)
    else:
        result, func, args, kwargs, i = made[key]

        def real(a: Any) -> Any:
            return (
                _replay(a, made, numbers, memo, bits, dtype) if isinstance(a, torch.Tensor) else a
            )

        with torch.no_grad():
            value = tree_flatten(func(*tree_map(real, args), **tree_map(real, kwargs)))[0][i]
        if type(value) is not torch.Tensor or value.dtype != dtype or value.shape != result.shape:
            raise NotAffineError(f"made by {_name(func)}, whose replay gives no element ids")
    memo[key] = value
    return value


# Arguments that say where the elements go (tensors of them: the data moved; a view_as's or
# reshape_as's other: a shape); a tensor anywhere else (an index) is read for its values.
_DATA = frozenset({"input", "tensors", "self"})
_SHAPE_OF = frozenset({"view_as", "reshape_as"})


def _moves(func: Any, args: tuple, kwargs: Mapping[str, Any]) -> None:
    """NotAffineError unless the call only moves its tensor's elements: one of :data:`MOVES`,
    given no dtype (a ``view(dtype)`` reinterprets the bytes: on element ids it would read
    the ids' own) and no tensor but the one moved (an index's values are data a replay on
    element ids would not hold)."""
    name = _name(func)
    if name not in MOVES:
        raise NotAffineError(f"made by {name}, which computes, not only moves, elements")
    rest = [args[1:] if name not in _SHAPE_OF else args[2:]]
    rest += [v for k, v in kwargs.items() if k not in _DATA]
    for a in tree_flatten(rest)[0]:
        if isinstance(a, torch.dtype):
            raise NotAffineError(f"made by {name}({a}), which reinterprets its bytes")
        if isinstance(a, torch.Tensor):
            raise NotAffineError(f"made by {name} given a tensor, whose values it reads")


def parts_from_ids(
    name: str, ids: torch.Tensor, sources: list[str], shapes: Mapping[str, tuple[int, ...]]
) -> Block:
    """The checkpoint tensor ``name`` whose element at each index is the in-memory element
    ``ids`` names there (``sources[id >> b]``'s row-major element ``id & (2^b - 1)``, b the
    bits of the largest source's largest index: :func:`_id_layout`) as strided parts,
    checked to give back every id, each in-memory element once: an
    :class:`.interleaved.InterleavedBlock` (headed by ``sources[0]`` where it has no parts),
    or a plain :class:`Block` where one part holds it all as a view (:func:`_plain`)."""
    bits, _ = _id_layout(sources, shapes)
    shape = tuple(ids.shape)
    ids = ids.contiguous()
    flat = ids.view(-1)
    parts = []
    for lay in _one_source_regions(name, flat, shape, bits):
        x = flat.as_strided(*lay)
        first = int(x.reshape(-1)[0])
        mask = (1 << bits) - 1
        dims = (
            _dims(x, lay, mask) if not _in_order(lay) else _dims(x.reshape(1, -1), _flat(lay), mask)
        )
        if dims is None:
            if _twice(ids, bits):  # the likelier reason, said as such (a source concatenated twice)
                raise NotAffineError(f"{name}: holds an in-memory element twice")
            raise NotAffineError(f"{name}: its elements are no strided block of their source")
        view, ck, mem = _coalesced(dims)
        source = sources[first >> bits]
        block = Block(name, shape, view, lay[2], ck)
        parts.append(Part(source, first & mask, mem, block))
    _check(name, ids, parts, sources, bits)
    if not _distinct(parts) and _twice(ids, bits):
        raise NotAffineError(f"{name}: holds an in-memory element twice")
    plain = _plain(parts, shape, shapes)
    if plain is not None:
        return plain
    head = parts[0].source if parts else sources[0]
    return InterleavedBlock(
        head, tuple(shapes[head]), shape, 0, tuple(row_major_strides(shape)), tuple(parts)
    )


def _plain(parts: list[Part], shape: tuple[int, ...], shapes: Mapping) -> Block | None:
    """The one part that holds all of the tensor in its row-major order, as a plain block
    where the tensor's ``shape`` is a view of it (a copy of one strided view: ``clone``), or
    None (a reshape no view holds: one tensor's RoPE permutation)."""
    if len(parts) != 1:
        return None
    (p,) = parts
    b = p.block
    rows = tuple(row_major_strides(b.shape))
    if b.offset or tuple(b.strides) != rows or math.prod(b.shape) != math.prod(shape):
        return None
    source_shape = tuple(shapes[p.source])
    base = torch.empty(max(math.prod(source_shape), 1), device="meta")
    try:
        view = base.as_strided(b.shape, p.strides, p.offset).view(shape)
    except RuntimeError:  # no view of that shape
        return None
    return Block(p.source, source_shape, shape, p.offset, tuple(view.stride()))


def _distinct(parts: list[Part]) -> bool:
    """Whether the parts' in-memory views are seen to hold distinct elements from their
    layouts alone: each from a source no other part reads, with each stride (ascending)
    past the reach of the smaller ones. Where not seen so, the ids are counted
    (:func:`_twice`)."""
    if len({p.source for p in parts}) != len(parts):
        return False
    for p in parts:
        reach = 0
        for step, size in sorted(zip(p.strides, p.block.shape)):
            if size > 1 and step <= reach:
                return False
            reach += (size - 1) * step
    return True


def _twice(ids: torch.Tensor, bits: int) -> bool:
    """Whether an id occurs twice in ``ids``: counted per source, in linear passes (a sort of
    a fused qkv's millions of ids costs many times their count)."""
    flat = ids.view(-1)
    src = flat >> bits
    present = torch.bincount(src).nonzero().view(-1).tolist()  # source numbers: small
    for k in present:
        mine = (flat if len(present) == 1 else flat[src == k]) & ((1 << bits) - 1)
        if int(torch.bincount(mine).max()) > 1:
            return True
    return False


def _one_source_regions(name: str, flat: torch.Tensor, shape: tuple[int, ...], bits: int) -> list:
    """Layouts (shape, strides, offset) on the checkpoint tensor's row-major ``flat`` ids that
    hold elements of one source each: a region that mixes sources is cut, along its first
    dimension whose index alone says the source (a concatenation's), into runs of one."""
    out: list = []
    todo = [(shape, tuple(row_major_strides(shape)), 0)]
    while todo:
        lay = todo.pop()
        if math.prod(lay[0]) == 0:
            continue
        src = flat.as_strided(*lay) >> bits
        if bool((src == src.reshape(-1)[0]).all()):
            out.append(lay)
            continue
        for d, n in enumerate(lay[0]):
            rows = src.movedim(d, 0).reshape(n, -1)
            if bool((rows == rows[:, :1]).all()):
                break
        else:
            raise NotAffineError(f"{name}: its rows mix elements of several in-memory tensors")
        col = rows[:, 0]
        cuts = [0, *(torch.nonzero(col[1:] != col[:-1]).view(-1) + 1).tolist(), n]
        if len(out) + len(todo) + len(cuts) - 1 > MAX_PARTS:
            raise NotAffineError(f"{name}: made of more than {MAX_PARTS} parts")
        shape_, strides, offset = lay
        for a, b in zip(cuts, cuts[1:]):
            todo.append((shape_[:d] + (b - a,) + shape_[d + 1 :], strides, offset + a * strides[d]))
    return sorted(out, key=lambda lay: lay[2])


def _in_order(lay) -> bool:
    """Whether the layout is a run of the checkpoint tensor's row-major elements (the whole
    tensor, or a concatenation's rows): then any shape of its elements is a block of it."""
    shape, strides, _ = lay
    return all(s == r for n, s, r in zip(shape, strides, row_major_strides(shape)) if n != 1)


def _flat(lay):
    """A run of row-major elements (:func:`_in_order`) as one dimension, behind a size-1 one."""
    n = math.prod(lay[0])
    return (1, n), (n, 1), lay[2]


def _dims(x: torch.Tensor, lay, mask: int) -> list[tuple[int, int, int]] | None:
    """(size, checkpoint stride, in-memory stride) of each factor, outer to inner, that ``x``
    (ids at the checkpoint layout ``lay``; ``mask``: the bits of their in-memory index) is
    strided over: each dimension split into factors (:func:`_factors`), or None. Applied to
    a run of row-major elements as one dimension, it reads any reshape of a strided view,
    wherever the reshape's dimensions fall; applied to the region's own dimensions, a
    factor cannot straddle two."""
    dims: list[tuple[int, int, int]] = []
    for d in range(x.dim()):
        factors = _factors(x.movedim(d, -1).reshape(-1, x.shape[d]) & mask)
        if factors is None:
            return None
        step, inner = lay[1][d], []
        for size, mem in reversed(factors):  # the innermost factor steps as the dimension
            inner.append((size, step, mem))
            step *= size
        dims += reversed(inner)
    return dims


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` strictly between 1 and ``n``, ascending."""
    low = [d for d in range(2, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def _factors(m: torch.Tensor, failed: set[int] | None = None) -> list[tuple[int, int]] | None:
    """One dimension of ids (``m``: [the other dimensions' elements, n], in-memory indices) as
    factors n = f_1 ... f_k (outer to inner), each a constant positive step in memory
    wherever the others are: [(f_i, step_i)], or None. A dimension that is no constant step
    (a RoPE permutation's rows) is split where its first constant run ends, else at each
    divisor in turn whose inner factor is one, and its outer factor split likewise. The
    outer factor of n / b elements is every b-th element whatever split led there, so an
    outer length that failed once (``failed``) is not searched again: at most one search per
    divisor of the dimension, never one per chain of divisors."""
    failed = set() if failed is None else failed
    rows, n = m.shape
    if n <= 1:
        return [(n, 1)]
    step = m[:, 1:] - m[:, :-1]
    s = int(step[0, 0])
    same = step == s
    if bool(same.all()):
        return [(n, s)] if s > 0 else None
    run = int(same[0].long().cumprod(0).sum()) + 1  # the first row's first constant run
    for b in ([run] if n % run == 0 and 1 < run < n else []) + _divisors(n):
        if n // b in failed:
            continue
        inner = m.reshape(rows, n // b, b)
        step = inner[..., 1:] - inner[..., :-1]
        s = int(step.reshape(-1)[0])
        if s <= 0 or not bool((step == s).all()):
            continue
        outer = _factors(inner[..., 0].reshape(rows, n // b), failed)
        if outer is not None:
            return [*outer, (b, s)]
        failed.add(n // b)
    return None


def _coalesced(dims: list[tuple[int, int, int]]) -> tuple[tuple[int, ...], ...]:
    """(shape, checkpoint strides, in-memory strides) of ``dims`` (size, checkpoint stride,
    in-memory stride; outer to inner) without its size-1 dimensions, and each pair that
    steps as one dimension in both (a factor split no further than it needed) merged."""
    kept: list[tuple[int, int, int]] = []
    for size, ck, mem in dims:
        if size == 1:
            continue
        if kept and kept[-1][1] == ck * size and kept[-1][2] == mem * size:
            kept[-1] = (kept[-1][0] * size, ck, mem)
            continue
        kept.append((size, ck, mem))
    return tuple(d[0] for d in kept), tuple(d[1] for d in kept), tuple(d[2] for d in kept)


def _check(name: str, ids: torch.Tensor, parts: list[Part], sources: list[str], bits: int) -> None:
    """The ids ``parts`` place, each written where its block lies: every element of ``ids``,
    none left and none written twice, or NotAffineError."""
    number = {s: k for k, s in enumerate(sources)}
    made = torch.full((ids.numel(),), -1, dtype=ids.dtype)
    for p in parts:
        b = p.block
        value = torch.full(b.shape, p.offset | (number[p.source] << bits), dtype=ids.dtype)
        for d, (n, step) in enumerate(zip(b.shape, p.strides)):
            along = [-1 if e == d else 1 for e in range(len(b.shape))]
            value += (torch.arange(n, dtype=ids.dtype) * step).view(along)
        into = made.as_strided(b.shape, b.strides, b.offset)
        if bool((into != -1).any()):
            raise NotAffineError(f"{name}: two of its parts overlap")
        into.copy_(value)
    if not torch.equal(made.view(ids.shape), ids):
        raise NotAffineError(f"{name}: its parts do not give back its elements")
