"""NVFP4 exports of the architectures whose MTP layer holds a head vLLM builds with the
format's method (DeepSeek-V3's and GLM's ``shared_head``, Ling's head read from ``lm_head``),
and of Qwen3.5's (SGLang's MTP class builds the layer without the quantization config for a
serialized NVFP4 checkpoint): each MTP layer left unquantized whole and listed once as a
module tree (``model.layers.N.*``, ``mtp.layers.N.*``) in ModelOpt's ``exclude_modules``, the
main layers quantized as before; other formats and the other architectures' MTP layers
quantized as a decoder layer. vLLM's own MTP classes load these exports
(tests/test_engines_vllm_mtp.py), SGLang's too (tests/test_engines_sglang_mtp.py)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402

from fp8_dummy.realistic import build_model, logical_model  # noqa: E402


def _made(arch: str, fmt: str, mtp: int = 1):
    cfg = H.config(arch, hidden=128, vocab=512, mtp=mtp)
    if arch == "deepseek_v3":
        cfg.num_nextn_predict_layers = mtp
    model = build_model(cfg, dtype=torch.bfloat16)
    return cfg, logical_model(model, 0, format=fmt, acceptance=0.6, mtp=True)


@pytest.mark.parametrize("arch, mtp", [("deepseek_v3", 1), ("deepseek_v3", 2), ("glm4_moe", 1),
                                       ("bailing_hybrid", 1)])  # fmt: skip
def test_nvfp4_leaves_the_mtp_layers_whole(arch, mtp):
    cfg, made = _made(arch, "nvfp4", mtp)
    first = cfg.num_hidden_layers
    trees = [f"model.layers.{first + i}." for i in range(mtp)]
    t = made.tensors
    inside = [n for n in t if n.startswith(tuple(trees))]
    assert inside and all(t[n].dtype in (torch.bfloat16, torch.float32) for n in inside), [
        (n, t[n].dtype) for n in inside if t[n].dtype not in (torch.bfloat16, torch.float32)
    ]
    assert not any("scale" in n for n in inside)
    # the main decoder layers stay quantized: packed FP4 codes with their scales
    main = [n for n in t if n.startswith("model.layers.") and not n.startswith(tuple(trees))]
    assert any(t[n].dtype == torch.uint8 for n in main)
    excluded = made.quantization_config()["exclude_modules"]
    assert excluded[:mtp] == [p + "*" for p in trees]
    assert not any(e.startswith(tuple(trees)) for e in excluded[mtp:]), excluded
    assert "lm_head" in excluded


@pytest.mark.parametrize("fmt", ["fp8-block", "fp8", "fp8-channel"])
def test_other_formats_quantize_the_mtp_block(fmt):
    cfg, made = _made("deepseek_v3", fmt)
    p = f"model.layers.{cfg.num_hidden_layers}."
    assert made.tensors[p + "self_attn.o_proj.weight"].dtype == torch.float8_e4m3fn
    assert not any(e.endswith("*") for e in made.skipped), made.skipped


@pytest.mark.parametrize("arch", ["qwen3_5_text", "qwen3_5_moe_text"])
def test_qwen3_5_leaves_its_mtp_layers_whole_in_nvfp4(arch):
    cfg, made = _made(arch, "nvfp4", 2)
    t = made.tensors
    for i in range(2):
        inside = [n for n in t if n.startswith(f"mtp.layers.{i}.")]
        assert len(inside) > 8 and all(t[n].dtype == torch.bfloat16 for n in inside)
    assert t["model.layers.0.mlp.down_proj.weight" if arch == "qwen3_5_text"
             else "model.layers.0.mlp.experts.0.down_proj.weight"].dtype == torch.uint8  # fmt: skip
    excluded = made.quantization_config()["exclude_modules"]
    # and the MTP input projection, unquantized in every format (vLLM's and SGLang's alike)
    assert [e for e in excluded if e.startswith("mtp.")] == ["mtp.layers.0.*", "mtp.layers.1.*",
                                                             "mtp.fc"]  # fmt: skip


def test_other_architectures_quantize_their_mtp_block_in_nvfp4():
    """Qwen3-Next's MTP layers (``mtp.*``: no head of their own) stay quantized as a decoder
    layer, but for its full attention's Q, K and V, which SGLang's class builds without
    ModelOpt's FP4 config (main layers too)."""
    cfg, made = _made("qwen3_next", "nvfp4", 1)
    t = made.tensors
    assert t["mtp.layers.0.self_attn.o_proj.weight"].dtype == torch.uint8
    assert t["mtp.layers.0.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert not any(e.endswith("*") for e in made.skipped), made.skipped
    excluded = made.quantization_config()["exclude_modules"]
    assert "mtp.layers.0.self_attn.k_proj" in excluded
    full = cfg.layer_types.index("full_attention")
    assert f"model.layers.{full}.self_attn.v_proj" in excluded
