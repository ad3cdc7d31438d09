"""The exported config means the same model to every reader, and each format is read as it
is written (docs/export.md): the caller's keys kept as written and the architecture facts
the logical model assumed written out (DeepSeek-V3's router kind where its config left it to
transformers' class); the per-tensor FP8 export read by transformers at its scale, never
silently 2,000x off; a Conv1D model's weights not quantized along the wrong axes; a config's
``modules_to_not_convert`` kept unquantized and kept in the list; a failed architecture probe
gets the plain rule, with a warning naming it. (vLLM's loader reads the same exports in
tests/test_engines_vllm_exports.py.)"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from safetensors.torch import load_file  # noqa: E402

from fp8_dummy.realistic import export as E  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
SMALL.update(num_key_value_heads=2, vocab_size=256)
DEEPSEEK = dict(
    n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=16,
    first_k_dense_replace=1, moe_intermediate_size=32, kv_lora_rank=16, qk_rope_head_dim=8,
    qk_nope_head_dim=8, v_head_dim=8, head_dim=8, num_key_value_heads=4,
)  # fmt: skip


def write_config(tmp_path, raw: dict, name: str = "cfg"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(raw))
    return d


def exported(tmp_path, src, **kw) -> dict:
    E.export(src, tmp_path / "out", progress=False, **kw)
    return json.loads((tmp_path / "out" / "config.json").read_text())


def tensors(tmp_path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted((tmp_path / "out").glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_the_callers_keys_are_kept_as_written(tmp_path):
    """Qwen3-MoE as its checkpoints write it (num_experts, rope_theta): the export keeps
    those names (transformers' class renames them to num_local_experts and rope_parameters,
    which readers of the raw file, mlx-lm's, do not know)."""
    raw = dict(model_type="qwen3_moe", **SMALL, num_experts=4, num_experts_per_tok=2,
               moe_intermediate_size=32, rope_theta=123456.0, torch_dtype="bfloat16")  # fmt: skip
    cfg = exported(tmp_path, write_config(tmp_path, raw))
    for key, value in raw.items():
        if key != "torch_dtype":
            assert cfg[key] == value, key
    assert "num_local_experts" not in cfg and "rope_parameters" not in cfg
    assert cfg["torch_dtype"] == cfg["dtype"] == "bfloat16"
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"]
    back = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    assert back.num_experts == 4 and back.rope_parameters["rope_theta"] == 123456.0


def test_nemotron_h_patterns_are_kept_without_the_derived_lists(tmp_path):
    """Nemotron-H as its checkpoints write it (``hybrid_override_pattern``,
    ``mtp_hybrid_override_pattern``): the export keeps the patterns and adds no
    ``layers_block_type`` lists in transformers' newer names ("linear_attention"), which
    SGLang 0.5.23's config class takes first and refuses; transformers reads the same model."""
    raw = dict(model_type="nemotron_h", **SMALL, hybrid_override_pattern="ME*E",
               mtp_hybrid_override_pattern="*E", num_nextn_predict_layers=1, n_routed_experts=4,
               num_experts_per_tok=2, moe_intermediate_size=32,
               moe_shared_expert_intermediate_size=32, mamba_num_heads=4, mamba_head_dim=16,
               ssm_state_size=16, n_groups=2, head_dim=16)  # fmt: skip
    cfg = exported(tmp_path, write_config(tmp_path, raw), allow_unknown=True)
    assert cfg["hybrid_override_pattern"] == "ME*E" and cfg["mtp_hybrid_override_pattern"] == "*E"
    assert "layers_block_type" not in cfg and "mtp_layers_block_type" not in cfg
    back = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    assert back.layers_block_type == ["linear_attention", "moe", "full_attention", "moe"]
    assert back.mtp_layers_block_type == ["full_attention", "moe"]


def test_rope_scaling_is_kept_as_written(tmp_path):
    """GPT-OSS's YaRN: kept as the caller wrote it (not only as transformers' rope_parameters,
    which a reader of rope_scaling does not see: it would run default RoPE)."""
    yarn = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": False}  # fmt: skip
    raw = dict(model_type="gpt_oss", **SMALL, num_local_experts=4, num_experts_per_tok=2,
               head_dim=16, rope_theta=150000.0, rope_scaling=yarn)  # fmt: skip
    cfg = exported(tmp_path, write_config(tmp_path, raw))
    assert cfg["rope_scaling"] == yarn and cfg["rope_theta"] == 150000.0
    back = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    assert back.rope_parameters["rope_type"] == "yarn" and back.rope_parameters["factor"] == 32


def test_a_rope_left_to_the_class_is_written_as_every_reader_knows_it(tmp_path):
    raw = dict(model_type="llama", **SMALL)
    cfg = exported(tmp_path, write_config(tmp_path, raw))
    default = transformers.AutoConfig.for_model("llama", **SMALL).rope_parameters["rope_theta"]
    assert cfg["rope_theta"] == default and "rope_scaling" not in cfg


def test_deepseek_v3_made_by_transformers_names_its_router(tmp_path):
    """transformers' DeepseekV3Config has no topk_method/scoring_func (its class always adds
    a correction bias to sigmoid scores); vLLM then builds no e_score_correction_bias and
    its loader raises a KeyError on the export. The export writes what the model assumed,
    with the grouping the class's defaults gave."""
    config = transformers.DeepseekV3Config(**SMALL | DEEPSEEK)
    raw = json.loads(config.to_json_string(use_diff=True))
    assert "topk_method" not in raw and "scoring_func" not in raw
    cfg = exported(tmp_path, write_config(tmp_path, raw))
    assert cfg["topk_method"] == "noaux_tc" and cfg["scoring_func"] == "sigmoid"
    assert (cfg["n_group"], cfg["topk_group"]) == (2, 1)
    files = tensors(tmp_path)
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in files


def test_mimo_v2_flash_made_by_transformers_gets_its_own_keys(tmp_path):
    """transformers' MiMo-V2-Flash config has none of the keys vLLM's and SGLang's MiMo-V2
    classes read for its sliding layers (vLLM's fail to build without ``swa_*``, and without
    ``add_swa_attention_sink_bias`` build no sinks, skipping the checkpoint's): the export
    writes them for the model transformers' class builds (kv heads doubled, sinks, the window
    without the query, 0/1 patterns, the norms' epsilon, the per-type RoPE); a key the caller
    wrote stays as written."""
    config = transformers.AutoConfig.for_model(
        "mimo_v2_flash", **SMALL, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, head_dim=16, v_head_dim=8, rms_norm_eps=1e-6,
    )  # fmt: skip
    raw = json.loads(config.to_json_string(use_diff=True))
    assert "swa_num_attention_heads" not in raw and "hybrid_layer_pattern" not in raw
    cfg = exported(tmp_path, write_config(tmp_path, dict(raw, swa_rope_theta=777.0)))
    want = dict(swa_num_attention_heads=4, swa_num_key_value_heads=4, swa_head_dim=16,
                swa_v_head_dim=8, add_swa_attention_sink_bias=True,
                add_full_attention_sink_bias=False, sliding_window_size=128,
                hybrid_layer_pattern=[0, 1], moe_layer_freq=[0, 1], layernorm_epsilon=1e-6,
                rope_theta=5e6, swa_rope_theta=777.0, partial_rotary_factor=0.334)  # fmt: skip
    assert {k: cfg[k] for k in want} == want
    files = tensors(tmp_path)
    assert files["model.layers.1.self_attn.k_proj.weight"].shape == (4 * 16, 64)  # 4 kv heads
    assert files["model.layers.1.self_attn.attention_sink_bias"].shape == (4,)


def test_the_per_tensor_fp8_export_is_never_read_at_another_scale(tmp_path):
    """transformers read the fp8 (per-tensor) export as 128x128 blocks: weight_scale
    unexpected, q_proj's σ 2,082x its own, no error. Now it is compressed-tensors' per-tensor
    scheme, which transformers reads with that package (at the scale) or refuses, naming it."""
    src = write_config(tmp_path, dict(model_type="llama", **SMALL))
    E.export(src, tmp_path / "out", format="fp8", progress=False)
    files = tensors(tmp_path)
    w, s = (
        files["model.layers.0.self_attn.q_proj.weight"],
        files["model.layers.0.self_attn.q_proj.weight_scale"],
    )
    want = (w.float() * s).std().item()
    assert abs(want / 64**-0.5 - 1) < 0.1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    except ImportError as e:  # transformers without compressed-tensors: refused, named
        assert "compressed" in str(e).lower() and "tensors" in str(e).lower()
        return
    got = model.model.layers[0].self_attn.q_proj.weight.float().std().item()
    assert abs(got / want - 1) < 0.05, (got, want)


@pytest.mark.parametrize("fmt", ["fp8", "fp8-block", "fp8-channel", "nvfp4"])
def test_a_conv1d_model_is_not_quantized_along_the_wrong_axes(tmp_path, fmt):
    """GPT-2's linears are Conv1D (weights [in, out]): no reader takes per-channel scales or
    FP4 packing along those axes, so none of them is quantized, and a model made of them
    only is refused for a quantized format, naming why, with nothing written."""
    src = write_config(tmp_path, dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4,
                                      vocab_size=256, n_positions=64))  # fmt: skip
    with pytest.raises(E.ExportError, match=r"stored \[in, out\].*Conv1D"):
        E.export(src, tmp_path / "out", format=fmt, progress=False)
    assert not (tmp_path / "out").exists()


