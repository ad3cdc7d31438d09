"""Realistic mode and the engines' whole-model fill check every tensor before writing any: a
model whose later tensor cannot be written (expanded or broadcast, an overlapping
as_strided view, made in inference mode) is refused with its full name, what is wrong and
what to do, and every byte of every tensor is as before (compared byte for byte)."""

from __future__ import annotations

import pytest
import torch

import fp8_dummy


def model_with(bad: str) -> torch.nn.Module:
    """Two decoder layers of plain tensors; the last layer's down_proj holds ``bad``."""
    model = torch.nn.Module()
    model.embed_tokens = torch.nn.Embedding(32, 16)
    model.layers = torch.nn.ModuleList()
    for _ in range(2):
        layer = torch.nn.Module()
        layer.input_layernorm = torch.nn.LayerNorm(16)
        layer.up_proj = torch.nn.Linear(16, 24, bias=False)
        layer.down_proj = torch.nn.Linear(24, 16, bias=False)
        model.layers.append(layer)
    last = model.layers[1].down_proj
    if bad == "expanded":
        last.weight = torch.nn.Parameter(torch.randn(1, 24).expand(16, 24), requires_grad=False)
    elif bad == "broadcast":
        last.weight = torch.nn.Parameter(torch.randn(24).broadcast_to(16, 24), requires_grad=False)
    elif bad == "as_strided":
        base = torch.randn(40)
        last.weight = torch.nn.Parameter(base.as_strided((16, 24), (1, 1)), requires_grad=False)
    elif bad == "inference":
        with torch.inference_mode():
            last.weight = torch.nn.Parameter(torch.randn(16, 24), requires_grad=False)
    return model


def snapshot(model: torch.nn.Module) -> list[bytes]:
    out = []
    for t in model.state_dict().values():
        with torch.inference_mode():  # an inference tensor's bytes can be read here
            out.append(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return out


BAD = ["expanded", "broadcast", "as_strided", "inference"]


@pytest.mark.parametrize("bad", BAD)
def test_realistic_mode_refuses_before_writing_anything(bad):
    model = model_with(bad)
    before = snapshot(model)
    with pytest.raises(RuntimeError) as e:
        fp8_dummy.initialize_realistic_dummy_weights(model, seed=3)
    message = str(e.value)
    assert "layers.1.down_proj.weight" in message, message
    what = "inference" if bad == "inference" else "share one memory location"
    assert what in message and ("clone()" in message or "inference_mode()" in message), message
    assert snapshot(model) == before


# an as_strided view too hard for torch's overlap test is written by torch's uniform_ too: the
# engines' fill, which gives an engine's bytes, writes it as the engine does
@pytest.mark.parametrize("bad", ["expanded", "broadcast", "inference"])
@pytest.mark.parametrize("semantics", ["vllm-0.33", "vllm-0.30", "sglang-0.5", "trtllm-1.2"])
@pytest.mark.parametrize("mode", ["generator", "stateless"])
def test_the_whole_model_fill_refuses_before_writing_anything(bad, semantics, mode):
    model = model_with(bad)
    before = snapshot(model)
    with pytest.raises(RuntimeError) as e:
        fp8_dummy.initialize_dummy_weights(model, semantics=semantics, mode=mode)
    assert "layers.1.down_proj.weight" in str(e.value), str(e.value)
    assert snapshot(model) == before


def test_inside_inference_mode_an_inference_model_is_filled():
    model = model_with("inference")
    with torch.inference_mode():
        fp8_dummy.initialize_realistic_dummy_weights(model, seed=3)
        fp8_dummy.initialize_dummy_weights(model)
    assert torch.isfinite(model.layers[1].down_proj.weight).all()


def test_a_late_tensor_the_checkpoint_cannot_place_is_refused_before_any_write():
    """A transformers model whose last decoder layer holds one non-contiguous parameter: its
    checkpoint tensors cannot be placed as views, refused before any tensor is written (the
    placement was checked tensor by tensor as they were written)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    last = model.model.layers[1].mlp.down_proj
    last.weight.data = last.weight.data.t().contiguous().t()  # the same shape, column-major
    before = snapshot(model)
    with pytest.raises(ValueError, match="layers.1.mlp.down_proj.weight: not contiguous"):
        fp8_dummy.initialize_realistic_dummy_weights(model, seed=3)
    assert snapshot(model) == before
