"""The one place the realistic model's values become bytes: a tensor's :class:`~.rules.Spec`
and its stateless key written into a tensor, or into a block of it (``init_stateless_`` with
the block's element offset and strides), then the routing's overrides of the logical tensor
where the block holds them. The in-place fill, the logical model's stand-ins in the engines'
loaders and the export's buffers all write through :func:`fill_`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..stateless import init_stateless_
from ..tensors import BYTE_VIEWED
from .routing import apply_overrides
from .rules import Spec

__all__ = ["fill_"]


@torch.no_grad()
def fill_(
    t: torch.Tensor, spec: Spec, key: int, *, element_offset: int = 0,
    element_strides: Sequence[int] | None = None, overrides: Sequence | None = None,
    logical_shape: Sequence[int] | None = None,
) -> torch.Tensor:  # fmt: skip
    """``spec`` written into ``t`` with the stateless key ``key``: the logical tensor, or its
    block at ``element_offset``/``element_strides`` (as :func:`init_stateless_` takes them);
    then the routing's ``overrides`` of the logical tensor (of ``logical_shape``, default
    ``t``'s) where the block holds them (:mod:`.routing`)."""
    raw = t.data.view(torch.uint8) if t.dtype in BYTE_VIEWED else t.data
    if spec.kind == "const":
        raw.fill_(spec.low)
    elif spec.kind != "skip":
        low, high = (0, 256) if spec.kind == "e8m0" else (spec.low, spec.high)
        if spec.kind != "uniform":
            low, high = int(low), int(high)
        where = dict(element_offset=element_offset, element_strides=element_strides)
        init_stateless_(raw, low, high, key, **where)
        if spec.kind == "e8m0":
            raw.copy_(raw >= int(spec.high)).add_(int(spec.low))
    if overrides:
        shape = t.shape if logical_shape is None else logical_shape
        apply_overrides(t.data, shape, overrides, element_offset, element_strides)
    return t
