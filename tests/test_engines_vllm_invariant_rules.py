"""The parts of the invariant vLLM init that need no vLLM: the per-tensor key, the expert
runs read from an expert map, and the fill of a placement (pieces, steps, zeroed
padding) against the numpy model of the stateless mode. The rules themselves are tested
against vLLM's own loaders in tests/test_engines_vllm_invariant.py."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
import torch

np = pytest.importorskip("numpy")

from oracles import stateless as so  # noqa: E402

from fp8_dummy.engines.core import Action, Kind  # noqa: E402
from fp8_dummy.engines.vllm.invariant import fill_placed, stateless_values, tensor_seed  # noqa: E402
from fp8_dummy.engines.vllm.placement import (  # noqa: E402
    Piece,
    Placement,
    UncoveredParameterError,
    along,
    expert_runs,
)


def test_tensor_seed_is_blake2b_of_seed_and_name():
    for seed, name in [(1234, "model.layers.0.mlp.gate_up_proj.weight"), (0, ""), (2**40, "é")]:
        digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
        assert tensor_seed(seed, name) == int.from_bytes(digest, "little")
    names = [f"model.layers.{i}.self_attn.qkv_proj.weight" for i in range(100)]
    assert len({tensor_seed(1234, n) for n in names}) == 100
    assert tensor_seed(1234, names[0]) != tensor_seed(1235, names[0])


def _layer(expert_map, local):
    emap = None if expert_map is None else torch.tensor(expert_map, dtype=torch.int32)
    return SimpleNamespace(_expert_map=emap, local_num_experts=local)


@pytest.mark.parametrize(
    "expert_map,want",
    [
        (None, [0, 1, 2, 3]),  # no EP: every expert, in order
        ([-1, -1, -1, 0, 1, 2, -1, -1], [3, 4, 5]),  # linear
        ([0, -1, -1, 1, -1, -1, 2, -1, -1, 3], [0, 3, 6, 9]),  # round robin, ep_size 3
        ([2, -1, 0, 1, -1], [2, 3, 0]),  # any map
    ],
)
def test_expert_runs_reproduce_the_map(expert_map, want):
    runs = expert_runs(_layer(expert_map, len(want)))
    got = [None] * len(want)
    for local, glob, count, step in runs:
        for k in range(count):
            got[local + k] = glob + k * step
    assert got == want
    if expert_map is not None and want == [0, 3, 6, 9]:
        assert len(runs) == 1  # one strided run, one launch


def test_expert_slot_without_an_expert_is_refused():
    with pytest.raises(UncoveredParameterError, match="no global expert"):
        expert_runs(_layer([0, -1, -1], 2))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.int8], ids=str)
def test_fill_of_pieces_with_steps_and_padding(dtype):
    # A local [3, 10, 7] tensor: experts 1, 3, 5 of a global [6, 8, 5] one (step 2 along
    # dim 0), rows 2..5 -> local rows 0..3 and rows 6..7 -> local 5..6, columns 0..4; the
    # rest (padding) must come out zero.
    g_shape = (6, 8, 5)
    t = torch.empty(3, 10, 7, dtype=dtype)
    t.view(torch.uint8).fill_(0x55)
    pieces = (
        Piece((slice(0, 3), slice(0, 4), slice(0, 5)), (1, 2, 0), (2, 1, 1)),
        Piece((slice(0, 3), slice(5, 7), slice(0, 5)), (1, 6, 0), (2, 1, 1)),
    )
    kind = "int8" if dtype == torch.int8 else "uniform"
    action = (
        Action(Kind.UNIFORM, -1.0, 1.0) if kind == "uniform" else Action(Kind.RANDOM, -128, 128)
    )
    fill_placed([("x.weight", t, action, Placement(g_shape, pieces))], stateless_values(77))
    key = tensor_seed(77, "x.weight")
    low, high = (-128, 128) if dtype == torch.int8 else (-1.0, 1.0)
    full = so.expected_bytes(np.arange(6 * 8 * 5), dtype, low, high, key).reshape(g_shape)
    want = np.zeros((3, 10, 7), dtype=full.dtype)
    want[:, 0:4, 0:5] = full[1::2, 2:6, :]
    want[:, 5:7, 0:5] = full[1::2, 6:8, :]
    assert (so.tensor_bits(t).reshape(3, 10, 7) == want).all()


def test_along_refuses_a_slice_outside_the_global_tensor():
    with pytest.raises(UncoveredParameterError, match="refuses this shape"):
        along(torch.empty(4, 3), 0, [(0, 6, 4)], 8)
