"""``export --draft DRAFT --draft-layout eagle3``: the draft in EAGLE-3's layout, as vLLM's
``Eagle3LlamaForCausalLM`` and SGLang's ``LlamaForCausalLMEagle3`` read it
(docs/realistic.md#speculative-decoding): one decoder layer
``midlayer.*`` whose attention reads ``[input_layernorm(embed), hidden_norm(h)]`` (2·H wide),
``fc`` over the target's auxiliary hidden states, ``norm``, ``lm_head`` and its own
``embed_tokens``, the target's vocabulary (``draft_vocab_size`` = ``vocab_size``: no
``d2t``/``t2d``, since the draft must be able to propose every token of the stream).

Its values are those of its Llama twin (the same config read as a one-layer Llama, the draft's
view of the stream written into its embedding's code columns S, the lm_head's rows, no branch
output on S), renamed, widened and designed so that the proposal depends on the input token
alone, whatever hidden state ``fc`` or the previous draft step gives:

- the token reaches the layer only through attention, so one attention head (query head 0, its
  KV head 0) attends to the positions holding the same token: its query and key rows read a
  *key code* (``hd`` embedding columns K before S, each row's realistic values scaled to length
  √hd) times ``B``, so a position's score with itself (B²·hd/√hd) exceeds its score with any
  other token's position by a margin that makes their softmax weight ~0;
- the embedding's column Z (before K) is ``MARKER`` in every row, so every normalized row is
  the same multiple √H/MARKER of the stored one (Z itself √H): B and the value rows are scaled
  back by it;
- that head's value rows 0..d-1 copy the embedding half's S columns less the hidden half's,
  and ``o_proj``'s S rows copy them back: the attention writes the input token's view code into
  S of the residual, less what the hidden state brings there. ``hidden_norm``'s weight is W on
  S, so vLLM's residual (``norm_before_residual``: ``hidden_norm(h)``) cancels exactly, and
  SGLang's (the raw h: it reads no ``norm_before_residual``) where RMS(h) = W: a marker value
  row (the same head, or KV head 1 where S fills the head) writes N = W·√H into Z less the
  hidden half's Z (weight W), nothing else writes or reads Z (``o_proj``'s, ``down_proj``'s
  and ``fc``'s Z rows; q/k/v's hidden S and Z columns), so every step's output has Z = N and
  RMS W, to N's dominance over the rest; ``fc`` writes no S or Z (a first step's hidden state
  brings nothing); the MLP writes no S (the twin's rule);
- the final ``norm``'s weight on S is W/ρ, the target design's final RMS at RMS W;
- ``norm`` and the lm_head then propose the view's successor, as the target's design does."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...stateless import tensor_seed
from ..rules import Spec, tensor_spec
from .design import RHO, DesignError, code_block, layout
from .draft_heads import kv_heads

__all__ = ["EAGLE3", "eagle3_config", "eagle3_tensors", "is_eagle3"]

EAGLE3 = "LlamaForCausalLMEagle3"  # the architecture vLLM and SGLang map to their EAGLE-3 class
SELF_SCORE = 192.0  # a position's attention score with itself (the key code's)
MARKER = 1024.0  # the embedding's constant column Z: its rows' RMS set by it
WEIGHT = 128.0  # hidden_norm's weight on S and Z: the RMS of a draft step's output
Entry = tuple  # (shape, dtype, spec, key, overrides): a logical tensor before it is named


def _aux_layers(layers: int) -> list[int]:
    """The auxiliary layers: distinct and ascending, as both engines capture them (once per
    layer, in the layers' order, while ``fc``'s width counts the list), each at most L-2, since
    SGLang reads id i as layer i's output (the input of i+1) and vLLM as layer i's input: the
    engines' default (2, L/2, L-3) where those are distinct (L >= 7), else spread over
    0..L-2 (fewer than three below four layers)."""
    if layers >= 7:
        return [2, layers // 2, layers - 3]
    return sorted({round(i * (layers - 2) / 2) for i in range(3)})


def eagle3_config(target: Any, hidden: int | None = None) -> dict:
    """The draft's config.json: one layer of width ``hidden`` (default the target's plus 64:
    SGLang gives a draft of the target's width the target's embedding, which holds none of the
    draft's codes), head size 64 (32 below 256), a quarter as many KV heads (as many as query
    heads where a quarter does not divide them), the
    target's vocabulary, special ids, context length, dtype; the auxiliary layers and the
    target's width; a target it cannot serve refused (:class:`DesignError`)."""
    get = getattr(target, "get_text_config", None)
    text = get() if callable(get) else target
    layers = getattr(text, "num_hidden_layers", None)
    width, vocab = getattr(text, "hidden_size", None), getattr(text, "vocab_size", None)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (layers, width, vocab)):
        raise DesignError(
            "fp8_dummy: --draft-layout eagle3: the target config names no decoder layers, hidden "
            "size and vocabulary (num_hidden_layers, hidden_size, vocab_size): EAGLE-3 reads "
            "the target's decoder layers' hidden states"
        )
    if layers < 2:
        raise DesignError(f"fp8_dummy: --draft-layout eagle3: {layers} decoder layers in the "
                          "target: EAGLE-3 reads hidden states of at least one layer's output "
                          "below the last (SGLang's id i), so the target needs two")  # fmt: skip
    hidden = width + 64 if hidden is None else hidden
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 64 or hidden % 32:
        raise ValueError(f"fp8_dummy: --draft-hidden {hidden!r}: a multiple of 32, at least 64")
    head = 64 if hidden >= 256 else 32
    heads = hidden // head
    kv = kv_heads(heads)
    cfg: dict[str, Any] = dict(
        architectures=[EAGLE3], model_type="llama", hidden_size=hidden, num_hidden_layers=1,
        intermediate_size=hidden * 8 // 3 // 32 * 32, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=head, hidden_act="silu",
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, vocab_size=vocab,
        draft_vocab_size=vocab, target_hidden_size=width, norm_before_residual=True,
        eagle_config={"eagle_aux_hidden_state_layer_ids": _aux_layers(layers),
                      "use_aux_hidden_state": True},
    )  # fmt: skip
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings"):
        if getattr(text, name, None) is not None:
            cfg[name] = getattr(text, name)
    dtype = getattr(text, "dtype", None) or getattr(target, "dtype", None)
    if dtype is not None:
        cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    return cfg


