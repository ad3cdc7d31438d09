"""One dummy model per (config, seed, routing, format), defined over the checkpoint's tensor
names (docs/export.md): the value of each checkpoint tensor (its name and shape in the model's
published safetensors, ``model.layers.3.mlp.experts.17.down_proj.weight``) is the realistic
rule's fill (docs/realistic.md) keyed by ``tensor_seed(seed, checkpoint name)``. Every holder
of the model takes its bytes from here: transformers' in-memory tensors through the views its
own checkpoint conversion takes of them (:mod:`.inplace`), an engine through its own weight
loader fed :meth:`LogicalModel.items` (small tensors whole, larger ones
:class:`~.lazy_tensor.LazyTensor` stand-ins), and
``python -m fp8_dummy export`` by writing each tensor in windows (:mod:`.export`).

The checkpoint's names are transformers' own (:mod:`.hf_model`); the quantized formats add
their tensors beside each quantized linear weight (:mod:`.formats`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..collector import paused
from ..ops import as_int64
from ..stateless import tensor_seeds
from .arch import Arch, derive, derive_twin
from .formats import FORMATS, FUSED_EXPERTS, Format, kept, meta_tensor, quantize
from .hf_model import (
    asked,
    built_dtype,
    fp32_rule,
    memory_blocks,
    on_meta,
    own_tensors,
    vocabulary_tensors,
)
from .lazy_tensor import Block, LazyTensor
from .routing import Profile, find_routers, hash_specs, parse_routing, plan_routing
from .rules import LAYER_INDEX, Spec, residual_by_name, stored_in_out, tensor_spec
from .specs import model_specs
from .speculative import (
    carrier_rows,
    gate_rows,
    layers_plain,
    mtp_part,
    parse_acceptance,
    plan_acceptance,
)
from .speculative.unit_codes import unit_overrides, unit_specs
from .values import fill_, made_whole

__all__ = ["EAGER_BYTES", "CheckpointTensor", "LogicalModel", "logical_model"]

# An engine's loader takes a few views of each checkpoint tensor; through a stand-in each costs
# Python dispatch (tens of µs), more than writing a small tensor whole. Tensors of at most
# EAGER_BYTES are handed over as plain tensors, made EAGER_BATCH at a time (at most
# EAGER_BATCH * EAGER_BYTES held at once); larger ones stay stand-ins, written block by block.
EAGER_BYTES = 64 << 10
EAGER_BATCH = 256


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
    speculative: dict | None = None  # the designed stream's facts, where acceptance is set

    def write(self, dst: torch.Tensor, block: Block) -> None:
        """Fill ``dst`` with the elements ``block`` names of its checkpoint tensor."""
        t = self.tensors[block.source]
        if t.spec.kind == "skip":  # no values of its own: 0, not what the buffer held before
            # (the in-place fill does not write it: :func:`.inplace.fill_model`)
            dst.data.zero_()
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

    def made(self, names: Sequence[str]) -> list[torch.Tensor]:
        """The checkpoint tensors ``names``, each whole in a tensor of its own (the writer's
        default element order is the whole tensor's: no block to describe)."""
        tensors = self.tensors
        return made_whole(
            (t.shape, t.dtype, t.spec, t.key, t.overrides) for t in map(tensors.__getitem__, names)
        )

    def items(self, eager_bytes: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """(checkpoint name, tensor) in the checkpoint's order, a weights iterator: tensors of
        at most ``eager_bytes`` (default :data:`EAGER_BYTES`) whole, made a batch at a time,
        larger ones stand-ins (:meth:`lazy`)."""
        limit = EAGER_BYTES if eager_bytes is None else eager_bytes
        batch: list[str] = []
        for name, t in self.tensors.items():
            if t.nbytes <= limit:
                batch.append(name)
                if len(batch) < EAGER_BATCH:
                    continue
            yield from zip(batch, self.made(batch))
            batch = []
            if t.nbytes > limit:
                yield name, self.lazy(name)
        yield from zip(batch, self.made(batch))

    def quantization_config(self) -> dict | None:
        if not self.format:
            return None
        # the quantized linear modules: those with a weight scale beside their weight
        scales = (n for n in self.tensors if n.endswith(".weight_scale"))
        quantized = [n[: -len(".weight_scale")] for n in scales]
        # fused routed experts (HY-V4's ``mlp.experts.gate_up_proj``): ``<name>_scale`` beside
        quantized += [n[: -len("_scale")] for n in self.tensors if n.endswith("_proj_scale")]
        return self.format.quantization_config(self.skipped, quantized)

    @property
    def specs(self) -> dict[str, Spec]:
        return {n: t.spec for n, t in self.tensors.items()}


def _renamed_heads(
    model: torch.nn.Module, modules: Mapping[str, torch.nn.Module], blocks: Mapping[str, Block]
) -> set[str]:
    """The checkpoint names of the class's output embedding (what its
    ``get_output_embeddings`` returns), where the checkpoint renames it (DeepSeek-V4's
    ``head.weight``, GPT-NeoX's ``embed_out.weight``, in memory ``lm_head.weight``): the
    lm_head by what the class says, since no name rule knows the checkpoint's name. Where the
    checkpoint keeps the class's own name, the name rule alone decides (a BERT-style
    ``cls.predictions.decoder``, behind a transform of its own, stays a linear). ``modules``:
    the model's, by name."""
    head = asked(model, "get_output_embeddings")  # None: a class that keeps none
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor):
        return set()
    source = next((f"{n}.weight" for n, m in modules.items() if m is head), None)
    return {name for name, b in blocks.items() if b.source == source and name != source}


def _module(modules: Mapping[str, torch.nn.Module], name: str, fallback: str) -> torch.nn.Module:
    """The module owning the checkpoint tensor ``name``, else ``fallback`` (its in-memory
    tensor's owner: a fused expert tensor's), else a plain one; ``modules``: by name."""
    module = modules.get(name.rpartition(".")[0])
    if module is None:
        module = modules.get(fallback)
    return torch.nn.Module() if module is None else module


@paused
def logical_model(
    model: torch.nn.Module,
    seed: int = 0,
    *,
    routing: Any = "balanced",
    num_layers: int | None = None,
    format: str | Format | None = None,
    arch: Arch | None = None,
    blocks: Mapping[str, Block] | None = None,
    acceptance: Any = None,
    mtp: bool = False,
    tokenizer: Any = None,
    refuse_unloadable: bool = False,
) -> LogicalModel:
    """The logical checkpoint of ``model`` (a transformers model, on meta or real; its
    in-memory dtypes, or ``format``'s: :data:`FORMATS`), all checked before anything is
    written; ``arch``: default :func:`.arch.derive` (the plain rule on meta); ``mtp``: with
    the MTP layers the config's checkpoint carries; ``acceptance``: the designed speculative
    stream (:mod:`.speculative`; ``tokenizer``: its tokens' source, default the config's
    directory's); ``refuse_unloadable``: a format whose MTP layers the engines' draft classes
    cannot load is refused (an export writes them for those classes; an in-engine fill of the
    target makes them but never loads them)."""
    seed = as_int64(seed, "seed", "fp8_dummy") % (1 << 64)
    profile = parse_routing(routing)
    accept = parse_acceptance(acceptance)
    fmt = format if isinstance(format, Format) else None
    if isinstance(format, str):
        if format not in FORMATS:
            raise ValueError(
                f"fp8_dummy: unknown format {format!r}; the formats: {', '.join(FORMATS)}"
            )
        fmt = FORMATS[format]
    blocks = memory_blocks(model) if blocks is None else blocks
    own = own_tensors(model)
    arch = (derive(model) if not on_meta(model) else derive_twin(model)) if arch is None else arch
    entries = []
    built = built_dtype(own)
    in_fp32 = fp32_rule(model, built)
    modules = dict(model.named_modules(remove_duplicate=False))
    sources: dict[str, tuple] = {}  # in-memory name -> its dtype and owner (experts share one)
    for name, b in blocks.items():
        source = sources.get(b.source)
        if source is None:
            source = sources[b.source] = (own[b.source].dtype, b.source.rpartition(".")[0])
        dtype = source[0]
        if fmt is not None and dtype.is_floating_point:
            dtype = torch.float32 if in_fp32(name, dtype) else fmt.dtype
        stand_in = meta_tensor(b.shape, dtype)  # read for its dtype only: one per kind
        entries.append((_module(modules, name, source[1]), name, stand_in, b.shape))
    arch = _renamed(arch, blocks)
    config = getattr(model, "config", None)
    part = None
    if mtp and config is not None:
        quant = fmt.quant if fmt is not None and refuse_unloadable else None
        name = fmt.name if fmt is not None else ""
        part = mtp_part(config, fmt.dtype if fmt is not None else built, quant, name)
    if part is not None:
        entries += part.block
        arch = _merged(arch, part.arch)
    heads = _renamed_heads(model, modules, blocks)
    specs = model_specs(model, entries, num_layers, arch, heads)
    skipped: list[str] = []
    plain, trees = fmt, ()
    if fmt is not None and fmt.quant is not None:
        # the MTP block's modules the engines build unquantized stay so (listed as skipped),
        # and the main layers' where the engines build theirs so too; in NVFP4, the MTP layers
        # their record leaves whole (listed as module trees, once)
        trees = part.fp4_trees if part is not None and fmt.quant == "nvfp4" else ()
        keep = (part.plain if part is not None else ()) + _layers_plain(config, entries) + trees
        plain = replace(fmt, keep=fmt.keep + keep) if keep else fmt
        # the class's own model type (vLLM renames an instance's for its draft)
        own = getattr(type(config), "model_type", None)
        entries, skipped = quantize(
            entries, specs, plain, fused=FUSED_EXPERTS.get(own, ()), model_type=own
        )
        specs = model_specs(model, entries, num_layers, arch, heads)
    units: list[str] = []  # the MTP input projections quantized (their 1s the unit's codes)
    if part is not None:
        units = _add_mtp_own(part, entries, specs, skipped, plain)
    if trees:  # each tree listed once, for the modules under it
        skipped = [*trees, *(s for s in skipped if not kept(s, trees))]
    shapes = {n: tuple(s) for _, n, _, s in entries}
    # the design reads the MTP input projections' logical [out, in] (NVFP4 packs two a byte)
    logical = {**shapes, **{n: tuple(s) for _, n, _, s in part.own}} if part else shapes
    dtypes = {n: t.dtype for _, n, t, _ in entries}
    keys = tensor_seeds(seed, shapes)
    if part is not None:
        profile = _mtp_rows(profile, part, specs, shapes, config)
    transposed = stored_in_out(entries)
    lookup = _lookup(model, blocks, part)
    routers, overrides = plan_routing(
        profile, seed, config, specs, shapes, dtypes=dtypes, transposed=transposed, lookup=lookup
    )
    specs.update(hash_specs(routers))  # a hash router's table: the plan writes it
    if part is not None and any(r.realize == "residual" for r in routers):
        _extend(overrides, carrier_rows(part.projections, routers[0].hidden, logical))
    facts = None
    if accept is not None:
        replaced, more, facts = plan_acceptance(
            accept, seed, config, specs, logical, dtypes, keys,
            projections=part.projections if part is not None else None, tokenizer=tokenizer,
            transposed=transposed, lookup=lookup,
        )  # fmt: skip
        specs.update(replaced)
        _extend(overrides, more)
        if part is not None:
            _extend(overrides, gate_rows(part.gates, facts["codes"], logical))
    for name in units:  # the design's 0s and 1s as the quantized tensors' codes and scales
        if name in overrides:
            _extend(overrides, unit_overrides(name, overrides.pop(name), fmt))
    tensors = {
        n: CheckpointTensor(n, shapes[n], dtypes[n], specs[n], keys[n], overrides.get(n))
        for _, n, _, _ in entries
    }
    if part is not None:
        _add_copies(part, tensors, lookup)
    return LogicalModel(tensors, config, seed, fmt, skipped, facts)


def _layers_plain(config: Any, entries: list) -> tuple[str, ...]:
    """The decoder layers' modules (full names) the engines build unquantized whatever the
    format (:func:`.speculative.layers_plain`)."""
    modules = layers_plain(config) if config is not None else ()
    found: dict[str, None] = {}
    for _, name, _, _ in entries:
        if LAYER_INDEX.search(name) is None:  # a vision tower's attention is not a layer's
            continue
        owner = f"{name.rpartition('.')[0]}."
        for m in modules:  # the module itself or one it is inside (GLM-5-Next's self_attn)
            at = owner.find(f".{m}.")
            if at >= 0:
                found[owner[: at + len(m) + 1]] = None
    return tuple(found)


def _lookup(model: torch.nn.Module, blocks: Mapping[str, Block], part) -> set[str]:
    """The checkpoint names of the vocabulary's tables: those the model's class says are its
    input and output embeddings (:func:`.hf_model.vocabulary_tensors`), and the MTP layers'
    copies of them (their layouts': :mod:`.speculative.mtp_layouts`). A table added to the
    lookup may have as many rows as the vocabulary: its row count cannot tell."""
    vocabulary = vocabulary_tensors(model)
    found = {name for name, b in blocks.items() if b.source in vocabulary}
    return found | set(part.copies if part is not None else ())


def _mtp_rows(profile: Profile, part, specs: Mapping[str, Spec], shapes, config) -> Profile:
    """A recorded load of the main model's MoE layers (what an engine records) for a
    checkpoint with MTP layers: each MTP layer's router gets the last MoE layer's load."""
    if profile.kind != "file":
        return profile
    routers = find_routers({n: s.role for n, s in specs.items()}, shapes, config)
    block = {name for _, name, _, _ in part.block}
    mtp = sum(r.weight in block for r in routers)
    if mtp and len(profile.loads) == len(routers) - mtp:
        return replace(profile, loads=profile.loads + (profile.loads[-1],) * mtp)
    return profile


def _extend(overrides: dict, more: Mapping[str, list]) -> None:
    for name, items in more.items():
        overrides.setdefault(name, []).extend(items)


def _merged(arch: Arch, more: Arch) -> Arch:
    return arch._replace(
        post=arch.post | more.post, residual=arch.residual | more.residual,
        offset={**arch.offset, **more.offset}, gains=arch.gains | more.gains,
        combine={**arch.combine, **more.combine}, centered=arch.centered | more.centered,
        multiplier={**arch.multiplier, **more.multiplier},
    )  # fmt: skip


def _add_mtp_own(part, entries: list, specs: dict, skipped: list, fmt) -> list[str]:
    """The MTP layers' norms (the final norm's value) and input projections (linear): in a
    quantized format, those the engines build with its config (``part.quantized``) quantized
    with the unit scale (:mod:`.speculative.unit_codes`), the others unquantized and listed
    with the modules a quantized checkpoint leaves alone. Returns the quantized ones."""
    final = next((s for n, s in specs.items() if _final_norm(n)), None)
    if part.final:  # a model without a final norm: the tensor its layout names (not the MTP's)
        block = {n for _, n, _, _ in part.block}
        named = [s for n, s in specs.items() if n.endswith(part.final) and n not in block]
        if not named:
            raise ValueError(f"fp8_dummy: the MTP layers' norms take {part.final}: none made")
        final = named[0]
    units = []
    for module, name, t, shape in part.own:
        if name in part.norms:
            specs[name] = final or Spec("norm", "const", 1.0)
            entries.append((module, name, t, shape))
            continue
        specs[name] = tensor_spec(name, shape, t.dtype)  # linear: 1/√(2·hidden)
        if fmt is None or fmt.quant is None:
            entries.append((module, name, t, shape))
            continue
        module_name = name[: -len(".weight")]
        # MXFP4: the experts only; the config's own list keeps what it names
        if name not in part.quantized or fmt.quant == "mxfp4" or kept(module_name, fmt.keep):
            skipped.append(module_name)
            entries.append((module, name, t, shape))
            continue
        made, left = quantize([(module, name, t, shape)], {name: specs[name]}, fmt)
        skipped += left
        entries += made
        owner = name[: -len("weight")]
        siblings = {n[len(owner) :]: (tuple(s), m.dtype) for _, n, m, s in made}
        for _, n, m, s in made:
            specs[n] = tensor_spec(n, s, m.dtype, siblings=siblings)
        specs.update(unit_specs(name, specs, fmt))
        units.append(name)
    return units


def _final_norm(name: str) -> bool:
    """The model's final norm: ``model.norm``, or ``norm`` where the checkpoint's names go
    without the base model's prefix (DeepSeek-V4's)."""
    return name.endswith("model.norm.weight") or name == "norm.weight"


def _add_copies(part, tensors: dict, lookup: Collection[str]) -> None:
    """The MTP layers' copies of the embedding and the lm_head: the same values (spec, key,
    overrides) under their own names, copied from the tensor of the role the model's class
    names (``lookup``), else the first of the role."""
    named = set(lookup) - set(part.copies)
    for name, role in part.copies.items():
        # tied: the lm_head is the embedding
        source = _of_role(tensors, role, named) or _of_role(tensors, "embedding", named)
        tensors[name] = CheckpointTensor(
            name, source.shape, source.dtype, source.spec, source.key, source.overrides
        )


_NONE = object()  # no such fact


def _of_role(tensors: Mapping[str, CheckpointTensor], role: str, named: Collection[str]):
    """The 2-D tensor of ``role`` among ``named``, else the first one of ``role`` (or None)."""
    found = [t for t in tensors.values() if t.spec.role == role and len(t.shape) == 2]
    return next((t for t in found if t.name in named), found[0] if found else None)


def _renamed(arch: Arch, blocks: Mapping[str, Block]) -> Arch:
    """The facts (found on in-memory module and tensor names) under the checkpoint's names:
    each checkpoint tensor's owner gets its in-memory tensor's owner's facts, and the branch
    output role its in-memory name gives it (GraniteMoE's ``output_linear.weight``: in memory
    ``experts.down_proj``)."""
    post, residual, gains, offset = set(arch.post), set(arch.residual), set(arch.gains), {}
    offset.update(arch.offset)
    combine, centered = dict(arch.combine), set(arch.centered)
    multiplier = dict(arch.multiplier)
    facts: dict[str, tuple | None] = {}  # in-memory name -> its facts (None: none to rename)
    for name, b in blocks.items():
        if name == b.source:
            continue
        if b.source not in facts:
            source = b.source.rpartition(".")[0]
            found = (
                # a branch output by its in-memory name is one under the checkpoint's too
                source in arch.post, source in arch.residual or residual_by_name(b.source),
                b.source in arch.gains,
                b.source in arch.centered, arch.offset.get(source, _NONE),
                arch.combine.get(source, _NONE), arch.multiplier.get(source, _NONE),
            )  # fmt: skip
            facts[b.source] = found if any(found[:4]) or found[4:] != (_NONE,) * 3 else None
        found = facts[b.source]
        if found is None:
            continue
        owner = name.rpartition(".")[0]
        if found[0]:
            post.add(owner)
        if found[1]:
            residual.add(owner)
        if found[2]:
            gains.add(name)
        if found[3]:
            centered.add(name)
        for into, value in zip((offset, combine, multiplier), found[4:]):
            if value is not _NONE:
                into[owner] = value
    return arch._replace(
        post=frozenset(post), residual=frozenset(residual), gains=frozenset(gains),
        offset=offset, combine=combine, centered=frozenset(centered), multiplier=multiplier,
    )  # fmt: skip
