"""The MTP layers in vLLM 0.33's own draft classes: ``DeepSeekMTP`` (DeepSeek-V3, one and two MTP
layers, bf16 and FP8 block), ``Glm4MoeMTP`` (GLM-4.5), ``Qwen3NextMTP`` (Qwen3-Next),
``BailingMoeV25MTPModel`` (Ling's hybrid), ``Qwen3_5MTP`` and ``Qwen3_5MoeMTP`` (Qwen3.5, one
MTP layer and two), ``Glm4MoeLiteMTP`` (GLM-4.7-Flash, whose draft config says no main layers),
``GlmOcrMTP`` (GLM-OCR's multimodal checkpoint), ``Exaone4_5_MTP`` (EXAONE 4.5's),
``NemotronHMTP`` (Nemotron-H), ``ErnieMTP`` (ERNIE 4.5 MoE: a dense MTP block), ``ExaoneMoeMTP``
(EXAONE-MoE: likewise), ``HYV3MTP`` (HY-V3, whose ``load_weights`` reports no names: the poison
shows what it reached), ``MiMoV2MTP`` (MiMo-V2-Flash: a dense sliding-attention block, bf16 and
FP8 block, three MTP layers in the checkpoint of which vLLM reads the first),
``LongCatFlashMTP`` (LongCat-Flash: one MLA attention and a dense MLP; its own ``lm_head`` no
loader writes, vLLM's proposer gives it the target's), ``BailingMoeV3MTPModel`` (Ling-3.0, the
model transformers' ``bailing_hybrid`` is, its config naming ``BailingMoeV3ForCausalLM``: one
MTP layer, and two in FP8 block, whose ``eh_proj`` vLLM builds unquantized as the export keeps
it), ``Qwen4ExpMTP`` (Qwen4-Exp: a hyper-connected QSA block, one MTP layer and two; its QSA
attention built past its FlashAttention check: helpers/vllm_qsa_flash_attention_stub.py; the
padding rows of its merged hyper-connection projections, which no checkpoint holds, left
unwritten by both loaders), ``DeepseekV32MTPModel`` (DeepSeek-V3.2 and GLM-5: on a CPU platform
vLLM's ``DeepseekV32MTP`` is ``DeepSeekMTP``, its MTP block with the indexed sparse MLA),
``Glm5NextMTP`` (GLM-5-Next: its block without hyper-connections, the indexed sparse MLA),
``MiniMaxM3MTP`` (MiniMax-M3's multimodal checkpoint: the sparse-attention MoE block, one MTP
layer and two; its experts' kernel choice replaced, helpers/vllm_swigluoai_moe_backend.py),
``HYV4MTP`` (HY-V4, one MTP layer and two: its indexed attention's sparse MLA backend chosen as
the dense one; its second layer's head, which its loader never writes, is the target's),
``Step3p5MTP`` (Step-3.5-Flash's text checkpoint, one MTP layer and two: a dense
sliding-attention block, its head's copy ``shared_head.output``; FP8 per tensor and per
channel refused: its loader requires every parameter loaded, compressed-tensors' attention
KV-cache ones included; NVFP4 refused for the main layers' packed experts), built
on the CPU as vLLM's proposer builds its draft (helpers/vllm_mtp_models.py; the sparse MLA's
backend choice as helpers/vllm_sparse_mla.py replaces it), each of them also with one MTP
layer in every quantized format (FP8 per tensor, per channel and block, NVFP4: its kernel
choices as helpers/vllm_nvfp4_cpu.py replaces them; those whose MTP layers vLLM's class
cannot load whatever the checkpoint holds refused by the export, the refusal checked), and a
draft model ``export --draft``
made (vLLM's Llama from its config), loaded by ``--load-format fp8_dummy_realistic`` with an
acceptance in ``model_loader_extra_config``, at TP=1 and TP=2 (two gloo processes). The oracle:
the export of the same config and acceptance read by vLLM's own safetensors loader into a twin;
every parameter reached by both (an FP8 standard attention's KV-cache scales excepted: no
checkpoint holds them), every tensor byte for byte equal. A per-position acceptance of another
length than vLLM's ``num_speculative_tokens`` is refused before anything is written. Without
vLLM 0.33: skipped, with why."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_mtp_worker.py"

require("vllm", "0.33.", "the draft classes")

from helpers import vllm_mtp_models as T  # noqa: E402

CLASSES = {"deepseek_v3": "DeepSeekMTP", "glm4_moe": "Glm4MoeMTP", "qwen3_next": "Qwen3NextMTP"}
CLASSES["bailing_hybrid"] = "BailingMoeV25MTPModel"
CLASSES["nemotron_h"] = "NemotronHMTP"
CLASSES.update(qwen3_5_text="Qwen3_5MTP", qwen3_5_moe_text="Qwen3_5MoeMTP")
CLASSES["glm4_moe_lite"] = "Glm4MoeLiteMTP"
CLASSES["ernie4_5_moe"] = "ErnieMTP"
CLASSES["exaone_moe"] = "ExaoneMoeMTP"
CLASSES["hy_v3"] = "HYV3MTP"
CLASSES["hy_v4"] = "HYV4MTP"
CLASSES["glm_ocr"] = "GlmOcrMTP"
CLASSES["exaone4_5"] = "Exaone4_5_MTP"
CLASSES["mimo_v2_flash"] = "MiMoV2MTP"
CLASSES["longcat_flash"] = "LongCatFlashMTP"
CLASSES["bailing_v3"] = "BailingMoeV3MTPModel"
CLASSES["qwen4_exp_text"] = "Qwen4ExpMTP"
# DeepSeek-V3.2 and GLM-5: vLLM's speculative config names DeepseekV32MTPModel, whose class
# (vllm.models.deepseek_v32.DeepseekV32MTP) on a CPU platform is the generic DeepSeekMTP
CLASSES.update(deepseek_v32="DeepSeekMTP", glm_moe_dsa="DeepSeekMTP")
CLASSES["glm5_next"] = "Glm5NextMTP"
CLASSES["minimax_m3_vl"] = "MiniMaxM3MTP"
CLASSES["step3p5"] = "Step3p5MTP"
CLASSES["llama"] = "LlamaForCausalLM"  # a draft model export --draft wrote
# The architectures vLLM's speculative config gives these targets, as its registry resolves them
# on this platform (module.class)
SPARSE = {
    "deepseek_v32": "vllm.models.deepseek_v32.DeepseekV32MTP",
    "glm_moe_dsa": "vllm.models.deepseek_v32.DeepseekV32MTP",
    "glm5_next": "vllm.models.glm5next.Glm5NextMTP",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mtp")
    results = W.pair(WORKER, tmp, ROOT)
    tp1 = {case: r for result in results for case, r in result["1"].items()}
    return {1: tp1, 2: [result["2"] for result in results]}


@pytest.mark.parametrize("case", [*T.CASES, T.DRAFT], ids=T.key)
@pytest.mark.parametrize("tp", [1, 2])
def test_the_draft_holds_the_export(runs, case, tp):
    for cases in [runs[1]] if tp == 1 else runs[2]:
        r = cases[T.key(case)]
        if case[:2] in T.REFUSED:  # the export refused, naming the count that makes it
            assert "MTP layer(s)" in r.get("error", "") and "to 0" in r["error"], r
            continue
        if case[:2] in T.REFUSED_MODEL:  # the format refused for the model itself
            assert "is a fused routed experts tensor" in r.get("error", ""), r
            continue
        assert "error" not in r, r["error"]
        assert r["class"] == CLASSES[case[0]]
        if case[0] in SPARSE:  # the indexed sparse MLA, its indexer's parameters included
            assert any(".indexer." in n for n in r["shapes"]), sorted(r["shapes"])
            assert r["draft_class"] == SPARSE[case[0]], r["draft_class"]
        assert r["not_loaded"] == [] and r["mismatch"] == [], r
        kv = ("k_scale", "v_scale", "q_scale", "prob_scale")  # no checkpoint holds them
        kv += ("k_zero_point", "v_zero_point", "q_zero_point")  # compressed-tensors'
        assert all(n.endswith(kv) for n in r["kv_unloaded"]), r["kv_unloaded"]
        # the target's parameters: LongCat's lm_head, HY-V4's second MTP layer's head
        shared = T.SHARED.get(case[0], ()) if case[0] != "hy_v4" or case[2] >= 2 else ()
        assert r.get("shared", []) == sorted(shared), r
        assert r["poisoned"] == [], "a tensor the in-engine load never wrote"
        assert r["checked"] >= 15
        assert [n for n in r["shapes"] if ".layers." in n], "the decoder layers' tensors"
        # a module vLLM builds unquantized (MiMo-V2-Flash's o_proj) is one in the export: not
        # FP8 codes cast into it (vLLM's loader takes them, dropping their scale)
        assert all(v < 0.5 for v in r["fp8_exact"].values()), r["fp8_exact"]
        if case[0] == "mimo_v2_flash" and case[1] != "bf16":
            assert any(n.endswith("o_proj.weight") for n in r["fp8_exact"]), "its bf16 o_proj"
        # Qwen4-Exp's padded hyper-connection projections: two a layer, 12 rows each (16 + 4
        # held), which neither loader writes; every other row compared
        want = 2 * case[2] if case[0] == "qwen4_exp_text" else 0
        assert len(r["padding"]) == want, r["padding"]
        assert all(rows == 12 and kept for _, rows, kept in r["padding"]), r["padding"]


def test_two_ranks_hold_their_halves(runs):
    """TP=2 shards the vocabulary-parallel head and embedding and the MoE experts."""
    for case in [c for c in T.CASES if c[:2] not in T.REFUSED | T.REFUSED_MODEL]:
        one = runs[1][T.key(case)]["shapes"]
        two = runs[2][0][T.key(case)]["shapes"]
        assert any(two[n] != s for n, s in one.items()), case


def test_a_list_of_the_wrong_length_is_refused(runs):
    r = runs[1]["wrong-length"]
    assert r["raised"] and "engine drafts 1" in r["raised"], r
    assert r["untouched"]
