"""DeepSeek-V4's export carries its real checkpoint's names
(docs/realistic.md#deepseek-v4s-main-model): transformers' conversion for it is written
against names without the base model's ``model.`` prefix (``^hc_head_fn$`` for
``model.hc_head.hc_fn``, ``^embed\\.weight$``), so the export writes the base model's names
without it, as real checkpoints do and vLLM's DeepSeek-V4 name mapper reads them; attention's
``attn.kv_norm``, which the reverse of that conversion would rename ``attn.norm`` with the
compressors' norm, keeps its name. Checked through transformers' own class loading the export
(its load runs the conversion forward): every tensor lands, none is left over, and each loaded
tensor is, byte for byte, the in-place fill of the same logical checkpoint."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from safetensors import safe_open  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402

import fp8_dummy  # noqa: E402

HEAD = {"hc_head_fn", "hc_head_base", "hc_head_scale", "embed.weight", "head.weight", "norm.weight"}


def _files(out) -> dict[str, torch.Tensor]:
    tensors = {}
    for shard in sorted(out.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            tensors.update({n: f.get_tensor(n) for n in f.keys()})
    return tensors


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("hidden, layers, hc", [(128, 2, 4), (192, 3, 2)])
def test_deepseek_v4_export_names_are_the_checkpoints(hidden, layers, hc, tmp_path):
    cfg = config(hidden, 1024, layers, hc)
    out = H.export(cfg, tmp_path, None)
    files = _files(out)
    assert HEAD <= set(files), sorted(HEAD - set(files))
    assert not [n for n in files if n.startswith("model.")]
    # the main layers, and the MTP layer (the config's one), which transformers' class drops
    assert all(n.startswith(("layers.", "mtp.0.")) for n in set(files) - HEAD)
    assert "mtp.0.e_proj.weight" in files and "mtp.0.attn.kv_norm.weight" in files
    # attention's own kv_norm keeps its name; the compressors' norm is ``norm`` in the checkpoint
    assert {f"layers.{i}.attn.kv_norm.weight" for i in range(layers)} <= set(files)
    assert not [n for n in files if n.endswith(".attn.norm.weight")]

    dtype = files["embed.weight"].dtype  # the export's own (the config's)
    loaded, info = tf.AutoModelForCausalLM.from_pretrained(
        out, dtype=dtype, output_loading_info=True
    )
    # transformers' load places every exported tensor and fills every tensor of the model
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    filled = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    fp8_dummy.initialize_realistic_dummy_weights(filled, 0)
    ours = filled.state_dict()
    for name, t in loaded.state_dict().items():  # the hash router's table included
        # the class keeps some in float32 when it loads (the sinks), built narrower in place:
        # the narrower values widened, exactly
        mine = ours[name].to(t.dtype)
        assert torch.equal(mine.to(ours[name].dtype), ours[name]), name
        assert torch.equal(_bytes(t), _bytes(mine)), name
    head = loaded.model.hc_head
    for part in ("fn", "base", "scale"):
        mine = getattr(head, f"hc_{part}")  # kept in float32: the file's values widened
        assert torch.equal(_bytes(mine), _bytes(files[f"hc_head_{part}"].to(mine.dtype)))
