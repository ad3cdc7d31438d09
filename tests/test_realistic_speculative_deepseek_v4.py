"""DeepSeek-V4's main model with a designed stream (docs/realistic.md#speculative-decoding): its
checkpoint calls the lm_head ``head.weight`` (transformers' conversion renames it ``lm_head``),
which the design finds as the class's output embedding, and its residual is ``hc_mult`` streams
that the hyper-connections (mHC) mix. The mix is doubly stochastic (Sinkhorn): streams that agree
on the code columns keep them, and the final collapse (``hc_head``) scales them by a positive sum,
so the code reaches the lm_head whatever the mixing weights are. Checked through transformers'
own ``deepseek_v4`` class loading the export, against an oracle that reads only the exported
weights: the greedy token is the designed successor at every position of random prompts, and the
next-token entropy is in the band."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

import torch  # noqa: E402
from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic import speculative as S  # noqa: E402

# the checkpoint's residual writers (attention's grouped output wo_b, the experts' w2)
WRITERS = (".attn.wo_b.weight", ".w2.weight")


def config(hidden: int, vocab: int, layers: int, hc: int):
    """A tiny DeepSeek-V4: 16 experts top-2 and a shared one, hash-routed first layer, then
    sliding and compressed (indexed) attention in turn; ``hc`` residual streams."""
    kinds = ["sliding_attention", "compressed_sparse_attention"]
    return tf.AutoConfig.for_model(
        "deepseek_v4", vocab_size=vocab, hidden_size=hidden, moe_intermediate_size=64,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=1, head_dim=64,
        q_lora_rank=32, n_routed_experts=16, num_experts_per_tok=2, n_shared_experts=1,
        o_groups=2, o_lora_rank=32, index_n_heads=4, index_head_dim=32, index_topk=8,
        sliding_window=16, hc_mult=hc, layer_types=[kinds[i % 2] for i in range(layers)],
        mlp_layer_types=["hash_moe"] + ["moe"] * (layers - 1),
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip


CASES = {"h128-v1024-hc4": (128, 1024, 2, 4, 0), "h192-v2048-hc2": (192, 2048, 3, 2, 7)}


@pytest.mark.parametrize("case", list(CASES))
def test_deepseek_v4_main_model_follows_the_design(case, tmp_path):
    hidden, vocab, layers, hc, seed = CASES[case]
    cfg = config(hidden, vocab, layers, hc)
    gen = torch.Generator().manual_seed(seed)
    out = H.export(cfg, tmp_path, 0.6)
    t = H.read(out)
    head, embed = t["head.weight"], t["embed.weight"]
    assert "lm_head.weight" not in t  # the checkpoint's own name, which no name rule knows
    codes = np.flatnonzero(np.abs(head).sum(0))  # what the lm_head reads
    assert 0 < codes.size < hidden // 2, codes
    writers = [n for n in t if n.endswith(WRITERS)]
    # wo_b, 16 experts' w2, the shared expert's, of each layer and of the MTP layer
    assert len(writers) == (layers + 1) * 18
    for name in writers:
        assert not np.any(t[name][codes]), f"{name} writes the code columns"
    successor = torch.from_numpy((embed[:, codes] @ head[:, codes].T).argmax(1))
    model = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert np.array_equal(model.lm_head.weight.detach().double().numpy(), head)
    ids = torch.randint(2, vocab, (16, 12), generator=gen)
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits.double()
    # the greedy token is the designed successor at every position, whatever the streams mix
    assert torch.equal(logits.argmax(-1), successor[ids])
    p = logits[:, -1].softmax(-1)
    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)
    assert entropy.min() >= 1.0 and entropy.max() <= 0.8 * np.log(vocab), entropy
    # its MTP layer is made (the config's one): test_realistic_speculative_deepseek_v4_mtp.py
    assert S.mtp_layers(cfg) == ("deepseek_v4", 1) and "mtp.0.e_proj.weight" in t


def test_deepseek_v4_in_place_fill_follows_the_design():
    """The in-place fill of transformers' model (its own name, ``lm_head``) realizes the same
    design: the greedy token is the successor the filled weights say, the entropy in the band."""
    import fp8_dummy

    cfg = config(128, 1024, 2, 4)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    fp8_dummy.initialize_realistic_dummy_weights(model, 3, acceptance=0.6)
    head = model.lm_head.weight.detach().double().numpy()
    embed = model.get_input_embeddings().weight.detach().double().numpy()
    codes = np.flatnonzero(np.abs(head).sum(0))
    assert 0 < codes.size < 64, codes
    successor = torch.from_numpy((embed[:, codes] @ head[:, codes].T).argmax(1))
    ids = torch.randint(2, 1024, (16, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits.double()
    assert torch.equal(logits.argmax(-1), successor[ids])
    p = logits[:, -1].softmax(-1)
    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)
    assert entropy.min() >= 1.0 and entropy.max() <= 0.8 * np.log(1024), entropy
