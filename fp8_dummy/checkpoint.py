"""One dummy model per (config, seed, routing, format), defined over the checkpoint's tensor
names (docs/export.md): the value of each checkpoint tensor (its name and shape in the model's
published safetensors, ``model.layers.3.mlp.experts.17.down_proj.weight``) is the realistic
mode's fill (docs/realistic.md) keyed by ``tensor_seed(seed, checkpoint name)``. Every holder
of the model takes its bytes from here: transformers' in-memory tensors through the views its
own checkpoint conversion takes of them (:func:`memory_blocks`), an engine through its own
weight loader fed :class:`~fp8_dummy._lazy_tensor.LazyTensor` stand-ins (:meth:`LogicalModel.
lazy`), and ``python -m fp8_dummy export`` by writing each tensor whole (fp8_dummy/export.py).

The checkpoint's names are transformers' own: the model class the config names, built on the
meta device, its ``state_dict`` (tied tensors once) put through transformers'
``revert_weight_conversion`` (what ``save_pretrained`` writes). The quantized formats add
their tensors beside each quantized linear weight (fp8_dummy/formats.py)."""

from __future__ import annotations

import copy
import math
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._lazy_tensor import Block, LazyTensor, NotAffineError, view_map
from .formats import FORMATS, Format, config_format, quantize
from .ops import as_int64
from .realistic import BYTE_DTYPES, Spec, fill_, model_specs, model_tensors
from .realistic_arch import DEFAULT, Arch, derive
from .routing import parse_routing, plan_routing
from .stateless import tensor_seed

__all__ = ["CheckpointTensor", "LogicalModel", "UnplacedTensorError", "build_model"]
__all__ += ["checkpoint_names", "checkpoint_state", "config_checkpoint", "logical_model"]
__all__ += ["initialize_realistic_dummy_weights", "memory_blocks"]


def config_checkpoint(config: Any, seed: int = 0, *, routing: Any = "balanced") -> LogicalModel:
    """The logical checkpoint of ``config`` in its own format (:func:`config_format`): the
    checkpoint an engine would load for it, all checked before anything is made."""
    fmt = config_format(config)
    model = build_model(config, dtype=fmt.dtype)
    return logical_model(model, seed, routing=routing, format=fmt)


class UnplacedTensorError(ValueError):
    """A model whose in-memory tensors no checkpoint conversion places by views alone."""


@dataclass
class CheckpointTensor:
    """One tensor of the logical checkpoint: what it gets and where its values come from."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    spec: Spec
    key: int
    overrides: list | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class LogicalModel:
    """The logical checkpoint of one (config, seed, routing, format)."""

    tensors: dict[str, CheckpointTensor]
    config: Any
    seed: int
    format: Format | None
    skipped: list[str] = field(default_factory=list)

    def write(self, dst: torch.Tensor, block: Block) -> None:
        """Fill ``dst`` with the elements ``block`` names of its checkpoint tensor."""
        t = self.tensors[block.source]
        where = dict(element_offset=block.offset, element_strides=list(block.strides))
        fill_(dst, t.spec, t.key, **where, overrides=t.overrides, logical_shape=t.shape)

    def fill(self, name: str, dst: torch.Tensor) -> torch.Tensor:
        """The checkpoint tensor ``name`` whole, written into ``dst`` (its shape)."""
        t = self.tensors[name]
        if tuple(dst.shape) != t.shape:
            raise ValueError(
                f"fp8_dummy: {name}: shape {tuple(dst.shape)}, the checkpoint's {t.shape}"
            )
        self.write(dst, Block.whole(name, t.shape))
        return dst

    def lazy(self, name: str, device: torch.device | str = "cpu") -> LazyTensor:
        """A stand-in for the checkpoint tensor ``name`` that an engine's loader can narrow,
        transpose and copy into its parameters; the values are written at the copy."""
        t = self.tensors[name]
        return LazyTensor.of(name, t.shape, t.dtype, self.write, device=device)

    def items(self) -> Iterator[tuple[str, LazyTensor]]:
        """(checkpoint name, stand-in) in the checkpoint's order: a weights iterator."""
        for name in self.tensors:
            yield name, self.lazy(name)

    def quantization_config(self) -> dict | None:
        return self.format.quantization_config(self.skipped) if self.format else None

    @property
    def specs(self) -> dict[str, Spec]:
        return {n: t.spec for n, t in self.tensors.items()}


def is_transformers_model(model: torch.nn.Module) -> bool:
    return any(c.__module__.startswith("transformers.") for c in type(model).__mro__) and hasattr(
        model, "config"
    )


