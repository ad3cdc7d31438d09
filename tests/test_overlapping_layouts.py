"""Tensors whose elements may share memory (docs/contract.md "layouts", R6): every op that
writes refuses them before anything is written or drawn, on the layouts torch rates
"too hard" as on expand()'s; the fake kernels apply the same rule; the engine integrations
leave them to the engine's own path. Every other layout is accepted with the reference's
bytes. The oracle of "distinct" is a brute-force count of the elements' offsets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import poison, storage_bytes

import fp8_dummy
from fp8_dummy import reference
from fp8_dummy.engines.core import distinct, fusable, random_bytes_

E4M3 = torch.float8_e4m3fn
REFUSED = "may share memory|more than one element of the written-to tensor"
# Overlapping layouts: rows that start inside the previous row (torch: MemOverlap::TooHard).
REPRODUCERS = {
    "4096x4096_rows_2048_apart": ((4096, 4096), (2048, 1)),
    "200x300_rows_150_apart": ((200, 300), (150, 1)),
}


def _view(shape, strides, dtype=E4M3, offset=0):
    """A view over a poisoned buffer that just holds it."""
    span = sum((n - 1) * s for n, s in zip(shape, strides)) if 0 not in shape else 0
    buf = torch.full((offset + span + 1,), 0x55, dtype=torch.uint8)
    return buf.view(dtype).as_strided(shape, strides, offset)


def _offsets_distinct(shape, strides) -> bool:
    """Brute force: no two elements at the same offset."""
    offsets = [sum(i * s for i, s in zip(idx, strides)) for idx in np.ndindex(*shape)]
    return len(set(offsets)) == len(offsets)


def _shown_distinct(shape, strides) -> bool:
    """The documented rule: by increasing stride (sizes > 1), each stride exceeds the
    furthest offset the smaller ones reach; no element at all passes."""
    if 0 in shape:
        return True
    reach = 0
    for stride, size in sorted((s, n) for n, s in zip(shape, strides) if n > 1):
        if stride <= reach:
            return False
        reach += stride * (size - 1)
    return True


def _writes(t: torch.Tensor, g: torch.Generator):
    """Every public way to write t (an FP8 tensor), by name."""
    u8 = t.view(torch.uint8)
    return {
        "init_": lambda: fp8_dummy.init_(t, -1.0, 1.0, seed=3),
        "init_ generator": lambda: fp8_dummy.init_(t, -1.0, 1.0, generator=g),
        "init_ contiguous_temp": lambda: fp8_dummy.init_(t, -3.0, 3.0, 0, contiguous_temp=True),
        "init_.generator default": lambda: torch.ops.fp8_dummy.init_.generator(
            t, -1.0, 1.0, generator=None
        ),
        "init_many_": lambda: fp8_dummy.init_many_([torch.empty(9, dtype=E4M3), t], -1.0, 1.0),
        "init_stateless_": lambda: fp8_dummy.init_stateless_(t, -1.0, 1.0),
        "init_stateless_ int": lambda: fp8_dummy.init_stateless_(u8, 0, 256),
        "random_": lambda: fp8_dummy.random_(u8, 0, 256, 3),
        "random_ generator": lambda: fp8_dummy.random_(u8, 0, 256, generator=g),
    }


def _refused_untouched(t: torch.Tensor, where: str) -> None:
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    for name, write in _writes(t, g).items():
        with pytest.raises(RuntimeError, match=REFUSED):
            write()
        assert bool((storage_bytes(t) == 0x55).all()), f"{where} {name}: written"
        assert torch.equal(g.get_state(), state), f"{where} {name}: the generator moved"
    # The fake kernel (a meta twin: the Meta kernel is the fake) applies the same rule.
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    with pytest.raises(RuntimeError, match=REFUSED):
        torch.ops.fp8_dummy.init_(meta, -1.0, 1.0, 3)
    assert not fusable(t) and not distinct(t)


@pytest.mark.parametrize("case", sorted(REPRODUCERS))
def test_reproducers_refused_on_two_threads_every_time(case):
    shape, strides = REPRODUCERS[case]
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for trial in range(3):
            t = _view(shape, strides)
            _refused_untouched(t, f"{case} trial {trial}")
            with pytest.raises(RuntimeError, match=rf"sizes \[{shape[0]}, {shape[1]}\], strides"):
                fp8_dummy.init_(t, -1.0, 1.0, seed=3)
    finally:
        torch.set_num_threads(old)


def test_expanded_refused_as_before():
    t = poison(torch.empty(3, 1, dtype=E4M3)).expand(3, 4)
    _refused_untouched(t, "expand")


def _random_layouts(count: int, seed: int):
    """Random sizes and strides (0 to 4 dimensions, sizes 0 to 5, strides 0 to 13, and
    slices of dense layouts), each with its brute-force verdict."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        ndim = int(rng.integers(0, 5))
        shape = tuple(int(x) for x in rng.integers(1, 6, ndim))
        if ndim and rng.random() < 0.05:
            shape = shape[:-1] + (0,)
        if rng.random() < 0.4:  # a permuted dense layout, some dimensions stepped
            strides, step = [0] * ndim, 1
            for d in rng.permutation(ndim)[::-1]:
                strides[d], step = step, step * shape[d] * int(rng.integers(1, 3))
            strides = tuple(strides)
        else:
            strides = tuple(int(x) for x in rng.integers(0, 14, ndim))
        out.append((shape, strides))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_random_views_refused_iff_not_shown_distinct(seed):
    """No view whose elements meet is written; every view the rule shows distinct gets the
    reference's bytes; the rest (distinct, but interleaved) is refused too."""
    refused = accepted = 0
    for shape, strides in _random_layouts(120, seed):
        where = f"sizes {shape} strides {strides}"
        truly = _offsets_distinct(shape, strides)
        shown = _shown_distinct(shape, strides)
        assert truly or not shown, f"{where}: the rule passes a layout whose elements meet"
        t = _view(shape, strides)
        if not shown:
            _refused_untouched(t, where)
            refused += 1
            continue
        accepted += 1
        ref = _view(shape, strides)
        fp8_dummy.init_(t, -1.0, 1.0, seed=seed)
        reference.new_path(ref, -1.0, 1.0, seed=seed)
        assert torch.equal(storage_bytes(t), storage_bytes(ref)), where
        fp8_dummy.random_(t.view(torch.uint8), 0, 256, seed)
        g = torch.Generator().manual_seed(seed)
        ref.view(torch.uint8).random_(0, 256, generator=g)
        assert torch.equal(storage_bytes(t), storage_bytes(ref)), f"{where} random_"
        assert fusable(t)
    assert refused > 20 and accepted > 20, (refused, accepted)


