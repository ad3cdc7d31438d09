"""Which checkpoints carry multi-token-prediction (MTP) layers, how many and under which names
(docs/realistic.md#speculative-decoding), as the engines' loaders and transformers'
``MtpModel`` read them (its conversion: ``transformers.conversion_mapping``'s ``MtpModel``;
vLLM 0.33's MTP classes; SGLang 0.5.23's NextN): one record per architecture (:data:`ARCHS`),
one layout per family of checkpoints (the tensors themselves are made by :mod:`.mtp`):

- ``deepseek``: DeepSeek-V3/V3.2, GLM-4.5/GLM-5, GLM-4.7-Flash (``glm4_moe_lite``), GLM-OCR
  (``glm_ocr``: its text config counts them, its layers under ``model.language_model.``),
  GLM-5-Next (``glm5_next``: likewise; its block the decoder layer without its
  hyper-connections, its attention the indexed one, as vLLM's ``Glm5NextMTP`` builds it; no
  ``shared_head.head``: vLLM's class has none and its loader fails on one)
  (``num_nextn_predict_layers`` = n): ``model.layers.{L+i}.`` the block's tensors and
  ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the normalized embedding first),
  ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens`` (copies of the lm_head and
  the embedding: the same values, as DeepSeek's checkpoints hold them);
- ``bailing``: Ling/Ring hybrid (``bailing_hybrid``), HY-V3 (``hy_v3``,
  ``num_nextn_predict_layers``): ``model.layers.{L+i}.`` the block and
  ``enorm``, ``hnorm``, ``eh_proj``, ``final_layernorm`` (vLLM's ``BailingMoeV25MTPModel``,
  ``BailingMoeV3MTPModel``, where the config names Ling-3.0's class, and ``HYV3MTP`` take the
  embedding and the lm_head from the model's own);
- ``qwen``: Qwen3-Next (one MTP layer unless ``num_nextn_predict_layers`` says otherwise, as
  vLLM reads it), Qwen3.5 and Qwen3.5-MoE (``mtp_num_hidden_layers``, else one; the
  multimodal checkpoint keeps them at the top level too), Mellum, EXAONE-MoE (as Qwen3-Next,
  its block dense: vLLM's ``ExaoneMoeMTP``), EXAONE 4.5 (``exaone4_5``: its top-level
  ``num_nextn_predict_layers``, else one): ``mtp.layers.{i}.`` the block, ``mtp.fc`` [H, 2H],
  ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.norm``;
- ``inkling``: Inkling's text model and its multimodal checkpoint (``inkling_mm_model``, its
  text config's ``num_mtp_layers``, which transformers' config copies from the checkpoint's
  ``mtp_config``): ``model.mtp.layers.{i}.`` its ``hidden_norm``, ``embed_norm``,
  ``input_proj`` [H, 2H] (the hidden state first: ``mtp_hidden_states_first``) and the block
  under ``transformer_block.`` (the multimodal checkpoint's under its own names, as its main
  layers': ``attn.wq_du``, ``mlp.w13_dn``...); ``model.mtp.chain_norm`` where
  ``chain_hidden_post_norm`` is set;
- ``nemotron``: Nemotron-H (``num_nextn_predict_layers`` = n, each MTP step the config's
  ``mtp_layers_block_type``, P layers: attention, MoE): ``mtp.layers.{j}.`` the n·P layers'
  tensors (``norm``, ``mixer.*``), the first of each step ``enorm``, ``hnorm``, ``eh_proj``
  [H, 2H] (the normalized embedding first), the last ``final_layernorm`` (vLLM's
  ``NemotronHMTP`` takes the embedding and the lm_head from the model's own);
- ``ernie``: ERNIE 4.5 MoE (``num_nextn_predict_layers`` = n): ``model.mtp_block.{i}.`` a
  dense decoder layer (vLLM's ``ErnieMTP`` builds a Llama one), ``model.mtp_emb_norm.{i}``,
  ``model.mtp_hidden_norm.{i}``, ``model.mtp_linear_proj.{i}`` [H, 2H] (the normalized
  embedding first); no final norm (the block's output goes to the lm_head as it is), the
  embedding and the lm_head the model's;
- ``mimo``: MiMo-V2-Flash (``num_nextn_predict_layers`` = n; vLLM's ``MiMoV2MTP`` reads the
  first): ``model.mtp.layers.{i}.`` a dense block whose attention is the sliding one (sinks:
  ``self_attn.attention_sink_bias``), its norm before the MLP ``pre_mlp_layernorm``, and
  ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the normalized embedding first),
  ``final_layernorm`` (the embedding and the lm_head the model's);
- ``longcat``: LongCat-Flash (``num_nextn_predict_layers``, else one; vLLM's
  ``LongCatFlashMTP`` and SGLang's NextN build one and read no other): ``model.mtp.layers.0.``
  a block of parts of the class's decoder layer (its first MLA attention ``self_attn.*``, its
  first dense MLP as ``transformer_layer.mlp.*``, their two norms; not its second attention,
  MLP or MoE), ``enorm.m``, ``hnorm.m``, ``eh_proj`` [H, 2H] (the normalized embedding
  first), ``model.mtp.norm``, ``model.mtp.embed_tokens`` (a copy of the embedding);
- ``hy_v4``: HY-V4 (``num_nextn_predict_layers`` = n; vLLM's ``HYV4MTP``): ``model.mtp_layers.{i}.``
  the block (the decoder layer without its iHC boundaries, which vLLM builds with
  ``enable_ihc`` off: MLA attention with the lightning indexer, the output gate and the sinks,
  the MoE), ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the normalized embedding first),
  ``final_layernorm`` (the embedding and the lm_head the model's);
- ``deepseek_v4``: DeepSeek-V4 (``num_nextn_predict_layers`` = n; vLLM's ``DeepSeekV4MTP``,
  SGLang's ``DeepseekV4ForCausalLMNextN``): ``mtp.{i}.`` the block under the main layers'
  names (a hyper-connected decoder layer: sliding attention, a routed MoE), ``enorm``,
  ``hnorm``, ``norm`` (the head's), two input projections [H, H], ``e_proj`` of the normalized
  embedding and ``h_proj`` of each normalized stream of the target's (its sum with ``e_proj``'s
  output is every stream of the block's input), the head's stream collapse ``hc_head_fn``,
  ``hc_head_base``, ``hc_head_scale`` (the model's own, renamed), and ``head``,
  ``emb.tok_emb`` (copies of the lm_head and the embedding, as DeepSeek-V4-Flash-Base holds
  them);
- ``qwen4_exp``: Qwen4-Exp (its text config's ``mtp_num_hidden_layers``, else one, as vLLM's
  ``Qwen4ExpMTP`` reads it): ``mtp.layers.{i}.`` the block (a hyper-connected decoder layer:
  QSA attention, MoE, ``attn_hyper_connection``, ``mlp_hyper_connection``), and once for all
  the MTP layers ``mtp.pre_fc_norm_embedding`` [H], ``mtp.pre_fc_norm_hidden`` [hc·H] (one
  norm over the target's ``hc_count`` streams together), two input projections [H, H],
  ``mtp.fc_embedding`` of the normalized embedding and ``mtp.fc_hidden`` of each normalized
  stream (their sum every stream of the block's input), and the head's stream collapse
  ``mtp.hyper_connection_mixer.*`` (the model's own final mixer, renamed: ``hc_norm``,
  ``input_mix_weight_down``, ``input_mix_weight_up``); no final norm, the embedding and the
  lm_head the model's;
- ``step3p5``: Step-3.5-Flash's text checkpoint (``num_nextn_predict_layers`` = n; vLLM's
  ``Step3p5MTP``): ``model.layers.{L+i}.`` the block (the decoder layer of the config's MTP
  layer types, ``mtp_layer_types``/``mtp_mlp_layer_types``: dense where they name none, as
  vLLM reads a layer past its lists), ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H] (the
  normalized embedding first), ``shared_head.norm`` and ``shared_head.output`` (a copy of the
  lm_head, under the name Step's checkpoints give it: vLLM's and SGLang's loaders rename it
  to their ``shared_head.head``); no copy of the embedding (vLLM's loader reads every
  ``embed_tokens`` into the one its draft shares);
- ``minimax``: MiniMax-M3's multimodal checkpoint (``minimax_m3_vl``, its text config's
  ``num_mtp_modules``, else one, as vLLM's ``MiniMaxM3MTP`` reads it):
  ``language_model.model.mtp.layers.{i}.`` the block under ``transformer_layer.`` (the sparse
  attention with its indexer, MoE, named by the multimodal checkpoint's conversion as its main
  layers: ``block_sparse_moe.experts.{e}.w1``...), ``enorm``, ``hnorm``, ``eh_proj`` [H, 2H]
  (the normalized embedding first), ``final_layernorm`` (the embedding and the lm_head the
  model's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ALL_COUNTS", "ARCHS", "MtpArch", "arch_of", "block_name", "mtp_layers", "mtp_prefixes"]
__all__ += ["norm_width", "own_names", "split_projections", "text_config", "where"]

_COUNTS = ("num_nextn_predict_layers", "num_mtp_layers")


@dataclass(frozen=True)
class MtpArch:
    """Where one architecture's checkpoint keeps its MTP layers and how its config counts them."""

    layout: str  # deepseek | bailing | qwen | ... | step3p5 | deepseek_v4 (the docstring)
    counts: tuple[str, ...] = _COUNTS  # the keys that count them: the first one set
    default: int = 0  # the count where the config names none (vLLM's reading)
    dense: bool = False  # a dense block whatever the main layers are (vLLM's class builds one)
    main: str = "model.layers."  # where the decoder layers are, the MTP layers after them
    # a multimodal config whose own model type says the layout (its text config is a model's
    # without MTP layers) and whose top-level config counts them
    outer: bool = False
    text_only: bool = False  # the text model's checkpoint only: the multimodal one names its own
    attention: str = "full_attention"  # the block's layer type where the config names none
    plain: tuple[str, ...] = ()  # the block's modules the engines build unquantized
    # the main decoder layers' same modules too: vLLM's main class builds them unquantized as
    # well (HY-V4's indexer)
    everywhere: bool = False
    most: int = 0  # at most this many (0: no limit): the engines' classes build no more
    layers: str = "num_hidden_layers"  # the config key that counts the class's decoder layers
    # the block's names within a layer the checkpoint keeps otherwise, (in-memory prefix,
    # checkpoint's); with ``only``, the block is these parts of the class's decoder layer alone
    parts: tuple[tuple[str, str], ...] = ()
    only: bool = False
    # an MTP layer's ``mlp_layer_types`` entry where the config names none: a MoE layer's name
    # there (DeepSeek-V4's ``moe``), Step-3.5's ``dense`` (vLLM's reading of a layer past the list)
    mlp_default: str = "sparse"
    # the model's own tensors (outside its decoder layers) each MTP layer has a renamed copy of
    # under its prefix: made as the model's are (DeepSeek-V4's head's stream collapse)
    heads: tuple[str, ...] = ()
    # a multimodal config whose MTP layers its text config counts and whose own conversion
    # names the block (its twin the whole model around the MTP layers' text config)
    whole: bool = False
    # the model's own tensors (outside its decoder layers) the MTP layers share one renamed
    # copy of, (in-memory prefix, checkpoint's): made as the model's are (Qwen4-Exp's mixer)
    shared: tuple[tuple[str, str], ...] = ()
    # the model's tensor whose value the MTP layers' own norms take where it has no final norm
    # (a name's end; Qwen4-Exp's final mixer's norm, a (1 + w) one as its MTP norms are)
    final: str = ""
    # config fields the MTP block's layer type needs (Qwen4-Exp's QSA indexer's): refused
    # without them, as neither transformers' decoder layer nor vLLM's QSA layer builds
    needs: tuple[str, ...] = ()
    # the ends of the shared copies' names that are stream-mixer gate projections, whose rows
    # on the code the design zeroes (Qwen4-Exp's ``input_mix_weight_up``)
    gates: tuple[str, ...] = ()
    # the input projections are quantized in a quantized format, as the engine's class builds
    # them with the quantization config (DeepSeek-V4's split ones, which its real checkpoints hold
    # in FP8; LongCat-Flash's and MiniMax-M3's ``eh_proj``); else unquantized and listed as
    # ignored (Qwen4-Exp's: vLLM's draft reads that list under the names it builds)
    quantized_inputs: bool = False
    # the quantized formats (``Format.quant``) whose MTP layers vLLM's draft class cannot load,
    # each with why: refused before anything is written
    unloadable: tuple[tuple[str, str], ...] = ()
    # the MTP layer holds a copy of the lm_head (``shared_head.head``): not where the engine's
    # class builds none and its loader fails on one (GLM-5-Next's: the target's is shared)
    head_copy: bool = True
    # the model class reads the count (``counts[0]``) and the config has no default of it (it
    # takes it as a keyword only: Step-3.5's): the MTP layers' twin gets 0, not none
    reads_count: bool = False
    # the MTP layers' types (an attention's in ``layer_types``, an MLP's in ``mlp_layer_types``)
    # vLLM's draft class cannot build or load, each with why: refused before anything is written
    unbuildable: tuple[tuple[str, str], ...] = ()
    # in NVFP4 each MTP layer is left unquantized whole, listed as one module tree
    # (``model.layers.N.*``): vLLM's ModelOpt config quantizes a ParallelLMHead its list does
    # not name, and these classes build the layer's head under a name of the engine's (the
    # DeepSeek and GLM classes' ``model.layers.N.head``) or read it from ``lm_head`` (Ling's)
    fp4_tree: bool = False


