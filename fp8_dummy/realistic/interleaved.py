"""Checkpoint tensors whose rows interleave in-memory ones (:func:`interleaved_blocks`):
transformers' ``Interleave`` conversion, alone or followed by a ``Chunk`` along the same
dimension (Inkling's multimodal checkpoint: a dense MLP's ``mlp.w13_dn`` holds the rows of its
``gate_proj`` and ``up_proj`` in turn, the shared experts' ``shared_w13_weight`` likewise, the
routed experts' ``experts.w13_weight`` those of the two halves of ``gate_up_proj``). Such a
tensor is no strided view of an in-memory one, but each in-memory part (a whole ``gate_proj``,
a half of ``gate_up_proj``) is a strided block of it: its even or its odd rows. The in-memory
fill writes each part from those elements of the checkpoint tensor
(:meth:`.logical.LogicalModel.write`), so both hold the same bytes."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..stateless import row_major_strides
from .lazy_tensor import Block
from .meta_views import CONTIGUOUS, stand_ins, storage_key

__all__ = ["InterleavedBlock", "Part", "interleaved_blocks", "mutates", "parts_of"]


@dataclass(frozen=True)
class Part:
    """An in-memory view (elements ``offset + Σ i_d · strides_d`` of the tensor ``source``, of
    ``block.shape``) that holds the elements ``block`` names of a checkpoint tensor."""

    source: str
    offset: int
    strides: tuple[int, ...]
    block: Block


@dataclass(frozen=True)
class InterleavedBlock(Block):
    """A checkpoint tensor of ``shape`` no strided view of an in-memory tensor holds; its
    ``parts`` do, together all of it. ``source`` is its first part's (its dtype, its owner's
    role); ``offset`` and ``strides`` place nothing."""

    parts: tuple[Part, ...] = ()


def parts_of(name: str, block: Block) -> tuple[Part, ...]:
    """The in-memory parts of the checkpoint tensor ``name``: one, the whole, for a plain block."""
    if isinstance(block, InterleavedBlock):
        return block.parts
    whole = Block.whole(name, block.shape)
    return (Part(block.source, block.offset, tuple(block.strides), whole),)


class _Sources(TorchFunctionMode):
    """Which in-memory tensors each result of a conversion is made of (the union of its
    arguments'); ``contiguous()`` answered by the tensor itself, as :mod:`.meta_views` does."""

    def __init__(self, sources: dict[int, tuple[torch.Tensor, frozenset]]):
        super().__init__()
        self.sources = sources

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is CONTIGUOUS and args and type(args[0]) is torch.Tensor:
            return args[0]
        if mutates(func, kwargs):  # a result that shares memory would not hold its values
            raise _Mutated(getattr(func, "__name__", repr(func)))
        out = func(*args, **kwargs)
        found: frozenset = frozenset()
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, torch.Tensor) and id(a) in self.sources:
                found |= self.sources[id(a)][1]
        if found:
            for o in tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor) and id(o) not in self.sources:
                    self.sources[id(o)] = (o, found)  # the tensor kept: its id stays its own
        return out


class _Mutated(Exception):
    """A conversion wrote into a tensor: its results are placed by nobody here."""


