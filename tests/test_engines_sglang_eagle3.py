"""The EAGLE-3 draft of ``export --draft-layout eagle3`` in SGLang 0.5.23's own
``LlamaForCausalLMEagle3``, built as SGLang's scheduler builds the draft of
``--speculative-algorithm EAGLE3`` and loaded by SGLang's own safetensors reader and the class's
``load_weights``, at TP=1 (one process) and TP=2 (two gloo processes;
helpers/sglang_eagle3_worker.py): every parameter equal byte for byte to the export's tensors
placed as SGLang's parallel layers place a checkpoint, none left as poisoned; the class reads
the config as vLLM's does (three auxiliary hidden states, ``fc`` 3 x the target's width, its
own head over the target's vocabulary, no vocabulary map). Two drafts: of width 512 (vLLM's
test's), which keeps its own embedding, and of the target's width (``--draft-hidden 128``), whose
embedding SGLang's EAGLE worker replaces with the target's (``set_embed``: the draft's key and
view codes unused, docs/realistic.md#eagle-3s-layout says what that does to acceptance).
Without SGLang: skipped, with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "sglang_eagle3_worker.py"

require("sglang.srt.model_loader.weight_utils")

from helpers import sglang_models as S  # noqa: E402
from helpers import vllm_eagle3_worker as E  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{(world, rank): {case: findings}} of the three processes: TP=1, and TP=2's two ranks;
    "configs": each case's exported draft config."""
    root = tmp_path_factory.mktemp("sglang-eagle3")
    configs = {}
    for case, hidden in CASES.items():  # vLLM's test's target (four layers, width 128)
        E.export(root / case, hidden)
        configs[case] = json.loads((root / case / "draft" / "config.json").read_text())
    found = S.run_ranks(WORKER, root, ROOT)
    for got in found.values():
        assert sorted(got) == sorted(CASES)
    return dict(found, configs=configs)


CASES = {"wide": 512, "same": 128}  # the draft's width: 512, the target's


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("where", S.RANKS, ids=["tp1", "tp2-rank0", "tp2-rank1"])
def test_sglangs_class_holds_the_export(runs, where, case):
    r = runs[where][case]
    assert r["class"] == "LlamaForCausalLMEagle3"
    assert r["unexpected"] == [] and r["mismatch"] == [], r
    assert r["poisoned"] == [], "a parameter the load never wrote"


@pytest.mark.parametrize("case", CASES)
def test_sglang_reads_the_config_as_vllm_does(runs, case):
    r, draft = runs[(1, 0)][case], runs["configs"][case]
    ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert draft["target_hidden_size"] == E.TARGET["hidden_size"]
    assert r["aux"] == len(ids) == 3 and r["fc_in"] == 3 * E.TARGET["hidden_size"]
    assert r["head_vocab"] == draft["vocab_size"] == draft["draft_vocab_size"]
    assert not r["head_from_target"] and not r["hot_token_id"]
    assert not r["norm_before_fc"] and not r["fc_norm"]
    # SGLang keeps the draft's own embedding only where its width is not the target's
    assert r["keeps_own_embedding"] == (draft["hidden_size"] != draft["target_hidden_size"])


@pytest.mark.parametrize("case", CASES)
def test_two_ranks_hold_their_halves(runs, case):
    one = runs[(1, 0)][case]["shapes"]
    for rank in (0, 1):
        two = runs[(2, rank)][case]["shapes"]
        assert [n for n, s in one.items() if two[n] != s], "TP=2 splits the layer and vocabulary"
