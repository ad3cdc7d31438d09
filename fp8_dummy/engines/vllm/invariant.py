"""One model at every parallel layout (``--load-format fp8_dummy_invariant``; docs/engines.md):
each rank's tensor holds its slice (:mod:`.placement`) of the logical tensor, whose values a
callback gives (:func:`stateless_values`). Also registered here: ``fp8_dummy_realistic``
(:mod:`.realistic`), which shares the loaders' extra-config handling."""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable

import torch

from ...ops import as_int64
from ...realistic import chosen_acceptance, chosen_routing, parse_acceptance, parse_routing
from ...stateless import init_stateless_, row_major_strides, tensor_seed
from ...tensors import FP4
from ..core import Action, Kind, apply, checked, error
from . import realistic
from .placement import Placement, UncoveredParameterError, placement
from .rules import platform, rule

__all__ = ["UncoveredParameterError", "fill_placed", "initialize_invariant_dummy_weights"]
__all__ += ["plan_layer", "stateless_values", "tensor_seed"]

SEED = 1234
LOAD_FORMAT = "fp8_dummy_invariant"
REALISTIC = realistic.LOAD_FORMAT
Entry = tuple[str, torch.Tensor, Action, Placement]
# values(full name, action, global shape, view, element_offset, element_strides): fill a block
# of the rank's tensor with the logical tensor's elements at those indices (docs/engines.md).
Values = Callable[[str, Action, tuple, torch.Tensor, int, list], None]
_WHERE = ("element_offset", "element_strides")


def _loader(t: torch.Tensor) -> Any:
    """The tensor's weight loader without vLLM's layerwise (online quantization) wrappers."""
    loader = getattr(t, "weight_loader", None)
    while loader is not None and getattr(loader, "__name__", "") == "online_process_loader":
        loader = getattr(loader, "__wrapped__", None)
    return loader


def plan_layer(prefix: str, layer: torch.nn.Module, *, materialized=True, skip=()) -> list[Entry]:
    """(full name, tensor, action, placement) of each tensor the dummy loader fills in ``layer``;
    ``materialized=False``: meta ones too (checked, not filled); ``skip``: tied, filled before."""
    act, entries = rule(33, *platform()), []
    for name, t in {**layer._parameters, **layer._buffers}.items():
        if t is None or name in skip or name in layer._non_persistent_buffers_set:
            continue
        full = f"{prefix}.{name}" if prefix else name
        action = checked(t, act(t, None, None, name))
        if action.kind is Kind.ENGINE:
            action = error(UncoveredParameterError, "vLLM's TPU path has no invariant form")
        if action.kind is Kind.ERROR:
            raise action.value[0](f"fp8_dummy: {full}: {action.value[1]}")
        if action.kind is not Kind.SKIP or (not materialized and t.device.type == "meta"):
            entries.append((full, t, action, placement(layer, name, t, _loader(t), full)))
    return entries


def stateless_values(seed: int = SEED) -> Values:
    """vLLM 0.33's values: fill, byte, zero as vLLM does; random bytes and floats drawn by
    ``init_stateless_`` of the logical tensor, keyed by :func:`tensor_seed` (the seed checked
    here, before any write: an int in [-2^63, 2^64), read modulo 2^64)."""
    seed = as_int64(seed, "seed", "fp8_dummy_invariant") % (1 << 64)

    def write(name: str, action: Action, shape: tuple, view: torch.Tensor, *where: Any) -> None:
        key = tensor_seed(seed, name)
        if action.kind not in (Kind.RANDOM, Kind.UNIFORM):
            return apply(view, action, key)
        raw = action.kind is Kind.RANDOM and action.low >= 0  # random bytes: its uint8 view
        target = view.view(torch.uint8) if raw else view
        init_stateless_(target, action.low, action.high, key, **dict(zip(_WHERE, where)))

    return write


@torch.no_grad()
def fill_placed(entries: list[Entry], values: Values) -> None:
    """Write each planned tensor: zero what no piece covers, then each piece's values."""
    for full, t, action, where in entries:
        data = t.data
        if action.kind is Kind.SKIP or data.device.type == "meta":
            continue
        if data.device.type not in ("cpu", "cuda"):
            raise UncoveredParameterError(f"fp8_dummy: {full}: device {data.device} (CPU, CUDA)")
        views = [(data[piece.local], piece) for piece in where.pieces]
        if sum(v.numel() for v, _ in views) != data.numel():
            (data.view(torch.uint8) if data.dtype == FP4 else data).zero_()
        strides = row_major_strides(where.global_shape)
        for view, piece in views:
            if view.numel():
                step = piece.step or (1,) * view.dim()
                offset = sum(o * s for o, s in zip(piece.offset, strides))
                scaled = [s * k for s, k in zip(strides, step)]
                values(full, action, where.global_shape, view, offset, scaled)


