"""The weights iterator the engines' loaders are fed (``LogicalModel.items``) and the logical
checkpoint kept per (config, seed, routing, acceptance) in a process (``realistic/kept.py``):
small tensors handed over whole, large ones as stand-ins, every byte the stand-in's writer
makes through an engine-style copy (poisoned destinations), in the checkpoint's order."""

from __future__ import annotations

import sys
import weakref
from pathlib import Path

import pytest
import torch

tf = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_realistic_routing import configs  # noqa: E402

from fp8_dummy.realistic import LazyTensor, config_checkpoint, kept, logical  # noqa: E402


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape or (1,)).view(torch.uint8)


def _copied(t: torch.Tensor, byte: int) -> torch.Tensor:
    """What a loader's ``param.copy_(loaded)`` leaves in a destination poisoned with ``byte``."""
    dst = torch.empty(t.shape, dtype=t.dtype)
    _bytes(dst).fill_(byte)
    dst.copy_(t)
    return dst


@pytest.fixture
def cfg():
    c = configs(h=64, experts=8, k=2, layers=2)["qwen3_moe"]
    c.quantization_config = {"quant_method": "fp8", "weight_block_size": [16, 16]}
    return c


@pytest.mark.parametrize("limit", [0, 1024, 1 << 30])
def test_the_iterator_is_the_stand_ins_bytes_in_the_checkpoints_order(cfg, limit, monkeypatch):
    """Whatever is whole and whatever is a stand-in, each tensor a loader copies is the bytes
    the stand-in writes; batches (of 3 here) keep the order; sizes above the limit stay lazy."""
    monkeypatch.setattr(logical, "EAGER_BATCH", 3)
    lm = config_checkpoint(cfg, 7, routing="zipf:1.2")
    got = list(lm.items(eager_bytes=limit))
    assert [n for n, _ in got] == list(lm.tensors)
    lazy = {n for n, t in got if isinstance(t, LazyTensor)}
    assert lazy == {n for n, t in lm.tensors.items() if t.nbytes > limit}
    if limit == 1024:
        assert 0 < len(lazy) < len(got)
    for name, t in got:
        oracle = _copied(lm.lazy(name), 0xAA)
        assert torch.equal(_bytes(_copied(t, 0x55)), _bytes(oracle)), name
    kept.forget()  # a kept checkpoint, used for loads, still writes what a fresh one does
    fresh = config_checkpoint(cfg, 7, routing="zipf:1.2")
    assert fresh is not lm
    for (name, t), (again, u) in zip(lm.items(eager_bytes=limit), fresh.items(eager_bytes=0)):
        assert name == again and torch.equal(_bytes(_copied(t, 0x55)), _bytes(_copied(u, 0xAA)))


def test_a_checkpoint_is_made_once_per_config_seed_and_routing(cfg):
    kept.forget()
    first = config_checkpoint(cfg, 0)
    assert config_checkpoint(cfg, 0) is first
    wrapped = config_checkpoint(cfg, -1)
    assert config_checkpoint(cfg, (1 << 64) - 1) is wrapped  # the seed as the model reads it
    assert config_checkpoint(cfg, 1) is not first
    assert config_checkpoint(cfg, 0, routing="zipf:1.2") is not first
    other = configs(h=64, experts=8, k=2, layers=2)["qwen3_moe"]
    other.quantization_config = dict(cfg.quantization_config)
    assert config_checkpoint(other, 0) is first  # equal configs, whatever the object
    other.rms_norm_eps = 1e-5
    assert config_checkpoint(other, 0) is not first  # any field the config has
    with pytest.raises((TypeError, ValueError)):
        config_checkpoint(cfg, 0.5)  # refused as before, kept or not


def test_the_kept_checkpoints_are_bounded(cfg):
    kept.forget()
    made = [config_checkpoint(cfg, s) for s in range(kept.KEPT + 1)]
    assert config_checkpoint(cfg, kept.KEPT) is made[-1]
    assert config_checkpoint(cfg, 0) is not made[0]  # the oldest was dropped


def test_the_iterator_holds_one_batch_at_most(cfg, monkeypatch):
    """The whole tensors are made a batch at a time: a loader that drops each tensor after its
    copy never has more than EAGER_BATCH of them alive (no model-sized scratch)."""
    monkeypatch.setattr(logical, "EAGER_BATCH", 4)
    lm = config_checkpoint(cfg, 3)
    alive, most, seen = [], 0, 0
    for _, t in lm.items(eager_bytes=1 << 30):
        alive.append(weakref.ref(t))
        del t
        most = max(most, sum(r() is not None for r in alive))
        seen += 1
    assert seen == len(lm.tensors) > 8 and 1 <= most <= 4


@pytest.mark.parametrize("enabled", [True, False])
def test_a_checkpoint_is_made_with_the_cycle_collector_paused(cfg, monkeypatch, enabled):
    """The model's build and its logical checkpoint (a few objects per tensor, none in a
    cycle) run without full collections of the engine's heap; afterwards the collector is on
    or off as it was, also where the making raises."""
    import gc

    seen = []
    real = logical.model_specs

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(logical, "model_specs", spy)
    kept.forget()
    (gc.enable if enabled else gc.disable)()
    try:
        config_checkpoint(cfg, 11)
        assert gc.isenabled() == enabled and seen and not any(seen)
        with pytest.raises(ValueError):
            config_checkpoint(cfg, 11, routing="no such profile")
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
