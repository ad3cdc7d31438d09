"""``python -m fp8_dummy export``: the logical dummy model as a checkpoint. transformers' own
``from_pretrained`` loads it with no missing, unexpected or mismatched key, and holds exactly
what the in-memory realistic fill of the same config and seed holds (byte for byte); the files
are read back with the safetensors library (not our writer); bad input is refused before
anything is written; an interrupted export leaves no file that looks complete."""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import checkpoint_state, memory_blocks  # noqa: E402
from fp8_dummy.realistic import export as E  # noqa: E402
from fp8_dummy.realistic import safetensors_writer as W  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
SMALL.update(num_key_value_heads=2, vocab_size=256)
CONFIGS = {
    "llama": {},
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "deepseek_v3": dict(
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        q_lora_rank=16,
        first_k_dense_replace=1,
        moe_intermediate_size=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        head_dim=8,  # transformers' rotary dimension: the rope part (else its forward fails)
        num_key_value_heads=4,  # MLA: as many as heads
        num_nextn_predict_layers=0,  # its MTP layer: tests/test_realistic_speculative.py
    ),
    # experts stored [E, in, out] (transposed), biases, attention sinks
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16),
    # the router a float32 parameter the class makes itself in a bfloat16 model
    "hunyuan_v1_moe": dict(num_experts=4, moe_topk=2, head_dim=16),
}


def config_dir(tmp_path, arch: str, **more) -> str:
    cfg = transformers.AutoConfig.for_model(arch, **{**SMALL, **CONFIGS[arch], **more})
    d = tmp_path / f"{arch}-config"
    cfg.save_pretrained(d)
    (d / "tokenizer_config.json").write_text('{"model_max_length": 128}')
    return str(d)


def raw(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def in_memory(config, loaded: torch.nn.Module, seed: int, routing: str) -> torch.nn.Module:
    """The in-memory fill of the config, each tensor in the dtype transformers' loader gave
    it (it keeps some in float32: DeepSeek's correction bias)."""
    ref = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    theirs = dict(loaded.state_dict())
    for name, t in ref.state_dict(keep_vars=True).items():
        if t.dtype != theirs[name].dtype:
            t.data = t.data.to(theirs[name].dtype)
    fp8_dummy.initialize_realistic_dummy_weights(ref, seed=seed, routing=routing)
    return ref


# Zipf routing where the fill knows the router (Hunyuan-MoE's gate.wg it does not: balanced)
ROUTED = [a for a in CONFIGS if a not in ("llama", "hunyuan_v1_moe")]
CASES = [(a, "balanced") for a in CONFIGS] + [(a, "zipf:1.1") for a in ROUTED]


@pytest.mark.parametrize("arch,routing", CASES)
def test_transformers_loads_the_export_and_holds_the_in_memory_fill(tmp_path, arch, routing):
    src = config_dir(tmp_path, arch)
    out = tmp_path / "out"
    summary = E.export(src, out, seed=5, routing=routing, shard_size="100KB", progress=False)
    assert summary["shards"] > 1
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.bfloat16, output_loading_info=True
    )
    assert not any(info.values()), info
    ref = in_memory(loaded.config, loaded, 5, routing)
    ours, theirs = ref.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys()
    bad = [n for n in ours if not torch.equal(raw(ours[n]), raw(theirs[n]))]
    assert not bad, bad
    # the checkpoint's own names hold values by (seed, name): another seed changes them all
    assert (out / "tokenizer_config.json").read_text() == '{"model_max_length": 128}'


def read_export(out) -> dict[str, torch.Tensor]:
    """Every tensor of the export through the safetensors library and the index."""
    index = json.loads((out / E.INDEX).read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(out / shard), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name)
                assert index["weight_map"][name] == shard
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for t in tensors.values()
    )
    assert set(tensors) == set(index["weight_map"])
    return tensors


