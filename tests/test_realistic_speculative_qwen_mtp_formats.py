"""The MTP layers of Qwen3-Next, Qwen3.5-MoE and Qwen4-Exp in the quantized formats (fp8 per
tensor, fp8-block, fp8-channel, nvfp4): which of their tensors are quantized, written out here
from vLLM 0.33's classes (``Qwen3NextMTP``, ``Qwen3_5MoeMTP``, ``Qwen4ExpMTP``), not from the
fill. vLLM builds the block's attention, shared expert and routed experts (and Qwen4-Exp's QSA
indexer) with the quantization config, and the shared expert's gate ``shared_expert_gate``
(``ReplicatedLinear(..., quant_config=None)``) and Qwen4-Exp's hyper-connections' projections
(``GatedResidual``: ``input_mix_weight_down``, ``input_mix_weight_up``,
``block_inject_weight``) without it: those stay unquantized, without scales, and are listed
with the ignored modules; the main layers' alike (vLLM's target classes build the same
modules). In NVFP4 alone Qwen4-Exp's QSA attention builds its Q, K, V and indexer projections,
packed into one linear (``Qwen4ExpQSAQKVIndexerLinear``), without it too
(``without_modelopt_fp4``). The router stays unquantized as in every format. Where SGLang
0.5.23's classes build less with NVFP4's method, the export follows them and lists it, which
vLLM's read: Qwen3-Next's full attention's Q, K and V (its ``qkv_proj`` built without
ModelOpt's FP4 config, main and MTP layers), and Qwen3.5's whole MTP layer (its MTP class
built without the quantization config for a serialized NVFP4 checkpoint), listed as the one
tree ``mtp.layers.0.*``."""

from __future__ import annotations

import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic.hf_model import build_model  # noqa: E402
from fp8_dummy.realistic.logical import logical_model  # noqa: E402

E4M3 = torch.float8_e4m3fn
F32 = torch.float32
# format -> (its scale's name, the config's key listing the modules left unquantized, the
# quantized weight's dtype, its scale's; NVFP4: e2m1 codes two a byte, e4m3 scales per 16)
FORMATS = {"fp8": ("weight_scale", "ignore", E4M3, F32),
           "fp8-block": ("weight_scale_inv", "ignored_layers", E4M3, F32),
           "fp8-channel": ("weight_scale", "ignore", E4M3, F32),
           "nvfp4": ("weight_scale", "exclude_modules", torch.uint8, E4M3)}  # fmt: skip
ARCHS = ["qwen3_next", "qwen3_5_moe_text", "qwen4_exp_text"]
# the block's linear modules vLLM builds with the quantization config (expert 0 for them all)
QUANTIZED = [f"self_attn.{x}_proj" for x in "qkvo"]
QUANTIZED += [f"mlp.shared_expert.{p}_proj" for p in ("gate", "up", "down")]
QUANTIZED += [f"mlp.experts.0.{p}_proj" for p in ("gate", "up", "down")]
QWEN4_QUANTIZED = ["self_attn.indexer.index_qk_proj"]
# ... and without it
PLAIN = ["mlp.shared_expert_gate"]
HC = ("input_mix_weight_down", "input_mix_weight_up", "block_inject_weight")
QWEN4_PLAIN = [f"{b}_hyper_connection.{n}" for b in ("attn", "mlp") for n in HC]
# ... and without it in NVFP4 alone: the QSA attention's packed projections
QKV = [f"self_attn.{x}_proj" for x in "qkv"]
QSA = QKV + QWEN4_QUANTIZED


def _modules(arch: str, fmt: str) -> tuple[list[str], list[str]]:
    """(the quantized, the unquantized) linear modules of one decoder block of ``arch`` in
    ``fmt``."""
    if arch == "qwen3_next" and fmt == "nvfp4":
        return [m for m in QUANTIZED if m not in QKV], PLAIN + QKV
    if arch != "qwen4_exp_text":
        return QUANTIZED, PLAIN
    if fmt == "nvfp4":
        return [m for m in QUANTIZED if m not in QSA], PLAIN + QWEN4_PLAIN + QSA
    return QUANTIZED + QWEN4_QUANTIZED, PLAIN + QWEN4_PLAIN


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("arch", ARCHS)
def test_the_mtp_blocks_quantized_tensors(arch, fmt):
    """In each quantized format the MTP block's linear weights vLLM builds with the quantization
    config are the format's codes with their scale beside them; those it builds without it (the
    shared expert's gate, Qwen4-Exp's hyper-connections, in NVFP4 its QSA attention's Q, K, V
    and indexer projections) are bfloat16 without a scale and listed with the ignored modules,
    as the main layers' same modules; the router too."""
    cfg = H.config(arch, hidden=128, vocab=256, mtp=1)
    lm = logical_model(build_model(cfg, dtype=torch.bfloat16), 0, format=fmt, mtp=True,
                       acceptance=0.6)  # fmt: skip
    t = lm.tensors
    scale, key, codes, scales = FORMATS[fmt]
    ignored = set(lm.quantization_config()[key])
    main = f"model.layers.{cfg.num_hidden_layers - 1}."  # a main MoE layer (full attention)
    quantized, plain = _modules(arch, fmt)
    tree = arch == "qwen3_5_moe_text" and fmt == "nvfp4"  # the MTP layer whole, listed once
    assert ("mtp.layers.0.*" in ignored) == tree
    if tree:
        block = [n for n in t if n.startswith("mtp.layers.0.")]
        assert len(block) > 10 and all(t[n].dtype == torch.bfloat16 for n in block)
        assert not [m for m in ignored if m.startswith("mtp.layers.0.") and m != "mtp.layers.0.*"]
    for p in (main,) if tree else ("mtp.layers.0.", main):
        for m in quantized:
            assert t[f"{p}{m}.weight"].dtype == codes, (p, m)
            assert t[f"{p}{m}.{scale}"].dtype == scales, (p, m)
            assert p + m not in ignored, (p, m)
        for m in plain + ["mlp.gate"]:
            assert t[f"{p}{m}.weight"].dtype == torch.bfloat16, (p, m)
            assert not [n for n in t if n.startswith(f"{p}{m}.weight_")], (p, m)
            assert p + m in ignored, (p, m)
