"""MTP input projections a quantized checkpoint holds quantized (DeepSeek-V4's ``e_proj`` and
``h_proj``: vLLM's class builds them with the quantization config, and the real checkpoints hold
them in FP8), with the design's entries exact. The design writes 0 and 1 into them
(:func:`.design.plan_design`'s rows that copy S2 of the normalized embedding,
:func:`.design.carrier_rows`' carrier); a 1 is a code only where the scale's inverse is one.
So their scales are the power of two :data:`UNIT_SCALE`: FP8's every scale (per tensor, channel
or block), the 1 its code 256; NVFP4's ``weight_scale_2``, the rows holding a 1 their block
scales 256 and the 1 the e2m1 code 1.0 (each such row is 0 elsewhere). The rest of each weight
keeps the rule's σ: its codes' range (FP8) or its block scales (NVFP4) take the rest of the
rule's scale."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..formats import Format
from ..routing import Kept
from ..rules import Spec

__all__ = ["UNIT_SCALE", "unit_overrides", "unit_specs"]

UNIT_SCALE = 2.0**-8  # 1 / 256: 256 an e4m3 code, 256 an e4m3 block scale of e2m1's 1.0
_E2M1_ONE = 0b0010  # the e2m1 code of 1.0 (sign 0, exponent 01, mantissa 0)


def _names(weight: str) -> tuple[str, str]:
    prefix = weight[: -len("weight")]
    return prefix + "weight_scale", weight + "_scale_inv"


def unit_specs(weight: str, specs: Mapping[str, Spec], fmt: Format) -> dict[str, Spec]:
    """The specs of the quantized projection ``weight``'s tensors (``specs``: the rule's) with
    the scale :data:`UNIT_SCALE`, the product of codes and scales the rule's."""
    scale, inv = _names(weight)
    if fmt.quant == "nvfp4":
        block, second = specs[scale], specs[scale[: -len("scale")] + "scale_2"]
        product = block.low * second.low
        return {
            scale[: -len("scale")] + "scale_2": second._replace(low=UNIT_SCALE),
            scale: block._replace(low=product / UNIT_SCALE),
        }
    if fmt.quant not in ("per-tensor", "channel", "block"):
        raise ValueError(f"fp8_dummy: {fmt.name}: no unit scale for {weight}")
    name = inv if fmt.quant == "block" else scale
    rule, codes = specs[name], specs[weight]
    assert rule.kind == "const" and codes.kind == "uniform", (rule, codes)
    bound = codes.high * rule.low / UNIT_SCALE  # the rule's σ√3 in codes of the unit scale
    return {name: rule._replace(low=UNIT_SCALE), weight: codes._replace(low=-bound, high=bound)}


def unit_overrides(weight: str, items: Sequence, fmt: Format) -> dict[str, list]:
    """The design's overrides of the logical projection ``weight`` (values 0 and 1, in the
    logical [out, in] layout) as its quantized tensors' (codes, NVFP4's packed bytes and the
    block scales of its rows that hold a 1)."""
    if fmt.quant != "nvfp4":
        out = []
        for dim, index, value in items:
            _check(value, weight)
            out.append((dim, index, np.asarray(value, dtype=np.float32) / UNIT_SCALE))
        return {weight: [(d, i, float(v) if v.ndim == 0 else v) for d, i, v in out]}
    scale = weight[: -len("weight")] + "weight_scale"
    packed, scales = [], []
    for dim, index, value in items:
        _check(value, weight)
        if np.ndim(value) == 0:
            if dim == 1:  # a column of zeros: its code only, its byte's other code kept
                if not isinstance(index, int):
                    raise TypeError(f"fp8_dummy: {weight}: a column of zeros at one index")
                # (an even column's code the low nibble, as ModelOpt packs them)
                packed.append((1, index // 2, Kept(0xF0 if index % 2 == 0 else 0x0F)))
            else:
                packed.append((0, index, 0.0))
            continue
        assert dim == 0, "the design's vectors are rows"
        nib = np.asarray(value, dtype=np.float32).astype(np.uint8) * _E2M1_ONE
        packed.append((0, index, (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)))
        scales.append((0, index, 1.0 / UNIT_SCALE))
    return {weight: packed, scale: scales} if scales else {weight: packed}


def _check(value, weight: str) -> None:
    v = np.asarray(value)
    if not np.isin(v, (0.0, 1.0)).all():
        raise ValueError(f"fp8_dummy: {weight}: the design writes 0 and 1 only into it")
