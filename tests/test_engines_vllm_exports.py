"""vLLM 0.33 reads fp8_dummy's exports as they are written: configs as callers write them
(DeepSeek-V3 made by transformers' DeepseekV3Config, without topk_method/scoring_func;
Qwen3-MoE with num_experts and rope_theta; Llama in the per-tensor fp8 format; Llama in FP8
block with modules_to_not_convert; DeepSeek-V4 under its real checkpoint's names, vLLM's CPU
class; HY-V4's and MiniMax-M3's main layers under their real checkpoint's names: the dense MLPs'
and shared experts' gates, HY-V4's hyper-connections, MiniMax-M3's vision MLP) exported, then
built by vLLM from the exported config.json alone and loaded by its own safetensors loader
(helpers/vllm_exports_worker.py): every parameter reached, every byte of it written by the
loader, the file's bytes where vLLM keeps a tensor under its name (a fused gate/up projection's
halves the files' gate and up), DeepSeek-V3's
e_score_correction_bias built and loaded (before: vLLM built none and its loader raised a
KeyError), the caller's keys read as written, the modules the config keeps unquantized made
unquantized. And transformers with compressed-tensors reads the per-tensor fp8 export at its
scale (transformers read the ``"quant_method": "fp8"`` form 2,000x off). Without vLLM 0.33:
skipped, with why (scripts/ci_engines.sh installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_required import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_exports_worker.py"
CASES = [
    "hy_v4's main layers under its real checkpoint's names, bf16",
    "minimax_m3_vl's main layers under its real checkpoint's names, bf16",
    "deepseek_v4 under its real checkpoint's names, bf16",
    "deepseek_v3 from transformers' DeepseekV3Config, bf16",
    "qwen3_moe with num_experts and rope_theta, bf16",
    "llama, fp8 per tensor",
    "llama, FP8 block with modules_to_not_convert",
]

require("vllm", "0.33.")


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("exports")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(WORKER), str(W.free_port()), str(tmp), str(ROOT)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    path = tmp / "result.json"
    assert path.exists(), f"the worker wrote nothing:\n{(p.stdout + p.stderr)[-3000:]}"
    result = json.loads(path.read_text())
    assert "error" not in result, result["error"]
    return result


@pytest.mark.parametrize("case", CASES)
def test_vllm_reads_the_export_as_it_is_written(findings, case):
    assert findings[case] == [], "\n".join(findings[case])


def test_transformers_reads_the_per_tensor_fp8_export_at_its_scale(tmp_path):
    pytest.importorskip("compressed_tensors")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from fp8_dummy.realistic.export import export

    src = tmp_path / "src"
    src.mkdir()
    small = dict(model_type="llama", hidden_size=64, intermediate_size=128, vocab_size=256,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    (src / "config.json").write_text(json.dumps(small))
    export(src, tmp_path / "out", format="fp8", progress=False)
    files = load_file(tmp_path / "out" / "model-00001-of-00001.safetensors")
    name = "model.layers.1.self_attn.o_proj"
    want = files[f"{name}.weight"].float() * files[f"{name}.weight_scale"]
    # decompressed at the load, as transformers runs compressed-tensors on a CPU
    read = transformers.CompressedTensorsConfig(run_compressed=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", quantization_config=read
    )
    got = model.get_submodule(name).weight.float()
    assert got.shape == want.shape
    assert abs(got.std().item() / want.std().item() - 1) < 0.01, (got.std(), want.std())
    assert (got - want).abs().max().item() <= 0.01 * want.abs().max().item()
