"""vLLM 0.33 reads fp8_dummy's exports as they are written: configs as callers write them
(DeepSeek-V3 made by transformers' DeepseekV3Config, without topk_method/scoring_func;
Qwen3-MoE with num_experts and rope_theta; Llama, Qwen3-MoE and DeepSeek-V3 in the per-tensor
fp8 format, the MoEs' routed experts per channel; Llama in FP8 block with
modules_to_not_convert; DeepSeek-V4 under its real checkpoint's names, vLLM's CPU class; HY-V4's
and MiniMax-M3's main layers under their real checkpoint's names: the dense MLPs' and shared
experts' gates, HY-V4's hyper-connections, MiniMax-M3's vision MLP; Step-3.5-Flash's text
checkpoint, transformers' Step3p7TextModel with its lm_head, in bf16 and FP8 block: its packed
experts ``moe.gate_proj``/``up_proj``/``down_proj``, ``moe.gate``, ``moe.router_bias``,
``share_expert.*``, the attention's per-head gate ``g_proj``) exported, then built by
vLLM from the exported config.json alone and loaded by its own safetensors loader
(helpers/vllm_exports_worker.py): every parameter reached, every byte of it written by the
loader, the file's bytes where vLLM keeps a tensor under its name (a fused gate/up
projection's halves the files' gate and up) and in the fp8 MoEs' fused experts (w13, w2 and
their scales, written back under the checkpoint's names), DeepSeek-V3's
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
    "step3p5's main layers under its real checkpoint's names, bf16",
    "step3p5's main layers under its real checkpoint's names, FP8 block",
    "step3p5 without MTP layers, fp8 per channel",
    "hy_v4's main layers under its real checkpoint's names, bf16",
    "minimax_m3_vl's main layers under its real checkpoint's names, bf16",
    "deepseek_v4 under its real checkpoint's names, bf16",
    "deepseek_v3 from transformers' DeepseekV3Config, bf16",
    "qwen3_moe with num_experts and rope_theta, bf16",
    "llama, fp8 per tensor",
    "qwen3_moe, fp8 (routed experts per channel)",
    "deepseek_v3, fp8 (routed experts per channel)",
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


def test_transformers_reads_the_fp8_moes_routed_experts_at_their_scale(tmp_path):
    """Qwen3-MoE in fp8: transformers (with compressed-tensors) fuses the experts it reads per
    channel into ``gate_up_proj`` and ``down_proj``; each is the file's codes x scale in bf16,
    byte for byte."""
    pytest.importorskip("compressed_tensors")
    transformers = pytest.importorskip("transformers")
    import torch
    from safetensors.torch import load_file

    from fp8_dummy.realistic.export import export

    src = tmp_path / "src"
    src.mkdir()
    small = dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=128, vocab_size=256,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)  # fmt: skip
    (src / "config.json").write_text(json.dumps(small))
    export(src, tmp_path / "out", format="fp8", progress=False)
    files = load_file(tmp_path / "out" / "model-00001-of-00001.safetensors")
    read = transformers.CompressedTensorsConfig(run_compressed=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", quantization_config=read
    )
    base = "model.layers.1.mlp.experts"
    experts = model.get_submodule(base)

    def value(e: int, proj: str) -> torch.Tensor:
        w, s = files[f"{base}.{e}.{proj}.weight"], files[f"{base}.{e}.{proj}.weight_scale"]
        assert s.shape == (w.shape[0], 1)  # per channel
        return w.float() * s

    for e in range(4):
        gate_up = torch.cat([value(e, "gate_proj"), value(e, "up_proj")])
        for got, want in (
            (experts.gate_up_proj[e], gate_up),
            (experts.down_proj[e], value(e, "down_proj")),
        ):
            want = want.to(got.dtype)
            assert torch.equal(got.detach().view(torch.int16), want.view(torch.int16)), e
