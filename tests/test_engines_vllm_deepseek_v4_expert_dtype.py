"""DeepSeek-V4's ``expert_dtype`` in an export's config.json, per format, against vLLM 0.33's own
readings of it (fp8_dummy/realistic/exported_config.py writes ``fp8`` in every format, over a
caller's copy of DeepSeek-V4-Flash's ``fp4``). Where vLLM reads the key, read here by its own
code on the CPU:

- which quantization config a checkpoint's ``quantization_config`` resolves to
  (``DeepseekV4FP8Config.override_quantization_method``): DeepSeek-V4's FP8 config for FP8
  blocks only, so only there does the key choose how the experts are built;
- in that config (vllm/models/deepseek_v4/quant_config.py), ``expert_dtype`` and
  ``is_scale_e8m0``: ``DeepseekV4FP8Config.get_quant_method`` builds a ``RoutedExperts``
  layer with ``Mxfp4MoEMethod`` where ``expert_dtype`` is ``fp4``, else falls through to
  ``Fp8Config``'s ``Fp8MoEMethod`` (FP8 blocks, what the export writes), and the linear
  layers' block scales are read as E8M0 where it is ``fp4`` (the export's are float32);
- the checkpoint-name mappers ``_make_deepseek_v4_weights_mapper`` of the NVIDIA and CPU
  classes (vllm/models/deepseek_v4/{nvidia,cpu}/model.py; ``DeepseekV4ForCausalLM.__init__``
  picks one by the key): under ``fp4`` the CPU one renames a linear layer's ``weight_scale``
  (compressed-tensors' FP8, ModelOpt's NVFP4) to ``weight_scale_inv``, a parameter those
  formats' methods do not register; under the export's value every weight scale keeps its name.

From the source, not callable here (a CUDA expert-parallel build): vllm/models/deepseek_v4/
nvidia/model.py, ``DeepseekV4MoE.__init__``, refuses a MegaMoE backend unless the key is
``fp4`` and ``_init_mega_moe_experts`` then builds MXFP4 experts (``MEGA_MOE_MXFP4``) whatever
the quantization config; under ``fp8`` a bf16 or NVFP4 export is refused there by name instead
of loaded into MXFP4 experts. No other reading of the key builds the bf16 experts differently.
Without vLLM 0.33: skipped, with why."""

from __future__ import annotations

import json
import types

import pytest
from helpers.engine_import import require

require("vllm", "0.33.", "DeepSeek-V4's expert_dtype readings")
tf = pytest.importorskip("transformers")

from safetensors import safe_open  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402
from vllm.models.deepseek_v4 import quant_config as Q  # noqa: E402
from vllm.models.deepseek_v4.cpu import model as CPU  # noqa: E402
from vllm.models.deepseek_v4.nvidia import model as NVIDIA  # noqa: E402

FORMATS = ["bf16", "fp8-block", "fp8", "fp8-channel", "nvfp4"]
WEIGHT_SCALES = ("weight_scale", "weight_scale_inv", "weight_scale_2")


def _export(fmt: str, folder) -> tuple[dict, list[str]]:
    """A tiny DeepSeek-V4 (its MTP layer included) from a config that says ``fp4`` exported in
    ``fmt``: (its config.json, its tensor names)."""
    from fp8_dummy.realistic.export import export

    cfg = config(128, 1024, 2, 4)
    cfg.expert_dtype = "fp4"  # a copy of DeepSeek-V4-Flash's
    cfg.save_pretrained(folder / "c")
    export(folder / "c", folder / "out", format=fmt, progress=False, allow_unknown=True)
    names = []
    for shard in sorted((folder / "out").glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            names += list(f.keys())
    return json.loads((folder / "out" / "config.json").read_text()), names


def _fp8_config(q: dict, hf_config, monkeypatch):
    """vLLM's DeepSeek-V4 FP8 config of ``q``, reading ``hf_config`` as a server's current
    VllmConfig holds it: the one lookup it makes (``get_current_vllm_config``, set by
    ``set_current_vllm_config`` while a server builds the model) answers with it."""
    current = types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf_config))
    monkeypatch.setattr(Q, "get_current_vllm_config", lambda: current)
    return Q.DeepseekV4FP8Config.from_config(q)


@pytest.mark.parametrize("fmt", FORMATS)
def test_vllm_builds_the_exported_experts(fmt, tmp_path, monkeypatch):
    exported, names = _export(fmt, tmp_path)
    assert exported["expert_dtype"] == "fp8"
    hf_config = tf.AutoConfig.from_pretrained(tmp_path / "out")
    assert hf_config.expert_dtype == "fp8"  # as vLLM's hf_config holds it
    q = exported.get("quantization_config")
    resolved = Q.DeepseekV4FP8Config.override_quantization_method(q, None, hf_config)
    assert resolved == ("deepseek_v4_fp8" if fmt == "fp8-block" else None), resolved
    if fmt == "fp8-block":
        quant = _fp8_config(q, hf_config, monkeypatch)
        assert quant.expert_dtype == "fp8" and not quant.is_scale_e8m0
        with safe_open(str(next((tmp_path / "out").glob("*.safetensors"))), "pt") as f:
            scales = [n for n in f.keys() if n.endswith(".weight_scale_inv")]
            assert scales and all(f.get_slice(n).get_dtype() == "F32" for n in scales)
        # the caller's "fp4" kept: MXFP4 experts, E8M0 linear scales
        flash = types.SimpleNamespace(expert_dtype="fp4", model_type="deepseek_v4")
        assert _fp8_config(q, flash, monkeypatch).is_scale_e8m0
    scales = [n for n in names if n.rpartition(".")[2] in WEIGHT_SCALES]
    assert bool(scales) == (fmt != "bf16")
    renamed = []
    for platform in (NVIDIA, CPU):
        mapper = platform._make_deepseek_v4_weights_mapper(exported["expert_dtype"])
        kept = 0
        for n in scales:
            mapped = mapper._map_name(n)
            if mapped is not None:  # None: an MTP tensor, which the main model's mapper drops
                assert mapped.rpartition(".")[2] == n.rpartition(".")[2], (platform, n, mapped)
                kept += 1
        assert kept or fmt == "bf16", (platform, "the main layers' scales")
        flash = platform._make_deepseek_v4_weights_mapper("fp4")
        renamed += [n for n in scales if (flash._map_name(n) or n).endswith("_inv")
                    and not n.endswith("_inv")]  # fmt: skip
    # under the caller's "fp4" the CPU class looks for weight_scale_inv where the format's
    # methods register weight_scale (compressed-tensors' FP8, ModelOpt's NVFP4)
    assert bool(renamed) == (fmt in ("fp8", "fp8-channel", "nvfp4")), renamed
