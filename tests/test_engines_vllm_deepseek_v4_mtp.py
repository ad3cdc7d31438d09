"""DeepSeek-V4's MTP layers in vLLM 0.33's own draft class. Its CPU ``DeepSeekV4MTP`` is a stub
that raises at construction; its GPU class (``vllm.models.deepseek_v4.nvidia.mtp``) is built on
this CPU as vLLM's proposer builds the draft (the target's config, a speculative config of method
``mtp``, vLLM's ``initialize_model``), with the GPU-only choices it makes while built replaced
(helpers/vllm_dsv4_gpu_choices.py: its CUDA streams, its attention's einsum recipe, NVFP4's
kernels), so its own modules register its parameters (``DeepSeekV4MultiTokenPredictorLayer``,
vLLM's DeepSeek-V4 decoder layer, its MoE's fused experts, the scales each quantization method
registers) and its own ``load_weights`` and ``weight_loader``s fill them. One and two MTP layers,
in bf16, FP8 block, FP8 per tensor (its routed experts per channel), FP8 per channel and NVFP4,
at TP=1 and TP=2 (two gloo processes): filled by
``--load-format fp8_dummy_realistic`` against a twin loaded from the export of the same config by
vLLM's own safetensors loader; every parameter reached by both (vLLM's loader raises on an MTP
name it has no parameter for), every tensor byte for byte equal, ``e_proj`` and ``h_proj``
quantized where the format quantizes. Without vLLM 0.33: skipped, with why."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_deepseek_v4_mtp_worker.py"

require("vllm", "0.33.", "DeepSeek-V4's MTP class")

from helpers import vllm_deepseek_v4_mtp_worker as D  # noqa: E402

BUILT = D.CASES
# what each format's methods register beside a linear's weight: the input projections are among
# them (vLLM's GPU class builds them with the quantization config)
SCALES = {"bf16": (), "fp8-block": ("weight_scale_inv",), "fp8-channel": ("weight_scale",),
          "fp8": ("weight_scale",),
          "nvfp4": ("weight_scale", "weight_scale_2", "input_scale")}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("dsv4-mtp")
    results = W.pair(WORKER, tmp, ROOT)
    tp1 = {case: r for result in results for case, r in result["1"].items()}
    return {1: tp1, 2: [result["2"] for result in results]}


@pytest.mark.parametrize("case", BUILT, ids=D.key)
@pytest.mark.parametrize("tp", [1, 2])
def test_the_gpu_class_holds_the_export(runs, case, tp):
    fmt, n = case
    for cases in [runs[1]] if tp == 1 else runs[2]:
        r = cases[D.key(case)]
        assert "error" not in r, r["error"]
        assert r["class"] == "vllm.models.deepseek_v4.nvidia.mtp.DeepSeekV4MTP"
        assert r["not_loaded"] == [] and r["mismatch"] == [], (r["not_loaded"], r["mismatch"])
        assert r["poisoned"] == [] and r["poisoned_twin"] == [], "a tensor a load never wrote"
        params = r["params"]
        assert r["checked"] >= len(params) >= 30 * n + 1  # 30 a layer and the embedding, bf16
        for layer in range(2, 2 + n):  # after the target's two layers
            p = f"model.layers.{layer}."
            assert p + "mtp_block.ffn.experts.routed_experts.w13_weight" in params
            for proj in ("e_proj", "h_proj"):
                dtype = params[f"{p}{proj}.weight"][1]
                assert (dtype == "bfloat16") == (fmt == "bf16"), (proj, dtype)
                for scale in SCALES[fmt]:
                    assert f"{p}{proj}.{scale}" in params, (proj, scale)


def test_two_ranks_hold_their_halves(runs):
    """TP=2 shards the vocabulary-parallel embedding and head, the attention's column- and
    row-parallel projections and the experts."""
    for case in BUILT:
        one = runs[1][D.key(case)]["params"]
        two = runs[2][0][D.key(case)]["params"]
        assert one.keys() == two.keys(), case
        halved = [k for k in one if one[k][0] != two[k][0]]
        for name in ("embed_tokens.weight", "shared_head.head.weight", "attn.wq_b.weight",
                     "attn.wo_b.weight", "routed_experts.w13_weight"):  # fmt: skip
            assert any(k.endswith(name) for k in halved), (case, name)
