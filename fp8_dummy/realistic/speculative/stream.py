"""The designed process (docs/realistic.md#speculative-decoding): what the target's greedy
decoding produces and where its draft is right, as a pure function of (seed, vocabulary, the
tokens a stream may use, acceptance). Nothing here touches a tensor.

The target's next token is a function of the last token: the stream tokens (a tokenizer's
ordinary, self-contained tokens) form one cycle in an order drawn from the seed, and each token's
successor is the next one on the cycle; any other token (a special token, a byte fragment, the
vocabulary's padding) continues as a stream token it is assigned to. The draft (MTP layers, a
draft model) sees each token through a *view*: the token itself where the draft is right (its
proposal is then the same successor), the next token on the cycle where it is wrong (it proposes
the token after the successor). Which cycle positions are right is laid out in blocks: a run of
m right positions and one wrong one, the run lengths drawn from the acceptance's distribution by
a golden-ratio sequence (low discrepancy: any window of blocks has the distribution's frequencies
to within a few blocks). An engine's step from a block's start accepts min(m, k) tokens and, the
wrong position either verified or skipped as the bonus token, the next step starts at the next
block, so a list of k rates is realized exactly by an engine drafting k tokens; a memoryless
rate by an engine drafting any number (a run longer than k continues in the next step, which the
geometric distribution of m makes the same as a fresh one)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...stateless import tensor_seed
from ..routing import permutation
from .acceptance import Acceptance

__all__ = ["Stream", "allowed_tokens", "design_stream", "predict", "run_lengths"]

PHI = (math.sqrt(5.0) - 1.0) / 2.0  # the golden ratio's fractional part: the lowest discrepancy
_SPECIALS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# A tokenizer's vocabulary files: a directory without one has no tokenizer (transformers can
# make an empty one from a config alone)
_VOCABULARY = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


@dataclass(frozen=True)
class Stream:
    """The designed process over a vocabulary of ``vocab`` ids."""

    vocab: int
    order: np.ndarray  # [N] the stream's tokens in cycle order
    right: np.ndarray  # [N] bool: the draft's proposal after the token at this position is right
    source: np.ndarray  # [vocab] whose code each token carries (itself, or its stream token)
    view: np.ndarray  # [vocab] whose code the draft's view of each token carries
    tokens: str  # where the stream's tokens came from

    @property
    def successor(self) -> np.ndarray:
        """[vocab]: the target's greedy token after each token."""
        nxt = np.empty(self.vocab, dtype=np.int64)
        nxt[self.order] = np.roll(self.order, -1)
        return nxt[self.source]

    @property
    def proposal(self) -> np.ndarray:
        """[vocab]: the draft's greedy token after each token."""
        return self.successor[self.view]

    @property
    def predecessor(self) -> np.ndarray:
        """[N]: the stream token before each stream token (in ``order``'s order)."""
        return np.roll(self.order, 1)


def run_lengths(acceptance: Acceptance, count: int, phase: float, cap: int) -> np.ndarray:
    """``count`` run lengths m (right positions before a wrong one) with P(m >= i) =
    ``acceptance.reach(i)``, by the inverse distribution at u_j = frac(phase + j·φ), j = 1..
    ``count``; m at most ``cap``. Exact comparisons against the products of the rates (no
    logarithm: the same m on every machine)."""
    u = np.mod(phase + np.arange(1, count + 1, dtype=np.float64) * PHI, 1.0)
    if acceptance.memoryless:
        a = acceptance.rates[0]
        if a >= 1.0:
            return np.full(count, cap, dtype=np.int64)
        reach, r = [], a
        while r > 0.0 and len(reach) < cap and r >= 1e-12:
            reach.append(r)
            r *= a
    else:
        reach = [acceptance.reach(i) for i in range(1, len(acceptance.rates) + 1)]
    thresholds = np.asarray(reach, dtype=np.float64)  # non-increasing
    if thresholds.size == 0:
        return np.zeros(count, dtype=np.int64)
    # m = #{i : u < reach(i)}: the thresholds are non-increasing, so count from the start
    m = np.searchsorted(-thresholds, -u, side="left")
    return np.minimum(m.astype(np.int64), cap)


