"""The indexed sparse MLA models (DeepSeek-V3.2, GLM-5, GLM-5-Next, HY-V4) in each FP8 format,
their MTP block and main layers: what vLLM 0.33's classes build with the quantization config
is quantized, what they build without it stays unquantized and is listed among the config's
unquantized modules. Written out here from vLLM's classes, not from the export: the indexer's
``wk`` and ``weights_proj`` are one ``wk_weights_proj`` built with ``quant_config=None``
(DeepSeek-V3.2's and GLM-5's ``Indexer``, HY-V4's), in the main layers as in the MTP block;
GLM-5-Next's ``Glm5NextDecoderLayer`` builds its whole attention with ``quant_config=None``
(the MTP block's MLA and the main layers', and their KDA: ``Glm5NextLinearAttention`` builds
with the config set to None); HY-V4's fused routed experts (``mlp.experts.gate_up_proj`` [E, 2I, H],
``down_proj``) are a fused MoE built with the config, each expert's codes and scales read from
``<name>_scale_inv`` [E, N/128, K/128] or ``<name>_scale`` [E, N, 1] (``HYV4MTP``'s and
``HYV4ForCausalLM``'s loaders); the other linear modules take the config."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402

from fp8_dummy.realistic import UnsupportedFormatError, build_model, logical_model  # noqa: E402

E4M3 = torch.float8_e4m3fn
INDEXER = ["self_attn.indexer.wk", "self_attn.indexer.weights_proj"]
ATTENTION = ["self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
             "self_attn.kv_b_proj", "self_attn.o_proj", "self_attn.indexer.wq_b"]  # fmt: skip
SHARED = [f"mlp.shared_experts.{p}_proj" for p in ("gate", "up", "down")]
ROUTED = [f"mlp.experts.{e}.{p}_proj" for e in (0, 15) for p in ("gate", "up", "down")]
HY_V4 = ATTENTION + ["self_attn.linear_gate"] + SHARED
# model -> (the MTP block's prefix at two main layers, its modules vLLM builds unquantized,
# those it builds with the quantization config; the main layers' prefixes whose indexer vLLM
# builds unquantized)
CASES = {
    "deepseek_v32": ("model.layers.2.", INDEXER, ATTENTION + SHARED + ROUTED, ["model.layers.0."]),
    "glm_moe_dsa": ("model.layers.2.", INDEXER, ATTENTION + SHARED + ROUTED, ["model.layers.0."]),
    "glm5_next": ("model.language_model.layers.2.", ATTENTION + INDEXER, SHARED + ROUTED, []),
    "hy_v4": ("model.mtp_layers.0.", INDEXER, HY_V4, ["model.layers.0.", "model.layers.1."]),
}
# format -> (the scale's name beside a quantized weight, the config's list of modules it leaves
# unquantized)
FORMATS = {
    "fp8": ("weight_scale", "ignore"),
    "fp8-block": ("weight_scale_inv", "ignored_layers"),
    "fp8-channel": ("weight_scale", "ignore"),
}
EXPERTS, WIDTH, HIDDEN = 16, 128, 64  # HY-V4's routed experts: each's width, a block's rows


def _logical(model: str, fmt: str, **more):
    cfg = H.config(model, hidden=HIDDEN, vocab=200, mtp=1, **more)
    return logical_model(build_model(cfg), 0, format=fmt, mtp=True)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("model", list(CASES))
def test_the_indexed_models_are_quantized_as_vllm_builds_them(model, fmt):
    prefix, plain, quantized, main = CASES[model]
    scale, listed = FORMATS[fmt]
    more = {"moe_intermediate_size": WIDTH} if model == "hy_v4" else {}
    lm = _logical(model, fmt, **more)
    dtypes = {n: t.dtype for n, t in lm.tensors.items()}
    shapes = {n: tuple(t.shape) for n, t in lm.tensors.items()}
    ignored = set(lm.quantization_config()[listed])
    unquantized = [prefix + m for m in plain] + [p + m for p in main for m in INDEXER]
    for name in unquantized:
        # as the class keeps it (HY-V4's weights_proj: float32)
        assert dtypes[f"{name}.weight"] in (torch.bfloat16, torch.float32), name
        assert not any(n.startswith(f"{name}.") and "scale" in n for n in dtypes), name
        assert name in ignored, name
    for name in [prefix + m for m in quantized] + [p + "self_attn.indexer.wq_b" for p in main]:
        assert dtypes[f"{name}.weight"] == E4M3, name
        assert dtypes[f"{name}.{scale}"] == torch.float32, name
        assert name not in ignored, name
    if model == "glm5_next":  # every attention tensor of the main layers (KDA, MLA)
        main = "model.language_model.layers."
        attention = [n for n in dtypes if n.startswith(main) and ".self_attn." in n]
        assert {n.split(".")[3] for n in attention} == {"0", "1", "2"}  # 2: the MTP block
        assert not [n for n in attention if dtypes[n] == E4M3 or "scale" in n]
        linear = [n[: -len(".weight")] for n in attention
                  if n.endswith(".weight") and len(shapes[n]) == 2]  # fmt: skip
        assert linear and set(linear) <= ignored
        for name in (f"{main}0.mlp.gate_proj", f"{main}1.mlp.experts.0.down_proj"):
            assert (dtypes[f"{name}.weight"], dtypes[f"{name}.{scale}"]) == (E4M3, torch.float32)
    if model != "hy_v4":
        return
    for p in (prefix, "model.layers.1."):  # the fused routed experts, the main layer's too
        for proj, rows in (("gate_up_proj", 2 * WIDTH), ("down_proj", HIDDEN)):
            name = f"{p}mlp.experts.{proj}"
            cols = HIDDEN if proj == "gate_up_proj" else WIDTH
            grid = (EXPERTS, -(-rows // 128), -(-cols // 128))
            scales = {f"{name}_scale_inv": grid} if fmt == "fp8-block" else {}
            scales = scales or {f"{name}_scale": (EXPERTS, rows, 1)}
            assert (dtypes[name], shapes[name]) == (E4M3, (EXPERTS, rows, cols)), name
            assert {n: s for n, s in shapes.items() if n.startswith(f"{name}_")} == scales
            assert all(dtypes[n] == torch.float32 for n in scales), name
    if fmt == "fp8":  # the routed experts in the per-channel group vLLM's fused MoE takes
        groups = lm.quantization_config()["config_groups"]
        assert [g["weights"]["strategy"] for g in groups.values()] == ["tensor", "channel"]


def test_fused_experts_whose_halves_straddle_a_block_are_refused():
    """HY-V4's fused gate/up experts of 64 rows each in 128-row blocks: a block of scales would
    hold rows of both, which vLLM's loader splits in halves; refused before anything is made."""
    with pytest.raises(UnsupportedFormatError, match="gate_up_proj.*straddle"):
        _logical("hy_v4", "fp8-block", moe_intermediate_size=64)


