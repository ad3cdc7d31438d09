"""fp8_dummy against the installed vLLM's own code, byte for byte, on the CPU: its
``initialize_single_dummy_weight``, its ``DummyModelLoader.load_weights`` with and without
the plugin (loaded the way vLLM loads plugins), the ``fp8_dummy`` load format, and (vLLM
<= 0.30) ``initialize_dummy_weights``. One module for every version: the expectations
follow ``vllm.__version__``. scripts/ci_engines.sh installs vLLM 0.33.0 and 0.30.0 and runs
this once with each; without vLLM it skips."""

from __future__ import annotations

import logging
import os

import pytest
import torch

try:
    import vllm
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import dummy_loader, get_model_loader, weight_utils
except Exception as e:  # noqa: BLE001 (not installed, or not for this torch)
    if os.environ.get("FP8_DUMMY_REQUIRE_ENGINES") == "1":  # CI: missing is a failure
        raise
    pytest.skip(
        f"vLLM is not importable here ({type(e).__name__}: {e}); scripts/ci_engines.sh installs it",
        allow_module_level=True,
    )

from conftest import FP8_DTYPES, WIDE_DTYPES, poison, storage_bytes
from helpers import entry_points, fake_vllm
from helpers.engine_models import EngineModel, all_tensors, assert_same_bytes, spy_calls, spy_fused
from oracles import engines as oracle

import fp8_dummy
from fp8_dummy.engines import vllm as fvllm
from fp8_dummy.engines.vllm.rules import major_minor

GEN = fvllm.generation()
THEIRS = weight_utils.initialize_single_dummy_weight
SEMANTICS = "vllm-0.33" if GEN >= 33 else "vllm-0.30"
DTYPES = FP8_DTYPES + WIDE_DTYPES + [torch.int8, torch.uint8, torch.float4_e2m1fn_x2, torch.int32]
NAMES = ["weight", "weight_scale"] if GEN >= 33 else [""]
BOUNDS = [(None, None), (-0.5, 0.25)] if GEN >= 33 else [(-1e-3, 1e-3), (-0.5, 0.25)]


# The vLLM releases whose dummy loaders were read and matched, and their semantics.
MATCHED = {"0.28": 28, "0.29": 28, "0.30": 30, "0.31": 30, "0.32": 30, "0.33": 33}


def test_version_is_one_we_match():
    assert fvllm.version() == vllm.__version__
    release = ".".join(map(str, major_minor(vllm.__version__)))
    assert release in MATCHED, f"vLLM {vllm.__version__}: not one of the matched {list(MATCHED)}"
    assert GEN == MATCHED[release]


def _theirs(t, low, high, seed, name):
    if GEN >= 33:
        THEIRS(t, low, high, seed, name=name)
    else:
        THEIRS(t, low, high, seed)


def _models(n, **kw):
    return [EngineModel(fp4=GEN >= 33, meta=True, **kw) for _ in range(n)]


def _tensor(dtype, layout):
    base = torch.empty(6, 34, dtype=dtype)
    t = {"dense": base, "transposed": base.t(), "gaps": base[:, ::3], "0-dim": base[0, 0]}[layout]
    return poison(t)


