"""--load-format fp8_dummy_invariant on vLLM 0.33's own model classes: Llama, Qwen3-MoE and
DeepSeek-V3, each in bf16, FP8 per-tensor (static activation scales) and FP8 block, built by
``initialize_model`` from tiny configs on the CPU (helpers/vllm_invariant_models.py says
how, and what is replaced to build them without vLLM's GPU kernels), at TP=1 and at TP=2
(2 gloo processes).

The oracle, independent of our placement rules: a zeroed copy of the same model loaded by
its own ``load_weights`` (vLLM's name mapping, stacked shards, expert mapping and
``weight_loader`` s) from an HF-style checkpoint made of the TP=1 model's tensors. Each
TP=2 rank must equal it byte for byte, and the TP=1 model must equal the format's logical
tensors (restated from its definition). Negative controls: a KV-cache-scale rule that
shards the replicated scalar is caught on the rank it gets wrong; without the rule, the
FP8 models are refused by name before anything is written (the state before the rule).
--load-format fp8_dummy_realistic (Llama, Qwen3-MoE, DeepSeek-V3 and Step-3.5-Flash's text
model in bf16 and FP8 block, Mixtral in bf16; Qwen3-MoE and DeepSeek-V3 also with a routing
profile): the checkpoint fp8_dummy's
``export`` writes for the same config and seed, loaded by vLLM's own safetensors loader into
a twin of the model, must equal the in-engine fill byte for byte, at TP=1, at TP=2 and with
EP. Without vLLM 0.33: skipped, with why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import workers as W

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_invariant_models_worker.py"
MODELS = ("llama", "qwen3_moe", "deepseek_v3")
QUANTS = ("bf16", "fp8", "blk")
EP_CASES = (("qwen3_moe", "fp8"), ("deepseek_v3", "blk"))  # also at TP=2 with EP
REALISTIC = [f"{m}-{q}-realistic" for m in MODELS for q in ("bf16", "blk")]
REALISTIC += ["mixtral-bf16-realistic"]  # and deepseek_v3's FP8 block one with EP
REALISTIC += ["step3p5-bf16-realistic", "step3p5-blk-realistic"]  # Step-3.5-Flash's text model
ROUTED_QUANT = {"qwen3_moe": "bf16", "deepseek_v3": "blk"}  # with a routing profile
ROUTED = [f"{m}-{q}-routed" for m, q in ROUTED_QUANT.items()]
# What vLLM 0.33 creates in these models (Fp8Config: Fp8LinearMethod, Fp8MoEMethod's plain
# parameters, Fp8KVCacheMethod on every standard Attention layer; MLA layers have none).
FP8_CLASSES = {
    "Parameter",
    "ModelWeightParameter",
    "PerTensorScaleParameter",
    "BlockQuantScaleParameter",
    "KVCacheScaleParameter",
}

try:  # importable here, not only installed (the workers import it the same way)
    import vllm

    _VERSION = vllm.__version__
except Exception as e:  # noqa: BLE001 (not installed, or not for this torch)
    if os.environ.get("FP8_DUMMY_REQUIRE_ENGINES") == "1":  # CI: missing is a failure
        raise
    pytest.skip(
        f"vLLM is not importable here ({type(e).__name__}: {e}); scripts/ci_engines.sh installs it",
        allow_module_level=True,
    )
if not _VERSION.startswith("0.33."):
    pytest.skip(f"the rules are vLLM 0.33's; this is vLLM {_VERSION}", allow_module_level=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Two worker processes (one gloo group): TP=1, each its half of the models, then TP=2.
    {1: {case: findings}, 2: [{case: findings} of each rank]}."""
    tmp = tmp_path_factory.mktemp("models")
    results = W.pair(WORKER, tmp, ROOT)
    tp1 = {case: r for result in results for case, r in result["1"].items()}
    want = [f"{m}-{q}" for m in MODELS for q in QUANTS] + REALISTIC + ROUTED
    assert sorted(tp1) == sorted(want)
    want += [f"{m}-{q}-ep" for m, q in EP_CASES] + ["deepseek_v3-blk-realistic-ep"]
    want += ["deepseek_v3-blk-routed-ep"]
    for result in results:
        assert sorted(result["2"]) == sorted(want)
    return {1: tp1, 2: [dict(result["2"], rank=result["rank"]) for result in results]}


