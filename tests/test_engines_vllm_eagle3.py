"""The EAGLE-3 draft of ``export --draft-layout eagle3`` in vLLM 0.33's own
``Eagle3LlamaForCausalLM``, built as its proposer builds the draft of a speculative config of
method ``eagle3`` and loaded by vLLM's own safetensors loader, at TP=1 and TP=2 (two gloo
processes; helpers/vllm_eagle3_worker.py): every parameter equal byte for byte to the export's
tensors placed as vLLM's parallel layers place a checkpoint, none left as poisoned, the draft's
own embedding and head kept (not the target's), no vocabulary map. Without vLLM 0.33: skipped,
with why."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import workers as W
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "vllm_eagle3_worker.py"

require("vllm", "0.33.", "the EAGLE-3 draft class")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    return W.pair(WORKER, tmp_path_factory.mktemp("eagle3"), ROOT)


@pytest.mark.parametrize("tp", [1, 2])
def test_vllms_class_holds_the_export(runs, tp):
    for r in [runs[0]["1"]] if tp == 1 else [runs[0]["2"], runs[1]["2"]]:
        assert "error" not in r, r["error"]
        assert r["class"] == "Eagle3LlamaForCausalLM"
        assert r["unexpected"] == [] and r["mismatch"] == [], r
        assert r["poisoned"] == [], "a parameter the load never wrote"
        assert r["flags"] == [True, True] and r["d2t"] is False


def test_two_ranks_hold_their_halves(runs):
    one, two = runs[0]["1"]["shapes"], runs[0]["2"]["shapes"]
    assert [n for n, s in one.items() if two[n] != s], "TP=2 splits the layer and the vocabulary"
