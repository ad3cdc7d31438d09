"""vLLM releases we have not matched, as stand-ins (tests/helpers/fake_vllm.py): the plugin
never breaks vLLM's import or load, whatever the layout of its loader, and a release whose
semantics changed gets exactly its own bytes (the proof probes vLLM's own function as its
loader calls it, and the loader's walk as one plan against its own loop: docs/engines.md).
Also: every plugin callback is guarded, and the log line says what happens."""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import storage_bytes
from helpers import fake_vllm
from helpers.engine_models import assert_same_bytes, spy_calls, spy_fused
from test_engines_vllm_plugin import _loader, _model, _plain_model

from fp8_dummy.engines import core
from fp8_dummy.engines import vllm as fvllm


def _load(version, *, plugin: bool, fmt="dummy", make=_model):
    from vllm import plugins

    m = make("cpu", version)
    if plugin:
        plugins.load_general_plugins()
    _loader(fmt).load_weights(m, None)
    return m


def test_lazy_package_and_renamed_function_keep_vllm_working(tmp_path, monkeypatch):
    variant = dict(lazy=True, single="initialize_dummy_weight")
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.34.0", **variant):
        without = _load("0.34.0", plugin=False)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.34.0", **variant):
        from vllm import plugins

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no failing callback
            plugins.load_general_plugins()
            import vllm.model_executor.model_loader.dummy_loader as dl  # must not raise

        assert not hasattr(dl, "initialize_single_dummy_weight")
        assert not getattr(dl, "_fp8_dummy_patched", False)
        with_plugin = _model("cpu", "0.34.0")
        _loader().load_weights(with_plugin, None)  # vLLM's own code fills it
        from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER

        assert "fp8_dummy" not in _LOAD_FORMAT_TO_MODEL_LOADER  # nothing to prove it against
    assert assert_same_bytes(with_plugin, without) > 60


def test_lazy_package_is_patched_when_its_loader_is_imported(tmp_path, monkeypatch):
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.34.0", lazy=True):
        without = _load("0.34.0", plugin=False)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.34.0", lazy=True):
        fused = spy_fused(monkeypatch)
        with_plugin = _load("0.34.0", plugin=True)
        import vllm.model_executor.model_loader.dummy_loader as dl

        assert dl.initialize_single_dummy_weight is fvllm._single
        assert fused, "a proven release goes through fp8_dummy"
        batched = _load("0.34.0", plugin=True, fmt="fp8_dummy")
    assert assert_same_bytes(with_plugin, without) > 60
    assert_same_bytes(batched, without)


def test_changed_default_bounds_give_vllms_own_bytes(tmp_path, monkeypatch):
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.34.0", fp8_range=0.5):
        without = _load("0.34.0", plugin=False)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.34.0", fp8_range=0.5):
        with pytest.warns(RuntimeWarning) as caught:
            with_plugin = _load("0.34.0", plugin=True)
            batched = _load("0.34.0", plugin=True, fmt="fp8_dummy")
    refusals = [str(w.message) for w in caught if "self-check refused" in str(w.message)]
    # one warning per refused kind of tensor (name, dtype), each naming the version, none twice
    assert refusals and all("vLLM 0.34.0" in r and "float8" in r for r in refusals), refusals
    assert len(refusals) == len(set(refusals))
    assert assert_same_bytes(with_plugin, without) > 60
    assert_same_bytes(batched, without)


def test_a_loop_that_fills_other_tensors_is_refused_by_the_walks_probe(tmp_path, monkeypatch):
    """A release whose loop also fills non-persistent buffers: the names of its method are
    those we read, its probe shows the difference, and its own loop fills the model."""
    later = dict(loop="every buffer")
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.34.0", **later):
        without = _load("0.34.0", plugin=False, make=_plain_model)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.34.0", **later):
        per_tensor, _ = spy_calls(monkeypatch)
        with pytest.warns(RuntimeWarning) as caught:
            with_plugin = _load("0.34.0", plugin=True, make=_plain_model)
    refusals = [str(w.message) for w in caught if "self-check refused" in str(w.message)]
    assert len(refusals) == 1 and "vLLM 0.34.0 DummyModelLoader.load_weights" in refusals[0]
    assert "call 2: vLLM's loop made (<torch.float32 (3,)>, name='cache')" in refusals[0]
    assert per_tensor  # its loop, our per-tensor function
    assert assert_same_bytes(with_plugin, without) > 60


