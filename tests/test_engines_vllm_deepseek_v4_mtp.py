"""DeepSeek-V4's MTP layers against vLLM 0.33's own loader of them. Its CPU ``DeepSeekV4MTP`` is a
stub that raises at construction ("not implemented on CPU"), and its GPU class builds CUDA
streams, so no draft model is built here; the GPU class's module imports on the CPU, and its own
``load_weights`` (its name mapping: ``mtp.{i}.`` to ``model.layers.{L+i}.``, the renamings of
``emb.tok_emb``, ``head`` and ``norm``, the block under ``mtp_block.``, the stacked and expert
parameters) runs here on a stand-in whose parameters are the names that class's modules
register (written out from its source: ``DeepSeekV4MultiTokenPredictorLayer``, vLLM's
DeepSeek-V4 decoder layer built without a compressor for an MTP layer, its MoE's fused experts
``experts.routed_experts.w13_weight``/``w2_weight``; in a quantized format the scales its
quantization methods register beside each linear built with the quantization config, ``e_proj``
and ``h_proj`` among them, and beside the fused experts). Every exported MTP tensor reaches a
parameter (an unknown name is a ``KeyError`` in its loader), every parameter is reached, each
by the export's bytes, in bf16 and in each quantized format. Without vLLM 0.33: skipped, with
why."""

from __future__ import annotations

import json
import types

import pytest
from helpers.engine_import import require

require("vllm", "0.33.", "DeepSeek-V4's MTP loader")
tf = pytest.importorskip("transformers")

import torch  # noqa: E402
from helpers.deepseek_v4_mtp_forward import files  # noqa: E402
from test_realistic_speculative_deepseek_v4 import config  # noqa: E402
from vllm.models.deepseek_v4.nvidia import mtp as V  # noqa: E402 (the CPU class is a stub)

EXPERTS = 16

# The parameters of vLLM's MTP layer at index L (its modules' registered names) -> the
# checkpoint tensors its loader writes into each (stacked or fused ones several)
LAYER = ["enorm.weight", "hnorm.weight", "e_proj.weight", "h_proj.weight", "hc_head_fn"]
LAYER += ["hc_head_base", "hc_head_scale", "shared_head.norm.weight", "shared_head.head.weight"]
BLOCK = ["attn.attn_sink", "attn.fused_wqa_wkv.weight", "attn.q_norm.weight", "attn.wq_b.weight",
         "attn.kv_norm.weight", "attn.wo_a.weight", "attn.wo_b.weight", "attn_norm.weight",
         "ffn_norm.weight", "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn",
         "hc_ffn_base", "hc_ffn_scale", "ffn.gate.weight"]  # fmt: skip
BLOCK += ["ffn.gate.e_score_correction_bias"]
BLOCK += ["ffn.shared_experts.gate_up_proj.weight", "ffn.shared_experts.down_proj.weight"]
BLOCK += ["ffn.experts.routed_experts.w13_weight", "ffn.experts.routed_experts.w2_weight"]
# the linear modules built with the quantization config (``ReplicatedLinear``,
# ``MergedColumnParallelLinear``, ``ColumnParallelLinear``, ``RowParallelLinear``; the gate is a
# ``GateLinear``, the head's ``ParallelLMHead`` an embedding: unquantized)
LINEAR = ["e_proj", "h_proj"] + ["mtp_block." + x for x in (
    "attn.fused_wqa_wkv", "attn.wq_b", "attn.wo_a", "attn.wo_b", "ffn.shared_experts.gate_up_proj",
    "ffn.shared_experts.down_proj")]  # fmt: skip
# what each format's methods register beside a linear's ``weight`` (``Fp8LinearMethod`` with
# blocks: ``weight_scale_inv``; compressed-tensors' W8A8 FP8 with dynamic activations:
# ``weight_scale``; ModelOpt's NVFP4: ``weight_scale``, ``weight_scale_2``, ``input_scale``) and
# beside the fused experts' ``w13_weight``/``w2_weight`` (``Fp8MoEMethod``, compressed-tensors'
# W8A8 FP8 MoE, ``ModelOptNvFp4FusedMoE``): the same suffixes after ``w13_``/``w2_``
SCALES = {"fp8-block": ["weight_scale_inv"], "fp8": ["weight_scale"],
          "fp8-channel": ["weight_scale"],
          "nvfp4": ["weight_scale", "weight_scale_2", "input_scale"]}  # fmt: skip


