"""LongCat-Flash's zero (identity) experts (docs/realistic.md#routing): its router selects the
top-k of the softmax probabilities plus ``e_score_correction_bias`` and weighs each pick by
its unbiased probability times ``routed_scaling_factor``; a zero expert adds its normalized
input, in the residual's own direction, so every layer's picks add up. The fill gives the
zero experts' logits a shift down (their probabilities, and so their identity output, small)
and their correction bias a lift that puts them in the top-k as often as the profile says.
Checked on the plan against an independent numpy model of that router (random sizes), and
through transformers' own class: the router's own picks and weights, the residual RMS."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random

import numpy as np
import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import model_specs, model_tensors
from fp8_dummy.realistic import routing as R
from fp8_dummy.realistic.export import export

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")


def _config(h: int, experts: int, zero: int, k: int, layers: int, scale: float = 6.0):
    return tf.LongcatFlashConfig(
        vocab_size=1024, hidden_size=h, num_layers=layers, num_attention_heads=4,
        n_routed_experts=experts, zero_expert_num=zero, moe_topk=k, expert_ffn_hidden_size=32,
        ffn_hidden_size=2 * h, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, head_dim=8, v_head_dim=16, num_key_value_heads=4,
        routed_scaling_factor=scale, pad_token_id=None,
    )  # fmt: skip


def _plan(config, profile: str, seed: int = 0):
    with torch.device("meta"):
        model = tf.LongcatFlashForCausalLM(config)
    specs = model_specs(model, model_tensors(model))
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    return R.plan_routing(R.parse_routing(profile), seed, config, specs, shapes)


def _numpy_router(logits: np.ndarray, bias: np.ndarray, k: int, scale: float):
    """The router as the three engines' code runs it: the top-k of softmax + bias, weighed by
    the softmax times the scale (picks, weights)."""
    e = np.exp(logits - logits.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    picks = np.argsort(-(p + bias), axis=-1, kind="stable")[:, :k]
    return picks, np.take_along_axis(p, picks, -1) * scale


CASES = [(8, 4, 2), (16, 4, 2), (12, 6, 3), (24, 12, 4), (6, 2, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_zero_experts_are_picked_as_the_profile_says_and_weigh_little(seed):
    rng = random.Random(seed)
    experts, zero, k = rng.choice(CASES)
    layers = rng.choice([2, 8, 32])
    profile = rng.choice(["balanced", "zipf:1.2", "zipf:0.8"])
    config = _config(64, experts, zero, k, layers)
    routers, overrides = _plan(config, profile, seed)
    assert len(routers) == layers and all(r.zero == zero for r in routers)
    n = experts + zero
    gen = np.random.default_rng(seed)
    total_zero_weight = 0.0
    for r in routers:
        (bias,) = [v for _, _, v in overrides[r.lifted]]
        # the router's input column 63 (the carrier's): zeroed, then the offsets written
        column = [v for d, j, v in overrides[r.weight] if d == 1 and j == 63][-1] / R.CARRIER
        assert np.all(bias[:experts] == 0) and np.all(bias[experts:] == bias[-1]) and bias[-1] > 0
        # the logits as the fill makes them: N(0, 1) per expert and token, plus the column
        logits = gen.standard_normal((20000, n)) + column
        picks, weights = _numpy_router(logits, bias, k, 6.0)
        share = np.bincount(picks.ravel(), minlength=n) / len(picks)
        assert np.abs(share - r.target).sum() / (2 * k) < 0.05, (profile, share, r.target)
        zero_picks = picks >= experts
        assert zero_picks.mean() * k == pytest.approx(r.target[experts:].sum(), rel=0.08, abs=0.01)
        total_zero_weight += (weights * zero_picks).sum(-1).mean()
    # what the zero experts add over every layer, in units of the normalized residual
    assert total_zero_weight < 0.3, total_zero_weight


def test_a_model_without_zero_experts_plans_as_before():
    """zero_expert_num 0: no lift, no shift, balanced writes nothing (the fill's own bytes)."""
    routers, overrides = _plan(_config(64, 8, 0, 2, 2), "balanced")
    assert routers == [] and overrides == {}
    routers, _ = _plan(_config(64, 8, 0, 2, 2), "zipf:1.2")
    assert all(r.zero == 0 and r.lift == 0 for r in routers)


def test_solve_zero_returns_the_lift_and_leaves_the_router_alone():
    """The lift is solve_zero's return, stored by its caller; the router it is given keeps its
    own (here 0) through the solve's steps and after."""
    r = R.Router(0, "", 12, 0, 2, zero=4, shift=1.5)
    before = dataclasses.replace(r)
    target = np.array([0.5, 0.1, 0.3, 0.05, 0.2, 0.25, 0.05, 0.15, 0.2, 0.05, 0.1, 0.05])
    b, lift = R.solve_zero(r, target, R.solve_offsets(r, target))
    assert r == before and r.lift == 0.0
    assert lift > 0 and b.shape == (12,)


# sha256 of the one shard of each export below: the bytes these exports have had while the
# solve's steps set the router's lift themselves (recorded 2026-12-06, torch 2.13 CPU); the
# lift returned to the caller instead changes none of them
LONGCAT_DIGESTS = {
    "balanced": "00ed2c19a91422fbda93b0c4d5e4cc0330b0828cb00c7366ada77f72cbb0e618",
    "zipf:1.2": "249bd0512bc21b97f47bd5e84e0127d5e083e20e95a5005ee3afbd4a90f7eff7",
    "file": "8b9bdcea85b9a0a34d0e067f394c781255e2ec17305e85fbc340472cd7cbb566",
}


def longcat_digests(folder) -> dict[str, str]:
    """The digests of a two-layer LongCat-Flash (8 experts, 4 zero experts, top-2) exported
    with each profile (seed 5), the recorded load's router solved on the model's own router."""
    load = folder / "load.json"
    load.write_text(json.dumps({"expert_load": [[40, 5, 9, 1, 3, 7, 2, 11, 6, 1, 3, 2]] * 2}))
    out = {}
    for name, routing in (("balanced", "balanced"), ("zipf:1.2", "zipf:1.2"), ("file", load)):
        to = folder / name.replace(":", "-")
        export(_config(64, 8, 4, 2, 2), to, seed=5, routing=routing, progress=False)
        (shard,) = to.glob("*.safetensors")
        out[name] = hashlib.sha256(shard.read_bytes()).hexdigest()
    return out


def test_longcat_bytes_as_recorded(tmp_path):
    assert longcat_digests(tmp_path) == LONGCAT_DIGESTS


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["balanced", "zipf:1.2"])
def test_through_longcats_class(profile):
    """16 LongCat layers (32 attention layers), 8 experts and 4 zero experts top-2: the
    router's own picks take the zero experts at the target's rate, their weights sum small,
    and the residual RMS stays in [0.25, 4] after every layer (with the zero experts picked on
    their logits alone it grew to 14.9, balanced)."""
    torch.manual_seed(0)
    config = _config(64, 8, 4, 2, 16)
    model = tf.LongcatFlashForCausalLM(config).eval()
    fp8_dummy.initialize_realistic_dummy_weights(model, seed=3, routing=profile)
    routers, _ = _plan(config, profile, seed=3)
    seen = []

    def hook(_, __, out):
        _, weights, picks = out
        seen.append((picks.clone(), weights.clone()))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules()
             if type(m).__name__ == "LongcatFlashTopkRouter"]  # fmt: skip
    ids = torch.randint(0, 1024, (8, 128), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    for h in hooks:
        h.remove()
    rms = [h.float().pow(2).mean(-1).sqrt().mean().item() for h in out.hidden_states]
    assert all(0.25 <= x <= 4 for x in rms), [round(x, 2) for x in rms]
    assert len(seen) == len(routers) == 16
    zero_weight, got, want = 0.0, [], []
    for (picks, weights), r in zip(seen, routers):
        zero = picks >= 8
        # a layer's zero picks per token within 0.1 of the target's (5% of the picks: 2,048
        # picks, each layer's own router weight at hidden 64, the deeper layers' offsets
        # scaled by 1/RMS), all layers' together within 5%
        got.append(zero.float().mean().item() * 2)
        want.append(r.target[8:].sum())
        assert abs(got[-1] - want[-1]) <= 0.1, (profile, r.layer, got[-1], want[-1])
        zero_weight += (weights * zero).sum(-1).mean().item()
    print(f"\n{profile}: zero picks a token {min(got):.2f}-{max(got):.2f} (targets "
          f"{min(want):.3f}-{max(want):.3f}), their weights {zero_weight:.3f} over every layer, "
          f"residual RMS {min(rms):.2f}-{max(rms):.2f}")  # fmt: skip
    assert sum(got) == pytest.approx(sum(want), rel=0.05)
    assert zero_weight < 0.3, zero_weight
