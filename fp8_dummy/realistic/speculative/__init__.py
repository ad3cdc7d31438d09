"""Speculative decoding a benchmark can choose, made by the weights alone
(docs/realistic.md#speculative-decoding): the MTP layers of the checkpoints that carry them,
and a designed greedy stream whose draft (the MTP layers, or an exported draft model) is right
at the chosen acceptance, so that the engine's own verification accepts at that rate. This
package's face; its files:

- ``acceptance.py``: the ``acceptance`` argument parsed and checked (a rate, a per-position
  list, ``"default"``), the engines' choice (their configuration, ``$FP8_DUMMY_ACCEPTANCE``);
- ``stream.py``: the designed process: the stream's tokens (a tokenizer's, or the fallback),
  their cycle, where the draft is right, the acceptance an engine drafting k tokens measures;
- ``code_gain.py``: what of the code a class's structure lets reach the lm_head (BART's
  normalized lookup, Beam's depth-scaled adds, Qwen4-Exp's gated stream mix), the final
  residual RMS the lm_head's scale is then centred for;
- ``design.py``: the weights that realize it: the reserved code subspace, the lm_head's rows
  and scale (the entropy), the overrides of the embedding, the branches and the MTP layers;
- ``mtp_layouts.py``: which checkpoints carry MTP layers (DeepSeek-V3/V3.2, GLM-4.5, GLM-OCR,
  EXAONE 4.5, Ling's hybrid, Qwen3-Next, Mellum, Inkling's text model and multimodal
  checkpoint, Nemotron-H, ERNIE 4.5 MoE, EXAONE-MoE, HY-V3, MiMo-V2-Flash, LongCat-Flash,
  DeepSeek-V4), how many and under which names: one record per architecture;
- ``mtp.py``: their tensors, made for the logical model (the decoder block from the class's
  own decoder layer, the MTP layers' norms and input projections);
- ``unit_codes.py``: the MTP input projections a quantized format quantizes (DeepSeek-V4's
  ``e_proj``/``h_proj``) with scales under which the design's 1s are exact codes;
- ``draft.py``: ``export --draft``'s draft model: its config (a plain causal LM of the
  target's vocabulary whose greedy proposals the target accepts at the chosen rate), staged
  with the target's tokenizer files;
- ``draft_heads.py``: a draft's KV heads (a divisor of its query heads), for both layouts;
- ``eagle3.py``: ``--draft-layout eagle3``: the draft in EAGLE-3's layout (vLLM's
  ``Eagle3LlamaForCausalLM``, SGLang's ``LlamaForCausalLMEagle3``): its config, and its
  tensors from its one-layer Llama twin's, the attention designed to carry the input
  token's view to the head;
- ``report.py``: ``python -m fp8_dummy acceptance``: the acceptance per position a config and
  an engine's number of draft tokens give, and the next-token entropy."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import torch

from ..rules import Spec
from . import design
from .acceptance import (
    DEFAULT,
    ENV,
    Acceptance,
    AcceptanceError,
    chosen_acceptance,
    parse_acceptance,
)
from .code_gain import code_rho
from .design import RHO, DesignError, carrier_rows, gate_rows, layout, logit_multiplier, plan_design
from .draft import DRAFT_KEY, LAYOUTS, draft_config, is_draft, stage_draft
from .mtp import MtpPart, mtp_part
from .mtp_layouts import layers_plain, mtp_layers, mtp_prefixes
from .stream import Stream, allowed_tokens, design_stream, predict

__all__ = ["DEFAULT", "DRAFT_KEY", "ENV", "LAYOUTS", "Acceptance", "AcceptanceError", "DesignError"]
__all__ += ["MtpPart", "Stream", "allowed_tokens", "carrier_rows", "chosen_acceptance"]
__all__ += ["gate_rows", "layers_plain"]
__all__ += ["design_stream", "draft_config", "is_draft", "layout", "mtp_layers", "mtp_part"]
__all__ += ["mtp_prefixes", "parse_acceptance", "plan_acceptance", "predict", "stage_draft"]


def plan_acceptance(
    acceptance: Acceptance, seed: int, config: Any, specs: Mapping[str, Spec],
    shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, torch.dtype],
    keys: Mapping[str, int], *, projections: Mapping[str, int | None] | None = None,
    tokenizer: Any = None, transposed: Collection[str] = (), lookup: Collection[str] = (),
) -> tuple[dict[str, Spec], dict[str, list], dict[str, Any]]:  # fmt: skip
    """The spec replacements, overrides and facts that write the designed stream of
    ``acceptance`` into a model's logical tensors (full name -> spec, shape, dtype, key;
    ``transposed``: the names of the weights stored (in, out); ``lookup``: the vocabulary's
    tables as the model's class names them); all checked before anything is written."""
    vocab, hidden = design.vocab_hidden(config, specs, shapes)
    layout(hidden)  # refuses a model too narrow before the tokenizer is read
    allowed, where = allowed_tokens(vocab, config, tokenizer)
    stream = design_stream(acceptance, seed, vocab, allowed, where)
    rho = code_rho(config, specs, shapes, vocab, hidden, layout(hidden).d, RHO, lookup)
    replaced, overrides, facts = plan_design(
        stream, specs, shapes, dtypes, keys, hidden, draft=is_draft(config),
        projections=projections, multiplier=logit_multiplier(config), transposed=transposed,
        lookup=lookup, rho=rho,
    )  # fmt: skip
    facts.update(stream=stream, acceptance=acceptance)
    return replaced, overrides, facts
