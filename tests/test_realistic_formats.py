"""Realistic mode (fp8_dummy.realistic): quantized linears in every format, decoded by an
independent numpy model of each format; the roles' rules; shards; errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import Spec, fill_, tensor_spec
from fp8_dummy.stateless import tensor_seed

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
E8M0 = getattr(torch, "float8_e8m0fnu", None)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
N, K, LAYERS = 256, 1024, 2


def decode_fp8(b: np.ndarray, exp_bits: int, bias: int, fnuz: bool = False) -> np.ndarray:
    """Bit patterns -> values (NaN/Inf patterns become NaN), written from the formats' layout."""
    b = b.astype(np.int64)
    man_bits = 7 - exp_bits
    sign = np.where(b >> 7 == 1, -1.0, 1.0)
    e = (b >> man_bits) & ((1 << exp_bits) - 1)
    m = b & ((1 << man_bits) - 1)
    v = np.where(
        e == 0, m / 2**man_bits * 2.0 ** (1 - bias), (1 + m / 2**man_bits) * 2.0 ** (e - bias)
    )
    v = sign * v
    if fnuz:
        return np.where(b == 0x80, np.nan, v)
    if exp_bits == 4:  # e4m3fn: S.1111.111 is NaN
        return np.where(b & 0x7F == 0x7F, np.nan, v)
    return np.where(e == 31, np.nan, v)  # e5m2: exponent all ones is Inf/NaN


DECODE = {
    E4M3: lambda b: decode_fp8(b, 4, 7),
    E5M2: lambda b: decode_fp8(b, 5, 15),
    torch.float8_e4m3fnuz: lambda b: decode_fp8(b, 4, 8, True),
    torch.float8_e5m2fnuz: lambda b: decode_fp8(b, 5, 16, True),
}


def nibbles(packed: np.ndarray) -> np.ndarray:
    """[..., K/2] bytes -> [..., K] e2m1 values (low nibble first, as ModelOpt packs)."""
    codes = np.stack([packed & 0xF, packed >> 4], -1).reshape(*packed.shape[:-1], -1)
    return np.where(codes & 8, -1.0, 1.0) * E2M1[codes & 7]


def e8m0(b: np.ndarray) -> np.ndarray:
    return np.where(b == 0xFF, np.nan, 2.0 ** (b.astype(np.float64) - 127))


def raw(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.uint8).numpy()


def values(t: torch.Tensor) -> np.ndarray:
    """A scale tensor's values, decoded here (E8M0 for uint8 scales, as vLLM reads them)."""
    if t.dtype in (torch.uint8, E8M0) and t.dim() > 0:
        return e8m0(raw(t))
    return DECODE[t.dtype](raw(t)) if t.dtype in DECODE else t.double().numpy()


def expand(scale: np.ndarray, rows: int, cols: int, shape: tuple) -> np.ndarray:
    """Blocks of rows x cols sharing one scale, cut to the weight's shape."""
    return np.repeat(np.repeat(scale, rows, -2), cols, -1)[..., : shape[-2], : shape[-1]]


class QuantLinear(torch.nn.Module):
    """A linear as vLLM's quantization methods declare it before loading."""

    def __init__(self, **tensors: torch.Tensor):
        super().__init__()
        for name, t in tensors.items():
            self.register_parameter(name, torch.nn.Parameter(t, requires_grad=False))


