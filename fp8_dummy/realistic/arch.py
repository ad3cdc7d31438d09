"""The architecture facts the realistic rule needs beyond a tensor's name and shape, found by
probing the model itself, never by its name (docs/realistic.md#the-rule-per-architecture):
which norms sit on a residual branch's output (post-norm, sandwich), which norms compute
``(c + w) * x / rms(x)`` (Gemma's c = 1), by what the model's code multiplies the embedding
lookup (Gemma's √hidden), what a MoE block's combine weights sum to (Inkling's 8), which
experts' weights take a non-negative activation (Nemotron-H's squared ReLU), and by what it
multiplies an inner norm's output before a linear reads it (LongCat-Flash's MLA). Only
transformers models are probed (a forward of 8 tokens, nothing written); any other model, or
a probe that fails, gets :data:`DEFAULT`, the plain pre-norm rule (vLLM's load format has no
model forward to probe)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from . import facts_cache
from .combine import block_calls, combine_gains, moe_routers
from .hf_model import is_transformers_model, own_tensors
from .multipliers import norm_multipliers
from .nonnegative import Products, nonnegative_inputs
from .offsets import norm_offsets
from .probes import (
    dataflow,
    decoder_layers,
    embed_scale,
    layer_gains,
    shrinks_residual,
)
from .twin import build_twin

__all__ = ["DEFAULT", "TWIN_BUDGET_BYTES", "Arch", "derive", "derive_twin"]


class Arch(NamedTuple):
    """What the rule adapts to; the defaults are the plain pre-norm transformer's."""

    embed_scale: float = 1.0  # what the code multiplies the embedding lookup by
    post: frozenset = frozenset()  # module names of norms applied to a branch's output
    offset: Mapping[str, float] = {}  # module name -> c of a (c + w) norm
    residual: frozenset = frozenset()  # module names of each branch's last linear
    gains: frozenset = frozenset()  # tensor names of a layer's own vectors and scalars
    combine: Mapping[str, float] = {}  # module name -> the MoE combine weights' sum on it
    centered: frozenset = frozenset()  # tensor names of expert weights of non-negative inputs
    multiplier: Mapping[str, float] = {}  # norm module name -> what the code multiplies it by

    def norm_value(self, module: str, layers: int) -> float:
        """The constant a norm's weight gets: an effective gain of 1, or 1/√(2L) on a
        residual branch's output (the branch then adds as much as GPT-2's scaled
        ``o_proj``/``down_proj`` do), divided by what the code multiplies the norm's output
        by, less the norm's own offset."""
        gain = (2 * layers) ** -0.5 if module in self.post else 1.0
        return gain / self.multiplier.get(module, 1.0) - self.offset.get(module, 0.0)


DEFAULT = Arch()


TWIN_BUDGET_BYTES = 1 << 30  # the largest model built for real to probe its architecture's facts


def derive_twin(model: torch.nn.Module) -> Arch:
    """The facts of a model on the meta device: probed on a twin built on the CPU from the same
    config, in the model's dtype, where it takes at most :data:`TWIN_BUDGET_BYTES` in float32 (small
    and test models, so that their export is their in-memory fill), else the plain rule
    (docs/export.md); its random draws the stateless fill's (:mod:`.twin`). Facts probed
    without a warning are kept on disk for later processes (:mod:`.facts_cache`)."""
    if not is_transformers_model(model):
        return DEFAULT
    own = own_tensors(model).values()  # a walk of the model's state_dict: once
    if sum(t.numel() for t in own) * 4 > TWIN_BUDGET_BYTES:
        return DEFAULT
    floats = [t.dtype for t in own if t.dtype.is_floating_point]
    dtype = max(set(floats), key=floats.count) if floats else torch.float32
    key = (
        facts_cache.key(type(model), model.config, dtype, model) if facts_cache.enabled() else None
    )
    cached = facts_cache.load(key, Arch) if key is not None else None
    if cached is not None:
        return cached
    # the caller's generator left as it was, as a read from the cache leaves it (a class's
    # own initialization can draw from it while the twin is built)
    with torch.random.fork_rng(devices=[]):
        try:  # in the model's own dtype: the probes are run in it
            twin = build_twin(type(model), model.config, dtype)
        except Exception:  # a class that cannot be built here: the plain rule, as for vLLM's
            return DEFAULT
        arch, failed = _probed(twin)
    _warn(twin, failed, 3)
    if key is not None and not failed:
        facts_cache.store(key, arch)
    return arch


def derive(model: torch.nn.Module) -> Arch:
    """The model's :class:`Arch`, by probes that write nothing; :data:`DEFAULT` for a model
    that is not a transformers model, has no decoder layers, or has a tensor on neither CPU
    nor CUDA (the meta device included). A probe that fails warns and leaves its default."""
    arch, failed = _probed(model)
    _warn(model, failed, 4)
    return arch


def _warn(model: torch.nn.Module, failed: list[str], level: int) -> None:
    """One warning per failed probe, attributed to the caller ``level`` frames up."""
    for why in failed:
        warnings.warn(f"fp8_dummy: {type(model).__name__}: {why}", RuntimeWarning, stacklevel=level)


def _probed(model: torch.nn.Module) -> tuple[Arch, list[str]]:
    """:func:`derive`'s facts and what failed on the way (its warnings)."""
    failed: list[str] = []
    if not any(c.__module__.startswith("transformers.") for c in type(model).__mro__):
        return DEFAULT, failed
    params = list(model.parameters())
    if not params or any(p.device.type not in ("cpu", "cuda") for p in params):
        return DEFAULT, failed  # meta (nothing to run) or a device the fill refuses anyway
    layers = decoder_layers(model)
    if not layers:
        return DEFAULT, failed
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            # the dataflow's forward also records how the model calls its MoE blocks: the
            # combine probe then calls them so, alone (:func:`.combine.combine_gains`)
            hooks, calls = block_calls(moe_routers(layers))
            try:
                post, residual = dataflow(model, layers, failed)
            finally:
                for h in hooks:
                    h.remove()
            calls = calls if not failed else {}
            if post and shrinks_residual(model, layers[0], post, failed):
                post = frozenset()  # the code keeps the variance itself (Beam): gain 1
            gains = layer_gains(layers)
            embed = embed_scale(model, layers[0], failed)
            # the combine probe's first forward is the experts' activations probe's: run once
            watched: list[Products] = []
            combine = combine_gains(model, layers, failed, watch=_watch(watched), calls=calls)
            centered = nonnegative_inputs(model, layers, failed, *watched[:1])
            multiplier = norm_multipliers(model, layers, failed)
            offsets = norm_offsets(model)
            arch = Arch(embed, post, offsets, residual, gains, combine, centered, multiplier)
            return arch, failed
    finally:
        for m, mode in modes.items():
            m.training = mode


def _watch(watched: list) -> Callable:
    """A :class:`.nonnegative.Products` for the parameters it is called with, kept in
    ``watched``."""

    def watch(params: dict) -> Products:
        watched.append(Products(params))
        return watched[-1]

    return watch