def is_eagle3(config: Any) -> bool:
    """A config in EAGLE-3's layout (:func:`eagle3_config`'s architecture)."""
    return EAGLE3 in (getattr(config, "architectures", None) or [])


def key_columns(hidden: int, head: int) -> range:
    """K: the ``head`` embedding columns before S that hold each token's key code (there is
    room: S starts at hidden - 1 - d >= 47 for widths of at least 64, and past 223 from 256,
    where the head size is 64)."""
    s = layout(hidden).s
    return range(s.start - head, s.start)


def _rows(width: int, cols: Mapping[int, float]) -> np.ndarray:
    row = np.zeros(width, dtype=np.float32)
    for c, v in cols.items():
        row[c] = v
    return row


def eagle3_tensors(twin: Mapping[str, Entry], config: Any, seed: int) -> dict[str, Entry]:
    """EAGLE-3's logical tensors (name -> entry) from its one-layer Llama twin's
    (``model.*``, ``lm_head``), designed as the module docstring says."""
    hidden, head = config.hidden_size, config.head_dim
    lay, kcols = layout(hidden), key_columns(hidden, head)
    aux = len(config.eagle_config["eagle_aux_hidden_state_layer_ids"])
    out: dict[str, Entry] = {}
    for name, entry in twin.items():
        new = name.removeprefix("model.").replace("layers.0.", "midlayer.")
        shape, dtype, spec, key, over = entry
        if new.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            shape = (shape[0], 2 * hidden)
            spec, key = tensor_spec(new, shape, dtype), tensor_seed(seed, new)
        out[new] = (tuple(shape), dtype, spec, key, list(over or []))
    embed = out["embed_tokens.weight"]
    codes = code_block(embed[2], embed[3], embed[0], embed[1], kcols)  # [V, head], length √head
    embed[4].extend((1, c, codes[:, i].astype(np.float32)) for i, c in enumerate(kcols))
    rows = math.sqrt(hidden) / MARKER  # the normalized embedding's scale (the marker's share)
    b = math.sqrt(SELF_SCORE / math.sqrt(head)) / rows  # score B²·head/√head
    z, heads = kcols.start - 1, config.num_attention_heads
    kv = config.num_key_value_heads
    mark = (0, lay.d) if lay.d < head else (1, 0)  # (KV head, dim) of the marker's value
    q, k = out["midlayer.self_attn.q_proj.weight"], out["midlayer.self_attn.k_proj.weight"]
    v, o = out["midlayer.self_attn.v_proj.weight"], out["midlayer.self_attn.o_proj.weight"]
    for t in (q, k, v):  # no other row reads the hidden state's S and Z (W times its share)
        t[4].extend((1, hidden + c, 0.0) for c in (*lay.s, z))
    for g in sorted({0, mark[0]}):  # query head g·group and KV head g: the token's positions
        for j, c in enumerate(kcols):
            q[4].append((0, g * heads // kv * head + j, _rows(2 * hidden, {c: b})))
            k[4].append((0, g * head + j, _rows(2 * hidden, {c: b})))
    width = o[0][1]
    for i, c in enumerate(lay.s):  # the view's code, less the hidden state's S (W times it)
        v[4].append((0, i, _rows(2 * hidden, {c: 1.0 / rows, hidden + c: -1.0})))
        o[4].append((0, c, _rows(width, {i: 1.0})))
    n = WEIGHT * math.sqrt(hidden)  # the marker: N in Z, less the hidden state's Z
    marker = _rows(2 * hidden, {z: n / math.sqrt(hidden), hidden + z: -1.0})
    v[4].append((0, mark[0] * head + mark[1], marker))
    group = heads // kv  # the query heads reading the marker's KV head: only Z reads theirs
    o[4].extend((1, (group * mark[0] + g) * head + mark[1], 0.0) for g in range(group))
    o[4].append((0, z, _rows(width, {group * mark[0] * head + mark[1]: 1.0})))
    norm = "midlayer.hidden_norm.weight"
    out[norm] = ((hidden,), embed[1], Spec("norm", "const", 1.0), tensor_seed(seed, norm),
                 [(0, lay.s, WEIGHT), (0, z, WEIGHT)])  # fmt: skip
    embed[4].append((1, z, float(MARKER)))
    inorm = out["midlayer.input_layernorm.weight"]
    inorm[4].extend([(0, kcols, 1.0), (0, lay.s, 1.0), (0, z, 1.0)])
    down = out["midlayer.mlp.down_proj.weight"]
    down[4].append((0, z, 0.0))
    final = out["norm.weight"]
    final[4].append((0, lay.s, WEIGHT / RHO))
    fc = (hidden, aux * config.target_hidden_size)
    out["fc.weight"] = (fc, embed[1], tensor_spec("fc.weight", fc, embed[1]),
                        tensor_seed(seed, "fc.weight"), [(0, lay.s, 0.0), (0, z, 0.0)])  # fmt: skip
    return out