@pytest.mark.parametrize("arch", ["qwen3_moe", "hunyuan_v1_moe"])
def test_shards_index_and_names_match_transformers_save(tmp_path, arch):
    """The names, shapes and dtypes are those save_pretrained writes for the same model (a
    float32 parameter of a bfloat16 model too: Hunyuan-MoE's router)."""
    src = config_dir(tmp_path, arch)
    E.export(src, tmp_path / "out", shard_size="60KB", progress=False)
    ours = read_export(tmp_path / "out")
    cfg = transformers.AutoConfig.from_pretrained(src)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "saved")
    saved = {}
    for f in sorted((tmp_path / "saved").glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            saved.update({n: h.get_tensor(n) for n in h.keys()})
    assert {n: (tuple(t.shape), t.dtype) for n, t in ours.items()} == {
        n: (tuple(t.shape), t.dtype) for n, t in saved.items()
    }
    for name in ours:
        assert "experts.gate_up_proj" not in name  # the checkpoint's per-expert names
    sizes = [os.path.getsize(p) for p in (tmp_path / "out").glob("*.safetensors")]
    assert len(sizes) > 2


@pytest.mark.parametrize(
    ("arch", "fmt", "chunk"),
    [
        ("llama", None, 1000),  # a few rows a window
        ("llama", None, 100),  # a row larger than a window: runs of its elements
        ("gpt_oss", "mxfp4", 48),  # [E, N, K/32, 16]: an expert, even one N, over a window
        ("gpt_oss", "bf16", 5000),  # a stacked expert over a window, its rows not
    ],
)
def test_blocks_written_in_chunks_are_the_whole_tensors_bytes(
    tmp_path, monkeypatch, arch, fmt, chunk
):
    src = config_dir(tmp_path, arch)
    E.export(src, tmp_path / "a", seed=3, format=fmt, progress=False)
    cut = []
    real = W.tensor_blocks

    def blocks(t):
        for block, shape, at in real(t):
            size = math.prod(shape) * t.dtype.itemsize
            cut.append((t.name, at, size))
            yield block, shape, at

    monkeypatch.setattr(W, "CHUNK", chunk)
    monkeypatch.setattr(W, "tensor_blocks", blocks)
    E.export(src, tmp_path / "b", seed=3, format=fmt, progress=False)
    a, b = read_export(tmp_path / "a"), read_export(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(raw(a[n]), raw(b[n])) for n in a)
    assert all(size <= chunk for _, _, size in cut)  # every block within a window
    for name in {n for n, _, _ in cut}:  # each tensor's blocks tile it, in order
        mine = [(at, size) for n, at, size in cut if n == name]
        assert [at for at, _ in mine] == list(itertools.accumulate([0] + [s for _, s in mine[:-1]]))
        assert sum(s for _, s in mine) == raw(a[name]).numel()
    assert any(len([1 for n, _, _ in cut if n == m]) > 1 for m in a)  # some were cut


def test_a_tensor_off_its_alignment_gets_the_same_bytes(tmp_path):
    """safetensors packs tensors back to back: a bf16 tensor after 9 bytes of e4m3 sits off
    its alignment in the file; its bytes are still the logical model's."""
    import dataclasses

    from fp8_dummy.realistic import build_model, logical_model

    cfg = transformers.AutoConfig.for_model("llama", **SMALL)
    lm = logical_model(build_model(cfg, dtype=torch.bfloat16), 4, format="fp8")
    fp8 = next(t for t in lm.tensors.values() if t.dtype == torch.float8_e4m3fn)
    wide = next(t for t in lm.tensors.values() if t.dtype == torch.bfloat16 and t.nbytes > 64)
    odd = dataclasses.replace(fp8, name="odd", shape=(3, 3))
    lm.tensors["odd"] = odd
    group = [odd, wide, odd]
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 8 + sum(t.nbytes for t in group))
    W.write_tensors(fd, lm, group, 8, lambda t: None)
    os.close(fd)
    data = path.read_bytes()
    want = b"\0" * 8 + b"".join(
        raw(lm.fill(t.name, torch.empty(t.shape, dtype=t.dtype))).numpy().tobytes() for t in group
    )
    assert data == want


