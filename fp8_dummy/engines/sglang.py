"""SGLang 0.5.23 (docs/engines.md): a drop-in for its ``initialize_dummy_weights``, and its plugin
(``sglang.srt.plugins``): an AROUND hook on every imported copy of it. ``FP8_DUMMY_SGLANG=0``
turns it off, ``=realistic`` loads the realistic model's checkpoint instead (docs/realistic.md),
of the config SGLang hands each model's class, kept by a second hook on its model construction."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import os
import weakref
from typing import Any, Callable

import torch

from ..realistic import chosen_acceptance, chosen_routing, config_checkpoint
from . import core

__all__ = ["SEMANTICS", "initialize_dummy_weights", "register"]

ENV = "FP8_DUMMY_SGLANG"
MODULE, NAME = "sglang.srt.model_loader.weight_utils", "initialize_dummy_weights"
BUILD = "sglang.srt.model_loader.loader._initialize_model"  # every SGLang loader builds here
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
    if _realistic():  # the fill reads each model's config as it was before its class built
        HookRegistry.register(BUILD, _around_build, HookType.AROUND)
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
    """The logical checkpoint of the model's config as SGLang handed it to the model's class
    (:func:`_as_given`; seed 0; fp8_dummy/realistic/logical.py;
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
    checkpoint = config_checkpoint(
        _as_given(model), 0, routing=chosen_routing(), acceptance=chosen_acceptance()
    )
    load(checkpoint.items())


# The config SGLang handed each model's class, as it was before the class built (weakly: a
# model's lifetime); kept by the hook on SGLang's model construction in the realistic mode.
_given: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()


def _around_build(own: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The hook on SGLang's model construction (``BUILD``): SGLang's own function, and a copy of
    the config it hands the model's class taken before the class builds. SGLang's classes
    rewrite that config in place while they build (its MLA attention the rope type, Nemotron-H's
    MTP class the main layers, ...); the copy is the model as SGLang's config machinery (the
    folder's config file, the user's overrides, its draft settings) describes it. The copy kept
    is the part the model holds as its ``config`` (a multimodal model's text config, say): the
    same object, else the part of the same config class (a class that holds a copy it made).
    Nothing here stops the build: a config that cannot be copied is not kept."""
    memo: dict[int, Any] = {}
    try:
        handed = args[0] if args else kwargs["model_config"]
        copy.deepcopy(handed.hf_config, memo)
    except Exception:  # noqa: BLE001 (the build is SGLang's; the fill then refuses, naming why)
        memo = {}
    model = own(*args, **kwargs)
    with contextlib.suppress(Exception):
        held = model.config
        twin = memo.get(id(held))  # the copies' originals stay alive in memo: ids are unique
        if twin is None:
            twin = next((v for v in memo.values() if type(v) is type(held)), None)
        if twin is not None:
            _given[model] = _kept_or_completed(args[0] if args else kwargs["model_config"], twin)
    return model


# The config as handed of the target SGLang built last in this process, by the checkpoint it
# reads (model path, revision): SGLang's scheduler (one process per rank) builds its target
# before its speculative draft, so a draft read from the target's checkpoint finds it here.
_targets: dict[tuple[Any, Any], Any] = {}

# The counts SGLang's draft settings (its model config's ``is_draft_model``) rewrite in a draft's
# config: LongCat-Flash's ``num_hidden_layers`` (set to its MTP layers'), and the MTP layer count
# of the drafts whose classes build one (Qwen3-Next, Nemotron-H, HY-V3...: 1). The checkpoint's
# tensors depend on both: its MTP layers' output projections are scaled by the main model's
# depth, and their facts are probed on a twin of all its MTP layers where that twin is small.
DRAFT_COUNTS = ("num_hidden_layers", "num_nextn_predict_layers")


def _kept_or_completed(handed: Any, twin: Any) -> Any:
    """A target's config kept for its drafts; a draft's (SGLang's ``is_draft_model``) read from
    the same checkpoint as a target built before it in this process, with a config of the same
    class, given the target's counts (:data:`DRAFT_COUNTS`) where SGLang's draft settings
    changed them: the checkpoint is the target's, so its tensors are the ones the target's
    config describes. A draft without such a target keeps its config as handed."""
    source = (getattr(handed, "model_path", None), getattr(handed, "revision", None))
    if not getattr(handed, "is_draft_model", False):
        _targets[source] = twin
        return twin
    target = _targets.get(source)
    if type(target) is not type(twin):
        return twin
    for key in DRAFT_COUNTS:
        count = getattr(target, key, None)
        if isinstance(count, int) and getattr(twin, key, None) != count:
            setattr(twin, key, count)
    return twin


def _as_given(model: torch.nn.Module) -> Any:
    """The model's config as SGLang handed it to the model's class, before the class rewrote
    it (:func:`_around_build`); a model built without that hook is refused, naming why."""
    given = _given.get(model)
    if given is None:
        raise RuntimeError(
            f"the realistic mode reads the config SGLang hands the model's class as it was "
            f"before the class built (SGLang's classes rewrite it in place); "
            f"{type(model).__name__} was not built through {BUILD} with fp8_dummy's hook on it"
        )
    return given