def vllm_parameters(main: int, n: int, fmt: str = "bf16") -> list[str]:
    names = ["model.embed_tokens.weight"]
    for layer in range(main, main + n):
        p = f"model.layers.{layer}."
        names += [p + x for x in LAYER] + [p + "mtp_block." + x for x in BLOCK]
        for scale in SCALES.get(fmt, []):
            names += [f"{p}{m}.{scale}" for m in LINEAR]
            names += [f"{p}mtp_block.ffn.experts.routed_experts.w{j}_{scale}" for j in (13, 2)]
    return names


def _stand_in(cfg, names: list[str], quant=None):
    """An object with what ``DeepSeekV4MTP.load_weights`` reads of itself: its config, its
    quantization config, its parameters (each recording what its weight loader is given), its
    MTP layers' MoE facts (no fused mega-MoE, no shared expert fused into the routed ones), its
    name methods."""
    got: dict[str, list] = {n: [] for n in names}

    def param(name: str) -> torch.nn.Parameter:
        p = torch.nn.Parameter(torch.empty(0), requires_grad=False)

        def weight_loader(_, w, *args, **kwargs):
            got[name].append((w, args, kwargs))
            return True

        p.weight_loader = weight_loader
        return p

    params = {n: param(n) for n in names}
    ffn = types.SimpleNamespace(use_native_mega_moe=False, experts=types.SimpleNamespace())
    layer = types.SimpleNamespace(mtp_block=types.SimpleNamespace(ffn=ffn))
    main, n = cfg.num_hidden_layers, cfg.num_nextn_predict_layers
    model = types.SimpleNamespace(
        layers={str(i): layer for i in range(main, main + n)}, mtp_start_layer_idx=main,
        num_mtp_layers=n,
    )  # fmt: skip
    # the class pads the shared expert where the quantization config has blocks (FP8 block)
    pad = getattr(quant, "weight_block_size", None) is not None
    me = types.SimpleNamespace(config=cfg, model=model, pad_shared_expert=pad, quant_config=quant)
    me.named_parameters = lambda: iter(params.items())
    for method in ("_to_spec_layer_name", "_rewrite_spec_layer_name"):
        setattr(me, method, types.MethodType(getattr(V.DeepSeekV4MTP, method), me))
    return me, got


FORMATS = ["bf16", "fp8-block", "fp8", "fp8-channel", "nvfp4"]


def _skips(quant, prefix: str) -> bool:
    """Whether vLLM's quantization config leaves the linear module ``prefix`` unquantized, by
    its own matching (FP8's ``ignored_layers``, compressed-tensors' ``ignore``, ModelOpt's
    ``exclude_modules``)."""
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import (
        should_ignore_layer,
    )
    from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped

    if hasattr(quant, "is_layer_excluded"):
        return quant.is_layer_excluded(prefix)
    fused = quant.packed_modules_mapping
    if hasattr(quant, "ignored_layers"):
        mode = quant.ignored_layers_match_mode
        return is_layer_skipped(prefix, quant.ignored_layers, fused, match_mode=mode)
    return should_ignore_layer(prefix, ignore=quant.ignore, fused_mapping=fused)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(w: torch.Tensor, want: torch.Tensor) -> bool:
    """``w`` holds ``want``'s bytes, then (the shared expert padded to whole blocks) zeros."""
    if w.shape != want.shape:
        dim = next(d for d in range(w.dim()) if w.shape[d] != want.shape[d])
        extra = w.shape[dim] - want.shape[dim]
        assert extra > 0 and not _bytes(w.narrow(dim, want.shape[dim], extra)).any()
        w = w.narrow(dim, 0, want.shape[dim])
    return torch.equal(_bytes(w), _bytes(want))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", [1, 2])