_QWEN = MtpArch("qwen", default=1)
# LongCat-Flash's MTP block: its decoder layer's first attention and first dense MLP (vLLM's names)
_LONGCAT = (("self_attn.0.", "self_attn."), ("mlps.0.", "transformer_layer.mlp."),
            ("input_layernorm.0.", "input_layernorm."),
            ("post_attention_layernorm.0.", "post_attention_layernorm."))  # fmt: skip
# in NVFP4 the MTP layers unquantized whole: SGLang's Qwen3.5 MTP class builds them without the
# quantization config for a serialized NVFP4 checkpoint (as ModelOpt's keep them)
_QWEN35 = MtpArch("qwen", ("mtp_num_hidden_layers",), default=1, fp4_tree=True)
# Qwen4-Exp's QSA indexer's config fields (its MTP block's attention needs them)
_QSA = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget",
        "indexer_compress_ratio")  # fmt: skip
# GLM-5-Next's MTP block: its decoder layer without the hyper-connections (vLLM's MTP layer runs
# one stream: ``is_mtp_layer``), under the same names
_GLM5_NEXT = tuple((p, p) for p in ("self_attn.", "mlp.", "input_layernorm.",
                                    "post_attention_layernorm."))  # fmt: skip
# HY-V4's MTP block: its decoder layer without the iHC boundaries (``hc_*_layer.hc_pre.*``),
# under the main layers' checkpoint names (hf_model's: the shared expert's ``gate_proj``)
_HY_V4 = tuple((p, p) for p in ("self_attn.", "mlp.", "input_layernorm.",
                                "post_attention_layernorm."))  # fmt: skip
