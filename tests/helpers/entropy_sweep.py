"""The next-token entropy at temperature 1 of every causal-LM architecture transformers ships
that builds small (tests/helpers/realistic_sweep.py's configs, the lm_head untied), through
the model's own forward on random prompts: the realistic fill without and with an acceptance
(docs/realistic.md#speculative-decoding). Used by tests/test_realistic_entropy_sweep.py;
``python tests/helpers/entropy_sweep.py [LAYERS] [TYPES] [HIDDEN] [VOCAB]`` prints
docs/realistic.md's table."""

from __future__ import annotations

import math
import sys
import time
import warnings
import zlib

import numpy as np
import torch

if __name__ == "__main__":  # run as a script: the tests' directory on the path
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from helpers import realistic_sweep as sweep  # noqa: E402

PROMPTS = 16
LENGTH = 12


def build(model_type: str, layers: int, hidden: int = 64, vocab: int = 1024,
          fields: dict | None = None):  # fmt: skip
    """(model, "") with an untied lm_head, or (None, why it cannot be built small); ``fields``
    set on the config besides the small ones."""
    import transformers as tf

    small = dict(sweep.SMALL, hidden_size=hidden, intermediate_size=2 * hidden, vocab_size=vocab)
    old, sweep.SMALL = sweep.SMALL, small
    try:
        config = sweep.small_config(model_type, layers, fields)
    except Exception as e:  # noqa: BLE001 - a config that cannot be made small is listed
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
    finally:
        sweep.SMALL = old
    try:
        text = config.get_text_config()
    except ValueError as e:  # several text configs: which one holds the vocabulary is unclear
        return None, f"ValueError: {str(e).splitlines()[0][:90]}"
    for c in {id(c): c for c in (config, text)}.values():
        c.tie_word_embeddings = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cls = getattr(tf, sweep.causal_lm_types()[model_type])
            with torch.device("meta"):
                n = sum(p.numel() for p in cls(config).parameters())
            if n > sweep.MAX_PARAMS:
                return None, f"not small: {n / 1e6:.0f} M parameters"
            torch.manual_seed(0)
            return cls(config).eval(), ""
        except Exception as e:  # noqa: BLE001
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"


def greedy_against_stream(arch: str, length: int, acceptance: float = 0.6, *,
                          size: tuple[int, int, int] | None = None,
                          fields: dict | None = None) -> tuple:  # fmt: skip
    """A small ``arch`` (two layers, random width and vocabulary, seeded by its name; or
    ``size``: (layers, hidden, vocabulary); ``fields`` set on its config) filled with
    ``acceptance``: (model, hidden, its
    greedy tokens after 24 random prompts of ``length``, the designed stream's successors of
    the tokens there)."""
    import fp8_dummy
    from fp8_dummy.realistic import speculative as S

    rng = np.random.default_rng(zlib.crc32(arch.encode()))
    layers, hidden, vocab = 2, int(rng.choice([64, 96, 128])), int(rng.choice([512, 1024, 1500]))
    if size is not None:  # the draws above are made anyway: the seed and prompts stay the same
        layers, hidden, vocab = size
    model, why = build(arch, layers, hidden, vocab, fields)
    assert model is not None, why
    config = model.config
    vocab = config.get_text_config().vocab_size
    seed = int(rng.integers(0, 1000))
    fp8_dummy.initialize_realistic_dummy_weights(model, seed, acceptance=acceptance)
    allowed, where = S.allowed_tokens(vocab, config)
    stream = S.design_stream(S.parse_acceptance(acceptance), seed, vocab, allowed, where)
    ids = torch.as_tensor(rng.integers(0, vocab, (24, length)))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[..., :vocab]
    return model, hidden, logits.argmax(-1).numpy(), stream.successor[ids.numpy()]


def entropies(model: torch.nn.Module, vocab: int) -> np.ndarray:
    """The next-token distribution's entropy (nats, temperature 1) after random prompts, by
    the model's own forward (its logits: soft caps, logit scales and all)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (PROMPTS, LENGTH), generator=gen)
    with torch.no_grad():
        try:  # no cache: a hybrid's cache refuses a plain forward's questions
            out = model(input_ids=ids, use_cache=False)
        except TypeError:  # a class that takes no use_cache
            out = model(input_ids=ids)
    logits = out.logits[:, -1, :vocab].double()
    p = logits.softmax(-1)
    return (-(p * p.clamp_min(1e-300).log()).sum(-1)).numpy()


def measure(model_type: str, layers: int = 2, hidden: int = 64, vocab: int = 1024,
            seed: int = 0, fields: dict | None = None) -> dict:  # fmt: skip
    """{"without", "with": entropies, "bound": 80% of ln V} or {"skip": why}."""
    import fp8_dummy

    model, why = build(model_type, layers, hidden, vocab, fields)
    if model is None:
        return {"skip": why}
    v = model.config.get_text_config().vocab_size
    found: dict = {"class": type(model).__name__, "bound": 0.8 * math.log(v)}
    for key, acceptance in (("without", None), ("with", 0.6)):
        try:
            fp8_dummy.initialize_realistic_dummy_weights(model, seed, acceptance=acceptance)
        except ValueError as e:  # the designed stream refused (a tied lm_head, ...)
            return {"skip": f"acceptance refused: {str(e).splitlines()[0][:120]}"}
        try:
            found[key] = entropies(model, v)
        except Exception as e:  # noqa: BLE001 - listed with the reason
            return {"skip": f"forward: {type(e).__name__}: {str(e).splitlines()[0][:90]}"}
    return found


def row(mt: str, r: dict) -> str:
    if "skip" in r:
        return f"| {mt} | skipped: {r['skip']} |||"
    w, a = r["without"], r["with"]
    ok = 1.0 <= a.min() and a.max() <= r["bound"]
    mark = "" if ok else " **outside**"
    return (f"| {mt} ({r['class']}) | {w.min():.2f}-{w.max():.2f} | "
            f"{a.min():.2f}-{a.max():.2f}{mark} | {r['bound']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    types = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None
    h = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    v = int(sys.argv[4]) if len(sys.argv) > 4 else 1024
    for mt in types or sweep.causal_lm_types():
        t0 = time.perf_counter()
        r = measure(mt, n, h, v)
        print(row(mt, r), f"{time.perf_counter() - t0:.1f}s", flush=True)
