"""A config read with transformers' class of another model type, whose model type an engine
renamed (vLLM 0.33 reads DeepSeek-V3.2's config.json with DeepSeek-V3's class and sets that
class's model type to ``deepseek_v32``): the logical model is built as transformers' own class of
the renamed type (DeepSeek-V3.2's, with the indexer), not as the config class's (DeepSeek-V3's,
without one: every indexer tensor missing from an in-engine load)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers.speculative import DSA  # noqa: E402

from fp8_dummy.realistic import build_model  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=256, **DSA)  # fmt: skip


def _indexers(model) -> list[str]:
    return [n for n, _ in model.named_parameters() if ".indexer." in n]


def test_a_renamed_class_builds_the_renamed_type(monkeypatch):
    monkeypatch.setattr(tf.DeepseekV3Config, "model_type", "deepseek_v32")  # as vLLM does
    model = build_model(tf.DeepseekV3Config(**SMALL))
    assert type(model).__name__ == "DeepseekV32ForCausalLM"
    assert _indexers(model), "the indexer's tensors"


def test_the_class_of_its_own_type_is_kept():
    """The control: DeepSeek-V3's class under its own model type builds DeepSeek-V3."""
    model = build_model(tf.DeepseekV3Config(**SMALL))
    assert type(model).__name__ == "DeepseekV3ForCausalLM"
    assert not _indexers(model)
