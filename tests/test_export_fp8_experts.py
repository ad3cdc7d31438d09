"""The fp8 format's routed experts: vLLM's and SGLang's fused MoE take per-token activations
with per-channel weights only, so an MoE's routed experts are written per channel (a
``weight_scale`` [N, 1], each row the scale the tensor has per tensor) in a config group of
their own, targeted by name; every other linear weight (shared experts too) stays per tensor.
The expert tensors are fp8-channel's, byte for byte; the exported config reads back as fp8
and a second export from it writes the same bytes; a dense model's config has one group."""

from __future__ import annotations

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from test_export import CONFIGS, SMALL, raw, read_export  # noqa: E402

from fp8_dummy.realistic import export as E  # noqa: E402
from fp8_dummy.realistic.config_formats import config_format  # noqa: E402

# the target as vLLM, SGLang and compressed-tensors read it: re.match on the module's name
EXPERTS = r"re:.*\.experts\.\d+\.[^.]+$"


def _export(tmp_path, arch: str, fmt: str | None, name: str) -> tuple[dict, dict]:
    src = tmp_path / f"{arch}-src"
    if not src.exists():
        transformers.AutoConfig.for_model(arch, **{**SMALL, **CONFIGS[arch]}).save_pretrained(src)
    E.export(str(src), tmp_path / name, format=fmt, progress=False)
    cfg = json.loads((tmp_path / name / "config.json").read_text())
    return read_export(tmp_path / name), cfg


@pytest.mark.parametrize("arch", ["deepseek_v3", "qwen3_moe"])
def test_routed_experts_are_per_channel_and_fp8_channels_bytes(tmp_path, arch):
    fp8, cfg = _export(tmp_path, arch, "fp8", "fp8")
    channel, _ = _export(tmp_path, arch, "fp8-channel", "channel")
    per_tensor, experts = 0, 0
    for name, t in fp8.items():
        if not name.endswith(".weight_scale"):
            continue
        owner = name[: -len(".weight_scale")]
        w = fp8[owner + ".weight"]
        assert w.dtype == torch.float8_e4m3fn
        if re.match(EXPERTS[3:], owner):
            experts += 1
            assert ".shared_experts." not in owner
            assert tuple(t.shape) == (w.shape[0], 1) and (t == t[0, 0]).all(), name
            for n in (name, owner + ".weight"):  # fp8-channel's bytes
                assert torch.equal(raw(fp8[n]), raw(channel[n])), n
        else:
            per_tensor += 1
            assert t.dim() == 0, name
            # the value the tensor has per channel, each row (the role's)
            assert torch.equal(raw(t.reshape(1)), raw(channel[name][:1, 0])), name
    assert experts and per_tensor
    if arch == "deepseek_v3":  # shared experts per tensor
        assert fp8["model.layers.1.mlp.shared_experts.gate_proj.weight_scale"].dim() == 0
    groups = cfg["quantization_config"]["config_groups"]
    assert [g["targets"] for g in groups.values()] == [["Linear"], [EXPERTS]]
    assert [g["weights"]["strategy"] for g in groups.values()] == ["tensor", "channel"]
    assert all(g["input_activations"]["strategy"] == "token" for g in groups.values())


def test_the_config_reads_back_as_fp8_and_exports_the_same_bytes(tmp_path):
    first, cfg = _export(tmp_path, "qwen3_moe", "fp8", "first")
    read = transformers.AutoConfig.from_pretrained(tmp_path / "first")
    assert config_format(read).name == "fp8"
    # the export's own config, no format named: the same bytes
    E.export(str(tmp_path / "first"), tmp_path / "second", progress=False)
    second = read_export(tmp_path / "second")
    assert first.keys() == second.keys()
    assert all(torch.equal(raw(first[n]), raw(second[n])) for n in first)
    again = json.loads((tmp_path / "second" / "config.json").read_text())
    assert again["quantization_config"] == cfg["quantization_config"]


def test_an_experts_group_of_other_targets_is_not_fp8(tmp_path):
    """A per-channel group of other targets beside the per-tensor one: not what fp8 writes."""
    _, cfg = _export(tmp_path, "qwen3_moe", "fp8", "out")
    q = cfg["quantization_config"]
    q["config_groups"]["group_1"]["targets"] = [r"re:.*\.mlp\..*"]
    read = transformers.AutoConfig.for_model("qwen3_moe", quantization_config=q)
    with pytest.raises(ValueError, match="compressed-tensors"):
        config_format(read)


def test_a_dense_models_fp8_config_has_one_group(tmp_path):
    files, cfg = _export(tmp_path, "llama", "fp8", "out")
    (group,) = cfg["quantization_config"]["config_groups"].values()
    assert group["targets"] == ["Linear"] and group["weights"]["strategy"] == "tensor"
    scales = [t for n, t in files.items() if n.endswith(".weight_scale")]
    assert scales and all(t.dim() == 0 for t in scales)


def test_the_experts_group_alone_is_not_fp8(tmp_path):
    """The routed experts' group without the per-tensor one (every other linear left
    unquantized): neither fp8 nor fp8-channel, refused before anything is made."""
    _, cfg = _export(tmp_path, "qwen3_moe", "fp8", "out")
    q = cfg["quantization_config"]
    del q["config_groups"]["group_0"]
    read = transformers.AutoConfig.for_model("qwen3_moe", quantization_config=q)
    with pytest.raises(ValueError, match="compressed-tensors"):
        config_format(read)