def test_the_configs_modules_to_not_convert_stay_unquantized_and_listed(tmp_path):
    keep = ["model.layers.0.self_attn", "model.layers.0.mlp"]
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic",
             "weight_block_size": [32, 32], "modules_to_not_convert": keep}  # fmt: skip
    src = write_config(tmp_path, dict(model_type="llama", **SMALL, quantization_config=quant))
    cfg = exported(tmp_path, src)
    files = tensors(tmp_path)
    for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
        assert files[f"model.layers.0.{name}.weight"].dtype == torch.bfloat16, name
        assert f"model.layers.0.{name}.weight_scale_inv" not in files
        assert files[f"model.layers.1.{name}.weight"].dtype == torch.float8_e4m3fn, name
    listed = cfg["quantization_config"]["modules_to_not_convert"]
    assert listed[:2] == keep and "lm_head" in listed
    assert "model.layers.0.self_attn.q_proj" in listed  # in full: vLLM matches names exactly
    assert "model.layers.1.self_attn.q_proj" not in listed
    pytest.importorskip("accelerate", reason="transformers' FP8 loader needs accelerate")
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", output_loading_info=True
    )
    assert not any(info.values()), info
    got = loaded.model.layers[0].self_attn.q_proj.weight  # unquantized: the file's bytes
    assert torch.equal(got.view(torch.int16), files[f"{keep[0]}.q_proj.weight"].view(torch.int16))


