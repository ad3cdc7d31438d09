"""The realistic fill of a model in place (:func:`initialize_realistic_dummy_weights`): a
transformers model gets its logical checkpoint's values (:mod:`.logical`) written where
transformers' own conversion puts each checkpoint tensor in memory; any other model is filled
tensor by tensor under its in-memory names. Every tensor is checked before any is written."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from ..ops import as_int64
from ..stateless import tensor_seed
from ..tensors import BYTE_VIEWED, unwritable
from .hf_model import (
    UnplacedTensorError,
    is_transformers_model,
    memory_blocks,
    own_tensors,
    placed_views,
    vocabulary_tensors,
)
from .interleaved import InterleavedBlock, parts_of
from .lazy_tensor import Block
from .logical import LogicalModel, logical_model
from .routing import hash_specs, parse_routing, plan_routing
from .rules import Spec, stored_in_out
from .specs import model_specs, model_tensors
from .speculative import parse_acceptance, plan_acceptance
from .values import fill_

__all__ = ["fill_model", "initialize_realistic_dummy_weights"]

# An MTP layer's input projection [hidden, 2·hidden] among a model's own names (vLLM's classes)
_PROJECTION = re.compile(r"(?:^|\.)(?:eh_proj|fc)\.weight$")


def initialize_realistic_dummy_weights(
    model: torch.nn.Module, seed: int = 0, *, num_layers: int | None = None,
    routing: str | os.PathLike = "balanced", acceptance: Any = None, tokenizer: Any = None,
) -> dict[str, Spec]:  # fmt: skip
    """Fill what vLLM's dummy loader fills in ``model`` by role, keyed by ``(seed, full name)``,
    all checked first; full name -> :class:`Spec` (role "unknown": assumed; docs/realistic.md).
    ``routing``: ``"balanced"``, ``"zipf:A"`` or a recorded load's JSON file (docs/realistic.md,
    Routing). ``acceptance``: None, ``"default"``, A in [0, 1] or a per-position list: the
    designed speculative stream (docs/realistic.md, Speculative decoding); ``tokenizer``: its
    tokens' source (a tokenizer or a directory; default: the config's directory's)."""
    # one seed domain (tensor_seed's): an int in [-2^63, 2^64), read modulo 2^64 as torch does
    seed = as_int64(seed, "seed", "initialize_realistic_dummy_weights") % (1 << 64)
    profile = parse_routing(routing)
    accept = parse_acceptance(acceptance)
    if is_transformers_model(model):  # keyed by the checkpoint's names
        try:
            blocks = memory_blocks(model)
        except UnplacedTensorError as e:  # keyed by the in-memory names instead
            warnings.warn(f"{e}; its tensors are keyed by their in-memory names", stacklevel=2)
        else:
            return _fill_logical(model, seed, num_layers, profile, blocks, accept, tokenizer)

    tensors = model_tensors(model)
    specs = model_specs(model, tensors, num_layers)
    shapes = {name: tuple(shape) for _, name, _, shape in tensors}
    config = getattr(model, "config", None)
    dtypes = {name: t.dtype for _, name, t, _ in tensors}
    transposed = stored_in_out(tensors)
    # the vocabulary's tables by the class where it is transformers' (its tensors unplaced),
    # else (an engine's class) by row count (rules.added_tables)
    lookup = vocabulary_tensors(model)
    routers, overrides = plan_routing(
        profile, seed, config, specs, shapes, dtypes=dtypes, transposed=transposed, lookup=lookup
    )
    specs.update(hash_specs(routers))  # a hash router's table: the plan writes it
    if accept is not None:
        keys = {name: tensor_seed(seed, name) for name in shapes}
        wide = {n: 0 for n in shapes if _PROJECTION.search(n) and len(shapes[n]) == 2}
        replaced, more, _ = plan_acceptance(
            accept, seed, config, specs, shapes, dtypes, keys, projections=wide,
            tokenizer=tokenizer, transposed=transposed, lookup=lookup,
        )  # fmt: skip
        specs.update(replaced)
        for name, items in more.items():
            overrides.setdefault(name, []).extend(items)
    # planned first, as the logical model is (_fill_logical): every spec final (a hash
    # router's table written, a meta tensor's deferred whatever the plan) before the checks
    for _, name, t, _ in tensors:
        if t.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"fp8_dummy: {name}: device {t.device} (CPU, CUDA or meta)")
        if t.device.type == "meta":
            specs[name] = Spec("deferred", "skip")
    for _, name, t, _ in tensors:  # every tensor checked before any is written
        spec = specs[name]
        raw = t.data.view(torch.uint8) if t.dtype in BYTE_VIEWED else t.data
        why = None if spec.kind == "skip" else unwritable(raw, spec.kind != "const")
        if why is not None:
            raise RuntimeError(f"fp8_dummy.initialize_realistic_dummy_weights: {name}: {why}")
    done: set[int] = set()
    for _, name, t, _ in tensors:
        if id(t) not in done:
            done.add(id(t))
            fill_(t, specs[name], tensor_seed(seed, name), overrides=overrides.get(name))
    return specs


