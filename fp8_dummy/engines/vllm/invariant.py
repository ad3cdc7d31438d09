"""One model at every parallel layout (``--load-format fp8_dummy_invariant``, docs/engines.md):
each rank's tensor holds its slice (:mod:`.placement`) of the logical tensor, whose values are a
callback of its name, shape and dtype (:func:`stateless_values`): the same at every TP/EP/PP/DP
layout and on every device."""

from __future__ import annotations

import hashlib
import sys
from typing import Any, Callable

import torch

from ...stateless import init_stateless_, row_major_strides
from ..core import Action, Kind, apply, checked
from . import moe  # noqa: F401 (registers the MoE rule)
from .placement import Placement, UncoveredParameterError, placement
from .rules import FP4, platform, rule

__all__ = ["UncoveredParameterError", "fill_placed", "initialize_invariant_dummy_weights"]
__all__ += ["plan_layer", "stateless_values", "tensor_seed"]

SEED = 1234
LOAD_FORMAT = "fp8_dummy_invariant"
Entry = tuple[str, torch.Tensor, Action, Placement]
# values(full name, action, global shape) -> write(view, element_offset, element_strides):
# fills a block of the rank's tensor with the logical tensor's elements at those indices.
Values = Callable[[str, Action, tuple], Callable[[torch.Tensor, int, list], None]]


def tensor_seed(seed: int, name: str) -> int:
    """The stateless key of the tensor of full name ``name``: the first 8 bytes of
    BLAKE2b(``f"{seed}:{name}"``), little-endian: the same name gives the same key anywhere."""
    digest = hashlib.blake2b(f"{int(seed)}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _loader(t: torch.Tensor) -> Any:
    """The tensor's weight loader without vLLM's layerwise (online quantization) wrappers."""
    loader = getattr(t, "weight_loader", None)
    while loader is not None and getattr(loader, "__name__", "") == "online_process_loader":
        loader = getattr(loader, "__wrapped__", None)
    return loader


def plan_layer(prefix: str, layer: torch.nn.Module, *, materialized=True, skip=()) -> list[Entry]:
    """(full name, tensor, action, placement) of each tensor vLLM's dummy loader fills in
    ``layer``, each checked (UncoveredParameterError). ``materialized=False``: meta tensors
    too (a model checked whole first); ``skip``: names filled under another module's name."""
    act, entries = rule(33, *platform()), []
    for name, t in {**layer._parameters, **layer._buffers}.items():
        if t is None or name in skip or name in layer._non_persistent_buffers_set:
            continue
        full = f"{prefix}.{name}" if prefix else name
        action = checked(t, act(t, None, None, name))
        if action.kind is Kind.ERROR:
            raise action.value[0](f"fp8_dummy: {full}: {action.value[1]}")
        if action.kind is Kind.ENGINE:
            raise UncoveredParameterError(
                f"fp8_dummy: {full}: vLLM's TPU path has no invariant form"
            )
        if action.kind is not Kind.SKIP or (not materialized and t.device.type == "meta"):
            entries.append((full, t, action, placement(layer, name, t, _loader(t), full)))
    return entries


def stateless_values(seed: int = SEED) -> Values:
    """vLLM 0.33's values: fill/byte/zero as vLLM does; random bytes and floats drawn by
    ``init_stateless_`` of the logical tensor, keyed by :func:`tensor_seed`."""

    def values(
        name: str, action: Action, shape: tuple
    ) -> Callable[[torch.Tensor, int, list], None]:
        key = tensor_seed(seed, name)

        def write(view: torch.Tensor, offset: int, strides: list) -> None:
            if action.kind not in (Kind.RANDOM, Kind.UNIFORM):
                return apply(view, action, key)
            target = (
                view if action.low < 0 or action.kind is Kind.UNIFORM else view.view(torch.uint8)
            )
            init_stateless_(
                target, action.low, action.high, key, element_offset=offset, element_strides=strides
            )

        return write

    return values


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
        write = values(full, action, where.global_shape)
        strides = row_major_strides(where.global_shape)
        for view, piece in views:
            if view.numel():
                step = piece.step or (1,) * view.dim()
                offset = sum(o * s for o, s in zip(piece.offset, strides))
                write(view, offset, [s * k for s, k in zip(strides, step)])


def initialize_invariant_dummy_weights(model: torch.nn.Module, seed: int = SEED) -> None:
    """Fill every tensor vLLM 0.33's dummy loader fills in ``model`` (a vLLM model on this rank)
    with its slice of the logical tensor: the same bytes at every parallel layout, pipeline
    stage and device. Every tensor is checked first (:class:`UncoveredParameterError`); meta
    tensors (online quantization) are left to the load format, which fills them in order."""
    plans = [plan_layer(prefix, layer, skip=skip) for prefix, layer, skip in _modules(model)]
    for entries in plans:
        fill_placed(entries, stateless_values(seed))


def _modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, set[str]]]:
    """Each module with its name and the names of its tensors filled under an earlier module's
    name (a tensor shared by several modules, as tied embeddings, is filled once)."""
    seen: set[int] = set()
    out = []
    for prefix, layer in model.named_modules():
        own = {n: t for n, t in {**layer._parameters, **layer._buffers}.items() if t is not None}
        out.append((prefix, layer, {n for n, t in own.items() if id(t) in seen}))
        seen.update(id(t) for t in own.values())
    return out


def register_load_format(package: Any) -> None:
    """``--load-format fp8_dummy_invariant`` in vLLM's model-loader package, where its dummy
    loader has the shape this needs."""
    dl = sys.modules.get("vllm.model_executor.model_loader.dummy_loader")
    needed = ("DummyModelLoader", "get_layerwise_info", "materialize_layer", "QuantizeMethodBase")
    if dl is None or not all(hasattr(dl, n) for n in needed):
        return
    if hasattr(package, "register_model_loader") and LOAD_FORMAT not in getattr(
        package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}
    ):
        package.register_model_loader(LOAD_FORMAT)(_loader_class(dl))


def _loader_class(dl: Any) -> type:
    class FP8DummyInvariantModelLoader(dl.DummyModelLoader):
        """``--load-format fp8_dummy_invariant``: every tensor checked first; online-quantized
        layers materialized, filled and processed in the loader's order, as ``dummy`` does."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            modules, values = _modules(model), stateless_values(SEED)
            for prefix, layer, skip in modules:  # refuse before anything is written
                plan_layer(prefix, layer, materialized=False, skip=skip)
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
