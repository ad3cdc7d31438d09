"""The MTP layers in SGLang 0.5.23's own speculative draft classes:
``DeepseekV3ForCausalLMNextN`` (DeepSeek-V3), ``Glm4MoeForCausalLMNextN``
(GLM-4.5), ``Qwen3NextForCausalLMMTP`` (Qwen3-Next), ``Qwen3_5ForCausalLMMTP`` (Qwen3.5, dense
and MoE), ``Ernie4_5_MoeForCausalLMMTP`` (ERNIE 4.5 MoE), ``HYV3ForCausalLMNextN`` (HY-V3),
``GlmOcrForConditionalGenerationNextN`` (GLM-OCR's multimodal checkpoint),
``Glm4MoeLiteForCausalLMNextN`` (GLM-4.7-Flash, whose config SGLang's MLA attention rewrites
while it builds the model), ``NemotronHForCausalLMMTP`` (Nemotron-H's MTP step, whose class
sets its config's main layers to the step's), ``LongcatFlashForCausalLMNextN``
(LongCat-Flash, whose draft config SGLang's draft settings give one layer: the main model's
depth comes from the target built before it), ``HYV4ForCausalLMNextN`` (HY-V4: the CUDA
capability SGLang's DSA server arguments ask for answered, helpers/sglang_models.py) and
``DeepseekV4ForCausalLMNextN`` (DeepSeek-V4, from its release's config.json keys), each in bf16
and in each FP8 format where SGLang loads it (:data:`UNLOADABLE`): FP8 block
(the config's own, 16 x 16 blocks), compressed-tensors' FP8 per tensor and per channel (``export
--format fp8``, ``fp8-channel``) and NVFP4 (``--format nvfp4``, SGLang's FP4 MoE method with the
Marlin runner: helpers/sglang_models.py's ``MORE``).
The fill reads the config as SGLang handed the class, before it built
(tests/test_sglang_config_as_given.py). Built on this CPU as SGLang's
scheduler builds them, the target (where it builds here: :data:`NO_TARGET`), then its draft
(its draft model config: helpers/sglang_models.py's ``build(..., draft=True)``, through the
plugin's hook on SGLang's model construction), filled by
``FP8_DUMMY_SGLANG=realistic`` with ``$FP8_DUMMY_ACCEPTANCE``, at TP=1 (one process) and TP=2
(two gloo processes). The oracle: the export of the same config and acceptance read by SGLang's
own safetensors reader into a twin through the class's ``load_weights``; every parameter
written by both (the two poisoned apart), byte for byte equal. What neither writes is what
SGLang's draft classes take from no checkpoint: the embedding and lm_head (SGLang hands the
draft the target's at run time) and FP8 attention's KV-cache scales. SGLang's NextN takes one
MTP layer (Nemotron-H's: one step); HY-V3's and Nemotron-H's drafts of checkpoints with two,
whose draft config SGLang gives one, hold the export's first (:data:`EDGE`: at the count's one
say in the values). What SGLang cannot load whatever the checkpoint holds is asserted as it
fails (:data:`UNLOADABLE`). Without SGLang: skipped, with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "sglang_mtp_worker.py"

require("sglang.srt.model_loader.weight_utils")

from helpers import sglang_models as S  # noqa: E402
from helpers import vllm_mtp_models as T  # noqa: E402

from fp8_dummy.realistic import arch  # noqa: E402
from fp8_dummy.realistic.export import export  # noqa: E402

BUDGET = arch.TWIN_BUDGET_BYTES

# case -> (model, quantization, acceptance, MTP layers)
CASES = {
    "deepseek_v3-bf16": ("deepseek_v3", "bf16", 0.6, 1),
    "deepseek_v3-blk": ("deepseek_v3", "blk", 0.8, 1),
    "deepseek_v3-plain": ("deepseek_v3", "bf16", None, 1),
    "glm4_moe-bf16": ("glm4_moe", "bf16", 0.6, 1),
    "qwen3_next-bf16": ("qwen3_next", "bf16", 0.6, 1),
    "qwen3_5_text-bf16": ("qwen3_5_text", "bf16", 0.6, 1),
    "qwen3_5_moe_text-bf16": ("qwen3_5_moe_text", "bf16", 0.6, 1),
    "glm4_moe_lite-bf16": ("glm4_moe_lite", "bf16", 0.6, 1),
    "ernie4_5_moe-bf16": ("ernie4_5_moe", "bf16", 0.6, 1),
    "hy_v3-bf16": ("hy_v3", "bf16", 0.6, 1),
    "glm_ocr-bf16": ("glm_ocr", "bf16", 0.6, 1),
    "nemotron_h-bf16": ("nemotron_h", "bf16", 0.6, 1),
    "longcat_flash-bf16": ("longcat_flash", "bf16", 0.6, 1),
    "hy_v4-bf16": ("hy_v4", "bf16", 0.6, 1),
    "deepseek_v4-bf16": ("deepseek_v4", "bf16", 0.6, 1),
}
# Checkpoints of two MTP layers (Nemotron-H: two steps) whose draft config SGLang's draft settings
# give one (num_nextn_predict_layers = 1: their classes build one and read the first): the draft's
# fill must hold the export's first. Its values depend on the count only through the twin the MTP
# layers' facts are probed on (one of all the MTP layers, built where it is small:
# TWIN_BUDGET_BYTES), so these cases set that budget between the twin of one MTP layer and of two,
# in the export and in the workers: a fill that counted one layer would probe where the export
# took the plain rule (HY-V3's expert combine, Nemotron-H's squared-ReLU experts differ). Another
# acceptance than the one-layer cases', so no kept checkpoint is shared. (Qwen3-Next's draft is
# given one too, but SGLang's loader fails on a second MTP layer's names, from disk as well;
# DeepSeek's and GLM's NextN keep the count and refuse any but one.)
EDGE = {
    "hy_v3-bf16-2mtp": ("hy_v3", "bf16", 0.7, 2),
    "nemotron_h-bf16-2mtp": ("nemotron_h", "bf16", 0.7, 2),
}
CASES.update(EDGE)
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
    "hy_v4": "HYV4ForCausalLMNextN",
    "deepseek_v4": "DeepseekV4ForCausalLMNextN",
}
# Every architecture's MTP layer in each quantized format: FP8 blocks as the config's own (``blk``:
# the harness's [16, 16] blocks, which these hidden-64 models divide; the export's 128 x 128 do
# not), compressed-tensors' FP8 per tensor and per channel and NVFP4 as ``export --format``
# writes them from the bf16 config (a case's quantization -> that format). DeepSeek-V3's FP8
# block case is above.
EXPORT_FORMATS = {"fp8-tensor": "fp8", "fp8-channel": "fp8-channel", "nvfp4": "nvfp4"}
for _model in CLASSES:
    for _quant in ("blk", *EXPORT_FORMATS):
        CASES.setdefault(f"{_model}-{_quant}", (_model, _quant, 0.6, 1))
# LongCat-Flash's compressed-tensors formats are refused by the export (its MTP classes, vLLM's and
# SGLang's NextN alike, read the MTP layer's scales under the FP8 block name ``weight_scale_inv``
# alone: SGLang's drops every ``weight_scale``)
for _quant in EXPORT_FORMATS:
    del CASES[f"longcat_flash-{_quant}"]
# and in NVFP4 GLM-OCR's and HY-V3's (vLLM's MTP classes build their head with NVFP4's method
# under a name no list of the checkpoint's reaches: tests/test_realistic_mtp_nvfp4.py)
del CASES["glm_ocr-nvfp4"], CASES["hy_v3-nvfp4"]
# and HY-V4's in NVFP4 (its fused routed experts quantized in the FP8 formats alone)
del CASES["hy_v4-nvfp4"]
# Cases SGLang 0.5.23 cannot load, whatever the checkpoint holds -> what both its load of the
# export and the in-engine fill (through the class's load_weights) raise. GLM-4.7-Flash's loader
# fuses q_a_proj and kv_a_proj_with_mqa by concatenating their tensors, their scales too: a per-
# tensor scale of no dimension fails the concatenation, one of [1] the fused layer's one-element
# scale (its size check); DeepSeek's loader, which it copies, takes the first of two such scales.
UNLOADABLE = {
    "glm4_moe_lite-fp8-tensor": "zero-dimensional tensor (at position 0) cannot be concatenated",
}
# HY-V4's NextN loader renames every ``weight_scale`` to ``weight_scale_inv`` (FP8 block's name):
# compressed-tensors' scales, per tensor or per channel, name no parameter. And it permutes the
# rows of every tensor named ``.self_attn.indexer.wq_b.`` as the indexer's heads (reshaped to
# [index_n_heads, index_head_dim, ...]), the FP8 block scale of its wq_b too, whose rows are the
# blocks'; SGLang builds that wq_b with the quantization config, so an FP8 block checkpoint needs
# the scale.
UNLOADABLE["hy_v4-blk"] = "shape '[2, 16, 2]' is invalid for input of size 4"
for _quant in ("fp8-tensor", "fp8-channel"):
    UNLOADABLE[f"hy_v4-{_quant}"] = "KeyError: 'model.decoder.mlp.shared_experts.gate_up_proj."
# What the export holds that SGLang's class cannot take, where vLLM's takes it: DeepSeek-V4's
# attention ``wo_a`` in NVFP4 (SGLang builds wo_a unquantized unless its FP8 wo_a option is on,
# dequantizing an FP8 checkpoint's; vLLM's class builds it with the quantization config) -> what
# both loads raise, asserted as UNLOADABLE's are, so that the day they load this fails
UNLOADABLE["deepseek_v4-nvfp4"] = ", 128]) != loaded_weight.shape=torch.Size(["  # rows: TP's
# Parameters neither load writes, whatever the checkpoint holds: DeepSeek-V4's loader fuses the
# attention's wq_a and wkv into wqkv_a by the names ``weight``/``weight_scale_inv`` alone, so
# compressed-tensors' per-tensor and per-channel ``weight_scale``s of the two reach no parameter
# (SGLang's own load of the export leaves the fused layer's scale as built, too)
NEITHER = {f"deepseek_v4-{q}": ("model.decoder.self_attn.wqkv_a.weight_scale",)
           for q in ("fp8-tensor", "fp8-channel")}  # fmt: skip

# The models whose target the worker does not build before the draft, as SGLang's scheduler
# does: Qwen3-Next's linear attention asks for a CUDA device while it builds (Qwen3.5's reads
# the config.json key full_attention_interval, which this harness's configs lack); their drafts
# take their config as handed, which SGLang's draft settings leave whole
NO_TARGET = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

# ERNIE's MTP layer is a dense one: its nine tensors (norms, projection, fused attention and MLP)
CHECKED = {"ernie4_5_moe-bf16": 9}


def _config(model: str, quant: str, layers: int) -> dict:
    count = "mtp_num_hidden_layers" if model.startswith("qwen3_5") else "num_nextn_predict_layers"
    fields = _deepseek_v4() if model == "deepseek_v4" else S.MODELS.get(model) or T.fields(model)
    config = dict(fields, **{count: layers})
    if model == "deepseek_v4":  # its release's per-layer list counts the MTP layers too
        config["compress_ratios"] += [0] * layers
    if model == "longcat_flash":  # SGLang's LongCat config class reads rope_scaling alone
        config["rope_scaling"] = config["rope_parameters"]
    if model == "nemotron_h" and quant == "blk":  # its target's Mamba in_proj: every part (the
        # heads' 8 rows) a multiple of the 16-row blocks on each of two ranks, as at full size
        config.update(mamba_num_heads=32, mamba_head_dim=8)
    if S.QUANTS.get(quant):  # else bf16, or an export format's (written by the export)
        config["quantization_config"] = S.QUANTS[quant]
    return config


def _deepseek_v4() -> dict:
    """tests/test_realistic_speculative_deepseek_v4.py's tiny DeepSeek-V4 (hidden 128,
    vocabulary 1024, two layers: hash-routed sliding attention, then compressed sparse; four
    streams) as DeepSeek-V4's release writes its config.json, the keys SGLang's config reads
    (transformers' class reads them as its legacy names): the per-layer ``compress_ratios``
    (0 a sliding layer; the MTP layers' added by the caller), ``num_hash_layers``,
    ``qk_rope_head_dim``, ``rope_theta`` and ``compress_rope_theta``, and the compressed layers'
    YaRN as ``rope_scaling``; the router's ``noaux_tc`` as the release names it."""
    from test_realistic_speculative_deepseek_v4 import config as tiny

    config = tiny(128, 1024, 2, 4).to_dict()
    rates, rope = config.pop("compress_rates"), config.pop("rope_parameters")
    config["compress_ratios"] = [rates.get(t, 0) for t in config.pop("layer_types")]
    config["num_hash_layers"] = config.pop("mlp_layer_types").count("hash_moe")
    config["qk_rope_head_dim"] = int(config["head_dim"] * config.pop("partial_rotary_factor"))
    config.update(rope_theta=rope["main"]["rope_theta"], max_position_embeddings=1024,
                  compress_rope_theta=rope["compress"]["rope_theta"], topk_method="noaux_tc",
                  rope_scaling=dict(type="yarn", factor=4, original_max_position_embeddings=256,
                                    beta_fast=32, beta_slow=1))  # fmt: skip
    return config


def _twin_bytes(config, layers: int) -> int:
    """What the probe's budget compares: the float32 bytes of the twin of ``layers`` MTP layers
    that their facts are probed on (fp8_dummy/realistic/speculative/mtp.py)."""
    from fp8_dummy.realistic.hf_model import build_model, own_tensors
    from fp8_dummy.realistic.speculative import mtp, mtp_layouts

    record, text = mtp_layouts.arch_of(config)[0], mtp_layouts.text_config(config)
    twin = build_model(mtp._mtp_config(text, layers, record), dtype=torch.bfloat16)
    return 4 * sum(t.numel() for t in own_tensors(twin).values())


def _edge(source: Path, layers: int) -> int:
    """A budget the twin of one MTP layer fits and the twin of ``layers`` does not."""
    config = transformers.AutoConfig.from_pretrained(source)
    one, all_ = _twin_bytes(config, 1), _twin_bytes(config, layers)
    assert one < all_, (one, all_)
    return (one + all_) // 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sglang-mtp")
    cases = {}
    for case, (model, quant, acceptance, layers) in CASES.items():
        source = root / case / "source"
        source.mkdir(parents=True)
        (source / "config.json").write_text(json.dumps(_config(model, quant, layers)))
        budget = _edge(source, layers) if case in EDGE else None
        try:
            arch.TWIN_BUDGET_BYTES = budget or BUDGET
            export(source, root / case / "checkpoint", acceptance=acceptance, progress=False,
                   allow_unknown=True, format=EXPORT_FORMATS.get(quant))  # fmt: skip
        finally:
            arch.TWIN_BUDGET_BYTES = BUDGET
        cases[case] = {"acceptance": acceptance, "target": model not in NO_TARGET, "budget": budget,
                       "more": S.MORE.get(quant, {})}  # fmt: skip
    (root / "cases.json").write_text(json.dumps(cases))
    out = S.run_ranks(WORKER, root, ROOT)
    for found in out.values():
        assert sorted(found) == sorted(CASES)
    return out


def _shared_or_kv(name: str) -> bool:
    """The embedding and lm_head (an NVFP4 draft's head built with its scales: all the
    target's at run time), FP8 attention's KV-cache scales, and NVFP4 experts' swizzled block
    scales (made from the loaded ones by ``process_weights_after_loading``)."""
    return (
        name == "model.embed_tokens.weight"
        or name.startswith("lm_head.")
        or name.endswith((".k_scale", ".v_scale", *S.SWIZZLED))
    )


@pytest.mark.parametrize("case", CASES)
def test_the_draft_holds_the_export(runs, case):
    found = {where: f[case] for where, f in runs.items()}  # (world, rank) -> findings
    if case in UNLOADABLE:  # SGLang's own load of the export fails alike
        for where, got in found.items():
            for side in ("load_error", "fill_error"):
                assert UNLOADABLE[case] in got.get(side, ""), (where, side, got)
        return
    failed = {where: got.get("error") or got for where, got in found.items() if "cls" not in got}
    assert not failed, failed
    for where, got in found.items():
        assert got["cls"] == CLASSES[CASES[case][0]], where
        assert not got["mismatch"] and got["checked"] >= CHECKED.get(case, 11), (where, got)
        assert got["unreached"] == got["unread"], (where, got)  # none written by one side only
        left = [n for n in got["unreached"] if n not in NEITHER.get(case, ())]
        assert all(_shared_or_kv(n) for n in left), (where, got["unreached"])
    one = found[(1, 0)]["shapes"]
    for rank in (0, 1):
        two = found[(2, rank)]["shapes"]
        assert sum(two[n] != s for n, s in one.items()) >= 2, rank
