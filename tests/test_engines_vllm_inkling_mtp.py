"""vLLM 0.33's ``InklingMTP`` (Inkling's multimodal checkpoint's MTP layers) builds on this CPU,
at TP=1 and TP=2 (two gloo processes), from the small multimodal config fp8_dummy's tests make
(tests/helpers/speculative.py's ``inkling_mm``), as its proposer builds the draft: what its
loader would be given is ready, though no realistic model of that checkpoint is made
(tests/test_realistic_speculative_inkling_mm.py says why). Its parameters are those the
checkpoint's MTP names load into (written out from its loader: ``model.mtp.layers.{i}.`` to
``model.layers.{i}.``, ``attn.wq_du``/``wk_dv``/``wv_dv``/``wr_du`` stacked into
``attn.qkvr``, ``mlp.w13_dn`` whole into ``mlp.gate_up_proj``, ``mlp.w2_md`` into
``mlp.down_proj``; no backbone ``embed_norm`` where the config leaves vLLM's ``use_embed_norm``
off), the column-parallel ones and the short convolutions' channels halved at TP=2,
the row-parallel ones' columns. Without vLLM 0.33: skipped, with why."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_inkling_mtp_worker.py"

require("vllm", "0.33.", "Inkling's MTP class")

# the draft's parameters of MTP layer 0 (hidden 64, 4 heads of 32 and 2 kv heads, d_rel 8,
# intermediate 128, convolutions of 4) at TP=1 -> the checkpoint names its loader reads into it
LAYER = {"hidden_norm.weight": [64], "embed_norm.weight": [64], "input_proj.weight": [64, 128]}
BLOCK = {"attn_norm.weight": [64], "attn.qkvr.weight": [128 + 64 + 64 + 32, 64],
         "attn.wo_ud.weight": [64, 128], "attn.rel_logits_proj.proj": [8, 64],
         "attn.q_norm.weight": [32], "attn.k_norm.weight": [32],
         "attn.k_sconv.weight": [64, 1, 4], "attn.v_sconv.weight": [64, 1, 4],
         "mlp_norm.weight": [64], "mlp.gate_up_proj.weight": [256, 64],
         "mlp.down_proj.weight": [64, 128], "attn_sconv.weight": [64, 1, 4],
         "mlp_sconv.weight": [64, 1, 4]}  # fmt: skip
# split by rows (column-parallel; the short convolutions by channel) and by columns
# (row-parallel) at TP=2
ROWS = ("attn.qkvr.weight", "mlp.gate_up_proj.weight", "attn.k_sconv.weight",
        "attn.v_sconv.weight", "attn_sconv.weight", "mlp_sconv.weight")  # fmt: skip
COLUMNS = ("attn.wo_ud.weight", "mlp.down_proj.weight")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    return W.pair(WORKER, tmp_path_factory.mktemp("inkling"), ROOT)


def _expected(tp: int) -> dict[str, list[int]]:
    out = {f"model.layers.0.{n}": s for n, s in LAYER.items()}
    for name, shape in BLOCK.items():
        shape = list(shape)
        if name in ROWS:
            shape[0] //= tp
        if name in COLUMNS:
            shape[1] //= tp
        out[f"model.layers.0.transformer_block.{name}"] = shape
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2])
def test_inklings_mtp_class_builds_on_the_cpu(runs, tp):
    for result in runs:
        got = result[str(tp)]
        assert got["class"] == "InklingMTP"
        assert got["params"] == _expected(tp)
