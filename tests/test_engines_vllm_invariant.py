"""fp8_dummy.vllm.initialize_invariant_dummy_weights and --load-format fp8_dummy_invariant
against vLLM 0.33's real parallel layers on the CPU, in 1, 2 and 4 gloo processes.

The oracle, independent of our placement rules: the TP=1 tensor of each parameter (the
stateless fill of its logical shape, which vLLM's own TP=1 layer gives) fed to vLLM's OWN
``weight_loader`` on each rank the way a checkpoint is fed (q/k/v and gate/up shard by
shard, MoE experts one by one); every rank's tensor must equal it byte for byte. Layers:
Column, Merged, QKV with KV heads replicated and split, Row, Replicated,
VocabParallelEmbedding, ParallelLMHead (padding, LoRA rows), FP8 per-tensor and block
scales, FusedMoE (bf16 and FP8) at TP and at EP with linear and round-robin placement.
A negative control (QKV through the merged-column rule, which ignores KV-head
replication) must be caught by the same comparison. (--load-format fp8_dummy_realistic goes
through a model's own load_weights: tests/test_engines_vllm_invariant_models.py.) Without
vLLM 0.33: skipped, with why.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import workers as W

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_invariant_worker.py"


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


def run_world(world: int, tmp: Path) -> list[dict]:
    """Start ``world`` worker processes (one gloo group) and collect their findings."""
    port = W.free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    commands = [
        [sys.executable, str(WORKER), str(r), str(world), str(port), str(tmp), str(ROOT)]
        for r in range(world)
    ]
    logs = W.run_together(commands, env, timeout=600)
    results = []
    for r in range(world):
        path = tmp / f"{r}.json"
        assert path.exists(), f"rank {r} wrote nothing:\n{logs[r][-3000:]}"
        result = json.loads(path.read_text())
        assert "error" not in result, f"rank {r}:\n{result['error']}"
        results.append(result)
    return results


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda w: f"world{w}")
def world(request, tmp_path_factory):
    w = request.param
    return w, run_world(w, tmp_path_factory.mktemp(f"world{w}"))


def test_every_rank_matches_vllms_own_loader(world):
    w, results = world
    for r in results:
        assert r["checked"] > 50
        assert r["mismatch"] == [], f"rank {r['rank']} of {w}: {r['mismatch']}"
    # EP really was on (an expert map) where asked, off at TP, with the placement asked for.
    for r in results:
        for name, (has_map, strategy) in r["experts"].items():
            assert has_map == (w > 1 and not name.startswith("moe_tp")), name
            if has_map:
                want = "round_robin" if "round_robin" in name else "linear"
                assert strategy == want, (name, strategy)


def test_negative_control_ignoring_kv_replication_is_caught(world):
    w, results = world
    caught = sorted({n for r in results for n in r["negative"]})
    if w == 1:  # no replication at TP=1: the wrong rule is right there
        assert caught == []
        return
    # TP=2: qkv_rep1 replicates its one KV head; TP=4: qkv_rep1 and qkv_rep2 (and the
    # FP8 QKV, 2 KV heads) replicate. Layers without replication stay right.
    assert "qkv_rep1.weight" in caught and "qkv_rep1.bias" in caught
    if w == 4:
        assert {"qkv_rep2.weight", "fp8_qkv.weight"} <= set(caught)
    assert all(n.split(".")[0] in ("qkv_rep1", "qkv_rep2", "fp8_qkv") for n in caught), caught


def test_values_not_degenerate(world):
    _, results = world
    for r in results:
        v = r["values"]
        if v["fp8_numel"] >= 65536:  # the whole 256 x 256 FP8 weight (TP=1)
            assert v["fp8_distinct"] >= 64, v
        assert v["same_shape_differ"]
        assert v["out_of_bounds"] == []


def test_uncovered_layers_raise_the_named_error(world):
    _, results = world
    for r in results:
        first, second = r["uncovered"]["none"], r["uncovered"]["custom"]
        assert first["raised"] and first["untouched"], first
        assert "'custom.weight'" in first["raised"]
        assert "CustomColumn" in first["raised"] and "ModelWeightParameter" in first["raised"]
        assert second["raised"] and second["untouched"], second
        assert "'mamba.conv'" in second["raised"] and "Parameter" in second["raised"]


def test_load_format_through_get_model_loader(world):
    _, results = world
    for r in results:
        lf = r["load_format"]
        assert lf["loader"] == "FP8DummyInvariantModelLoader"
        assert lf["differ"] == []
