"""Small models for whole-model initialization tests, and the reference loop over them."""

from __future__ import annotations

import torch
from conftest import FP8_DTYPES, WIDE_DTYPES
from oracles import engines

import fp8_dummy


class EveryDtype(torch.nn.Module):
    """A linear layer per dtype, FP8 weight scales, a tied pair, an integer buffer."""

    def __init__(self, device="cpu"):
        super().__init__()
        for i, dt in enumerate(FP8_DTYPES + WIDE_DTYPES):
            lin = torch.nn.Linear(24 + i, 40, bias=False, device=device).to(dt)
            lin.weight_scale = torch.nn.Parameter(torch.empty(40, 1, device=device))
            setattr(self, f"lin{i}", lin)
        self.tied = self.lin0
        self.register_buffer("steps", torch.tensor([1, 2, 3], device=device))


@torch.no_grad()
def loop_reference(model, low, high, seed, scales="random"):
    """vLLM 0.33's dummy loader (fp8_dummy's default semantics, tests/oracles/engines.py),
    with the scale policy applied by hand to the floats that would get random values."""
    for prefix, layer in model.named_modules():
        for name, p in [*layer._parameters.items(), *layer._buffers.items()]:
            if p is None or name in layer._non_persistent_buffers_set:
                continue
            full = f"{prefix}.{name}" if prefix else name
            random_float = p.is_floating_point() and p.dtype != torch.float8_e8m0fnu
            if scales == "neutral" and random_float and fp8_dummy.is_scale_tensor(full, p):
                p.fill_(1.0)
            else:
                engines.vllm_single(p, low, high, seed, name)
