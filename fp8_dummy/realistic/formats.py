"""The checkpoint formats of the logical model (docs/export.md): which tensors a quantized
checkpoint holds beside each quantized linear weight, in the layout and with the
``quantization_config`` the engines' loaders read for that method (the format a config itself
describes: :mod:`.config_formats`)."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .rules import LAYER_INDEX, Spec, module_kind

__all__ = [
    "BLOCK",
    "FORMATS",
    "FUSED_EXPERTS",
    "NVFP4_UNQUANTIZED",
    "ROUTED_EXPERTS",
    "Format",
    "UnsupportedFormatError",
    "kept",
    "quantize",
    "routed_expert",
]

BLOCK = 128  # fp8-block's scale granularity (DeepSeek-V3's [128, 128])
NVFP4_GROUP = 16  # NVFP4: one e4m3 scale per 16 weights along K
MXFP4_GROUP = 32  # MXFP4: one E8M0 scale per 32 weights along K
E4M3 = torch.float8_e4m3fn
# A routed expert's linear module, ``<...>.experts.<index>.<projection>``, as the checkpoint
# names it and as vLLM and SGLang name an expert when they pick a fused MoE's scheme
# (``<layer>.0.<projection>``); a shared expert (``shared_experts.``) is not one.
ROUTED_EXPERTS = r"re:.*\.experts\.\d+\.[^.]+$"
# The linear modules the engines build unquantized whatever the checkpoint's format (vLLM 0.33's
# ``ReplicatedLinear``/``MergedColumnParallelLinear`` with ``quant_config=None``; its loaders
# find no parameter for their scales): the shared expert's gate [1, H] (Qwen2-MoE,
# Qwen3-Next, Qwen3.5-MoE, Qwen4-Exp) and Qwen4-Exp's hyper-connections' projections
# (``GatedResidual``). A quantized checkpoint keeps them unquantized and lists them ignored.
ENGINE_UNQUANTIZED = re.compile(
    r"(?:^|.*\.)(?:shared_expert_gate|[a-z]+_hyper_connection\."
    r"(?:input_mix_weight_down|input_mix_weight_up|block_inject_weight))"
)

# The linear modules vLLM 0.33 builds without the quantization config in NVFP4 alone (ModelOpt's
# ``modelopt_fp4``; Qwen4-Exp's ``without_modelopt_fp4``): the QSA attention's Q (with its gate),
# K and V and its indexer's Q/K projection, which it packs into one merged linear
# (``Qwen4ExpQSAQKVIndexerLinear``) that takes no per-tensor scales of its shards. The attention
# whose indexer has the one projection ``indexer.index_qk_proj`` is a QSA attention.
QSA_INDEXER = "indexer.index_qk_proj"
QSA_PACKED = ("q_proj", "k_proj", "v_proj", QSA_INDEXER)
# model type -> the modules of every decoder layer, main and MTP (a name's end), the engines
# build unquantized in NVFP4 alone, listed as ignored: Qwen3-Next's full attention's q/k/v,
# which SGLang 0.5.23 builds as one qkv_proj without ModelOpt's FP4 config (vLLM's reads the list)
NVFP4_UNQUANTIZED = {"qwen3_next": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")}


class UnsupportedFormatError(ValueError):
    """A format a config or a model cannot take, named with the reason."""


@dataclass(frozen=True)
class Format:
    """A checkpoint format: the float dtype of what stays unquantized, and how the linear
    weights of the decoder layers are quantized (``None``: not at all)."""

    name: str
    dtype: torch.dtype
    quant: str | None = None  # "per-tensor" | "block" | "channel" | "nvfp4" | "mxfp4"
    description: str = ""
    block: tuple[int, int] = (BLOCK, BLOCK)  # "block": the scale's [rows, columns] of weight
    keep: tuple[str, ...] = ()  # the config's modules_to_not_convert, as written: unquantized

    def quantization_config(self, skipped: list[str], quantized: Sequence[str] = ()) -> dict | None:
        """The config.json entry the engines' loaders read for this method; ``skipped``: the
        linear modules left unquantized (routers, lm_head, the config's own list), each named
        in full after the config's own entries (vLLM matches names exactly, transformers by
        prefix); ``quantized``: the linear modules quantized (per tensor: whether routed
        experts are among them)."""
        if self.quant is None:
            return None
        skipped = list(dict.fromkeys([*self.keep, *skipped]))
        if self.quant == "channel":  # one reading in transformers and vLLM
            return _compressed_tensors(skipped, "channel")
        if self.quant == "per-tensor":
            experts = any(routed_expert(m) for m in quantized)
            return _compressed_tensors(skipped, "tensor", experts=experts)
        if self.quant == "mxfp4":  # GPT-OSS's: only the experts; the rest as module patterns
            patterns = _patterns([s for s in skipped if s not in self.keep])
            return {"quant_method": "mxfp4", "modules_to_not_convert": [*self.keep, *patterns]}
        if self.quant == "nvfp4":  # ModelOpt's hf_quant_config, flattened as vLLM reads it
            return {
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "group_size": NVFP4_GROUP,
                "kv_cache_quant_algo": None,
                "exclude_modules": list(skipped),
            }
        cfg: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        cfg["fmt"] = "e4m3"
        if self.quant == "block":
            cfg["weight_block_size"] = list(self.block)
        cfg["modules_to_not_convert"] = list(skipped)
        cfg["ignored_layers"] = list(skipped)
        return cfg


def _patterns(modules: list[str]) -> list[str]:
    """Module names with each layer index a ``*`` (GPT-OSS's ``model.layers.*.self_attn``
    style), once each, in order."""
    return list(
        dict.fromkeys(
            LAYER_INDEX.sub(lambda m: m.group(0).replace(m.group(1), "*"), n) for n in modules
        )
    )


def routed_expert(module: str) -> bool:
    """Whether the linear module ``module`` is a routed expert (:data:`ROUTED_EXPERTS`), or
    ``module`` a fused routed experts tensor (:func:`fused_experts`)."""
    split = re.match(ROUTED_EXPERTS[len("re:") :], module) is not None
    return split or _FUSED.match(module) is not None or _PACKED.match(module) is not None


# A fused routed experts tensor ``<...>.experts.<projection>`` [E, out, in], all experts in one
# (HY-V4's ``mlp.experts.gate_up_proj`` and ``down_proj``, as its checkpoints hold them), or a
# decoder layer's packed ones (Step-3.5's ``moe.gate_proj.weight``, ``moe.up_proj.weight``,
# ``moe.down_proj.weight``: transformers' conversion splits its fused gate/up along the rows)
_FUSED = re.compile(r".*\.experts\.(gate_up_proj|down_proj)$")
_PACKED = re.compile(r".*\.layers\.\d+\.moe\.(gate|up|down)_proj\.weight$")
# The model types whose fused routed experts the FP8 formats quantize (:func:`fused_experts`),
# each with the formats (``Format.quant``) that make them, the others refused: vLLM's loaders
# read them under these names (HY-V4's ``HYV4ForCausalLM`` and ``HYV4MTP``, Step-3.5's
# ``Step3p5ForCausalLM``: its expert mapping takes ``moe.gate_proj.weight`` and the names that
# begin with it, ``_scale_inv``, ``_scale``); others' stay as they are (Inkling's, which vLLM
# reads under names of its own). Not Step-3.5's per tensor: vLLM names its experts' layer
# ``moe.experts.routed_experts``, which the routed experts' per-channel group of the
# compressed-tensors config (``.experts.<e>.``) does not match, so it gets the per-tensor
# group, whose weights per tensor beside activations per token its FP8 MoE method refuses
FUSED_EXPERTS = {"hy_v4": ("per-tensor", "block", "channel"), "step3p5": ("block", "channel")}
_QUANT_NAMES = {"per-tensor": "fp8", "block": "fp8-block", "channel": "fp8-channel"}


def fused_experts(name: str, shape: tuple, spec: Spec, module: torch.nn.Module) -> bool:
    """A fused routed experts tensor of a decoder layer whose module says it is stored
    [E, out, in] (transformers' experts implementation: ``is_transposed`` False; Llama 4's
    experts, [E, in, out], say nothing): an FP8 format quantizes it per expert as vLLM's fused
    MoE reads it, each expert's codes with its scales (``<name>_scale_inv`` [E, out/128,
    in/128] per block, ``<name>_scale`` [E, out, 1] per channel; per tensor, routed experts
    are per channel: :func:`_compressed_tensors`)."""
    if _PACKED.match(name) is not None:  # the checkpoint's own [E, out, in] (its names say so)
        return len(shape) == 3 and spec.role in ("linear", "residual_out")
    fused = _FUSED.match(name) is not None and getattr(module, "is_transposed", None) is False
    return fused and expert_weight(name, shape, spec)


def _fp8_group(strategy: str, targets: list[str]) -> dict:
    """A compressed-tensors config group: e4m3 weights of ``strategy``, activations quantized
    per token at run time."""
    weights = {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True}
    weights.update({"dynamic": False, "group_size": None, "observer": "minmax"})
    acts = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True}
    acts.update({"dynamic": True, "observer": None})
    group = {"targets": targets, "weights": weights, "input_activations": acts}
    group.update({"output_activations": None, "format": "float-quantized"})
    return group


def _compressed_tensors(skipped: list[str], strategy: str, experts: bool = False) -> dict:
    """compressed-tensors' "float-quantized" scheme of FP8-dynamic checkpoints: e4m3 weights
    with one scale per output channel (or per tensor), activations quantized per token at run
    time. Per tensor too: transformers reads ``"quant_method": "fp8"`` as 128x128 blocks
    (``weight_scale_inv``) where vLLM reads it per tensor (``weight_scale``); both read this.
    Per tensor with routed ``experts``: those in a group of their own, per channel (each row
    the tensor's scale), as vLLM's and SGLang's fused MoE takes per-token activations only
    with per-channel weights; both pick an expert's group by its name, which a ``re:`` target
    matches before the ``Linear`` class, as compressed-tensors itself does."""
    groups = {"group_0": _fp8_group(strategy, ["Linear"])}
    if experts:
        groups["group_1"] = _fp8_group("channel", [ROUTED_EXPERTS])
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": list(skipped),
        "kv_cache_scheme": None,
    }


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", torch.bfloat16, None, "every tensor bfloat16"),
        Format("fp16", torch.float16, None, "every tensor float16"),
        Format(
            "fp8",
            torch.bfloat16,
            "per-tensor",
            "e4m3 linear weights, float32 weight_scale per tensor, a routed expert's per output "
            "channel (compressed-tensors)",
        ),
        Format(
            "fp8-block",
            torch.bfloat16,
            "block",
            "e4m3 linear weights, float32 weight_scale_inv per 128x128 block (powers of two)",
        ),
        Format(
            "fp8-channel",
            torch.bfloat16,
            "channel",
            "e4m3 linear weights, float32 weight_scale per output channel (compressed-tensors)",
        ),
        Format(
            "nvfp4",
            torch.bfloat16,
            "nvfp4",
            "e2m1 linear weights two a byte, e4m3 weight_scale per 16, float32 weight_scale_2 "
            "and input_scale (ModelOpt)",
        ),
        Format(
            "mxfp4",
            torch.bfloat16,
            "mxfp4",
            "the fused experts' weights as e2m1 codes two a byte in blocks of 32 with a uint8 "
            "E8M0 scale each (GPT-OSS's _blocks/_scales); everything else unquantized",
        ),
    )
}


def kept(module: str, patterns: Sequence[str]) -> bool:
    """Whether a config's list leaves ``module`` unquantized, read as its readers read it: a
    name, a prefix of dotted components, a suffix of them, a glob (``*``) or a ``re:``
    pattern."""
    for p in patterns:
        if p.startswith("re:"):
            if re.fullmatch(p[3:], module):
                return True
        elif "*" in p:
            if fnmatch.fnmatchcase(module, p):
                return True
        elif module == p or module.startswith(p + ".") or module.endswith("." + p):
            return True
    return False


def engine_unquantized(module: str) -> bool:
    """Whether the engines build the linear module ``module`` unquantized in every format
    (:data:`ENGINE_UNQUANTIZED`)."""
    return ENGINE_UNQUANTIZED.fullmatch(module) is not None


def nvfp4_unquantized(modules: Sequence[str], model_type: Any = None) -> frozenset[str]:
    """The linear modules among ``modules`` (a model's, each named in full) the engines build
    unquantized in NVFP4 alone: each QSA attention's packed projections (:data:`QSA_PACKED`),
    and the decoder layers' of the model type's :data:`NVFP4_UNQUANTIZED`."""
    attentions = [m[: -len(QSA_INDEXER)] for m in modules if m.endswith("." + QSA_INDEXER)]
    found = {a + p for a in attentions for p in QSA_PACKED}
    ends = tuple("." + m for m in NVFP4_UNQUANTIZED.get(model_type, ()))
    if ends:
        found |= {m for m in modules if m.endswith(ends) and LAYER_INDEX.search(m) is not None}
    return frozenset(found)


def quantized(name: str, shape: tuple, spec: Spec) -> bool:
    """A linear weight of a decoder layer (not a router, an embedding, lm_head or a norm)."""
    return (
        name.endswith(".weight")
        and len(shape) == 2
        and spec.role in ("linear", "residual_out")
        and LAYER_INDEX.search(name) is not None
    )


def expert_weight(name: str, shape: tuple, spec: Spec) -> bool:
    """A fused experts tensor of a decoder layer, ``[E, ..]`` 3-D (GPT-OSS's
    ``mlp.experts.gate_up_proj``): what MXFP4 quantizes."""
    return (
        len(shape) == 3
        and ".experts." in f".{name}"
        and spec.role in ("linear", "residual_out")
        and LAYER_INDEX.search(name) is not None
    )


@functools.lru_cache(maxsize=4096)
def meta_tensor(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A meta tensor of ``shape`` and ``dtype``: the stand-in an entry of the logical model
    carries for its dtype (read, never written; one per kind of tensor: tens of thousands of
    per-expert tensors are a few kinds)."""
    return torch.empty(shape, dtype=dtype, device="meta")


def quantize(
    entries: list, specs: Mapping[str, Spec], fmt: Format, fused: tuple[str, ...] = (),
    model_type: Any = None,
) -> tuple[list, list[str]]:  # fmt: skip
    """The format's tensors: each decoder-layer linear weight quantized with its scales beside
    it; the linear modules left unquantized (routers, lm_head; for MXFP4 every linear module:
    it quantizes the fused experts only). ``entries``: (module, name, meta stand-in, shape)
    of the unquantized checkpoint; ``fused``: the quantizations that make the fused routed
    experts too, the others refused (a model type of :data:`FUSED_EXPERTS`); ``model_type``:
    the model's (:func:`nvfp4_unquantized`)."""
    if fmt.quant == "mxfp4":
        for module, name, _, shape in entries if fused else ():
            if fused_experts(name, shape, specs[name], module):
                raise _fused_refusal(fmt, name, fused)
        return _quantize_mxfp4(entries, specs, fmt.keep)
    out, skipped, done, linear = [], [], 0, False
    kinds: dict[int, str] = {}  # id(module) -> module_kind: a MoE's experts share a few modules
    # a weight's tensors by its shape and whether it is a routed expert, named after its owner
    # (experts repeat a few shapes)
    made: dict[tuple, list[tuple[str, tuple, torch.Tensor]]] = {}
    owners = [n[: -len(".weight")] for _, n, _, _ in entries if n.endswith(".weight")]
    fp4_plain = nvfp4_unquantized(owners, model_type) if fmt.quant == "nvfp4" else frozenset()
    for module, name, t, shape in entries:
        spec = specs[name]
        owner = name[: -len(".weight")]
        kind = kinds.get(id(module))
        if kind is None:
            kind = kinds[id(module)] = module_kind(module)
        fused_here = bool(fused) and fused_experts(name, shape, spec, module)
        if fused_here and fmt.quant not in fused:
            raise _fused_refusal(fmt, name, fused)
        if fused_here:  # its scales are named after the tensor itself
            owner = name
        # A weight stored [in, out] (transformers' Conv1D) stays unquantized: no reader takes
        # its scales and packing along those axes.
        plain = kept(owner, fmt.keep) or kind == "transposed" or engine_unquantized(owner)
        plain = plain or owner in fp4_plain
        linear_weight = quantized(name, shape, spec) or fused_here
        linear |= linear_weight
        if not linear_weight or plain:
            out.append((module, name, t, shape))
            if (
                name.endswith(".weight")
                and len(shape) == 2
                and (spec.role in ("router", "lm_head") or linear_weight)
                and not fused_here
            ):
                skipped.append(owner)
            continue
        done += 1
        key = (tuple(shape), fmt.quant == "per-tensor" and routed_expert(owner), fused_here)
        tensors = made.get(key)
        if tensors is None:  # the first of its kind: the format's own errors name it
            each = _fused_tensors(fmt, name, shape) if fused_here else _tensors(fmt, name, shape)
            tensors = made[key] = [(n[len(owner) :], s, meta_tensor(s, d)) for n, s, d in each]
        out += [(module, owner + local, m, s) for local, s, m in tensors]
    if not done and linear:
        raise UnsupportedFormatError(
            f"fp8_dummy: {fmt.name}: no linear weight of this model is left to quantize (each "
            "is stored [in, out], as transformers' Conv1D, or kept unquantized by the config)"
        )
    return out, skipped


def _fused_refusal(fmt: Format, name: str, fused: tuple[str, ...]) -> UnsupportedFormatError:
    """A format that does not make the fused routed experts tensor ``name`` (NVFP4, MXFP4, or
    one the model's :data:`FUSED_EXPERTS` entry leaves out): the engines build these experts
    with the format's method, which unquantized values do not fit (no checkpoint an engine
    loads)."""
    which = (
        "the FP8 formats only (fp8, fp8-block, fp8-channel)"
        if set(fused) == set(_FP8)
        else ", ".join(_QUANT_NAMES[q] for q in fused) + " only, for this model"
    )
    return UnsupportedFormatError(
        f"fp8_dummy: {fmt.quant}: {name} is a fused routed experts tensor [E, out, in], "
        f"which fp8_dummy quantizes in {which}"
    )


def _quantize_mxfp4(
    entries: list, specs: Mapping[str, Spec], keep: Sequence[str] = ()
) -> tuple[list, list[str]]:
    """GPT-OSS's layout: each fused experts tensor ``<w>`` becomes ``<w>_blocks``
    ``[E, N, K/32, 16]`` uint8 and ``<w>_scales`` ``[E, N, K/32]`` uint8 (N outputs, K
    inputs, whichever way the model stores them); every other tensor stays as it is."""
    out, skipped, found = [], [], False
    for module, name, t, shape in entries:
        spec = specs[name]
        if not expert_weight(name, shape, spec) or kept(name.rpartition(".")[0], keep):
            out.append((module, name, t, shape))
            if name.endswith(".weight") and len(shape) == 2:
                skipped.append(name[: -len(".weight")])
            continue
        e, a, b = shape  # the module's class says which dimension is K
        n, k = (b, a) if module_kind(module) == "transposed" else (a, b)
        if k % MXFP4_GROUP:
            raise UnsupportedFormatError(
                f"fp8_dummy: mxfp4: {name} has {k} input features, not a multiple of "
                f"{MXFP4_GROUP} (one E8M0 scale per {MXFP4_GROUP})"
            )
        found = True
        for local, s in (("_blocks", (e, n, k // 32, 16)), ("_scales", (e, n, k // 32))):
            out.append((module, name + local, torch.empty(s, dtype=torch.uint8, device="meta"), s))
    if not found:
        raise UnsupportedFormatError(
            "fp8_dummy: mxfp4 quantizes fused experts tensors [E, ..] (GPT-OSS's layout); "
            "this model's checkpoint has none"
        )
    return out, skipped


_FP8 = ("per-tensor", "block", "channel")


def _fused_tensors(fmt: Format, name: str, shape: tuple) -> list[tuple[str, tuple, torch.dtype]]:
    """(name, shape, dtype) of what an FP8 format writes for the fused experts tensor ``name``
    [E, out, in] (:func:`fused_experts`): the codes and each expert's scales, under the names
    vLLM's fused-experts loaders read (``<name>_scale_inv``, ``<name>_scale``)."""
    e, n, k = shape
    f32 = torch.float32
    if fmt.quant != "block":  # per channel: the per-tensor format's routed experts too
        return [(name, shape, E4M3), (f"{name}_scale", (e, n, 1), f32)]
    rows = fmt.block[0]
    if name.endswith("gate_up_proj") and (n // 2) % rows:
        raise UnsupportedFormatError(
            f"fp8_dummy: {fmt.name}: {name} fuses gate and up projections of {n // 2} rows "
            f"each, not a multiple of the {rows}-row block: a block of scales would straddle "
            "both, which vLLM's loader splits in halves"
        )
    grid = (e, -(-n // rows), -(-k // fmt.block[1]))
    return [(name, shape, E4M3), (f"{name}_scale_inv", grid, f32)]


def _tensors(fmt: Format, name: str, shape: tuple) -> list[tuple[str, tuple, torch.dtype]]:
    """(name, shape, dtype) of what the format writes for the linear weight ``name``."""
    prefix = name[: -len("weight")]
    n, k = shape
    f32 = torch.float32
    if fmt.quant == "block":
        grid = tuple(-(-d // b) for d, b in zip(shape, fmt.block))
        return [(name, shape, E4M3), (f"{name}_scale_inv", grid, f32)]
    # per tensor, a routed expert per channel: its group's (_compressed_tensors)
    if fmt.quant == "channel" or fmt.quant == "per-tensor" and routed_expert(prefix[:-1]):
        return [(name, shape, E4M3), (f"{prefix}weight_scale", (n, 1), f32)]
    if fmt.quant == "nvfp4":
        if k % NVFP4_GROUP:
            raise UnsupportedFormatError(
                f"fp8_dummy: nvfp4: {name} has {k} input features, not a multiple of "
                f"{NVFP4_GROUP} (one e4m3 scale per {NVFP4_GROUP})"
            )
        return [
            (name, (n, k // 2), torch.uint8),  # two e2m1 codes a byte, as ModelOpt packs them
            (f"{prefix}weight_scale", (n, k // NVFP4_GROUP), E4M3),
            (f"{prefix}weight_scale_2", (), f32),
            (f"{prefix}input_scale", (), f32),
        ]
    return [(name, shape, E4M3), (f"{prefix}weight_scale", (), f32)]
