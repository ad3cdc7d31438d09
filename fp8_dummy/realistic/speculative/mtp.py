"""The multi-token-prediction (MTP) tensors of a checkpoint that carries MTP layers (which, how
many and under which names: :mod:`.mtp_layouts`), made for the logical model. transformers'
model classes leave them out (``_keys_to_ignore_on_load_unexpected``): the decoder block of each
MTP layer is the class's own decoder layer (or the parts of it the engines build), built on the
meta device from the config as transformers' ``get_mtp_config`` builds it (the MTP layers
alone, indices from 0, the config's MTP layer types, else MoE and full attention) and renamed
to where the checkpoint keeps it; the MTP layer's own norms and input projections are added as
the engines' loaders and transformers' ``MtpModel`` read them."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..arch import Arch, derive_twin
from ..formats import UnsupportedFormatError
from ..hf_model import build_model, built_dtype, kept_fp32, memory_blocks, own_tensors
from .mtp_layouts import (
    ALL_COUNTS,
    MtpArch,
    arch_of,
    block_name,
    mtp_layers,
    norm_width,
    own_names,
    split_projections,
    text_config,
    where,
)

__all__ = ["MtpPart", "mtp_part"]


@dataclass
class MtpPart:
    """The MTP tensors of a checkpoint, as (module, checkpoint name, meta tensor, shape)."""

    layers: int
    block: list  # the decoder blocks' tensors (quantized as a decoder layer's)
    own: list  # the MTP layers' norms and input projections
    copies: dict[str, str] = field(default_factory=dict)  # name -> "embedding" | "lm_head"
    # the input projections [H, 2H] (or DeepSeek-V4's two [H, H]) -> where the normalized
    # embedding starts in their input (0 or H; None: a projection of the hidden state alone)
    projections: dict[str, int | None] = field(default_factory=dict)
    norms: list[str] = field(default_factory=list)  # the MTP layers' own norms
    # the block's modules the engines build unquantized whatever the format (full names)
    plain: tuple[str, ...] = ()
    # the input projections the engines build with the quantization config, quantized where the
    # format quantizes (DeepSeek-V4's two [H, H]: vLLM's ``DeepSeekV4MTP`` builds them as
    # ``ReplicatedLinear`` with it, and its real checkpoints hold them in FP8); the others
    # stay unquantized, listed with the modules a quantized checkpoint leaves alone (Qwen4-Exp's
    # two [H, H] too: vLLM's draft reads that list, ``mtp.fc_embedding`` as the name it builds)
    quantized: tuple[str, ...] = ()
    arch: Arch = Arch()  # the blocks' facts, under the checkpoint's names
    # the model's tensor (a name's end) whose value the own norms take where it has no final
    # norm (:attr:`.mtp_layouts.MtpArch.final`)
    final: str = ""
    # the MTP layers' stream mixers' gate projections [hc·H, r] (Qwen4-Exp's
    # ``input_mix_weight_up``): the design zeroes their rows on the code of every stream
    gates: tuple[str, ...] = ()
    # the MTP layers as module trees (``model.layers.N.*``) an NVFP4 checkpoint leaves
    # unquantized (:attr:`.mtp_layouts.MtpArch.fp4_tree`)
    fp4_trees: tuple[str, ...] = ()


def _mtp_config(text: Any, n: int, arch: MtpArch) -> Any:
    """The MTP layers alone as a model config: n layers, the config's MTP layer types, else
    each MoE (dense where the record says) with the record's attention."""
    cfg = copy.deepcopy(text)
    for name in (*ALL_COUNTS, "quantization_config"):
        if name in cfg.__dict__:
            delattr(cfg, name)
    if arch.reads_count:  # the class reads it, and its config has no default: none
        setattr(cfg, arch.counts[0], 0)
    setattr(cfg, arch.layers, n)
    steps = getattr(text, "mtp_layers_block_type", None)  # Nemotron-H: n steps of P layers
    if steps is not None:
        cfg.layers_block_type = list(steps) * n
    if getattr(cfg, "first_k_dense_replace", None) is not None:
        cfg.first_k_dense_replace = 0
    if getattr(cfg, "layer_types", None) is not None and steps is None:
        types = getattr(text, "mtp_layer_types", None) or [arch.attention] * n
        cfg.layer_types = list(types)[:n]
    if getattr(cfg, "mlp_layer_types", None) is not None:  # DeepSeek-V3.2, GLM-5: by name
        named = getattr(text, "mtp_mlp_layer_types", None)
        cfg.mlp_layer_types = list(named or [arch.mlp_default] * n)
    if getattr(cfg, "indexer_types", None) is not None:  # GLM-5, GLM-5-Next, HY-V4: the
        cfg.indexer_types = ["full"] * n  # engines' MTP layers each build their own indexer
    if getattr(cfg, "mlp_only_layers", None):
        cfg.mlp_only_layers = []
    if arch.dense:  # ERNIE's by index, EXAONE's and MiMo's by name
        if getattr(cfg, "moe_layer_start_index", None) is not None:
            cfg.moe_layer_start_index = n
        if getattr(cfg, "mlp_layer_types", None) is not None:
            cfg.mlp_layer_types = ["dense"] * n
    return cfg


