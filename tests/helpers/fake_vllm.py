"""A stand-in ``vllm`` package (our own few lines, no vLLM code) with the module layout and
entry points the fp8_dummy plugin uses: version, platform, plugin loading by entry point,
the loader registry, and a dummy loader whose per-tensor function is the oracle
(tests/oracles/engines.py). It lets the plugin's mechanics run where vLLM is not
installed: in the main test suite and on the GPU machine. tests/test_engines_vllm.py runs
the same checks against the real vLLM."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import torch

from fp8_dummy.engines.vllm.rules import major_minor

# The loader registry both package layouts share.
REGISTRY = """

def register_model_loader(load_format):
    def wrap(cls):
        assert issubclass(cls, BaseModelLoader)
        _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = cls
        return cls

    return wrap
"""

FILES = {
    "vllm/__init__.py": '__version__ = "{version}"\n',
    "vllm/platforms/__init__.py": """
class _Platform:
    def is_tpu(self):
        return False

    def is_rocm(self):
        return False


current_platform = _Platform()
""",
    "vllm/plugins/__init__.py": """
import importlib.metadata
import os

plugins_loaded = False


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    allowed = os.environ.get("VLLM_PLUGINS")
    for ep in importlib.metadata.entry_points(group="vllm.general_plugins"):
        if allowed is None or ep.name in allowed.split(","):
            ep.load()()
""",
    "vllm/config/__init__.py": "",
    "vllm/config/load.py": """
class LoadConfig:
    def __init__(self, load_format="auto", model_loader_extra_config=None):
        self.load_format = load_format.lower()
        self.model_loader_extra_config = model_loader_extra_config or {{}}
""",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/model_loader/__init__.py": """
from .base_loader import BaseModelLoader
from .dummy_loader import DummyModelLoader

_LOAD_FORMAT_TO_MODEL_LOADER = {{"dummy": DummyModelLoader}}
"""
    + REGISTRY
    + """

def get_model_loader(load_config):
    return _LOAD_FORMAT_TO_MODEL_LOADER[load_config.load_format](load_config)
""",
    "vllm/model_executor/model_loader/base_loader.py": """
class BaseModelLoader:
    def __init__(self, load_config):
        self.load_config = load_config
""",
    "vllm/model_executor/model_loader/weight_utils.py": """
import torch

from oracles.engines import vllm_single

GENERATION = {generation}
FP8_RANGE = {fp8_range}  # a later vLLM may change the default bounds of 8-bit floats


def {single}(param, low={default_low}, high={default_high}, seed=1234, name=""):
    small = param.is_floating_point() and torch.finfo(param.dtype).bits < 16
    if GENERATION >= 33 and small and low is None and high is None and FP8_RANGE != 1.0:
        low, high = -FP8_RANGE, FP8_RANGE
    vllm_single(param, low, high, seed, name, generation=GENERATION)


def initialize_dummy_weights(model, model_config=None, low=-1e-3, high=1e-3, seed=1234):
    for t in model.state_dict().values():
        {single}(t, low, high, seed)
""",
    "vllm/model_executor/model_loader/dummy_loader.py": """
import torch

from .base_loader import BaseModelLoader
from .weight_utils import initialize_dummy_weights, {single}

GENERATION = {generation}


class _Info:
    def __init__(self, online):
        self.online = online

    def can_load(self):
        return self.online


def get_layerwise_info(layer):
    return _Info(getattr(layer, "online_quant", False))


def get_layer_tensors(layer):
    params = {{k: v for k, v in layer._parameters.items() if v is not None}}
    return params | {{k: v for k, v in layer._buffers.items() if v is not None}}


class DummyModelLoader(BaseModelLoader):
    def load_weights(self, model, model_config):
        for layer in model.modules():
            info = get_layerwise_info(layer)
            if info.can_load():
                self._process_online_quant_layer(layer, info)
            else:
{loop}

    def _process_online_quant_layer(self, layer, info):
        # every tensor, non-persistent buffers too, then a post-processing step that
        # depends on the values (as quantization would)
        for name, t in get_layer_tensors(layer).items():
            {single}(t, name=name) if GENERATION >= 33 else {single}(t)
        with torch.no_grad():
            for t in get_layer_tensors(layer).values():
                raw = torch.empty(0, dtype=torch.uint8, device=t.device)
                raw.set_(t.untyped_storage()).bitwise_xor_(0x0F)
""",
}


# The loop's body for a layer that is not quantized online, by generation (0.28: the
# whole-model function on the layer), and as later releases might change it.
LOOPS = {
    28: "initialize_dummy_weights(layer, model_config)",
    30: """for name, t in get_layer_tensors(layer).items():
    if name not in layer._non_persistent_buffers_set:
        {single}(t)""",
    33: """for name, t in get_layer_tensors(layer).items():
    if name not in layer._non_persistent_buffers_set:
        {single}(t, name=name)""",
    "every buffer": """for name, t in get_layer_tensors(layer).items():
    {single}(t, name=name)""",
    "a new step": """if isinstance(layer, torch.nn.LayerNorm):
    torch.nn.init.ones_(layer.weight)