def _fill_logical(model, seed, num_layers, profile, blocks, accept, tokenizer) -> dict[str, Spec]:
    """A transformers model: each checkpoint tensor of the logical model (:mod:`.logical`)
    written where transformers' own conversion puts it in memory, all checked first."""
    lm = logical_model(
        model, seed, routing=profile, num_layers=num_layers, blocks=blocks, acceptance=accept,
        tokenizer=tokenizer,
    )  # fmt: skip
    own = own_tensors(model)
    specs = lm.specs
    for name, b in blocks.items():
        parts = parts_of(name, b)
        for part in parts:
            t = own[part.source]
            if t.device.type not in ("cpu", "cuda", "meta"):
                raise ValueError(f"fp8_dummy: {part.source}: device {t.device} (CPU, CUDA or meta)")
        if all(own[part.source].device.type == "meta" for part in parts):
            specs[name] = Spec("deferred", "skip")
    for name, b in blocks.items():  # every tensor checked before any is written
        spec = specs[name]
        for part in parts_of(name, b):
            t = own[part.source]
            if t.is_meta:  # a part not in memory here is not written (fill_model skips it)
                continue
            raw = t.data.view(torch.uint8) if t.dtype in BYTE_VIEWED else t.data
            why = None if spec.kind == "skip" else unwritable(raw, spec.kind != "const")
            if why is not None:
                raise RuntimeError(
                    f"fp8_dummy.initialize_realistic_dummy_weights: {part.source}: {why}"
                )
    fill_model(model, lm, blocks)
    first = {id(t): n for n, t in own.items()}
    for name, t in model.state_dict(keep_vars=True).items():  # tied names: their tensor's spec
        if name not in own and first.get(id(t)) in specs:
            specs[name] = specs[first[id(t)]]
    return specs


def fill_model(model: torch.nn.Module, lm: LogicalModel, blocks: Mapping[str, Block]) -> None:
    """Write each checkpoint tensor of ``lm`` where ``blocks`` puts it in ``model``: every view
    placed before the first is written (a tensor that cannot be placed is refused first); one
    the rule leaves untouched (an integer tensor) is left as it is."""
    own = own_tensors(model)
    plain = {n: b for n, b in blocks.items() if not isinstance(b, InterleavedBlock)}
    writes = [(v, Block.whole(n, lm.tensors[n].shape), n) for n, v in placed_views(own, plain)]
    for name, b in blocks.items():  # a tensor whose rows interleave in-memory ones: by parts
        if isinstance(b, InterleavedBlock):
            for part in b.parts:
                src = own[part.source].detach()
                if not src.is_meta and not src.is_contiguous():
                    raise UnplacedTensorError(f"fp8_dummy: {part.source}: not contiguous in memory")
                view = src.as_strided(
                    part.block.shape, part.strides, src.storage_offset() + part.offset
                )
                writes.append((view, part.block, name))
    for view, block, name in writes:
        if not view.is_meta and lm.tensors[name].spec.kind != "skip":
            lm.write(view, block)