def test_a_failed_architecture_probe_gets_the_plain_rule_with_a_warning(tmp_path, capsys):
    """DeepSeek-V3 whose head_dim disagrees with qk_rope_head_dim: transformers' forward
    fails inside layer 0's attention. The probe took what it saw until then as the model's
    dataflow (q_b_proj a branch output: σ 1/√(2·L·fan_in) instead of 1/√fan_in) and the
    export exited 0 in silence; now the plain rule, and a warning naming the probe, the
    error and the tensor."""
    raw = dict(model_type="deepseek_v3", **SMALL | DEEPSEEK)
    raw["head_dim"] = 32
    src = write_config(tmp_path, raw)
    assert E.main([str(src), str(tmp_path / "out"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "probe of the decoder layers' dataflow failed" in err, err
    assert "model.layers.0.self_attn.q_b_proj" in err
    q = tensors(tmp_path)["model.layers.0.self_attn.q_b_proj.weight"].float().numpy()
    assert abs(q.std() / 16**-0.5 - 1) < 0.1, q.std()  # fan_in q_lora_rank 16: plain linear
    assert np.isfinite(q).all()


def test_mlx_lm_builds_the_exports_from_their_config(tmp_path):
    """One more reader of the raw config.json (mlx-lm, on the CPU where it is installed: it
    is not in CI's environments): the Qwen3-MoE export builds (it needs num_experts and
    rope_theta as written) and the GPT-OSS MXFP4 export keeps its YaRN rope_scaling (mlx-lm
    ran it with default RoPE before); each forward finite."""
    mx = pytest.importorskip("mlx.core")
    utils = pytest.importorskip("mlx_lm.utils")
    qwen = dict(model_type="qwen3_moe", **SMALL, head_dim=16, num_experts=4,
                num_experts_per_tok=2, moe_intermediate_size=32, rope_theta=54321.0,
                rms_norm_eps=1e-6, max_position_embeddings=256, norm_topk_prob=True,
                decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)  # fmt: skip
    yarn = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": False}  # fmt: skip
    gpt = dict(model_type="gpt_oss", **SMALL | dict(intermediate_size=64), head_dim=16,
               num_local_experts=4, num_experts_per_tok=2, rope_theta=150000.0,
               rope_scaling=yarn, sliding_window=128, tie_word_embeddings=False,
               layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    for name, raw, fmt in (("qwen", qwen, None), ("gpt", gpt, "mxfp4")):
        E.export(write_config(tmp_path, raw, name), tmp_path / f"{name}-out", format=fmt,
                 progress=False)  # fmt: skip
        model, _ = utils.load_model(tmp_path / f"{name}-out")
        model.set_dtype(mx.float32)  # mlx's CPU GatherMM: float32 only
        assert bool(mx.all(mx.isfinite(model(mx.array([[1, 2, 3, 4]])))).item())
        if name == "qwen":
            assert (model.args.num_experts, model.args.rope_theta) == (4, 54321.0)
        else:
            assert model.args.rope_scaling == yarn