def mtp_part(
    config: Any, dtype: torch.dtype, quant: str | None = None, name: str = ""
) -> MtpPart | None:
    """The MTP tensors of ``config``'s checkpoint in ``dtype`` (what stays in float32 as the
    class keeps it), or None; ``quant``: the format's quantization (``Format.quant``; ``name``
    the format's name), refused where the engine's class cannot load the MTP layers in it."""
    style, n = mtp_layers(config)
    if style is None:
        return None
    arch, text = arch_of(config)[0], text_config(config)
    why = dict(arch.unloadable).get(quant) if quant is not None else None
    if why is not None:
        raise UnsupportedFormatError(
            f"fp8_dummy: {n} MTP layer(s) ({arch.counts[0]}) in {name or quant}: {why}; "
            f"choose another format, or set {arch.counts[0]} to 0 for a checkpoint without "
            "MTP layers"
        )
    missing = [key for key in arch.needs if getattr(text, key, None) is None]
    if missing:
        raise ValueError(
            f"fp8_dummy: {n} MTP layer(s) ({arch.counts[0]}): the block's {arch.attention} "
            f"layer needs the config's {', '.join(missing)}; set them, or set "
            f"{arch.counts[0]} to 0 for a checkpoint without MTP layers"
        )
    alone = _mtp_config(text, n, arch)
    types = [
        *(getattr(alone, "layer_types", None) or ()),
        *(getattr(alone, "mlp_layer_types", None) or ()),
    ]
    for kind, why in arch.unbuildable:
        if kind in types:
            raise ValueError(
                f"fp8_dummy: {n} MTP layer(s) ({arch.counts[0]}) of type {kind}: {why}; set the "
                f"MTP layers' types (mtp_layer_types, mtp_mlp_layer_types), or set "
                f"{arch.counts[0]} to 0 for a checkpoint without MTP layers"
            )
    twin = build_model(_twin_config(config, alone, arch), dtype=dtype)
    own = own_tensors(twin)
    built = built_dtype(own)
    blocks = memory_blocks(twin)
    # Nemotron-H's checkpoint names its model backbone; GLM-OCR's text model has no prefix;
    # Inkling's multimodal checkpoint its language model ``model.llm``, MiniMax-M3's
    # ``language_model.model``
    layer = re.compile(r"^(?:language_model\.)?(?:(?:model|backbone)\.)?(?:llm\.)?layers\.(\d+)\.")
    rename = {}
    for name in blocks:
        m = layer.match(name)
        rest = block_name(arch, name[m.end() :]) if m is not None else None
        if rest is not None:
            rename[name] = where(arch, text, int(m.group(1)))[1] + rest
        for old, new in arch.shared:  # the model's own tensors the MTP layers share a copy of
            if name.startswith(old):
                rename[name] = new + name[len(old) :]
    # the model's own tensors each MTP layer has a copy of (made as the model's: their role)
    pairs = list(rename.items())
    pairs += [(name, where(arch, text, i)[0] + name) for i in range(n) for name in arch.heads]
    block = []
    for name, new in pairs:
        b = blocks[name]
        t_dtype = own[b.source].dtype
        if t_dtype.is_floating_point:
            t_dtype = torch.float32 if kept_fp32(twin, name, t_dtype, built) else dtype
        module = _owner(twin, name, b.source)
        block.append((module, new, torch.empty(b.shape, dtype=t_dtype, device="meta"), b.shape))
    plain = tuple(where(arch, text, i)[1] + m for i in range(n) for m in arch.plain)
    part = MtpPart(n, block, [], arch=_facts(twin, blocks, rename), plain=plain, final=arch.final)
    if arch.fp4_tree:
        part.fp4_trees = tuple(where(arch, text, i)[0] + "*" for i in range(n))
    part.gates = tuple(new for new in rename.values() if arch.gates and new.endswith(arch.gates)
                       and any(new.startswith(s) for _, s in arch.shared))  # fmt: skip
    h = text.hidden_size
    hidden_first = style == "inkling" and getattr(text, "mtp_hidden_states_first", True)
    norm = torch.nn.Module()
    for i in range(n):
        norms, proj, copies = own_names(style, where(arch, text, i)[0], i, text)
        part.copies.update(
            {name: c for name, c in copies.items() if arch.head_copy or c != "lm_head"}
        )
        for name in norms:
            w = norm_width(style, name, text)
            part.own.append((norm, name, torch.empty(w, dtype=dtype, device="meta"), (w,)))
            part.norms.append(name)
        if proj is not None:
            wide = torch.empty(h, 2 * h, dtype=dtype, device="meta")
            part.own.append((torch.nn.Module(), proj, wide, (h, 2 * h)))
            part.projections[proj] = h if hidden_first else 0
            if arch.quantized_inputs:
                part.quantized += (proj,)
        for name, start in split_projections(style, where(arch, text, i)[0]).items():
            square = torch.empty(h, h, dtype=dtype, device="meta")
            part.own.append((torch.nn.Module(), name, square, (h, h)))
            part.projections[name] = start
            if arch.quantized_inputs:
                part.quantized += (name,)
    return part