# vLLM 0.33's LongCatFlashMTP.load_weights maps the MTP block's and eh_proj's scales by a table
# of FP8-block names (``weight_scale_inv``) alone: any other scale under ``model.mtp.`` is a
# parameter name it does not have (KeyError); and it builds the block under
# ``model.layers.{2·num_layers}.``, eh_proj as ``eh_proj``, which no checkpoint's ignore list names
_LONGCAT_WHY = (
    "vLLM's LongCatFlashMTP builds the MTP layer quantized and reads its scales under the "
    "FP8-block name weight_scale_inv alone: its loader fails on weight_scale"
)
_LONGCAT_UNLOADABLE = tuple((quant, _LONGCAT_WHY) for quant in ("per-tensor", "channel", "nvfp4"))
# vLLM 0.33's MiniMaxM3MTP.load_weights renames every MTP ``weight_scale_inv`` to
# ``weight_scale`` (ModelOpt MXFP8's name), which vLLM's FP8 block layers do not have (theirs:
# ``weight_scale_inv``): no block scale reaches them; per tensor, its sparse attention's fused
# qkv_proj (q, k, v, index_q, index_k) holds a per-tensor scale vLLM's PerTensorScaleParameter
# loads by the shard ids q, k and v alone (index_q fails its assertion)
_MINIMAX_UNLOADABLE = (
    ("block", "vLLM's MiniMaxM3MTP renames the MTP layer's weight_scale_inv to weight_scale, "
              "which its FP8 block layers do not have: no block scale is loaded"),
    ("per-tensor", "vLLM's per-tensor scale of the MTP layer's fused qkv_proj takes the shard "
                   "ids q, k, v alone: its loader fails on index_q_proj's scale"),
    ("nvfp4", "vLLM's MiniMaxM3MTP builds its lm_head with the NVFP4 method under the name "
              "lm_head, which the multimodal checkpoint's list (language_model.lm_head) does not "
              "name: the unquantized head does not fit it"),
)  # fmt: skip
# The indexed sparse MLA's indexer: vLLM fuses its ``wk`` and ``weights_proj`` into one
# ``wk_weights_proj`` built without the quantization config (DeepSeek-V3.2's and GLM-5's
# ``Indexer``, HY-V4's): both stay unquantized
_INDEXER = ("self_attn.indexer.wk", "self_attn.indexer.weights_proj")
# vLLM 0.33's GlmOcrMTP and HYV3MTP build the MTP layer's head with ModelOpt's NVFP4 method under
# a name no exclusion list of the checkpoint reaches (GLM-OCR's vLLM-only ``model.layers.N.head``,
# which its mapper does not rename from ``model.language_model.layers.N``; HY-V3's has no prefix)
_HEAD_NVFP4 = (
    ("nvfp4", "vLLM's MTP class builds the layer's head with the NVFP4 method under a name no "
              "checkpoint's exclusion list reaches: the unquantized head does not fit it"),
)  # fmt: skip
# vLLM 0.33's Step3p5MTP.load_weights fails unless every parameter of its draft was loaded, the
# attention's KV-cache parameters included but the unit scales a checkpoint may omit (numel 1,
# no gradient): compressed-tensors' attention method (FP8 per tensor and per channel) makes a
# q_zero_point and a q_scale that fall outside that exception, which no checkpoint holds
_STEP3P5_WHY = (
    "vLLM's Step3p5MTP requires every parameter of its draft loaded, and compressed-tensors' "
    "attention makes KV-cache parameters (q_zero_point, q_scale) no checkpoint holds: its "
    "loader fails"
)
_STEP3P5_UNLOADABLE = tuple((quant, _STEP3P5_WHY) for quant in ("per-tensor", "channel"))
# vLLM 0.33's Step3p5MTP builds a full-attention MTP layer with the head count of
# ``per_layer_config[L + i]``, past the main layers that transformers' config holds (IndexError);
# and loads a MoE one's shared expert and packed experts under names its block does not have
_STEP3P5_UNBUILDABLE = (
    ("full_attention", "vLLM's Step3p5MTP reads a full-attention layer's heads from the "
                       "config's per-layer list, which ends at the main layers (IndexError)"),
    ("sparse", "vLLM's Step3p5MTP loads a MoE layer's share_expert and moe.*_proj under names "
               "its block does not have (KeyError)"),
)  # fmt: skip
# The config's own model type (its text config's, or an outer one's) -> its MTP layers
ARCHS = {
    "deepseek_v3": MtpArch("deepseek", fp4_tree=True),
    "deepseek_v32": MtpArch("deepseek", plain=_INDEXER, everywhere=True, fp4_tree=True),
    "glm4_moe": MtpArch("deepseek", fp4_tree=True),
    "glm_moe_dsa": MtpArch("deepseek", plain=_INDEXER, everywhere=True, fp4_tree=True),
    "glm4_moe_lite": MtpArch("deepseek", fp4_tree=True),
    "glm_ocr_text": MtpArch(
        "deepseek", main="model.language_model.layers.", unloadable=_HEAD_NVFP4
    ),
    # GLM-5-Next: the indexed (sparse) MLA attention, the block without its hyper-connections;
    # vLLM's ``Glm5NextDecoderLayer`` builds the whole attention (the MLA with its indexer, the
    # main layers' KDA too) without the quantization config
    "glm5_next_text": MtpArch(
        "deepseek",
        main="model.language_model.layers.",
        attention="indexed_attention",
        parts=_GLM5_NEXT,
        only=True,
        head_copy=False,
        plain=("self_attn",),
        everywhere=True,
    ),
    "bailing_hybrid": MtpArch("bailing", fp4_tree=True),
    "hy_v3": MtpArch("bailing", unloadable=_HEAD_NVFP4),
    "qwen3_next": _QWEN,
    "qwen3_5_text": _QWEN35,
    "qwen3_5_moe_text": _QWEN35,
    "mellum": MtpArch("qwen"),
    "exaone_moe": MtpArch("qwen", default=1, dense=True),  # vLLM's ExaoneMoeMTP
    "exaone4_5": MtpArch("qwen", ("num_nextn_predict_layers",), default=1, outer=True),
    "inkling_text": MtpArch("inkling", text_only=True),
    "inkling_mm_model": MtpArch("inkling", ("num_mtp_layers",), whole=True),
    "nemotron_h": MtpArch("nemotron"),
    "ernie4_5_moe": MtpArch("ernie", dense=True),  # vLLM's ErnieMTP
    # vLLM's MiMoV2MTP: the sliding attention (its quantization config for all but o_proj)
    "mimo_v2_flash": MtpArch(
        "mimo",
        dense=True,
        attention="sliding_attention",
        parts=(("post_attention_layernorm.", "pre_mlp_layernorm."),),
        plain=("self_attn.o_proj",),
    ),
    # LongCat-Flash: its num_hidden_layers counts two per decoder layer (its two attentions);
    # vLLM's LongCatFlashMTP builds eh_proj with the quantization config
    "longcat_flash": MtpArch(
        "longcat",
        default=1,
        most=1,
        layers="num_layers",
        parts=_LONGCAT,
        only=True,
        quantized_inputs=True,
        unloadable=_LONGCAT_UNLOADABLE,
    ),
    # HY-V4: vLLM builds the MTP block as the last main layer's type (the indexed attention,
    # MoE) and without the iHC boundaries
    "hy_v4": MtpArch(
        "hy_v4",
        ("num_nextn_predict_layers",),
        attention="indexed_attention",
        parts=_HY_V4,
        only=True,
        plain=_INDEXER,
        everywhere=True,
    ),
    # MiniMax-M3's multimodal checkpoint (vLLM's MiniMaxM3MTP: its text config's
    # num_mtp_modules, else one): the block always the sparse (indexed) attention and MoE, and
    # eh_proj, all built with the quantization config
    "minimax_m3_vl": MtpArch(
        "minimax",
        ("num_mtp_modules",),
        default=1,
        attention="minimax_m3_sparse",
        whole=True,
        quantized_inputs=True,
        unloadable=_MINIMAX_UNLOADABLE,
    ),
    # DeepSeek-V4: vLLM builds the MTP block's attention without a compressor (sliding) and
    # its MoE with the learned router (no hash routing)
    "deepseek_v4": MtpArch(
        "deepseek_v4",
        ("num_nextn_predict_layers",),
        attention="sliding_attention",
        mlp_default="moe",
        heads=("hc_head_fn", "hc_head_base", "hc_head_scale"),
        quantized_inputs=True,
    ),
    # Step-3.5-Flash's text checkpoint: vLLM's Step3p5MTP builds the head with the quantization
    # config under its own name (``model.layers.N.shared_head.head``), which no list of the
    # checkpoint's names (``shared_head.output``) reaches: in NVFP4 the layer is one module tree
    # (the block, which vLLM builds as ``mtp_block``, no list entry reaches in the FP8 formats:
    # quantized whole)
    "step3p5": MtpArch(
        "step3p5",
        ("num_nextn_predict_layers",),
        mlp_default="dense",
        fp4_tree=True,
        unloadable=_STEP3P5_UNLOADABLE,
        unbuildable=_STEP3P5_UNBUILDABLE,
        reads_count=True,
    ),
    # Qwen4-Exp: vLLM builds the MTP block's attention as QSA (``qwen_sparse_attention``:
    # transformers' ``indexed_attention``)
    "qwen4_exp_text": MtpArch(
        "qwen4_exp",
        ("mtp_num_hidden_layers",),
        default=1,
        attention="indexed_attention",
        shared=(("model.hyper_connection_mixer.", "mtp.hyper_connection_mixer."),),
        final="hyper_connection_mixer.hc_norm.weight",
        needs=_QSA,
        gates=("input_mix_weight_up.weight",),
    ),
}
ALL_COUNTS = sorted({key for arch in ARCHS.values() for key in arch.counts})


