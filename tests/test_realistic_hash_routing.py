"""DeepSeek-V4's hash-routed layers (docs/realistic.md#routing): the token id -> experts table
``tid2eid`` is designed so that those layers' load follows the routing profile (balanced by
default) over uniformly drawn token ids, k distinct valid experts per id, the same table in
every format and in the in-place fill. Measured through transformers' own DeepSeek-V4 class:
its hash router's indices, hooked, on every id once (the exact load), on 4,096 random ids, and
on the designed stream's tokens, against a target computed here (balanced: k/E; zipf: the
routing tests' independent successive-sampling sampler), never by the fill's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from test_realistic_routing import measure, tv_sorted, zipf_oracle  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import Block, logical_model  # noqa: E402
from fp8_dummy.realistic.routing import hash_table  # noqa: E402

VOCAB, EXPERTS, K, HASHED = 1024, 16, 2, 2
NAME = "layers.{}.ffn.gate.tid2eid"  # the checkpoint's name (no "model.")


def _config():
    cfg = config(128, VOCAB, HASHED + 1, 2)  # two hash-routed layers, then a learned router
    cfg.mlp_layer_types = ["hash_moe"] * HASHED + ["moe"]
    return cfg


def _model(routing: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(_config()).eval()
    fp8_dummy.initialize_realistic_dummy_weights(model, seed, routing=routing)
    return model


def _hash_loads(model: torch.nn.Module, ids: torch.Tensor) -> list[np.ndarray]:
    """Each hash layer's count per expert: the indices its router returns, hooked."""
    loads = [np.zeros(EXPERTS, dtype=np.int64) for _ in range(HASHED)]

    def on(i):
        def record(_m, _i, out):
            loads[i] += np.bincount(out[2].flatten().numpy(), minlength=EXPERTS)

        return record

    gates = [model.model.layers[i].mlp.gate for i in range(HASHED)]
    hooks = [g.register_forward_hook(on(i)) for i, g in enumerate(gates)]
    try:
        with torch.no_grad():
            for row in ids.reshape(-1, 256 if ids.numel() % 256 == 0 else ids.numel()):
                model(row[None], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return loads


def _target(routing: str) -> np.ndarray:
    if routing == "balanced":
        return np.full(EXPERTS, K / EXPERTS)
    return zipf_oracle(EXPERTS, K, float(routing.split(":")[1]))


@pytest.mark.slow
@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_hash_layers_follow_the_profile_through_the_class(routing):
    model = _model(routing)
    target = _target(routing)
    for i in range(HASHED):  # the class's own table: valid, k distinct experts per id
        table = model.model.layers[i].mlp.gate.tid2eid
        assert table.shape == (VOCAB, K) and 0 <= table.min() and table.max() < EXPERTS
        assert (table[:, 0] != table[:, 1]).all(), i
    every = _hash_loads(model, torch.arange(VOCAB))  # every id once: the exact load
    hot = []
    for load in every:
        assert load.sum() == VOCAB * K
        if routing == "balanced":
            assert (load == VOCAB * K // EXPERTS).all(), load
        else:
            assert tv_sorted(load, target) <= 0.015, (tv_sorted(load, target), load)
            want = target.max() / target.mean()
            assert abs(load.max() / load.mean() / want - 1) <= 0.05, (load, want)
        hot.append(frozenset(np.argsort(-load)[:3]))
    if routing != "balanced":
        assert len(set(hot)) == HASHED, "hot experts differ between hash layers"
    # uniform random ids (the routing tests' draw), every MoE layer: the learned one too (its
    # offsets in the correction bias it adds to its sqrt(softplus) scores)
    got = measure(model, 0)
    assert len(got["loads"]) == HASHED + 1
    for load in got["loads"]:
        assert tv_sorted(load, target) <= 0.08, (routing, load)
    # the designed stream's tokens without a tokenizer: every id but the config's bos/eos
    stream = torch.tensor([t for t in range(VOCAB) if t not in (0, 1)])
    for load in _hash_loads(model, stream):
        assert tv_sorted(load, target) <= 0.015, (routing, load)


@pytest.mark.parametrize("fmt", [None, "fp8", "nvfp4"])
def test_the_table_is_the_same_in_every_format_and_in_place(fmt):
    model = _model("zipf:1.2", seed=3)
    with torch.device("meta"):  # the export's: the class built on the meta device
        empty = tf.AutoModelForCausalLM.from_config(_config())
    meta = logical_model(empty, 3, routing="zipf:1.2", format=fmt)
    real = logical_model(model, 3, routing="zipf:1.2", format=fmt)
    for i in range(HASHED):
        name = NAME.format(i)
        placed = model.model.layers[i].mlp.gate.tid2eid
        for lm in (meta, real):
            t = lm.tensors[name]
            assert t.spec.role == "hash" and t.dtype == torch.int64
            (whole,) = lm.made([name])
            assert torch.equal(whole.view(torch.uint8), placed.view(torch.uint8)), (fmt, name)
            held = torch.randint(0, 1 << 62, (300, K))  # a loader's block over rows 400..699
            lm.write(held, Block(name, t.shape, (300, K), 400 * K, (K, 1)))
            assert torch.equal(held.view(torch.uint8), placed[400:700].view(torch.uint8))


def test_the_table_is_deterministic_per_seed():
    one, two, other = _model("balanced"), _model("balanced"), _model("balanced", seed=1)
    table = lambda m: m.model.layers[0].mlp.gate.tid2eid.view(torch.uint8)  # noqa: E731
    assert torch.equal(table(one), table(two))
    assert not torch.equal(table(one), table(other))


@pytest.mark.parametrize("case", range(6))
def test_hash_table_counts_and_rows(case):
    """Random sizes and targets (some experts at the cap of every row): k distinct valid
    experts a row, each expert in vocab · target rows to within one."""
    rng = np.random.default_rng(case)
    experts = int(rng.integers(2, 70))
    k = int(rng.integers(1, experts + 1))
    vocab = int(rng.integers(1, 3000))
    share = rng.lognormal(0, 1.5, experts)
    target = np.minimum(share / share.sum() * k, 1.0)
    while target.sum() < k - 1e-9:  # capped ones give their excess to the others
        free = target < 1
        target[free] = np.minimum(target[free] * (k - (~free).sum()) / target[free].sum(), 1)
    table = hash_table(target, vocab, k, int(rng.integers(0, 1 << 63)))
    assert table.shape == (vocab, k) and table.dtype == np.int64
    assert table.min() >= 0 and table.max() < experts
    assert all(len(set(row)) == k for row in table.tolist())
    counts = np.bincount(table.ravel(), minlength=experts)
    assert np.abs(counts - vocab * target).max() < 1 + 1e-6, (counts, vocab * target)
