"""The stand-ins that map a model's in-memory tensors to checkpoint names
(fp8_dummy/realistic/lazy_tensor.py): a conversion that reshapes a block no strided view can
hold (a permutation of rows, as transformers' RoPE permutation of Step-3.7's vision q/k is)
is no view: the stand-ins refuse it clearly (``NotAffineError``), never with a traceback
from inside torch; a model's such tensors are then placed by parts
(fp8_dummy/realistic/gathered.py, tests/test_realistic_gathered.py)."""

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


# (model type, its transformers auto class, its config's fields, the embedding's checkpoint
# name, a fused checkpoint tensor and its in-memory parts, the first one permuted or not)
_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=16,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=256)  # fmt: skip
_VISION = "model.vision_model.layers.0.self_attn."
_HRM = "model.L_module.layers.0."
_GATHERED = {
    # Step-3.7's vision tower: q/k rows permuted for RoPE, then q, k, v concatenated
    "step3p7": (
        "AutoModelForImageTextToText",
        dict(text_config=dict(_TEXT, n_routed_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, share_expert_dim=32, sliding_window=8),
             vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=2)),
        "model.embed_tokens.weight",
        "vision_model.transformer.resblocks.0.attn.in_proj_weight",
        [f"{_VISION}{p}_proj.weight" for p in "qkv"],
        True,
    ),
    # HRM: gate, q, k, v concatenated (no permutation)
    "hrm_text": (
        "AutoModelForCausalLM", _TEXT, "model.embed_tokens.weight",
        f"{_HRM}attn.gqkv_proj.weight",
        [f"{_HRM}self_attn.{p}_proj.weight" for p in ("gate", "q", "k", "v")], False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(_GATHERED))
def test_a_gathered_export_loads_as_the_logical_models_in_memory_tensors(tmp_path, model_type):
    """Checkpoint tensors transformers' save conversion makes by moving elements (no view:
    parts, fp8_dummy/realistic/gathered.py): the export is made, and transformers' own load
    of it (its conversion undoing the permutation, splitting the concatenation) holds, byte
    for byte, the tensors the in-memory fill of the logical model writes."""
    tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
    from safetensors.torch import load_file

    import fp8_dummy
    from fp8_dummy.realistic.export import main

    auto, fields, embed, fused, parts, permuted = _GATHERED[model_type]
    auto = getattr(tf, auto)
    config = tf.AutoConfig.for_model(model_type, **fields)
    config.save_pretrained(tmp_path / "c")
    # tensors no role covers (Step-3.7's vision layer scales ``ls_1.gamma``, HRM's initial
    # states ``z_L_init``): assumed, as --allow-unknown says
    assert main([str(tmp_path / "c"), str(tmp_path / "out"), "--quiet", "--allow-unknown"]) == 0
    files = {}
    for f in sorted((tmp_path / "out").glob("*.safetensors")):
        files.update(load_file(f))
    dtype = files[embed].dtype  # the export's own
    loaded, info = auto.from_pretrained(tmp_path / "out", dtype=dtype, output_loading_info=True)
    assert not any(info.values()), info
    filled = auto.from_config(config, dtype=dtype)
    fp8_dummy.initialize_realistic_dummy_weights(filled, 0)
    ours, got = filled.state_dict(), loaded.state_dict()
    assert set(got) == set(ours)
    for name, t in got.items():
        assert t.dtype == ours[name].dtype, name
        assert torch.equal(t.view(torch.uint8), ours[name].view(torch.uint8)), name
    # the file's fused tensor is the parts in turn, the last one as it is, the first one's
    # rows permuted (Step-3.7's q) or not (HRM's gate)
    rows = [got[p] for p in parts]
    assert torch.equal(files[fused][-rows[-1].shape[0] :], rows[-1])
    assert torch.equal(files[fused][: rows[0].shape[0]], rows[0]) is not permuted
    assert torch.equal(files[fused], torch.cat(rows)) is not permuted


# The view ops a conversion or a loader takes have their layouts computed directly
# (fp8_dummy/realistic/lazy_views.py); the general path runs the op on the stand-in's meta proxy.
# Both must give the same block (or the same error) for every op and argument, odd ones too.
def _outcome(make):
    """The blocks a view makes, or the type of the error it raises."""
    try:
        out = make()
    except Exception as e:  # noqa: BLE001 (the error is the outcome compared)
        return type(e).__name__
    views = out if isinstance(out, (list, tuple)) else [out]
    return [(type(v).__name__, tuple(v.shape), v.block() if hasattr(v, "block") else None)
            for v in views]  # fmt: skip