def test_fused_experts_are_refused_in_nvfp4(tmp_path):
    """HY-V4's fused routed experts are quantized in the FP8 formats alone: NVFP4, which vLLM
    builds them in, refused for the model, before anything is written."""
    from fp8_dummy.realistic.export import ExportError, export

    with pytest.raises(UnsupportedFormatError, match="fused routed experts.*FP8 formats only"):
        _logical("hy_v4", "nvfp4")
    cfg = H.config("hy_v4", hidden=HIDDEN, vocab=200)
    cfg.save_pretrained(tmp_path / "c")
    with pytest.raises(ExportError, match="FP8 formats only"):
        export(tmp_path / "c", tmp_path / "out", format="nvfp4", progress=False)
    assert not (tmp_path / "out").exists()


def test_other_fused_experts_stay_as_they_were():
    """Inkling's fused experts (``mlp.experts.gate_up_proj``, stored [E, out, in] too), which
    vLLM reads under names of its own: no FP8 format quantizes them here."""
    lm = logical_model(build_model(H.config("inkling_text", hidden=64, vocab=200)), 0,
                       format="fp8-block")  # fmt: skip
    fused = [n for n in lm.tensors if n.endswith((".experts.gate_up_proj", ".experts.down_proj"))]
    assert fused and all(lm.tensors[n].dtype == torch.bfloat16 for n in fused)
    assert not [n for n in lm.tensors if n.endswith("_proj_scale_inv")]