def build_model(config: Any, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The transformers model class ``config`` names, on the meta device (no memory); the
    class itself, not the quantized stand-ins a ``quantization_config`` would swap in."""
    import transformers

    if getattr(config, "quantization_config", None) is not None:
        config = copy.copy(config)
        del config.quantization_config

    kw = {"dtype": dtype} if dtype is not None else {}
    errors = []
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        try:
            with torch.device("meta"):
                return auto.from_config(config, **kw)
        except (ValueError, KeyError) as e:
            errors.append(f"{auto.__name__}: {e}")
    raise ValueError(f"fp8_dummy: no transformers model class for this config: {'; '.join(errors)}")


def _own_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict tensors, each tied tensor once (under its first name)."""
    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t
    return out


def memory_blocks(model: torch.nn.Module) -> dict[str, Block]:
    """Checkpoint name -> where its elements lie in the in-memory tensor (``block.source``):
    transformers' save conversion run on stand-ins; identity for other models."""
    own = _own_tensors(model)
    if not is_transformers_model(model):
        return {n: Block.whole(n, tuple(t.shape)) for n, t in own.items()}
    from transformers.core_model_loading import revert_weight_conversion

    try:
        return view_map(lambda d: revert_weight_conversion(model, d), own)
    except NotAffineError as e:
        raise UnplacedTensorError(
            f"fp8_dummy: {type(model).__name__}: transformers' checkpoint conversion of this "
            f"model is not views of its tensors ({e}), so its checkpoint names cannot be placed"
        ) from None


def checkpoint_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Checkpoint name -> a view of the in-memory tensor that holds it (tied names too):
    what ``save_pretrained`` would write, without a copy."""
    own = _own_tensors(model)
    out = dict(_views(own, memory_blocks(model)))
    first = {id(t): n for n, t in own.items()}
    for name, t in model.state_dict(keep_vars=True).items():
        if name not in own and first.get(id(t)) in out:
            out[name] = out[first[id(t)]]
    return out


def _views(own: Mapping[str, torch.Tensor], blocks: Mapping[str, Block]):
    """(checkpoint name, the view of its in-memory tensor that holds it), meta ones too."""
    for name, b in blocks.items():
        src = own[b.source].detach()
        if not src.is_meta and not src.is_contiguous():
            raise UnplacedTensorError(f"fp8_dummy: {b.source}: not contiguous in memory")
        yield name, src.as_strided(b.shape, b.strides, src.storage_offset() + b.offset)


def checkpoint_names(model: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Checkpoint name -> (shape, dtype) of an unquantized checkpoint of ``model``."""
    own = _own_tensors(model)
    return {n: (b.shape, own[b.source].dtype) for n, b in memory_blocks(model).items()}


def _module(model: torch.nn.Module, name: str, fallback: str) -> torch.nn.Module:
    owner = name.rpartition(".")[0]
    for path in (owner, fallback.rpartition(".")[0]):
        try:
            return model.get_submodule(path) if path else model
        except AttributeError:
            continue
    return torch.nn.Module()


def logical_model(
    model: torch.nn.Module,
    seed: int = 0,
    *,
    routing: Any = "balanced",
    num_layers: int | None = None,
    format: str | Format | None = None,
    arch: Arch | None = None,
    blocks: Mapping[str, Block] | None = None,
) -> LogicalModel:
    """The logical checkpoint of ``model`` (a transformers model, on meta or real; its
    in-memory dtypes, or ``format``'s: :data:`FORMATS`), all checked before anything is
    written; ``arch``: default :func:`realistic_arch.derive` (the plain rule on meta)."""
    seed = as_int64(seed, "seed", "fp8_dummy") % (1 << 64)
    profile = parse_routing(routing)
    fmt = format if isinstance(format, Format) else None
    if isinstance(format, str):
        if format not in FORMATS:
            raise ValueError(
                f"fp8_dummy: unknown format {format!r}; the formats: {', '.join(FORMATS)}"
            )
        fmt = FORMATS[format]
    blocks = memory_blocks(model) if blocks is None else blocks
    own = _own_tensors(model)
    arch = (derive(model) if not _on_meta(model) else _derive_twin(model)) if arch is None else arch
    entries = []
    built = _built_dtype(own)
    for name, b in blocks.items():
        dtype = own[b.source].dtype
        if fmt is not None and dtype.is_floating_point:
            dtype = torch.float32 if _kept_fp32(model, name, dtype, built) else fmt.dtype
        stand_in = torch.empty(b.shape, dtype=dtype, device="meta")
        entries.append((_module(model, name, b.source), name, stand_in, b.shape))
    arch = _renamed(arch, blocks)
    specs = model_specs(model, entries, num_layers, arch)
    skipped: list[str] = []
    if fmt is not None and fmt.quant is not None:
        entries, skipped = quantize(entries, specs, fmt)
        specs = model_specs(model, entries, num_layers, arch)
    shapes = {n: tuple(s) for _, n, _, s in entries}
    dtypes = {n: t.dtype for _, n, t, _ in entries}
    config = getattr(model, "config", None)
    _, overrides = plan_routing(profile, seed, config, specs, shapes, dtypes=dtypes)
    tensors = {
        n: CheckpointTensor(
            n, shapes[n], dtypes[n], specs[n], tensor_seed(seed, n), overrides.get(n)
        )
        for _, n, _, _ in entries
    }
    return LogicalModel(tensors, config, seed, fmt, skipped)


def _renamed(arch: Arch, blocks: Mapping[str, Block]) -> Arch:
    """The facts (found on in-memory module and tensor names) under the checkpoint's names:
    each checkpoint tensor's owner gets its in-memory tensor's owner's facts."""
    post, residual, gains, offset = set(arch.post), set(arch.residual), set(arch.gains), {}
    offset.update(arch.offset)
    for name, b in blocks.items():
        owner, source = name.rpartition(".")[0], b.source.rpartition(".")[0]
        if name == b.source:
            continue
        post.update([owner] if source in arch.post else [])
        residual.update([owner] if source in arch.residual else [])
        gains.update([name] if b.source in arch.gains else [])
        if source in arch.offset:
            offset[owner] = arch.offset[source]
    return arch._replace(
        post=frozenset(post), residual=frozenset(residual), gains=frozenset(gains), offset=offset
    )


TWINBYTE_DTYPES = 1 << 30  # the largest model built for real to probe its architecture's facts


def _derive_twin(model: torch.nn.Module) -> Arch:
    """The facts of a model on the meta device: probed on a twin built on the CPU from the same
    config, in the model's dtype, where it takes at most :data:`TWINBYTE_DTYPES` in float32 (small
    and test models, so that their export is their in-memory fill), else the plain rule
    (docs/export.md)."""
    if not is_transformers_model(model):
        return DEFAULT
    size = sum(t.numel() for t in _own_tensors(model).values()) * 4
    if size > TWINBYTE_DTYPES:
        return DEFAULT
    floats = [t.dtype for t in _own_tensors(model).values() if t.dtype.is_floating_point]
    dtype = max(set(floats), key=floats.count) if floats else torch.float32
    try:
        with torch.device("cpu"):  # in the model's own dtype: the probes are run in it
            twin = type(model)._from_config(model.config, dtype=dtype)
    except Exception:  # a class that cannot be built here: the plain rule, as for vLLM's
        return DEFAULT
    return derive(twin)


def _built_dtype(own: Mapping[str, torch.Tensor]) -> torch.dtype:
    """The floating dtype most of the model's elements are in: the dtype it was built in."""
    sizes: dict[torch.dtype, int] = {}
    for t in own.values():
        if t.dtype.is_floating_point:
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    return max(sizes, key=sizes.__getitem__) if sizes else torch.float32


def _kept_fp32(model: torch.nn.Module, name: str, dtype: torch.dtype, built: torch.dtype) -> bool:
    """A tensor (in-memory ``dtype``) the model class keeps in float32 whatever the dtype it
    is built in (``built``), as ``save_pretrained`` writes it: a float32 tensor in a model
    built narrower (a parameter the class makes in float32 itself: Hunyuan-MoE's router; a
    narrower copy loaded into it would not be the in-memory fill's bytes), or one transformers'
    ``_keep_in_fp32_modules_strict`` names (DeepSeek's correction bias)."""
    if dtype == torch.float32 and built != torch.float32:
        return True
    keep = getattr(model, "_keep_in_fp32_modules_strict", None) or ()
    return any(re.search(rf"(?:^|\.){re.escape(k)}(?:\.|$)", name) for k in keep)


def _on_meta(model: torch.nn.Module) -> bool:
    return any(t.is_meta for t in _own_tensors(model).values())


def fill_model(model: torch.nn.Module, lm: LogicalModel, blocks: Mapping[str, Block]) -> None:
    """Write each checkpoint tensor of ``lm`` where ``blocks`` puts it in ``model``."""
    for name, view in _views(_own_tensors(model), blocks):
        if not view.is_meta:
            lm.write(view, Block.whole(name, lm.tensors[name].shape))


def config_of(path: str | os.PathLike) -> Any:
    """A transformers config from a config.json or a directory holding one."""
    import transformers

    p = os.fspath(path)
    d = os.path.dirname(p) if os.path.isfile(p) else p
    if not os.path.isfile(os.path.join(d, "config.json")):
        raise FileNotFoundError(f"fp8_dummy: no config.json at {p}")
    if os.path.isfile(p) and os.path.basename(p) != "config.json":
        return transformers.AutoConfig.from_pretrained(p)
    return transformers.AutoConfig.from_pretrained(d)


def initialize_realistic_dummy_weights(
    model: torch.nn.Module, seed: int = 0, *, num_layers: int | None = None,
    routing: str | os.PathLike = "balanced",
) -> dict[str, Spec]:  # fmt: skip
    """Fill what vLLM's dummy loader fills in ``model`` by role, keyed by ``(seed, full name)``,
    all checked first; full name -> :class:`Spec` (role "unknown": assumed; docs/realistic.md).
    ``routing``: ``"balanced"``, ``"zipf:A"`` or a recorded load's JSON file (docs/realistic.md,
    Routing)."""
    # one seed domain (tensor_seed's): an int in [-2^63, 2^64), read modulo 2^64 as torch does
    seed = as_int64(seed, "seed", "initialize_realistic_dummy_weights") % (1 << 64)
    profile = parse_routing(routing)
    from . import checkpoint  # at call time: it builds on this module
    from .engines.core import unwritable  # at call time: engines' vLLM imports this

    if checkpoint.is_transformers_model(model):  # keyed by the checkpoint's names
        try:
            blocks = memory_blocks(model)
        except UnplacedTensorError as e:  # keyed by the in-memory names instead
            warnings.warn(f"{e}; its tensors are keyed by their in-memory names", stacklevel=2)
        else:
            return _fill_logical(model, seed, num_layers, profile, unwritable, blocks)

    tensors = model_tensors(model)
    specs = model_specs(model, tensors, num_layers)
    for _, name, t, _ in tensors:
        if t.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"fp8_dummy: {name}: device {t.device} (CPU, CUDA or meta)")
        if t.device.type == "meta":
            specs[name] = Spec("deferred", "skip")
    for _, name, t, _ in tensors:  # every tensor checked before any is written
        spec = specs[name]
        raw = t.data.view(torch.uint8) if t.dtype in BYTE_DTYPES else t.data
        why = None if spec.kind == "skip" else unwritable(raw, spec.kind != "const")
        if why is not None:
            raise RuntimeError(f"fp8_dummy.initialize_realistic_dummy_weights: {name}: {why}")
    shapes = {name: tuple(shape) for _, name, _, shape in tensors}
    config = getattr(model, "config", None)
    dtypes = {name: t.dtype for _, name, t, _ in tensors}
    _, overrides = plan_routing(profile, seed, config, specs, shapes, dtypes=dtypes)
    done: set[int] = set()
    for _, name, t, _ in tensors:
        if id(t) not in done:
            done.add(id(t))
            fill_(t, specs[name], tensor_seed(seed, name), overrides=overrides.get(name))
    return specs