def _random_view(rng, t):
    """A random view op with random (sometimes out-of-range) arguments, as a call."""
    n = t.dim()
    dim = rng.randint(-n - 1, n) if rng.random() < 0.1 else rng.randint(-n, max(n - 1, -n))
    size = t.shape[dim] if -n <= dim < n else 1
    index = rng.randint(-size - 1, size)
    start, end = rng.choice([None, rng.randint(-7, 7)]), rng.choice([None, rng.randint(-7, 9)])
    dims = rng.sample(range(-n, n), rng.randint(0, n)) if n else []
    if dims and rng.random() < 0.1:
        dims.append(dims[0])  # a repeated dim: torch refuses it
    return rng.choice([
        lambda: t.squeeze(),
        lambda: t.squeeze(dim),
        lambda: t.squeeze(dims),
        lambda: t.select(dim, index),
        lambda: t.split(rng.randint(0, 4), dim),
        lambda: t.chunk(rng.randint(1, 5), dim),
        lambda: t.unbind(dim),
        lambda: t[(slice(None),) * (dim % max(n, 1)) + (slice(start, end, rng.randint(1, 3)),)],
        lambda: t.narrow(dim, max(index, 0), 1),
        lambda: t.transpose(dim, rng.randint(-n, max(n - 1, 0))),
        lambda: t.t(),
        lambda: t.unsqueeze(0).squeeze(0),
    ])  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_the_direct_view_layouts_are_the_general_paths(seed, monkeypatch):
    import random

    from fp8_dummy.realistic import lazy_tensor

    rng = random.Random(seed)
    views = dict(lazy_tensor.VIEWS)
    checked = 0
    for _ in range(300):
        shape = tuple(rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(rng.randint(0, 4)))
        start = lazy_tensor.LazyTensor.of("w", shape, torch.float32, None)
        if shape and rng.random() < 0.5:  # a block with its own strides and offset
            start = start.transpose(0, -1)[1:] if shape[-1] > 1 else start.unsqueeze(1)
        seeds = [rng.random() for _ in range(3)]
        outcomes = []
        for table in (views, {}):
            monkeypatch.setattr(lazy_tensor, "VIEWS", table)
            rng2 = random.Random(seeds[0])
            outcomes.append(_outcome(_random_view(rng2, start)))
            monkeypatch.setattr(lazy_tensor, "VIEWS", views)
        assert outcomes[0] == outcomes[1], (shape, start.block())
        checked += isinstance(outcomes[0], list)
    assert checked > 150  # most calls are views, not errors


def test_a_conversions_blocks_are_the_general_paths(monkeypatch):
    """transformers' conversion of a per-expert MoE (chunks of the fused experts, squeezed):
    the same blocks with the direct layouts as with the meta ops."""
    pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
    import transformers

    from fp8_dummy.realistic import hf_model, lazy_tensor

    config = transformers.AutoConfig.for_model(
        "qwen3_moe", hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        vocab_size=64, num_experts=5, num_experts_per_tok=2,
    )  # fmt: skip
    model = hf_model.build_model(config)
    fast = hf_model.memory_blocks(model)
    monkeypatch.setattr(lazy_tensor, "VIEWS", {})
    general = hf_model.memory_blocks(model)
    assert len(fast) > 2 * 5 * 3 and fast == general


def test_checkpoint_state_has_no_view_of_a_tensor_made_of_parts():
    """Step-3.7's fused vision qkv is no view of one in-memory tensor: ``checkpoint_state``
    (views, no copy) says so by name rather than give a copy."""
    tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
    from fp8_dummy.realistic import checkpoint_state
    from fp8_dummy.realistic.hf_model import UnplacedTensorError, build_model

    _, fields, *_ = _GATHERED["step3p7"]
    model = build_model(tf.AutoConfig.for_model("step3p7", **fields))
    with pytest.raises(UnplacedTensorError, match=r"in_proj_\w+: made of parts"):
        checkpoint_state(model)