def test_vllm_deepseek_v4_mtp_loader_reads_every_mtp_tensor(n, fmt, tmp_path, monkeypatch):
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.models.deepseek_v4.nvidia import model as M

    from fp8_dummy.realistic.export import export

    cfg = config(128, 1024, 2, 4)
    cfg.num_nextn_predict_layers = n
    cfg.topk_method = "noaux_tc"  # vLLM's gates build their correction bias only with it
    # a copy of DeepSeek-V4-Flash's "fp4" (MXFP4 experts): the export says "fp8" over it
    cfg.expert_dtype = "fp4"
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", acceptance=0.6, progress=False, allow_unknown=True,
           format=fmt)  # fmt: skip
    t = files(tmp_path / "out")
    written = files(tmp_path / "out")  # a second read: the bytes compared against
    mtp = {k: v for k, v in t.items() if k.startswith("mtp.")}
    assert mtp
    quant = None
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert exported["expert_dtype"] == "fp8"
    cfg.expert_dtype = exported["expert_dtype"]  # vLLM reads the export's config
    q = exported.get("quantization_config")
    if q is not None:
        # the ignore list no longer names the input projections: vLLM builds them quantized
        listed = q.get("ignored_layers") or q.get("ignore") or q.get("exclude_modules")
        assert not any(x.endswith(("e_proj", "h_proj")) for x in listed), listed
        # as vLLM resolves them: DeepSeek-V4's FP8 config, ModelOpt's NVFP4 one
        method = {"fp8": "deepseek_v4_fp8", "modelopt": "modelopt_fp4"}.get(
            q["quant_method"], q["quant_method"]
        )
        quant = get_quantization_config(method).from_config(q)
        # vLLM's own matching builds them quantized (under its module names)
        for layer in range(cfg.num_hidden_layers, cfg.num_hidden_layers + n):
            for proj in ("e_proj", "h_proj"):
                assert not _skips(quant, f"model.layers.{layer}.{proj}"), proj
        for i in range(n):
            for proj in ("e_proj", "h_proj"):
                assert t[f"mtp.{i}.{proj}.weight"].dtype in (torch.float8_e4m3fn, torch.uint8)
    # the shared expert's padding to whole blocks (FP8 block) at TP=1, each recorded
    padded: dict[int, torch.Tensor] = {}
    pad = M.DeepseekV4Model._pad_shared_expert_weight

    def recorded(quant_config, name, w):
        out = pad(quant_config, name, w)
        padded[id(out)] = w
        return out

    monkeypatch.setattr(M.DeepseekV4Model, "_pad_shared_expert_weight", staticmethod(recorded))
    monkeypatch.setattr(M, "get_tensor_model_parallel_world_size", lambda: 1)
    names = vllm_parameters(cfg.num_hidden_layers, n, fmt)
    me, got = _stand_in(cfg, names, quant)
    V.DeepSeekV4MTP.load_weights(me, list(t.items()))
    missed = [name for name, calls in got.items() if not calls]
    assert not missed, missed
    by_id = {id(w): k for k, w in t.items()}
    given = set()
    for calls in got.values():
        for w, _, _ in calls:
            source = padded.get(id(w), w)
            name = by_id[id(source)]
            given.add(name)
            assert _same_bytes(w, written[name]), name
    # each MTP tensor, but the later layers' embedding copies: vLLM's loader takes the shared
    # embedding from the first MTP layer's and skips the others'
    skipped = {f"mtp.{i}.emb.tok_emb.weight" for i in range(1, n)}
    assert skipped <= set(mtp)
    unread = sorted(set(mtp) - given)
    assert unread == sorted(skipped), unread
    assert not any(not k.startswith("mtp.") for k in given)
    # the shapes its modules take (hidden 128, vocabulary 1024): the input projections [H, H]
    # (NVFP4: two codes a byte)
    square = (128, 64) if fmt == "nvfp4" else (128, 128)
    for layer in range(cfg.num_hidden_layers, cfg.num_hidden_layers + n):
        p = f"model.layers.{layer}."
        for name, shape in (("e_proj.weight", square), ("h_proj.weight", square),
                            ("shared_head.head.weight", (1024, 128)),
                            ("hc_head_fn", (4, 512))):  # fmt: skip
            ((w, _, _),) = got[p + name]
            assert tuple(w.shape) == shape, name
        experts = got[p + "mtp_block.ffn.experts.routed_experts.w13_weight"]
        assert sorted(kw["expert_id"] for _, _, kw in experts) == sorted(list(range(EXPERTS)) * 2)
    ((emb, _, _),) = got["model.embed_tokens.weight"]
    assert torch.equal(emb.view(torch.uint8), t["embed.weight"].view(torch.uint8))