def test_a_loop_with_a_new_step_is_left_to_vllm(tmp_path, monkeypatch):
    later = dict(loop="a new step")
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.34.0", **later):
        without = _load("0.34.0", plugin=False, make=_plain_model)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.34.0", **later):
        per_tensor, _ = spy_calls(monkeypatch)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with_plugin = _load("0.34.0", plugin=True, make=_plain_model)
        import vllm.model_executor.model_loader.dummy_loader as dl

        assert dl.DummyModelLoader.load_weights is not fvllm._load_weights
        assert per_tensor
    assert assert_same_bytes(with_plugin, without) > 60


def test_a_model_the_plan_refuses_gets_vllms_error_after_vllms_writes(tmp_path, monkeypatch):
    """vLLM 0.30 raises on packed FP4 after filling the tensors before it; the plan refuses
    before writing anything, and vLLM's own loop then does as it does."""

    def fp4_model(device, version):
        m = _plain_model(device, version)
        fp4 = torch.empty(16, 16, dtype=torch.float4_e2m1fn_x2)
        storage_bytes(fp4).fill_(0x55)
        m.layers[0].mx_e8m0.weight = torch.nn.Parameter(fp4, requires_grad=False)
        return m

    models = []
    for where, plugin in (("a", False), ("b", True)):
        with fake_vllm.installed(tmp_path / where, monkeypatch, "0.30.0"):
            from vllm import plugins

            monkeypatch.setattr(core.plugins, "_warned", set())
            models.append(fp4_model("cpu", "0.30.0"))
            if plugin:
                plugins.load_general_plugins()
            with pytest.raises(NotImplementedError, match="not implemented for 'Float4"):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    _loader().load_weights(models[-1], None)
    assert [str(w.message) for w in caught if "whole-model dummy load failed" in str(w.message)]
    assert assert_same_bytes(*models) > 60


def test_a_failing_whole_model_fill_falls_back_to_vllm(tmp_path, monkeypatch):
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.33.0"):
        without = _load("0.33.0", plugin=False, make=_plain_model)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.33.0"):
        monkeypatch.setattr(core.plugins, "_warned", set())
        monkeypatch.setattr(fvllm.loader, "fill", lambda *a, **k: 1 / 0)
        with pytest.warns(RuntimeWarning, match="whole-model dummy load failed .*ZeroDivision"):
            with_plugin = _load("0.33.0", plugin=True, make=_plain_model)
    assert assert_same_bytes(with_plugin, without) > 60


def test_a_failing_callback_leaves_vllm_alone(tmp_path, monkeypatch):
    def broken(module):
        raise KeyError("surprise")

    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.33.0"):
        without = _load("0.33.0", plugin=False)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.33.0"):
        monkeypatch.setattr(fvllm, "_patch", broken)
        monkeypatch.setattr(core.plugins, "_warned", set())
        with pytest.warns(RuntimeWarning, match="patch of the dummy loader failed .*surprise"):
            with_plugin = _load("0.33.0", plugin=True)
    assert_same_bytes(with_plugin, without)


def test_a_failing_fill_falls_back_to_vllm(tmp_path, monkeypatch):
    with fake_vllm.installed(tmp_path / "a", monkeypatch, "0.33.0"):
        without = _load("0.33.0", plugin=False)
    with fake_vllm.installed(tmp_path / "b", monkeypatch, "0.33.0"):
        monkeypatch.setattr(core.plugins, "_warned", set())
        monkeypatch.setattr(fvllm, "fill_single", lambda *a, **k: 1 / 0)
        with pytest.warns(RuntimeWarning, match="per-tensor fill failed .*ZeroDivisionError"):
            with_plugin = _load("0.33.0", plugin=True)
    assert_same_bytes(with_plugin, without)


def test_the_log_line_says_what_happens(monkeypatch):
    assert "through fp8_dummy" in fvllm.what_happens()
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(core.checks, "cuda_kernels", lambda: False)
    line = fvllm.what_happens()
    assert "CUDA kernels not built" in line and "CUDA dummy weights left to vLLM" in line
