"""Routing profiles of the realistic fill (docs/realistic.md#routing), measured through
transformers' own model classes: the load each router's own top-k gives on 4,096 random tokens
against a target computed here by an independent numpy sampler (k draws without replacement,
one after the other), never by the fill's own computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import fill_, model_specs, model_tensors
from fp8_dummy.realistic import routing as R
from fp8_dummy.stateless import tensor_seed

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

TOKENS = 4096


def successive_sampling(p: np.ndarray, k: int, draws: int, seed: int = 0) -> np.ndarray:
    """Inclusion probabilities of k draws without replacement from popularity p: each draw
    picks among the experts not yet drawn in proportion to p (an inverse-CDF draw each)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(p))
    left = np.tile(p, (draws, 1))
    for _ in range(k):
        cdf = np.cumsum(left, axis=1)
        u = rng.random(draws) * cdf[:, -1]
        pick = np.minimum((cdf < u[:, None]).sum(1), len(p) - 1)
        counts += np.bincount(pick, minlength=len(p))
        left[np.arange(draws), pick] = 0
    return counts / draws


def zipf_oracle(experts: int, k: int, alpha: float) -> np.ndarray:
    p = np.arange(1, experts + 1, dtype=np.float64) ** -alpha
    return successive_sampling(p / p.sum(), k, 100_000)


@pytest.mark.parametrize("experts,k,alpha", [(8, 2, 1.0), (64, 8, 1.2), (60, 4, 0.5), (32, 6, 2.0)])
def test_zipf_target_is_k_draws_without_replacement(experts, k, alpha):
    ours = R.zipf_target(experts, k, alpha)
    want = zipf_oracle(experts, k, alpha)
    assert ours.sum() == pytest.approx(k)
    assert np.abs(ours - want).max() < 0.006, np.abs(ours - want).max()


def _common(h: int = 64, layers: int = 3) -> dict:
    return dict(vocab_size=1024, hidden_size=h, intermediate_size=2 * h, num_attention_heads=4,
                num_hidden_layers=layers)  # fmt: skip


def configs(h: int = 64, experts: int = 64, k: int = 8, layers: int = 3) -> dict:
    """Every router kind: softmax top-k with (Qwen3-MoE, Mixtral) and without renormalization
    (Qwen2-MoE, OLMoE), grouped softmax (DeepSeek-V2's group_limited_greedy), sigmoid with
    grouped top-k and correction bias (DeepSeek-V3) or without groups (GLM-4.5), a biased
    router (GPT-OSS); shared experts beside (Qwen2-MoE, DeepSeek, GLM); routers whose weight
    the checkpoint or the class names otherwise: GraniteMoE's and its shared and hybrid
    variants' (``router.layer.weight`` in the checkpoint), JetMoE's (a ``router.layer`` in its
    MLP and in its attention, each routing), HunYuan-MoE's (``gate.wg``)."""
    c = _common(h, layers)
    mla = dict(q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
               v_head_dim=16, num_key_value_heads=4)  # fmt: skip
    return {
        "qwen3_moe": tf.Qwen3MoeConfig(
            num_key_value_heads=2,
            head_dim=16,
            num_experts=experts,
            num_experts_per_tok=k,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            **c,
        ),  # fmt: skip
        "qwen2_moe": tf.Qwen2MoeConfig(
            num_key_value_heads=2,
            num_experts=experts,
            num_experts_per_tok=k,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            **c,
        ),  # fmt: skip
        "mixtral": tf.MixtralConfig(
            num_key_value_heads=2, num_local_experts=experts, num_experts_per_tok=k, **c
        ),
        "olmoe": tf.OlmoeConfig(
            num_key_value_heads=2, num_experts=experts, num_experts_per_tok=k, **c
        ),
        "deepseek_v2": tf.DeepseekV2Config(
            first_k_dense_replace=1,
            n_routed_experts=experts,
            num_experts_per_tok=k,
            n_group=8,
            topk_group=4,
            topk_method="group_limited_greedy",
            n_shared_experts=1,
            moe_intermediate_size=32,
            **mla,
            **c,
        ),  # fmt: skip
        "deepseek_v3": tf.DeepseekV3Config(
            first_k_dense_replace=1,
            n_routed_experts=experts,
            num_experts_per_tok=k,
            n_group=8,
            topk_group=4,
            n_shared_experts=1,
            moe_intermediate_size=32,
            **mla,
            **c,
        ),  # fmt: skip
        "glm4_moe": tf.Glm4MoeConfig(
            first_k_dense_replace=1,
            n_routed_experts=experts,
            num_experts_per_tok=k,
            n_group=1,
            topk_group=1,
            n_shared_experts=1,
            moe_intermediate_size=32,
            num_key_value_heads=2,
            head_dim=16,
            **c,
        ),  # fmt: skip
        "gpt_oss": tf.GptOssConfig(
            num_local_experts=experts,
            num_experts_per_tok=k,
            num_key_value_heads=2,
            head_dim=16,
            layer_types=["full_attention"] * layers,
            **c,
        ),  # fmt: skip
        "granitemoe": tf.GraniteMoeConfig(
            num_key_value_heads=2, num_local_experts=experts, num_experts_per_tok=k, **c
        ),
        "granitemoeshared": tf.GraniteMoeSharedConfig(
            num_key_value_heads=2,
            num_local_experts=experts,
            num_experts_per_tok=k,
            shared_intermediate_size=64,
            **c,
        ),  # fmt: skip
        "granitemoehybrid": tf.GraniteMoeHybridConfig(
            num_key_value_heads=2,
            num_local_experts=experts,
            num_experts_per_tok=k,
            shared_intermediate_size=64,
            mamba_d_head=16,
            mamba_n_heads=h // 8,  # its Mamba width: 2h in heads of 16
            mamba_d_state=16,
            layer_types=(["mamba", "attention"] * layers)[:layers],
            **c,
        ),  # fmt: skip
        "jetmoe": tf.JetMoeConfig(  # its attention's experts: a head per expert picked
            num_key_value_heads=2,
            kv_channels=h // 4,
            num_local_experts=experts,
            num_experts_per_tok=k,
            **{**c, "num_attention_heads": 2 * k},
        ),  # fmt: skip
        "hunyuan_v1_moe": tf.HunYuanMoEV1Config(
            num_key_value_heads=2,
            head_dim=16,
            num_experts=experts,
            moe_topk=k,
            moe_intermediate_size=32,
            **c,
        ),  # fmt: skip
    }


