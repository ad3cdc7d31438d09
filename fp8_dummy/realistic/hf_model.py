"""The transformers side of the logical model: the model class a config names (built on the
meta device), its tensors, and where each checkpoint tensor lies in them: the checkpoint's
names are what ``save_pretrained`` writes, transformers' own ``revert_weight_conversion`` run
on meta tensors whose results are views of them (:func:`.meta_views.meta_view_map`), else on
stand-ins that record the views it takes (:func:`.lazy_tensor.view_map`); a checkpoint tensor
no view holds is placed by parts, each a strided view of an in-memory tensor
(:mod:`.interleaved`: rows interleaved; :mod:`.gathered`: any other moving of elements)."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .base_causal_lm import base_causal_lm
from .gathered import gathered_blocks
from .interleaved import InterleavedBlock, interleaved_blocks
from .lazy_tensor import Block, NotAffineError, view_map
from .meta_views import meta_view_map

__all__ = ["UnplacedTensorError", "build_model", "built_dtype", "checkpoint_names"]
__all__ += ["checkpoint_root"]
__all__ += ["asked", "checkpoint_state", "config_of", "fp32_rule", "is_transformers_model"]
__all__ += ["kept_fp32", "transformers_config_class"]
__all__ += ["memory_blocks", "on_meta", "own_tensors", "placed_views", "vocabulary_tensors"]


class UnplacedTensorError(ValueError):
    """A model whose in-memory tensors no checkpoint conversion places by views alone."""


def is_transformers_model(model: torch.nn.Module) -> bool:
    return any(c.__module__.startswith("transformers.") for c in type(model).__mro__) and hasattr(
        model, "config"
    )


def build_model(config: Any, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The transformers model class ``config`` names, on the meta device (no memory); the
    class itself, not the quantized stand-ins a ``quantization_config`` would swap in, under
    its own model type (which transformers' checkpoint conversion is keyed by); an engine's
    own config class (SGLang's Qwen3-Next) as transformers' config of that model type."""
    import transformers

    if getattr(config, "quantization_config", None) is not None:
        config = copy.copy(config)
        del config.quantization_config
    if "model_type" in vars(config):  # an engine's renaming (vLLM's MTP drafts): the class's own
        config = copy.copy(config)
        del config.model_type
    if not type(config).__module__.startswith("transformers."):  # an engine's own config class
        fields = _engine_fields(config)
        own = transformers_config_class(type(config).model_type)
        try:
            config = own(**_unaliased(own, fields, config)) if own is not None else config
        except (ValueError, KeyError, TypeError):  # fields transformers' config refuses
            pass
    elif (own := _renamed_class(config)) is not None:
        fields = {k: v for k, v in config.to_dict().items() if k != "model_type"}
        config = own.from_dict(fields)

    kw = {"dtype": dtype} if dtype is not None else {}
    with torch.device("meta"):
        model = base_causal_lm(config, kw)  # a type transformers maps to no class (Step-3.5's)
    if model is not None:
        return model
    errors = []
    # a multimodal checkpoint's lm_head is on its image-text-to-text class (GLM-OCR's), not on
    # its base model
    autos = (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText)
    for auto in (*autos, transformers.AutoModel):
        try:
            with torch.device("meta"):
                return auto.from_config(config, **kw)
        except (ValueError, KeyError) as e:
            errors.append(f"{auto.__name__}: {e}")
    raise ValueError(f"fp8_dummy: no transformers model class for this config: {'; '.join(errors)}")


def transformers_config_class(model_type: Any) -> type | None:
    """transformers' own config class of ``model_type`` (None: it has none). Found by its name in
    transformers' table, not through ``AutoConfig``, where an engine registers its own class for
    the types it reads otherwise (vLLM's MiniMax-M3 config, once vLLM read one)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    name = CONFIG_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    return getattr(transformers, name, None) if name else None


# A value no config field holds by chance: what the engine's constructor does with a parameter
_PROBE = 1_000_003


def _renamed_class(config: Any) -> type | None:
    """transformers' own config class of ``config``'s model type where ``config`` is an instance
    of another model type's class that an engine renamed (vLLM reads DeepSeek-V3.2's config.json
    with DeepSeek-V3's class, whose model type it sets to ``deepseek_v32``): built as it is, the
    model would be the other type's (DeepSeek-V3's, without the indexer). The renaming is the
    class's, for the whole process: a DeepSeek-V3 config read after it is built as V3.2's too
    (the engine's process reads one model's config)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    kind = getattr(type(config), "model_type", None)
    # the model types transformers registers the class for (none: a class of its own)
    types = {t for t, name in CONFIG_MAPPING_NAMES.items() if name == type(config).__name__}
    renamed = types and kind not in types and kind in CONFIG_MAPPING_NAMES
    return transformers_config_class(kind) if renamed else None


