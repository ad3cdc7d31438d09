"""Small models for whole-model initialization tests, and the reference loop over them."""

from __future__ import annotations

import torch
from conftest import FP8_DTYPES, WIDE_DTYPES

import fp8_dummy
from fp8_dummy import reference


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


def loop_reference(model, low, high, seed, scales="random"):
    """vLLM's loop, with the scale policy applied by hand."""
    for name, p in model.state_dict().items():
        if not torch.is_floating_point(p):
            continue
        if scales == "neutral" and fp8_dummy.is_scale_tensor(name, p):
            p.fill_(1.0)
        else:
            reference.new_path(p, low, high, seed)