for name, t in get_layer_tensors(layer).items():
    if name not in layer._non_persistent_buffers_set:
        {single}(t, name=name)""",
}

# A loader package that imports its modules on first use (PEP 562), as a later vLLM might:
# importing the package does not import dummy_loader.
LAZY_PACKAGE = (
    """
import importlib

from .base_loader import BaseModelLoader

_LOAD_FORMAT_TO_MODEL_LOADER = {{}}
"""
    + REGISTRY
    + """

def get_model_loader(load_config):
    if "dummy" not in _LOAD_FORMAT_TO_MODEL_LOADER:
        _LOAD_FORMAT_TO_MODEL_LOADER["dummy"] = importlib.import_module(
            __name__ + ".dummy_loader"
        ).DummyModelLoader
    return _LOAD_FORMAT_TO_MODEL_LOADER[load_config.load_format](load_config)


def __getattr__(name):
    if name == "DummyModelLoader":
        return importlib.import_module(__name__ + ".dummy_loader").DummyModelLoader
    raise AttributeError(name)
"""
)


def write(
    root: Path,
    version: str,
    *,
    lazy: bool = False,
    single: str = "initialize_single_dummy_weight",
    fp8_range: float = 1.0,
    loop: str | None = None,
) -> Path:
    """Writes the package under ``root``; returns ``root`` (to put on sys.path).

    Stand-ins for releases we have not matched: ``lazy`` (the loader package imports its
    modules on first use), ``single`` (another name for the per-tensor function),
    ``fp8_range`` (other default bounds for 8-bit floats), ``loop`` (a key of :data:`LOOPS`:
    the dummy loader's loop changed)."""
    release = major_minor(version)
    generation = 33 if release >= (0, 33) else 30 if release >= (0, 30) else 28
    new = generation >= 33
    body = LOOPS[generation if loop is None else loop].replace("{single}", single)
    fields = {
        "loop": textwrap.indent(body, " " * 16),
        "version": version,
        "generation": generation,
        "default_low": "None" if new else "-1e-3",
        "default_high": "None" if new else "1e-3",
        "single": single,
        "fp8_range": fp8_range,
    }
    files = dict(FILES)
    if lazy:
        files["vllm/model_executor/model_loader/__init__.py"] = LAZY_PACKAGE
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**fields))
    return root


def unpatch() -> None:
    """Give vLLM's dummy loader its own functions and method back and drop the plugin's
    pending hooks (the load formats stay registered)."""
    from fp8_dummy.engines import vllm as fvllm

    module = sys.modules.get("vllm.model_executor.model_loader.dummy_loader")
    if module is not None and getattr(module, "_fp8_dummy_patched", False):
        module.initialize_single_dummy_weight = fvllm.originals["single"]
        if "model" in fvllm.originals:
            module.initialize_dummy_weights = fvllm.originals["model"]
        if "load_weights" in fvllm.originals:
            module.DummyModelLoader.load_weights = fvllm.originals["load_weights"]
        module._fp8_dummy_patched = False
    sys.meta_path[:] = [
        f
        for f in sys.meta_path
        if not (getattr(f, "_fp8_dummy_after_import", False) and f.name.startswith("vllm."))
    ]


def _vllm_modules() -> dict:
    return {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}


@contextlib.contextmanager
def installed(tmp_path: Path, monkeypatch, version: str, **variant) -> Iterator[str]:
    """The stand-in vLLM of that version (and variant, see :func:`write`) on sys.path,
    fp8_dummy's entry point visible, fp8_dummy.engines.vllm's state and the vllm proof keys fresh;
    everything put back after."""
    from fp8_dummy.engines import vllm as fvllm
    from fp8_dummy.engines.vllm import rules

    from . import entry_points

    saved = _vllm_modules()
    for k in saved:
        del sys.modules[k]
    site = write(tmp_path / "site", version, **variant)
    monkeypatch.syspath_prepend(str(site))
    entry_points.provide("vllm.general_plugins", tmp_path / "entry_points")
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.delenv(fvllm.ENV, raising=False)
    monkeypatch.setattr(fvllm, "originals", {})
    rules.platform.cache_clear()
    torch.ops.fp8_dummy_internal.proof_forget("vllm")  # each stand-in is probed afresh
    importlib.invalidate_caches()
    try:
        yield version
    finally:
        unpatch()
        rules.platform.cache_clear()
        torch.ops.fp8_dummy_internal.proof_forget("vllm")
        for k in _vllm_modules():
            del sys.modules[k]
        sys.modules.update(saved)
