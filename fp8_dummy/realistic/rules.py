"""The realistic rule per tensor (docs/realistic.md): from a tensor's name, logical shape,
dtype and module, the :class:`Spec` it gets, so that a dummy model routes, normalizes and
quantizes like a checkpoint: its role (embedding, linear, a residual branch's output, router,
norm, bias, scale) and that role's distribution, codes or constant. Pure: no tensor is read or
written here (:mod:`.values` writes a spec's bytes)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import torch

from ..tensors import BYTE_VIEWED, E8M0, FLOAT8, PACKED_FP4

__all__ = ["LAYER_INDEX", "Spec", "added_tables", "module_kind", "residual_by_name"]
__all__ += ["router_holders", "stored_in_out", "tensor_spec"]

# NVFP4's activation scale: amax 6 (unit RMS, 6 sigma) / (e2m1's top 6 x e4m3's top 448)
NVFP4_INPUT_SCALE = 6.0 / (6.0 * 448.0)
FP4_MOMENT = 8.5625  # E[c^2] over the 16 e2m1 codes: (0+.25+1+2.25+4+9+16+36)/8
INT8_MOMENT = 127 * 128 / 3  # E[c^2] over the integers -127..127


RESIDUAL = {"o_proj", "down_proj", "out_proj", "w2", "wo", "fc2", "dense_4h_to_h", "c_proj"}
EMBEDDING = {"embed_tokens", "wte", "wpe", "word_embeddings", "tok_embeddings", "embeddings"}
ROUTER = {"gate", "router"}
SINK = {"sinks"}  # GPT-OSS's per-head attention sink logits
_SCALE = re.compile(r"(?:^|_)scale(?:_inv|_2)?$")
# A decoder layer's tensors: ``model.layers.<i>.``, GPT-2's ``h.<i>.``, ``blocks.<i>.``, and
# DeepSeek-V4's MTP layers ``mtp.<i>.``, HY-V4's ``model.mtp_layers.<i>.``, ERNIE 4.5's MTP
# blocks ``model.mtp_block.<i>.`` (their block a decoder layer's: quantized, routed alike)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|mtp|mtp_layers|mtp_block)\.(\d+)\.")


class Spec(NamedTuple):
    """What a tensor gets (docs/realistic.md)."""

    role: str
    kind: str  # uniform | codes (integers in its bytes) | const | e8m0 (low or low + 1) | skip
    low: float = 0.0
    high: float = 0.0
    # where a weight's rows sum to zero over its inputs: the dimension (-1 or -2) whose second
    # half holds the first half's values negated (an odd middle element 0); 0: independent values
    center: int = 0


def module_kind(module: torch.nn.Module) -> str:
    """``"norm"``, ``"lm_head"``, ``"embedding"``, ``"conv"``, ``"transposed"`` or ``""``,
    from the module's class: the last two say where a weight's fan-in is."""
    name = type(module).__name__
    if name == "Conv1D":  # transformers' GPT-2 family: a linear stored (in, out)
        return "transposed"
    if getattr(module, "is_transposed", False) is True:  # transformers' experts [E, in, out]
        return "transposed"
    if isinstance(module, torch.nn.modules.conv._ConvNd):  # (out, in / groups, *kernel)
        return "conv"
    # a lookup whatever its class adds after it (Inkling's ``InklingNormedEmbedding``)
    if isinstance(module, torch.nn.Embedding) and "Rotary" not in name:
        return "embedding"
    if isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or "Norm" in name:
        return "norm"
    if "LMHead" in name:
        return "lm_head"
    if isinstance(module, torch.nn.Embedding) or name.endswith("Embedding"):
        return "" if "Rotary" in name else "embedding"  # rotary tables are no embeddings
    return ""


def router_holders(model: torch.nn.Module) -> set[int]:
    """The ids of the modules whose ``weight`` is a router's: a module named ``gate``/``router``
    (:data:`ROUTER`) with a 2-D weight of its own (Mixtral's ``gate``, GraniteMoE's ``router``,
    whose checkpoint calls that weight ``router.layer.weight``), else the one module holding a
    2-D parameter inside such a module whose other parameters are biases (JetMoE's and DBRX's
    ``router.layer``, HunYuan-MoE's ``gate.wg``, LongCat-Flash's ``router.classifier``). A
    router module of more 2-D parameters (Zaya's MLP router) or of vectors that scale its input
    or output (Gemma 4's ``scale``, ``per_expert_scale``) holds none: the routing's offsets
    would not reach its logits as they are written."""
    found = set()
    for name, m in model.named_modules():
        if name.rpartition(".")[2] not in ROUTER:
            continue
        own = getattr(m, "weight", None)
        if isinstance(own, torch.Tensor) and own.dim() == 2:
            found.add(id(m))
            continue
        params = list(m.named_parameters())
        wide = [n for n, p in params if p.dim() == 2]
        if len(wide) != 1 or wide[0].rpartition(".")[2] != "weight":
            continue
        others = [n for n, p in params if n != wide[0]]
        if all(n.rpartition(".")[2].endswith("bias") for n in others):
            found.add(id(m.get_submodule(wide[0].rpartition(".")[0])))
    return found


def stored_in_out(entries: Iterable[tuple]) -> set[str]:
    """The names of the weights stored (in, out) among ``entries`` ((module, full name, ...)):
    the one list the writers that pick a weight's input or output dimension by role share (the
    routing's carrier, the speculative design's code columns), since a square one's shape
    alone cannot tell (GPT-2's attention ``c_proj``)."""
    kinds: dict[int, str] = {}  # a module's kind, read once (a model's experts share theirs)
    found = set()
    for module, name, *_ in entries:
        kind = kinds.get(id(module))
        if kind is None:
            kind = kinds[id(module)] = module_kind(module)
        if kind == "transposed":
            found.add(name)
    return found


def added_tables(
    specs: Mapping[str, Spec], shapes: Mapping[str, Sequence[int]], vocab: int | None,
    hidden: int, lookup: Collection[str] = (),
) -> list[str]:  # fmt: skip
    """The embedding-role tables of the residual's width that are not the vocabulary's (a
    learned or sinusoidal position table: GPT-2's ``wpe``, OPT's, BART's, Marian's
    ``embed_positions``; a token-type table): the model adds a row of each to the lookup, so
    a column the writers reserve in the lookup (the routing's carrier, the speculative
    design's code columns) holds 0 in them. The vocabulary's tables are ``lookup`` (the names
    the model's class says are its lookup and its copies: :func:`.hf_model.vocabulary_tensors`)
    where one of them is such a table, whatever the others' row counts (a position table may
    have as many rows as the vocabulary). Where the class does not say (an engine's class),
    by row count: those of ``vocab`` rows; where none has (no vocabulary given, an engine's
    table padded or split across ranks), the largest: a table the lookup is taken for loses
    nothing, the lookup taken for an added one would lose the reserved column."""
    rows = {}
    for name, spec in specs.items():
        shape = tuple(shapes[name])
        if spec.role == "embedding" and len(shape) == 2 and shape[1] == hidden:
            rows[name] = int(shape[0])
    if any(name in lookup for name in rows):
        return [name for name in rows if name not in lookup]
    if not rows:
        return []
    lookup_rows = vocab if vocab in rows.values() else max(rows.values())
    return [name for name, r in rows.items() if r != lookup_rows]


def _fp8_bound(dtype: torch.dtype) -> float:
    """A scaled FP8 weight's codes' range, within float16's (the op's values go through it)."""
    return min(torch.finfo(dtype).max, 32752.0)


def _moment(dtype: torch.dtype) -> float:
    """E[c^2] of the codes a scaled weight of ``dtype`` gets."""
    if dtype in PACKED_FP4:
        return FP4_MOMENT
    return INT8_MOMENT if dtype == torch.int8 else _fp8_bound(dtype) ** 2 / 3


def _stem(name: str) -> str:
    """What a tensor's role is read from: its owner's name for ``<owner>.weight``, else its own
    name without ``_weight``/``_blocks`` (``w2_weight``, ``experts.down_proj``)."""
    parts = name.split(".")
    local, owner = parts[-1], (parts[-2] if len(parts) > 1 else "")
    return owner if local == "weight" else re.sub(r"_?(?:weight|blocks)$", "", local)


def residual_by_name(name: str) -> bool:
    """Whether the tensor ``name`` (full) is a residual branch's output by its name alone
    (:data:`RESIDUAL`): a checkpoint tensor that transformers' conversion loads into it is one
    too, whatever the checkpoint calls it (GraniteMoE's ``output_linear.weight`` is in memory
    ``experts.down_proj``)."""
    return _stem(name) in RESIDUAL


def _role(
    name: str, shape: Sequence[int], dtype: torch.dtype, kind: str, layers: int,
    embed: float = 1.0, residual: bool = False, combine: float = 1.0, router: bool = False,
):  # fmt: skip
    """(role, standard deviation) of a weight-like tensor; ``embed``: the embedding's multiplier
    in the model's code (its lookup then gets σ = 1/embed); ``residual``: a branch's output
    whatever its name; ``router``: a router's weight whatever its name
    (:func:`router_holders`); ``combine``: what the code multiplies a branch's output by (a MoE's
    combine weights' sum: its experts' outputs get σ/combine)."""
    local, stem = name.rsplit(".", 1)[-1], _stem(name)
    if _is_mxfp4_blocks(local, shape, dtype):  # [..., N, K/32, 16]: its own layout
        fan_in = shape[-2] * shape[-1] * 2
        local = stem
    else:
        fan_in = _fan_in(shape, dtype, kind)
    if kind == "lm_head" or stem == "lm_head":
        return "lm_head", 1.0
    if kind == "embedding" or stem in EMBEDDING:
        return "embedding", 1.0 / embed
    if stem in ROUTER or (router and len(shape) == 2):
        return "router", fan_in**-0.5
    if len(shape) >= 2 and (stem in RESIDUAL or residual):
        return "residual_out", (2 * layers * fan_in) ** -0.5 / combine
    if len(shape) >= 2 and local.endswith(("weight", "proj")):
        return "linear", fan_in**-0.5
    return "unknown", fan_in**-0.5


def _is_mxfp4_blocks(local: str, shape: Sequence[int], dtype: torch.dtype) -> bool:
    """GPT-OSS's MXFP4 weight ``<w>_blocks``: bytes ``[..., N, K/32, 16]``, two e2m1 codes
    each, one block of 32 codes per row of 16 bytes (its scales ``<w>_scales`` [..., N, K/32])."""
    return local.endswith("_blocks") and dtype in PACKED_FP4 and len(shape) >= 3 and shape[-1] == 16


def _fan_in(shape: Sequence[int], dtype: torch.dtype, kind: str) -> int:
    """The inputs a weight's output sums over, where :func:`module_kind` ``kind`` puts them:
    the last dimension (two FP4 codes a byte), the one before it for a weight stored
    (in, out) (``Conv1D``, transformers' transposed experts ``[E, in, out]``), a
    convolution's all but the first; 1 for a 0-d tensor."""
    dims = [int(d) for d in shape] or [1]
    dims[-1] *= 2 if dtype in PACKED_FP4 else 1
    if kind == "transposed" and len(dims) >= 2:
        return max(dims[-2], 1)
    if kind == "conv" and len(dims) >= 2:
        return max(math.prod(dims[1:]), 1)
    return max(dims[-1], 1)


Siblings = Mapping[str, tuple[Sequence[int], torch.dtype]]  # local name -> (logical shape, dtype)


def tensor_spec(
    name: str, shape: Sequence[int], dtype: torch.dtype, *, layers: int = 1, module: str = "",
    siblings: Siblings | None = None, value: float | None = None, norm: float = 1.0,
    embed_scale: float = 1.0, residual: bool = False, gain: bool = False, combine: float = 1.0,
    centered: bool = False, router: bool = False,
) -> Spec:  # fmt: skip
    """The fill of the tensor ``name`` (full) of logical ``shape`` and ``dtype``; ``module``:
    :func:`module_kind`; ``siblings``: its module's tensors; ``value``: dummy_weight_value;
    ``norm``, ``embed_scale``, ``residual``, ``gain``, ``combine``: a norm weight's constant,
    the embedding's multiplier, a residual branch's output by the dataflow, a decoder layer's
    own vector or scalar, what a MoE's combine weights sum to, an expert weight of non-negative
    inputs, its rows then of zero sum (:class:`Arch`; the defaults: by name, as in a plain
    pre-norm model); ``router``: a router's weight whatever its name (:func:`router_holders`)."""
    siblings = siblings or {}
    local = name.rsplit(".", 1)[-1]
    prefix = name[: len(name) - len(local)]
    if value is not None:
        return Spec("dummy_weight_value", "const", value)
    if not (dtype.is_floating_point or dtype in BYTE_VIEWED or dtype == torch.int8):
        return Spec("untouched", "skip")  # as vLLM: other integers are not weights
    if local.endswith("_scales") and f"{local[:-7]}_blocks" in siblings:  # GPT-OSS's MXFP4
        blocks = siblings[f"{local[:-7]}_blocks"]
        _, std = _role(f"{prefix}{local[:-7]}_blocks", blocks[0], blocks[1], module, layers,
                       combine=combine)  # fmt: skip
        return _fp4_e8m0(std, blocks[1])
    if _SCALE.search(local) or dtype == E8M0:
        return _scale_spec(local, prefix, dtype, layers, module, siblings, combine)
    if local == "bias" or local.endswith("_bias"):
        return Spec("bias", "const", 0.0)
    if gain and len(shape) <= 1:
        return Spec("gain", "const", 1.0)
    owner = prefix[:-1].rsplit(".", 1)[-1]
    if len(shape) <= 1 and (module == "norm" or "norm" in owner):
        return Spec("norm", "const", norm)
    if local in SINK and len(shape) <= 1:  # a logit each head's softmax also sums over:
        return Spec("sink", "const", 0.0)  # 0, a typical key's score at unit-variance q, k
    role, std = _role(name, shape, dtype, module, layers, embed_scale, residual, combine, router)
    center = _center(local, shape, dtype, module) if centered else 0
    if dtype in BYTE_VIEWED:
        return Spec(role, "codes", 0, 256, center)
    scale = siblings.get(f"{local}_scale") or siblings.get(f"{local}_scale_inv")
    if dtype == torch.int8:
        k = _int8_reach(std, scale[1]) if scale is not None else 127
        return Spec(role, "codes", -k, k + 1, center)
    bound = std * math.sqrt(3)
    if scale is not None and dtype in FLOAT8:  # codes over the range, the scale brings the std
        top = _fp8_bound(dtype)
        if scale[1] in BYTE_VIEWED or _pow2(local, siblings):
            bound = bound / 2.0 ** _pow2_exponent(bound, top, scale[1])
        else:
            bound = min(top, bound / _float_scale(bound / top, scale[1]))
    return Spec(role, "uniform", -bound, bound, center)


def _center(local: str, shape: Sequence[int], dtype: torch.dtype, kind: str) -> int:
    """The dimension a centered weight's rows sum to zero over: its inputs' (the last, the one
    before it for a weight stored (in, out)); 0 where a row's values are not symmetric codes
    under one scale per half (MXFP4's blocks: E8M0 scales drawn per block of 32; a convolution)."""
    if len(shape) < 2 or kind == "conv" or _is_mxfp4_blocks(local, shape, dtype):
        return 0
    return -2 if kind == "transposed" else -1


def _pow2(weight: str, siblings: Siblings) -> bool:
    """An FP8 weight's block scales (``<w>_scale_inv``, float) are powers of two, as DeepSeek's
    checkpoints' are: recipes that round block scales to UE8M0 (DeepGEMM's) keep them exactly."""
    inv = siblings.get(f"{weight}_scale_inv")
    return inv is not None and inv[1].is_floating_point and inv[1] != E8M0


def _tiny(dtype: torch.dtype) -> float:
    """The smallest normal value of a float scale's dtype (0 for others)."""
    return torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0


def _float_scale(value: float, dtype: torch.dtype) -> float:
    """A scale of ``dtype`` for the exact ``value``: itself, or where it would underflow
    (e4m3: below 2^-6, or 0), the dtype's smallest normal value, the rest of the factor moved
    into the codes (their range shrinks by value / scale): the product keeps its statistics."""
    return max(value, _tiny(dtype))


def _positive(value: float, dtype: torch.dtype) -> float:
    """``value``, but at least the smallest positive value of a float ``dtype``."""
    info = torch.finfo(dtype) if dtype.is_floating_point else None
    return max(value, info.tiny * info.eps) if info is not None else value


def _int8_reach(std: float, dtype: torch.dtype) -> int:
    """The largest k <= 127 whose int8 codes -k..k give a scale std / sqrt(E[c^2]) that is
    normal in ``dtype``: the factor an underflowing scale cannot hold moves into the codes."""
    k = 127
    while k > 1 and std / math.sqrt(k * (k + 1) / 3) < _tiny(dtype):
        k -= 1
    return k


def _exponent(bound: float, top: float) -> int:
    """e such that bound / 2^e is in (top/2, top]: FP8 codes for a power-of-two scale."""
    return math.ceil(math.log2(bound / top))


def _pow2_exponent(bound: float, top: float, dtype: torch.dtype) -> int:
    """:func:`_exponent`, but no power of two below a float scale dtype's smallest normal
    value: there the codes' range shrinks instead (E8M0 reaches 2^-127)."""
    e = _exponent(bound, top)
    return max(e, math.frexp(_tiny(dtype))[1] - 1) if dtype not in BYTE_VIEWED else e


def _scale_spec(local, prefix, dtype, layers, module, siblings, combine=1.0) -> Spec:
    """A weight's scales: constant but E8M0 scales of FP4 codes; of no 1-byte weight: 1.0."""
    base, _, level = local.rpartition("_scale")
    weight = siblings.get(base)
    if local == "input_scale" and "weight_scale_2" in siblings and dtype.is_floating_point:
        # NVFP4's static activation scale, amax / (6 * 448) as ModelOpt calibrates it, for the
        # unit-RMS activations this mode keeps (amax taken at 6 sigma)
        return Spec("scale", "const", NVFP4_INPUT_SCALE)
    if weight is None or weight[1] not in {*BYTE_VIEWED, *FLOAT8, torch.int8}:
        return Spec("scale", "const", 127 if dtype in BYTE_VIEWED else 1.0)
    _, std = _role(prefix + base, weight[0], weight[1], module, layers, combine=combine)
    if f"{base}_scale_2" in siblings:  # NVFP4: block scales at e4m3's top, the rest in scale_2
        first = siblings.get(f"{base}_scale", (None, torch.float32))[1]
        top = torch.finfo(first).max if first in FLOAT8 else 1.0
        total = std / math.sqrt(FP4_MOMENT)
        # scale_2 where it underflows its dtype: its smallest normal, the block scales smaller
        second = _float_scale(total / top, siblings[f"{base}_scale_2"][1])
        if level == "_2":
            return Spec("weight_scale_2", "const", second)
        # at most the top: total / (total / top) can round a hair above it, which e4m3 refuses
        return Spec("weight_scale", "const", min(_float_scale(total / second, first), top))
    if level == "_inv" and dtype not in BYTE_VIEWED and weight[1] in FLOAT8:  # block scales: 2^e
        e = _pow2_exponent(std * math.sqrt(3), _fp8_bound(weight[1]), dtype)
        return Spec("weight_scale", "const", 2.0**e)
    if dtype not in BYTE_VIEWED:
        if weight[1] in FLOAT8:  # the codes' range shrinks where the scale would underflow
            top = _fp8_bound(weight[1])
            return Spec("weight_scale", "const", _float_scale(std * math.sqrt(3) / top, dtype))
        # int8 codes narrow down to -1..1; FP4 codes are fixed: below that, the scale is
        # subnormal, at worst the dtype's smallest positive value (never 0)
        k = _int8_reach(std, dtype) if weight[1] == torch.int8 else 0
        moment = k * (k + 1) / 3 if k else _moment(weight[1])
        return Spec("weight_scale", "const", _positive(std / math.sqrt(moment), dtype))
    if weight[1] in FLOAT8:  # E8M0 scales of FP8 codes: one power of two, the codes' range tuned
        e = _exponent(std * math.sqrt(3), _fp8_bound(weight[1]))
        return Spec("weight_scale", "const", min(max(e + 127, 0), 254))
    return _fp4_e8m0(std, weight[1])


def _fp4_e8m0(std: float, codes: torch.dtype) -> Spec:
    """E8M0 scales of FP4 codes: 2^e or 2^(e+1) per block, in the mixture giving σ²."""
    var = std**2 / _moment(codes)
    e = math.floor(math.log2(var) / 2)
    share = (4 * 4.0**e - var) / (3 * 4.0**e)  # of 2^e
    low, cut = min(max(e + 127, 0), 253), round(share * 256)
    if not 0 < cut < 256:
        return Spec("weight_scale", "const", low if cut >= 256 else low + 1)
    return Spec("weight_scale", "e8m0", low, cut)
