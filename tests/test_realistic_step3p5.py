"""Step-3.5-Flash's text checkpoint (``step3p5``; docs/realistic.md#speculative-decoding): the
logical model is transformers' ``Step3p7TextModel`` with the lm_head the checkpoint holds
(transformers maps this model type to no class), under the names vLLM 0.33's
``Step3p5ForCausalLM`` and ``Step3p5MTP`` read (written out here from their loaders, not from
the fill): the main layers' attention with its per-head gate, the dense MLP or the packed MoE
(``moe.gate_proj``/``up_proj``/``down_proj`` [E, out, in], ``moe.gate``, ``moe.router_bias``,
``share_expert.*``); the MTP layers after them as ``model.layers.{L+i}.``: the block (its
``mtp_block`` in vLLM: a dense layer where the config's lists name none), ``enorm``,
``hnorm``, ``eh_proj`` [H, 2H], ``shared_head.norm``, ``shared_head.output`` (the lm_head's
copy: both engines rename it to their ``shared_head.head``). The export's round trip, each
format's MTP tensors and refusals; and (the slow tier) the acceptance through an independent
forward (tests/helpers/speculative_forward.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import config_checkpoint  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402
from fp8_dummy.realistic.export import ExportError  # noqa: E402

H_, V, I_, MOE, E, HEADS, KV, D = 128, 1024, 256, 64, 16, 4, 2, 32
ATTN = {"q_proj": (HEADS * D, H_), "k_proj": (KV * D, H_), "v_proj": (KV * D, H_),
        "o_proj": (H_, HEADS * D), "g_proj": (HEADS, H_), "q_norm": (D,),
        "k_norm": (D,)}  # fmt: skip
NORMS = {"input_layernorm": (H_,), "post_attention_layernorm": (H_,)}


def _layer(p: str, moe: bool) -> dict:
    """A decoder layer's tensors under vLLM's names: its attention, its norms, then the dense
    MLP or the packed experts (vLLM's expert mapping: ``.moe.{gate,up,down}_proj.weight``),
    the router ``moe.gate``, its bias ``moe.router_bias`` and the shared expert
    ``share_expert.*`` (its weights mapper's ``.share_expert.`` -> ``.moe.share_expert.``)."""
    out = {f"{p}self_attn.{n}.weight": s for n, s in ATTN.items()}
    out.update({f"{p}{n}.weight": s for n, s in NORMS.items()})
    if not moe:
        mlp = {"gate_proj": (I_, H_), "up_proj": (I_, H_), "down_proj": (H_, I_)}
        return out | {f"{p}mlp.{n}.weight": s for n, s in mlp.items()}
    out |= {f"{p}moe.gate_proj.weight": (E, MOE, H_), f"{p}moe.up_proj.weight": (E, MOE, H_),
            f"{p}moe.down_proj.weight": (E, H_, MOE), f"{p}moe.gate.weight": (E, H_),
            f"{p}moe.router_bias": (E,)}  # fmt: skip
    shared = {"gate_proj": (MOE, H_), "up_proj": (MOE, H_), "down_proj": (H_, MOE)}
    return out | {f"{p}share_expert.{n}.weight": s for n, s in shared.items()}


def _mtp(p: str) -> dict:
    """An MTP layer's own tensors (vLLM's ``_rewrite_spec_layer_name`` keeps them out of the
    block; ``shared_head.output`` its loader renames to ``shared_head.head``)."""
    own = {"enorm.weight": (H_,), "hnorm.weight": (H_,), "eh_proj.weight": (H_, 2 * H_),
           "shared_head.norm.weight": (H_,), "shared_head.output.weight": (V, H_)}  # fmt: skip
    return {p + n: s for n, s in own.items()} | _layer(p, moe=False)


@pytest.mark.parametrize("layers", [0, 1, 2])
def test_names_and_shapes_are_vllms(layers):
    """The main model (a dense first layer, a MoE one), then the MTP layers: every name and
    shape vLLM's loaders read, and nothing else."""
    cfg = H.config("step3p5", mtp=layers)
    lm = config_checkpoint(cfg, 0, acceptance=0.5 if layers else None)
    t = lm.tensors
    want = {"model.embed_tokens.weight": (V, H_), "model.norm.weight": (H_,),
            "lm_head.weight": (V, H_)}  # fmt: skip
    want |= _layer("model.layers.0.", moe=False) | _layer("model.layers.1.", moe=True)
    for i in range(layers):
        want |= _mtp(f"model.layers.{2 + i}.")
    assert {n: tuple(x.shape) for n, x in t.items()} == want
    assert S.mtp_layers(cfg) == (("step3p5", layers) if layers else (None, 0))
    assert S.mtp_prefixes(cfg) == tuple(f"model.layers.{2 + i}." for i in range(layers))
    if layers:
        head, lm_head = lm.made(["model.layers.2.shared_head.output.weight", "lm_head.weight"])
        assert torch.equal(head.view(torch.uint8), lm_head.view(torch.uint8))


def test_the_mtp_block_follows_the_configs_lists():
    """An MTP layer's MLP type none of the config's lists names is dense (vLLM's reading past
    them); a MoE one, or a full-attention one, which vLLM's Step3p5MTP cannot build or load,
    refused before anything is made."""
    cfg = H.config("step3p5", mtp=1)
    cfg.mtp_mlp_layer_types = None
    t = config_checkpoint(cfg, 0).tensors
    assert "model.layers.2.mlp.gate_proj.weight" in t and "model.layers.2.moe.gate.weight" not in t
    for key, kind, why in (("mtp_mlp_layer_types", "sparse", "KeyError"),
                           ("mtp_layer_types", "full_attention", "IndexError")):  # fmt: skip
        cfg = H.config("step3p5", mtp=1)
        setattr(cfg, key, [kind])
        with pytest.raises(ValueError, match=f"1 MTP layer.* of type {kind}: .*{why}.*to 0"):
            config_checkpoint(cfg, 0)


def test_the_export_round_trip(tmp_path):
    """The export's files hold the logical model's bytes; its config.json, read back, names
    the same model (the keys vLLM's classes read that transformers' config does not declare
    written out), and exporting it again writes the same bytes."""
    from safetensors.torch import load_file

    from fp8_dummy.realistic.export import export

    cfg = H.config("step3p5", mtp=1)
    first = H.export(cfg, tmp_path / "a", 0.6)
    written = json.loads((first / "config.json").read_text())
    assert written["num_nextn_predict_layers"] == 1 and written["model_type"] == "step3p5"
    for key in ("use_head_wise_attn_gate", "use_moe_router_bias", "need_fp32_gate",
                "norm_expert_weight"):  # fmt: skip
        assert written[key] is True, key
    files = {}
    for f in sorted(first.glob("*.safetensors")):
        files |= load_file(f)
    lm = config_checkpoint(cfg, 0, acceptance=0.6)
    assert set(files) == set(lm.tensors)
    for n, t in zip(lm.tensors, lm.made(list(lm.tensors))):
        assert torch.equal(files[n].view(torch.uint8), t.view(torch.uint8)), n
    again = tmp_path / "b"
    export(first, again, acceptance=0.6, progress=False)
    second = {}
    for f in sorted(again.glob("*.safetensors")):
        second |= load_file(f)
    assert set(second) == set(files)
    assert all(torch.equal(second[n].view(torch.uint8), files[n].view(torch.uint8)) for n in files)


def _format(tmp_path, fmt: str, layers: int = 1) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    from fp8_dummy.realistic.export import export

    src = tmp_path / "src"
    H.config("step3p5", mtp=layers).save_pretrained(src)
    export(src, tmp_path / "out", format=fmt, progress=False)
    files = {}
    for f in sorted((tmp_path / "out").glob("*.safetensors")):
        files |= load_file(f)
    return files, json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]


def test_fp8_block_quantizes_the_mtp_block_and_the_packed_experts(tmp_path):
    """FP8 block: the MTP block quantized as a decoder layer (vLLM builds ``mtp_block`` with
    the quantization config, under a prefix no list entry reaches), ``eh_proj`` (a plain
    ``nn.Linear`` in vLLM) and the head's copy unquantized, ``eh_proj`` listed; the main
    layers' packed experts quantized per expert with their block scales [E, out/128, in/128]."""
    files, quant = _format(tmp_path, "fp8-block")
    e4m3 = torch.float8_e4m3fn
    p = "model.layers.2."
    for n in ("self_attn.q_proj", "self_attn.g_proj", "mlp.gate_proj", "mlp.down_proj"):
        assert files[f"{p}{n}.weight"].dtype == e4m3, n
        assert f"{p}{n}.weight_scale_inv" in files, n
    assert files[p + "eh_proj.weight"].dtype == torch.bfloat16
    assert files[p + "shared_head.output.weight"].dtype == torch.bfloat16
    assert p + "eh_proj" in quant["modules_to_not_convert"]
    m = "model.layers.1.moe."
    for n in ("gate_proj", "up_proj", "down_proj"):
        assert files[f"{m}{n}.weight"].dtype == e4m3
        assert files[f"{m}{n}.weight_scale_inv"].shape == (E, 1, 1)
    assert files[m + "gate.weight"].dtype == torch.bfloat16  # the router: listed, unquantized
    assert "model.layers.1.moe.gate" in quant["modules_to_not_convert"]


@pytest.mark.parametrize("fmt", ["fp8", "fp8-channel"])
def test_compressed_tensors_formats_refuse_the_mtp_layers(tmp_path, fmt):
    """Per tensor and per channel (compressed-tensors), refused before anything is written:
    vLLM's Step3p5MTP requires every parameter loaded, the attention's KV-cache parameters that
    format makes included; without MTP layers per channel is made, per tensor refused for the
    packed experts (vLLM's MoE layer gets the per-tensor group, which its FP8 MoE method
    refuses beside activations per token)."""
    with pytest.raises(ExportError) as e:
        _format(tmp_path / "a", fmt)
    msg = str(e.value)
    assert "1 MTP layer(s) (num_nextn_predict_layers)" in msg and "Step3p5MTP" in msg
    assert "set num_nextn_predict_layers to 0" in msg
    assert not (tmp_path / "a" / "out").exists() or not any((tmp_path / "a" / "out").iterdir())
    if fmt == "fp8":
        return
    files, _ = _format(tmp_path / "b", fmt, layers=0)
    assert files["model.layers.1.moe.gate_proj.weight"].dtype == torch.float8_e4m3fn
    assert files["model.layers.1.moe.gate_proj.weight_scale"].shape == (E, MOE, 1)


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4", "mxfp4"])
def test_per_tensor_nvfp4_and_mxfp4_are_refused_for_the_packed_experts(tmp_path, fmt):
    with pytest.raises(ExportError, match=r"moe\.(gate|up|down)_proj\.weight is a fused routed"):
        _format(tmp_path, fmt, layers=0)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _step3p7(vocab: int = 256):
    """Step-3.7's multimodal config at this file's sizes: its text config Step-3.5's (one MTP
    layer, sliding and dense as Step's are), a one-layer vision tower."""
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=16,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                share_expert_dim=32, num_nextn_predict_layers=1, sliding_window=64,
                layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                moe_layers_enum="1", bos_token_id=0, eos_token_id=1, pad_token_id=0)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    return text, tf.AutoConfig.for_model("step3p7", text_config=text, vision_config=vision)


