"""Dummy weights that are one model at every parallel layout: each rank's tensor holds the
slice of the logical (TP=1, EP=1, unpadded) tensor that vLLM's own weight loader would put
there from a checkpoint (``fp8_dummy.vllm.initialize_invariant_dummy_weights``; the load
format ``fp8_dummy_invariant``).

Values: vLLM 0.33's dummy rules per tensor (:func:`fp8_dummy._engine_common.vllm_action`:
``dummy_weight_value``, byte 120 for E8M0 and uint8 scales, ±1.0 for 8-bit floats and
±1e-3 wider, random bytes for int8/uint8/packed FP4), with the random values drawn by the
stateless mode (:func:`fp8_dummy.init_stateless_`) of the logical tensor, keyed by the
tensor's fully qualified name (:func:`tensor_seed`). So the bytes depend on (seed, name,
logical shape, dtype) only: not on TP, EP, PP, DP or the device. Where each rank's tensor
sits in the logical one: :mod:`fp8_dummy._vllm_placement`. Elements no checkpoint element
reaches (vocabulary padding, LoRA rows, padded MoE rows) are zero.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ._engine_common import vllm_action
from ._vllm_placement import Placement, UncoveredParameterError, placement
from .model import apply_action
from .stateless import init_stateless_, row_major_strides

__all__ = [
    "UncoveredParameterError",
    "initialize_invariant_dummy_weights",
    "plan_layer",
    "tensor_seed",
]

SEED = 1234
_FP4 = getattr(torch, "float4_e2m1fn_x2", None)


def tensor_seed(seed: int, name: str) -> int:
    """The stateless key of the tensor named ``name`` (its fully qualified name in the model,
    e.g. ``model.layers.0.self_attn.qkv_proj.weight``): the first 8 bytes of
    BLAKE2b(``f"{seed}:{name}"``), little-endian, as an unsigned 64-bit seed. Distinct names
    give independent Philox keys; the same name gives the same key on every process."""
    digest = hashlib.blake2b(f"{int(seed)}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _loader(t: torch.Tensor) -> Any:
    """The tensor's weight loader with vLLM's layerwise (online quantization) wrappers
    removed, or None."""
    loader = getattr(t, "weight_loader", None)
    while loader is not None and getattr(loader, "__name__", "") == "online_process_loader":
        loader = getattr(loader, "__wrapped__", None)
    return loader


def _platform() -> tuple[bool, bool]:
    from . import vllm as fv

    return fv._vllm_platform()


Entry = tuple[str, torch.Tensor, Any, "Placement | None"]


def plan_layer(
    prefix: str, layer: torch.nn.Module, *, materialized: bool = True, skip: set[str] = frozenset()
) -> list[Entry]:
    """(full name, tensor, action, placement) for each tensor vLLM's dummy loader fills in
    ``layer`` (its own parameters and persistent buffers), checking every one: raises
    :class:`UncoveredParameterError` (naming the tensor, its class and the layer's class)
    for a tensor no rule covers. ``materialized=False``: meta tensors are planned too (their
    placements checked), so a model can be checked whole before anything is written.
    ``skip``: names of tensors to leave out (filled under another module's name)."""
    tpu, rocm = _platform()
    entries: list[Entry] = []
    tensors = dict(layer._parameters)
    tensors.update(
        (n, b) for n, b in layer._buffers.items() if n not in layer._non_persistent_buffers_set
    )
    for name, t in tensors.items():
        if t is None or name in skip:
            continue
        full = f"{prefix}.{name}" if prefix else name
        action = vllm_action(t, None, None, name, 33, tpu=tpu, rocm=rocm)
        if action.kind == "error":
            kind, message = action.value
            raise kind(f"fp8_dummy: {full}: {message}")
        if action.kind == "skip" and (materialized or t.device.type != "meta"):
            continue
        if action.kind in ("tpu", "call"):
            raise UncoveredParameterError(
                f"fp8_dummy: {full}: vLLM's {action.kind} path has no invariant counterpart"
            )
        try:
            where = placement(layer, name, t, _loader(t))
        except UncoveredParameterError as e:
            text = str(e)
            if not text.startswith("fp8_dummy: no invariant rule"):
                text = (
                    f"fp8_dummy: no invariant rule for parameter {full!r} "
                    f"({type(t).__name__}) of layer {type(layer).__name__}: {text}"
                )
            else:
                text = text.replace(f"parameter {name!r}", f"parameter {full!r}", 1)
            raise UncoveredParameterError(text) from None
        entries.append((full, t, action, where))
    return entries


@torch.no_grad()
def fill_entries(entries: list[Entry], seed: int = SEED) -> None:
    """Write each planned tensor: zero what no piece covers, then each piece's values."""
    for full, t, action, where in entries:
        if action.kind == "skip" or t.device.type == "meta":
            continue
        data = t.data
        if data.device.type not in ("cpu", "cuda"):
            raise UncoveredParameterError(f"fp8_dummy: {full}: device {data.device} (CPU, CUDA)")
        views = [(data[piece.local], piece) for piece in where.pieces]
        if sum(v.numel() for v, _ in views) != data.numel():
            data.view(torch.uint8).zero_() if data.dtype == _FP4 else data.zero_()
        key = tensor_seed(seed, full)
        strides = row_major_strides(where.global_shape)
        for view, piece in views:
            if view.numel() == 0:
                continue
            step = piece.step or (1,) * view.dim()
            offset = sum(o * s for o, s in zip(piece.offset, strides))
            gstrides = [s * k for s, k in zip(strides, step)]
            _fill(view, action, key, offset, gstrides)


def _fill(view: torch.Tensor, action: Any, key: int, offset: int, strides: list[int]) -> None:
    kind = action.kind
    if kind in ("fill", "byte", "zero"):  # no random numbers: as the engine does them
        apply_action(view, action, key)
    else:
        if kind == "int8":
            target, low, high = view, -128, 128
        elif kind == "uint8":
            target, low, high = view.view(torch.uint8), 0, 256
        else:
            target, low, high = view, action.low, action.high
        init_stateless_(target, low, high, key, element_offset=offset, element_strides=strides)


def initialize_invariant_dummy_weights(model: torch.nn.Module, seed: int = SEED) -> None:
    """Fill every tensor vLLM 0.33's dummy loader fills in ``model`` (a vLLM model on this
    rank) so that it holds its slice of the logical TP=1/EP=1 tensor, the same bytes at
    every parallel layout, pipeline stage and device (module docstring). Every tensor is
    checked before anything is written: a sharded tensor, or one with a custom
    ``weight_loader``, that no rule covers raises :class:`UncoveredParameterError`. Layers
    whose tensors are still on the meta device (online quantization) are skipped here; the
    load format ``fp8_dummy_invariant`` handles them in the loader's order."""
    plans = [plan_layer(prefix, layer, skip=skip) for prefix, layer, skip in _modules(model)]
    for entries in plans:
        fill_entries(entries, seed)


def _modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, set[str]]]:
    """Each module once with its name (``model.modules()``' order) and the names of its
    tensors to leave out: a tensor shared by several modules (tied embeddings) is filled
    once, under its first name."""
    seen: set[int] = set()
    out = []
    for prefix, layer in model.named_modules():
        own = {n: t for n, t in {**layer._parameters, **layer._buffers}.items() if t is not None}
        out.append((prefix, layer, {n for n, t in own.items() if id(t) in seen}))
        seen.update(id(t) for t in own.values())
    return out


