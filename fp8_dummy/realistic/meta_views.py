"""The quick way to place a checkpoint conversion's results (:func:`meta_view_map`): the
conversion run on plain meta tensors, one storage per in-memory tensor, its views torch's own
(about a microsecond each, against the tens of microseconds of a stand-in's Python dispatch:
a conversion of a per-expert MoE takes tens of thousands of views). Each result is found as
a view of the one source whose storage it shares. A ``contiguous()`` is the tensor itself,
as it is for the stand-ins (:class:`.lazy_tensor.LazyTensor`: a copy keeps the block); any
other copy makes a new storage, which no source holds. Whatever this cannot place (a copy, a
value made, a result of another kind, an error) is None: the stand-ins then answer, with
their own errors, so that a result found here is the block they give."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..stateless import row_major_strides
from .lazy_tensor import Block

__all__ = ["CONTIGUOUS", "meta_view_map", "stand_ins", "storage_key"]

CONTIGUOUS = torch.Tensor.contiguous


class _Contiguous(TorchFunctionMode):
    """``contiguous()`` answered by the tensor itself (its block, in its own layout); every
    other call as torch runs it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is CONTIGUOUS and args and type(args[0]) is torch.Tensor:
            return args[0]
        return func(*args, **(kwargs or {}))


def storage_key(t: torch.Tensor) -> int:
    """The storage ``t`` is a view of (the stand-ins' owner map's key)."""
    return t.untyped_storage()._cdata


def stand_ins(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[int, str]]:
    """(name -> a meta tensor of the in-memory tensor's shape and dtype, made as a stand-in's
    proxy is: a strided view of its own storage of at least one element; that storage's
    :func:`storage_key` -> the name), so that a conversion's result is found a view of the
    one tensor whose storage it shares."""
    metas, owner = {}, {}
    for name, t in tensors.items():
        shape = tuple(t.shape)
        base = torch.empty(max(math.prod(shape), 1), dtype=t.dtype, device="meta")
        metas[name] = m = base.as_strided(shape, row_major_strides(shape), 0)
        owner[storage_key(m)] = name
    return metas, owner


def meta_view_map(
    convert: Callable[[dict[str, torch.Tensor]], Mapping[str, Any]],
    tensors: Mapping[str, torch.Tensor],
) -> dict[str, Block] | None:
    """``convert`` (in-memory name -> tensor) -> (checkpoint name -> tensor) run on meta
    tensors: each checkpoint tensor's :class:`Block` of an in-memory tensor, or None where a
    result is not a view of exactly one of them (or the conversion raised)."""
    metas, owner = stand_ins(tensors)
    try:
        with torch.no_grad(), _Contiguous():
            out = convert(metas)
    except Exception:  # noqa: BLE001 (the stand-ins run it again and answer, errors included)
        return None
    blocks = {}
    for name, t in out.items():
        t = t[0] if isinstance(t, list) and t else t
        if type(t) is not torch.Tensor or not t.is_meta:
            return None
        source = owner.get(storage_key(t))
        if source is None:
            return None
        shape = tuple(tensors[source].shape)
        blocks[name] = Block(source, shape, tuple(t.shape), t.storage_offset(), t.stride())
    return blocks