def mutates(func: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``func`` writes into a tensor it is given: an in-place method (``mul_``,
    ``copy_``, ``__setitem__``, ``__imul__``) or an ``out=``."""
    name = getattr(func, "__name__", "")
    if "out" in kwargs:
        return True
    if name.startswith("__") and name.endswith("__"):
        return (
            name == "__setitem__"
            or name.startswith("__i")
            and name not in ("__index__", "__init__", "__int__", "__invert__", "__iter__")
        )
    return name.endswith("_")


def interleaved_blocks(
    convert: Callable[[dict[str, torch.Tensor]], Mapping[str, Any]],
    tensors: Mapping[str, torch.Tensor],
    conversions: list,
) -> dict[str, Block] | None:
    """``convert`` (in-memory name -> tensor) -> (checkpoint name -> tensor) run on meta
    tensors, each result placed: a strided view of one in-memory tensor as its :class:`Block`,
    one made by an interleaving converter of ``conversions`` (the model's: transformers'
    ``WeightConverter``, its load ``Interleave(d)`` then maybe ``Chunk(d)``) as an
    :class:`InterleavedBlock`; None where any result is neither, where the conversion writes
    into a tensor, or where no result is interleaved (the caller's refusal stands)."""
    metas, owner = stand_ins(tensors)
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    sources = {id(m): (m, frozenset((name,))) for name, m in metas.items()}
    try:
        with torch.no_grad(), _Sources(sources):
            out = convert(metas)
    except Exception:  # noqa: BLE001 (the caller's own placement answers, errors included)
        return None
    blocks: dict[str, Block] = {}
    for name, t in out.items():
        t = t[0] if isinstance(t, list) and t else t
        if type(t) is not torch.Tensor or not t.is_meta:
            return None
        found = owner.get(storage_key(t))
        if found is not None:
            blocks[name] = Block(
                found, shapes[found], tuple(t.shape), t.storage_offset(), t.stride()
            )
            continue
        made = sources.get(id(t), (None, frozenset()))[1]
        block = _interleaved(name, tuple(t.shape), sorted(made), shapes, conversions)
        if block is None:
            return None
        blocks[name] = block
    if not any(isinstance(b, InterleavedBlock) for b in blocks.values()):
        return None
    return blocks


def _interleaved(
    name: str, shape: tuple[int, ...], made: list[str], shapes: Mapping[str, tuple],
    conversions: list,
) -> InterleavedBlock | None:  # fmt: skip
    """The checkpoint tensor ``name`` of ``shape`` made of the in-memory tensors ``made`` by
    the one interleaving converter that names them all, or None. On load, ``Interleave(d)``
    takes the checkpoint's rows (along d) 2r + j to row j·R + r (R: half of them), then
    ``Chunk(d)`` splits those into its targets: with two, target j holds the rows j::2, with
    one, its half j does."""
    from transformers.core_model_loading import Chunk, Interleave, WeightConverter

    found = []
    for c in conversions:
        if not isinstance(c, WeightConverter):
            continue
        ops = list(c.operations)
        if not ops or type(ops[0]) is not Interleave or ops[0].inverse:
            continue
        dim = ops[0].dim
        if ops[1:] and (len(ops) > 2 or type(ops[1]) is not Chunk or ops[1].dim != dim):
            continue
        if getattr(ops[-1], "num_shards_attribute", None) is not None:
            continue
        if not any(re.search(p, name) for p in c.source_patterns):
            continue
        targets = list(c.target_patterns)
        if len(targets) != (2 if ops[1:] else 1) or len(made) != len(targets):
            continue
        order = []
        for source in made:
            hits = [j for j, p in enumerate(targets) if re.search(p, source)]
            if len(hits) != 1:
                break
            order.append((hits[0], source))
        if len(order) == len(made) and sorted(j for j, _ in order) == list(range(len(targets))):
            found.append((dim, [s for _, s in sorted(order)]))
    if len(found) != 1:
        return None
    dim, targets = found[0]
    dim = dim % len(shape) if shape else 0
    if not shape or shape[dim] % 2:
        return None
    half = list(shape)
    half[dim] //= 2
    strides = list(row_major_strides(shape))
    rows = list(strides)
    rows[dim] *= 2  # every other row
    parts = []
    for j in range(2):
        block = Block(name, shape, tuple(half), j * strides[dim], tuple(rows))
        source = targets[j] if len(targets) == 2 else targets[0]
        mine = shapes[source]
        own = row_major_strides(mine)
        if len(targets) == 2:  # the whole target
            if tuple(mine) != tuple(half):
                return None
            parts.append(Part(source, 0, tuple(own), block))
        else:  # its half j
            if tuple(mine) != tuple(shape):
                return None
            parts.append(Part(source, j * half[dim] * own[dim], tuple(own), block))
    first = parts[0].source
    return InterleavedBlock(
        first, tuple(shapes[first]), tuple(shape), 0, tuple(strides), tuple(parts)
    )