def _engine_fields(config: Any) -> dict[str, Any]:
    """An engine's own config class's fields as transformers' config of its model type takes
    them: where the engine's constructor folds a parameter transformers' config keeps into
    another field (SGLang's LongCat-Flash class its ``num_layers`` into ``num_hidden_layers``,
    which transformers' derives, two per decoder layer), that field's value under the
    parameter's name. Found by probing the engine's class: built with that parameter alone, the
    one field that holds the parameter's value."""
    import inspect

    import transformers

    fields = {k: v for k, v in config.to_dict().items() if k != "model_type"}
    try:
        ours = inspect.signature(type(config).__init__).parameters
        theirs = inspect.signature(
            transformers.CONFIG_MAPPING[type(config).model_type].__init__
        ).parameters
    except (KeyError, TypeError, ValueError):  # no transformers config of that type
        return fields
    for name, p in ours.items():
        if name in fields or name not in theirs or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        try:
            probed = type(config)(**{name: _PROBE}).to_dict()
        except Exception:  # noqa: BLE001 (a constructor that refuses the probe: nothing folded)
            continue
        folded = [k for k, v in probed.items() if type(v) is int and v == _PROBE and k in fields]
        if len(folded) == 1 and folded[0] not in theirs:
            fields[name] = fields.pop(folded[0])
    return fields


def _unaliased(own: type, fields: dict[str, Any], engine: Any) -> dict[str, Any]:
    """``fields`` (of the engine's config ``engine``) without those ``own``'s config class
    reads as another of them (``attribute_map``) where that one is there too and the alias
    holds the engine class's own default: an engine's class of another model type holds the
    two apart, the alias at its default (SGLang reads DeepSeek-V4's config.json with
    DeepSeek-V3's class, whose ``intermediate_size`` 18432 no V4 file says, where V4's class
    reads ``intermediate_size`` as ``moe_intermediate_size``); given both, transformers' class
    would take the alias's value. An alias that holds another value is the file's: kept."""
    aliases = getattr(own, "attribute_map", {}) or {}
    both = [k for k in fields if aliases.get(k) in fields]
    if not both:
        return fields
    try:
        defaults = type(engine)().to_dict()
    except Exception:  # noqa: BLE001 (a class that needs arguments: no default to tell by)
        return fields
    dropped = {k for k in both if k in defaults and fields[k] == defaults[k]}
    return {k: v for k, v in fields.items() if k not in dropped}


