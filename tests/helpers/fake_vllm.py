"""A stand-in ``vllm`` package (our own few lines, no vLLM code) with the module layout and
entry points the fp8_dummy plugin uses: version, platform, plugin loading by entry point,
the loader registry, and a dummy loader whose per-tensor function is the oracle
(tests/oracles/engines.py). It lets the plugin's mechanics run where vLLM is not
installed: in the main test suite and on the GPU machine. tests/test_engines_vllm.py runs
the same checks against the real vLLM."""

from __future__ import annotations

from pathlib import Path

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


def register_model_loader(load_format):
    def wrap(cls):
        assert issubclass(cls, BaseModelLoader)
        _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = cls
        return cls

    return wrap


def get_model_loader(load_config):
    return _LOAD_FORMAT_TO_MODEL_LOADER[load_config.load_format](load_config)
""",
    "vllm/model_executor/model_loader/base_loader.py": """
class BaseModelLoader:
    def __init__(self, load_config):
        self.load_config = load_config
""",
    "vllm/model_executor/model_loader/weight_utils.py": """
from oracles.engines import vllm_single

GENERATION = {generation}


def initialize_single_dummy_weight(param, low={default_low}, high={default_high}, seed=1234,
                                   name=""):
    vllm_single(param, low, high, seed, name, generation=GENERATION)


def initialize_dummy_weights(model, model_config=None, low=-1e-3, high=1e-3, seed=1234):
    for t in model.state_dict().values():
        initialize_single_dummy_weight(t, low, high, seed)
""",
    "vllm/model_executor/model_loader/dummy_loader.py": """
import torch

from .base_loader import BaseModelLoader
from .weight_utils import initialize_dummy_weights, initialize_single_dummy_weight

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
            elif GENERATION < 30:
                initialize_dummy_weights(layer, model_config)
            else:
                for name, t in get_layer_tensors(layer).items():
                    if name not in layer._non_persistent_buffers_set:
                        initialize_single_dummy_weight(t, name=name)

    def _process_online_quant_layer(self, layer, info):
        # every tensor, non-persistent buffers too, then a post-processing step that
        # depends on the values (as quantization would)
        for name, t in get_layer_tensors(layer).items():
            initialize_single_dummy_weight(t, name=name)
        with torch.no_grad():
            for t in get_layer_tensors(layer).values():
                raw = torch.empty(0, dtype=torch.uint8, device=t.device)
                raw.set_(t.untyped_storage()).bitwise_xor_(0x0F)
""",
}


def write(root: Path, version: str) -> Path:
    """Writes the package under ``root``; returns ``root`` (to put on sys.path)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    generation = 33 if (major, minor) >= (0, 33) else 30 if (major, minor) >= (0, 30) else 28
    new = generation >= 33
    fields = {
        "version": version,
        "generation": generation,
        "default_low": "None" if new else "-1e-3",
        "default_high": "None" if new else "1e-3",
    }
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**fields))
    return root
