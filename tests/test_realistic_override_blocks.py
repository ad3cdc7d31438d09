"""A logical tensor's overrides (fp8_dummy/realistic/routing/offsets.py's ``apply_overrides``:
rows or columns zeroed, set to a value, to a vector) written into a block of it: any view a
weight loader takes (one expert of a fused [E, H, I] tensor, as vLLM's MoE loaders select it; a
chunk of it, a transpose, a strided narrow) holds the elements the whole tensor's overrides put
there, byte for byte (the oracle: the whole tensor written by numpy indexing, each override in
turn, then viewed by torch; the whole tensor's own ``apply_overrides`` agrees with it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fp8_dummy.realistic.routing.offsets import apply_overrides

SHAPE = (4, 6, 10)  # experts, rows, columns
OVERRIDES = [(1, range(2, 4), 0.0), (1, 5, 2.5), (2, 7, -1.0), (0, 3, 0.25)]
FLAT = (12, 10)  # a 2-D tensor: rows and columns, with vector overrides along the other one
FLAT_OVERRIDES = [(0, 4, np.arange(10) + 0.5), (1, 3, -np.arange(12) - 0.5), (1, range(8, 9), 7.0)]


def _whole(shape, overrides) -> torch.Tensor:
    """The whole tensor with ``overrides`` written by numpy indexing: (dim, index, value), the
    index an int or a range, the value a float or (2-D) a vector along the other dimension."""
    a = np.full(shape, 9.0, dtype=np.float32)
    for dim, index, value in overrides:
        where = [slice(None)] * len(shape)
        where[dim] = slice(index.start, index.stop) if isinstance(index, range) else index
        a[tuple(where)] = np.asarray(value, dtype=np.float32)
    return torch.from_numpy(a)


@pytest.mark.parametrize("shape,overrides", [(SHAPE, OVERRIDES), (FLAT, FLAT_OVERRIDES)])
def test_the_whole_tensors_overrides_are_numpys(shape, overrides):
    t = torch.full(shape, 9.0)
    apply_overrides(t, shape, overrides)
    want = _whole(shape, overrides)
    assert torch.equal(t.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))


VIEWS = {
    "one expert": lambda t: t[2],
    "one expert's half": lambda t: t[1].chunk(2, dim=0)[1],
    "one expert transposed": lambda t: t[3].t(),
    "a strided narrow": lambda t: t[:, 1::2, 3:9],
    "one row of each expert": lambda t: t[:, 5],
    "one element": lambda t: t[3, 2, 7],
}
FLAT_VIEWS = {"rows": lambda t: t[3:7], "a transpose": lambda t: t.t()[2:5]}
FLAT_VIEWS["a row"] = lambda t: t[4]


@pytest.mark.parametrize(
    "shape,overrides,view",
    [(SHAPE, OVERRIDES, v) for v in VIEWS.values()]
    + [(FLAT, FLAT_OVERRIDES, v) for v in FLAT_VIEWS.values()],
    ids=[*VIEWS, *(f"2-D {n}" for n in FLAT_VIEWS)],
)
def test_a_blocks_overrides_are_the_whole_tensors_there(shape, overrides, view):
    want = view(_whole(shape, overrides))
    proxy = view(torch.empty(shape))  # the block's offset and strides in the whole tensor
    got = torch.full(tuple(want.shape), 9.0)
    apply_overrides(got, shape, overrides, proxy.storage_offset(), proxy.stride())
    assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
