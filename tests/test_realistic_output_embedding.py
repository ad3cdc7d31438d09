"""The lm_head of a checkpoint that renames it (docs/realistic.md#roles): the tensor the
class's ``get_output_embeddings()`` loads is the lm_head in the logical checkpoint whatever
the checkpoint calls it (DeepSeek-V4's ``head.weight``, GPT-NeoX's ``embed_out.weight``, in
memory ``lm_head.weight``); where the checkpoint keeps the class's own name, the name rule
alone decides (BERT's ``cls.predictions.decoder``, behind a transform of its own, stays a
linear)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from test_realistic_speculative_deepseek_v4 import config as deepseek_v4  # noqa: E402

from fp8_dummy.realistic import config_checkpoint  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=1024, tie_word_embeddings=False)  # fmt: skip


def _roles(cfg) -> dict[str, str]:
    return {n: t.spec.role for n, t in config_checkpoint(cfg, 0).tensors.items()}


@pytest.mark.parametrize(
    "cfg, head",
    [
        (lambda: deepseek_v4(128, 1024, 2, 4), "head.weight"),
        (lambda: tf.AutoConfig.for_model("gpt_neox", **SMALL), "embed_out.weight"),
    ],
    ids=["deepseek_v4", "gpt_neox"],
)
def test_a_renamed_output_embedding_is_the_lm_head(cfg, head):
    roles = _roles(cfg())
    assert "lm_head.weight" not in roles
    # the main model's one head; an MTP layer's copy of it (DeepSeek-V4's mtp.<i>.head) is one too
    heads = [n for n, r in roles.items() if r == "lm_head"]
    assert [n for n in heads if not n.startswith("mtp.")] == [head]
    assert all(n.endswith("." + head) for n in heads if n.startswith("mtp."))


def test_the_class_s_own_name_keeps_the_name_rule():
    roles = _roles(tf.AutoConfig.for_model("bert", is_decoder=True, **SMALL))
    assert roles["cls.predictions.decoder.weight"] == "linear"
    assert "lm_head" not in roles.values()
