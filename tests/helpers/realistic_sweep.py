"""Every causal-LM architecture transformers ships, built small from its own config class (no
download), filled by fp8_dummy.initialize_realistic_dummy_weights and measured: residual RMS
after every layer, and each MoE layer's max/mean expert load. Used by
tests/test_realistic_architectures.py; ``python tests/helpers/realistic_sweep.py [LAYERS]``
prints docs/realistic.md's table."""

from __future__ import annotations

import inspect
import sys
import time
import warnings

import torch

SMALL = dict(  # what each config takes of these (its __init__ or its defaults name it)
    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
    vocab_size=1024, head_dim=16, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    num_experts=8, n_routed_experts=8, num_local_experts=8, num_experts_per_tok=2,
    max_position_embeddings=512, n_positions=512, pad_token_id=0, bos_token_id=0,
    eos_token_id=0, n_group=4, topk_group=2, kv_lora_rank=32, q_lora_rank=32,
    qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, is_decoder=True, rotary_dim=8,
    ffn_dim=128, encoder_layers=1, decoder_attention_heads=4, encoder_attention_heads=4,
    decoder_ffn_dim=128, encoder_ffn_dim=128,
    # the chunked scan's block (Falcon-H1's, Bamba's, GraniteMoeHybrid's): exact at any size
    # (the fill's bytes the same), its reference path pads the sequence to it and costs
    # chunk² per head: at the default 256 the fill's probe of 8 tokens took 22 CPU-seconds on
    # a 64-layer Falcon-H1, 0.5 at 16 (docs/realistic.md)
    mamba_chunk_size=16,
)  # fmt: skip
MAX_PARAMS = 40_000_000  # at 64 layers, on the meta device first: "not small" beyond
TOKENS = (8, 128)  # 1,024 tokens: the max over 64 layers of 8 experts stays off noise


def causal_lm_types() -> dict[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()))


