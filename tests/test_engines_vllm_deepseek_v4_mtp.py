"""DeepSeek-V4's MTP layers against vLLM 0.33's own loader of them. Its CPU ``DeepSeekV4MTP`` is a
stub that raises at construction ("not implemented on CPU"), and its GPU class builds CUDA
streams, so no draft model is built here; the GPU class's module imports on the CPU, and its own
``load_weights`` (its name mapping: ``mtp.{i}.`` to ``model.layers.{L+i}.``, the renamings of
``emb.tok_emb``, ``head`` and ``norm``, the block under ``mtp_block.``, the stacked and expert
parameters) runs here on a stand-in whose parameters are the names that class's modules
register (written out from its source: ``DeepSeekV4MultiTokenPredictorLayer``, vLLM's
DeepSeek-V4 decoder layer built without a compressor for an MTP layer, its MoE's fused experts
``experts.routed_experts.w13_weight``/``w2_weight``). Every exported MTP tensor reaches a
parameter (an unknown name is a ``KeyError`` in its loader), every parameter is reached, each
by the export's bytes. Without vLLM 0.33: skipped, with why."""

from __future__ import annotations

import types

import pytest
from helpers.engine_import import require

require("vllm", "0.33.", "DeepSeek-V4's MTP loader")
tf = pytest.importorskip("transformers")

import torch  # noqa: E402
from helpers.deepseek_v4_mtp_forward import files  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402
from vllm.models.deepseek_v4.nvidia import mtp as V  # noqa: E402 (the CPU class is a stub)

EXPERTS = 16

# The parameters of vLLM's MTP layer at index L (its modules' registered names) -> the
# checkpoint tensors its loader writes into each (stacked or fused ones several)
LAYER = ["enorm.weight", "hnorm.weight", "e_proj.weight", "h_proj.weight", "hc_head_fn"]
LAYER += ["hc_head_base", "hc_head_scale", "shared_head.norm.weight", "shared_head.head.weight"]
BLOCK = ["attn.attn_sink", "attn.fused_wqa_wkv.weight", "attn.q_norm.weight", "attn.wq_b.weight",
         "attn.kv_norm.weight", "attn.wo_a.weight", "attn.wo_b.weight", "attn_norm.weight",
         "ffn_norm.weight", "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn",
         "hc_ffn_base", "hc_ffn_scale", "ffn.gate.weight"]  # fmt: skip
BLOCK += ["ffn.gate.e_score_correction_bias"]
BLOCK += ["ffn.shared_experts.gate_up_proj.weight", "ffn.shared_experts.down_proj.weight"]
BLOCK += ["ffn.experts.routed_experts.w13_weight", "ffn.experts.routed_experts.w2_weight"]


def vllm_parameters(main: int, n: int) -> list[str]:
    names = ["model.embed_tokens.weight"]
    for layer in range(main, main + n):
        p = f"model.layers.{layer}."
        names += [p + x for x in LAYER] + [p + "mtp_block." + x for x in BLOCK]
    return names


def _stand_in(cfg, names: list[str]):
    """An object with what ``DeepSeekV4MTP.load_weights`` reads of itself: its config, its
    parameters (each recording what its weight loader is given), its MTP layers' MoE facts
    (no fused mega-MoE, no shared expert fused into the routed ones), its name methods."""
    got: dict[str, list] = {n: [] for n in names}

    def param(name: str) -> torch.nn.Parameter:
        p = torch.nn.Parameter(torch.empty(0), requires_grad=False)

        def weight_loader(_, w, *args, **kwargs):
            got[name].append((w, args, kwargs))
            return True

        p.weight_loader = weight_loader
        return p

    params = {n: param(n) for n in names}
    ffn = types.SimpleNamespace(use_native_mega_moe=False, experts=types.SimpleNamespace())
    layer = types.SimpleNamespace(mtp_block=types.SimpleNamespace(ffn=ffn))
    main, n = cfg.num_hidden_layers, cfg.num_nextn_predict_layers
    model = types.SimpleNamespace(
        layers={str(i): layer for i in range(main, main + n)}, mtp_start_layer_idx=main,
        num_mtp_layers=n,
    )  # fmt: skip
    me = types.SimpleNamespace(config=cfg, model=model, pad_shared_expert=False)
    me.named_parameters = lambda: iter(params.items())
    for method in ("_to_spec_layer_name", "_rewrite_spec_layer_name"):
        setattr(me, method, types.MethodType(getattr(V.DeepSeekV4MTP, method), me))
    return me, got


@pytest.mark.parametrize("n", [1, 2])
def test_vllm_deepseek_v4_mtp_loader_reads_every_mtp_tensor(n, tmp_path):
    from fp8_dummy.realistic.export import export

    cfg = config(128, 1024, 2, 4)
    cfg.num_nextn_predict_layers = n
    cfg.topk_method = "noaux_tc"  # vLLM's gates build their correction bias only with it
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", acceptance=0.6, progress=False, allow_unknown=True)
    t = files(tmp_path / "out")
    mtp = {k: v for k, v in t.items() if k.startswith("mtp.")}
    assert mtp
    names = vllm_parameters(cfg.num_hidden_layers, n)
    me, got = _stand_in(cfg, names)
    V.DeepSeekV4MTP.load_weights(me, list(t.items()))
    missed = [name for name, calls in got.items() if not calls]
    assert not missed, missed
    given = {id(w) for calls in got.values() for w, _, _ in calls}
    # each MTP tensor, but the later layers' embedding copies: vLLM's loader takes the shared
    # embedding from the first MTP layer's and skips the others'
    skipped = {f"mtp.{i}.emb.tok_emb.weight" for i in range(1, n)}
    assert skipped <= set(mtp)
    unread = sorted(k for k, w in mtp.items() if id(w) not in given)
    assert unread == sorted(skipped), unread
    assert not any(id(w) in given for k, w in t.items() if not k.startswith("mtp."))
    # the shapes its modules take (hidden 128, vocabulary 1024): the input projections [H, H]
    for layer in range(cfg.num_hidden_layers, cfg.num_hidden_layers + n):
        p = f"model.layers.{layer}."
        for name, shape in (("e_proj.weight", (128, 128)), ("h_proj.weight", (128, 128)),
                            ("shared_head.head.weight", (1024, 128)),
                            ("hc_head_fn", (4, 512))):  # fmt: skip
            ((w, _, _),) = got[p + name]
            assert tuple(w.shape) == shape, name
        experts = got[p + "mtp_block.ffn.experts.routed_experts.w13_weight"]
        assert sorted(kw["expert_id"] for _, _, kw in experts) == sorted(list(range(EXPERTS)) * 2)
    ((emb, _, _),) = got["model.embed_tokens.weight"]
    assert torch.equal(emb.view(torch.uint8), t["embed.weight"].view(torch.uint8))
