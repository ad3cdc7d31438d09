"""The vLLM plugin's mechanics without vLLM (tests/helpers/fake_vllm.py stands in for it,
its per-tensor function being the oracle of vLLM's): entry-point loading, the patch when
vLLM imports its loader (before or after the plugin runs), the same bytes through
``--load-format dummy`` (the whole model as one plan, or vLLM's loop where a layer is
quantized online) and ``fp8_dummy``, the switch, the self-check. On the CPU and on CUDA
(scripts/gpu_check.sh runs it on a GPU, where no vLLM is installed)."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
from conftest import storage_bytes
from helpers import fake_vllm
from helpers.engine_models import (
    EngineModel,
    all_tensors,
    assert_same_bytes,
    spy_calls,
    spy_fused,
)

import fp8_dummy
from fp8_dummy.engines import vllm as fvllm

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
    ),
]


_vllm_modules = fake_vllm._vllm_modules


@pytest.fixture(params=["0.33.0", "0.30.0", "0.28.0"])
def fake(request, tmp_path, monkeypatch):
    """The stand-in vLLM of that version, installed for the test (helpers/fake_vllm.py)."""
    with fake_vllm.installed(tmp_path, monkeypatch, request.param) as version:
        yield version


def _loader(fmt="dummy"):
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    return get_model_loader(LoadConfig(load_format=fmt))


def _model(device, version):
    m = EngineModel(device, fp4=version >= "0.33", meta=True, dummy_values=version >= "0.30")
    m.layers[1].q_proj.online_quant = True  # vLLM's online-quantization path
    scratch = torch.empty(3, device=device)
    storage_bytes(scratch).fill_(0x55)
    m.layers[1].q_proj.register_buffer("scratch", scratch, persistent=False)
    return m


def _plain_model(device, version):
    """:func:`_model` with no layer quantized online: vLLM's loop is all there is."""
    m = _model(device, version)
    m.layers[1].q_proj.online_quant = False
    return m


@pytest.mark.parametrize("online", [True, False], ids=["quantized online", "one plan"])
@pytest.mark.parametrize("device", DEVICES)
def test_dummy_loader_through_the_plugin_same_bytes(fake, device, online, monkeypatch):
    """With a layer quantized online, vLLM's own loop (its processing reads the values, in
    the loop's order) calling our per-tensor function; without, the whole model as one plan
    (from 0.30: 0.28's loop calls its whole-model function per layer). At a first load and
    at one with the plan kept from it."""
    from vllm import plugins
    from vllm.model_executor.model_loader import dummy_loader

    make = _model if online else _plain_model
    without, with_plugin = make(device, fake), make(device, fake)
    _loader().load_weights(without, None)
    plugins.load_general_plugins()
    assert dummy_loader.initialize_single_dummy_weight is fvllm._single
    whole = fvllm.generation() >= 30
    assert (dummy_loader.DummyModelLoader.load_weights is fvllm._load_weights) is whole
    fused = spy_fused(monkeypatch)
    per_tensor, batches = spy_calls(monkeypatch)
    for _ in range(2):
        for t in all_tensors(with_plugin).values():
            if t.device.type != "meta":
                storage_bytes(t).fill_(0x55)
        _loader().load_weights(with_plugin, None)
        assert assert_same_bytes(with_plugin, without) > 60
    assert fused, "nothing went through fp8_dummy"
    if whole:  # (a proof's probe fills one tensor)
        assert bool(per_tensor) is online and (max(batches) > 1) is not online
        walk = [e for e in fp8_dummy.self_check_report() if "load_weights: the walk" in e.key]
        assert [e.proven for e in walk] == [True], walk


@pytest.mark.parametrize("device", DEVICES)
def test_load_format_fp8_dummy_same_bytes(fake, device):
    from vllm import plugins

    dummy, batched = _model(device, fake), _model(device, fake)
    _loader().load_weights(dummy, None)
    plugins.load_general_plugins()
    loader = _loader("fp8_dummy")
    assert type(loader).__name__ == "FP8DummyModelLoader"
    loader.load_weights(batched, None)
    assert_same_bytes(batched, dummy)


