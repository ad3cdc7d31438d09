"""Models with every kind of tensor the engines' dummy loaders treat differently, and
byte comparisons over all of a model's tensors (parameters and every buffer)."""

from __future__ import annotations

import torch
from conftest import storage_bytes
from torch import nn

E4M3, E5M2, E8M0, FP4 = (
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e8m0fnu,
    torch.float4_e2m1fn_x2,
)


def _param(shape, dtype, device, *, transpose=False, step=1, **attrs) -> nn.Parameter:
    if transpose:
        shape = shape[::-1]
    if step > 1:  # a view with gaps
        t = torch.empty(shape[:-1] + (shape[-1] * step,), dtype=dtype, device=device)[..., ::step]
    else:
        t = torch.empty(shape, dtype=dtype, device=device)
    p = nn.Parameter(t.t() if transpose else t, requires_grad=False)
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


class QuantLinear(nn.Module):
    """A quantized linear layer's tensors: weight, per-channel and 0-dim scales."""

    def __init__(self, out, inp, wdtype, sdtype, device, *, sname="weight_scale", **kw):
        super().__init__()
        self.weight = _param((out, inp), wdtype, device, **kw)
        setattr(self, sname, _param((out, 1), sdtype, device))
        self.input_scale = _param((), torch.float32, device)


class Block(nn.Module):
    def __init__(self, device, fp4: bool, dummy_values: bool):
        super().__init__()
        self.q_proj = QuantLinear(40, 48, E4M3, torch.float32, device)
        self.k_proj = QuantLinear(24, 48, E5M2, torch.float32, device, transpose=True)
        self.v_proj = QuantLinear(24, 96, E4M3, torch.bfloat16, device, step=2)
        self.int8_proj = QuantLinear(16, 32, torch.int8, torch.float32, device)
        # MX-style: packed FP4 stored as uint8 with uint8 (E8M0) scales, and the torch dtypes
        self.mx_proj = QuantLinear(16, 32, torch.uint8, torch.uint8, device)
        self.mx_e8m0 = QuantLinear(16, 32, torch.uint8 if not fp4 else FP4, E8M0, device)
        # NVFP4/block-FP8 scale names SGLang sets to 1.0
        self.nv_proj = QuantLinear(16, 32, E4M3, torch.float32, device, sname="weight_scale_2")
        self.blk_proj = QuantLinear(16, 32, E4M3, torch.float32, device, sname="weight_scale_inv")
        self.mlp = nn.Module()
        self.mlp.inner = nn.Module()  # nesting three deep
        self.mlp.inner.down = QuantLinear(32, 40, E4M3, torch.float32, device)
        self.norm = nn.LayerNorm(48, dtype=torch.bfloat16, device=device)
        self.k_scale = _param((), torch.float32, device)
        if dummy_values:  # vLLM >= 0.30 fills these values in
            self.norm.weight.dummy_weight_value = 1.0
            self.k_scale.dummy_weight_value = 1.0
        self.register_buffer("rope", torch.empty(8, 6, device=device))
        self.register_buffer("inv_freq", torch.empty(6, device=device), persistent=False)
        self.register_buffer("positions", torch.empty(5, dtype=torch.int64, device=device))
        self.register_buffer("idx8", torch.empty(5, dtype=torch.int8, device=device))


class EngineModel(nn.Module):
    """Two blocks, a bfloat16 embedding tied to the head, float16 and float32 extras.
    ``fp4``: include float4_e2m1fn_x2 (vLLM >= 0.33 only: the others raise on it);
    ``meta``: include a meta parameter (skipped by vLLM; SGLang raises);
    ``dummy_values``: ``dummy_weight_value`` attributes on a norm and a 0-dim scale."""

    def __init__(self, device="cpu", *, fp4=False, meta=False, dummy_values=True):
        super().__init__()
        self.embed = nn.Embedding(64, 48, dtype=torch.bfloat16, device=device)
        self.layers = nn.ModuleList([Block(device, fp4, dummy_values) for _ in range(2)])
        self.head = nn.Linear(48, 64, bias=False, dtype=torch.bfloat16, device=device)
        self.head.weight = self.embed.weight  # tied
        self.extra = nn.Linear(8, 8, dtype=torch.float16, device=device)
        self.wide = nn.Parameter(torch.empty(3, 5, dtype=torch.float64, device=device))
        if meta:
            self.deferred = nn.Parameter(torch.empty(4, 4, dtype=E4M3, device="meta"))
        for t in all_tensors(self).values():
            if t.device.type != "meta":
                storage_bytes(t).fill_(0x55)


def all_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer (non-persistent ones too), by name."""
    out = {}
    for prefix, m in model.named_modules(remove_duplicate=False):
        for k, v in [*m._parameters.items(), *m._buffers.items()]:
            if v is not None:
                out[f"{prefix}.{k}" if prefix else k] = v
    return out


def assert_same_bytes(a: nn.Module, b: nn.Module) -> int:
    """Every tensor's whole storage equal byte for byte; returns how many were compared."""
    ta, tb = all_tensors(a), all_tensors(b)
    assert list(ta) == list(tb)
    n = 0
    for name in ta:
        x, y = ta[name], tb[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if x.device.type == "meta":
            continue
        assert torch.equal(storage_bytes(x).cpu(), storage_bytes(y).cpu()), name
        n += 1
    return n


def changed(model: nn.Module) -> set[str]:
    """Names of the tensors whose bytes are no longer all 0x55 (the poison)."""
    return {
        name
        for name, t in all_tensors(model).items()
        if t.device.type != "meta" and not bool((storage_bytes(t) == 0x55).all())
    }


def spy_fused(monkeypatch) -> list:
    """Records the dtype of every tensor fp8_dummy's operators fill through the engine
    integrations (fp8_dummy.engines.core.execution's calls)."""
    from fp8_dummy.engines import core

    seen: list = []

    def wrap(fn):
        def spy(t, *args, **kwargs):
            seen.extend(x.dtype for x in (t if isinstance(t, list) else [t]))
            return fn(t, *args, **kwargs)

        return spy

    for name in ("init_", "init_many_"):
        monkeypatch.setattr(core.execution, name, wrap(getattr(core.execution, name)))
    return seen


def spy_calls(monkeypatch) -> tuple[list, list]:
    """(the tensors the vLLM plugin's per-tensor fill gets, the length of each list
    fp8_dummy's batch gets through the engine integrations)."""
    from fp8_dummy.engines import core
    from fp8_dummy.engines import vllm as fvllm

    per_tensor, batches = [], []
    fill_single, init_many_ = fvllm.fill_single, core.execution.init_many_
    held, kept = core.execution.init_many_held, core.execution.init_many_kept

    def one(t, *args, **kwargs):
        per_tensor.append(t)
        return fill_single(t, *args, **kwargs)

    def batch(tensors, *args, **kwargs):
        batches.append(len(tensors))
        return init_many_(tensors, *args, **kwargs)

    def held_batch(lst, count, fill, *args):  # a new plan's, from the list its facts held
        batches.append(len(fill))
        return held(lst, count, fill, *args)

    def kept_batch(tensors, facts, fill, *args):  # a kept plan's, checked and filled at once
        batches.extend([len(fill)] * bool(fill))
        return kept(tensors, facts, fill, *args)

    monkeypatch.setattr(fvllm, "fill_single", one)
    monkeypatch.setattr(core.execution, "init_many_", batch)
    monkeypatch.setattr(core.execution, "init_many_held", held_batch)
    monkeypatch.setattr(core.execution, "init_many_kept", kept_batch)
    return per_tensor, batches