@pytest.mark.parametrize("acceptance", [0.3, 0.6, 0.9])
def test_step3p7_mtp_generation_in_transformers(acceptance, tmp_path, monkeypatch):
    """transformers runs Step-3.7's MTP decoding (its config declares ``num_mtp_layers``):
    greedy over several prompts, the steps its own MTP candidate generator accepts are the
    designed share."""
    out = H.export(_step3p7(vocab=1024)[1], tmp_path, acceptance)
    m = H.mtp_acceptance(out, 1, monkeypatch, prompts=3, tokens=100)
    got = float(np.mean(m >= 1))
    print(f"\nStep-3.7 MTP, A={acceptance}: measured {got:.3f} over {len(m)} steps")
    assert len(m) > 150 and abs(got - acceptance) <= 0.05, (got, len(m))


def test_step3p7_holds_its_text_models_checkpoint(tmp_path):
    """Step-3.7's multimodal checkpoint (``step3p7``) holds the text checkpoint of its text
    config (``step3p5``): its main and MTP layers, embedding and lm_head under the same names,
    byte for byte what the text config's own export writes (the MTP layers by the same record,
    which tests/test_engines_vllm_mtp.py loads into vLLM's Step3p5MTP); beside them its vision
    tower and projector alone."""
    from safetensors.torch import load_file

    from fp8_dummy.realistic.export import export

    text, multimodal = _step3p7()
    multimodal.save_pretrained(tmp_path / "mm")
    tf.AutoConfig.for_model("step3p5", **text).save_pretrained(tmp_path / "text")
    made = {}
    for name in ("mm", "text"):  # --allow-unknown: the vision layers' scales have no role
        export(tmp_path / name, tmp_path / f"{name}-out", progress=False, allow_unknown=True,
               acceptance=0.6)  # fmt: skip
        files = sorted((tmp_path / f"{name}-out").glob("*.safetensors"))
        made[name] = {n: t for f in files for n, t in load_file(f).items()}
    mm, text_only = made["mm"], made["text"]
    assert {n for n in text_only if n.startswith("model.layers.2.")} >= {
        "model.layers.2.eh_proj.weight",
        "model.layers.2.shared_head.output.weight",
    }
    assert set(text_only) <= set(mm)
    others = set(mm) - set(text_only)  # the vision tower and its projector
    assert all(n.startswith(("vision_model.", "vit_large_projector.")) for n in others), others
    for n, t in text_only.items():
        same = torch.equal(mm[n].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
        assert mm[n].dtype == t.dtype and same, n


def test_the_export_names_the_checkpoints_architecture(tmp_path):
    """A config that names no architecture (transformers' own for this model type) gets the
    one vLLM and SGLang register for Step-3.5's checkpoint, not the made class's base name."""
    cfg = H.config("step3p5", mtp=0)
    assert not getattr(cfg, "architectures", None)
    out = H.export(cfg, tmp_path, None)
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["Step3p5ForCausalLM"]


def test_a_gate_the_engines_do_not_build_is_refused(tmp_path):
    """Step's attention gate is per head (``gating`` true); transformers also builds one per
    element, which vLLM's and SGLang's classes do not: refused before anything is written."""
    from fp8_dummy.realistic.export import export

    cfg = H.config("step3p5", mtp=0)
    cfg.gating = "elementwise"
    cfg.save_pretrained(tmp_path / "c")
    with pytest.raises(ExportError, match="gating 'elementwise'"):
        export(tmp_path / "c", tmp_path / "out", progress=False, allow_unknown=True)
    assert not (tmp_path / "out").exists()


def test_no_other_model_type_is_made_so():
    """The causal LM around a base model is Step-3.5's alone: its conversion the instance's own
    (transformers' table for ``step3p5`` stays empty), and the multimodal Step-3.7 config is
    not built as it."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    from fp8_dummy.realistic.base_causal_lm import BASE_ONLY, base_causal_lm
    from fp8_dummy.realistic.hf_model import build_model

    assert set(BASE_ONLY) == {"step3p5"}
    model = build_model(H.config("step3p5", mtp=1))
    assert type(model).__name__ == "Step3p5ForCausalLM"  # the checkpoint's architecture
    assert isinstance(model.model, tf.Step3p7TextModel) and model._weight_conversions
    assert get_checkpoint_conversion_mapping("step3p5") is None
    assert base_causal_lm(tf.AutoConfig.for_model("step3p7"), {}) is None
    assert base_causal_lm(H.config("llama"), {}) is None


FORWARD = [(a, 1, {}) for a in (0.3, 0.6, 0.9)] + [(0.6, 2, {})]
# a config the design was not developed on: other hidden size, vocabulary, depth, k, seed
FORWARD += [(0.8, 3, dict(hidden=192, vocab=6000, layers=3, seed=13))]


@pytest.mark.slow
@pytest.mark.parametrize("acceptance,k,other", FORWARD)
def test_step3p5_mtp_by_an_independent_forward(acceptance, k, other, tmp_path):
    from helpers.speculative_forward import independent_mtp_acceptance

    from fp8_dummy.realistic.export import export

    other = dict(other)
    seed = other.pop("seed", 0)
    cfg = H.config("step3p5", mtp=1, **other)
    cfg.save_pretrained(tmp_path / "c")
    out = tmp_path / "out"
    export(tmp_path / "c", out, seed=seed, acceptance=acceptance, progress=False)
    m = independent_mtp_acceptance(out, "step3p5", k, tmp_path, prompts=4, tokens=120,
                                   vocab=cfg.vocab_size)  # fmt: skip
    got = H.conditional(m, k)
    print(f"\nstep3p5 {other or ''} MTP (independent forward), k={k}, A={acceptance}: "
          f"measured {[round(g, 3) for g in got]}, {len(m)} steps")  # fmt: skip
    assert all(abs(g - acceptance) <= 0.05 for g in got), (got, acceptance)


@pytest.mark.slow
def test_without_an_acceptance_the_independent_forward_is_right_by_chance(tmp_path):
    """The independent forward can fail: the export without an acceptance (the MTP layer filled
    by the rule alone) is accepted about as often as a random token is right."""
    from helpers.speculative_forward import independent_mtp_acceptance

    out = H.export(H.config("step3p5", mtp=1), tmp_path, None)
    m = independent_mtp_acceptance(out, "step3p5", 1, tmp_path, prompts=4, tokens=120)
    print(f"\nstep3p5 MTP (independent forward), no acceptance: {float(np.mean(m >= 1)):.3f}"
          f" over {len(m)} steps")  # fmt: skip
    assert np.mean(m >= 1) < 0.05


@pytest.mark.parametrize("layers", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_the_realistic_statistics_hold(layers):
    """tests/test_realistic_architectures.py's bounds on the causal LM around transformers'
    decoder (tests/helpers/realistic_sweep.py's sizes; Step-3.5 is in no table of transformers'
    causal LMs the sweep reads): residual RMS in [0.25, 4] after every layer, MoE max/mean
    expert load <= 2."""
    from helpers import realistic_sweep as sweep

    import fp8_dummy
    from fp8_dummy.realistic.base_causal_lm import base_causal_lm

    sizes = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
             "vocab_size", "head_dim", "moe_intermediate_size", "n_routed_experts",
             "num_experts_per_tok", "max_position_embeddings")  # fmt: skip
    cfg = tf.Step3p7TextConfig(
        num_hidden_layers=layers, share_expert_dim=32, pad_token_id=0, sliding_window=64,
        layer_types=[("sliding_attention", "full_attention")[i % 4 == 0] for i in range(layers)],
        moe_layers_enum=",".join(str(i) for i in range(3, layers)),
        **{k: v for k, v in sweep.SMALL.items() if k in sizes},
    )  # fmt: skip
    torch.manual_seed(0)
    model = base_causal_lm(cfg, {}).eval()
    fp8_dummy.initialize_realistic_dummy_weights(model, seed=0)
    m = sweep.measure(model)
    assert m["finite"] and len(m["rms"]) >= layers
    assert all(0.25 <= r <= 4.0 for r in m["rms"]), [round(r, 2) for r in m["rms"]]
    assert len(m["max_mean"]) == layers - 3 and all(r <= 2.0 for r in m["max_mean"])