def zoo() -> dict:
    """name -> (module tensors, decoder(values of the module) -> dequantized weight)."""
    nb, kb = math.ceil(N / 128), math.ceil(K / 128)
    f32 = dict(dtype=torch.float32)
    z = {}
    for dt in DECODE:
        d = DECODE[dt]
        z[f"fp8_{str(dt)[6:]}_tensor"] = (
            dict(
                weight=torch.empty(N, K, dtype=dt),
                weight_scale=torch.empty((), **f32),
                input_scale=torch.empty((), **f32),
            ),
            lambda m, d=d: d(raw(m.weight)) * m.weight_scale.item(),
        )
    z["fp8_channel"] = (
        dict(weight=torch.empty(N, K, dtype=E4M3), weight_scale=torch.empty(N, 1, **f32)),
        lambda m: DECODE[E4M3](raw(m.weight)) * m.weight_scale.numpy().astype(np.float64),
    )
    z["fp8_block"] = (
        dict(weight=torch.empty(N, K, dtype=E4M3), weight_scale_inv=torch.empty(nb, kb, **f32)),
        lambda m: (
            DECODE[E4M3](raw(m.weight)) * expand(m.weight_scale_inv.numpy(), 128, 128, (N, K))
        ),
    )
    z["int8_channel"] = (
        dict(weight=torch.empty(N, K, dtype=torch.int8), weight_scale=torch.empty(N, 1, **f32)),
        lambda m: m.weight.numpy().astype(np.float64) * m.weight_scale.numpy(),
    )
    packs = [torch.uint8] + ([FP4] if FP4 is not None else [])
    for p in packs:
        z[f"nvfp4_{str(p)[6:]}"] = (
            dict(
                weight=torch.empty(N, K // 2, dtype=p),
                weight_scale=torch.empty(N, K // 16, dtype=E4M3),
                weight_scale_2=torch.empty((), **f32),
                input_scale=torch.empty((), **f32),
            ),
            lambda m: (
                nibbles(raw(m.weight))
                * np.repeat(DECODE[E4M3](raw(m.weight_scale)), 16, -1)
                * m.weight_scale_2.item()
            ),
        )
    for s in [torch.uint8] + ([E8M0] if E8M0 is not None else []):
        z[f"mxfp4_{str(s)[6:]}"] = (
            dict(
                weight=torch.empty(N, K // 2, dtype=torch.uint8),
                weight_scale=torch.empty(N, K // 32, dtype=s),
            ),
            lambda m: nibbles(raw(m.weight)) * np.repeat(e8m0(raw(m.weight_scale)), 32, -1),
        )
    if E8M0 is not None:  # FP8 with UE8M0 block scales (DeepGEMM's)
        z["fp8_block_ue8m0"] = (
            dict(
                weight=torch.empty(N, K, dtype=E4M3),
                weight_scale_inv=torch.empty(nb, kb, dtype=E8M0),
            ),
            lambda m: (
                DECODE[E4M3](raw(m.weight))
                * expand(e8m0(raw(m.weight_scale_inv)), 128, 128, (N, K))
            ),
        )
    return z


ZOO = zoo()


def build(tensors: dict, role: str) -> torch.nn.Module:
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList()
    for _ in range(LAYERS):
        layer = torch.nn.Module()
        layer.add_module(role, QuantLinear(**{n: t.clone() for n, t in tensors.items()}))
        model.layers.append(layer)
    return model


@pytest.mark.parametrize("fmt", list(ZOO))
@pytest.mark.parametrize("role", ["q_proj", "o_proj"])
def test_quantized_linear_zoo(fmt: str, role: str):
    tensors, dequant = ZOO[fmt]
    model = build(tensors, role)
    for t in model.parameters():  # poison: every byte must be written
        t.data.reshape(-1).view(torch.uint8).fill_(0xFF)
    roles = fp8_dummy.initialize_realistic_dummy_weights(model, seed=7)
    assert not [n for n, s in roles.items() if s.role == "unknown"]
    target = K**-0.5 if role == "q_proj" else (2 * LAYERS * K) ** -0.5
    for i, layer in enumerate(model.layers):
        m = getattr(layer, role)
        for name, t in m.named_parameters():  # no NaN or Inf code anywhere
            if t.dtype in DECODE or t.dtype == E8M0 or "scale" in name:
                assert not np.isnan(values(t)).any(), f"{name}: NaN/Inf code"
            elif t.dtype.is_floating_point and t.dtype != FP4:
                assert torch.isfinite(t).all(), name
        for n, t in m.named_parameters():
            if n.startswith("weight_scale"):
                assert (values(t) > 0).all(), f"{n}: scales must be positive"
        w = dequant(m)
        assert np.isfinite(w).all()
        std = w.std()
        print(f"{fmt} {role} layer {i}: dequantized std {std:.5g}, target {target:.5g}")
        assert abs(std / target - 1) < 0.15, (fmt, role, std, target)
        # codes spread over the range: few zeros, many distinct codes
        codes = raw(m.weight)
        assert (codes == 0).mean() < 0.05
        assert len(np.unique(codes)) > 64
        assert roles[f"layers.{i}.{role}.weight"].role == (
            "linear" if role == "q_proj" else "residual_out"
        )
        if "input_scale" in dict(m.named_parameters()):  # NVFP4's: amax 6 / (6 * 448)
            nvfp4 = "weight_scale_2" in dict(m.named_parameters())
            want = np.float32(6.0 / (6.0 * 448.0)) if nvfp4 else 1.0
            assert m.input_scale.item() == want
        if fmt.startswith("mxfp4"):  # the mixture of two exponents that reaches the variance
            assert len(np.unique(raw(m.weight_scale))) == 2


# The rules by name and module, vLLM's fused names and transformers' names.
class RMSNorm(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n))


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, v: int, h: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(v, h, dtype=torch.bfloat16))


class ParallelLMHead(VocabParallelEmbedding):
    pass


def linear(o: int, i: int, bias: bool = False, dtype=torch.bfloat16) -> torch.nn.Module:
    m = torch.nn.Module()
    m.weight = torch.nn.Parameter(torch.empty(o, i, dtype=dtype))
    if bias:
        m.bias = torch.nn.Parameter(torch.empty(o, dtype=dtype))
    return m


def vllm_like(layers: int = 3, h: int = 64, e: int = 8, i: int = 32) -> torch.nn.Module:
    """A model with vLLM's module and parameter names (fused projections, FusedMoE)."""
    model = torch.nn.Module()
    model.embed_tokens = VocabParallelEmbedding(128, h)
    model.layers = torch.nn.ModuleList()
    for _ in range(layers):
        layer = torch.nn.Module()
        layer.input_layernorm = RMSNorm(h)
        layer.self_attn = torch.nn.Module()
        layer.self_attn.qkv_proj = linear(3 * h, h, bias=True)
        layer.self_attn.o_proj = linear(h, h)
        layer.self_attn.rotary = torch.nn.Module()
        layer.self_attn.rotary.register_buffer("cos_sin_cache", torch.full((4, 4), 7.0), False)
        layer.mlp = torch.nn.Module()
        layer.mlp.gate = linear(e, h, dtype=torch.float32)
        layer.mlp.gate.register_buffer("e_score_correction_bias", torch.empty(e))
        layer.mlp.experts = torch.nn.Module()
        ex = layer.mlp.experts
        ex.w13_weight = torch.nn.Parameter(torch.empty(e, 2 * i, h, dtype=E4M3), False)
        ex.w13_weight_scale_inv = torch.nn.Parameter(torch.empty(e, 1, 1), False)
        ex.w2_weight = torch.nn.Parameter(torch.empty(e, h, i, dtype=E4M3), False)
        ex.w2_weight_scale_inv = torch.nn.Parameter(torch.empty(e, 1, 1), False)
        ex.w13_input_scale = torch.nn.Parameter(torch.empty(e), False)
        ex.register_buffer("expert_map", torch.full((e,), 5, dtype=torch.int32))
        layer.mlp.shared_experts = torch.nn.Module()
        layer.mlp.shared_experts.gate_up_proj = linear(2 * i, h)
        layer.mlp.shared_experts.down_proj = linear(h, i)
        layer.attn = torch.nn.Module()
        layer.attn.k_scale = torch.nn.Parameter(torch.empty(()), False)
        layer.attn.sinks = torch.nn.Parameter(torch.empty(4), False)
        model.layers.append(layer)
    model.norm = RMSNorm(h)
    model.lm_head = ParallelLMHead(128, h)
    return model


def test_roles_vllm_names():
    model = vllm_like()
    model.layers[0].input_layernorm.weight.dummy_weight_value = 0.5
    model.lm_head.weight = model.embed_tokens.weight  # tied: filled once
    roles = fp8_dummy.initialize_realistic_dummy_weights(model, seed=3)
    print(
        "\n".join(
            f"{n}: {s}" for n, s in roles.items() if n.startswith(("layers.1", "embed", "norm"))
        )
    )
    L = "layers.1."
    expect = {
        "embed_tokens.weight": "embedding",
        L + "input_layernorm.weight": "norm",
        L + "self_attn.qkv_proj.weight": "linear",
        L + "self_attn.qkv_proj.bias": "bias",
        L + "self_attn.o_proj.weight": "residual_out",
        L + "mlp.gate.weight": "router",
        L + "mlp.gate.e_score_correction_bias": "bias",
        L + "mlp.experts.w13_weight": "linear",
        L + "mlp.experts.w13_weight_scale_inv": "weight_scale",
        L + "mlp.experts.w2_weight": "residual_out",
        L + "mlp.experts.w13_input_scale": "scale",
        L + "mlp.experts.expert_map": "untouched",
        L + "mlp.shared_experts.gate_up_proj.weight": "linear",
        L + "mlp.shared_experts.down_proj.weight": "residual_out",
        L + "attn.k_scale": "scale",
        L + "attn.sinks": "sink",
        "norm.weight": "norm",
    }
    for name, role in expect.items():
        assert roles[name].role == role, name
    assert "layers.1.self_attn.rotary.cos_sin_cache" not in roles  # non-persistent: untouched
    layer = model.layers[1]
    assert (layer.self_attn.rotary.cos_sin_cache == 7).all()
    assert (layer.mlp.experts.expert_map == 5).all()
    assert (model.layers[0].input_layernorm.weight == 0.5).all()
    assert (layer.input_layernorm.weight == 1).all() and (layer.self_attn.qkv_proj.bias == 0).all()
    assert (layer.mlp.gate.e_score_correction_bias == 0).all()
    assert layer.attn.k_scale.item() == 1.0 and (layer.mlp.experts.w13_input_scale == 1).all()
    # statistics of the values the op wrote, measured here
    for w, std in [
        (layer.self_attn.qkv_proj.weight, 64**-0.5),
        (layer.self_attn.o_proj.weight, (2 * 3 * 64) ** -0.5),
        (model.embed_tokens.weight, 1.0),
        (layer.mlp.gate.weight, 64**-0.5),
    ]:
        assert abs(w.double().std().item() / std - 1) < 0.1
    w13 = (
        DECODE[E4M3](raw(layer.mlp.experts.w13_weight))
        * layer.mlp.experts.w13_weight_scale_inv.numpy()
    )
    w2 = (
        DECODE[E4M3](raw(layer.mlp.experts.w2_weight))
        * layer.mlp.experts.w2_weight_scale_inv.numpy()
    )
    assert abs(w13.std() / 64**-0.5 - 1) < 0.1 and abs(w2.std() / (2 * 3 * 32) ** -0.5 - 1) < 0.1


def test_bytes_from_the_stateless_rule():
    """The weights are the stateless op's values keyed by tensor_seed(seed, name): checked
    against the independent numpy model of that op (tests/oracles/stateless.py)."""
    from oracles.stateless import expected_bytes, tensor_bits

    model = vllm_like(layers=2)
    roles = fp8_dummy.initialize_realistic_dummy_weights(model, seed=11)
    for name in ("layers.1.self_attn.qkv_proj.weight", "layers.0.mlp.experts.w2_weight"):
        t, spec = model.get_parameter(name), roles[name]
        want = expected_bytes(
            np.arange(t.numel()), t.dtype, spec.low, spec.high, tensor_seed(11, name)
        )
        assert (tensor_bits(t) == want).all(), name


@pytest.mark.parametrize(
    "fmt", ["mxfp4_uint8", "nvfp4_uint8", "fp8_block", "fp8_float8_e5m2_tensor"]
)
def test_shards_are_slices_of_the_logical_tensor(fmt: str):
    """fill_ of any block of the logical tensor (element offsets and strides) gives that
    block of the whole fill: what a sharded loader relies on."""
    tensors, _ = ZOO[fmt]
    siblings = {n: (tuple(t.shape), t.dtype) for n, t in tensors.items()}
    for local, t in tensors.items():
        name = f"model.layers.3.self_attn.q_proj.{local}"
        spec = tensor_spec(name, t.shape, t.dtype, layers=4, siblings=siblings)
        whole = fill_(torch.empty_like(t), spec, 99)
        if t.dim() < 2:
            continue
        rows, cols = slice(t.shape[0] // 2, t.shape[0]), slice(1, t.shape[1], 2)
        block = torch.empty_like(t[rows, cols])
        strides = [t.shape[1], 2]
        fill_(block, spec, 99, element_offset=rows.start * t.shape[1] + 1, element_strides=strides)
        assert np.array_equal(raw(block), raw(whole[rows, cols])), local


def test_specs_are_pure_and_scale_consistent():
    s = tensor_spec("m.layers.0.mlp.down_proj.weight", (64, 256), torch.bfloat16, layers=8)
    assert s == Spec("residual_out", "uniform", -((3 / (16 * 256)) ** 0.5), (3 / (16 * 256)) ** 0.5)
    sib = {"weight": ((64, 128), torch.uint8), "weight_scale": ((64, 8), torch.uint8)}
    e8 = tensor_spec("x.q_proj.weight_scale", (64, 8), torch.uint8, siblings=sib)
    assert e8.kind == "e8m0" and 0 < e8.high < 256 and e8.low + 1 < 255
    # a scale with no weight beside it (compressed-tensors' weight_packed): 1.0, listed
    assert tensor_spec("x.q_proj.weight_scale", (64, 1), torch.float32).role == "scale"


def test_bad_input_writes_nothing():
    model = vllm_like(layers=1)
    w = model.layers[0].self_attn.qkv_proj.weight
    w.data.fill_(3.0)
    with pytest.raises(TypeError, match="seed"):
        fp8_dummy.initialize_realistic_dummy_weights(model, seed=1.5)
    with pytest.raises(ValueError, match="num_layers"):
        fp8_dummy.initialize_realistic_dummy_weights(model, num_layers=0)
    assert (w == 3).all()
    meta = vllm_like(layers=1).to("meta")
    assert {s.kind for s in fp8_dummy.initialize_realistic_dummy_weights(meta).values()} == {"skip"}
