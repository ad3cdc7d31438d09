"""TensorRT-LLM's dummy-weight function as a plain-torch loop, written from the semantics
page (docs/trtllm.md, "TensorRT-LLM"), never through fp8_dummy: no TensorRT-LLM wheel can be
installed here, so this is the reference the tests compare fp8_dummy.trtllm with (and the
stand-in loader function of the opt-in hook's tests). The random numbers are torch's own
uniform_ on a contiguous float16 temp; the conversion torch's own .to(dtype)
(tests/test_init_cpu_contiguous_temp.py checks that one against numpy: truncation, then
modulo 256 on the CPU)."""

from __future__ import annotations

import torch

# 1-byte dtypes: their bounds, whatever low/high say. Every other 1-byte dtype is refused.
BYTE_BOUNDS = {torch.float8_e4m3fn: (-3.0, 3.0), torch.int8: (-3.0, 3.0), torch.uint8: (0, 64)}


@torch.no_grad()
def initialize_dummy_weights(model, low=-1e-3, high=1e-3, seed=0):
    for t in model.state_dict().values():
        g = torch.Generator(device=t.device)  # meta: RuntimeError, before anything else
        g.manual_seed(seed)
        if t.element_size() < 2:
            if t.dtype not in BYTE_BOUNDS:
                raise NotImplementedError(f"Unknown quantized type: {t.dtype}.")
            temp = torch.empty(t.shape, dtype=torch.float16, device=t.device)  # row-major
            temp.uniform_(*BYTE_BOUNDS[t.dtype], generator=g)
            t.copy_(temp.to(t.dtype))
        elif t.is_floating_point():
            t.uniform_(low, high, generator=g)