def own_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict tensors, each tied tensor once (under its first name)."""
    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t
    return out


def vocabulary_tensors(model: torch.nn.Module) -> set[str]:
    """The in-memory names (:func:`own_tensors`') of the tensors the transformers class itself
    says are the vocabulary's: the ``get_input_embeddings()`` weights of the model and of its
    encoder and decoder (``get_encoder()``, ``get_decoder()``: an encoder-decoder whose stacks
    hold tables of their own, T5Gemma's), its ``get_output_embeddings()``'s. Empty where the
    class does not say: not a transformers model (an engine's class, whose
    ``get_input_embeddings`` embeds token ids instead), or one whose class raises."""
    if not is_transformers_model(model):
        return set()
    holders = [model]
    for getter in ("get_encoder", "get_decoder"):
        holders.append(asked(model, getter))
    modules = [asked(m, "get_input_embeddings") for m in holders if m is not None]
    modules.append(asked(model, "get_output_embeddings"))
    wanted = {id(w) for m in modules if isinstance(w := getattr(m, "weight", None), torch.Tensor)}
    return {n for n, t in own_tensors(model).items() if id(t) in wanted}


def asked(model: Any, getter: str) -> Any:
    """``model.getter()``, or None where the class does not say (no such method, one that
    raises for this class: transformers' defaults raise NotImplementedError or ValueError)."""
    method = getattr(model, getter, None)
    if not callable(method):
        return None
    try:
        return method()
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None


def memory_blocks(model: torch.nn.Module) -> dict[str, Block]:
    """Checkpoint name -> where its elements lie in the in-memory tensor (``block.source``):
    transformers' save conversion run on stand-ins; identity for other models."""
    own = own_tensors(model)
    if not is_transformers_model(model):
        return {n: Block.whole(n, tuple(t.shape)) for n, t in own.items()}
    from transformers.core_model_loading import revert_weight_conversion

    prefix = checkpoint_root(model, own)

    def convert(tensors: dict[str, torch.Tensor]) -> Any:
        if prefix:
            tensors = {n.removeprefix(prefix): t for n, t in tensors.items()}
        return _unmerged(model, revert_weight_conversion(model, tensors))

    found = meta_view_map(convert, own)  # the quick way; the stand-ins where it cannot place
    if found is not None:
        return found
    try:
        return view_map(convert, own)
    except NotAffineError:
        # rows interleaved by the conversion: each in-memory part a strided block of the
        # checkpoint tensor (Inkling's fused gate/up projections)
        found = interleaved_blocks(convert, own, _conversions(model))
        if found is not None:
            return found
        # elements moved, not computed, into parts of strided views (Step-3.7's vision tower:
        # q/k rows permuted for RoPE, then q, k and v concatenated into one in_proj_weight)
        try:
            return gathered_blocks(convert, own)
        except NotAffineError as moved:
            why = moved
        raise UnplacedTensorError(
            f"fp8_dummy: {type(model).__name__}: transformers' checkpoint conversion of this "
            f"model is not views of its tensors ({why}), so its checkpoint names cannot be placed"
        ) from None


def _conversions(model: torch.nn.Module) -> list:
    """transformers' checkpoint conversions of ``model`` (none where it knows none)."""
    from transformers.conversion_mapping import get_model_conversion_mapping

    try:
        return list(get_model_conversion_mapping(model, add_legacy=False) or [])
    except Exception:  # noqa: BLE001 (no conversion known for the model)
        return []


# Renamings transformers' conversion merges: two checkpoint names its load renames to one
# in-memory form, which its save then reverts to one of them for both: model type -> (the
# reverted form, the checkpoint's) for the names the reverse over-renames, as the real
# checkpoints name them (what the engines' loaders read).
# - DeepSeek-V4: ``\.norm\.`` -> ``.kv_norm.`` is for the compressors' ``norm``, yet its reverse
#   takes attention's own ``attn.kv_norm`` (a name the load leaves as it is) for one too.
# - HY-V4: ``\.linear_gate`` -> ``.gate_proj`` is for the attention's output gate, yet its
#   reverse takes the dense MLP's and the shared expert's ``gate_proj`` for one too; and
#   ``\.hc_pre\.hc_`` -> ``.hc_`` drops the ``hc_pre.`` inside ``hc_attn_layer.hc_pre.hc_base``
#   (and ``hc_mlp_layer``'s), which its reverse puts back before the first ``hc_`` instead: in
#   front of ``hc_attn_layer`` and of the final ``hc_head``, which has none.
# - MiniMax-M3: ``\.block_sparse_moe\.`` -> ``.mlp.`` is for the MoE layers, yet its reverse
#   takes the dense layers' MLP (``gate_proj``, ``up_proj``, ``down_proj``) and the vision
#   tower's (``fc1``, ``fc2``) for them too.
_MERGED = {
    "deepseek_v4": ((re.compile(r"(^|\.)attn\.norm\.weight$"), r"\1attn.kv_norm.weight"),),
    "hy_v4": (
        (re.compile(r"(^|\.)mlp\.(shared_experts\.)?linear_gate\."), r"\1mlp.\2gate_proj."),
        (re.compile(r"(^|\.)hc_pre\.(hc_attn_layer|hc_mlp_layer)\."), r"\1\2.hc_pre."),
        (re.compile(r"(^|\.)hc_pre\.hc_head\."), r"\1hc_head."),
    ),
    "minimax_m3_vl": (
        (
            re.compile(r"(^|\.)block_sparse_moe\.(gate_proj|up_proj|down_proj|fc1|fc2)\."),
            r"\1mlp.\2.",
        ),
    ),
}


def _unmerged(model: torch.nn.Module, state: Mapping[str, Any]) -> Mapping[str, Any]:
    fixes = _MERGED.get(getattr(getattr(model, "config", None), "model_type", None), ())
    if not fixes:
        return state
    out = {}
    for name, t in state.items():
        for pattern, name_in_checkpoint in fixes:
            name = pattern.sub(name_in_checkpoint, name)
        out[name] = t
    return out


def checkpoint_root(model: torch.nn.Module, own: Mapping[str, torch.Tensor]) -> str:
    """The base-model prefix (``"model."``) the checkpoint's names go without, or "".
    Transformers' load renames a checkpoint name first and then prefixes the base model's
    name where the model holds it only so; its save reverts the renamings on the in-memory
    names, prefix included. A conversion whose renaming places an in-memory name only once
    the prefix is off (DeepSeek-V4's ``^hc_head_fn$`` for ``model.hc_head.hc_fn``, its
    ``^embed\\.weight$``) is written against names without it, its other renamings too
    (its ``\\.norm\\.``, for a compressor's norm, would rename the final ``model.norm``):
    the checkpoint's names are then the base model's without the prefix, as its real
    checkpoints write them and engines' name mappers read them."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange, WeightRenaming

    base = getattr(model, "base_model_prefix", "")
    if not base or not isinstance(getattr(model, base, None), torch.nn.Module):
        return ""
    prefix = f"{base}."
    inner = [n for n in own if n.startswith(prefix)]
    if any(n.removeprefix(prefix) in own for n in inner):  # a name both ways: keep them apart
        return ""
    try:
        conversions = get_model_conversion_mapping(model, add_legacy=False) or []
    except Exception:  # noqa: BLE001 (no conversion known for the model: its names as they are)
        return ""
    reverse = [
        c.reverse_transform()
        for c in conversions
        if isinstance(c, WeightRenaming) and not isinstance(c, PrefixChange)
    ]
    # an unanchored pattern that finds the name without the prefix finds it with it too
    renamings = [r for r in reverse if any(p.startswith("^") for p in r.source_patterns)]
    for name in inner:
        for r in renamings:
            if (
                r.rename_source_key(name)[1] is None
                and r.rename_source_key(name.removeprefix(prefix))[1] is not None
            ):
                return prefix
    return ""


def checkpoint_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Checkpoint name -> a view of the in-memory tensor that holds it (tied names too):
    what ``save_pretrained`` would write, without a copy."""
    own = own_tensors(model)
    out = dict(placed_views(own, memory_blocks(model)))
    first = {id(t): n for n, t in own.items()}
    for name, t in model.state_dict(keep_vars=True).items():
        if name not in own and first.get(id(t)) in out:
            out[name] = out[first[id(t)]]
    return out


def placed_views(own: Mapping[str, torch.Tensor], blocks: Mapping[str, Block]):
    """(checkpoint name, the view of its in-memory tensor that holds it), meta ones too."""
    for name, b in blocks.items():
        if isinstance(b, InterleavedBlock):
            raise UnplacedTensorError(
                f"fp8_dummy: {name}: made of parts of in-memory tensors (no view of one)"
            )
        src = own[b.source].detach()
        if not src.is_meta and not src.is_contiguous():
            raise UnplacedTensorError(f"fp8_dummy: {b.source}: not contiguous in memory")
        yield name, src.as_strided(b.shape, b.strides, src.storage_offset() + b.offset)


def checkpoint_names(model: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Checkpoint name -> (shape, dtype) of an unquantized checkpoint of ``model``."""
    own = own_tensors(model)
    return {n: (b.shape, own[b.source].dtype) for n, b in memory_blocks(model).items()}


def built_dtype(own: Mapping[str, torch.Tensor]) -> torch.dtype:
    """The floating dtype most of the model's elements are in: the dtype it was built in."""
    sizes: dict[torch.dtype, int] = {}
    for t in own.values():
        if t.dtype.is_floating_point:
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    return max(sizes, key=sizes.__getitem__) if sizes else torch.float32


def kept_fp32(model: torch.nn.Module, name: str, dtype: torch.dtype, built: torch.dtype) -> bool:
    """A tensor (in-memory ``dtype``) the model class keeps in float32 whatever the dtype it
    is built in (``built``), as ``save_pretrained`` writes it: a float32 tensor in a model
    built narrower (a parameter the class makes in float32 itself: Hunyuan-MoE's router; a
    narrower copy loaded into it would not be the in-memory fill's bytes), or one transformers'
    ``_keep_in_fp32_modules_strict`` names (DeepSeek's correction bias)."""
    return fp32_rule(model, built)(name, dtype)


def fp32_rule(model: torch.nn.Module, built: torch.dtype) -> Callable[[str, torch.dtype], bool]:
    """:func:`kept_fp32` of ``model`` built in ``built`` as a function of (name, in-memory
    dtype), its module list read once (a checkpoint's every tensor asks)."""
    keep = getattr(model, "_keep_in_fp32_modules_strict", None) or ()
    named = re.compile("|".join(rf"(?:^|\.){re.escape(k)}(?:\.|$)" for k in keep)) if keep else None
    narrower = built != torch.float32

    def kept(name: str, dtype: torch.dtype) -> bool:
        if dtype == torch.float32 and narrower:
            return True
        return named is not None and named.search(name) is not None

    return kept


def on_meta(model: torch.nn.Module) -> bool:
    return any(t.is_meta for t in own_tensors(model).values())


def config_of(path: str | os.PathLike) -> Any:
    """A transformers config from a config.json or a directory holding one."""
    import transformers

    p = os.fspath(path)
    d = os.path.dirname(p) if os.path.isfile(p) else p
    if not os.path.isfile(os.path.join(d, "config.json")):
        raise FileNotFoundError(f"fp8_dummy: no config.json at {p}")
    source = p if os.path.isfile(p) and os.path.basename(p) != "config.json" else d
    config = transformers.AutoConfig.from_pretrained(source)
    own = transformers_config_class(getattr(type(config), "model_type", None))
    if not type(config).__module__.startswith("transformers.") and own is not None:
        return own.from_pretrained(source)  # an engine registered its own class for the type
    return config