KIND = {  # what each architecture's router is, and where the offsets must go
    "qwen3_moe": "softmax -> residual",
    "qwen2_moe": "softmax -> residual",
    "mixtral": "softmax -> residual",
    "olmoe": "softmax -> residual",
    "deepseek_v2": "softmax 4/8 groups -> residual",
    "deepseek_v3": "sigmoid 4/8 groups -> correction",
    "glm4_moe": "sigmoid -> correction",
    "gpt_oss": "softmax -> bias",
    "granitemoe": "softmax -> residual",
    "granitemoeshared": "softmax -> residual",
    "granitemoehybrid": "softmax -> residual",
    "jetmoe": "softmax -> residual",
    "hunyuan_v1_moe": "softmax -> residual",
}


def build(arch: str, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(configs(**kw)[arch]).eval()


def top_k(config) -> int:
    return config.num_experts_per_tok if hasattr(config, "num_experts_per_tok") else config.moe_topk


def routers_of(model: torch.nn.Module) -> list[tuple[torch.nn.Module, int]]:
    """(router module, its expert count): each module named gate/router with a 2-D weight of
    its own (ERNIE's also holds a 2-D correction bias in a child), or one 2-D parameter in its
    children (JetMoE's ``router.layer``)."""
    found = []
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        own = torch.is_tensor(w) and w.dim() == 2
        wide = [w] if own else [p for p in m.parameters() if p.dim() == 2]
        if name.rsplit(".", 1)[-1] in ("gate", "router") and len(wide) == 1:
            # the routed experts: the correction bias's where the router also scores shared ones
            found.append((m, len(getattr(m, "e_score_correction_bias", wide[0]))))
    return found


def measure(model: torch.nn.Module, batch: int) -> dict:
    """Per MoE router the experts its own top-k picked (its integer output of k per token;
    JetMoE's router returns its own count per expert instead), residual RMS."""
    loads: list = []
    text = model.config.get_text_config()  # a multimodal model's (MiniMax-M3's): its text's
    k = top_k(text)

    def on(experts: int):
        def record(_module, _, out):
            counts = next((o for o in out if isinstance(o, list) and len(o) == experts), None)
            if counts is not None:  # JetMoE's: the tokens of each expert, its own count
                loads.append(np.asarray(counts))
                return
            picked = next(o for o in out if torch.is_tensor(o) and not o.is_floating_point()
                          and o.shape[-1] == k)  # fmt: skip
            loads.append(np.bincount(picked.flatten().numpy(), minlength=experts))

        return record

    hooks = [m.register_forward_hook(on(experts)) for m, experts in routers_of(model)]
    vocab = text.vocab_size
    gen = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, vocab, (TOKENS // 256, 256), generator=gen)
    try:
        with torch.no_grad():
            out = model(ids, output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    rms = [h.pow(2).mean().sqrt().item() for h in out.hidden_states]
    return {"loads": loads, "rms": rms, "finite": bool(torch.isfinite(out.logits).all())}


def tv_sorted(load: np.ndarray, target: np.ndarray) -> float:
    a, b = np.sort(load / load.sum()), np.sort(target / target.sum())
    return 0.5 * float(np.abs(a - b).sum())


def check_zipf(arch: str, alpha: float, seed: int = 0, **kw) -> list[float]:
    return check_zipf_of(build(arch, **kw), alpha, seed)


def check_zipf_of(model: torch.nn.Module, alpha: float, seed: int = 0) -> list[float]:
    fp8_dummy.initialize_realistic_dummy_weights(model, seed, routing=f"zipf:{alpha}")
    k = top_k(model.config)
    one, two = measure(model, 0), measure(model, 1)
    assert one["finite"] and all(0.25 <= r <= 4 for r in one["rms"]), one["rms"]
    experts = len(one["loads"][0])
    target = zipf_oracle(experts, k, alpha)
    tvs, hot = [], []
    for a, b in zip(one["loads"], two["loads"]):
        tvs.append(tv_sorted(a, target))
        assert tvs[-1] <= 0.08, (type(model).__name__, tvs)
        want = target.max() / target.mean()
        assert abs(a.max() / a.mean() / want - 1) <= 0.25, (
            type(model).__name__,
            a.max() / a.mean(),
            want,
        )
        top_a, top_b = set(np.argsort(-a)[:3]), set(np.argsort(-b)[:3])
        assert len(top_a & top_b) >= 2, "hot experts the same on two disjoint batches"
        hot.append(frozenset(top_a))
    assert len(set(hot)) == len(hot), "hot experts differ between layers"
    return tvs


@pytest.mark.parametrize("arch", list(KIND))
def test_zipf_through_each_router_kind(arch):
    model = build(arch)
    specs = model_specs(model, _tensors(model))
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    routers, _ = R.plan_routing(R.parse_routing("zipf:1"), 0, model.config, specs, shapes)
    assert {R.describe(r) for r in routers} == {KIND[arch]}
    check_zipf(arch, 1.2)


def test_zipf_through_longcats_router():
    """LongCat-Flash's router (its weight ``router.classifier``; 16 experts and 4 zero experts
    it picks among alike, top-2): the speculative tests' config, whose forward runs here."""
    from helpers import speculative as H

    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(
        H.config("longcat_flash", hidden=128, vocab=1024, layers=2)
    ).eval()
    specs = model_specs(model, _tensors(model))
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    routers, _ = R.plan_routing(R.parse_routing("zipf:1"), 0, model.config, specs, shapes)
    assert [r.weight.rpartition(".")[0].rpartition(".")[2] for r in routers] == ["classifier"] * 2
    assert {R.describe(r) for r in routers} == {"softmax -> residual"}
    check_zipf_of(model, 1.2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch,kw,alpha",
    [
        ("qwen3_moe", dict(h=128, experts=32, k=4, layers=4), 1.0),
        ("mixtral", dict(h=96, experts=16, k=2, layers=2), 0.8),
        ("deepseek_v3", dict(h=128, experts=128, k=6, layers=3), 1.0),
        ("gpt_oss", dict(h=64, experts=32, k=4, layers=2), 1.5),
    ],
)
def test_zipf_on_other_sizes(arch, kw, alpha):
    check_zipf(arch, alpha, seed=3, **kw)


def _tensors(model: torch.nn.Module) -> list:
    return model_tensors(model)


def recorded(layers: int, experts: int, k: int, seed: int) -> list[list[float]]:
    """A recorded-looking load: lognormal counts with no share above 1/k."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(layers):
        x = rng.lognormal(0, 1.0, experts)
        x = np.minimum(x / x.sum(), 0.9 / k)
        rows.append([float(v) * 1e5 for v in x])
    return rows


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_a_recorded_load_expert_by_expert(arch, tmp_path):
    model = build(arch)
    moe = len(routers_of(model))
    k = model.config.num_experts_per_tok
    loads = recorded(moe, 64, k, seed=5)
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"expert_load": loads}))
    fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing=str(path))
    got = measure(model, 0)
    for a, want in zip(got["loads"], loads):
        share, target = a / a.sum(), np.asarray(want) / sum(want)
        assert 0.5 * np.abs(share - target).sum() <= 0.08


def _poisoned(model: torch.nn.Module) -> dict:
    with torch.no_grad():
        for t in model.state_dict().values():
            t.view(torch.uint8).fill_(0x5A) if t.element_size() == 1 else t.fill_(7.0)
    return {n: t.clone() for n, t in model.state_dict().items()}


@pytest.mark.parametrize(
    "rows,message",
    [
        (lambda L, E: [[1.0] * E] * (L + 1), "MoE layers"),
        (lambda L, E: [[1.0] * (E - 1)] * L, "has 63 experts"),
        (lambda L, E: [[1.0] * E] * (L - 1) + [[1.0] * 10 + [1e6] + [1.0] * (E - 11)], "expert 10"),
        (lambda L, E: [[1.0] * E] * (L - 1) + [[1.0] * 3 + [-1.0] + [1.0] * (E - 4)], "expert 3"),
        (lambda L, E: [[1.0] * E] * (L - 1) + [[math.nan] + [1.0] * (E - 1)], "expert 0"),
        (lambda L, E: [[0.0] * E] * L, "no load"),
    ],
)
def test_unreachable_targets_are_refused_before_anything_is_written(rows, message, tmp_path):
    model = build("qwen3_moe")
    before = _poisoned(model)
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"expert_load": rows(3, 64)}))
    with pytest.raises(R.RoutingError, match=message):
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing=str(path))
    after = model.state_dict()
    assert all(torch.equal(before[n].view(torch.uint8), after[n].view(torch.uint8)) for n in before)


@pytest.mark.parametrize(
    "routing", ["zipf:-1", "zipf:nan", "zipf:x", "zipf:inf", "nowhere.json", "balanced2"]
)
def test_bad_profiles_are_refused(routing):
    model = build("mixtral")
    before = _poisoned(model)
    with pytest.raises(R.RoutingError):
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing=routing)
    after = model.state_dict()
    assert all(torch.equal(before[n].view(torch.uint8), after[n].view(torch.uint8)) for n in before)


def test_routing_on_a_model_without_a_router_is_refused():
    model = tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(**_common())).eval()
    with pytest.raises(R.RoutingError, match="no router"):
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing="zipf:1")


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_balanced_is_todays_bytes(arch):
    """'balanced' (and no argument) writes exactly each checkpoint tensor's spec by its own
    key: the fill without any routing machinery, rebuilt here tensor by tensor."""
    from fp8_dummy.realistic import checkpoint_state, logical_model

    model = build(arch)
    specs = logical_model(model, 0).specs
    for name, view in checkpoint_state(model).items():
        fill_(view, specs[name], tensor_seed(0, name))
    want = {n: t.clone() for n, t in model.state_dict().items()}
    for kw in ({}, {"routing": "balanced"}):
        _poisoned(model)
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, **kw)
        got = model.state_dict()
        assert all(torch.equal(want[n].view(torch.uint8), got[n].view(torch.uint8)) for n in want)


def _bytes(model: torch.nn.Module) -> dict:
    return {n: t.clone().view(torch.uint8) for n, t in model.state_dict().items()}


def test_deterministic_per_seed_name_and_profile(tmp_path):
    model = build("qwen3_moe")
    fp8_dummy.initialize_realistic_dummy_weights(model, 4, routing="zipf:1.1")
    first = _bytes(model)
    _poisoned(model)
    fp8_dummy.initialize_realistic_dummy_weights(model, 4, routing="zipf:1.1")
    assert all(torch.equal(first[n], v) for n, v in _bytes(model).items())
    fp8_dummy.initialize_realistic_dummy_weights(model, 5, routing="zipf:1.1")
    gate = "model.layers.1.mlp.gate.weight"
    assert not torch.equal(first[gate], _bytes(model)[gate])
    fp8_dummy.initialize_realistic_dummy_weights(model, 4, routing="zipf:1.3")
    assert not torch.equal(first[gate], _bytes(model)[gate])


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_every_block_of_a_tensor_holds_the_whole_tensors_values(arch):
    """Layout invariance: each tensor's row, column and strided blocks, filled by fill_ at
    their element offset and strides, equal the same block of the whole tensor."""
    from fp8_dummy.stateless import row_major_strides

    model = build(arch)
    tensors = _tensors(model)
    specs = model_specs(model, tensors)
    shapes = {n: tuple(s) for _, n, _, s in tensors}
    _, overrides = R.plan_routing(R.parse_routing("zipf:1.2"), 0, model.config, specs, shapes)
    assert overrides
    for name, more in overrides.items():
        t = dict(model.state_dict())[name]
        whole = fill_(torch.empty_like(t), specs[name], 9, overrides=more)
        strides = row_major_strides(t.shape)
        for dim in range(t.dim()):
            size = t.shape[dim]
            for sl in (slice(0, size // 2), slice(size // 2, size), slice(1, size, 3)):
                want = whole.narrow(dim, 0, size)[(slice(None),) * dim + (sl,)]
                block = torch.empty_like(want)
                start, step = sl.start, sl.step or 1
                offset = start * strides[dim]
                es = [s * (step if d == dim else 1) for d, s in enumerate(strides)]
                fill_(block, specs[name], 9, element_offset=offset, element_strides=es,
                      overrides=more, logical_shape=t.shape)  # fmt: skip
                assert torch.equal(block.view(torch.uint8), want.contiguous().view(torch.uint8)), (
                    name,
                    dim,
                    sl,
                )


def test_routing_report_cli(tmp_path, capsys):
    from fp8_dummy.realistic.routing.report import main

    config = configs()["deepseek_v3"]
    config.save_pretrained(tmp_path)
    out = tmp_path / "r.json"
    assert main([str(tmp_path), "--routing", "zipf:1.2", "--ep", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "sigmoid 4/8 groups -> correction" in text
    report = json.loads(out.read_text())
    assert report["measured"] and len(report["layers"]) == 2
    target = zipf_oracle(64, 8, 1.2)
    for layer in report["layers"]:
        assert layer["predicted"]["tv"] <= 0.05 and layer["measured"]["tv"] <= 0.08
        assert abs(layer["target"]["max_mean"] / (target.max() / target.mean()) - 1) < 0.02
        assert layer["measured"]["ep_max_mean"] >= 1
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), "--routing", "zipf:-2"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--routing", "zipf:1", "--json", str(tmp_path / "no" / "r.json")])


def test_the_engines_choice(monkeypatch):
    """An engine's own configuration first, then $FP8_DUMMY_ROUTING, then balanced."""
    monkeypatch.delenv(R.ENV, raising=False)
    assert R.chosen_routing() == "balanced"
    monkeypatch.setenv(R.ENV, " zipf:1.5 ")
    assert R.chosen_routing() == "zipf:1.5"
    assert R.chosen_routing("zipf:0.5") == "zipf:0.5"
    assert R.parse_routing(R.chosen_routing()).alpha == 1.5


# SHA-1 of the solved offsets (float64 bytes), as this repository's machines compute them:
# the solve converges far below the rounding grid, so another machine, numpy or torch must
# give the same bits (torch 2.13 and 2.14 did); a change of method must update these.
PINNED = [
    ((4, 2, 1.2, {}), "99056155db"),
    ((64, 8, 1.2, {"score": "sigmoid"}), "01a2bff934"),
    ((64, 8, 1.2, {"score": "sigmoid", "groups": 8, "topk_group": 4}), "0531c4eace"),
    ((32, 4, 1.0, {"groups": 4, "topk_group": 2, "group_score": "max"}), "5cfa63ef8d"),
]


@pytest.mark.parametrize("case,digest", PINNED)
def test_offsets_are_the_same_bits_everywhere(case, digest):
    import hashlib

    experts, k, alpha, kw = case
    b = R.solve_offsets(R.Router(0, "", experts, 0, k, **kw), R.zipf_target(experts, k, alpha))
    assert hashlib.sha1(b.tobytes()).hexdigest()[:10] == digest


def test_a_quantized_router_without_a_bias_is_refused():
    """Its offsets would have to be FP8 codes of its scale: refused, nothing written."""
    model = build("qwen3_moe")
    gate = model.model.layers[1].mlp.gate
    gate.weight = torch.nn.Parameter(gate.weight.data.to(torch.float8_e4m3fn), False)
    before = _poisoned(model)
    with pytest.raises(R.RoutingError, match="layers.1.mlp.gate.weight: a torch.float8_e4m3fn"):
        fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing="zipf:1")
    after = model.state_dict()
    assert all(torch.equal(before[n].view(torch.uint8), after[n].view(torch.uint8)) for n in before)