def _twin_config(config: Any, text: Any, arch: MtpArch) -> Any:
    """What the MTP layers' twin is built from: their text config ``text``, or, where the
    record says the whole model's conversion names the block (Inkling's multimodal
    checkpoint), ``config`` around it."""
    if not arch.whole:
        return text
    outer = copy.deepcopy(config)
    outer.text_config = text
    return outer


def _owner(model: torch.nn.Module, name: str, source: str) -> torch.nn.Module:
    """The module owning the checkpoint tensor ``name``, else its in-memory tensor's (a fused
    expert's; Nemotron-H's checkpoint names its model ``backbone.``), else a plain one."""
    for path in (name, source):
        try:
            return model.get_submodule(path.rpartition(".")[0])
        except AttributeError:
            continue
    return torch.nn.Module()


def _facts(twin: torch.nn.Module, blocks: dict, rename: dict) -> Arch:
    """The twin's architecture facts (probed where it is small, as the main model's are; found
    on in-memory module and tensor names) under the MTP tensors' checkpoint names."""
    arch = derive_twin(twin)
    owners: dict[str, set] = {}
    for name, new in rename.items():
        source = blocks[name].source.rpartition(".")[0]
        owners.setdefault(source, set()).add(new.rpartition(".")[0])

    def moved(facts) -> set:
        return {o for f in facts for o in owners.get(f, ())}

    offset = {o: c for f, c in arch.offset.items() for o in owners.get(f, ())}
    gains = {new for name, new in rename.items() if blocks[name].source in arch.gains}
    combine = {o: c for f, c in arch.combine.items() for o in owners.get(f, ())}
    centered = {new for name, new in rename.items() if blocks[name].source in arch.centered}
    multiplier = {o: c for f, c in arch.multiplier.items() for o in owners.get(f, ())}
    return Arch(arch.embed_scale, frozenset(moved(arch.post)), offset,
                frozenset(moved(arch.residual)), frozenset(gains), combine,
                frozenset(centered), multiplier)  # fmt: skip
