"""A quantized export read as a consumer reads it, independently of fp8_dummy: each quantized
linear weight decoded from its bytes (e4m3 codes, or two e2m1 codes a byte, the first in the low
nibble as ModelOpt packs them) times the scales its ``quantization_config`` says are beside it
(compressed-tensors' ``weight_scale`` per tensor or per output channel, FP8 block's
``weight_scale_inv`` per 128x128 block, ModelOpt NVFP4's e4m3 ``weight_scale`` per 16 along the
input times ``weight_scale_2``). ``unquantized`` writes the dequantized checkpoint beside it, for a
forward that reads plain weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def decode_e4m3(bits: np.ndarray) -> np.ndarray:
    """e4m3fn bytes -> float64, from the bits."""
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, man = (b >> 3) & 0xF, b & 0x7
    assert not ((exp == 15) & (man == 7)).any(), "NaN code"
    return sign * np.where(exp == 0, man / 8.0 * 2.0**-6, (1 + man / 8.0) * np.exp2(exp - 7.0))


def decode_e2m1_pairs(packed: np.ndarray) -> np.ndarray:
    """Two e2m1 codes a byte, the first element in the low nibble."""
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return np.where(nib & 8, -1.0, 1.0) * E2M1[nib & 7]


def _e4m3(t: torch.Tensor) -> np.ndarray:
    assert t.dtype == torch.float8_e4m3fn, t.dtype
    return decode_e4m3(t.view(torch.uint8).numpy())


def dequantized(t: dict[str, torch.Tensor], quant: dict) -> dict[str, torch.Tensor]:
    """``t`` (an export's tensors) with each quantized weight float64-decoded to float32 and its
    scales dropped; the rest as the file holds it."""
    method = quant["quant_method"]
    out = dict(t)
    for name in [n for n in t if n.endswith(".weight")]:
        owner = name[: -len("weight")]
        if method == "modelopt":
            if owner + "weight_scale_2" not in t:
                continue
            codes = decode_e2m1_pairs(t[name].numpy())
            blocks = np.repeat(_e4m3(t[owner + "weight_scale"]), 16, axis=1)
            value = codes * blocks * float(t[owner + "weight_scale_2"])
            extra = ("weight_scale", "weight_scale_2", "input_scale")
        elif method == "fp8":  # 128x128 blocks
            if name + "_scale_inv" not in t:
                continue
            s = t[name + "_scale_inv"].double().numpy()
            n, k = t[name].shape
            full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:n, :k]
            value, extra = _e4m3(t[name]) * full, ("weight_scale_inv",)
        else:  # compressed-tensors: one scale per tensor or per output channel
            assert method == "compressed-tensors", method
            if owner + "weight_scale" not in t:
                continue
            s = t[owner + "weight_scale"].double().numpy()
            value, extra = _e4m3(t[name]) * (s if s.ndim else float(s)), ("weight_scale",)
        out[name] = torch.from_numpy(value.astype(np.float32))
        for local in extra:
            out.pop(owner + local, None)
    return out


def unquantized(out: Path, to: Path) -> Path:
    """The export ``out`` dequantized into ``to``: its files, one shard, no
    ``quantization_config``."""
    from .deepseek_v4_mtp_forward import files

    to.mkdir(parents=True)
    for f in out.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".index.json")):
            shutil.copy(f, to / f.name)
    cfg = json.loads((out / "config.json").read_text())
    t = dequantized(files(out), cfg.pop("quantization_config"))
    (to / "config.json").write_text(json.dumps(cfg, indent=2))
    save_file({n: v.contiguous() for n, v in t.items()}, str(to / "model.safetensors"))
    weight_map = {n: "model.safetensors" for n in t}
    (to / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return to
