"""NVFP4 exports of the architectures whose MTP layer holds a head vLLM builds with the
format's method (DeepSeek-V3's and GLM's ``shared_head``, Ling's head read from ``lm_head``):
each MTP layer left unquantized whole and listed once as a module tree (``model.layers.N.*``)
in ModelOpt's ``exclude_modules``, the main layers quantized as before; other formats and the
other architectures' MTP layers quantized as a decoder layer. vLLM's own MTP classes load these
exports (tests/test_engines_vllm_mtp.py)."""

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


def test_other_architectures_quantize_their_mtp_block_in_nvfp4():
    """Qwen3.5's MTP layers (``mtp.*``: no head of their own) stay quantized as a decoder
    layer."""
    cfg, made = _made("qwen3_5_text", "nvfp4", 1)
    t = made.tensors
    assert t["mtp.layers.0.self_attn.o_proj.weight"].dtype == torch.uint8
    assert not any(e.endswith("*") for e in made.skipped), made.skipped