def design_stream(
    acceptance: Acceptance, seed: int, vocab: int, allowed: np.ndarray, tokens: str = ""
) -> Stream:
    """The stream over ``allowed`` (sorted stream token ids) of a ``vocab``-id vocabulary."""
    allowed = np.asarray(allowed, dtype=np.int64)
    n = int(allowed.size)
    if n < 3:
        raise ValueError(
            f"fp8_dummy: acceptance: {n} stream tokens ({tokens or 'no tokenizer'}): a designed "
            "stream needs at least 3"
        )
    order = allowed[np.asarray(permutation(tensor_seed(seed, "speculative.order"), n))]
    phase = tensor_seed(seed, "speculative.phase") / 2.0**64
    m = run_lengths(acceptance, n, phase, n)  # n blocks cover at least n positions
    starts = np.concatenate([[0], np.cumsum(m + 1)[:-1]])
    inside = starts < n
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, starts[inside], 1)
    np.add.at(delta, np.minimum(starts[inside] + m[inside], n), -1)
    right = np.cumsum(delta[:n]) > 0
    source = np.empty(vocab, dtype=np.int64)
    others = np.setdiff1d(np.arange(vocab, dtype=np.int64), allowed)
    source[others] = order[np.arange(others.size) % n]  # each non-stream token: a stream token
    source[allowed] = allowed
    seen = np.where(right, order, np.roll(order, -1))  # the draft's view of each position
    view_of = np.empty(vocab, dtype=np.int64)
    view_of[order] = seen
    return Stream(vocab, order, right, source, view_of[source], tokens)


def predict(right: np.ndarray, k: int) -> dict[str, Any]:
    """An engine drafting ``k`` tokens per step, greedy, walking one lap of the cycle from a
    block's start: per position, the share of steps that accepted it given the position before
    was accepted (``conditional``) and of all steps (``per_step``, vLLM's per-position rate);
    the mean number of accepted draft tokens per step."""
    n = int(right.size)
    wrong = np.flatnonzero(~right)
    steps, reached = 0, np.zeros(k + 1, dtype=np.int64)
    p = int(wrong[0]) + 1 if wrong.size else 0
    end = p + n
    while p < end:
        a = 0
        while a < k and right[(p + a) % n]:
            a += 1
        reached[: a + 1] += 1
        steps += 1
        p += a + 1
    per_step = reached[1:] / max(steps, 1)
    conditional = reached[1:] / np.maximum(reached[:-1], 1)
    mean = float(reached[1:].sum()) / max(steps, 1)
    return {"k": k, "steps": steps, "conditional": conditional.tolist(),
            "per_step": per_step.tolist(), "mean_accepted": mean}  # fmt: skip


def _specials(config: Any) -> set[int]:
    out: set[int] = set()
    for c in (config, getattr(config, "text_config", None)):
        for name in _SPECIALS:
            v = getattr(c, name, None) if c is not None else None
            for i in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(i, int) and not isinstance(i, bool):
                    out.add(i)
    return out


def _load_tokenizer(config: Any, tokenizer: Any) -> tuple[Any, str]:
    """The tokenizer given (an object with ``batch_decode``, or a directory), else the one in
    the directory the config was read from; (None, why) where there is none."""
    if tokenizer is not None and hasattr(tokenizer, "batch_decode"):
        return tokenizer, type(tokenizer).__name__
    where = tokenizer if tokenizer is not None else getattr(config, "_name_or_path", None)
    if not where or not os.path.isdir(os.fspath(where)):
        return None, "no tokenizer"
    files = os.listdir(os.fspath(where))
    if not any(f in _VOCABULARY or f.endswith(".tiktoken") for f in files):
        return None, f"no tokenizer (no vocabulary file in {os.fspath(where)})"
    try:
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(os.fspath(where), local_files_only=True)
    except Exception as e:  # no tokenizer files, or none transformers can read
        return None, f"no tokenizer ({type(e).__name__} reading {os.fspath(where)})"
    return tok, f"the tokenizer in {os.fspath(where)}"


def allowed_tokens(vocab: int, config: Any = None, tokenizer: Any = None) -> tuple[np.ndarray, str]:
    """The ids a stream may use and where they came from: with a tokenizer, its ordinary
    tokens that decode to non-empty complete text on their own (no special or added special
    token, no byte fragment: no U+FFFD), below both its size and ``vocab``; without one,
    every id but the config's bos/eos/pad/decoder-start ids."""
    tok, where = _load_tokenizer(config, tokenizer)
    banned = _specials(config)
    if tok is None:
        keep = np.setdiff1d(np.arange(vocab, dtype=np.int64), np.asarray(sorted(banned)))
        return keep, f"{where}: every id but the config's special ids"
    n = min(vocab, len(tok))
    banned |= set(getattr(tok, "all_special_ids", []) or [])
    for i, t in (getattr(tok, "added_tokens_decoder", None) or {}).items():
        if getattr(t, "special", False):
            banned.add(int(i))
    texts = tok.batch_decode(
        [[i] for i in range(n)], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    keep = [i for i, s in enumerate(texts) if i not in banned and s and "\ufffd" not in s]
    return np.asarray(keep, dtype=np.int64), where
