"""The MTP layers in SGLang 0.5.23's own speculative draft classes: ``DeepseekV3ForCausalLMNextN``
(DeepSeek-V3, bf16 and FP8 block), ``Glm4MoeForCausalLMNextN`` (GLM-4.5) and
``Qwen3NextForCausalLMMTP`` (Qwen3-Next), built on this CPU as SGLang builds its draft (its
draft model config: helpers/sglang_models.py's ``build(..., draft=True)``), filled by
``FP8_DUMMY_SGLANG=realistic`` with ``$FP8_DUMMY_ACCEPTANCE``, at TP=1 (one process) and TP=2
(two gloo processes). The oracle: the export of the same config and acceptance read by SGLang's
own safetensors reader into a twin through the class's ``load_weights``; every parameter
written by both (the two poisoned apart), byte for byte equal. What neither writes is what
SGLang's draft classes take from no checkpoint: the embedding and lm_head (SGLang hands the
draft the target's at run time) and FP8 attention's KV-cache scales. SGLang's NextN takes one
MTP layer. Without SGLang: skipped, with why."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "sglang_mtp_worker.py"

try:
    import sglang.srt.model_loader.weight_utils  # noqa: F401
except Exception as e:  # noqa: BLE001 (not installed, or not for this torch)
    if os.environ.get("FP8_DUMMY_REQUIRE_ENGINES") == "1":  # CI: missing is a failure
        raise
    pytest.skip(
        f"SGLang is not importable here ({type(e).__name__}: {e}); scripts/ci_engines.sh "
        "installs it",
        allow_module_level=True,
    )

from helpers import sglang_models as S  # noqa: E402
from helpers import vllm_mtp_models as T  # noqa: E402
from helpers import workers as W  # noqa: E402

from fp8_dummy.realistic.export import export  # noqa: E402

# case -> (model, quantization, acceptance)
CASES = {
    "deepseek_v3-bf16": ("deepseek_v3", "bf16", 0.6),
    "deepseek_v3-blk": ("deepseek_v3", "blk", 0.8),
    "deepseek_v3-plain": ("deepseek_v3", "bf16", None),
    "glm4_moe-bf16": ("glm4_moe", "bf16", 0.6),
    "qwen3_next-bf16": ("qwen3_next", "bf16", 0.6),
}
CLASSES = {
    "deepseek_v3": "DeepseekV3ForCausalLMNextN",
    "glm4_moe": "Glm4MoeForCausalLMNextN",
    "qwen3_next": "Qwen3NextForCausalLMMTP",
}


def _config(model: str, quant: str) -> dict:
    config = dict(S.MODELS.get(model) or dict(S.V.COMMON, **T.MODELS[model]))
    config["num_nextn_predict_layers"] = 1
    if S.QUANTS[quant]:
        config["quantization_config"] = S.QUANTS[quant]
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sglang-mtp")
    for case, (model, quant, acceptance) in CASES.items():
        source = root / case / "source"
        source.mkdir(parents=True)
        (source / "config.json").write_text(json.dumps(_config(model, quant)))
        export(source, root / case / "checkpoint", acceptance=acceptance, progress=False,
               allow_unknown=True)  # fmt: skip
    (root / "cases.json").write_text(json.dumps({c: v[2] for c, v in CASES.items()}))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("FP8_DUMMY_ROUTING", None)
    ranks = [(1, 0), (2, 0), (2, 1)]
    ports = {1: W.free_port(), 2: W.free_port()}
    command = [sys.executable, str(WORKER)]
    logs = W.run_together(
        [
            command + [str(w), str(r), str(ports[w]), str(root), str(root), str(ROOT)]
            for w, r in ranks
        ],
        env,
        timeout=900,
    )
    out = {}
    for (w, r), log in zip(ranks, logs):
        path = root / f"{w}-{r}.json"
        assert path.exists(), f"TP={w} rank {r} wrote nothing:\n{log[-3000:]}"
        found = json.loads(path.read_text())
        assert "error" not in found, f"TP={w} rank {r}:\n{found['error']}"
        assert sorted(found) == sorted(CASES)
        out[(w, r)] = found
    return out


def _shared_or_kv(name: str) -> bool:
    return name in ("lm_head.weight", "model.embed_tokens.weight") or name.endswith(
        (".k_scale", ".v_scale")
    )


@pytest.mark.parametrize("case", CASES)
def test_the_draft_holds_the_export(runs, case):
    one = runs[(1, 0)][case]
    for (w, r), found in runs.items():
        got = found[case]
        where = (case, w, r)
        assert "error" not in got, (where, got["error"])
        assert got["class"] == CLASSES[CASES[case][0]]
        assert got["mismatch"] == [] and got["checked"] > 10, (where, got)
        assert got["unreached"] == got["unread"], (where, got)  # none written by one side only
        assert all(_shared_or_kv(n) for n in got["unreached"]), (where, got["unreached"])
        if w == 2:
            sharded = sum(got["shapes"][n] != s for n, s in one["shapes"].items())
            assert sharded >= 2, (where, sharded)
