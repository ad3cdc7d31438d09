"""Realistic mode on transformers' own model classes (small configs, no download): after
fp8_dummy.initialize_realistic_dummy_weights the model routes and normalizes like a
model; the engine's dummy semantics (vLLM 0.33) measured beside it, and
printed (pytest -s)."""

from __future__ import annotations

import hashlib
import re

import pytest
import torch

import fp8_dummy
from fp8_dummy.realistic import checkpoint_state

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

TOKENS = (4, 256)  # 1,024 tokens


def configs() -> dict:
    common = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    return {
        "llama": (
            tf.LlamaConfig(num_hidden_layers=4, num_key_value_heads=2, **common),
            "LlamaForCausalLM",
        ),
        "gpt2": (  # transformers' Conv1D: linears stored (in, out)
            tf.GPT2Config(
                n_layer=4,
                n_embd=64,
                n_head=4,
                n_inner=256,
                vocab_size=1024,
                n_positions=256,
                bos_token_id=0,
                eos_token_id=0,
            ),
            "GPT2LMHeadModel",
        ),
        "qwen3_moe": (
            tf.Qwen3MoeConfig(
                num_hidden_layers=6,
                num_key_value_heads=2,
                head_dim=16,
                num_experts=64,
                num_experts_per_tok=8,
                moe_intermediate_size=32,
                decoder_sparse_step=1,
                mlp_only_layers=[],
                **common,
            ),
            "Qwen3MoeForCausalLM",
        ),
        "deepseek_v3": (
            tf.DeepseekV3Config(
                num_hidden_layers=3,
                first_k_dense_replace=1,
                n_routed_experts=64,
                num_experts_per_tok=8,
                n_group=8,
                topk_group=4,
                n_shared_experts=1,
                moe_intermediate_size=32,
                q_lora_rank=32,
                kv_lora_rank=32,
                qk_rope_head_dim=8,
                qk_nope_head_dim=16,
                v_head_dim=16,
                num_key_value_heads=4,
                **common,
            ),
            "DeepseekV3ForCausalLM",
        ),
    }


def measure(model: torch.nn.Module, vocab: int) -> dict:
    """Logits finite; per MoE layer experts used and max/mean load; residual RMS per layer."""
    loads = []

    def record(module, _, out):  # transformers' routers return (logits, weights, indices)
        loads.append(torch.bincount(out[2].flatten(), minlength=module.weight.shape[0]))

    routers = [m for m in model.modules() if type(m).__name__.lower().endswith("topkrouter")]
    hooks = [m.register_forward_hook(record) for m in routers]
    ids = torch.randint(0, vocab, TOKENS, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return {
        "finite": bool(torch.isfinite(out.logits).all()),
        "rms": [h.pow(2).mean().sqrt().item() for h in out.hidden_states],
        "used": [int((n > 0).sum()) for n in loads],
        "max_mean": [(n.max() / n.float().mean()).item() for n in loads],
        "experts": [n.numel() for n in loads],
    }


def show(label: str, m: dict) -> str:
    moe = " ".join(f"{u}/{e}:{r:.2f}" for u, e, r in zip(m["used"], m["experts"], m["max_mean"]))
    rms = " ".join(f"{r:.3g}" for r in m["rms"])
    return f"  {label:<8} finite={m['finite']} rms/layer=[{rms}] experts used:max/mean=[{moe}]"


def state_bytes(model: torch.nn.Module) -> dict:
    return {
        n: hashlib.sha1(t.detach().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        for n, t in checkpoint_state(model).items()
    }


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3_moe", "deepseek_v3"])
def test_realistic_model(arch: str):
    config, cls = configs()[arch]
    torch.manual_seed(0)
    model = getattr(tf, cls)(config).eval()
    fp8_dummy.initialize_dummy_weights(model)  # vLLM 0.33's semantics first
    engine = measure(model, config.vocab_size)
    roles = fp8_dummy.initialize_realistic_dummy_weights(model, seed=0)
    real = measure(model, config.vocab_size)
    print(f"\n{arch}:\n{show('vLLM', engine)}\n{show('realistic', real)}")
    assert not [n for n, s in roles.items() if s.role == "unknown"]
    assert real["finite"]
    assert all(0.25 <= r <= 4 for r in real["rms"]), real["rms"]
    if arch not in ("llama", "gpt2"):
        assert len(real["used"]) == config.num_hidden_layers - getattr(
            config, "first_k_dense_replace", 0
        )
        assert real["used"] == real["experts"], "every routed expert is used"
        assert max(real["max_mean"]) <= 2.0
    # no two layers' same-role random weights are identical
    first = state_bytes(model)
    random = [n for n, s in roles.items() if s.kind not in ("const", "skip")]
    groups: dict[str, list[str]] = {}
    for n in random:
        groups.setdefault(re.sub(r"\.\d+\.", ".#.", n), []).append(first[n])
    for group, digests in groups.items():
        assert len(set(digests)) == len(digests), f"{group}: layers share values"
    # same seed same bytes; another seed other bytes in every random tensor
    fp8_dummy.initialize_realistic_dummy_weights(model, seed=0)
    assert state_bytes(model) == first
    fp8_dummy.initialize_realistic_dummy_weights(model, seed=1)
    other = state_bytes(model)
    assert all(other[n] != first[n] for n in random)
    assert all(other[n] == first[n] for n in first if n not in random)


def test_fan_in_follows_the_module_class():
    """sigma = 1/sqrt(fan_in) where the class puts the fan-in: GPT-2's Conv1D stores a linear
    (in, out), nn.Conv2d (out, in, kh, kw); the last dimension would be 4x off in c_fc."""
    config, cls = configs()["gpt2"]
    model = getattr(tf, cls)(config).eval()
    conv = torch.nn.Conv2d(3, 16, 4)
    roles = fp8_dummy.initialize_realistic_dummy_weights(model, seed=2)
    block, L = model.transformer.h[1], config.n_layer
    for name, w, role, std in [
        ("attn.c_attn", block.attn.c_attn.weight, "linear", 64**-0.5),  # (64, 192)
        ("attn.c_proj", block.attn.c_proj.weight, "residual_out", (2 * L * 64) ** -0.5),
        ("mlp.c_fc", block.mlp.c_fc.weight, "linear", 64**-0.5),  # (64, 256)
        ("mlp.c_proj", block.mlp.c_proj.weight, "residual_out", (2 * L * 256) ** -0.5),
    ]:
        assert roles[f"transformer.h.1.{name}.weight"].role == role, name
        assert abs(w.double().std().item() / std - 1) < 0.1, name
    fp8_dummy.initialize_realistic_dummy_weights(conv, seed=2)
    assert abs(conv.weight.double().std().item() * 48**0.5 - 1) < 0.1  # 3 * 4 * 4 inputs