def _case(cases: dict, model: str, quant: str) -> dict:
    r = cases[f"{model}-{quant}"]
    assert "error" not in r, f"{model} {quant} at rank {cases.get('rank', '-')}: {r['error']}"
    return r


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("model", MODELS)
def test_tp1_is_the_logical_model_and_vllms_loader_agrees(runs, model, quant):
    r = _case(runs[1], model, quant)
    assert r["tp"] == 1 and all(e == [False, 4] for e in r["experts"]), r
    assert r["logical"] == [], r["logical"]
    assert r["not_loaded"] == [] and r["mismatch"] == [], r
    assert r["checked"] >= 15


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("model", MODELS)
def test_each_tp2_rank_equals_vllms_loader_fed_the_tp1_tensors(runs, model, quant):
    for result in runs[2]:
        r = _case(result, model, quant)
        where = f"rank {result['rank']}"
        assert r["tp"] == 2 and r["sharded"] >= 4, (where, r["sharded"])  # fewer rows/columns
        assert all(not has_map for has_map, _ in r["experts"]), (where, r["experts"])  # TP
        assert r["not_loaded"] == [], (where, r["not_loaded"])
        assert r["mismatch"] == [], (where, r["mismatch"])
        assert r["buffers"] == [], (where, r["buffers"])


@pytest.mark.parametrize(("model", "quant"), EP_CASES)
def test_expert_parallel_ranks_equal_vllms_loader_fed_the_tp1_tensors(runs, model, quant):
    for result in runs[2]:
        r = _case(result, model, f"{quant}-ep")
        where = f"rank {result['rank']}"
        assert r["experts"] and all(e == [True, 2] for e in r["experts"]), (where, r["experts"])
        assert r["not_loaded"] == [] and r["mismatch"] == [], (where, r)
        assert r["buffers"] == [], (where, r["buffers"])


@pytest.mark.parametrize("model", MODELS)
def test_fp8_models_hold_the_parameter_classes_found(runs, model):
    """The FP8 builds create the parameter classes listed above (and the KV-cache scales
    on standard Attention layers only: MLA has none), with non-degenerate FP8 values."""
    for world, cases in [(1, runs[1])] + [(2, rank) for rank in runs[2]]:
        for quant in ("fp8", "blk"):
            r = _case(cases, model, quant)
            assert set(r["classes"]) <= FP8_CLASSES, r["classes"]
            scale = "PerTensorScaleParameter" if quant == "fp8" else "BlockQuantScaleParameter"
            assert scale in r["classes"]
            has_kv = model != "deepseek_v3"
            assert ("KVCacheScaleParameter" in r["classes"]) == has_kv, (world, r["classes"])
            assert len(r["kv_scales"]) == (8 if has_kv else 0)  # 4 per layer
            assert r["distinct_fp8"] >= 100, r["distinct_fp8"]  # of at most 114 in +-1


def _fp8_with_kv_scales():
    return [(m, q) for m in MODELS if m != "deepseek_v3" for q in ("fp8", "blk")]


@pytest.mark.parametrize(("model", "quant"), _fp8_with_kv_scales())
def test_negative_control_a_sharded_kv_scale_is_caught(runs, model, quant):
    """Each rank its own element of a [tp]-long scale: right at TP=1 (element 0) and on
    rank 0, wrong on rank 1, and the comparison says so for exactly the KV-cache scales."""
    assert _case(runs[1], model, quant)["negative"] == []
    rank0, rank1 = (_case(result, model, quant) for result in runs[2])
    assert rank0["negative"] == []
    assert rank1["negative"] == rank1["kv_scales"] != []


@pytest.mark.parametrize(("model", "quant"), _fp8_with_kv_scales())
def test_without_the_rule_the_model_is_refused_before_writing(runs, model, quant):
    for world, cases in [(1, runs[1])] + [(2, rank) for rank in runs[2]]:
        r = _case(cases, model, quant)["no_rule"]
        assert r["raised"] and r["raised"].startswith("UncoveredParameterError"), r
        assert "'model.layers.0.self_attn.attn.q_scale'" in r["raised"], r
        assert "KVCacheScaleParameter" in r["raised"], r
        assert r["untouched"], (world, r)


