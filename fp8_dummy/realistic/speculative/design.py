"""The weights that realize a designed stream (:mod:`.stream`; docs/realistic.md#speculative-
decoding), as changes of the realistic fill: spec replacements and overrides of the logical
tensors (:mod:`..routing`'s kind), so that every holder of the model writes them.

Where: a reserved code subspace S of the residual stream, the ``d`` hidden dimensions before the
last one (the routing's carrier). The embedding's S columns are its own realistic values (each
token's *code*, a non-stream token's copied from its stream token); no residual branch writes S
(every branch's output rows on S are 0; branches still read it), so after the last layer S holds
the current token's code exactly, whatever the layers added elsewhere. The codes all have length
√d. The lm_head reads S only: stream token u's row is ``scale`` times its predecessor's code
(divided by what the model's class multiplies the logits by: :func:`logit_multiplier`), so u's
logit is ``scale · d / ρ`` after the predecessor (ρ the final residual's RMS) and the other
tokens' logits the codes' overlaps, near N(0, scale² d / ρ²) and always below: the greedy token
is the successor whatever ρ is, and the entropy at temperature 1 is set by ``scale``
(:func:`logit_scale`).

The draft's view: for the MTP layers, the embedding's next ``d`` columns (S2) hold the code of
the token the draft sees (:attr:`.stream.Stream.view`), and each MTP layer's input projection
(``eh_proj``, ``fc``, ``input_proj``) copies S2 of the normalized embedding (the input's first
half, or its second where the hidden state comes first) into S of its output (DeepSeek-V4's
``e_proj`` of the embedding alone; its ``h_proj``, of each hidden stream, writes no S), which
its block does not write either; its head (the same lm_head) then proposes the view's
successor. A draft model's own embedding holds the view's code in its S directly. Qwen4-Exp's
MTP head collapses its ``hc_count`` streams by a gated mean whose gates are per element (the
sigmoid of its ``input_mix_weight_up``'s rows): those rows are 0 on S of every stream
(:func:`gate_rows`), so that every code column is gated by 1/2 alike and the collapse is the
code times a positive factor, as a plain final norm leaves it."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..rules import Spec, added_tables
from ..values import fill_
from .stream import Stream

__all__ = ["DesignError", "Layout", "RHO", "carrier_rows", "code_block", "gate_rows", "layout"]
__all__ += ["logit_scale"]
__all__ += ["logit_multiplier", "plan_design", "predicted_entropy", "vocab_hidden"]

RHO = 1.2  # the final residual's typical RMS in realistic models (docs/realistic.md's sweep)
ENTROPY_LOW = 1.05  # nats: the band the scale is centred in (the 1 nat, a margin)
ENTROPY_HIGH = 0.78  # of ln(vocabulary) (0.8, a margin)
_CONTEXTS = 32


class DesignError(ValueError):
    """A model the designed stream cannot be written into; raised before anything is written."""


@dataclass(frozen=True)
class Layout:
    """The reserved columns: S (the code) and S2 (the draft's view) of a hidden size."""

    hidden: int
    d: int

    @property
    def s(self) -> range:
        return range(self.hidden - 1 - self.d, self.hidden - 1)

    @property
    def s2(self) -> range:
        return range(self.hidden - 1 - 2 * self.d, self.hidden - 1 - self.d)


def layout(hidden: int) -> Layout:
    """``d`` = hidden/8 within [16, 64]: enough overlap-free room for the codes of a large
    vocabulary (the entropy band needs d >= 32 from ~32k tokens) at a small cost in width."""
    if hidden < 64:
        raise DesignError(f"fp8_dummy: acceptance: hidden size {hidden}: at least 64 is needed")
    return Layout(hidden, min(64, max(16, hidden // 8)))


def code_block(spec: Spec, key: int, shape: Sequence[int], dtype: torch.dtype, cols: range):
    """The codes: the realistic values of columns ``cols`` of a [V, H] tensor (its spec and
    key), each row scaled to length √d (so that a code's overlap with its own direction is
    the largest of all: the greedy successor is exact), as the tensor's dtype holds them, in
    float64 [V, d]."""
    v, h = shape
    block = torch.empty(v, len(cols), dtype=torch.float64)
    fill_(block, spec, key, element_offset=cols.start, element_strides=[h, 1])
    # each code sums to 0: a LayerNorm's mean, subtracted from every column of S alike (a
    # post-norm residual's at each branch: BART's), then adds no token a logit of its own
    block -= block.mean(dim=1, keepdim=True)
    block *= math.sqrt(len(cols)) / block.norm(dim=1, keepdim=True).clamp_min(1e-30)
    return block.to(dtype).double().numpy()


def _entropy(z: np.ndarray, s: float, zeros: int) -> np.ndarray:
    """Entropy (nats) of softmax(s · [z, 0 x zeros]) per row."""
    x = s * z
    top = np.maximum(x.max(1, keepdims=True), 0.0)
    e = np.exp(x - top)
    e0 = zeros * np.exp(-top[:, 0])
    total = e.sum(1) + e0
    mean = ((x - top) * e).sum(1) + e0 * (-top[:, 0])
    return np.log(total) - mean / total


def _overlaps(codes: np.ndarray, stream: Stream) -> np.ndarray:
    """The logits at unit scale and ρ = 1 of :data:`_CONTEXTS` stream tokens spread over the
    cycle, over the stream tokens (the others' logits are 0)."""
    order = stream.order
    pick = order[np.linspace(0, order.size - 1, min(_CONTEXTS, order.size)).astype(np.int64)]
    return codes[pick] @ codes[stream.predecessor].T


def predicted_entropy(codes: np.ndarray, stream: Stream, scale: float, rho: float):
    """(entropy in nats, top-1 probability) of the sampled contexts' next-token distributions at
    temperature 1 for a final residual of RMS ``rho``."""
    z = _overlaps(codes, stream) * (scale / rho)
    zeros = stream.vocab - stream.order.size
    top = z.max(1)
    return _entropy(z, 1.0, zeros), 1.0 / (np.exp(z - top[:, None]).sum(1) + zeros * np.exp(-top))


def logit_scale(codes: np.ndarray, stream: Stream, rho: float = RHO) -> float:
    """The lm_head's scale: the middle (geometric) of the range over which the entropy of every
    sampled context's next-token distribution lies in [ENTROPY_LOW, ENTROPY_HIGH · ln V], for
    a final residual of RMS ``rho``; the range is in the scale/ρ, so a model whose ρ differs from
    ``rho`` by the range's half-width in either direction stays inside it. Rounded to 1e-4."""
    z = _overlaps(codes, stream)
    zeros, high = stream.vocab - stream.order.size, ENTROPY_HIGH * math.log(stream.vocab)

    def bisect(ok, lo: float, hi: float) -> float:  # ok(lo) is False, ok(hi) is True
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    sharp = bisect(lambda s: _entropy(z, s, zeros).max() <= high, 1e-4, 1e3)  # lowest scale
    flat = 1.0 / bisect(lambda r: _entropy(z, 1.0 / r, zeros).min() >= ENTROPY_LOW, 1e-3, 1e4)
    return round(math.sqrt(sharp * flat) * rho, 4)


# What a model class multiplies the lm_head's logits by, from its config (model type -> key, power):
# Inkling divides the final hidden state by its muP width multiplier (its MTP head too), Granite
# and MiniCPM3 divide by logits_scaling, HyperCLOVA X multiplies by it, Cohere by logit_scale.
_LOGIT_FACTORS = {
    "inkling_text": ("logits_mup_width_multiplier", -1), "granite": ("logits_scaling", -1),
    "granite_swa": ("logits_scaling", -1), "granitemoe": ("logits_scaling", -1),
    "granitemoe_swa": ("logits_scaling", -1), "granitemoeshared": ("logits_scaling", -1),
    "granitemoehybrid": ("logits_scaling", -1), "minicpm3": ("logits_scaling", -1),
    "hyperclovax": ("logits_scaling", 1), "cohere": ("logit_scale", 1),
    "cohere2": ("logit_scale", 1), "cohere2_moe": ("logit_scale", 1),
}  # fmt: skip


def logit_multiplier(config: Any) -> float:
    """The factor the model's class puts between the lm_head's product and its logits (1 where
    it puts none): the lm_head's rows are divided by it, so that the logits and their entropy
    are the design's."""
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    key, power = _LOGIT_FACTORS.get(kind, (None, 1))
    value = getattr(text, key, None) if key is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    if not math.isfinite(value) or value <= 0:
        return 1.0
    return float(value) ** power


def _out_dim(shape: Sequence[int], hidden: int, transposed: bool = False) -> int | None:
    """The dimension of a residual branch's output weight that indexes the hidden size; the
    last one of a weight stored (in, out) (GPT-2's ``Conv1D``, transformers' transposed
    experts), whose square ones (GPT-2's attention ``c_proj``) the shape alone cannot tell."""
    if transposed and len(shape) >= 2 and shape[-1] == hidden:
        return len(shape) - 1
    if len(shape) >= 2 and shape[-2] == hidden:
        return len(shape) - 2
    if len(shape) >= 2 and shape[-1] == hidden:
        return len(shape) - 1
    if len(shape) >= 4 and shape[-3] == hidden:  # GPT-OSS's MXFP4 blocks [E, N, K/32, 16]
        return len(shape) - 3
    return None


def _lookup_std(spec: Spec) -> float:
    """The embedding's σ under the rule (1 but where the model multiplies its lookup)."""
    if spec.kind != "uniform" or spec.high <= spec.low:
        return 1.0
    std = (spec.high - spec.low) / (2 * math.sqrt(3))
    return 1.0 if abs(std - 1) < 1e-6 else std


def _find(
    specs: Mapping[str, Spec], shapes, role: str, shape: tuple, lookup: Collection[str] = ()
) -> str | None:
    """The first tensor of ``role`` and ``shape``: one the model's class names (``lookup``)
    where there is one, else one whose name is no position table's."""
    found = [n for n, s in specs.items() if s.role == role and tuple(shapes[n]) == shape]
    named = [n for n in found if n in lookup]
    found = named or [n for n in found if "position" not in n and ".wpe." not in f".{n}"]
    return found[0] if found else None


def plan_design(
    stream: Stream,
    specs: Mapping[str, Spec],
    shapes: Mapping[str, Sequence[int]],
    dtypes: Mapping[str, torch.dtype],
    keys: Mapping[str, int],
    hidden: int,
    *,
    draft: bool = False,
    projections: Mapping[str, int | None] | None = None,
    multiplier: float = 1.0,
    transposed: Collection[str] = (),
    lookup: Collection[str] = (),
    rho: float = RHO,
) -> tuple[dict[str, Spec], dict[str, list], dict[str, Any]]:
    """(spec replacements, overrides, facts) that write ``stream`` into the logical tensors;
    ``draft``: a draft model (its embedding holds the view's code); ``projections``: the MTP
    layers' input projections [hidden, 2·hidden], each with the column its input's (normalized)
    embedding half starts at (0, or hidden where the hidden state comes first), or DeepSeek-V4's
    two [hidden, hidden]: ``e_proj`` of the embedding (0), ``h_proj`` of the hidden state alone
    (None: its S rows 0, so that S of their sum is the embedding's S2); ``multiplier``:
    what the model multiplies the lm_head's product by (:func:`logit_multiplier`);
    ``transposed``: the names of the weights stored (in, out); ``lookup``: the vocabulary's
    tables as the model's class names them (:func:`..rules.added_tables`); ``rho``: the final
    residual RMS the lm_head's scale is centred for (:func:`.code_gain.code_rho`)."""
    lay = layout(hidden)
    v = stream.vocab
    embed = _find(specs, shapes, "embedding", (v, hidden), lookup)
    head = _find(specs, shapes, "lm_head", (v, hidden))
    if embed is None or head is None:
        what = "embedding" if embed is None else "untied lm_head (tie_word_embeddings off)"
        raise DesignError(
            f"fp8_dummy: acceptance: the model has no {what} of [{v}, {hidden}]: the designed "
            "stream is written into the embedding's and the lm_head's own rows"
        )
    codes = code_block(specs[embed], keys[embed], (v, hidden), dtypes[embed], lay.s)
    held = stream.view if draft else stream.source
    scale = logit_scale(codes, stream, rho)
    pred = stream.predecessor
    rows = codes[pred] * (scale / multiplier)
    head_cols = np.zeros((v, lay.d))
    head_cols[stream.order] = rows
    overrides: dict[str, list] = {embed: [], head: []}
    # the lookup's σ: 1/m where the model multiplies the lookup by m (Gemma's √hidden), so that
    # the code the first layer sees has length √d as the lm_head's rows assume
    sigma = _lookup_std(specs[embed])
    for i, col in enumerate(lay.s):
        overrides[embed].append((1, col, (codes[held, i] * sigma).astype(np.float32)))
        overrides[head].append((1, col, head_cols[:, i].astype(np.float32)))
    if not draft:
        for i, col in enumerate(lay.s2):
            view = codes[stream.view, i] * sigma
            overrides[embed].append((1, col, view.astype(np.float32)))
    for name, spec in specs.items():
        out = spec.role == "residual_out"
        dim = _out_dim(shapes[name], hidden, name in transposed) if out else None
        if dim is not None:
            overrides.setdefault(name, []).append((dim, lay.s, 0.0))
    # a table added to the lookup (position, token type): its rows on S and S2 would add a
    # position's values to every token's code; 0 there, the rest of each row the rule's
    for name in added_tables(specs, shapes, v, hidden, lookup):
        overrides.setdefault(name, []).extend([(1, lay.s, 0.0), (1, lay.s2, 0.0)])
    for name, start in (projections or {}).items():
        width = _input_width(shapes[name], hidden)
        if width is None:
            continue
        if start is None:  # of the hidden state alone (DeepSeek-V4's h_proj): nothing in S
            overrides.setdefault(name, []).append((0, lay.s, 0.0))
            continue
        for i, row in enumerate(lay.s):
            unit = np.zeros(width, dtype=np.float32)
            unit[start + lay.s2[i]] = 1.0  # S of the output: S2 of the normalized embedding
            overrides.setdefault(name, []).append((0, row, unit))
    replaced = {head: Spec("lm_head", "const", 0.0)}
    facts = {"d": lay.d, "scale": scale, "rho": rho, "embedding": embed, "lm_head": head}
    facts["codes"] = lay.s
    return replaced, overrides, facts


def vocab_hidden(config: Any, specs: Mapping[str, Spec], shapes) -> tuple[int, int]:
    """(vocabulary, hidden size): the config's, else the embedding's shape."""
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    v, h = getattr(text, "vocab_size", None), getattr(text, "hidden_size", None)
    if isinstance(v, int) and isinstance(h, int):
        return v, h
    for name, spec in specs.items():
        if spec.role == "embedding" and len(shapes[name]) == 2:
            return tuple(int(x) for x in shapes[name])  # type: ignore[return-value]
    raise DesignError("fp8_dummy: acceptance: the model has no embedding")


def _input_width(shape: Sequence[int], hidden: int) -> int | None:
    """The input width of an MTP input projection [hidden, 2·hidden] or [hidden, hidden]."""
    if len(shape) == 2 and shape[0] == hidden and shape[1] in (hidden, 2 * hidden):
        return int(shape[1])
    return None


def carrier_rows(
    projections: Mapping[str, int | None], hidden: int, shapes: Mapping[str, Sequence[int]]
) -> dict[str, list]:
    """The routing's carrier (the residual's last dimension, a constant) through the MTP
    layers' input projections (name -> the column their embedding part starts at; None: one
    of the hidden state alone, whose output j is 0, added to the embedding's): output j is
    input j of the normalized embedding, and no other output reads column j of either part."""
    j = hidden - 1
    rows = {}
    for name, start in projections.items():
        width = _input_width(shapes[name], hidden)
        if width is None:
            continue
        rows[name] = [(1, c, 0.0) for c in range(j, width, hidden)]
        if start is None:
            rows[name].append((0, j, 0.0))
            continue
        unit = np.zeros(width, dtype=np.float32)
        unit[start + j] = 1.0
        rows[name].append((0, j, unit))
    return rows


def gate_rows(
    gates: Collection[str], codes: range, shapes: Mapping[str, Sequence[int]]
) -> dict[str, list]:
    """A stream mixer's gate projections [hc·hidden, r] (output stream k's column j at row
    k·hidden + j): their rows on S (``codes``) of every stream 0, so that the sigmoid gates the
    code's columns by 1/2 each."""
    rows: dict[str, list] = {}
    hidden = codes.stop + 1  # S ends at the hidden size's last column but one (:class:`Layout`)
    for name in gates:
        width = int(shapes[name][0])
        if len(shapes[name]) != 2 or width % hidden:
            raise DesignError(
                f"fp8_dummy: {name} {list(shapes[name])}: a stream mixer's gate projection is "
                f"[streams * {hidden}, rank]"
            )
        rows[name] = [(0, range(k + codes.start, k + codes.stop), 0.0)
                      for k in range(0, width, hidden)]  # fmt: skip
    return rows
