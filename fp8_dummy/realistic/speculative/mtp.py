"""The multi-token-prediction (MTP) layers a checkpoint carries beside its decoder layers, under
the checkpoint's own names (docs/realistic.md#speculative-decoding). transformers' model classes
leave them out (``_keys_to_ignore_on_load_unexpected``), so they are made here: the decoder
block of each MTP layer is the class's own decoder layer, built on the meta device from the
config as transformers' ``get_mtp_config`` builds it (the MTP layers alone, indices from 0, the
config's MTP layer types, else MoE and full attention) and renamed to where the checkpoint keeps
it; the MTP layer's own tensors are added as the engines' loaders and transformers' ``MtpModel``
read them (its conversion: ``transformers.conversion_mapping``'s ``MtpModel``; vLLM 0.33's
MTP classes; SGLang 0.5.23's NextN). One layout per family of checkpoints (:data:`LAYOUTS`):

- ``deepseek``: DeepSeek-V3/V3.2, GLM-4.5/GLM-5, GLM-4.7-Flash (``glm4_moe_lite``), GLM-OCR
  (``glm_ocr``: its text config counts them, its layers under ``model.language_model.``)
  (``num_nextn_predict_layers`` = n): ``model.layers.{L+i}.`` the block's tensors and
  ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the normalized embedding first),
  ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens`` (copies of the lm_head and
  the embedding: the same values, as DeepSeek's checkpoints hold them);
- ``bailing``: Ling/Ring hybrid (``bailing_hybrid``), HY-V3 (``hy_v3``,
  ``num_nextn_predict_layers``): ``model.layers.{L+i}.`` the block and
  ``enorm``, ``hnorm``, ``eh_proj``, ``final_layernorm`` (vLLM's ``BailingMoeV25MTPModel``
  and ``HYV3MTP`` take the embedding and the lm_head from the model's own);
- ``qwen``: Qwen3-Next (one MTP layer unless ``num_nextn_predict_layers`` says otherwise, as
  vLLM reads it), Qwen3.5 and Qwen3.5-MoE (``mtp_num_hidden_layers``, else one; the
  multimodal checkpoint keeps them at the top level too), Mellum, EXAONE-MoE (as Qwen3-Next,
  its block dense: vLLM's ``ExaoneMoeMTP``), EXAONE 4.5 (``exaone4_5``: its top-level
  ``num_nextn_predict_layers``, else one): ``mtp.layers.{i}.`` the block, ``mtp.fc`` [H, 2H],
  ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.norm``;
- ``inkling``: Inkling's text model (``num_mtp_layers``): ``model.mtp.layers.{i}.`` its
  ``hidden_norm``, ``embed_norm``, ``input_proj`` [H, 2H] (the hidden state first:
  ``mtp_hidden_states_first``) and the block under ``transformer_block.``; ``model.mtp.
  chain_norm`` where ``chain_hidden_post_norm`` is set;
- ``nemotron``: Nemotron-H (``num_nextn_predict_layers`` = n, each MTP step the config's
  ``mtp_layers_block_type``, P layers: attention, MoE): ``mtp.layers.{j}.`` the n·P layers'
  tensors (``norm``, ``mixer.*``), the first of each step ``enorm``, ``hnorm``, ``eh_proj``
  [H, 2H] (the normalized embedding first), the last ``final_layernorm`` (vLLM's
  ``NemotronHMTP`` takes the embedding and the lm_head from the model's own);
- ``ernie``: ERNIE 4.5 MoE (``num_nextn_predict_layers`` = n): ``model.mtp_block.{i}.`` a
  dense decoder layer (vLLM's ``ErnieMTP`` builds a Llama one), ``model.mtp_emb_norm.{i}``,
  ``model.mtp_hidden_norm.{i}``, ``model.mtp_linear_proj.{i}`` [H, 2H] (the normalized
  embedding first); no final norm (the block's output goes to the lm_head as it is), the
  embedding and the lm_head the model's."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..arch import Arch, derive_twin
from ..hf_model import build_model, built_dtype, kept_fp32, memory_blocks, own_tensors

__all__ = ["LAYOUTS", "MtpPart", "mtp_layers", "mtp_part", "mtp_prefixes"]

# The config's own model type (its text config's) -> the layout of its checkpoint's MTP layers
LAYOUTS = {
    "deepseek_v3": "deepseek", "deepseek_v32": "deepseek", "glm4_moe": "deepseek",
    "glm_moe_dsa": "deepseek", "glm4_moe_lite": "deepseek", "bailing_hybrid": "bailing",
    "qwen3_next": "qwen", "qwen3_5_text": "qwen", "qwen3_5_moe_text": "qwen",
    "mellum": "qwen", "inkling_text": "inkling", "nemotron_h": "nemotron",
    "ernie4_5_moe": "ernie", "exaone_moe": "qwen", "hy_v3": "bailing", "glm_ocr_text": "deepseek",
}  # fmt: skip
# where the checkpoint keeps its decoder layers, the MTP layers after them: "model.layers."
# unless said (the multimodal GLM-OCR's language model)
_MAIN = {"glm_ocr_text": "model.language_model.layers."}
# one MTP layer where the config names none (vLLM's reading)
_DEFAULT_ONE = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "exaone_moe")
# a dense MTP block whatever the main layers are (vLLM's ErnieMTP, ExaoneMoeMTP)
_DENSE = ("ernie4_5_moe", "exaone_moe")
# the config key that counts the MTP layers: the first one set, or the one the engines read
_COUNTS = ("num_nextn_predict_layers", "num_mtp_layers")
_OWN_COUNT = {"qwen3_5_text": "mtp_num_hidden_layers", "qwen3_5_moe_text": "mtp_num_hidden_layers"}
# Multimodal configs whose own model type (not their text config's, a model's without MTP
# layers: EXAONE 4.5's is EXAONE 4.0's) says the layout; their top-level config counts the MTP
# layers, one where it names none (vLLM's Exaone4_5_MTP's reading)
_OUTER = {"exaone4_5": "qwen"}


@dataclass
class MtpPart:
    """The MTP tensors of a checkpoint, as (module, checkpoint name, meta tensor, shape)."""

    layers: int
    block: list  # the decoder blocks' tensors (quantized as a decoder layer's)
    own: list  # the MTP layers' norms and input projections (never quantized)
    copies: dict[str, str] = field(default_factory=dict)  # name -> "embedding" | "lm_head"
    # the [H, 2H] input projections -> where their input's embedding half starts (0 or H)
    projections: dict[str, int] = field(default_factory=dict)
    norms: list[str] = field(default_factory=list)  # the MTP layers' own norms
    arch: Arch = Arch()  # the blocks' facts, under the checkpoint's names


def _text(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def mtp_layers(config: Any) -> tuple[str | None, int]:
    """(layout, MTP layer count) of the checkpoint ``config`` describes: (None, 0) for one
    without MTP layers. The class's own model type (vLLM renames the instance's for its draft)."""
    outer = _OUTER.get(getattr(type(config), "model_type", None))
    if outer is not None:
        n = getattr(config, "num_nextn_predict_layers", None)
        n = 1 if n is None else n
        return (outer, n) if isinstance(n, int) and n > 0 else (None, 0)
    text = _text(config)
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    style = LAYOUTS.get(kind)
    if style == "inkling" and text is not config:  # the multimodal checkpoint names its own
        style = None
    keys = (_OWN_COUNT[kind],) if kind in _OWN_COUNT else _COUNTS
    n = next((v for v in (getattr(text, c, None) for c in keys) if v is not None), None)
    if style is not None and n is None and kind in _DEFAULT_ONE:
        n = 1
    return (style, n) if style is not None and isinstance(n, int) and n > 0 else (None, 0)


def mtp_prefixes(config: Any) -> tuple[str, ...]:
    """The prefixes of the MTP tensors' checkpoint names (none for a config without them)."""
    style, n = mtp_layers(config)
    if style in ("qwen", "inkling", "nemotron", "ernie"):
        return {"inkling": ("model.mtp.",), "ernie": ("model.mtp_",)}.get(style, ("mtp.",))
    text = _text(config)
    return tuple(_where(style, text, i)[0] for i in range(n))


