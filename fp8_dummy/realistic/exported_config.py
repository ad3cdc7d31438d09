"""The ``config.json`` an export writes: the caller's config as written (every key under the
name the caller gave it: an engine that reads the raw file, not transformers' class, finds
what it expects), with the export's dtype and format, and every architecture fact the logical
model assumed written out, so that no reader falls back to a default of its own:

- the keys the transformers class reads with their values there (its defaults included:
  DeepSeek-V3's ``n_group``, ``topk_group``), but not under a second name where the caller
  wrote the first (``num_experts`` stays; no ``num_local_experts`` beside it), nor
  transformers' ``rope_parameters`` where the caller wrote ``rope_theta``/``rope_scaling``:
  the RoPE as those keys, every reader's, where the caller left them out; nor the layer-type
  lists transformers derives from Nemotron-H's pattern strings where the caller wrote those;
- ``architectures``: the class the model was built as;
- for routers that add a correction bias to sigmoid scores (DeepSeek-V3's class always does),
  ``scoring_func`` and ``topk_method`` ("noaux_tc"): a reader defaulting to softmax or greedy
  builds another router, or none for the bias."""

from __future__ import annotations

import json
from typing import Any

import torch

from .logical import LogicalModel
from .routing import find_routers

__all__ = ["config_json"]

_NOT_COPIED = {"transformers_version", "dtype", "torch_dtype", "quantization_config"}
# A key transformers' class derives from a legacy one the caller wrote, in its own newer
# vocabulary (Nemotron-H's pattern strings -> layer-type lists of "linear_attention", ...):
# the caller's key alone, which older readers (SGLang 0.5.23's config class) also take.
_DERIVED = {"hybrid_override_pattern": "layers_block_type",
            "mtp_hybrid_override_pattern": "mtp_layers_block_type"}  # fmt: skip


def _rope(params: Any) -> dict:
    """transformers' ``rope_parameters`` as the keys every reader knows."""
    if not isinstance(params, dict) or "rope_theta" not in params:
        return {}
    out: dict[str, Any] = {"rope_theta": params["rope_theta"]}
    rest = {k: v for k, v in params.items() if k != "rope_theta"}
    if rest.get("rope_type", "default") != "default":
        out["rope_scaling"] = rest
    return out


def config_json(
    config: Any, lm: LogicalModel, floats: torch.dtype, raw: dict | None, architecture: str
) -> bytes:
    """The exported config.json's bytes; ``raw``: the caller's file as written (None: a config
    object, written as transformers writes it)."""
    theirs = json.loads(config.to_json_string(use_diff=True))
    data = dict(raw) if raw is not None else dict(theirs)
    written = set(data)
    aliases = getattr(type(config), "attribute_map", {}) or {}
    named = {target for alias, target in aliases.items() if alias in written}
    named |= {alias for alias, target in aliases.items() if target in written}
    named |= {derived for legacy, derived in _DERIVED.items() if legacy in written}
    for key, value in theirs.items():
        if key in written or key in named or key in _NOT_COPIED:
            continue
        if key == "rope_parameters":  # as the keys every reader knows, the caller's kept
            if "rope_parameters" not in written:
                for name, v in _rope(value).items():
                    data.setdefault(name, v)
            continue
        data[key] = value
    if not data.get("architectures"):
        data["architectures"] = [architecture]
    _router_facts(data, lm)
    dtype = str(floats).removeprefix("torch.")
    data["dtype"] = dtype
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype
    data.pop("quantization_config", None)
    quant = lm.quantization_config()
    if quant is not None:
        data["quantization_config"] = quant
    return (json.dumps(data, indent=2) + "\n").encode()


def _router_facts(data: dict, lm: LogicalModel) -> None:
    """The routing facts the logical model assumed, where the config left them implicit."""
    roles = {n: t.spec.role for n, t in lm.tensors.items()}
    shapes = {n: t.shape for n, t in lm.tensors.items()}
    try:
        routers = find_routers(roles, shapes, lm.config)
    except ValueError:  # a router the fill does not route: nothing assumed about it
        return
    for r in routers:
        if r.realize == "correction":
            data.setdefault("scoring_func", r.score)
            data.setdefault("topk_method", "noaux_tc")
            return