@pytest.mark.parametrize("case", REALISTIC)
def test_realistic_is_the_export_loaded_by_vllms_safetensors_loader(runs, case):
    """At TP=1, TP=2 (and with EP for DeepSeek-V3): the in-engine fill == vLLM's own
    safetensors loader reading the export of the same config, every tensor byte for byte;
    nothing the checkpoint should reach left unwritten (KV-cache scales excepted: no
    checkpoint holds them)."""
    model, quant, _ = case.split("-")
    r = _case(runs[1], model, f"{quant}-realistic")
    assert r["not_loaded"] == [] and r["mismatch"] == [] and r["checked"] > 20, r
    assert r["materialized"] == [], r["materialized"]  # each copy wrote its block, no more
    assert all(
        n.endswith(("k_scale", "v_scale", "q_scale", "prob_scale")) for n in r["kv_unloaded"]
    )
    if quant == "blk":
        assert r["distinct_fp8"] > 114, r["distinct_fp8"]  # more codes than +-1 holds
    suffixes = [f"{quant}-realistic"] + (
        ["blk-realistic-ep"] if case == "deepseek_v3-blk-realistic" else []
    )
    for result in runs[2]:
        for suffix in suffixes:
            r2 = _case(result, model, suffix)
            where = (result["rank"], suffix)
            sharded = sum(r2["shapes"][n] != s for n, s in r["shapes"].items())
            assert r2["tp"] == 2 and sharded >= 4, (where, sharded)
            assert r2["not_loaded"] == [] and r2["mismatch"] == [], (where, r2)
            assert r2["materialized"] == [], (where, r2["materialized"])


def test_realistic_names_a_parameter_the_checkpoint_never_reaches(runs):
    """A config that has vLLM quantize Qwen3-MoE's router (no ignored_layers), while the
    checkpoint keeps routers unquantized: the router's block scale is never reached, and the
    load fails naming it instead of leaving it uninitialized."""
    message = _case(runs[1], "qwen3_moe", "blk-realistic")["unreached"]
    assert "not initialized from checkpoint" in message and "mlp.gate.weight_scale_inv" in message


@pytest.mark.parametrize("model", ["qwen3_moe", "deepseek_v3"])
def test_routed_every_rank_is_its_slice_of_the_functions_routed_model(runs, model):
    """--model-loader-extra-config '{"routing": "zipf:1.2"}': at TP=1 the bytes of
    initialize_realistic_dummy_weights(model, routing="zipf:1.2") on vLLM's own classes (the
    router's offsets, the residual carrier), at TP=2 and with EP each rank its slice."""
    quant = ROUTED_QUANT[model]
    r = _case(runs[1], model, f"{quant}-routed")
    assert r["not_loaded"] == [] and r["mismatch"] == [], r
    balanced = _case(runs[1], model, f"{quant}-realistic")["routers"]
    changed = [n for n, v in r["routers"].items() if v != balanced[n]]
    assert changed and all(".mlp.gate." in n or "embed" in n for n in changed), changed
    # The same routing as transformers' own class of the same config: the same offsets in
    # the router's last column (no bias: the residual carrier) or its correction bias.
    import torch
    import transformers
    from helpers import vllm_invariant_models as M

    import fp8_dummy

    fields = dict(M.COMMON, **M.MODELS[model])
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    theirs = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    fp8_dummy.initialize_realistic_dummy_weights(theirs, 0, routing=M.ROUTING)
    state = theirs.state_dict()
    assert r["offsets"]
    biased = {n.rpartition(".")[0] for n in r["offsets"] if n.endswith("correction_bias")}
    for name, values in r["offsets"].items():
        if name.rpartition(".")[0] in biased and name.endswith("weight"):
            continue  # the offsets are in the bias: the weight's column is random
        ours = torch.tensor(values).to(state[name].dtype)  # vLLM keeps the bias in float32
        t = state[name]
        assert torch.equal(t if t.dim() == 1 else t[:, -1], ours), name
    suffixes = [f"{quant}-routed"] + (["blk-routed-ep"] if model == "deepseek_v3" else [])
    for result in runs[2]:
        for suffix in suffixes:
            r = _case(result, model, suffix)
            where = (result["rank"], suffix)
            assert r["tp"] == 2 and r["not_loaded"] == [] and r["mismatch"] == [], (where, r)


def test_realistic_loader_takes_routing_and_refuses_other_extra_config():
    """The profile comes through vLLM's model_loader_extra_config (which vLLM's dummy loader
    itself refuses); a bad profile or an unknown key fails when the loader is made."""
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    from fp8_dummy import vllm as vllm_plugin
    from fp8_dummy.realistic import RoutingError

    vllm_plugin.register()

    def loader(extra):
        config = LoadConfig(load_format="fp8_dummy_realistic", model_loader_extra_config=extra)
        return get_model_loader(config)

    assert loader({"routing": "zipf:1.1"}).routing.alpha == 1.1
    assert loader({}).routing.kind == "balanced"
    with pytest.raises(ValueError, match="not understood"):
        loader({"routin": "zipf:1"})
    with pytest.raises(RoutingError, match="zipf:A"):
        loader({"routing": "zipf:-1"})