def text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def arch_of(config: Any) -> tuple[MtpArch | None, Any]:
    """(the architecture's record or None, the config that counts its MTP layers). The class's
    own model type first (vLLM renames the instance's for its draft)."""
    outer = ARCHS.get(getattr(type(config), "model_type", None))
    if outer is not None and outer.outer:
        return outer, config
    text = text_config(config)
    if outer is not None and outer.whole and text is not config:
        return outer, text
    kind = getattr(type(text), "model_type", None) or getattr(text, "model_type", None)
    arch = ARCHS.get(kind)
    if arch is None or arch.outer or (arch.text_only and text is not config):
        return None, text
    return arch, text


def layers_plain(config: Any) -> tuple[str, ...]:
    """The modules of every decoder layer (a name's end) the engines build unquantized, the main
    layers' as the MTP block's (:attr:`MtpArch.everywhere`), whether or not the config has MTP
    layers; none for others."""
    arch = arch_of(config)[0]
    return arch.plain if arch is not None and arch.everywhere else ()


def mtp_layers(config: Any) -> tuple[str | None, int]:
    """(layout, MTP layer count) of the checkpoint ``config`` describes: (None, 0) for one
    without MTP layers."""
    arch, counter = arch_of(config)
    if arch is None:
        return None, 0
    n = next((v for v in (getattr(counter, c, None) for c in arch.counts) if v is not None), None)
    n = arch.default if n is None else n
    n = min(n, arch.most) if arch.most and isinstance(n, int) else n
    return (arch.layout, n) if isinstance(n, int) and n > 0 else (None, 0)


