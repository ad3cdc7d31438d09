"""The serving engines' dummy-weight functions as plain-torch loops, written from their
behaviour (vLLM 0.28-0.33's weight_utils and dummy_loader, SGLang 0.5.23's weight_utils),
in our own words and never through fp8_dummy. tests/test_engines_vllm.py and
tests/test_engines_sglang.py prove these against the engines' real code; the engine-free
tests (tests/test_engines_rules.py, also on a GPU, where no engine is installed) then
compare fp8_dummy with these.
"""

from __future__ import annotations

import torch

E8M0 = torch.float8_e8m0fnu
FP4 = torch.float4_e2m1fn_x2


def _generator(t: torch.Tensor, seed: int) -> torch.Generator:
    g = torch.Generator(device=t.device)
    g.manual_seed(seed)
    return g


@torch.no_grad()
def vllm_single(t, low=None, high=None, seed=1234, name="", *, generation=33, rocm=False):
    """vLLM's initialize_single_dummy_weight of the given generation (28: 0.28/0.29, 30:
    0.30-0.32, 33: 0.33), on a non-TPU platform."""
    if t.device.type == "meta":
        return
    if generation >= 30 and getattr(t, "dummy_weight_value", None) is not None:
        t.fill_(t.dummy_weight_value)
        return
    if generation >= 33:
        if t.dtype == E8M0 or (t.dtype == torch.uint8 and "scale" in name):
            t.view(torch.uint8).fill_(120)
            return
        if t.dtype == torch.int8:
            t.random_(-128, 128, generator=_generator(t, seed))
            return
        if t.dtype in (torch.uint8, FP4):
            t.view(torch.uint8).random_(0, 256, generator=_generator(t, seed))
            return
    if not t.is_floating_point():
        if rocm:
            t.zero_()
        return
    eight_bit = torch.finfo(t.dtype).bits < 16
    if generation >= 33:
        default = 1.0 if eight_bit else 1e-3
    else:
        default = 1e-3
    low = -default if low is None else low
    high = default if high is None else high
    g = _generator(t, seed)
    if eight_bit:
        if generation >= 30:
            scratch = torch.empty_like(t, dtype=torch.float16)
            scratch.uniform_(low, high, generator=g)
            t.copy_(scratch)
        else:  # 0.28/0.29: convert, fill, convert back (the same bytes)
            scratch = t.data.to(torch.float16).uniform_(low, high, generator=g)
            t.data.copy_(scratch.to(t.dtype))
    else:
        t.uniform_(low, high, generator=g)


def vllm_load_weights(model, generation=33, low=None, high=None, seed=1234) -> None:
    """DummyModelLoader.load_weights (no online-quantized layers): each module's own
    parameters and buffers except non-persistent ones; the local name from 0.33 on.
    (0.28/0.29 walk each module's state_dict: the same tensors, some filled again.) The
    loader passes no bounds or seed; ``low``, ``high``, ``seed`` model a caller that does."""
    for layer in model.modules():
        own = {**dict(layer._parameters), **dict(layer._buffers)}
        for name, t in own.items():
            if t is None or name in layer._non_persistent_buffers_set:
                continue
            given = name if generation >= 33 else ""
            vllm_single(t, low, high, seed, given, generation=generation)


def vllm_initialize_dummy_weights(model, low=-1e-3, high=1e-3, seed=1234, generation=30):
    """vLLM <= 0.30's initialize_dummy_weights: the single function over state_dict()."""
    for t in model.state_dict().values():
        vllm_single(t, low, high, seed, generation=generation)


def sglang_initialize_dummy_weights(model, low=-1e-3, high=1e-3, seed=1234):
    """SGLang 0.5.23's initialize_dummy_weights."""
    for name, t in model.state_dict().items():
        if not t.is_floating_point():
            continue
        if name.endswith("weight_scale_inv") or name.endswith("weight_scale_2"):
            t.fill_(1.0)
            continue
        g = _generator(t, seed)
        if torch.finfo(t.dtype).bits < 16:
            scratch = t.data.to(torch.float16).uniform_(low, high, generator=g)
            t.data.copy_(scratch.to(t.dtype))
        else:
            t.uniform_(low, high, generator=g)
