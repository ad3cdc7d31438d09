"""Speculative decoding by the weights (docs/realistic.md#speculative-decoding), the fast tier,
the checkpoint's side: the MTP layers of every architecture that carries them, under the names
transformers' own ``MtpModel`` and the engines' loaders read, MoE blocks; the in-memory fill
and the export with acceptance the same bytes; quantized formats with acceptance (zero code
rows, every scale unchanged); the routing's carrier through an MTP projection; the report;
``--draft``'s refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402
from fp8_dummy.realistic.export import ExportError  # noqa: E402
from fp8_dummy.realistic.export import main as export_main  # noqa: E402


# transformers' MtpModel parameter of MTP layer i -> the export's name (L: the main layers)
def _loaded(arch: str, i: int, main: int) -> dict[str, str]:
    if arch == "mellum":
        p = "mtp."
        names = {"eh_proj": "fc", "enorm": "pre_fc_norm_embedding", "post_norm": "norm"}
        names.update(hnorm="pre_fc_norm_hidden")
        names["mtp_block.self_attn.o_proj"] = "layers.0.self_attn.o_proj"
    elif arch == "inkling_text":
        p = f"model.mtp.layers.{i}."
        names = {"eh_proj": "input_proj", "enorm": "embed_norm", "hnorm": "hidden_norm"}
        names["mtp_block.self_attn.o_proj"] = "transformer_block.self_attn.o_proj"
    else:
        p = f"model.layers.{main + i}."
        names = {n: n for n in ("enorm", "hnorm", "eh_proj")}
        names.update(post_norm="shared_head.norm")
        names["mtp_block.self_attn.o_proj"] = "self_attn.o_proj"
    return {f"layers.{i}.{ours}.weight": f"{p}{theirs}.weight" for ours, theirs in names.items()}


MTP_MODEL = {"deepseek_v3": 2, "glm4_moe": 2, "mellum": 1, "inkling_text": 2}  # MTP layers


@pytest.mark.parametrize("arch", list(MTP_MODEL))
def test_transformers_mtp_model_loads_the_mtp_layers(arch, tmp_path):
    """transformers' own MtpModel finds every MTP tensor under the checkpoint's names (it
    raises on a missing one) and holds the export's values; its embedding and head are the
    main model's, as the checkpoint's copies are. Inkling: its chained hidden state's norm."""
    from transformers.modeling_layers import MtpModel

    n = MTP_MODEL[arch]
    if arch in H.MORE:
        more = {"chain_hidden_post_norm": True} if arch == "inkling_text" else {}
        cfg = H.config(arch, mtp=n, **more)
    else:
        cfg = H.config(arch, num_nextn_predict_layers=n)
    out = H.export(cfg, tmp_path, "0.9,0.5" if n == 2 else 0.7)
    t = H.read(out)
    for i in range(n if arch in ("deepseek_v3", "glm4_moe") else 0):
        p = f"model.layers.{2 + i}."
        assert np.array_equal(t[p + "embed_tokens.weight"], t["model.embed_tokens.weight"])
        assert np.array_equal(t[p + "shared_head.head.weight"], t["lm_head.weight"])
    model = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    if arch in ("deepseek_v3", "glm4_moe"):  # the class names the real models' MTP index
        model._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{2 + i}\..*" for i in (0, 1)]
    mtp = MtpModel.from_pretrained(model, device_map={"": "cpu"})
    ours = {n: p.detach() for n, p in mtp.named_parameters()}
    pairs = {k: v for i in range(n) for k, v in _loaded(arch, i, 2).items()}
    if arch == "inkling_text":
        pairs["shared_post_norm.weight"] = "model.mtp.chain_norm.weight"
    for mine, theirs in pairs.items():
        assert np.array_equal(ours[mine].double().numpy(), t[theirs]), (mine, theirs)


def test_a_wrong_name_is_not_loaded(tmp_path):
    """The check above can fail: the export's MTP input projection under another name, and
    transformers' MtpModel refuses the checkpoint (a missing MTP weight)."""
    from safetensors.torch import save_file
    from transformers.modeling_layers import MtpModel

    out = H.export(H.config("mellum", mtp=1), tmp_path, 0.7)
    t = H.read(out)
    t["mtp.fc_in.weight"] = t.pop("mtp.fc.weight")
    for f in list(out.glob("*.safetensors")) + [out / "model.safetensors.index.json"]:
        f.unlink()
    save_file({n: torch.from_numpy(v).to(torch.bfloat16) for n, v in t.items()},
              str(out / "model.safetensors"))  # fmt: skip
    model = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="eh_proj"):
        MtpModel.from_pretrained(model, device_map={"": "cpu"})