# The layouts that keep their MTP tensors apart from the decoder layers (the others: after
# them, as more layers): the prefix of every MTP tensor's name
_APART = {"qwen": "mtp.", "nemotron": "mtp.", "ernie": "model.mtp_", "inkling": "model.mtp.",
          "mimo": "model.mtp.", "longcat": "model.mtp.", "deepseek_v4": "mtp.",
          "qwen4_exp": "mtp.", "minimax": "language_model.model.mtp.",
          "hy_v4": "model.mtp_layers."}  # fmt: skip


def mtp_prefixes(config: Any) -> tuple[str, ...]:
    """The prefixes of the MTP tensors' checkpoint names (none for a config without them)."""
    style, n = mtp_layers(config)
    if style in _APART:
        return (_APART[style],)
    arch, text = arch_of(config)[0], text_config(config)
    return tuple(where(arch, text, i)[0] for i in range(n))


def own_names(style: str, p: str, i: int, text: Any) -> tuple[list[str], str | None, dict]:
    """(norms, input projection, copies) of MTP layer i whose tensors are under ``p``."""
    if style == "deepseek":
        copies = {p + "shared_head.head.weight": "lm_head", p + "embed_tokens.weight": "embedding"}
        norms = [p + "enorm.weight", p + "hnorm.weight", p + "shared_head.norm.weight"]
        return norms, p + "eh_proj.weight", copies
    if style == "deepseek_v4":  # two input projections: :func:`split_projections`
        copies = {p + "head.weight": "lm_head", p + "emb.tok_emb.weight": "embedding"}
        return [p + "enorm.weight", p + "hnorm.weight", p + "norm.weight"], None, copies
    if style == "step3p5":
        norms = [p + "enorm.weight", p + "hnorm.weight", p + "shared_head.norm.weight"]
        return norms, p + "eh_proj.weight", {p + "shared_head.output.weight": "lm_head"}
    if style in ("bailing", "mimo", "minimax", "hy_v4"):
        norms = [p + n for n in ("enorm.weight", "hnorm.weight", "final_layernorm.weight")]
        return norms, p + "eh_proj.weight", {}
    if style == "inkling":
        norms = [p + "hidden_norm.weight", p + "embed_norm.weight"]
        if i == 0 and getattr(text, "chain_hidden_post_norm", False):
            norms.append("model.mtp.chain_norm.weight")
        return norms, p + "input_proj.weight", {}
    if style == "ernie":  # each of its own tensors counted by a last index, i
        norms = [f"model.mtp_emb_norm.{i}.weight", f"model.mtp_hidden_norm.{i}.weight"]
        return norms, f"model.mtp_linear_proj.{i}.weight", {}
    if style == "longcat":  # the one layer's own tensors, the final norm, the embedding's copy
        norms = [p + "enorm.m.weight", p + "hnorm.m.weight", "model.mtp.norm.weight"]
        return norms, p + "eh_proj.weight", {"model.mtp.embed_tokens.weight": "embedding"}
    if style == "nemotron":  # step i: its first layer fuses the inputs, its last normalizes
        size = len(text.mtp_layers_block_type)
        first, last = f"mtp.layers.{i * size}.", f"mtp.layers.{i * size + size - 1}."
        norms = [first + "enorm.weight", first + "hnorm.weight", last + "final_layernorm.weight"]
        return norms, first + "eh_proj.weight", {}
    if i > 0:  # qwen, qwen4_exp: one input projection and its norms for all the MTP layers
        return [], None, {}
    if style == "qwen4_exp":  # two input projections: :func:`split_projections`
        return ["mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"], None, {}
    norms = ["mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"]
    return norms + ["mtp.norm.weight"], "mtp.fc.weight", {}


