"""The quick way to place a checkpoint conversion's results (fp8_dummy/realistic/meta_views.py:
the conversion run on plain meta tensors) against the stand-ins' (lazy_tensor.view_map, the
oracle): the same blocks, in the same order, for random chains of views and for transformers'
own conversion of every causal-LM architecture it ships that builds small; None (the stand-ins
then answer) for a copy, a value made, another kind of result, an error."""

from __future__ import annotations

import random

import pytest
import torch

from fp8_dummy.realistic.lazy_tensor import NotAffineError, view_map
from fp8_dummy.realistic.meta_views import meta_view_map


def _oracle(convert, tensors):
    try:
        return view_map(convert, tensors)
    except NotAffineError:
        return "refused"


def _chain(rng: random.Random):
    """A conversion of random views (and a contiguous() between them) of one tensor."""
    steps = [rng.randrange(6) for _ in range(rng.randint(1, 4))]

    def convert(tensors):
        (t,) = tensors.values()
        out = {}
        for i, step in enumerate(steps):
            n = t.dim()
            d = rng.randrange(n) if n else 0
            if step == 0 and n:
                t = t.transpose(d, rng.randrange(n))
            elif step == 1 and n and t.shape[d] > 1:
                parts = torch.chunk(t, rng.randint(2, 3), dim=d)
                out.update({f"part{i}.{j}": p.squeeze() for j, p in enumerate(parts)})
                t = parts[-1]
            elif step == 2 and n:
                t = t.narrow(d, 0, max(t.shape[d] - 1, 1)) if t.shape[d] else t
            elif step == 3:
                t = t.contiguous()
            elif step == 4 and n:
                t = t.unsqueeze(d).squeeze(d)
            else:
                t = t[..., ::2] if n and t.shape[-1] > 2 else t
        out["last"] = t
        return out

    return convert


@pytest.mark.parametrize("seed", range(4))
def test_random_views_are_placed_as_the_stand_ins_place_them(seed):
    rng = random.Random(seed)
    placed = 0
    for _ in range(60):
        shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 4)))
        tensors = {"w": torch.empty(shape, device="meta")}
        state = rng.random()
        quick = meta_view_map(_chain(random.Random(state)), tensors)
        oracle = _oracle(_chain(random.Random(state)), tensors)
        assert quick is not None, shape
        assert quick == oracle and list(quick) == list(oracle), shape
        placed += sum(b.offset != 0 or b.shape != shape for b in quick.values())
    assert placed > 60  # most chains place blocks other than the whole tensor


def test_what_it_cannot_place_is_none():
    """A copy the stand-ins follow (clone: the same block), a value made (cat), a result of
    another kind, an error: None, and the stand-ins answer (a block, a refusal, an error)."""
    tensors = {"a": torch.empty(4, 6, device="meta"), "b": torch.empty(6, device="meta")}
    cases = {
        "clone": lambda d: {"x": d["a"][1:].clone()},
        "cat": lambda d: {"x": torch.cat([d["a"][0], d["b"]])},
        "a number": lambda d: {"x": 3},
        "an error": lambda d: {"x": d["a"].view(5, 5)},
    }
    for what, convert in cases.items():
        assert meta_view_map(convert, tensors) is None, what
    assert view_map(cases["clone"], tensors)["x"].offset == 6  # the stand-ins' own answers
    with pytest.raises(NotAffineError):
        view_map(cases["cat"], tensors)


# A few architectures' conversions in the fast tier: per-expert MoEs (chunks and squeezes of
# the fused experts), a plain model (renamings only), GPT-OSS (experts kept fused)
FAST = ["qwen3_moe", "mixtral", "deepseek_v3", "llama", "gpt_oss", "gemma"]


def _check(mt: str) -> None:
    pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
    from helpers import realistic_sweep as sweep
    from transformers.core_model_loading import revert_weight_conversion

    from fp8_dummy.realistic import hf_model

    try:
        model = hf_model.build_model(sweep.small_config(mt, 2))
    except Exception as e:  # noqa: BLE001 (a config that cannot be made small: nothing to compare)
        pytest.skip(f"{type(e).__name__}: {str(e)[:80]}")
    own = hf_model.own_tensors(model)

    def convert(d):
        return revert_weight_conversion(model, d)

    quick, oracle = meta_view_map(convert, own), _oracle(convert, own)
    if mt in FAST:
        assert quick is not None
    if quick is not None:
        assert quick == oracle and list(quick) == list(oracle)


@pytest.mark.parametrize("mt", FAST)
def test_a_conversions_blocks_are_the_stand_ins(mt: str):
    _check(mt)


def _types() -> list[str]:
    try:
        from helpers import realistic_sweep as sweep

        return list(sweep.causal_lm_types())
    except ImportError:  # no transformers: the test skips itself
        return []


@pytest.mark.slow
@pytest.mark.parametrize("mt", _types())
def test_every_architectures_conversion_is_placed_as_the_stand_ins_place_it(mt: str):
    _check(mt)
