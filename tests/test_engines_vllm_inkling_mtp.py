"""Inkling's multimodal checkpoint's MTP layers in vLLM 0.33's own ``InklingMTP``: built on this
CPU as its proposer builds the draft, at TP=1 and TP=2 (two gloo processes), from the export of
the small multimodal config fp8_dummy's tests make (tests/helpers/speculative.py's
``inkling_mm``: one MTP layer with the chained hidden state's norm; vLLM's own keys
``use_global_scale`` and ``use_embed_norm``, which its class reads to build the dense MLP's
scale and the backbone's embedding norm, left to the export to write), its parameters
poisoned, then its own
``load_weights`` given every tensor of the export. Every parameter is reached (the loader
reports it: ``model.mtp.layers.{i}.`` to ``model.layers.{i}.``, ``attn.wq_du``/``wk_dv``/
``wv_dv``/``wr_du`` stacked into ``attn.qkvr``, ``mlp.w13_dn`` into ``mlp.gate_up_proj``,
``mlp.w2_md`` into ``mlp.down_proj``, ``model.llm.embed_norm`` into the backbone's embedding
norm) and holds the export's bytes, its rank's share of them (the float32 short convolutions
cast to the draft's bfloat16, as its loader casts them). Without vLLM 0.33: skipped, with
why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_inkling_mtp_worker.py"

require("vllm", "0.33.", "Inkling's MTP class")

from helpers import speculative as H  # noqa: E402

# the draft's parameters: MTP layer 0's, the chained hidden state's norm, the backbone's norm
LAYER = ["hidden_norm.weight", "embed_norm.weight", "input_proj.weight"]
BLOCK = ["attn_norm.weight", "attn.qkvr.weight", "attn.wo_ud.weight",
         "attn.rel_logits_proj.proj", "attn.q_norm.weight", "attn.k_norm.weight",
         "attn.k_sconv.weight", "attn.v_sconv.weight", "mlp_norm.weight",
         "mlp.gate_up_proj.weight", "mlp.down_proj.weight", "mlp.global_scale",
         "attn_sconv.weight", "mlp_sconv.weight"]  # fmt: skip
PARAMS = {f"model.layers.0.{n}" for n in LAYER}
PARAMS |= {f"model.layers.0.transformer_block.{n}" for n in BLOCK}
PARAMS |= {"model.chain_norm.weight", "model.backbone_embed_norm.weight"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("inkling")
    cfg = H.inkling_mm(mtp=1, hidden=64, vocab=200, chain_hidden_post_norm=True)
    cfg.architectures = ["InklingForConditionalGeneration"]
    out = H.export(cfg, tmp, 0.6)
    text = json.loads((out / "config.json").read_text())["text_config"]
    assert (text["use_global_scale"], text["use_embed_norm"]) == (True, True)  # the export's
    out.rename(tmp / "export")
    return W.pair(WORKER, tmp, ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2])
def test_inklings_mtp_class_holds_the_export(runs, tp):
    for result in runs:
        got = result[str(tp)]
        assert got["class"] == "InklingMTP"
        assert set(got["same"]) == PARAMS
        assert set(got["loaded"]) == PARAMS
        assert [n for n, same in got["same"].items() if not same] == []