def test_in_memory_and_export_hold_the_same_model(tmp_path):
    """The in-memory fill with acceptance and the export of the same config and seed: the same
    bytes, every tensor (the export adds the MTP layer)."""
    cfg = H.config("deepseek_v3")
    out = H.export(cfg, tmp_path, "0.8,0.6")
    loaded = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    model = tf.AutoModelForCausalLM.from_config(loaded.config, dtype=torch.bfloat16)
    for name, t in model.state_dict(keep_vars=True).items():
        t.data = t.data.to(loaded.state_dict()[name].dtype)
    fp8_dummy.initialize_realistic_dummy_weights(model, 0, acceptance="0.8,0.6")
    theirs = loaded.state_dict()
    bad = [n for n, t in model.state_dict().items() if not torch.equal(t, theirs[n])]
    assert not bad, bad


def test_the_report(tmp_path, capsys):
    from fp8_dummy.realistic.speculative.report import main

    H.config("deepseek_v3", num_nextn_predict_layers=2).save_pretrained(tmp_path)
    out = tmp_path / "r.json"
    assert main([str(tmp_path), "--acceptance", "0.9,0.5", "--k", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "MTP layers: 2 (deepseek" in text and " 0.899 0.500 " in " ".join(text.split())
    report = json.loads(out.read_text())
    (two,) = report["predicted"]
    assert two["k"] == 2 and np.allclose(two["per_step"], [0.9, 0.5], atol=0.01)
    assert report["mtp"]["tensors"] and all(
        t.startswith("model.layers.") for t in report["mtp"]["tensors"]
    )
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--acceptance", "2"])


def test_draft_export_refusals(tmp_path):
    """--draft needs --acceptance, an empty directory, a width of at least 64: each refused
    before anything is written."""
    H.config("llama").save_pretrained(tmp_path / "c")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    cases = [
        ["--draft", str(tmp_path / "d")],
        ["--acceptance", "0.5", "--draft", str(tmp_path / "full")],
        ["--acceptance", "0.5", "--draft", str(tmp_path / "d"), "--draft-hidden", "48"],
        ["--acceptance", "0.5", "--draft", str(tmp_path / "d"), "--draft-layers", "0"],
    ]
    for extra in cases:
        assert export_main([str(tmp_path / "c"), str(tmp_path / "o"), *extra]) == 2, extra
        assert not (tmp_path / "o").exists() and not (tmp_path / "d").exists()
    with pytest.raises(ExportError, match="needs --acceptance"):
        from fp8_dummy.realistic.export import prepare_draft

        prepare_draft(str(tmp_path / "c"), str(tmp_path / "d"), 0, None)


@pytest.mark.parametrize("fmt", ["fp8-block", "nvfp4"])
def test_quantized_formats_hold_with_acceptance(fmt, tmp_path):
    """An FP8-block and an NVFP4 export with acceptance: the code rows of every residual
    branch's weight are zero codes, every other row's codes and every scale the bytes of the
    export without acceptance (decoded here with the formats test's e4m3 decoder)."""
    from safetensors import safe_open
    from test_realistic_formats import DECODE

    from fp8_dummy.realistic.export import export

    cfg = H.config("deepseek_v3", hidden=256)
    cfg.save_pretrained(tmp_path / "c")
    files = {}
    for name, acceptance in (("plain", None), ("designed", 0.6)):
        export(tmp_path / "c", tmp_path / name, format=fmt, acceptance=acceptance, progress=False)
        files[name] = {}
        for f in sorted((tmp_path / name).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as h:
                files[name].update({n: h.get_tensor(n) for n in h.keys()})
    plain, designed = files["plain"], files["designed"]
    s = S.layout(256).s
    codes = [n for n in designed if n.endswith(("o_proj.weight", "down_proj.weight"))]
    assert len(codes) > 20
    for name in codes:
        w, p = designed[name].view(torch.uint8), plain[name].view(torch.uint8)
        assert not w[s.start : s.stop].any(), name  # zero codes: e4m3 0x00, e2m1 0x0
        rest = [r for r in range(w.shape[0]) if r not in s]
        assert torch.equal(w[rest], p[rest]), name
    scales = [n for n in designed if "scale" in n]
    assert scales and all(torch.equal(designed[n], plain[n]) for n in scales)
    if fmt == "fp8-block":  # the decoded weights: zero rows, the rest as before
        w = DECODE[torch.float8_e4m3fn](designed[codes[0]].view(torch.uint8).numpy())
        assert not w[s.start : s.stop].any() and np.abs(w).sum() > 0


def test_routing_carrier_through_the_mtp_projection(tmp_path):
    """Qwen3-Next's MTP MoE router (softmax, no bias) takes its routing offsets from the
    residual's carrier dimension: its input projection carries it (row j reads the normalized
    embedding's column j alone, no other row reads either half's column j), the router's
    column j holds the offsets, and the code rows read the embedding's view columns."""
    cfg = H.config("qwen3_next")
    out = H.export(cfg, tmp_path, 0.6, routing="zipf:1.2")
    t = H.read(out)
    h, j = cfg.hidden_size, cfg.hidden_size - 1
    fc = t["mtp.fc.weight"]
    assert fc[j, j] == 1 and np.count_nonzero(fc[j]) == 1
    assert not np.delete(fc[:, j], j).any() and not fc[:, h + j].any()
    assert np.abs(t["mtp.layers.0.mlp.gate.weight"][:, j]).sum() > 0
    s, s2 = S.layout(h).s, S.layout(h).s2
    for i, row in enumerate(s):
        assert fc[row, s2[i]] == 1 and np.count_nonzero(fc[row]) == 1


DSA = dict(q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
           v_head_dim=16, index_head_dim=16, index_n_heads=2, index_topk=8)  # fmt: skip
MTP_CONFIGS = {
    "deepseek_v3": {},
    "glm4_moe": {},
    "deepseek_v32": dict(n_routed_experts=8, n_group=2, topk_group=1, **DSA),
    "glm_moe_dsa": dict(n_routed_experts=8, **DSA),
    "qwen3_next": {},
    "qwen3_5_text": {},
    "qwen3_5_moe_text": {},
    "glm4_moe_lite": {},
    "mellum": {},
    "bailing_hybrid": {},
    "inkling_text": {},
}


def _own(arch: str, main: int) -> tuple[str, str, list[str]]:
    """(the MTP tensors' prefix, the block's, the MTP layer's own tensors) of one MTP layer."""
    if arch in ("qwen3_next", "mellum") or arch in H.QWEN3_5:
        own = [f"mtp.{n}.weight" for n in ("fc", "norm", "pre_fc_norm_hidden")]
        return "mtp.", "mtp.layers.0.", own + ["mtp.pre_fc_norm_embedding.weight"]
    if arch == "inkling_text":
        p = "model.mtp.layers.0."
        own = [p + n for n in ("input_proj.weight", "embed_norm.weight", "hidden_norm.weight")]
        return "model.mtp.", p + "transformer_block.", own
    p = f"model.layers.{main}."
    if arch == "bailing_hybrid":
        own = ["eh_proj", "enorm", "hnorm", "final_layernorm"]
    else:
        own = ["eh_proj", "enorm", "hnorm", "shared_head.norm", "shared_head.head", "embed_tokens"]
    return p, p, [f"{p}{n}.weight" for n in own]


@pytest.mark.parametrize("arch", MTP_CONFIGS)
def test_the_mtp_layers_are_moe_layers_under_the_checkpoints_names(arch):
    """Every architecture's MTP block is a MoE decoder layer (whatever marks the main model's
    dense layers: first_k_dense_replace, mlp_layer_types, mlp_only_layers) but Inkling's (its
    config's MTP layers are dense) and dense Qwen3.5's (a dense model), beside the MTP layer's
    own tensors, under the names the engines' loaders and transformers' MtpModel read
    (Bailing's attention ``attention.*``)."""
    from fp8_dummy.realistic import config_checkpoint

    if arch in ("deepseek_v32", "glm_moe_dsa"):
        common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=1024,
                      num_experts_per_tok=2, moe_intermediate_size=64,
                      first_k_dense_replace=1)  # fmt: skip
        cfg = tf.AutoConfig.for_model(arch, **common, **MTP_CONFIGS[arch])
        cfg.num_nextn_predict_layers = 1
    elif arch in H.MORE or arch in H.QWEN3_5:
        cfg = H.config(arch, mtp=1)
    else:
        cfg = H.config(arch, num_nextn_predict_layers=1)
    names = list(config_checkpoint(cfg, 0, acceptance=0.5).tensors)
    prefix, block, own = _own(arch, cfg.num_hidden_layers)
    assert set(own) <= set(names)
    mlp = "mlp.gate_proj." if arch in ("inkling_text", "qwen3_5_text") else "mlp.experts."
    assert any(n.startswith(block + mlp) for n in names), "a MoE block (Inkling: dense)"
    attention = "attention." if arch == "bailing_hybrid" else "self_attn."
    assert any(n.startswith(block + attention) for n in names)
    assert all(not n.startswith(prefix) or n in own or n.startswith(block) for n in names)


def test_a_recorded_load_of_the_main_layers_routes_the_mtp_layer_too(tmp_path):
    """An engine records the main model's MoE layers: exported with the MTP layer, that file
    is taken, the MTP layer's router getting the last MoE layer's load (its offsets equal)."""
    cfg = H.config("deepseek_v3", layers=3)
    rows = [[float(e + 1) for e in range(16)], [float(16 - e) for e in range(16)]]
    (tmp_path / "load.json").write_text(json.dumps({"expert_load": rows}))
    out = H.export(cfg, tmp_path, None, routing=str(tmp_path / "load.json"))
    t = H.read(out)
    bias = "mlp.gate.e_score_correction_bias"
    assert np.array_equal(t[f"model.layers.3.{bias}"], t[f"model.layers.2.{bias}"])
    assert not np.array_equal(t[f"model.layers.1.{bias}"], t[f"model.layers.2.{bias}"])


def test_inklings_multimodal_checkpoint_counts_its_mtp_layers_in_its_text_config():
    """Inkling's multimodal checkpoint: its text config counts the MTP layers (transformers'
    config copies the checkpoint's ``mtp_config`` there), kept under ``model.mtp.`` by its own
    names (tests/test_realistic_speculative_inkling_mm.py); its text model's own record is
    for a text checkpoint alone."""
    mtp = {"num_nextn_predict_layers": 1}
    both = tf.AutoConfig.for_model("inkling_mm_model", text_config={}, mtp_config=mtp)
    assert S.mtp_layers(both) == ("inkling", 1) and S.mtp_prefixes(both) == ("model.mtp.",)
    assert S.mtp_layers(both.text_config) == ("inkling", 1)
    assert S.mtp_layers(tf.AutoConfig.for_model("inkling_mm_model")) == (None, 0)


@pytest.mark.parametrize("steps", [1, 2])
def test_nemotron_h_mtp_under_vllms_names(steps):
    """Nemotron-H's MTP: ``num_nextn_predict_layers`` steps of the config's
    ``mtp_layers_block_type`` (attention, MoE), under the names vLLM's ``NemotronHMTP`` reads
    (written out here from its loader, not from the fill): ``mtp.layers.{j}.`` each layer's
    ``norm`` and ``mixer``; ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] on each step's first
    layer, ``final_layernorm`` on its last; no copy of the embedding or the lm_head (vLLM shares
    the target's); the main layers' names unchanged."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("nemotron_h", mtp=steps)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    want = set()
    for j in range(2 * steps):
        p = f"mtp.layers.{j}."
        want.add(p + "norm.weight")
        if j % 2 == 0:
            want |= {p + f"mixer.{x}_proj.weight" for x in "qkvo"}
            want |= {p + "enorm.weight", p + "hnorm.weight", p + "eh_proj.weight"}
            assert t[p + "eh_proj.weight"].shape == (128, 256)
        else:
            want |= {p + "mixer.gate.weight", p + "mixer.gate.e_score_correction_bias"}
            want |= {p + f"mixer.shared_experts.{x}_proj.weight" for x in ("up", "down")}
            want |= {p + f"mixer.experts.{e}.{x}_proj.weight" for e in range(16)
                     for x in ("up", "down")}  # fmt: skip
            want.add(p + "final_layernorm.weight")
    assert {n for n in t if n.startswith("mtp.")} == want
    main = config_checkpoint(H.config("nemotron_h"), 0).tensors
    assert {n for n in t if not n.startswith("mtp.")} == set(main)
    assert S.mtp_layers(cfg) == ("nemotron", steps) and S.mtp_prefixes(cfg) == ("mtp.",)
    assert S.mtp_layers(H.config("nemotron_h")) == (None, 0)


@pytest.mark.parametrize("model", ["qwen3_5", "qwen3_5_moe"])
def test_qwen3_5s_mtp_layers_counted_as_vllm_counts_them(model):
    """Qwen3.5's checkpoints, the multimodal ones too, keep their MTP layers at the top level
    (``mtp.``), as many as the text config's ``mtp_num_hidden_layers`` says (vLLM's
    ``Qwen3_5MTP`` reads that key alone), one where it is absent, none where it is 0; the
    multimodal checkpoint's logical model holds them under the same names."""
    from fp8_dummy.realistic import config_checkpoint

    text = H.config(f"{model}_text").to_dict()
    for key in ("model_type", "transformers_version", "architectures"):
        text.pop(key, None)
    for n, want in ((None, 1), (2, 2), (0, 0)):
        more = {} if n is None else {"mtp_num_hidden_layers": n}
        both = tf.AutoConfig.for_model(model, text_config=dict(text, **more),
                                       tie_word_embeddings=False)  # fmt: skip
        assert S.mtp_layers(both) == (("qwen", want) if want else (None, 0))
        assert S.mtp_prefixes(both) == (("mtp.",) if want else ())
    alone = H.config(f"{model}_text", num_nextn_predict_layers=3)  # a key vLLM does not read
    assert S.mtp_layers(alone) == ("qwen", 1)
    both = tf.AutoConfig.for_model(model, text_config=text, tie_word_embeddings=False)
    names = list(config_checkpoint(both, 0).tensors)
    assert "mtp.fc.weight" in names and "mtp.layers.0.self_attn.q_proj.weight" in names
    assert not any(n.startswith("mtp.layers.1.") for n in names)


def test_ernie_mtp_under_vllms_names():
    """ERNIE 4.5 MoE's MTP layer under the names vLLM's ``ErnieMTP`` reads (written out here from
    its weight mapper, not from the fill): ``model.mtp_emb_norm.0``, ``model.mtp_hidden_norm.0``,
    ``model.mtp_linear_proj.0`` [H, 2H] and ``model.mtp_block.0.`` a dense decoder layer (vLLM
    builds a Llama one: no router, no experts) of the config's intermediate size; no final norm
    and no copy of the embedding or the lm_head (vLLM takes the model's); the main layers' names
    unchanged; counted by ``num_nextn_predict_layers``, the key vLLM reads."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("ernie4_5_moe", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    b = "model.mtp_block.0."
    want = {"model.mtp_emb_norm.0.weight", "model.mtp_hidden_norm.0.weight"}
    want |= {"model.mtp_linear_proj.0.weight"}
    want |= {b + n + ".weight" for n in ("input_layernorm", "post_attention_layernorm")}
    want |= {f"{b}self_attn.{x}_proj.weight" for x in "qkvo"}
    want |= {f"{b}mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    assert {n for n in t if n.startswith("model.mtp")} == want
    assert t["model.mtp_linear_proj.0.weight"].shape == (128, 256)
    assert t[b + "mlp.gate_proj.weight"].shape == (cfg.intermediate_size, 128)
    main = config_checkpoint(H.config("ernie4_5_moe"), 0).tensors
    assert {n for n in t if not n.startswith("model.mtp")} == set(main)
    assert any(".mlp.experts." in n for n in main), "the main model's MoE layer"
    assert S.mtp_layers(cfg) == ("ernie", 1) and S.mtp_prefixes(cfg) == ("model.mtp_",)
    assert S.mtp_layers(H.config("ernie4_5_moe")) == (None, 0)


def test_exaone_moe_mtp_under_vllms_names():
    """EXAONE-MoE's MTP layer under the names vLLM's ``ExaoneMoeMTP`` reads (``mtp.`` renamed
    ``model.``, written out here from its module, not from the fill): ``mtp.fc`` [H, 2H],
    ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.norm`` and
    ``mtp.layers.0.`` a dense decoder layer (``is_mtp``: no router, no experts) with its q/k
    norms; no copy of the embedding or the lm_head; the main layers' names unchanged; one MTP
    layer where ``num_nextn_predict_layers`` is absent (vLLM's class's default), none at 0."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("exaone_moe", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    b = "mtp.layers.0."
    want = {f"mtp.{n}.weight" for n in ("fc", "norm", "pre_fc_norm_embedding",
                                        "pre_fc_norm_hidden")}  # fmt: skip
    want |= {b + n + ".weight" for n in ("input_layernorm", "post_attention_layernorm")}
    want |= {f"{b}self_attn.{x}_proj.weight" for x in "qkvo"}
    want |= {f"{b}self_attn.{x}_norm.weight" for x in "qk"}
    want |= {f"{b}mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    assert {n for n in t if n.startswith("mtp.")} == want
    assert t["mtp.fc.weight"].shape == (128, 256)
    assert t[b + "mlp.gate_proj.weight"].shape == (cfg.intermediate_size, 128)
    none = H.config("exaone_moe", num_nextn_predict_layers=0)
    main = config_checkpoint(none, 0).tensors
    assert {n for n in t if not n.startswith("mtp.")} == set(main)
    assert any(".mlp.experts." in n for n in main), "the main model's MoE layer"
    absent = H.config("exaone_moe")
    del absent.num_nextn_predict_layers
    assert S.mtp_layers(absent) == ("qwen", 1) and S.mtp_prefixes(cfg) == ("mtp.",)
    assert S.mtp_layers(none) == (None, 0)


def test_hy_v3_mtp_under_vllms_names():
    """HY-V3's MTP layer under the names vLLM's ``HYV3MTP`` reads (written out here from its
    loader, not from the fill): ``model.layers.{L}.`` the block (a MoE layer: vLLM builds one
    past ``first_k_dense_replace``; the router ``mlp.router.gate``, ``mlp.expert_bias``, the
    experts, ``mlp.shared_mlp``) and ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H],
    ``final_layernorm``; no copy of the embedding or the lm_head (vLLM's loader takes the
    model's: the ``shared_head`` it would skip); the main layers' names unchanged."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("hy_v3", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    p = "model.layers.2."
    want = {p + n + ".weight" for n in ("enorm", "hnorm", "eh_proj", "final_layernorm",
                                        "input_layernorm", "post_attention_layernorm")}  # fmt: skip
    want |= {f"{p}self_attn.{x}_proj.weight" for x in "qkvo"}
    want |= {f"{p}self_attn.{x}_norm.weight" for x in "qk"}
    want |= {p + "mlp.router.gate.weight", p + "mlp.expert_bias"}
    want |= {f"{p}mlp.shared_mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    want |= {f"{p}mlp.experts.{e}.{x}_proj.weight" for e in range(16)
             for x in ("gate", "up", "down")}  # fmt: skip
    assert {n for n in t if n.startswith(p)} == want
    assert t[p + "eh_proj.weight"].shape == (128, 256)
    main = config_checkpoint(H.config("hy_v3"), 0).tensors
    assert {n for n in t if not n.startswith(p)} == set(main)
    assert S.mtp_layers(cfg) == ("bailing", 1) and S.mtp_prefixes(cfg) == (p,)
    assert S.mtp_layers(H.config("hy_v3")) == (None, 0)


def test_glm_ocr_mtp_under_vllms_names():
    """GLM-OCR's multimodal checkpoint: its text config's ``num_nextn_predict_layers`` MTP layer
    after its language model's layers, under the names vLLM's ``GlmOcrMTP`` reads (written out
    here from its loader, not from the fill): ``model.language_model.layers.{L}.`` the dense
    GLM block (its four norms, q/k/v/o, the fused ``gate_up_proj``), ``enorm``, ``hnorm``,
    ``eh_proj`` [H, 2H], ``shared_head.norm``, and copies of the lm_head
    (``shared_head.head``) and the embedding (``embed_tokens``, which vLLM's loader takes for
    the draft's own); the main tensors unchanged, the lm_head among them (the multimodal
    class's, not the base model's)."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("glm_ocr", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    p = "model.language_model.layers.2."
    want = {p + f"self_attn.{x}_proj.weight" for x in "qkvo"}
    want |= {p + f"mlp.{x}_proj.weight" for x in ("gate_up", "down")}
    want |= {p + f"{x}layernorm.weight" for x in ("input_", "post_attention_", "post_self_attn_",
                                                  "post_mlp_")}  # fmt: skip
    want |= {p + f"{x}.weight" for x in ("enorm", "hnorm", "eh_proj", "shared_head.norm",
                                         "shared_head.head", "embed_tokens")}  # fmt: skip
    assert {n for n in t if n.startswith(p)} == want
    assert t[p + "eh_proj.weight"].shape == (128, 256)
    main = config_checkpoint(H.config("glm_ocr"), 0).tensors
    assert {n for n in t if not n.startswith(p)} == set(main)
    assert "lm_head.weight" in main and "model.language_model.embed_tokens.weight" in main
    assert S.mtp_layers(cfg) == ("deepseek", 1) and S.mtp_prefixes(cfg) == (p,)
    assert S.mtp_layers(H.config("glm_ocr")) == (None, 0)


def test_exaone4_5_mtp_under_vllms_names():
    """EXAONE 4.5's multimodal checkpoint: its top-level ``num_nextn_predict_layers`` MTP layers
    (one where it names none, as vLLM's ``Exaone4_5_MTP`` reads it; its text config, EXAONE
    4.0's, has none of its own), under the names that class's loader reads (written out here
    from it): ``mtp.layers.{i}.`` EXAONE 4.0's decoder layer (post-norms, q/k norms), ``mtp.fc``
    [H, 2H], ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.norm``; the main
    tensors unchanged (the embedding and the lm_head are the model's)."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("exaone4_5", mtp=1)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    p = "mtp.layers.0."
    want = {p + f"self_attn.{x}.weight" for x in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                  "q_norm", "k_norm")}  # fmt: skip
    want |= {p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    want |= {p + f"post_{x}_layernorm.weight" for x in ("attention", "feedforward")}
    want |= {f"mtp.{x}.weight" for x in ("fc", "pre_fc_norm_embedding", "pre_fc_norm_hidden",
                                         "norm")}  # fmt: skip
    assert {n for n in t if n.startswith("mtp.")} == want
    assert t["mtp.fc.weight"].shape == (128, 256)
    main = config_checkpoint(H.config("exaone4_5"), 0).tensors
    assert {n for n in t if not n.startswith("mtp.")} == set(main)
    assert "lm_head.weight" in main and "model.language_model.embed_tokens.weight" in main
    assert S.mtp_layers(cfg) == ("qwen", 1) and S.mtp_prefixes(cfg) == ("mtp.",)
    absent = H.config("exaone4_5", mtp=1)
    del absent.num_nextn_predict_layers
    assert S.mtp_layers(absent) == ("qwen", 1)
    assert S.mtp_layers(H.config("exaone4_5")) == (None, 0)
    assert S.mtp_layers(cfg.text_config) == (None, 0)  # EXAONE 4.0's config: none


def test_mimo_v2_flash_mtp_under_vllms_names(tmp_path):
    """MiMo-V2-Flash's MTP layers under the names vLLM's ``MiMoV2MTP`` (and SGLang's) reads
    (written out here from its loader, not from the fill): ``model.mtp.layers.{i}.`` a dense
    block whose attention is the sliding one (transformers' doubled kv heads and its sinks,
    ``self_attn.attention_sink_bias``), its norm before the MLP ``pre_mlp_layernorm``, and
    ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H], ``final_layernorm``; no copy of the embedding or
    the lm_head; the main layers' names unchanged; none where ``num_nextn_predict_layers`` is
    absent. In every quantized format the block's ``o_proj`` stays unquantized (vLLM builds it
    without the quantization config) and is listed with the ignored modules, beside
    ``eh_proj``; the block's other linear weights are quantized."""
    from safetensors import safe_open

    from fp8_dummy.realistic import config_checkpoint
    from fp8_dummy.realistic.export import export

    cfg = H.config("mimo_v2_flash", mtp=2)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    want = set()
    for i in range(2):
        p = f"model.mtp.layers.{i}."
        want |= {p + n + ".weight" for n in ("enorm", "hnorm", "eh_proj", "final_layernorm",
                                            "input_layernorm", "pre_mlp_layernorm")}  # fmt: skip
        want |= {f"{p}self_attn.{x}_proj.weight" for x in "qkvo"}
        want |= {f"{p}mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
        want.add(p + "self_attn.attention_sink_bias")
    assert {n for n in t if n.startswith("model.mtp.")} == want
    p = "model.mtp.layers.1."
    assert t[p + "eh_proj.weight"].shape == (128, 256)
    assert t[p + "self_attn.k_proj.weight"].shape == (2 * 2 * cfg.head_dim, 128)  # 2x kv heads
    assert t[p + "self_attn.v_proj.weight"].shape == (2 * 2 * cfg.v_head_dim, 128)
    assert t[p + "self_attn.attention_sink_bias"].shape == (4,)
    assert t[p + "mlp.gate_proj.weight"].shape == (cfg.intermediate_size, 128)
    main = config_checkpoint(H.config("mimo_v2_flash"), 0).tensors
    assert {n for n in t if not n.startswith("model.mtp.")} == set(main)
    assert S.mtp_layers(cfg) == ("mimo", 2) and S.mtp_prefixes(cfg) == ("model.mtp.",)
    assert S.mtp_layers(H.config("mimo_v2_flash")) == (None, 0)
    cfg.save_pretrained(tmp_path / "c")
    for fmt in ("fp8-block", "fp8", "fp8-channel", "nvfp4"):
        out = tmp_path / fmt
        export(tmp_path / "c", out, format=fmt, acceptance=0.5, progress=False)
        names = {}
        for f in out.glob("*.safetensors"):
            with safe_open(str(f), framework="pt") as h:
                names.update({n: h.get_tensor(n).dtype for n in h.keys()})
        quant = json.dumps(json.loads((out / "config.json").read_text())["quantization_config"])
        for i in range(2):
            p = f"model.mtp.layers.{i}."
            assert names[p + "self_attn.o_proj.weight"] == torch.bfloat16, fmt
            assert not [n for n in names if n.startswith(p + "self_attn.o_proj.weight_")], fmt
            assert f'"{p}self_attn.o_proj"' in quant and f'"{p}eh_proj"' in quant, fmt
            for x in ("self_attn.q_proj", "mlp.down_proj"):
                assert names[p + x + ".weight"] != torch.bfloat16, (fmt, x)


def test_minimax_m3_mtp_under_vllms_names():
    """MiniMax-M3's multimodal checkpoint: its text config's ``num_mtp_modules`` MTP layers (one
    where it names none, as vLLM's ``MiniMaxM3MTP`` reads it) under the names that class's loader
    reads (written out here from it: ``language_model.`` dropped, ``model.mtp.layers.{i}.``
    its ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H], ``final_layernorm`` and the block under
    ``transformer_layer.``: the sparse attention's q/k/v/o, q/k norms and indexer
    ``index_q_proj``/``index_k_proj``/``index_q_norm``/``index_k_norm``; the MoE's ``gate``,
    ``e_score_correction_bias``, ``experts.{e}.w1/w2/w3``, ``shared_experts.gate/up/down_proj``;
    the two norms); the main tensors unchanged (the embedding and the lm_head are the model's:
    vLLM's loader reads them from ``language_model.model.embed_tokens`` and
    ``language_model.lm_head``)."""
    from fp8_dummy.realistic import config_checkpoint

    cfg = H.config("minimax_m3_vl", mtp=2)
    t = config_checkpoint(cfg, 0, acceptance=0.5).tensors
    experts = cfg.text_config.num_local_experts
    want = set()
    for i in range(2):
        p = f"language_model.model.mtp.layers.{i}."
        b = p + "transformer_layer."
        want |= {p + f"{x}.weight" for x in ("enorm", "hnorm", "eh_proj", "final_layernorm")}
        want |= {b + f"self_attn.{x}.weight" for x in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                       "q_norm", "k_norm", "index_q_proj",
                                                       "index_k_proj", "index_q_norm",
                                                       "index_k_norm")}  # fmt: skip
        want |= {b + f"{x}_layernorm.weight" for x in ("input", "post_attention")}
        m = b + "block_sparse_moe."
        want |= {m + "gate.weight", m + "e_score_correction_bias"}
        want |= {m + f"shared_experts.{x}_proj.weight" for x in ("gate", "up", "down")}
        want |= {m + f"experts.{e}.w{w}.weight" for e in range(experts) for w in (1, 2, 3)}
        assert t[p + "eh_proj.weight"].shape == (128, 256)
    prefix = "language_model.model.mtp."
    assert {n for n in t if n.startswith(prefix)} == want
    main = config_checkpoint(H.config("minimax_m3_vl"), 0).tensors
    assert {n for n in t if not n.startswith(prefix)} == set(main)
    own = {"language_model.lm_head.weight", "language_model.model.embed_tokens.weight"}
    assert own <= set(main)
    assert S.mtp_layers(cfg) == ("minimax", 2) and S.mtp_prefixes(cfg) == (prefix,)
    absent = H.config("minimax_m3_vl", mtp=1)
    del absent.text_config.num_mtp_modules
    assert S.mtp_layers(absent) == ("minimax", 1)
    assert S.mtp_layers(H.config("minimax_m3_vl")) == (None, 0)
    assert S.mtp_layers(cfg.text_config) == (None, 0)  # the text model's own checkpoint: none