E4M3_MAX = 448.0


def decode_e4m3(bits: np.ndarray) -> np.ndarray:
    """e4m3fn bytes -> float64, from the bits (no torch conversion)."""
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, man = (b >> 3) & 0xF, b & 0x7
    normal = (1 + man / 8.0) * np.exp2(exp - 7.0)
    sub = man / 8.0 * 2.0**-6
    assert not ((exp == 15) & (man == 7)).any(), "NaN code"
    return sign * np.where(exp == 0, sub, normal)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def decode_e2m1_pairs(packed: np.ndarray) -> np.ndarray:
    """Two e2m1 codes a byte, the first element in the low nibble (ModelOpt's packing)."""
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return np.where(nib & 8, -1.0, 1.0) * E2M1[nib & 7]


def _quantization_config(fmt: str, q: dict) -> list[str]:
    """The method's config as its loaders read it; the modules it leaves unquantized."""
    if fmt in ("fp8-channel", "fp8"):  # per tensor: how transformers and vLLM both read it
        assert q["quant_method"] == "compressed-tensors" and q["format"] == "float-quantized"
        # fp8: the routed experts per channel in a group of their own (an MoE's engines take
        # no per-tensor experts with per-token activations)
        want = {"Linear": "channel"} if fmt == "fp8-channel" else {"Linear": "tensor"}
        if fmt == "fp8":
            want[r"re:.*\.experts\.\d+\.[^.]+$"] = "channel"
        groups = list(q["config_groups"].values())
        assert {g["targets"][0]: g["weights"]["strategy"] for g in groups} == want
        for group in groups:
            assert len(group["targets"]) == 1 and group["weights"]["num_bits"] == 8
            acts = group["input_activations"]
            assert acts["dynamic"] is True and acts["strategy"] == "token"
        return q["ignore"]
    if fmt == "nvfp4":
        assert q["quant_method"] == "modelopt" and q["quant_algo"] == "NVFP4"
        assert q["group_size"] == 16
        return q["exclude_modules"]
    assert q["quant_method"] == "fp8" and q["activation_scheme"] == "dynamic"
    assert q["weight_block_size"] == [128, 128]
    assert q["modules_to_not_convert"] == q["ignored_layers"]
    return q["modules_to_not_convert"]