def initialize_invariant_dummy_weights(model: torch.nn.Module, seed: int = SEED) -> None:
    """Each tensor vLLM 0.33's dummy loader fills in ``model`` (this rank's) gets its slice of the
    logical tensor, all checked first; meta tensors are the load format's, in the loader's order."""
    values = stateless_values(seed)  # the seed checked before any write
    plans = [plan_layer(prefix, layer, skip=skip) for prefix, layer, skip in _modules(model)]
    for entries in plans:
        fill_placed(entries, values)


def _modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, set[str]]]:
    """(name, module, its tensors seen under an earlier name: tied ones are filled once)."""
    seen: set[int] = set()
    out = []
    for prefix, layer in model.named_modules():
        own = {n: t for n, t in {**layer._parameters, **layer._buffers}.items() if t is not None}
        out.append((prefix, layer, {n for n, t in own.items() if id(t) in seen}))
        seen.update(id(t) for t in own.values())
    return out


def register_load_format(package: Any) -> bool:
    """The layout formats, where vLLM's dummy loader has what they need; else False."""
    dl = sys.modules.get("vllm.model_executor.model_loader.dummy_loader")
    needed = ("DummyModelLoader", "get_layerwise_info", "materialize_layer", "QuantizeMethodBase")
    if not all(hasattr(dl, n) for n in needed) or not hasattr(package, "register_model_loader"):
        return False
    classes = {
        LOAD_FORMAT: _loader_class(dl),
        REALISTIC: realistic.loader_class(dl.DummyModelLoader, _initializer(dl.DummyModelLoader)),
    }
    for fmt, cls in classes.items():
        if fmt not in getattr(package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
            package.register_model_loader(fmt)(cls)
    return True


def _initializer(base: type) -> Callable[[Any, Any], None]:
    """The loaders' ``__init__`` on vLLM's dummy loader ``base``: the routing profile and the
    acceptance travel in vLLM's model_loader_extra_config, which the dummy loader refuses, so
    they are taken out (and checked) here, before ``base.__init__``."""

    def __init__(self: Any, load_config: Any) -> None:
        given = getattr(load_config, "model_loader_extra_config", None) or {}
        if not isinstance(given, dict):
            raise ValueError(
                f"fp8_dummy: {type(self).__name__}: model_loader_extra_config is a "
                f'{type(given).__name__}, not a JSON object (e.g. \'{{"routing": "zipf:1.2"}}\')'
            )
        extra = dict(given)
        self.routing = parse_routing(chosen_routing(extra.pop("routing", None)))
        self.acceptance = parse_acceptance(chosen_acceptance(extra.pop("acceptance", None)))
        if extra:
            raise ValueError(
                f"fp8_dummy: {type(self).__name__}: model_loader_extra_config keys "
                f"{sorted(extra)} are not understood (it takes 'routing' and 'acceptance')"
            )
        if getattr(load_config, "model_loader_extra_config", None):
            load_config = copy.copy(load_config)
            load_config.model_loader_extra_config = {}
        base.__init__(self, load_config)

    return __init__


def _loader_class(dl: Any) -> type:
    class FP8DummyInvariantModelLoader(dl.DummyModelLoader):
        """Every tensor checked first; online-quantized layers in the loader's order."""

        __init__ = _initializer(dl.DummyModelLoader)

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            modules = _modules(model)
            for prefix, layer, skip in modules:  # refuse before anything is written
                plan_layer(prefix, layer, materialized=False, skip=skip)
            values = stateless_values(SEED)
            for prefix, layer, skip in modules:
                info = dl.get_layerwise_info(layer)
                online = info.can_load()
                if online:
                    dl.materialize_layer(layer, info)
                fill_placed(plan_layer(prefix, layer, skip=skip), values)
                if not online:
                    continue
                for t in [*layer._parameters.values(), *layer._buffers.values()]:
                    if t is not None and hasattr(t, "weight_loader"):
                        t.weight_loader = _loader(t)
                if isinstance(getattr(layer, "quant_method", None), dl.QuantizeMethodBase):
                    layer.quant_method.process_weights_after_loading(layer)
                info.reset()

    return FP8DummyInvariantModelLoader