def test_patch_waits_for_vllm_to_import_its_loader(fake):
    import vllm  # noqa: F401  (the package only, as when vLLM loads plugins early)

    fvllm.register()
    assert "vllm.model_executor.model_loader" not in sys.modules  # not imported by us
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER, dummy_loader

    assert dummy_loader.initialize_single_dummy_weight is fvllm._single
    assert "fp8_dummy" in _LOAD_FORMAT_TO_MODEL_LOADER
    if fvllm.generation() < 30:
        assert dummy_loader.initialize_dummy_weights is fvllm._model


def test_layout_formats_refused_with_one_line_where_the_loader_lacks_their_needs(fake, caplog):
    """This stand-in's dummy loader has no materialize_layer (vLLM 0.28-0.33 have): neither
    fp8_dummy_invariant nor fp8_dummy_realistic is registered, and one line says so."""
    from vllm import plugins

    with caplog.at_level(logging.INFO, logger=fvllm.logger.name):
        plugins.load_general_plugins()
        from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER
    assert "fp8_dummy" in _LOAD_FORMAT_TO_MODEL_LOADER
    assert {"fp8_dummy_invariant", "fp8_dummy_realistic"}.isdisjoint(_LOAD_FORMAT_TO_MODEL_LOADER)
    formats = "--load-format fp8_dummy_invariant and fp8_dummy_realistic"
    lines = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert lines == [f"fp8_dummy: vLLM {fake}: its dummy loader lacks what {formats} need"]


def test_switched_off(fake, monkeypatch):
    from vllm import plugins
    from vllm.model_executor.model_loader import dummy_loader

    monkeypatch.setenv(fvllm.ENV, "false")
    plugins.load_general_plugins()
    assert dummy_loader.initialize_single_dummy_weight is not fvllm._single


def test_not_for_older_vllm(tmp_path, monkeypatch):
    saved = _vllm_modules()
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(fake_vllm.write(tmp_path, "0.27.1")))
    try:
        import vllm.model_executor.model_loader.dummy_loader as dl

        fvllm.register()
        assert dl.initialize_single_dummy_weight is not fvllm._single
    finally:
        for k in _vllm_modules():
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1
def test_self_check_failure_falls_back_to_vllm(fake, monkeypatch):
    from vllm import plugins
    from vllm.model_executor.model_loader import dummy_loader, weight_utils

    if fvllm.generation() < 30:
        pytest.skip("checked through the 0.30 and 0.33 layouts")

    real = weight_utils.vllm_single

    def odd(t, low, high, seed, name, generation):  # a vLLM whose bf16 bytes differ
        real(t, low, high, seed, name, generation=generation)
        if t.dtype == torch.bfloat16 and t.is_floating_point():
            t.view(torch.uint8).bitwise_xor_(1)

    monkeypatch.setattr(weight_utils, "vllm_single", odd)
    without, with_plugin = _model("cpu", fake), _model("cpu", fake)
    _loader().load_weights(without, None)
    plugins.load_general_plugins()
    assert dummy_loader.initialize_single_dummy_weight is fvllm._single
    with pytest.warns(RuntimeWarning, match=r"self-check refused vllm: vLLM .* cpu torch.bfloat16"):
        _loader().load_weights(with_plugin, None)
    assert_same_bytes(with_plugin, without)


def test_unknown_keyword_of_a_later_vllm_goes_to_vllm(fake):
    from vllm import plugins
    from vllm.model_executor.model_loader import dummy_loader

    plugins.load_general_plugins()
    seen = []
    fvllm.originals["single"] = lambda *a, **kw: seen.append(kw)
    dummy_loader.initialize_single_dummy_weight(torch.empty(3), name="w", new_option=1)
    assert seen == [{"name": "w", "new_option": 1}]