LOAD_FORMAT = "fp8_dummy_invariant"


def register_load_format(package: Any) -> None:
    """Register ``--load-format fp8_dummy_invariant`` in vLLM's model-loader package (the
    plugin calls this once vLLM imports it). A loader whose shape we do not know: nothing."""
    import sys

    dl = sys.modules.get("vllm.model_executor.model_loader.dummy_loader")
    needed = ("DummyModelLoader", "get_layerwise_info", "materialize_layer", "QuantizeMethodBase")
    if dl is None or not all(hasattr(dl, n) for n in needed):
        return
    if LOAD_FORMAT in getattr(package, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        return
    if hasattr(package, "register_model_loader"):
        package.register_model_loader(LOAD_FORMAT)(_loader_class(dl))


def _loader_class(dl: Any) -> type:
    class FP8DummyInvariantModelLoader(dl.DummyModelLoader):
        """``--load-format fp8_dummy_invariant``: dummy weights that are the same model at
        every TP/EP/PP/DP layout and on every device (fp8_dummy.vllm_invariant). Every tensor
        is checked first; online-quantized layers are materialized, filled and processed in
        the loader's order, as ``dummy`` does."""

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            modules = _modules(model)
            for prefix, layer, skip in modules:  # refuse before anything is written
                plan_layer(prefix, layer, materialized=False, skip=skip)
            for prefix, layer, skip in modules:
                info = dl.get_layerwise_info(layer)
                if not info.can_load():
                    fill_entries(plan_layer(prefix, layer, skip=skip))
                    continue
                dl.materialize_layer(layer, info)
                fill_entries(plan_layer(prefix, layer, skip=skip))
                for tensor in list(layer._parameters.values()) + list(layer._buffers.values()):
                    if tensor is not None and hasattr(tensor, "weight_loader"):
                        tensor.weight_loader = _loader(tensor)
                quant_method = getattr(layer, "quant_method", None)
                if isinstance(quant_method, dl.QuantizeMethodBase):
                    quant_method.process_weights_after_loading(layer)
                info.reset()

    return FP8DummyInvariantModelLoader
