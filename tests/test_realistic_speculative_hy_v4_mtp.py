"""HY-V4's MTP layers (docs/realistic.md#speculative-decoding): ``model.mtp_layers.{i}.`` under
the names vLLM's ``HYV4MTP`` reads (written out here from its loader, not from the fill): the
decoder block without the iHC boundaries (vLLM builds it with ``enable_ihc`` off), ``enorm``,
``hnorm``, ``eh_proj`` [H, 2H], ``final_layernorm``; and (the slow tier) the acceptance through
an independent forward of the MTP layer (tests/helpers/hy_v4_mtp_forward.py): transformers'
class drops ``model.mtp_layers.*`` and cannot run them."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.hy_v4_mtp_forward import independent_hy_v4_mtp_acceptance  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import config_checkpoint  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402

# HY-V4's MTP block under vLLM's names: MLA with the indexer, the output gate and the sinks;
# the MoE (its router's bias, the fused experts, the shared expert's gate_proj, which vLLM's
# loader stacks into its gate_up_proj); no hc_pre.* (vLLM builds no iHC in it)
BLOCK = [f"self_attn.{n}.weight" for n in ("q_a_proj", "q_a_layernorm", "q_b_proj",
                                             "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj",
                                             "o_proj", "linear_gate")]  # fmt: skip
BLOCK += [f"self_attn.indexer.{n}" for n in ("wq_b.weight", "wk.weight", "weights_proj.weight",
                                             "k_norm.weight", "k_norm.bias")]  # fmt: skip
BLOCK += ["self_attn.learnable_sink_param", "input_layernorm.weight",
          "post_attention_layernorm.weight", "mlp.gate.weight", "mlp.gate.e_score_correction_bias",
          "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]  # fmt: skip
BLOCK += [f"mlp.shared_experts.{x}_proj.weight" for x in ("gate", "up", "down")]
OWN = ["enorm.weight", "hnorm.weight", "eh_proj.weight", "final_layernorm.weight"]


@pytest.mark.parametrize("layers", [1, 2])
def test_hy_v4_mtp_under_vllms_names(layers):
    """Every MTP layer's tensors under ``model.mtp_layers.{i}.`` (vLLM's loader reads every
    one there; under ``model.layers.{L+i}.`` it would read only the first of two), no copy of
    the embedding or the lm_head (its loader takes the model's), the main layers' names
    unchanged."""
    cfg = H.config("hy_v4", mtp=layers)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    want = {f"model.mtp_layers.{i}.{n}" for i in range(layers) for n in BLOCK + OWN}
    assert {n for n in t if n.startswith("model.mtp_layers.")} == want
    assert t["model.mtp_layers.0.eh_proj.weight"].shape == (128, 256)
    main = config_checkpoint(H.config("hy_v4"), 0).tensors
    assert {n for n in t if not n.startswith("model.mtp_layers.")} == set(main)
    assert S.mtp_layers(cfg) == ("hy_v4", layers)
    assert S.mtp_prefixes(cfg) == ("model.mtp_layers.",)
    assert S.mtp_layers(H.config("hy_v4")) == (None, 0)


FORWARD = [(a, 1, {}) for a in (0.3, 0.6, 0.9)] + [(0.6, 2, {})]
# a config the design was not developed on: other hidden size, vocabulary, depth, k, seed
FORWARD += [(0.8, 3, dict(hidden=192, vocab=6000, layers=3, seed=13))]


@pytest.mark.slow
@pytest.mark.parametrize("acceptance,k,other", FORWARD)
def test_hy_v4_mtp_by_an_independent_forward(acceptance, k, other, tmp_path):
    from fp8_dummy.realistic.export import export

    other = dict(other)
    seed = other.pop("seed", 0)
    cfg = H.config("hy_v4", mtp=1, **other)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", seed=seed, acceptance=acceptance, progress=False,
           allow_unknown=True)  # fmt: skip
    m = independent_hy_v4_mtp_acceptance(tmp_path / "out", k, vocab=cfg.vocab_size)
    got = H.conditional(m, k)
    print(f"\nhy_v4 {other or ''} MTP (independent forward), k={k}, A={acceptance}: "
          f"measured {[round(g, 3) for g in got]}, {len(m)} steps")  # fmt: skip
    assert all(abs(g - acceptance) <= 0.05 for g in got), (got, acceptance)


@pytest.mark.slow
def test_without_an_acceptance_the_independent_forward_is_right_by_chance(tmp_path):
    """The independent forward can fail: the export without an acceptance (the MTP layer filled
    by the rule alone) is accepted about as often as a random token is right."""
    out = H.export(H.config("hy_v4", mtp=1), tmp_path, None)
    m = independent_hy_v4_mtp_acceptance(out, 1)
    print(f"\nhy_v4 MTP (independent forward), no acceptance: {float(np.mean(m >= 1)):.3f}"
          f" over {len(m)} steps")  # fmt: skip
    assert np.mean(m >= 1) < 0.05