def small_config(model_type: str, layers: int, fields: dict | None = None):
    """``model_type``'s config of :data:`SMALL` where it takes them, ``layers`` layers and
    ``fields`` (set whatever the class)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    known = set(inspect.signature(cls.__init__).parameters) | set(cls().to_dict())
    known |= set(getattr(cls, "attribute_map", {}))
    kw = {k: v for k, v in SMALL.items() if k in known}
    if "qk_rope_head_dim" in known:  # multi-head latent attention: its head dims are its own
        kw.pop("head_dim", None)
        kw["num_key_value_heads"] = kw["num_attention_heads"]
        default = cls()
        if "head_dim" in known and getattr(default, "head_dim", None) == default.qk_rope_head_dim:
            # its rotary embedding reads head_dim (LongCat-Flash's): the real configs keep the two
            # equal, and the class's constructor does not make them so
            kw["head_dim"] = kw["qk_rope_head_dim"]
    if "zero_expert_num" in known:
        # LongCat-Flash's zero (identity) experts in its release's proportion (256 beside 512
        # routed), not the class's default 256 beside these 8
        kw["zero_expert_num"] = kw["n_routed_experts"] // 2
    config = cls(num_hidden_layers=layers, **(kw | (fields or {})))
    if isinstance(getattr(config, "decoder_layers", None), int):
        # an encoder-decoder family's causal LM (BART's, Marian's, ...) runs its decoder's
        # layers, which num_hidden_layers (the encoder's there) leaves at the default 6 to 24
        config.decoder_layers = layers
    languages = getattr(config, "languages", None)
    if languages and getattr(config, "default_language", "") is None:
        # X-MOD's language adapters need one chosen before any forward, the probes' included
        config.default_language = languages[0]
    return config


def build(
    model_type: str, layers: int, fields: dict | None = None
) -> tuple[torch.nn.Module | None, str]:
    """(model, "") or (None, why it cannot be built small); ``fields`` set on its config."""
    import transformers as tf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = small_config(model_type, layers, fields)
            cls = getattr(tf, causal_lm_types()[model_type])
            with torch.device("meta"):
                n = sum(p.numel() for p in cls(config).parameters())
            if n > MAX_PARAMS:
                return None, f"not small: {n / 1e6:.0f} M parameters at hidden 64"
            torch.manual_seed(0)
            return cls(config).eval(), ""
        except Exception as e:  # noqa: BLE001 - a config that cannot be made small is listed
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"


def _top_k(config) -> int:
    for c in (config, getattr(config, "text_config", None)):
        for key in ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts"):
            k = getattr(c, key, None)
            if isinstance(k, int) and k > 0:
                return k
            if isinstance(k, (list, tuple)) and k and isinstance(k[0], int):
                return k[0]
    return 1


def measure(model: torch.nn.Module, vocab: int = 1024) -> dict:
    """finite logits; residual RMS per hidden state; each router's max/mean expert load (its
    indices where it returns them, its own count per expert where it returns that, else the
    top-k of its logits)."""
    loads: list[torch.Tensor] = []
    k = _top_k(model.config)

    def record(module, _, out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        # its experts' indices, k per token (JetMoE's first integer output orders its tokens)
        idx = [t for t in outs if isinstance(t, torch.Tensor) and not t.is_floating_point()
               and t.dim() and t.shape[-1] == k]  # fmt: skip
        logits = [t for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point()
                  and t.dim() >= 2]  # fmt: skip
        counts = [t for t in outs if isinstance(t, list) and t and isinstance(t[0], int)]
        if counts and logits and len(counts[0]) == logits[0].shape[-1]:  # its own count (JetMoE)
            loads.append(torch.tensor(counts[0], dtype=torch.float32))
            return
        if idx:
            chosen, n = idx[0], (logits[0].shape[-1] if logits else int(idx[0].max()) + 1)
        elif logits and logits[0].dim() >= 2 and logits[0].shape[-1] > k:
            n = logits[0].shape[-1]
            chosen = logits[0].reshape(-1, n).topk(k, dim=-1).indices
        else:
            return
        loads.append(torch.bincount(chosen.flatten().long(), minlength=n).float())

    routers = [
        m
        for name, m in model.named_modules()
        if name.rsplit(".", 1)[-1] in ("gate", "router") and ".layers." in f".{name}"
    ]
    hooks = [m.register_forward_hook(record) for m in routers]
    ids = torch.randint(0, vocab, TOKENS, generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    hidden = [h for h in (out.hidden_states or ()) if isinstance(h, torch.Tensor)]
    return {
        "finite": bool(torch.isfinite(out.logits).all()),
        "rms": [h.float().pow(2).mean().sqrt().item() for h in hidden],
        "max_mean": [(n.max() / n.mean()).item() for n in loads if n.numel() > 1],
    }


def sweep(layers: int, types=None, seed: int = 0) -> dict[str, dict]:
    """model type -> measure()'s dict plus "class" and "seconds", or {"skip": why}."""
    import fp8_dummy

    results = {}
    for mt in types or causal_lm_types():
        t0 = time.perf_counter()
        model, why = build(mt, layers)
        if model is None:
            results[mt] = {"skip": why}
            continue
        fp8_dummy.initialize_realistic_dummy_weights(model, seed=seed)
        try:
            m = measure(model)
        except Exception as e:  # noqa: BLE001 - listed with the reason
            results[mt] = {"skip": f"forward: {type(e).__name__}: {str(e)[:80]}"}
            continue
        m.update({"class": type(model).__name__, "seconds": time.perf_counter() - t0})
        results[mt] = m
    return results


def row(mt: str, r: dict, layers: int) -> str:
    if "skip" in r:
        return f"| {mt} | skipped: {r['skip']} |||"
    rms, mm = r["rms"], r["max_mean"]
    moe = f"{max(mm):.2f}" if mm else "-"
    return f"| {mt} ({r['class']}) | {layers} | {min(rms):.2f} / {max(rms):.2f} | {moe} |"


if __name__ == "__main__":
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    types = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None
    if "--before" in sys.argv:  # the rule before the architecture facts: plain pre-norm
        import fp8_dummy.realistic.logical as logical
        import fp8_dummy.realistic.specs as specs
        from fp8_dummy.realistic import DEFAULT

        # both callers: a transformers model's fill goes through the logical model's
        specs.derive = logical.derive = lambda model: DEFAULT
    for mt, r in sweep(n, types).items():
        print(row(mt, r, n), f"{r.get('seconds', 0):.1f}s", flush=True)
