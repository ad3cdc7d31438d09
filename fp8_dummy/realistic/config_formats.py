"""The format of the checkpoint a config describes (docs/export.md): its
``quantization_config``'s method, block size and list of modules left unquantized, else its
dtype; what an engine given that config loads, and what ``export`` writes unless told another."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from .formats import FORMATS, NVFP4_GROUP, ROUTED_EXPERTS, Format, UnsupportedFormatError

__all__ = ["config_format"]

_FLOATS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# ModelOpt's method as the checkpoint names it, and as SGLang names it in the config it hands a
# model's class: SGLang's model config rewrites the checkpoint's "modelopt" in place to the
# method it picked by the quant_algo ("modelopt_fp4" for NVFP4); the same checkpoint either way
MODELOPT = ("modelopt", "modelopt_fp4")


def _dtype_of(config: Any) -> torch.dtype:
    own = getattr(config, "__dict__", {})  # not transformers' deprecated torch_dtype property
    floats = own.get("dtype") or own.get("torch_dtype")
    if isinstance(floats, str):
        floats = getattr(torch, floats, None)
    return floats if floats in _FLOATS else torch.bfloat16


def config_format(config: Any) -> Format:
    """The format of the checkpoint ``config`` describes: its ``quantization_config``'s (the
    "fp8" method, per tensor or per block of its ``weight_block_size``; compressed-tensors'
    FP8 per channel; ModelOpt's NVFP4; GPT-OSS's MXFP4), else its dtype's (float16: fp16;
    otherwise bf16). What an engine given this config loads, and what ``export`` writes
    unless told another."""
    floats = _dtype_of(config)
    q = getattr(config, "quantization_config", None)
    if q is None:
        return FORMATS[_FLOATS[floats]]
    q = q if isinstance(q, dict) else q.to_dict() if hasattr(q, "to_dict") else q
    if not isinstance(q, dict):
        raise UnsupportedFormatError(
            f"fp8_dummy: quantization_config is a {type(q).__name__}, not an object"
        )
    method = q.get("quant_method")
    keep = _kept_modules(q)
    strategy = _fp8_dynamic(q) if method == "compressed-tensors" else None
    if strategy is not None:
        name = "fp8-channel" if strategy == "channel" else "fp8"
        return replace(FORMATS[name], dtype=floats, keep=keep)
    if method == "mxfp4":
        return replace(FORMATS["mxfp4"], dtype=floats, keep=keep)
    if method in MODELOPT and str(q.get("quant_algo", "")).upper() == "NVFP4":
        if q.get("group_size", NVFP4_GROUP) != NVFP4_GROUP:
            raise UnsupportedFormatError(f"fp8_dummy: NVFP4 group_size {q['group_size']}: 16")
        return replace(FORMATS["nvfp4"], dtype=floats, keep=keep)
    if method != "fp8" or q.get("fmt", "e4m3") != "e4m3":
        kind = q.get("fmt") or q.get("quant_algo") or ""
        raise UnsupportedFormatError(
            f"fp8_dummy: quantization_config {method!r} ({kind}): the checkpoints fp8_dummy "
            f"makes are {', '.join(FORMATS)}"
        )
    if q.get("activation_scheme", "dynamic") != "dynamic":
        raise UnsupportedFormatError(
            "fp8_dummy: quantization_config with activation_scheme "
            f"{q.get('activation_scheme')!r}: static activation scales (input_scale) are not made"
        )
    block = q.get("weight_block_size")
    if block is None:
        return replace(FORMATS["fp8"], dtype=floats, keep=keep)
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and b > 0 for b in block)
    ):
        raise UnsupportedFormatError(f"fp8_dummy: weight_block_size {block!r}: two positive ints")
    what = f"e4m3 linear weights, float32 weight_scale_inv per {block[0]}x{block[1]} block"
    return replace(
        FORMATS["fp8-block"], dtype=floats, description=what, block=tuple(block), keep=keep
    )


def _kept_modules(q: Mapping) -> tuple[str, ...]:
    """The modules a quantization_config leaves unquantized, as written (its method's key)."""
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules"):
        found = q.get(key)
        if isinstance(found, list) and all(isinstance(m, str) for m in found):
            return tuple(found)
    return ()


def _fp8_dynamic(q: Mapping) -> str | None:
    """ "channel" or "tensor" for a compressed-tensors config whose every group is FP8 weights
    of that one strategy with dynamic per-token activations (what fp8-channel and fp8 write),
    else None. Per tensor also with a group of the routed experts per channel, targeted by
    :data:`~.formats.ROUTED_EXPERTS` alone (what fp8 writes for an MoE)."""
    groups = list((q.get("config_groups") or {}).values())
    strategies = set()
    for g in groups:
        w, a = g.get("weights") or {}, g.get("input_activations") or {}
        if (w.get("type"), w.get("num_bits")) != ("float", 8):
            return None
        if a and (a.get("type"), a.get("num_bits"), a.get("dynamic")) != ("float", 8, True):
            return None
        experts = w.get("strategy") == "channel" and g.get("targets") == [ROUTED_EXPERTS]
        strategies.add("experts" if experts else w.get("strategy"))
    if strategies == {"tensor", "experts"}:
        return "tensor"
    if "experts" in strategies:  # the experts' group beside no per-tensor one: not fp8's
        return None
    return (
        strategies.pop() if len(strategies) == 1 and strategies <= {"channel", "tensor"} else None
    )
