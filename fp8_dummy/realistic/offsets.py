"""The probe of each norm's offset c, for a norm computing (c + w) * x̂ (Gemma's c = 1): the
norm run on a fixed input with its weight substituted (nothing written). A model's norms are a
few kinds repeated in every layer: norms alike in all the probe reads are run once."""

from __future__ import annotations

import math

import torch

from .probes import is_norm

__all__ = ["norm_offsets"]


def norm_offsets(model: torch.nn.Module) -> dict[str, float]:
    """c for each norm computing (c + w) * x̂: the norm run with weight 0 and 1 (its other
    1-D tensors 0) on a fixed input; out(0) = c·x̂, out(1) - out(0) = x̂. Norms alike
    (:func:`_alike`: a model's every layer holds the same few) are run once."""
    found, seen = {}, {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not (is_norm(name, m) and isinstance(w, torch.Tensor) and w.dim() == 1):
            continue
        key = _alike(m, w)
        c = seen[key] if key in seen else _offset(m, w)
        if key is not None:
            seen[key] = c
        if c is not None:
            found[name] = c
    return found


def _offset(m: torch.nn.Module, w: torch.Tensor) -> float | None:
    x = torch.randn(2, w.numel(), generator=torch.Generator().manual_seed(0)).to(w)
    zeros = {n: torch.zeros_like(t) for n, t in m.named_parameters() if t.dim() == 1}
    try:
        out0 = torch.func.functional_call(m, zeros, (x,)).float()
        out1 = torch.func.functional_call(m, {**zeros, "weight": torch.ones_like(w)}, (x,))
    except Exception:  # a norm taking other inputs (a gate): no offset  # noqa: BLE001
        return None
    if not isinstance(out1, torch.Tensor) or out1.shape != out0.shape:
        return None
    d = out1.float() - out0
    c = ((out0 * d).sum() / (d * d).sum()).item() if d.abs().sum() > 0 else 0.0
    c = round(c * 256) / 256  # the model's dtype rounds: 1 is 1
    return c if math.isfinite(c) and c != 0 else None


_MODULE_STATE = frozenset(vars(torch.nn.Module()))  # what every module holds (its hooks...)
_PLAIN = (int, float, str, bool, type(None), torch.dtype)


def _alike(m: torch.nn.Module, w: torch.Tensor) -> tuple | None:
    """What the offset probe of norm ``m`` reads: its class, mode, its 1-D parameters' names,
    shapes and dtypes (their values are substituted) and its own plain attributes (eps...);
    None (probed on its own) for a norm with children, hooks, buffers, a parameter of another
    rank, or an attribute that is no plain value."""
    if m._modules or m._buffers or any(p is None or p.dim() != 1 for p in m._parameters.values()):
        return None
    hooks = [v for k, v in vars(m).items() if k in _MODULE_STATE and "hook" in k and v]
    if hooks:
        return None
    attrs = sorted((k, v) for k, v in vars(m).items() if k not in _MODULE_STATE)
    if not all(type(v) in _PLAIN for _, v in attrs):
        return None
    params = tuple((n, tuple(p.shape), p.dtype, p.device) for n, p in m._parameters.items())
    return (type(m), m.training, w.device, params, tuple(attrs))
