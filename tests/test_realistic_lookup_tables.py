"""Which embedding tables are the vocabulary's lookup and which are added to it
(docs/realistic.md: the added tables hold 0 in the reserved columns) where their row counts
cannot tell: a position table with as many rows as the vocabulary (GPT-2's ``wpe`` at
``n_positions`` = vocab_size, OPT's and BART's ``embed_positions`` whose 2 offset rows make
``max_position_embeddings`` + 2 = vocab_size, or their max_position_embeddings equal to the
vocabulary). The model's class names its lookup (``get_input_embeddings()``): the position
table holds 0 in the routing's carrier column and the design's code columns, the lookup the
carrier, and the greedy token after every position is the designed stream's successor."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import entropy_sweep  # noqa: E402
from helpers import realistic_sweep as sweep  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import speculative as S  # noqa: E402
from fp8_dummy.realistic.hf_model import build_model, vocabulary_tensors  # noqa: E402
from fp8_dummy.realistic.routing import CARRIER  # noqa: E402
from fp8_dummy.realistic.rules import Spec, added_tables  # noqa: E402

# the rows a class's position table has beyond max_position_embeddings (OPT's and BART's
# learned tables keep 2 rows for the padding offset)
OFFSET = {"gpt2": 0, "opt": 2, "bart": 2}
# (arch, which field equals the vocabulary): the table's rows, or the config's field itself
CASES = [("gpt2", "rows"), ("opt", "rows"), ("bart", "rows"), ("opt", "field"), ("bart", "field")]


def _build(arch: str, hidden: int, vocab: int, positions: int, monkeypatch):
    fields = dict(sweep.SMALL, max_position_embeddings=positions, n_positions=positions)
    monkeypatch.setattr(sweep, "SMALL", fields)
    model, why = entropy_sweep.build(arch, 2, hidden, vocab)
    assert model is not None, why
    model.config.num_experts_per_tok = 2
    body = model.transformer if arch == "gpt2" else model.model.decoder
    for i, block in enumerate(body.h if arch == "gpt2" else body.layers):
        # a bias-free router in each block: its offsets ride the carrier column
        torch.manual_seed(i)
        block.gate = torch.nn.Linear(hidden, 8, bias=False)
    table = body.wpe if arch == "gpt2" else body.embed_positions
    return model, model.get_input_embeddings().weight, table.weight


@pytest.mark.parametrize(("arch", "equal"), CASES, ids=[f"{a}-{e}" for a, e in CASES])
def test_a_position_table_of_the_vocabularys_rows_holds_0_in_the_reserved_columns(
    arch, equal, monkeypatch
):
    rng = np.random.default_rng(zlib.crc32(f"{arch}{equal}".encode()))
    hidden = int(rng.choice([64, 96, 128]))
    vocab = int(rng.choice([512, 768, 1024]))
    positions = vocab - OFFSET[arch] if equal == "rows" else vocab
    model, lookup, table = _build(arch, hidden, vocab, positions, monkeypatch)
    assert table.shape[0] == positions + OFFSET[arch], "the class's position table's rows"
    seed = int(rng.integers(0, 1000))
    fp8_dummy.initialize_realistic_dummy_weights(model, seed, routing="zipf:1", acceptance=0.6)
    lay, j = S.layout(hidden), hidden - 1
    reserved = [*lay.s2, *lay.s, j]
    assert not table.detach()[:, reserved].contiguous().view(torch.uint8).any(), "added: 0"
    assert table.detach()[:, : lay.s2.start].contiguous().view(torch.uint8).any()
    carrier = torch.full((vocab,), CARRIER, dtype=lookup.dtype)
    assert torch.equal(
        lookup.detach()[:, j].contiguous().view(torch.uint8), carrier.view(torch.uint8)
    )
    config = model.config
    allowed, where = S.allowed_tokens(vocab, config)
    stream = S.design_stream(S.parse_acceptance(0.6), seed, vocab, allowed, where)
    length = 16
    ids = torch.as_tensor(rng.integers(0, vocab, (8, length)))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[..., :vocab]
    greedy = logits.argmax(-1).numpy()
    want = stream.successor[ids.numpy()]
    assert (greedy == want).all(), f"{(greedy != want).mean():.3f} of the positions differ"


def _specs(rows: dict[str, int], hidden: int):
    specs = {n: Spec("embedding", "uniform", -1.0, 1.0) for n in rows}
    return specs, {n: (r, hidden) for n, r in rows.items()}


def test_the_class_names_the_lookup_whatever_the_row_counts():
    rng = np.random.default_rng(7)
    for _ in range(20):
        hidden, vocab = int(rng.integers(8, 64)), int(rng.integers(16, 4096))
        extra = int(rng.integers(1, 4))
        rows = {"embed_tokens.weight": vocab}
        rows |= {f"added_{i}.weight": int(rng.choice([vocab, vocab + 1, 2 * vocab])) for i in
                 range(extra)}  # fmt: skip
        specs, shapes = _specs(rows, hidden)
        got = added_tables(specs, shapes, vocab, hidden, {"embed_tokens.weight"})
        assert got == [n for n in rows if n != "embed_tokens.weight"]
        # the class names none of the tables: by row count (an engine's class)
        old = added_tables(specs, shapes, vocab, hidden)
        assert old == [n for n, r in rows.items() if r != vocab]
        assert added_tables(specs, shapes, vocab, hidden, {"elsewhere.weight"}) == old


def test_an_encoder_decoders_stacks_each_name_their_own_lookup():
    """T5Gemma's encoder and decoder hold untied tables of the vocabulary's rows: the
    model's ``get_input_embeddings()`` names the encoder's, its decoder's its own; neither
    is an added table. An engine's class (any non-transformers module) names none."""
    model = build_model(sweep.small_config("t5gemma", 2))  # on meta: no memory
    own = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    assert vocabulary_tensors(model) == own
    engine = torch.nn.Module()
    engine.embed_tokens = torch.nn.Embedding(8, 4, device="meta")
    assert vocabulary_tensors(engine) == set()
