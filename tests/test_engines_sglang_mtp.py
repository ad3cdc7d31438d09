"""The MTP layers in SGLang 0.5.23's own speculative draft classes:
``DeepseekV3ForCausalLMNextN`` (DeepSeek-V3, bf16 and FP8 block), ``Glm4MoeForCausalLMNextN``
(GLM-4.5), ``Qwen3NextForCausalLMMTP`` (Qwen3-Next), ``Qwen3_5ForCausalLMMTP`` (Qwen3.5, dense
and MoE), ``Ernie4_5_MoeForCausalLMMTP`` (ERNIE 4.5 MoE), ``HYV3ForCausalLMNextN`` (HY-V3),
``GlmOcrForConditionalGenerationNextN`` (GLM-OCR's multimodal checkpoint),
``Glm4MoeLiteForCausalLMNextN`` (GLM-4.7-Flash, whose config SGLang's MLA attention rewrites
while it builds the model), ``NemotronHForCausalLMMTP`` (Nemotron-H's MTP step, whose class
sets its config's main layers to the step's) and ``LongcatFlashForCausalLMNextN``
(LongCat-Flash, whose draft config SGLang's draft settings give one layer: the main model's
depth comes from the target built before it): the fill reads the config as SGLang handed the
class, before it built (tests/test_sglang_config_as_given.py). Built on this CPU as SGLang's
scheduler builds them, the target (where it builds here: :data:`NO_TARGET`), then its draft
(its draft model config: helpers/sglang_models.py's ``build(..., draft=True)``, through the
plugin's hook on SGLang's model construction), filled by
``FP8_DUMMY_SGLANG=realistic`` with ``$FP8_DUMMY_ACCEPTANCE``, at TP=1 (one process) and TP=2
(two gloo processes). The oracle: the export of the same config and acceptance read by SGLang's
own safetensors reader into a twin through the class's ``load_weights``; every parameter
written by both (the two poisoned apart), byte for byte equal. What neither writes is what
SGLang's draft classes take from no checkpoint: the embedding and lm_head (SGLang hands the
draft the target's at run time) and FP8 attention's KV-cache scales. SGLang's NextN takes one
MTP layer (Nemotron-H's: one step). Without SGLang: skipped, with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "sglang_mtp_worker.py"

require("sglang.srt.model_loader.weight_utils")

from helpers import sglang_models as S  # noqa: E402
from helpers import vllm_mtp_models as T  # noqa: E402

from fp8_dummy.realistic.export import export  # noqa: E402

# case -> (model, quantization, acceptance)
CASES = {
    "deepseek_v3-bf16": ("deepseek_v3", "bf16", 0.6),
    "deepseek_v3-blk": ("deepseek_v3", "blk", 0.8),
    "deepseek_v3-plain": ("deepseek_v3", "bf16", None),
    "glm4_moe-bf16": ("glm4_moe", "bf16", 0.6),
    "qwen3_next-bf16": ("qwen3_next", "bf16", 0.6),
    "qwen3_5_text-bf16": ("qwen3_5_text", "bf16", 0.6),
    "qwen3_5_moe_text-bf16": ("qwen3_5_moe_text", "bf16", 0.6),
    "glm4_moe_lite-bf16": ("glm4_moe_lite", "bf16", 0.6),
    "ernie4_5_moe-bf16": ("ernie4_5_moe", "bf16", 0.6),
    "hy_v3-bf16": ("hy_v3", "bf16", 0.6),
    "glm_ocr-bf16": ("glm_ocr", "bf16", 0.6),
    "nemotron_h-bf16": ("nemotron_h", "bf16", 0.6),
    "longcat_flash-bf16": ("longcat_flash", "bf16", 0.6),
}
CLASSES = {
    "deepseek_v3": "DeepseekV3ForCausalLMNextN",
    "glm4_moe": "Glm4MoeForCausalLMNextN",
    "qwen3_next": "Qwen3NextForCausalLMMTP",
    "qwen3_5_text": "Qwen3_5ForCausalLMMTP",  # SGLang's one class for Qwen3.5, dense and MoE
    "qwen3_5_moe_text": "Qwen3_5ForCausalLMMTP",
    "glm4_moe_lite": "Glm4MoeLiteForCausalLMNextN",
    "ernie4_5_moe": "Ernie4_5_MoeForCausalLMMTP",
    "hy_v3": "HYV3ForCausalLMNextN",
    "glm_ocr": "GlmOcrForConditionalGenerationNextN",
    "nemotron_h": "NemotronHForCausalLMMTP",
    "longcat_flash": "LongcatFlashForCausalLMNextN",
}


# The models whose target the worker does not build before the draft, as SGLang's scheduler
# does: Qwen3-Next's linear attention asks for a CUDA device while it builds (Qwen3.5's reads
# the config.json key full_attention_interval, which this harness's configs lack); their drafts
# take their config as handed, which SGLang's draft settings leave whole
NO_TARGET = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

# ERNIE's MTP layer is a dense one: its nine tensors (norms, projection, fused attention and MLP)
CHECKED = {"ernie4_5_moe-bf16": 9}


def _config(model: str, quant: str) -> dict:
    count = "mtp_num_hidden_layers" if model.startswith("qwen3_5") else "num_nextn_predict_layers"
    config = dict(S.MODELS.get(model) or T.fields(model), **{count: 1})
    if model == "longcat_flash":  # SGLang's LongCat config class reads rope_scaling alone
        config["rope_scaling"] = config["rope_parameters"]
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
    cases = {c: {"acceptance": v[2], "target": v[0] not in NO_TARGET} for c, v in CASES.items()}
    (root / "cases.json").write_text(json.dumps(cases))
    out = S.run_ranks(WORKER, root, ROOT)
    for found in out.values():
        assert sorted(found) == sorted(CASES)
    return out


def _shared_or_kv(name: str) -> bool:
    return name in ("lm_head.weight", "model.embed_tokens.weight") or name.endswith(
        (".k_scale", ".v_scale")
    )


@pytest.mark.parametrize("case", CASES)
def test_the_draft_holds_the_export(runs, case):
    found = {where: f[case] for where, f in runs.items()}  # (world, rank) -> findings
    failed = {where: got["error"] for where, got in found.items() if "error" in got}
    assert not failed, failed
    for where, got in found.items():
        assert got["cls"] == CLASSES[CASES[case][0]], where
        assert not got["mismatch"] and got["checked"] >= CHECKED.get(case, 11), (where, got)
        assert got["unreached"] == got["unread"], (where, got)  # none written by one side only
        assert all(_shared_or_kv(n) for n in got["unreached"]), (where, got["unreached"])
    one = found[(1, 0)]["shapes"]
    for rank in (0, 1):
        two = found[(2, rank)]["shapes"]
        assert sum(two[n] != s for n, s in one.items()) >= 2, rank