@pytest.mark.parametrize("fmt", ["fp8", "fp8-block", "fp8-channel", "nvfp4"])
def test_quantized_formats(tmp_path, fmt):
    """Each decoder-layer linear weight quantized with its scales beside it, in the layout the
    method's loaders read; routers, embeddings, norms and lm_head unquantized and listed in
    the config; block scales powers of two; the weight decoded from the bits here (codes x
    scales) has the role's σ."""
    src = config_dir(tmp_path, "deepseek_v3")
    E.export(src, tmp_path / "out", format=fmt, progress=False)
    t = read_export(tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    skipped = _quantization_config(fmt, cfg["quantization_config"])
    assert "model.layers.1.mlp.gate" in skipped and "lm_head" in skipped
    assert t["lm_head.weight"].dtype == torch.bfloat16
    assert t["model.layers.1.mlp.gate.weight"].dtype == torch.bfloat16
    assert t["model.embed_tokens.weight"].dtype == torch.bfloat16
    L = 2
    routed = cfg["routed_scaling_factor"]  # what the class multiplies the routed experts by
    assert routed == 2.5
    # residual: 0 for a plain linear, else the factor the class multiplies the branch's output by
    for name, fan_in, residual in [
        ("model.layers.0.self_attn.q_b_proj", 16, 0.0),
        ("model.layers.1.mlp.experts.3.down_proj", 32, routed),
        ("model.layers.0.mlp.gate_proj", 64, 0.0),
    ]:
        w = t[f"{name}.weight"]
        if fmt == "nvfp4":
            assert w.dtype == torch.uint8 and w.shape[1] == fan_in // 2
            codes = decode_e2m1_pairs(w.numpy())
            s = t[f"{name}.weight_scale"]
            assert s.dtype == torch.float8_e4m3fn and tuple(s.shape) == (w.shape[0], fan_in // 16)
            s2 = t[f"{name}.weight_scale_2"]
            assert s2.dtype == torch.float32 and s2.dim() == 0
            blocks = decode_e4m3(s.view(torch.uint8).numpy())
            value = codes * np.repeat(blocks, 16, axis=1) * float(s2)
            assert float(t[f"{name}.input_scale"]) == np.float32(1 / 448)
        else:
            assert w.dtype == torch.float8_e4m3fn
            codes = decode_e4m3(w.view(torch.uint8).numpy())
            assert np.abs(codes).max() <= E4M3_MAX
            if fmt == "fp8-block":
                s = t[f"{name}.weight_scale_inv"]
                assert s.dtype == torch.float32
                assert tuple(s.shape) == tuple(-(-d // 128) for d in w.shape)
                m, e = np.frexp(s.numpy())
                assert (m == 0.5).all(), "block scales are powers of two"
                value = codes * float(s.reshape(-1)[0])
            elif fmt == "fp8-channel":
                s = t[f"{name}.weight_scale"]
                assert s.dtype == torch.float32 and tuple(s.shape) == (w.shape[0], 1)
                value = codes * s.numpy()
            elif ".experts." in name:  # fp8: a routed expert per channel, each row alike
                s = t[f"{name}.weight_scale"]
                assert s.dtype == torch.float32 and tuple(s.shape) == (w.shape[0], 1)
                assert (s == s[0, 0]).all()
                value = codes * s.numpy()
            else:
                s = t[f"{name}.weight_scale"]
                assert s.dtype == torch.float32 and s.dim() == 0
                value = codes * float(s)
        target = (2 * L * fan_in) ** -0.5 / residual if residual else fan_in**-0.5
        assert abs(value.std() / target - 1) < 0.15, (name, value.std(), target)


def decode_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """GPT-OSS's ``<w>_blocks`` [E, N, K/32, 16] and ``<w>_scales`` [E, N, K/32] -> [E, N, K]:
    e2m1 codes (low nibble first) × 2^(scale - 127)."""
    codes = decode_e2m1_pairs(blocks)  # [E, N, K/32, 32]
    assert (scales != 255).all(), "E8M0 NaN"
    value = codes * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return value.reshape(*blocks.shape[:2], -1)


def test_mxfp4_is_gpt_oss_layout_and_transformers_dequantizes_it_exactly(tmp_path):
    """mxfp4: each fused experts tensor as GPT-OSS's uint8 ``_blocks`` [E, N, K/32, 16] and
    ``_scales`` [E, N, K/32] (N outputs, K inputs, whatever the in-memory order), everything
    else bf16 and listed in ``modules_to_not_convert``; transformers loads it (dequantizing
    on a CPU) with no missing, unexpected or mismatched key, each expert weight exactly the
    codes × 2^(e - 127) decoded here, transposed to its [E, K, N]; σ the role's (fan-in K)."""
    src = config_dir(tmp_path, "gpt_oss", intermediate_size=96)
    E.export(src, tmp_path / "out", seed=5, format="mxfp4", progress=False)
    files = read_export(tmp_path / "out")
    q = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "mxfp4"
    skipped = q["modules_to_not_convert"]
    assert {"model.layers.*.mlp.router", "model.layers.*.self_attn.q_proj", "lm_head"} <= set(
        skipped
    )
    hidden, inter, L, experts = 64, 96, 2, 4
    shapes = {"gate_up_proj": (2 * inter, hidden), "down_proj": (hidden, inter)}
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", output_loading_info=True
    )
    assert not any(info.values()), info
    own = loaded.state_dict()
    for layer in range(L):
        prefix = f"model.layers.{layer}.mlp.experts."
        assert f"{prefix}gate_up_proj" not in files
        for proj, (n, k) in shapes.items():
            blocks, scales = files[f"{prefix}{proj}_blocks"], files[f"{prefix}{proj}_scales"]
            assert blocks.dtype == scales.dtype == torch.uint8
            assert tuple(blocks.shape) == (experts, n, k // 32, 16)
            assert tuple(scales.shape) == (experts, n, k // 32)
            value = decode_mxfp4(blocks.numpy(), scales.numpy())
            want = torch.from_numpy(value).transpose(1, 2).to(torch.bfloat16)
            assert torch.equal(raw(want), raw(own[f"{prefix}{proj}"])), proj
            target = (2 * L * k) ** -0.5 if proj == "down_proj" else k**-0.5
            assert abs(value.std() / target - 1) < 0.1, (proj, value.std(), target)
            assert files[f"{prefix}{proj}_bias"].dtype == torch.bfloat16
    assert files["model.layers.0.self_attn.sinks"].dtype == torch.bfloat16
    assert (files["model.layers.0.self_attn.sinks"] == 0).all()


def test_mxfp4_refuses_what_it_cannot_take(tmp_path):
    """MXFP4 quantizes fused experts in blocks of 32 inputs: a model without fused experts
    (Llama) and GPT-OSS with an intermediate size of 40 are refused, naming why; nothing
    written."""
    src = config_dir(tmp_path, "llama")
    with pytest.raises(E.ExportError, match=r"mxfp4 quantizes fused experts"):
        E.export(src, tmp_path / "out", format="mxfp4", progress=False)
    src = config_dir(tmp_path, "gpt_oss", intermediate_size=40)
    with pytest.raises(E.ExportError, match=r"experts.down_proj has 40 input features"):
        E.export(src, tmp_path / "out", format="mxfp4", progress=False)
    assert not (tmp_path / "out").exists()


def test_nvfp4_refuses_what_it_cannot_group(tmp_path):
    """NVFP4 scales every 16 inputs: a linear layer with 40 is named, nothing written."""
    src = config_dir(tmp_path, "llama", intermediate_size=40)
    with pytest.raises(E.ExportError, match=r"down_proj.weight has 40 input features"):
        E.export(src, tmp_path / "out", format="nvfp4", progress=False)
    assert not (tmp_path / "out").exists()


def test_without_format_the_configs_own(tmp_path):
    """No --format: the config's quantization_config (its block size kept), else its dtype;
    a quantization_config fp8_dummy does not make is refused, naming it, before writing."""
    block = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 32]}
    src = config_dir(tmp_path, "llama", quantization_config=block)
    E.export(src, tmp_path / "blk", progress=False)
    t = read_export(tmp_path / "blk")
    w, s = (
        t["model.layers.0.mlp.down_proj.weight"],
        t["model.layers.0.mlp.down_proj.weight_scale_inv"],
    )
    assert w.dtype == torch.float8_e4m3fn and tuple(s.shape) == (64 // 16, 128 // 32)
    q = json.loads((tmp_path / "blk" / "config.json").read_text())["quantization_config"]
    assert q["weight_block_size"] == [16, 32] and "lm_head" in q["ignored_layers"]
    mx = config_dir(tmp_path, "gpt_oss", quantization_config={"quant_method": "mxfp4"})
    E.export(mx, tmp_path / "mx", progress=False)
    assert read_export(tmp_path / "mx")["model.layers.1.mlp.experts.down_proj_blocks"].dtype == (
        torch.uint8
    )
    src16 = config_dir(tmp_path, "mixtral", torch_dtype="float16")
    E.export(src16, tmp_path / "f16", progress=False)
    assert read_export(tmp_path / "f16")["model.embed_tokens.weight"].dtype == torch.float16
    for bad, what in [
        ({"quant_method": "awq", "bits": 4}, "'awq'"),
        ({"quant_method": "fp8", "activation_scheme": "static"}, "static activation"),
    ]:
        src_bad = config_dir(tmp_path / what.strip("'"), "llama", quantization_config=bad)
        with pytest.raises(E.ExportError, match=what):
            E.export(src_bad, tmp_path / "bad", progress=False)
        assert not (tmp_path / "bad").exists()
    E.export(src_bad, tmp_path / "chosen", format="bf16", progress=False)  # --format wins


def test_nvfp4_as_sglang_names_it_is_the_same_checkpoint(tmp_path):
    """SGLang hands a model's class the checkpoint's config with ModelOpt's method rewritten to
    the one it picked ("modelopt_fp4"): the export (and the realistic fill reading that
    config) makes the same checkpoint from it, byte for byte; ModelOpt's other algorithms are
    still refused, naming them."""
    E.export(config_dir(tmp_path, "qwen3_moe"), tmp_path / "a", format="nvfp4", progress=False)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    config["quantization_config"]["quant_method"] = "modelopt_fp4"
    (tmp_path / "renamed").mkdir()
    (tmp_path / "renamed" / "config.json").write_text(json.dumps(config))
    E.export(tmp_path / "renamed", tmp_path / "b", progress=False)
    a, b = read_export(tmp_path / "a"), read_export(tmp_path / "b")
    assert sorted(a) == sorted(b) and any(t.dtype == torch.uint8 for t in a.values())
    for name, t in a.items():
        assert t.dtype == b[name].dtype and torch.equal(raw(t), raw(b[name])), name
    config["quantization_config"]["quant_algo"] = "FP8"
    (tmp_path / "fp8").mkdir()
    (tmp_path / "fp8" / "config.json").write_text(json.dumps(config))
    with pytest.raises(E.ExportError, match="'modelopt_fp4' \\(FP8\\)"):
        E.export(tmp_path / "fp8", tmp_path / "c", progress=False)
    assert not (tmp_path / "c").exists()


def test_refusals_write_nothing(tmp_path, monkeypatch):
    src = config_dir(tmp_path, "llama")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(E.ExportError, match="not empty"):
        E.export(src, out, progress=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "mine"
    fresh = tmp_path / "fresh"
    with pytest.raises(E.ExportError, match="bf16, fp16, fp8, fp8-block"):
        E.export(src, fresh, format="int3", progress=False)
    with pytest.raises(E.ExportError, match="shard size"):
        E.export(src, fresh, shard_size="lots", progress=False)
    with pytest.raises(ValueError, match="router"):
        E.export(src, fresh, routing="zipf:1", progress=False)  # llama has no router
    monkeypatch.setattr(E.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 1000))
    with pytest.raises(E.ExportError, match="GB free"):
        E.export(src, fresh, progress=False)
    assert not fresh.exists()


def test_unknown_roles_are_named_or_allowed(tmp_path):
    """Mamba's state-space A_log and D have no role: named, exported with --allow-unknown."""
    cfg = transformers.AutoConfig.for_model(
        "mamba", hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=8
    )
    cfg.save_pretrained(tmp_path / "c")
    with pytest.raises(E.ExportError, match=r"layers.1.mixer.A_log.*mixer.D.*--allow-unknown"):
        E.export(tmp_path / "c", tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()
    E.export(tmp_path / "c", tmp_path / "o", progress=False, allow_unknown=True)
    assert any(n.endswith("A_log") for n in read_export(tmp_path / "o"))


def _left(tmp_path) -> list[str]:
    """What an export left beside OUT: nothing but the config's directory."""
    return sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("-config"))


def test_an_interrupted_export_publishes_nothing(tmp_path, monkeypatch):
    src = config_dir(tmp_path, "llama")
    calls = []

    def failing(t):
        calls.append(t.name)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real(t)

    real = W.tensor_blocks
    monkeypatch.setattr(W, "tensor_blocks", failing)
    with pytest.raises(KeyboardInterrupt):
        E.export(src, tmp_path / "out", shard_size="100KB", progress=False)
    assert _left(tmp_path) == [], "no OUT, no staging directory left behind"


def test_a_failed_write_is_raised_and_publishes_nothing(tmp_path, monkeypatch):
    """The writer thread's error (a full disk) reaches the caller; nothing is published."""
    import errno

    src = config_dir(tmp_path, "llama")
    writes = []
    real = os.pwrite

    def full(fd, data, offset):
        writes.append(offset)
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(W, "CHUNK", 4096)
    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError, match="No space left"):
        E.export(src, tmp_path / "out", progress=False)
    assert len(writes) == 3, "nothing written after the failure"
    assert _left(tmp_path) == []


def test_command_line(tmp_path, capsys):
    from fp8_dummy.__main__ import main

    src = config_dir(tmp_path, "llama")
    assert main(["export", src, str(tmp_path / "o"), "--seed", "2", "--quiet"]) == 0
    assert "tensors" in capsys.readouterr().out
    assert main(["export", src, str(tmp_path / "p"), "--format", "nope"]) == 2
    assert "the formats: bf16" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
    # another seed: every random tensor differs
    main(["export", src, str(tmp_path / "q"), "--seed", "3", "--quiet"])
    a, b = read_export(tmp_path / "o"), read_export(tmp_path / "q")
    differ = [n for n in a if not torch.equal(raw(a[n]), raw(b[n]))]
    assert len(differ) >= len(a) - 5  # norms are constants
    assert math.isclose(a["model.norm.weight"].float().mean().item(), 1.0)


def test_checkpoint_state_is_views_of_memory():
    """checkpoint_state's tensors share the model's memory (no copy is made to name them)."""
    cfg = transformers.AutoConfig.for_model("qwen3_moe", **{**SMALL, **CONFIGS["qwen3_moe"]})
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    state = checkpoint_state(model)
    experts = model.model.layers[0].mlp.experts.gate_up_proj
    up = state["model.layers.0.mlp.experts.2.up_proj.weight"]
    assert up.untyped_storage().data_ptr() == experts.untyped_storage().data_ptr()
    assert torch.equal(up, experts[2, 32:])


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3", "llama", "mixtral"])
def test_transformers_dequantizes_the_fp8_block_export_exactly(tmp_path, arch):
    """transformers loads the fp8-block export (on a CPU it dequantizes to bf16) with no
    missing, unexpected or mismatched key, and each weight is codes × its block's scale, both
    decoded here from the bits: exact in bf16, as the scales are powers of two."""
    pytest.importorskip("accelerate", reason="transformers' FP8 loader needs accelerate")
    src = config_dir(tmp_path, arch)
    E.export(src, tmp_path / "out", seed=9, format="fp8-block", progress=False)
    files = read_export(tmp_path / "out")
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", output_loading_info=True
    )
    assert not any(info.values()), info
    # the checkpoint's names in the loaded model: the blocks of an unquantized twin (the
    # loaded model's own save conversion keeps its dequantization step)
    twin = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained(src)
    )
    own = loaded.state_dict()
    state = {
        n: own[b.source].as_strided(b.shape, b.strides, own[b.source].storage_offset() + b.offset)
        for n, b in memory_blocks(twin).items()
    }
    checked = 0
    for name, w in files.items():
        if w.dtype != torch.float8_e4m3fn:
            if name in state and w.dtype == state[name].dtype:
                assert torch.equal(raw(w), raw(state[name])), name
            continue
        scale = files[f"{name}_scale_inv"].numpy().astype(np.float64)
        full = np.kron(scale, np.ones((128, 128)))[: w.shape[0], : w.shape[1]]
        want = torch.from_numpy(decode_e4m3(w.view(torch.uint8).numpy()) * full)
        assert torch.equal(raw(want.to(torch.bfloat16)), raw(state[name].to(torch.bfloat16))), name
        checked += 1
    assert checked >= 7
