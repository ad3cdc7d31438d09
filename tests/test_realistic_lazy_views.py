"""The stand-ins that map a model's in-memory tensors to checkpoint names
(fp8_dummy/realistic/lazy_tensor.py): a conversion that reshapes a block no strided view can
hold (a permutation of rows, as transformers' RoPE permutation of Step-3.7's vision q/k is)
is no view: a clear refusal (``NotAffineError``, the model's ``UnplacedTensorError``, the
export's one line and exit status 2, nothing written), never a traceback from inside torch."""

from __future__ import annotations

import pytest
import torch

from fp8_dummy.realistic.lazy_tensor import NotAffineError, view_map


def _rope_permuted(tensors: dict) -> dict:
    """transformers' ``PermuteForRope`` on a [dim0] bias: heads x (2, half) read as (half, 2)."""
    (t,) = tensors.values()
    return {"b": t.view(2, 2, 3).transpose(1, 2).reshape(12)}


def test_a_reshape_no_view_can_make_is_refused_as_no_view():
    with pytest.raises(NotAffineError):
        view_map(_rope_permuted, {"bias": torch.empty(12, device="meta")})


def test_a_view_of_a_view_is_still_placed():
    """The same shapes without the permutation: the checkpoint tensor is the whole source."""
    block = view_map(lambda d: {"b": d["bias"].view(2, 2, 3).reshape(12)},
                     {"bias": torch.empty(12, device="meta")})["b"]  # fmt: skip
    assert (block.source, block.shape, block.offset, block.strides) == ("bias", (12,), 0, (1,))


def test_step3p7_is_refused_before_anything_is_written(tmp_path, capsys):
    tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
    from fp8_dummy.realistic.export import main

    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=16,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                share_expert_dim=32)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    tf.AutoConfig.for_model("step3p7", text_config=text, vision_config=vision).save_pretrained(
        tmp_path / "c"
    )
    assert main([str(tmp_path / "c"), str(tmp_path / "out"), "--quiet"]) == 2
    assert "not views of its tensors" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
