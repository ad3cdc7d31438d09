"""MTP layers' routers under a routing profile (docs/realistic.md#routing): those kept apart from
the main model's (DeepSeek-V4's ``mtp.<i>``, Qwen3-Next's and Nemotron-H's ``mtp.layers.<i>``,
HY-V4's ``model.mtp_layers.<i>``) come after the main model's layers, as those numbered on from
them do (DeepSeek-V3's ``model.layers.<L + i>``): a recorded load's rows pair with the main MoE
layers in order and each MTP layer gets the last one's; under zipf MTP layer i draws as a main
layer L + i would. Checked by the written bytes: a hash table's expert counts (vocab · k ·
share), a router's offsets' order (its correction bias, or its weight's carrier column: the more
loaded expert never the lower offset), and the bytes of a model with L + i main layers, never by
the pairing code itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402

from fp8_dummy.realistic import config_checkpoint  # noqa: E402
from fp8_dummy.realistic.routing import find_routers  # noqa: E402

EXPERTS, K, VOCAB = 16, 2, 1024


def _config(layers: int, mtp: int):
    cfg = config(128, VOCAB, layers, 2)  # a hash-routed first layer, then learned routers
    cfg.num_nextn_predict_layers = mtp
    return cfg


def _rows(layers: int, seed: int, experts: int = EXPERTS) -> np.ndarray:
    """One distinct load per main MoE layer: geometric shares (ratio 1.2, none above 1/k),
    each layer's in its own random order."""
    rng = np.random.default_rng(seed)
    base = 1.2 ** np.arange(experts)
    return np.stack([base[rng.permutation(experts)] for _ in range(layers)])


def _ordered_as(b: np.ndarray, load: np.ndarray) -> bool:
    low, high = np.meshgrid(load, load, indexing="ij")
    return np.ptp(b) > 0 and bool((b[:, None] <= b[None, :])[low < high].all())


@pytest.mark.parametrize("layers, mtp, seed", [(3, 2, 0), (2, 1, 5)])
def test_a_recorded_load_pairs_each_router_with_its_row(layers, mtp, seed, tmp_path):
    rows = _rows(layers, seed)
    assert len({tuple(np.argsort(r)) for r in rows}) == layers  # distinct orders
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"expert_load": rows.tolist()}))
    lm = config_checkpoint(_config(layers, mtp), seed, routing=str(path))
    t = lm.tensors
    # the hash layer: each expert in vocab · k · share rows of its table, to within one
    (table,) = lm.made(["layers.0.ffn.gate.tid2eid"])
    counts = np.bincount(table.numpy().ravel(), minlength=EXPERTS)
    want = VOCAB * K * rows[0] / rows[0].sum()
    assert np.abs(counts - want).max() < 1 + 1e-9, (counts, want)
    # the learned routers, main then MTP: each bias ordered as its row (the last main one's)
    learned = [f"layers.{i}.ffn.gate.bias" for i in range(1, layers)]
    learned += [f"mtp.{i}.ffn.gate.bias" for i in range(mtp)]
    expected = list(range(1, layers)) + [layers - 1] * mtp
    for name, row in zip(learned, expected):
        (bias,) = lm.made([name])
        b = bias.double().numpy()
        assert _ordered_as(b, rows[row]), (name, row, b, rows[row])
    # the routers' layers: the main model's, then L + i (each the first of its layer)
    specs = {n: x.spec.role for n, x in t.items()}
    shapes = {n: x.shape for n, x in t.items()}
    got = {r.weight: (r.layer, r.index) for r in find_routers(specs, shapes, _config(layers, mtp))}
    want_layers = {f"layers.{i}.ffn.gate.weight": (i, 0) for i in range(layers)}
    want_layers |= {f"mtp.{i}.ffn.gate.weight": (layers + i, 0) for i in range(mtp)}
    assert got == want_layers


def test_under_zipf_an_mtp_layer_draws_as_the_next_main_layer():
    layers, mtp, seed = 2, 2, 3
    with_mtp = config_checkpoint(_config(layers, mtp), seed, routing="zipf:1.1")
    deeper = config_checkpoint(_config(layers + mtp, 0), seed, routing="zipf:1.1")
    made = {}
    for i in range(mtp):
        (a,) = with_mtp.made([f"mtp.{i}.ffn.gate.bias"])
        (b,) = deeper.made([f"layers.{layers + i}.ffn.gate.bias"])
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), i
        made[i] = a
    (main,) = with_mtp.made([f"layers.{layers - 1}.ffn.gate.bias"])
    assert not torch.equal(made[0], main) and not torch.equal(made[0], made[1])


# (arch, its main MoE routers, its MTP router): Qwen3-Next's offsets in the router weight's
# carrier column (no bias), Nemotron-H's in its correction bias
APART = {
    "qwen3_next": ([f"model.layers.{i}.mlp.gate" for i in range(4)], "mtp.layers.0.mlp.gate"),
    "nemotron_h": ([f"backbone.layers.{i}.mixer.gate" for i in (1, 3, 5)],
                   "mtp.layers.1.mixer.gate"),
    # HY-V4: a dense first layer, then MoE ones; its MTP layers under model.mtp_layers.<i>
    "hy_v4": ([f"model.layers.{i}.mlp.gate" for i in (1, 2, 3)], "model.mtp_layers.0.mlp.gate"),
}  # fmt: skip
# six layers: Mamba, MoE, attention in turn (three MoE layers, so that an MTP router sorted
# among them would shift a main layer's row)
LAYERS = {"qwen3_next": 4, "nemotron_h": 6, "hy_v4": 4}


@pytest.mark.parametrize("arch", list(APART))
def test_mtp_layers_under_mtp_layers_come_after_the_main_ones(arch, tmp_path):
    cfg = H.config(arch, layers=LAYERS[arch], mtp=1)
    main, mtp = APART[arch]
    experts = cfg.num_experts if arch == "qwen3_next" else cfg.n_routed_experts
    rows = _rows(len(main), 1, experts)
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"expert_load": rows.tolist()}))
    lm = config_checkpoint(cfg, 0, routing=str(path))

    def offsets(router: str) -> torch.Tensor:
        bias = f"{router}.e_score_correction_bias"
        if bias in lm.tensors:
            return lm.made([bias])[0]
        return lm.made([f"{router}.weight"])[0][:, -1].contiguous()  # the carrier column

    for router, row in zip(main + [mtp], list(range(len(main))) + [len(main) - 1]):
        b = offsets(router)
        assert _ordered_as(b.double().numpy(), rows[row]), (router, row)
    last = offsets(main[-1])
    assert torch.equal(offsets(mtp).view(torch.uint8), last.view(torch.uint8))