def _mtp_config(text: Any, n: int) -> Any:
    """The MTP layers alone as a model config: n layers, the config's MTP layer types, else
    each MoE with full attention."""
    cfg = copy.deepcopy(text)
    for name in (*_COUNTS, *set(_OWN_COUNT.values()), "quantization_config"):
        if name in cfg.__dict__:
            delattr(cfg, name)
    cfg.num_hidden_layers = n
    steps = getattr(text, "mtp_layers_block_type", None)  # Nemotron-H: n steps of P layers
    if steps is not None:
        cfg.layers_block_type = list(steps) * n
    if getattr(cfg, "first_k_dense_replace", None) is not None:
        cfg.first_k_dense_replace = 0
    if getattr(cfg, "layer_types", None) is not None and steps is None:
        types = getattr(text, "mtp_layer_types", None) or ["full_attention"] * n
        cfg.layer_types = list(types)[:n]
    if getattr(cfg, "mlp_layer_types", None) is not None:  # DeepSeek-V3.2, GLM-5: by name
        cfg.mlp_layer_types = list(getattr(text, "mtp_mlp_layer_types", None) or ["sparse"] * n)
    if getattr(cfg, "mlp_only_layers", None):
        cfg.mlp_only_layers = []
    if getattr(type(text), "model_type", None) in _DENSE:  # ERNIE's by index, EXAONE's by name
        if getattr(cfg, "moe_layer_start_index", None) is not None:
            cfg.moe_layer_start_index = n
        if getattr(cfg, "mlp_layer_types", None) is not None:
            cfg.mlp_layer_types = ["dense"] * n
    return cfg


