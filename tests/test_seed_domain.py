"""One seed domain in every entry point, torch's manual_seed's: an int in [-2^63, 2^64), read
modulo 2^64, so -1 and 2^64 - 1 give the same model; anything else (2^64, -2^63 - 1, 1.5, a
bool, a string) is refused before anything is written (bytes compared before and after).
The entry points: realistic mode, the stateless key of a tensor, the vLLM invariant fill's
values and the realistic load format's (vLLM's --seed), the engines' whole-model fill."""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import pytest
import torch

import fp8_dummy
from fp8_dummy.engines.core import Action, Kind
from fp8_dummy.engines.vllm.invariant import stateless_values
from fp8_dummy.engines.vllm.realistic import load_checkpoint
from fp8_dummy.stateless import tensor_seed, tensor_seeds

SAME = [(-1, 2**64 - 1), (-(2**63), 2**63), (-12345, 2**64 - 12345)]
REFUSED = [(2**64, ValueError), (-(2**63) - 1, ValueError), (1.5, TypeError),
           (True, TypeError), ("7", TypeError), (None, TypeError)]  # fmt: skip


def model() -> torch.nn.Module:
    m = torch.nn.Module()
    m.embed_tokens = torch.nn.Embedding(16, 8)
    m.layers = torch.nn.ModuleList([torch.nn.Module()])
    m.layers[0].input_layernorm = torch.nn.LayerNorm(8)
    m.layers[0].q_proj = torch.nn.Linear(8, 8, bias=False)
    m.layers[0].down_proj = torch.nn.Linear(8, 8, bias=False)
    return m


def raw(m: torch.nn.Module) -> list[bytes]:
    return [
        t.detach().contiguous().view(torch.uint8).numpy().tobytes() for t in m.state_dict().values()
    ]


@pytest.mark.parametrize("a,b", SAME)
def test_realistic_mode_reads_the_seed_as_torch_does(a, b):
    ma, mb = model(), model()
    fp8_dummy.initialize_realistic_dummy_weights(ma, seed=a)
    fp8_dummy.initialize_realistic_dummy_weights(mb, seed=b)
    assert raw(ma) == raw(mb)
    assert (
        torch.Generator().manual_seed(a).initial_seed()
        == torch.Generator().manual_seed(b).initial_seed()
    )


@pytest.mark.parametrize("seed,error", REFUSED)
def test_realistic_mode_refuses_a_seed_outside_the_domain_before_writing(seed, error):
    m = model()
    before = raw(m)
    with pytest.raises(error, match="seed"):
        fp8_dummy.initialize_realistic_dummy_weights(m, seed=seed)
    assert raw(m) == before


@pytest.mark.parametrize("a,b", SAME)
def test_a_tensors_stateless_key_reads_the_seed_as_torch_does(a, b):
    assert tensor_seed(a, "layers.0.q_proj.weight") == tensor_seed(b, "layers.0.q_proj.weight")
    assert tensor_seed(a, "x") != tensor_seed(a + 1, "x")


@pytest.mark.parametrize("seed,error", REFUSED)
def test_a_tensors_stateless_key_refuses_a_seed_outside_the_domain(seed, error):
    with pytest.raises(error, match="seed"):
        tensor_seed(seed, "x")
    with pytest.raises(error, match="seed"):
        tensor_seeds(seed, ["x"])


def blake2b_key(seed: int, name: str) -> int:
    """The documented key, computed here: BLAKE2b-64 of "seed:name", little-endian."""
    raw = hashlib.blake2b(f"{seed % 2**64}:{name}".encode(), digest_size=8).digest()
    return sum(b << (8 * i) for i, b in enumerate(raw))


@pytest.mark.parametrize("a,b", SAME)
def test_many_tensors_keys_are_each_ones_key(a, b):
    g = random.Random(a)
    names = ["".join(g.choice("ab.0_9é") for _ in range(g.randint(0, 12))) for _ in range(64)]
    names += ["model.layers.3.mlp.experts.17.down_proj.weight", ""]
    keys = tensor_seeds(a, names)
    assert list(keys) == list(dict.fromkeys(names))
    assert keys == tensor_seeds(b, iter(names))
    assert all(keys[n] == tensor_seed(a, n) == blake2b_key(a, n) for n in names)


def write(values, t: torch.Tensor) -> torch.Tensor:
    values("layers.0.q_proj.weight", Action(Kind.UNIFORM, -1.0, 1.0), (4, 8), t, 0, [8, 1])
    return t.view(torch.uint8)


@pytest.mark.parametrize("a,b", SAME)
def test_the_invariant_fills_values_read_the_seed_as_torch_does(a, b):
    ta, tb = (torch.empty(4, 8, dtype=torch.bfloat16) for _ in "ab")
    assert torch.equal(write(stateless_values(a), ta), write(stateless_values(b), tb))


@pytest.mark.parametrize("seed,error", [x for x in REFUSED if x[0] is not None])
def test_the_invariant_fill_and_load_formats_refuse_a_seed_outside_the_domain(seed, error):
    with pytest.raises(error, match="seed"):
        stateless_values(seed)
    loaded = []
    m = torch.nn.Module()
    m.load_weights = loaded.append  # nothing may reach the model's loader
    with pytest.raises(error, match="seed"):  # vLLM's --seed, before the loader writes
        load_checkpoint(m, SimpleNamespace(seed=seed, hf_config=None))
    assert loaded == []


@pytest.mark.parametrize("seed,error", [x for x in REFUSED if x[0] is not None])
@pytest.mark.parametrize("mode", ["generator", "stateless"])
def test_the_whole_model_fill_refuses_a_seed_outside_the_domain_before_writing(seed, error, mode):
    m = model()
    before = raw(m)
    with pytest.raises(error, match="seed"):
        fp8_dummy.initialize_dummy_weights(m, seed=seed, mode=mode)
    assert raw(m) == before


@pytest.mark.parametrize("a,b", SAME)
@pytest.mark.parametrize("mode", ["generator", "stateless"])
def test_the_whole_model_fill_reads_the_seed_as_torch_does(a, b, mode):
    ma, mb = model(), model()
    fp8_dummy.initialize_dummy_weights(ma, seed=a, mode=mode)
    fp8_dummy.initialize_dummy_weights(mb, seed=b, mode=mode)
    assert raw(ma) == raw(mb)