LAYOUTS = {  # what docs/contract.md promises, and odd strides of size-1 dimensions
    "contiguous": lambda: torch.empty(6, 7, dtype=E4M3),
    "transposed": lambda: torch.empty(7, 6, dtype=E4M3).t(),
    "permuted": lambda: torch.empty(3, 4, 5, dtype=E4M3).permute(2, 0, 1),
    "channels_last": lambda: torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last).to(E4M3),
    "gaps": lambda: torch.empty(6, 14, dtype=E4M3)[:, ::2],
    "transposed_gaps": lambda: torch.empty(14, 6, dtype=E4M3)[::2].t(),
    "sliced": lambda: torch.empty(9, 9, dtype=E4M3)[2:7, 1:8],
    "storage_offset": lambda: torch.empty(100, dtype=E4M3)[17:60],
    "scalar": lambda: torch.empty((), dtype=E4M3),
    "empty": lambda: torch.empty(0, 5, dtype=E4M3),
    "empty_strides_0": lambda: torch.empty(1, dtype=E4M3).as_strided((0, 4), (0, 0)),
    "size_one_stride_0": lambda: torch.empty(5, dtype=E4M3).as_strided((1, 5), (0, 1)),
    "size_one_expanded": lambda: torch.empty(1, 5, dtype=E4M3).expand(1, 5),
    "unsqueezed_gaps": lambda: torch.empty(40, dtype=E4M3)[::4].unsqueeze(0).unsqueeze(2),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_promised_layouts_accepted(layout):
    t, ref = poison(LAYOUTS[layout]()), poison(LAYOUTS[layout]())
    for write in _writes(t, torch.Generator().manual_seed(1)).values():
        write()
    fp8_dummy.init_(t, -1.0, 1.0, seed=3)
    reference.new_path(ref, -1.0, 1.0, seed=3)
    assert torch.equal(storage_bytes(t), storage_bytes(ref))
    assert distinct(t)


@pytest.mark.parametrize("dims", [2, 3])
def test_many_shapes_of_dense_and_gapped_layouts_pass(dims):
    """Every permutation of every dense, gapped or sliced layout of small shapes passes the
    rule (the fast tier's layouts go through it too)."""
    for shape in itertools.product((1, 2, 3), repeat=dims):
        for step in itertools.product((1, 2), repeat=dims):
            base = torch.empty(tuple(n * s for n, s in zip(shape, step)), dtype=E4M3)
            view = base[tuple(slice(None, None, s) for s in step)]
            for perm in itertools.permutations(range(dims)):
                assert distinct(view.permute(perm)), (shape, step, perm)


class _Model(torch.nn.Module):
    def __init__(self, shape, strides):
        super().__init__()
        self.plain = torch.nn.Parameter(poison(torch.empty(4, 6, dtype=E4M3)), requires_grad=False)
        self.over = torch.nn.Parameter(_view(shape, strides), requires_grad=False)  # filled last


def test_engines_leave_overlapping_tensors_to_the_reference():
    """A whole model with self-overlapping tensors: our op never sees them (it would refuse);
    the engine's own path writes them, with the reference's bytes (one thread: torch's
    reference depends on the thread count there), and the rest as always."""
    shape, strides = REPRODUCERS["200x300_rows_150_apart"]
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours, want = _Model(shape, strides), _Model(shape, strides)
        fp8_dummy.initialize_dummy_weights(ours, seed=7)
        reference.new_path(want.over, -1.0, 1.0, 7)
        reference.new_path(want.plain, -1.0, 1.0, 7)
        for name in ("over", "plain"):
            got, exp = getattr(ours, name), getattr(want, name)
            assert torch.equal(storage_bytes(got), storage_bytes(exp)), name
        # random_bytes_ (int8/uint8 weights) takes torch's random_ there
        a, b = _view(shape, strides, torch.uint8), _view(shape, strides, torch.uint8)
        random_bytes_(a, 0, 256, 9)
        b.random_(0, 256, generator=torch.Generator().manual_seed(9))
        assert torch.equal(storage_bytes(a), storage_bytes(b))
    finally:
        torch.set_num_threads(old)


def test_stateless_mode_refuses_an_overlapping_tensor_before_any_is_written():
    """mode="stateless" has no engine path to leave it to: refused, naming the tensor,
    before the model's other tensors are written."""
    shape, strides = REPRODUCERS["200x300_rows_150_apart"]
    model = _Model(shape, strides)
    with pytest.raises(RuntimeError, match="^fp8_dummy: over: .*may share memory"):
        fp8_dummy.initialize_dummy_weights(model, mode="stateless")
    for t in (model.plain, model.over):
        assert bool((storage_bytes(t) == 0x55).all())
