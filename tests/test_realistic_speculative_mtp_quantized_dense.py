"""ERNIE 4.5 MoE's, LongCat-Flash's and MiniMax-M3's MTP layers in the quantized formats
(docs/realistic.md#speculative-decoding), the fast tier: each module quantized where vLLM 0.33's
draft class builds it with the quantization config, its scales under the names the class's
loader reads (ErnieMTP: the Llama decoder block, its ``nn.Linear`` input projection unquantized
and listed as ignored; LongCatFlashMTP, MiniMaxM3MTP: the block and ``eh_proj``); a format whose
MTP scales the class cannot load refused before anything is written. The names, dtypes and scale
shapes are written out here from those classes, not read from the export; the design's 0s and 1s
in a quantized ``eh_proj`` are read back from its bytes and scales by an independent decoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.dequantize import unquantized  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)
from safetensors import safe_open  # noqa: E402

from fp8_dummy.realistic import build_model  # noqa: E402
from fp8_dummy.realistic.export import ExportError, export  # noqa: E402
from fp8_dummy.realistic.formats import UnsupportedFormatError  # noqa: E402
from fp8_dummy.realistic.logical import logical_model  # noqa: E402

FP8 = ("fp8", "fp8-block", "fp8-channel")
E4M3 = torch.float8_e4m3fn


def _export(cfg, folder, fmt: str, acceptance=0.6):
    """``cfg`` exported in ``fmt``: (name -> tensor, the written quantization_config)."""
    cfg.save_pretrained(folder / "c")
    export(folder / "c", folder / fmt, format=fmt, acceptance=acceptance, progress=False)
    t = {}
    for f in sorted((folder / fmt).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            t.update({n: h.get_tensor(n) for n in h.keys()})
    quant = json.loads((folder / fmt / "config.json").read_text()).get("quantization_config")
    return t, quant


def _ignored(quant: dict) -> list[str]:
    """The modules a quantization config leaves alone (compressed-tensors' ``ignore``, FP8's
    ``ignored_layers``)."""
    return quant.get("ignore", quant.get("ignored_layers"))


def _scales(fmt: str, out: int, inp: int) -> dict[str, tuple]:
    """A quantized linear's scales and their shapes in ``fmt``: compressed-tensors'
    ``weight_scale`` per tensor (a scalar) or per output channel [out, 1]; FP8 block's
    ``weight_scale_inv`` per 128x128 block."""
    if fmt == "fp8":
        return {"weight_scale": ()}
    if fmt == "fp8-channel":
        return {"weight_scale": (out, 1)}
    return {"weight_scale_inv": (-(-out // 128), -(-inp // 128))}


def _holds_quantized(t: dict, module: str, fmt: str) -> None:
    w = t[module + ".weight"]
    assert w.dtype == E4M3, module
    want = {module + "." + s: shape for s, shape in _scales(fmt, *w.shape).items()}
    got = {n: tuple(t[n].shape) for n in t if n.startswith(module + ".weight_")}
    assert got == want, module
    assert all(t[n].dtype == torch.float32 for n in want), module


ERNIE = "model.mtp_block.0."
ERNIE_LINEARS = [f"self_attn.{x}_proj" for x in "qkvo"]
ERNIE_LINEARS += [f"mlp.{x}_proj" for x in ("gate", "up", "down")]


@pytest.mark.parametrize("fmt", FP8)
def test_ernies_mtp_block_is_quantized_and_its_input_projection_is_not(fmt, tmp_path):
    """ERNIE's MTP block (vLLM's ErnieMTP builds a Llama decoder layer with the quantization
    config and maps ``model.mtp_block.0.``, scales included, into it): its seven linears e4m3
    with the format's scales, none listed as ignored; ``mtp_linear_proj`` (a plain
    ``nn.Linear`` there) bfloat16 without scales and listed; the norms bfloat16."""
    t, quant = _export(H.config("ernie4_5_moe", mtp=1), tmp_path, fmt)
    for linear in ERNIE_LINEARS:
        _holds_quantized(t, ERNIE + linear, fmt)
    ignored = _ignored(quant)
    assert not [m for m in ignored if m.startswith("model.mtp_block.")], ignored
    assert "model.mtp_linear_proj.0" in ignored
    mtp = [n for n in t if n.startswith("model.mtp_")]
    own = ["model.mtp_emb_norm.0.weight", "model.mtp_hidden_norm.0.weight",
           "model.mtp_linear_proj.0.weight"]  # fmt: skip
    assert sorted(n for n in mtp if not n.startswith(ERNIE)) == own
    for name in own + [ERNIE + "input_layernorm.weight"]:
        assert t[name].dtype == torch.bfloat16, name


L = "model.mtp.layers.0."
# vLLM 0.33's LongCatFlashMTP.load_weights name table: its FP8 scales (``weight_scale_inv``)
LONGCAT_SCALED = ["eh_proj"] + [f"self_attn.{x}" for x in (
    "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")] + [
    f"transformer_layer.mlp.{x}_proj" for x in ("gate", "up", "down")]  # fmt: skip


def test_longcats_mtp_layer_in_fp8_block_is_the_names_vllms_table_reads():
    """LongCat-Flash in FP8 block: ``eh_proj`` (vLLM builds it with the quantization config
    under the bare prefix ``eh_proj``, which no ignore list of the checkpoint's names reaches)
    and every linear of the block e4m3 with ``weight_scale_inv``, exactly the scale names of
    vLLM's table (any other ``model.mtp.`` name fails its loader), ``eh_proj`` not listed."""
    from test_realistic_speculative_longcat import VLLM_NAMES

    cfg = H.config("longcat_flash", hidden=256, mtp=1)
    model = build_model(cfg, dtype=torch.bfloat16)
    made = logical_model(model, 0, format="fp8-block", acceptance=0.6, mtp=True)
    t = made.tensors
    scaled = {f"{L}{m}.weight_scale_inv" for m in LONGCAT_SCALED}
    assert {n for n in t if n.startswith("model.mtp.")} == VLLM_NAMES | scaled
    for m in LONGCAT_SCALED:
        assert t[f"{L}{m}.weight"].dtype == E4M3, m
    assert not [s for s in made.skipped if s.startswith("model.mtp.")], made.skipped


MM = "language_model.model.mtp.layers.0."


def test_minimax_m3s_mtp_layer_in_fp8_channel_is_quantized_with_eh_proj(tmp_path):
    """MiniMax-M3 per channel: the block's linears (the sparse attention's q/k/v/o and its
    indexer's index_q/index_k projections, the shared experts', every routed expert's
    w1/w2/w3) and ``eh_proj`` (vLLM's ``ReplicatedLinear`` with the quantization config) e4m3
    with ``weight_scale`` [out, 1], none listed; the router and the norms unquantized."""
    cfg = H.config("minimax_m3_vl", mtp=1)
    t, quant = _export(cfg, tmp_path, "fp8-channel")
    b = MM + "transformer_layer."
    linears = (
        [MM + "eh_proj"]
        + [b + f"self_attn.{x}_proj" for x in ("q", "k", "v", "o", "index_q", "index_k")]
        + [b + f"block_sparse_moe.shared_experts.{x}_proj" for x in ("gate", "up", "down")]
    )
    linears += [b + f"block_sparse_moe.experts.{e}.w{w}"
                for e in range(cfg.text_config.num_local_experts) for w in (1, 2, 3)]  # fmt: skip
    for linear in linears:
        _holds_quantized(t, linear, "fp8-channel")
    ignored = _ignored(quant)
    assert not [m for m in ignored if m.startswith(MM) and not m.endswith(".gate")], ignored
    assert t[b + "block_sparse_moe.gate.weight"].dtype != E4M3
    for n in ("enorm", "hnorm", "final_layernorm", "transformer_layer.input_layernorm"):
        assert t[f"{MM}{n}.weight"].dtype == torch.bfloat16, n


EH_PROJ = [("longcat_flash", "fp8-block", L + "eh_proj"),
           ("minimax_m3_vl", "fp8-channel", MM + "eh_proj")]  # fmt: skip


@pytest.mark.parametrize("arch, fmt, proj", EH_PROJ)
def test_a_quantized_eh_proj_carries_the_design(arch, fmt, proj, tmp_path):
    """The design's rows of ``eh_proj`` (0s and a 1 on the code rows, decoded from the e4m3
    codes times their scales) are the bfloat16 export's rows exactly; the other rows keep the
    rule's spread."""
    cfg = H.config(arch, hidden=256, mtp=1)
    plain = H.read(H.export(cfg, tmp_path / "plain", 0.6))[proj + ".weight"]
    _export(cfg, tmp_path, fmt)
    w = H.read(unquantized(tmp_path / fmt, tmp_path / "decoded"))[proj + ".weight"]
    units = np.flatnonzero((plain == 1).any(1))
    assert units.size > 0
    assert np.array_equal(w[units], plain[units])
    rest = np.delete(w, units, axis=0)
    assert 0.9 < rest.std() * np.sqrt(2 * 256) < 1.1, rest.std()


REFUSED = [("longcat_flash", "fp8", "num_nextn_predict_layers", "LongCatFlashMTP"),
           ("longcat_flash", "fp8-channel", "num_nextn_predict_layers", "LongCatFlashMTP"),
           ("minimax_m3_vl", "fp8-block", "num_mtp_modules", "MiniMaxM3MTP"),
           ("minimax_m3_vl", "fp8", "num_mtp_modules", "qkv_proj"),
           ("longcat_flash", "nvfp4", "num_nextn_predict_layers", "LongCatFlashMTP"),
           ("minimax_m3_vl", "nvfp4", "num_mtp_modules", "lm_head"),
           ("glm_ocr", "nvfp4", "num_nextn_predict_layers", "head"),
           ("hy_v3", "nvfp4", "num_nextn_predict_layers", "head")]  # fmt: skip


_MTP = {"longcat_flash": "model.mtp.", "minimax_m3_vl": "language_model.model.mtp."}
_MTP.update(glm_ocr="model.language_model.layers.2.", hy_v3="model.layers.2.")


@pytest.mark.parametrize("arch, fmt, count, named", REFUSED)
def test_a_format_the_draft_class_cannot_load_is_refused(arch, fmt, count, named, tmp_path):
    """LongCat-Flash per tensor or per channel (vLLM's loader maps its MTP scales by
    ``weight_scale_inv`` names alone), MiniMax-M3 in FP8 block (its loader renames them to
    ``weight_scale``, which FP8 block layers lack) or per tensor (the fused q/k/v/index
    projection's per-tensor scale takes q, k, v alone), MiniMax-M3, GLM-OCR and HY-V3 in NVFP4
    (each builds its MTP head with the NVFP4 method under a name no list of the checkpoint's
    reaches): the export refused, naming the count
    to clear, before anything is written; the in-engine fill's logical model made (the target
    never loads its MTP layers; a draft's load fails in vLLM whatever the checkpoint); the same
    config without MTP layers exported in the format."""
    cfg = H.config(arch, mtp=1)
    cfg.save_pretrained(tmp_path / "c")
    with pytest.raises(ExportError, match=f"{named}.*set {count} to 0"):
        export(tmp_path / "c", tmp_path / "out", format=fmt, progress=False)
    assert not (tmp_path / "out").exists()
    model = build_model(cfg, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedFormatError, match=named):
        logical_model(model, 0, format=fmt, mtp=True, refuse_unloadable=True)
    made = logical_model(model, 0, format=fmt, mtp=True)  # an in-engine fill's
    assert any(n.startswith(_MTP[arch]) for n in made.tensors)
    none = H.config(arch, **({"num_nextn_predict_layers": 0} if arch == "longcat_flash" else {}))
    none.save_pretrained(tmp_path / "none")
    export(tmp_path / "none", tmp_path / "plain", format=fmt, progress=False)
    assert (tmp_path / "plain" / "config.json").exists()