def _own_names(style: str, p: str, i: int, text: Any) -> tuple[list[str], str | None, dict]:
    """(norms, input projection, copies) of MTP layer i whose tensors are under ``p``."""
    if style == "deepseek":
        copies = {p + "shared_head.head.weight": "lm_head", p + "embed_tokens.weight": "embedding"}
        norms = [p + "enorm.weight", p + "hnorm.weight", p + "shared_head.norm.weight"]
        return norms, p + "eh_proj.weight", copies
    if style == "bailing":
        norms = [p + n for n in ("enorm.weight", "hnorm.weight", "final_layernorm.weight")]
        return norms, p + "eh_proj.weight", {}
    if style == "inkling":
        norms = [p + "hidden_norm.weight", p + "embed_norm.weight"]
        if i == 0 and getattr(text, "chain_hidden_post_norm", False):
            norms.append("model.mtp.chain_norm.weight")
        return norms, p + "input_proj.weight", {}
    if style == "ernie":  # each of its own tensors counted by a last index, i
        norms = [f"model.mtp_emb_norm.{i}.weight", f"model.mtp_hidden_norm.{i}.weight"]
        return norms, f"model.mtp_linear_proj.{i}.weight", {}
    if style == "nemotron":  # step i: its first layer fuses the inputs, its last normalizes
        size = len(text.mtp_layers_block_type)
        first, last = f"mtp.layers.{i * size}.", f"mtp.layers.{i * size + size - 1}."
        norms = [first + "enorm.weight", first + "hnorm.weight", last + "final_layernorm.weight"]
        return norms, first + "eh_proj.weight", {}
    if i > 0:  # qwen: one input projection and its norms for all the MTP layers
        return [], None, {}
    norms = ["mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"]
    return norms + ["mtp.norm.weight"], "mtp.fc.weight", {}


def _where(style: str, text: Any, i: int) -> tuple[str, str]:
    """(MTP layer i's prefix, its decoder block's prefix) in the checkpoint of ``text``."""
    if style in ("deepseek", "bailing"):
        main = _MAIN.get(getattr(type(text), "model_type", None), "model.layers.")
        p = f"{main}{text.num_hidden_layers + i}."
        return p, p
    if style == "inkling":
        p = f"model.mtp.layers.{i}."
        return p, p + "transformer_block."
    if style == "ernie":
        return "model.mtp_", f"model.mtp_block.{i}."
    return f"mtp.layers.{i}.", f"mtp.layers.{i}."


def mtp_part(config: Any, dtype: torch.dtype) -> MtpPart | None:
    """The MTP tensors of ``config``'s checkpoint in ``dtype`` (what stays in float32 as the
    class keeps it), or None."""
    style, n = mtp_layers(config)
    if style is None:
        return None
    text = _text(config)
    twin = build_model(_mtp_config(text, n), dtype=dtype)
    own = own_tensors(twin)
    built = built_dtype(own)
    blocks = memory_blocks(twin)
    # Nemotron-H's checkpoint names its model backbone; GLM-OCR's text model has no prefix
    layer = re.compile(r"^(?:(?:model|backbone)\.)?layers\.(\d+)\.")
    rename = {}
    for name in blocks:
        m = layer.match(name)
        if m is not None:
            rename[name] = _where(style, text, int(m.group(1)))[1] + name[m.end() :]
    block = []
    for name, new in rename.items():
        b = blocks[name]
        t_dtype = own[b.source].dtype
        if t_dtype.is_floating_point:
            t_dtype = torch.float32 if kept_fp32(twin, name, t_dtype, built) else dtype
        module = _owner(twin, name, b.source)
        block.append((module, new, torch.empty(b.shape, dtype=t_dtype, device="meta"), b.shape))
    part = MtpPart(n, block, [], arch=_facts(twin, blocks, rename))
    h = text.hidden_size
    hidden_first = style == "inkling" and getattr(text, "mtp_hidden_states_first", True)
    norm = torch.nn.Module()
    for i in range(n):
        norms, proj, copies = _own_names(style, _where(style, text, i)[0], i, text)
        part.copies.update(copies)
        for name in norms:
            part.own.append((norm, name, torch.empty(h, dtype=dtype, device="meta"), (h,)))
            part.norms.append(name)
        if proj is not None:
            wide = torch.empty(h, 2 * h, dtype=dtype, device="meta")
            part.own.append((torch.nn.Module(), proj, wide, (h, 2 * h)))
            part.projections[proj] = h if hidden_first else 0
    return part


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
    return Arch(arch.embed_scale, frozenset(moved(arch.post)), offset,
                frozenset(moved(arch.residual)), frozenset(gains), combine)  # fmt: skip
