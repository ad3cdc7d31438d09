"""SGLang 0.5.23 (docs/engines.md): a drop-in for its ``initialize_dummy_weights``, and its plugin
(``sglang.srt.plugins``): an AROUND hook on every imported copy of it. ``FP8_DUMMY_SGLANG=0``
turns it off, ``=realistic`` loads the realistic model's checkpoint instead (docs/realistic.md)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
from typing import Any, Callable

import torch

from ..realistic import chosen_acceptance, chosen_routing, config_checkpoint
from . import core

__all__ = ["SEMANTICS", "initialize_dummy_weights", "register"]

ENV = "FP8_DUMMY_SGLANG"
MODULE, NAME = "sglang.srt.model_loader.weight_utils", "initialize_dummy_weights"
logger = logging.getLogger(__name__)  # SGLang configures the root logger


def rule(t: torch.Tensor, low: float, high: float, name: str) -> core.Action:
    """Floating ``state_dict`` tensors; ``*weight_scale_inv``/``*weight_scale_2`` 1.0."""
    if not torch.is_floating_point(t):
        return core.SKIP
    if name.endswith(("weight_scale_inv", "weight_scale_2")):
        return core.SKIP if t.is_meta else core.Action(core.Kind.FILL, value=1.0)
    if t.is_meta:
        return core.error(RuntimeError, "meta tensor: SGLang cannot make a generator for it")
    return core.Action(core.Kind.UNIFORM, float(low), float(high))


PARAMS = (("low", -1e-3), ("high", 1e-3), ("seed", 1234))
SEMANTICS = core.Semantics(
    "sglang", "SGLang 0.5.23 semantics", rule, PARAMS, temp="old_path", reads=()
)
core.SEMANTICS["sglang-0.5"] = SEMANTICS


def initialize_dummy_weights(
    model: torch.nn.Module, low: float = -1e-3, high: float = 1e-3, seed: int = 1234
) -> None:
    """SGLang's function, byte for byte; where it raises, this raises before writing."""
    _fill(core.own_function(MODULE, NAME, initialize_dummy_weights), model, low, high, seed)


def _fill(own: Callable | None, model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    v = core.installed("sglang") or "unknown version"
    sem = dataclasses.replace(SEMANTICS, name=f"SGLang {v}") if own else SEMANTICS
    return core.fill(model, sem, (args, kwargs), engine=own)


def register() -> None:
    """The entry point: the AROUND hook on SGLang's function. Never raises."""
    core.guarded("the SGLang plugin", "SGLang", "registration", _register)


def _register() -> None:
    if not core.enabled(ENV):
        logger.info("fp8_dummy: %s=%s, dummy weights left to SGLang", ENV, os.environ[ENV])
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:  # an SGLang without hooks: the one-line install is the way
        logger.info("fp8_dummy: this SGLang has no hook registry; see fp8_dummy.sglang")
        return
    HookRegistry.register(f"{MODULE}.{NAME}", _around, HookType.AROUND)
    version = core.installed("sglang") or "unknown version"
    what = "realistic dummy weights (the checkpoint's)" if _realistic() else core.account("SGLang")
    logger.info("fp8_dummy: SGLang %s: %s", version, what)


def _around(own: Callable[..., Any], model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The hook: ours where proven; whatever fails in ours, SGLang's own function."""
    who = ("the SGLang plugin", "SGLang", "fill")
    fill = _fill_realistic if _realistic() else functools.partial(_fill, own)
    return core.guarded(*who, fill, model, *args, theirs=own, **kwargs)


def _realistic() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "realistic"


def _fill_realistic(model: torch.nn.Module, *_: Any, **__: Any) -> None:
    """The logical checkpoint of the model's config (seed 0; fp8_dummy/realistic/logical.py;
    ``$FP8_DUMMY_ROUTING``, ``$FP8_DUMMY_ACCEPTANCE``) loaded by the model's own
    ``load_weights``, as SGLang loads a checkpoint from disk: its name mapping, fusing and
    sharding, each rank writing its shard of each stand-in. SGLang's dummy loader runs
    ``process_weights_after_loading`` afterwards, as after a real load."""
    config, load = getattr(model, "config", None), getattr(model, "load_weights", None)
    if config is None or load is None:
        raise NotImplementedError(
            f"the realistic mode loads through the model's config and load_weights; "
            f"{type(model).__name__} lacks them (docs/realistic.md)"
        )
    if any(c.__name__ in _STEP_AS_LAYERS for c in type(model).__mro__):
        config = _layers_as_written(config)
    checkpoint = config_checkpoint(
        _as_written(config), 0, routing=chosen_routing(), acceptance=chosen_acceptance()
    )
    load(checkpoint.items())


# SGLang's draft classes that set their config's main layers to one MTP step's, in place
_STEP_AS_LAYERS = ("NemotronHForCausalLMMTP",)


def _layers_as_written(config: Any) -> Any:
    """A copy of the config with its main layers as the model folder's config.json says them.
    SGLang's Nemotron-H MTP class sets ``layers_block_type`` (and with it ``num_hidden_layers``
    and ``hybrid_override_pattern``) to the MTP step's layers while it builds; the MTP layers'
    values depend on the main layers (the residual scale of the model's L layers), whose
    description the config then no longer holds: they are read again, as SGLang's own config
    class read them (``_name_or_path``: the folder SGLang read the config from)."""
    folder = os.fspath(getattr(config, "_name_or_path", "") or "")
    file = os.path.join(folder, "config.json")
    why = f"SGLang's MTP class rewrote the main layers of {type(config).__name__}"
    if not folder or not os.path.isfile(file):
        raise ValueError(f"{why}, and its folder {folder!r} has no config.json to read them from")
    try:
        with open(file, encoding="utf-8") as f:
            raw = json.load(f)
        layers = list(type(config).from_dict(raw).layers_block_type)
    except Exception as e:  # noqa: BLE001 (named: the file is the user's)
        raise ValueError(f"{why}, and {file} does not say them ({type(e).__name__}: {e})") from e
    written = copy.deepcopy(config)
    written.layers_block_type = layers
    return written


def _as_written(config: Any) -> Any:
    """The model's config as its file says it. SGLang's MLA attention (GLM-4.7-Flash's, and
    DeepSeek's where the rope type is not the default) sets the rope parameters' type to
    ``deepseek_yarn`` in the config's own dict while it builds the model, a type of which
    transformers builds no model: a copy with the type the parameters had, ``yarn`` where they
    give a ``factor`` (DeepSeek's yarn), else ``default`` (GLM-4.7-Flash's plain RoPE, which
    SGLang rewrites too)."""
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or params.get("rope_type") != "deepseek_yarn":
        return config
    written = copy.deepcopy(config)
    written.rope_parameters = dict(params, rope_type="yarn" if "factor" in params else "default")
    return written
