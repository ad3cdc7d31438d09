"""An engine's own config class of another model type read as transformers' config of its own
(fp8_dummy/realistic/hf_model.py's ``build_model``): SGLang 0.5.23 reads DeepSeek-V4's
config.json with DeepSeek-V3's config class renamed ``deepseek_v4``, which holds V3's
``intermediate_size`` (18432, its default: no V4 file says it) beside the file's
``moe_intermediate_size``, where V4's class reads ``intermediate_size`` as
``moe_intermediate_size``. The model built is the file's: the class's own field wins over its
alias. The engine's class is made here as SGLang makes it (a subclass in a module of its own)."""

from __future__ import annotations

import transformers

from fp8_dummy.realistic.hf_model import build_model


class _V4AsV3(transformers.DeepseekV3Config):  # SGLang's renaming, in a module not transformers'
    model_type = "deepseek_v4"


def test_the_alias_default_does_not_override_the_field():
    tiny = dict(vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, q_lora_rank=16,
                n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, o_groups=2,
                o_lora_rank=16, index_n_heads=2, index_head_dim=16, index_topk=4,
                sliding_window=8, hc_mult=2, compress_ratios=[0], num_hash_layers=1,
                qk_rope_head_dim=8, architectures=["DeepseekV4ForCausalLM"])  # fmt: skip
    handed = _V4AsV3(**tiny)
    assert handed.intermediate_size != 16 and handed.moe_intermediate_size == 16
    model = build_model(handed)
    assert model.config.moe_intermediate_size == 16
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    experts = [s for n, s in shapes.items() if ".experts." in n or ".shared_experts." in n]
    assert experts and all(16 in s or 32 in s for s in experts), experts
    assert not any(handed.intermediate_size in s for s in shapes.values()), shapes


def test_an_alias_holding_the_files_value_is_kept():
    """An alias whose value is not the engine class's default is the file's: transformers'
    class reads it as the field, as it would from the file."""
    tiny = dict(vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, q_lora_rank=16,
                n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, o_groups=2,
                o_lora_rank=16, index_n_heads=2, index_head_dim=16, index_topk=4,
                sliding_window=8, hc_mult=2, compress_ratios=[0], num_hash_layers=1,
                qk_rope_head_dim=8, intermediate_size=24,
                architectures=["DeepseekV4ForCausalLM"])  # fmt: skip
    handed = _V4AsV3(**tiny)
    assert handed.intermediate_size == 24 and handed.moe_intermediate_size == 16
    assert build_model(handed).config.moe_intermediate_size == 24
