"""The specs over a whole model (fp8_dummy/realistic/specs.py) are made once per kind of tensor:
each is the one :func:`tensor_spec` gives that tensor itself, with its own module, siblings and
architecture facts (the oracle, called here per tensor). On the logical checkpoints' entries,
unquantized and FP8 block (a quantized weight's siblings are its scales), of models whose
tensors differ by the facts (Nemotron-H's non-negative experts, Inkling's combine sum, OLMo 2's
post-norms, Gemma's norm offsets); and on random entries with random facts, where tensors of
one name, shape and dtype differ by their siblings, facts or ``dummy_weight_value`` alone."""

from __future__ import annotations

import random

import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import Arch, config_format, logical, specs  # noqa: E402
from fp8_dummy.realistic.hf_model import build_model  # noqa: E402
from fp8_dummy.realistic.rules import module_kind, tensor_spec  # noqa: E402

BLK = dict(quant_method="fp8", activation_scheme="dynamic", weight_block_size=[16, 16])
ARCHS = ["inkling_text", "olmo2", "gemma", "qwen3_moe"]


def _oracle(entries, layers: int, arch, heads=()) -> dict:
    siblings: dict = {}
    for _, name, t, shape in entries:
        owner, _, local = name.rpartition(".")
        siblings.setdefault(owner, {})[local] = (tuple(shape), t.dtype)
    out = {}
    for module, name, t, shape in entries:
        owner = name.rpartition(".")[0]
        out[name] = tensor_spec(
            name, shape, t.dtype, layers=layers,
            module="lm_head" if name in heads else module_kind(module),
            siblings=siblings[owner], value=getattr(t, "dummy_weight_value", None),
            norm=arch.norm_value(owner, layers), embed_scale=arch.embed_scale,
            residual=owner in arch.residual, gain=name in arch.gains,
            combine=arch.combine.get(owner, 1.0), centered=name in arch.centered,
        )  # fmt: skip
    return out


@pytest.mark.parametrize("quant", ["bf16", "blk"])
@pytest.mark.parametrize("arch", ARCHS)
def test_each_spec_is_the_tensors_own(arch, quant, monkeypatch):
    config = H.config(arch, **({"quantization_config": BLK} if quant == "blk" else {}))
    calls = []
    own = specs.model_specs

    def recorded(model, entries, num_layers, found, heads=()):
        calls.append((model, list(entries), num_layers, found, heads))
        return own(model, entries, num_layers, found, heads)

    monkeypatch.setattr(logical, "model_specs", recorded)
    fmt = config_format(config)
    logical.logical_model(build_model(config, dtype=fmt.dtype), 0, format=fmt)
    assert len(calls) == (2 if quant == "blk" else 1)
    for model, entries, num_layers, found, heads in calls:
        n = num_layers or specs._layers(model, [name for _, name, _, _ in entries])
        made = own(model, entries, n, found, heads)
        assert made == _oracle(entries, n, found, heads)
        assert len(set(map(id, made.values()))) < len(made)  # kinds shared: made once each
    facts = calls[0][3]
    assert {"inkling_text": facts.combine, "olmo2": facts.post, "gemma": facts.offset,
            "qwen3_moe": True}[arch]  # fmt: skip


def _random_entries(rng: random.Random) -> tuple[list, Arch, frozenset]:
    """Linear weights of one local name and shape in several modules, in bfloat16 or FP8 with
    scales of a random name, dtype and size beside them, norms of one name and shape; random
    facts; random names that are the lm_head whatever they are called (a checkpoint's name of
    the class's output embedding), beside others of their kind."""
    entries, linears, norms = [], [], []
    for i in range(rng.randint(2, 4)):
        for part in ("mlp.experts.0.down_proj", "mlp.experts.1.down_proj", "self_attn.o_proj"):
            owner = f"model.layers.{i}.{part}"
            module = torch.nn.Linear(64, 64, bias=False, device="meta")
            fp8 = rng.random() < 0.5
            w = torch.empty(64, 64, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16,
                            device="meta")  # fmt: skip
            if rng.random() < 0.2:
                w.dummy_weight_value = 0.25
            entries.append((module, f"{owner}.weight", w, (64, 64)))
            linears.append(owner)
            if fp8:  # its spec depends on its scale's name and dtype
                blocks = rng.choice([(2, 2), (4, 4), (1, 1)])
                local = rng.choice(["weight_scale_inv", "weight_scale"])
                dtype = rng.choice([torch.float32, torch.bfloat16])
                scale = torch.empty(blocks, dtype=dtype, device="meta")
                entries.append((module, f"{owner}.{local}", scale, blocks))
        for part in ("input_layernorm", "post_attention_layernorm"):
            owner = f"model.layers.{i}.{part}"
            module = torch.nn.RMSNorm(64, device="meta")
            entries.append((module, f"{owner}.weight", torch.empty(64, device="meta"), (64,)))
            norms.append(owner)
    rng.shuffle(entries)
    names = [n for _, n, _, _ in entries]
    some = lambda xs: frozenset(x for x in xs if rng.random() < 0.4)  # noqa: E731
    arch = Arch(
        post=some(norms), offset={n: 1.0 for n in some(norms)}, residual=some(linears),
        gains=some(names), combine={n: 8.0 for n in some(linears)}, centered=some(names),
        multiplier={n: 2.0 for n in some(norms)},
    )  # fmt: skip
    return entries, arch, frozenset(n for n in names if rng.random() < 0.1)


@pytest.mark.parametrize("seed", range(8))
def test_each_spec_of_random_entries_is_the_tensors_own(seed):
    rng = random.Random(seed)
    entries, arch, heads = _random_entries(rng)
    layers = rng.randint(1, 6)
    made = specs.model_specs(None, entries, layers, arch, heads)
    assert made == _oracle(entries, layers, arch, heads)
