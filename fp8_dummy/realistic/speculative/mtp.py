"""The multi-token-prediction (MTP) layers a checkpoint carries beside its decoder layers, under
the checkpoint's own names (docs/realistic.md#speculative-decoding). transformers' model classes
leave them out (``_keys_to_ignore_on_load_unexpected``), so they are made here: the decoder
block of each MTP layer is the class's own decoder layer, built on the meta device from the
config as transformers' ``get_mtp_config`` builds it (the MTP layers alone, MoE, indices from
0) and renamed to where the checkpoint keeps it; the MTP layer's own tensors are added as the
engines' loaders read them (vLLM 0.33 ``deepseek_mtp``/``glm4_moe_mtp``/``qwen3_next_mtp``,
SGLang 0.5.23's NextN, transformers' ``MtpModel``):

- DeepSeek-V3/V3.2, GLM-4.5 (``num_nextn_predict_layers`` = n): ``model.layers.{L+i}.`` the
  block's tensors and ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the normalized embedding
  first), ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens`` (copies of the
  lm_head and the embedding: the same values, as DeepSeek's checkpoints hold them);
- Qwen3-Next (one MTP layer unless ``num_nextn_predict_layers`` says otherwise, as vLLM reads
  it): ``mtp.layers.{i}.`` the block, ``mtp.fc`` [H, 2H], ``mtp.pre_fc_norm_embedding``,
  ``mtp.pre_fc_norm_hidden``, ``mtp.norm``; the embedding and lm_head are the model's."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..arch import Arch, derive_twin
from ..hf_model import build_model, built_dtype, kept_fp32, memory_blocks, own_tensors

__all__ = ["DEEPSEEK_STYLE", "QWEN_STYLE", "MtpPart", "mtp_layers", "mtp_part"]

DEEPSEEK_STYLE = ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa")
QWEN_STYLE = ("qwen3_next",)


@dataclass
class MtpPart:
    """The MTP tensors of a checkpoint, as (module, checkpoint name, meta tensor, shape)."""

    layers: int
    block: list  # the decoder blocks' tensors (quantized as a decoder layer's)
    own: list  # the MTP layers' norms and input projections (never quantized)
    copies: dict[str, str] = field(default_factory=dict)  # name -> "embedding" | "lm_head"
    projections: list[str] = field(default_factory=list)  # the [H, 2H] input projections
    norms: list[str] = field(default_factory=list)  # the MTP layers' own norms
    arch: Arch = Arch()  # the blocks' facts, under the checkpoint's names


def _text(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def mtp_layers(config: Any) -> tuple[str | None, int]:
    """(style, MTP layer count) of the checkpoint ``config`` describes: (None, 0) for one
    without MTP layers. The class's own model type (vLLM renames the instance's for its draft)."""
    text = _text(config)
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    n = getattr(text, "num_nextn_predict_layers", None)
    if kind in DEEPSEEK_STYLE:
        return ("deepseek", n) if isinstance(n, int) and n > 0 else (None, 0)
    if kind in QWEN_STYLE:
        n = 1 if n is None else n
        return ("qwen", n) if isinstance(n, int) and n > 0 else (None, 0)
    return None, 0


def _mtp_config(text: Any, n: int) -> Any:
    """The MTP layers alone as a model config: n layers, each MoE, full attention."""
    cfg = copy.deepcopy(text)
    for name in ("num_mtp_layers", "num_nextn_predict_layers", "quantization_config"):
        if name in cfg.__dict__:
            delattr(cfg, name)
    cfg.num_hidden_layers = n
    if getattr(cfg, "first_k_dense_replace", None) is not None:
        cfg.first_k_dense_replace = 0
    if getattr(cfg, "layer_types", None) is not None:
        types = getattr(text, "mtp_layer_types", None) or ["full_attention"] * n
        cfg.layer_types = list(types)[:n]
    if getattr(cfg, "mlp_layer_types", None) is not None:  # DeepSeek-V3.2, GLM-5: by name
        cfg.mlp_layer_types = list(getattr(text, "mtp_mlp_layer_types", None) or ["sparse"] * n)
    if getattr(cfg, "mlp_only_layers", None):
        cfg.mlp_only_layers = []
    return cfg


def mtp_part(config: Any, dtype: torch.dtype) -> MtpPart | None:
    """The MTP tensors of ``config``'s checkpoint in ``dtype`` (what stays in float32 as the
    class keeps it), or None."""
    style, n = mtp_layers(config)
    if style is None:
        return None
    text = _text(config)
    main_layers = text.num_hidden_layers
    twin = build_model(_mtp_config(text, n), dtype=dtype)
    own = own_tensors(twin)
    built = built_dtype(own)
    blocks = memory_blocks(twin)
    layer = re.compile(r"^model\.layers\.(\d+)\.")
    rename = {}
    for name in blocks:
        m = layer.match(name)
        if m is None:
            continue
        i = int(m.group(1))
        where = f"model.layers.{main_layers + i}." if style == "deepseek" else f"mtp.layers.{i}."
        rename[name] = where + name[m.end() :]
    block = []
    for name, new in rename.items():
        b = blocks[name]
        t_dtype = own[b.source].dtype
        if t_dtype.is_floating_point:
            t_dtype = torch.float32 if kept_fp32(twin, name, t_dtype, built) else dtype
        module = _owner(twin, name)
        block.append((module, new, torch.empty(b.shape, dtype=t_dtype, device="meta"), b.shape))
    part = MtpPart(n, block, [], arch=_facts(twin, blocks, rename))
    h = text.hidden_size
    norm = torch.nn.Module()
    for i in range(n):
        if style == "deepseek":
            p = f"model.layers.{main_layers + i}."
            own_names = [p + "enorm.weight", p + "hnorm.weight", p + "shared_head.norm.weight"]
            proj = p + "eh_proj.weight"
            part.copies[p + "shared_head.head.weight"] = "lm_head"
            part.copies[p + "embed_tokens.weight"] = "embedding"
        elif i == 0:
            own_names = ["mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"]
            own_names.append("mtp.norm.weight")
            proj = "mtp.fc.weight"
        else:
            continue
        for name in own_names:
            part.own.append((norm, name, torch.empty(h, dtype=dtype, device="meta"), (h,)))
            part.norms.append(name)
        wide = torch.empty(h, 2 * h, dtype=dtype, device="meta")
        part.own.append((torch.nn.Module(), proj, wide, (h, 2 * h)))
        part.projections.append(proj)
    return part


def _owner(model: torch.nn.Module, name: str) -> torch.nn.Module:
    try:
        return model.get_submodule(name.rpartition(".")[0])
    except AttributeError:
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
    return Arch(arch.embed_scale, frozenset(moved(arch.post)), offset,
                frozenset(moved(arch.residual)), frozenset(gains))  # fmt: skip