def _fill_logical(model, seed, num_layers, profile, unwritable, blocks) -> dict[str, Spec]:
    """A transformers model: each checkpoint tensor of the logical model (fp8_dummy.checkpoint)
    written where transformers' own conversion puts it in memory, all checked first."""
    lm = logical_model(model, seed, routing=profile, num_layers=num_layers, blocks=blocks)
    own = _own_tensors(model)
    specs = lm.specs
    for name, b in blocks.items():
        t = own[b.source]
        if t.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"fp8_dummy: {b.source}: device {t.device} (CPU, CUDA or meta)")
        if t.device.type == "meta":
            specs[name] = Spec("deferred", "skip")
    for name, b in blocks.items():  # every tensor checked before any is written
        t, spec = own[b.source], specs[name]
        raw = t.data.view(torch.uint8) if t.dtype in BYTE_DTYPES else t.data
        why = None if spec.kind == "skip" else unwritable(raw, spec.kind != "const")
        if why is not None:
            raise RuntimeError(f"fp8_dummy.initialize_realistic_dummy_weights: {b.source}: {why}")
    fill_model(model, lm, blocks)
    first = {id(t): n for n, t in own.items()}
    for name, t in model.state_dict(keep_vars=True).items():  # tied names: their tensor's spec
        if name not in own and first.get(id(t)) in specs:
            specs[name] = specs[first[id(t)]]
    return specs
