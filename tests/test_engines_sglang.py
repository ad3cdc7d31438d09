"""fp8_dummy against SGLang's own ``initialize_dummy_weights`` (0.5.23), byte for byte, on
the CPU: the drop-in, the one-line install into the dummy loader, and the plugin loaded
the way SGLang loads plugins (entry point group ``sglang.srt.plugins``, an AROUND hook).
scripts/ci_engines.sh installs SGLang; without it this skips."""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
from helpers.engine_import import require

require("sglang.srt.model_loader.loader")

from helpers import entry_points  # noqa: E402
from helpers.engine_models import EngineModel, assert_same_bytes, changed, spy_fused  # noqa: E402
from oracles import engines as oracle  # noqa: E402
from sglang.srt.model_loader import loader as sglang_loader  # noqa: E402
from sglang.srt.model_loader import weight_utils  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.engines import sglang as fsglang  # noqa: E402

# Not a module-level name for the function itself: SGLang's hooks rebind every module
# attribute that holds the original (tests' globals included).
ORIGINAL = {
    "sglang": weight_utils.initialize_dummy_weights,
    "build": sglang_loader._initialize_model,  # SGLang's model construction
}


def theirs(*args):
    return ORIGINAL["sglang"](*args)


@pytest.mark.parametrize("bounds", [(), (-0.5, 0.25), (-1.0, 1.0, 77)])
def test_drop_in_matches_sglang(bounds):
    them, ours, model_api, oracle_model = (EngineModel() for _ in range(4))
    theirs(them, *bounds)
    fsglang.initialize_dummy_weights(ours, *bounds)
    fp8_dummy.initialize_dummy_weights(model_api, *bounds, semantics="sglang-0.5")
    oracle.sglang_initialize_dummy_weights(oracle_model, *bounds)
    assert assert_same_bytes(ours, them) > 60
    assert_same_bytes(model_api, them)
    assert_same_bytes(oracle_model, them)
    assert "layers.0.int8_proj.weight" not in changed(ours)  # integers untouched
    assert bool((ours.layers[1].blk_proj.weight_scale_inv == 1.0).all())


@pytest.mark.parametrize("kind", ["meta", "fp4"])
def test_raises_where_sglang_raises(kind):
    them, ours = (EngineModel(**{kind: True}) for _ in range(2))
    with pytest.raises(Exception) as their_error:
        theirs(them)
    with pytest.raises(their_error.type, match="fp8_dummy"):
        fsglang.initialize_dummy_weights(ours)
    assert changed(ours) == set()  # we refuse before writing anything


def test_one_line_install_into_the_loader(monkeypatch):
    # The README's recipe: SGLang's DummyModelLoader calls the loader module's binding.
    assert sglang_loader.initialize_dummy_weights is ORIGINAL["sglang"]
    monkeypatch.setattr(sglang_loader, "initialize_dummy_weights", fsglang.initialize_dummy_weights)
    a, b = EngineModel(), EngineModel()
    sglang_loader.initialize_dummy_weights(a)
    theirs(b)
    assert_same_bytes(a, b)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """SGLang's own plugin loading with fp8_dummy's entry point visible; undone after."""
    from sglang.srt import plugins as sglang_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    how = entry_points.provide("sglang.srt.plugins", tmp_path)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv(fsglang.ENV, raising=False)
    monkeypatch.setattr(sglang_plugins, "_plugins_loaded", False)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    fsglang.logger.addHandler(handler)
    fsglang.logger.setLevel(logging.INFO)
    try:
        yield sglang_plugins, records, how
    finally:
        fsglang.logger.removeHandler(handler)
        HookRegistry.reset()
        for module in list(sys.modules.values()):  # undo the hooks' rebinding everywhere
            if isinstance(module, types.ModuleType):
                for name, own in (("initialize_dummy_weights", ORIGINAL["sglang"]),
                                  ("_initialize_model", ORIGINAL["build"])):  # fmt: skip
                    if getattr(vars(module).get(name), "__wrapped__", None) is own:
                        setattr(module, name, own)


def test_plugin_hooks_sglang_same_bytes(plugins, monkeypatch):
    sglang_plugins, records, how = plugins
    sglang_plugins.load_plugins()  # what SGLang's engine, scheduler and workers call
    assert weight_utils.initialize_dummy_weights is not ORIGINAL["sglang"], how
    assert sglang_loader._initialize_model is ORIGINAL["build"]  # not hooked: SGLang builds
    assert sglang_loader.initialize_dummy_weights is weight_utils.initialize_dummy_weights
    assert any(
        r.startswith("fp8_dummy: SGLang 0.5.23: dummy weights through fp8_dummy") for r in records
    ), records
    fused = spy_fused(monkeypatch)
    for bounds in [(), (-0.5, 0.5), (-0.25, 0.25, 9)]:
        a, b = EngineModel(), EngineModel()
        sglang_loader.initialize_dummy_weights(a, *bounds)  # the dummy loader's call
        theirs(b, *bounds)
        assert_same_bytes(a, b)
    assert torch.float8_e4m3fn in fused and torch.float32 in fused


def test_plugin_off_by_environment(plugins, monkeypatch):
    sglang_plugins, records, _ = plugins
    monkeypatch.setenv(fsglang.ENV, "off")
    sglang_plugins.load_plugins()
    assert weight_utils.initialize_dummy_weights is ORIGINAL["sglang"]
    assert sglang_loader.initialize_dummy_weights is ORIGINAL["sglang"]
    assert any("left to SGLang" in r for r in records)


def test_rules_self_check_uses_sglang_when_its_rules_change(monkeypatch):
    def other_rules(model, low=-1e-3, high=1e-3, seed=1234):  # a later SGLang, say
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.fill_(0.5)

    a = EngineModel()
    torch.ops.fp8_dummy_internal.proof_forget("sglang")
    with pytest.warns(RuntimeWarning, match="self-check refused sglang: SGLang"):
        fsglang._around(other_rules, a, -0.1, 0.1)
    assert bool((a.layers[0].norm.weight == 0.5).all())


def test_plugin_realistic_mode_by_environment(plugins, monkeypatch):
    """FP8_DUMMY_SGLANG=realistic: SGLang's dummy loader loads the realistic model's checkpoint
    through the model's own load_weights (tests/test_engines_sglang_realistic.py, on SGLang's
    own classes); a model without a config and load_weights gets SGLang's own fill, with one
    warning naming what it lacks."""
    sglang_plugins, records, _ = plugins
    monkeypatch.setenv(fsglang.ENV, "realistic")
    sglang_plugins.load_plugins()
    assert "fp8_dummy: SGLang 0.5.23: realistic dummy weights (the checkpoint's)" in records
    # and the hook on SGLang's model construction that keeps the config the class is handed
    assert sglang_loader._initialize_model.__wrapped__ is ORIGINAL["build"]
    ours, want = EngineModel(), EngineModel()
    with pytest.warns(RuntimeWarning, match="config and load_weights"):
        sglang_loader.initialize_dummy_weights(ours)  # the dummy loader's call
    theirs(want)
    assert assert_same_bytes(ours, want) > 60  # SGLang's own