@pytest.mark.parametrize("own", [False, True], ids=["delegating", "own-rules"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_single_matches_vllm(dtype, own, monkeypatch):
    if own:  # our reproduction of every branch, as where vLLM is not installed
        monkeypatch.setitem(fvllm.originals, "single", None)
    for name in NAMES:
        for low, high in BOUNDS:
            for layout in ("dense", "transposed", "gaps", "0-dim"):
                x, y, z = (_tensor(dtype, layout) for _ in range(3))
                try:
                    _theirs(y, low, high, 8, name)
                except NotImplementedError:  # vLLM < 0.33 on packed FP4
                    with pytest.raises(NotImplementedError):
                        fvllm.initialize_single_dummy_weight(x, low, high, 8, name)
                    continue
                fvllm.initialize_single_dummy_weight(x, low, high, 8, name)
                oracle.vllm_single(z, low, high, 8, name, generation=GEN)
                where = f"{name!r} {low} {high} {layout}"
                assert torch.equal(storage_bytes(x), storage_bytes(y)), where
                assert torch.equal(storage_bytes(z), storage_bytes(y)), "oracle " + where


def test_single_meta_and_dummy_weight_value():
    fvllm.initialize_single_dummy_weight(torch.empty(3, device="meta"))
    x, y = (torch.nn.Parameter(torch.empty(5, dtype=torch.bfloat16)) for _ in range(2))
    x.dummy_weight_value = y.dummy_weight_value = 0.75
    fvllm.initialize_single_dummy_weight(x)
    THEIRS(y)
    assert torch.equal(x, y)


def test_loader_models_match_fp8_dummy_and_the_oracle():
    theirs, ours, oracle_model = _models(3, dummy_values=GEN >= 30)
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(theirs, None)
    fp8_dummy.initialize_dummy_weights(ours, semantics=SEMANTICS)
    oracle.vllm_load_weights(oracle_model, GEN)
    assert assert_same_bytes(ours, theirs) > 60
    assert_same_bytes(oracle_model, theirs)


def test_by_hand_recipe_same_bytes(monkeypatch):
    # docs/engines.md, without the plugin: the loader's binding replaced by hand.
    without, with_recipe = _models(2, dummy_values=GEN >= 30)
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(without, None)
    monkeypatch.setattr(
        dummy_loader, "initialize_single_dummy_weight", fvllm.initialize_single_dummy_weight
    )
    if GEN < 30:
        monkeypatch.setattr(
            dummy_loader, "initialize_dummy_weights", fvllm.initialize_dummy_weights
        )
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(with_recipe, None)
    assert_same_bytes(with_recipe, without)


@pytest.mark.skipif(GEN > 30, reason="initialize_dummy_weights was removed in vLLM 0.31")
@pytest.mark.parametrize("bounds", [(), (-0.5, 0.5, 3)])
def test_old_initialize_dummy_weights_matches_vllm(bounds):
    a, b = (EngineModel(meta=True) for _ in range(2))
    weight_utils.initialize_dummy_weights(a, None, *bounds)
    fvllm.initialize_dummy_weights(b, None, *bounds)
    assert_same_bytes(a, b)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """vLLM's own plugin loading, with fp8_dummy's entry point visible; undone after."""
    from vllm import plugins

    how = entry_points.provide("vllm.general_plugins", tmp_path)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.delenv(fvllm.ENV, raising=False)
    monkeypatch.setattr(plugins, "plugins_loaded", False)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    fvllm.logger.addHandler(handler)
    level = fvllm.logger.level
    fvllm.logger.setLevel(logging.INFO)  # vLLM configures its loggers with an engine
    try:
        yield plugins, records, how
    finally:
        fvllm.logger.setLevel(level)
        fvllm.logger.removeHandler(handler)
        fake_vllm.unpatch()


def test_plugin_routes_dummy_loader_through_fp8_dummy_same_bytes(plugin, monkeypatch):
    plugins, records, how = plugin
    without, with_plugin = _models(2, dummy_values=GEN >= 30)
    loader = dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy"))
    loader.load_weights(without, None)  # vLLM alone
    plugins.load_general_plugins()  # as vLLM does in every process
    assert dummy_loader.initialize_single_dummy_weight is fvllm._single, how
    line = f"fp8_dummy: vLLM {vllm.__version__}: dummy weights through fp8_dummy"
    assert any(r.startswith(line) for r in records), records
    fused = spy_fused(monkeypatch)
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(with_plugin, None)
    assert torch.float8_e4m3fn in fused and torch.bfloat16 in fused  # we filled those
    assert assert_same_bytes(with_plugin, without) > 60


def test_plugin_fills_the_dummy_loaders_model_as_one_plan(plugin, monkeypatch):
    """vLLM's own ``load_weights`` replaced by one plan of its walk (proven against its loop
    on a probe), not its per-tensor calls; the bytes of vLLM without the plugin, at the first
    load and at one with the plan kept from it."""
    plugins, records, _ = plugin
    without, with_plugin = _models(2, dummy_values=GEN >= 30)
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(without, None)
    plugins.load_general_plugins()
    assert dummy_loader.DummyModelLoader.load_weights is fvllm._load_weights
    assert any("--load-format dummy fills the whole model as one plan" in r for r in records)
    per_tensor, batches = spy_calls(monkeypatch)
    for _ in range(2):
        for t in all_tensors(with_plugin).values():
            if t.device.type != "meta":
                poison(t)
        get_model_loader(LoadConfig(load_format="dummy")).load_weights(with_plugin, None)
        assert assert_same_bytes(with_plugin, without) > 60
    assert not per_tensor and max(batches) > 1
    walk = [e for e in fp8_dummy.self_check_report() if "load_weights: the walk" in e.key]
    assert [(e.key, e.proven) for e in walk] == [
        (f"vllm: vLLM {vllm.__version__} DummyModelLoader.load_weights: the walk of one plan", True)
    ]


def test_load_format_fp8_dummy_same_bytes_as_dummy(plugin):
    plugins, _, _ = plugin
    dummy, batched = _models(2, dummy_values=GEN >= 30)
    dummy_loader.DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(dummy, None)
    plugins.load_general_plugins()
    loader = get_model_loader(LoadConfig(load_format="fp8_dummy"))
    assert type(loader).__name__ == "FP8DummyModelLoader"
    for fmt in ("invariant", "realistic"):  # registered by the same plugin, 0.28-0.33
        loader_class = type(get_model_loader(LoadConfig(load_format=f"fp8_dummy_{fmt}")))
        assert loader_class.__name__ == f"FP8Dummy{fmt.title()}ModelLoader"
    loader.load_weights(batched, None)
    assert_same_bytes(batched, dummy)


def test_plugin_off_by_environment(plugin, monkeypatch):
    plugins, records, _ = plugin
    monkeypatch.setenv(fvllm.ENV, "0")
    plugins.load_general_plugins()
    assert dummy_loader.initialize_single_dummy_weight is THEIRS
    assert any("left to vLLM" in r for r in records)


def test_plugin_off_by_vllm_allow_list(plugin, monkeypatch):
    plugins, _, _ = plugin
    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    plugins.load_general_plugins()
    assert dummy_loader.initialize_single_dummy_weight is THEIRS