def norm_width(style: str, name: str, text: Any) -> int:
    """The width of an MTP layer's own norm: the hidden size, but Qwen4-Exp's norm of the
    target's ``hc_count`` streams together, ``hc_count`` times it."""
    if style == "qwen4_exp" and name == "mtp.pre_fc_norm_hidden.weight":
        return text.hc_count * text.hidden_size
    return text.hidden_size


def split_projections(style: str, p: str) -> dict[str, int | None]:
    """The input projections [H, H] of an MTP layer under ``p`` that keeps them apart (none for
    the others: one [H, 2H] of both, :func:`own_names`), each with where the normalized
    embedding starts in its input (0) or None for one that reads the hidden state alone."""
    if style == "deepseek_v4":
        return {p + "e_proj.weight": 0, p + "h_proj.weight": None}
    if style == "qwen4_exp" and p == "mtp.layers.0.":  # one pair for all the MTP layers
        return {"mtp.fc_embedding.weight": 0, "mtp.fc_hidden.weight": None}
    return {}


def where(arch: MtpArch, text: Any, i: int) -> tuple[str, str]:
    """(MTP layer i's prefix, its decoder block's prefix) in the checkpoint of ``text``."""
    style = arch.layout
    if style == "deepseek_v4":
        return f"mtp.{i}.", f"mtp.{i}."
    if style == "hy_v4":
        return f"model.mtp_layers.{i}.", f"model.mtp_layers.{i}."
    if style in ("deepseek", "bailing", "step3p5"):
        p = f"{arch.main}{text.num_hidden_layers + i}."
        return p, p
    if style in ("inkling", "longcat", "mimo"):
        p = f"model.mtp.layers.{i}."
        return p, p + ("transformer_block." if style == "inkling" else "")
    if style == "minimax":  # under the multimodal checkpoint's language model
        p = f"language_model.model.mtp.layers.{i}."
        return p, p + "transformer_layer."
    if style == "ernie":
        return "model.mtp_", f"model.mtp_block.{i}."
    return f"mtp.layers.{i}.", f"mtp.layers.{i}."


def block_name(arch: MtpArch, rest: str) -> str | None:
    """A block tensor's name within the layer as the checkpoint keeps it (None: not made)."""
    for old, new in arch.parts:
        if rest.startswith(old):
            return new + rest[len(old) :]
    return None if arch.only else rest
