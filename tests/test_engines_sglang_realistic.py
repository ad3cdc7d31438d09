"""``FP8_DUMMY_SGLANG=realistic`` on SGLang 0.5.23's own model classes: Llama, Qwen3-MoE,
DeepSeek-V3, Mixtral and LongCat-Flash (its main model: two MLA attentions, two dense MLPs and a
MoE with zero experts per layer; SGLang's own config class, which folds ``num_layers`` into
``num_hidden_layers``), in bf16 and FP8 block, Qwen3-MoE and DeepSeek-V3 in fp8 too (the routed
experts per channel, in a config group SGLang picks by the experts' names), Llama, Qwen3-MoE,
DeepSeek-V3 and Mixtral in NVFP4 (ModelOpt's config, which SGLang hands the class as
``modelopt_fp4``; its quantized Mixtral places whole experts on ranks), built on this CPU
from tiny configs (helpers/sglang_models.py says how, and what is replaced to build them without
SGLang's GPU kernels), at TP=1 (one process) and TP=2 (two gloo processes).

The oracle: the checkpoint ``python -m fp8_dummy export`` writes for the same config (seed 0),
read by SGLang's own safetensors reader into a twin of the model through its own
``load_weights``. Every parameter must be equal byte for byte; the two copies are poisoned
with different bytes first, so what neither writes is caught and must be one of the tensors
no checkpoint reaches in SGLang (named below). Without SGLang: skipped, with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.engine_import import require

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "sglang_models_worker.py"

require("sglang.srt.model_loader.weight_utils")

from helpers import sglang_models as S  # noqa: E402

from fp8_dummy.realistic.export import export  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{(world, rank): {case: findings}} of the three processes: TP=1, and TP=2's two ranks."""
    root = tmp_path_factory.mktemp("sglang")
    for case in S.CASES:
        export(
            S.write_config(case, root / case / "source"), root / case / "checkpoint", progress=False
        )
    out = S.run_ranks(WORKER, root, ROOT)
    for found in out.values():
        assert sorted(found) == sorted(S.CASES)
    return out


def _unreachable(case: str, name: str) -> bool:
    """What no checkpoint reaches in SGLang 0.5.23: the KV-cache scales of FP8 attention; the
    NVFP4 experts' swizzled block scales (``sglang_models.SWIZZLED``); and Llama's FP8 block scales,
    which its loader renames to ``weight_scale`` and then drops."""
    if name.endswith((".k_scale", ".v_scale")):
        return True
    if case.endswith("-nvfp4") and name.endswith(S.SWIZZLED):
        return True
    return case == "llama-blk" and name.endswith(".weight_scale_inv")


# the MLA projections SGLang's DeepSeek and LongCat loaders concatenate (LongCat's two
# attentions per layer: self_attn.0, self_attn.1)
FUSED = re.compile(r"\.self_attn\.(\d+\.)?(q_a_proj|kv_a_proj_with_mqa)\.[a-z_]+$")


def _concatenated(name: str) -> bool:
    return FUSED.search(name) is not None


@pytest.mark.parametrize("case", S.CASES)
def test_realistic_is_the_export_read_by_sglang(runs, case):
    one = runs[(1, 0)][case]
    for (w, r), found in runs.items():
        got = found[case]
        where = (case, w, r)
        assert "error" not in got, (where, got["error"])
        assert got["mismatch"] == [] and got["checked"] > 10, (where, got)
        # blocks only, but what SGLang's own loader concatenates whole (DeepSeek's and
        # LongCat's q_a and kv_a projections into a fused, replicated one): whole, as from disk
        assert all(_concatenated(n) for n in got["materialized"]), (where, got["materialized"])
        assert all(_unreachable(case, n) for n in got["unreached"]), (where, got["unreached"])
        if case.endswith(("-blk", "-fp8")) and case != "llama-blk":
            assert got["distinct_fp8"] > 114, (where, got["distinct_fp8"])
        if w == 2:  # a rank holds a shard of a tensor, or not the tensor (an expert elsewhere)
            sharded = sum(got["shapes"].get(n) != s for n, s in one["shapes"].items())
            assert sharded >= 4, (where, sharded)
    held = {n for (w, _), found in runs.items() if w == 2 for n in found[case]["shapes"]}
    assert held == set(one["shapes"]), (case, sorted(held ^ set(one["shapes"]))[:8])
    if case == "llama-blk":  # SGLang's own loader drops every block scale: so does the hook
        assert any(n.endswith("weight_scale_inv") for n in one["unreached"])
