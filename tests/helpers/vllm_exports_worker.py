"""The worker of tests/test_engines_vllm_exports.py: fp8_dummy's exports of configs as
callers write them, each built by vLLM 0.33 from the exported config.json alone and loaded by
its own safetensors loader (helpers/vllm_invariant_models.py: how vLLM's classes are built on
this CPU; for HY-V4's indexed sparse MLA and MiniMax-M3's experts the replacements of
helpers/vllm_sparse_mla.py and helpers/vllm_swigluoai_moe_backend.py), one process, TP=1. Each
case's findings (what vLLM reads otherwise than the export
means; empty: none) go to OUT/result.json as {case: [finding, ...]}."""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from pathlib import Path


def main(port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    result: dict = {}
    try:
        result = _run(port, Path(out))
    except Exception:  # noqa: BLE001 (reported to the parent test)
        result["error"] = traceback.format_exc()
    (Path(out) / "result.json").write_text(json.dumps(result))


def _configs() -> dict[str, tuple[dict, str | None, dict]]:
    """case -> (the caller's config.json, the export's --format, {vLLM parameter: the dtype
    vLLM must make it})."""
    import transformers

    from helpers import vllm_invariant_models as M

    def model(name: str, **more) -> dict:
        return {**M.COMMON, **M.MODELS[name], **more}

    # DeepSeek-V3 as transformers' DeepseekV3Config writes it: no topk_method/scoring_func
    ds = model("deepseek_v3")
    for key in ("topk_method", "scoring_func", "architectures", "model_type"):
        ds.pop(key)
    ds = json.loads(transformers.DeepseekV3Config(**ds).to_json_string(use_diff=True))
    keep = ["model.layers.0.self_attn", "model.layers.0.mlp"]
    block = dict(M.QUANTS["blk"], modules_to_not_convert=keep)
    qkv = "model.layers.{}.self_attn.qkv_proj.weight"
    fp8, bf16 = "torch.float8_e4m3fn", "torch.bfloat16"
    # DeepSeek-V4 at the sizes vLLM's CPU class takes (its compressor's cache: head_dim 512,
    # the indexer's 128), with the real configs' noaux_tc (vLLM's gates build their
    # e_score_correction_bias only then)
    from test_realistic_speculative_deepseek_v4 import config as deepseek_v4

    v4 = deepseek_v4(128, 1024, 2, 4)
    v4.head_dim, v4.index_head_dim, v4.topk_method = 512, 128, "noaux_tc"
    v4 = json.loads(v4.to_json_string(use_diff=True))
    from helpers import vllm_mtp_models as T

    # HY-V4 and MiniMax-M3 (its multimodal checkpoint) with one MTP layer, as
    # helpers/vllm_mtp_models.py writes them: the main model's class reads the main layers
    def written(model: str) -> dict:  # as a config.json holds it (its dtype the export's)
        out = json.loads(json.dumps(T.fields(model)))
        return {k: v for k, v in out.items() if not (k == "dtype" and v is None)}

    hy_v4 = dict(written("hy_v4"), num_nextn_predict_layers=1)
    minimax = written("minimax_m3_vl")
    minimax["text_config"] = dict(minimax["text_config"], num_mtp_modules=1)
    vision = minimax["vision_config"]  # the release's key vLLM's vision tower reads
    merge = {"spatial_merge_size": vision.get("spatial_merge_size", 2)}
    minimax["vision_config"] = dict(vision, img_token_compression_config=merge)
    # Step-3.5-Flash's text checkpoint with one MTP layer (vLLM's main class skips it), as
    # helpers/vllm_mtp_models.py writes it; and in FP8 block (the harness's 16 x 16 blocks)
    step = written("step3p5")
    step_blk = dict(step, quantization_config=M.QUANTS["blk"])
    plain = dict(step, num_nextn_predict_layers=0)  # the formats its MTP layers refuse
    return {
        "step3p5 without MTP layers, fp8 per channel": (plain, "fp8-channel", {}),
        "step3p5's main layers under its real checkpoint's names, bf16": (step, None, {}),
        "step3p5's main layers under its real checkpoint's names, FP8 block": (step_blk, None, {}),
        "hy_v4's main layers under its real checkpoint's names, bf16": (hy_v4, None, {}),
        "minimax_m3_vl's main layers under its real checkpoint's names, bf16": (minimax, None, {}),
        "deepseek_v4 under its real checkpoint's names, bf16": (v4, None, {}),
        "deepseek_v3 from transformers' DeepseekV3Config, bf16": (ds, None, {}),
        "qwen3_moe with num_experts and rope_theta, bf16": (
            model("qwen3_moe", rope_theta=54321.0),
            None,
            {},
        ),
        "llama, fp8 per tensor": (model("llama"), "fp8", {qkv.format(0): fp8}),
        "qwen3_moe, fp8 (routed experts per channel)": (model("qwen3_moe"), "fp8", {}),
        "deepseek_v3, fp8 (routed experts per channel)": (model("deepseek_v3"), "fp8", {}),
        "llama, FP8 block with modules_to_not_convert": (
            model("llama", quantization_config=block),
            None,
            {qkv.format(0): bf16, qkv.format(1): fp8},
        ),  # fmt: skip
    }


def _run(port: int, out: Path) -> dict:
    from helpers import vllm_invariant_models as M

    M.prepare(str(out))
    from helpers import vllm_mtp_models as T
    from helpers import vllm_sparse_mla
    from helpers.vllm_swigluoai_moe_backend import allow_swigluoai_moe

    vllm_sparse_mla.allow()  # HY-V4's indexed sparse MLA: its backend choice (the module says why)
    allow_swigluoai_moe()  # MiniMax-M3's experts: their kernel choice (the module says why)
    T._image_module_without_torchvision()
    import vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_w8a8_fp8 as ct  # noqa: E501
    import vllm.model_executor.layers.quantization.fp8 as fp8
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    ct.init_fp8_linear_kernel = fp8.init_fp8_linear_kernel  # prepare()'s: None on this CPU
    base = VllmConfig(device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(base):
        init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=1)
    findings = {}
    for i, (case, (raw, fmt, expect)) in enumerate(_configs().items()):
        try:
            findings[case] = _case(M, raw, fmt, expect, out / f"case{i}")
        except Exception:  # noqa: BLE001 (vLLM refused the export: that is the finding)
            findings[case] = [traceback.format_exc()[-3000:]]
    return findings


def _case(M, raw: dict, fmt: str | None, expect: dict, folder: Path) -> list[str]:
    import torch
    from safetensors.torch import load_file
    from vllm.config import set_current_vllm_config

    from fp8_dummy.realistic.export import export
    from fp8_dummy.realistic.speculative import mtp_prefixes

    source = folder / "source"
    source.mkdir(parents=True)
    (source / "config.json").write_text(json.dumps(raw))
    ckpt = folder / "checkpoint"
    # DeepSeek-V4's and HY-V4's hyper-connections (hc_*) are tensors no role covers
    unknown = raw.get("model_type") in ("deepseek_v4", "hy_v4")
    export(source, ckpt, format=fmt, progress=False, allow_unknown=unknown)
    model, vllm_config, model_config = M.build_from(ckpt, 1)
    M.poison(model)
    with set_current_vllm_config(vllm_config):
        loaded = M.load_safetensors(model, model_config)
    found = []
    params = dict(model.named_parameters())
    missing = sorted(n for n in params if n not in loaded and not n.endswith(M.KV_SCALES))
    if missing:
        found.append(f"parameters the export did not reach: {missing[:8]}")
    # Every byte the loader writes: loaded again over the other poison, a byte it leaves is
    # the poison's (a name it reports loaded yet only partly writes, a fused shard it skips)
    kv = M.KV_SCALES
    first = {n: M.as_bytes(p.data).clone() for n, p in params.items() if not n.endswith(kv)}
    M.poison(model, 0xAA)
    with set_current_vllm_config(vllm_config):
        M.load_safetensors(model, model_config)
    unwritten = sorted(n for n, b in first.items() if not torch.equal(b, M.as_bytes(params[n])))
    if unwritten:
        found.append(f"parameters with bytes no checkpoint tensor wrote: {unwritten[:8]}")
    files: dict[str, torch.Tensor] = {}
    for f in ckpt.glob("*.safetensors"):
        files.update(load_file(f))
    # Tensors vLLM keeps under the checkpoint's own name, as its weights mapper renames it
    # (DeepSeek-V4's: the base model's prefix, ``embed``, ``head``): their values must be the
    # file's (a per-tensor scale: a 0-d tensor in the file, one entry per shard in vLLM).
    # A fused gate/up projection's (``gate_up_proj``: the dense MLPs', the shared experts') two
    # halves are the files' ``gate_proj`` and ``up_proj``.
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    halves: set[str] = set()
    for name, t in files.items():
        mapped = list(mapper.apply([(name, t)])) if mapper is not None else [(name, t)]
        p = params.get(mapped[0][0]) if mapped else None
        # the half by the file's name (a mapper may already name the fused parameter)
        half = next((i for i, s in enumerate((".gate_proj.", ".up_proj.")) if s in name), None)
        if mapped and half is not None and ".experts." not in name.replace("shared_experts", ""):
            fused = mapped[0][0].replace((".gate_proj.", ".up_proj.")[half], ".gate_up_proj.")
            if fused in params:
                p = params[fused].data.chunk(2)[half]
                halves.add(name)
        if p is None or p.dtype != t.dtype or p.numel() != t.numel():
            continue
        if not torch.equal(M.as_bytes(p).reshape(-1), M.as_bytes(t).reshape(-1)):
            found.append(f"{name}: not the file's bytes")
    for name, dtype in expect.items():
        if str(params[name].dtype) != dtype:
            found.append(f"{name}: vLLM made it {params[name].dtype}, the export wrote {dtype}")
    # The MTP layers' tensors are their draft class's (tests/test_engines_vllm_mtp.py): the
    # main model's loader skips them.
    mtp = mtp_prefixes(model_config.hf_config) or ("\0",)
    # The routed experts, fused by vLLM (w13: gate rows, then up rows; w2), written back under
    # the checkpoint's names: the file's bytes (the MTP layers': their draft class's)
    routed = [n for n in files if ".experts." in n and not n.startswith(mtp)]
    back = M.checkpoint(model) if fmt == "fp8" and routed else {}
    for name in routed if back else ():
        b, t = back.get(name), files[name]
        if b is None or b.shape != t.shape or not torch.equal(M.as_bytes(b), M.as_bytes(t)):
            found.append(f"{name}: vLLM's experts do not hold the file's bytes")
    # packed routed experts, all experts in one tensor [E, out, in] (Step-3.5's moe.gate_proj,
    # up_proj, down_proj and their block scales), which vLLM fuses (w13: the gate's rows of each
    # expert, then the up's; w2): the files' bytes
    packed = [n for n in files if not n.startswith(mtp) and files[n].dim() == 3
              and re.search(r"\.moe\.gate_proj\.weight$", n)]  # fmt: skip
    for name in packed:
        layer = name[: -len("moe.gate_proj.weight")]
        for end in ("weight", "weight_scale_inv"):
            gate, up, down = (
                files.get(f"{layer}moe.{p}_proj.{end}") for p in ("gate", "up", "down")
            )
            if gate is None:
                continue
            for fused, want in (("w13", torch.cat([gate, up], 1)), ("w2", down)):
                got = params.get(f"{layer}moe.experts.routed_experts.{fused}_{end}")
                if got is None or not torch.equal(M.as_bytes(got.data), M.as_bytes(want)):
                    found.append(f"{layer}moe.*_proj.{end}: vLLM's {fused} is not the files'")
    # every gate/up shard of the main layers' fused projections found its half (else it was
    # not compared: a name vLLM's class does not build; packed experts: above)
    shards = [n for n in files if not n.startswith(mtp) and re.search(r"\.(gate|up)_proj\.", n)
              and not re.search(r"\.experts\.\d+\.", n) and n not in packed
              and not any(n.startswith(p[: -len("gate_proj.weight")]) for p in packed)]  # fmt: skip
    if any(n not in halves for n in shards) and any("gate_up_proj" in n for n in params):
        found.append(f"gate/up shards without their fused half: {sorted(set(shards) - halves)[:8]}")
    bias = [n for n in files if n.endswith("e_score_correction_bias") and not n.startswith(mtp)]
    for name in bias:  # HY-V4's loader keeps it as the MoE's ``expert_bias``
        kept = name.replace("gate.e_score_correction_bias", "expert_bias")
        if name not in params and kept not in params:
            found.append(f"{name}: vLLM built no such parameter")
    exported = json.loads((ckpt / "config.json").read_text())
    for key, value in raw.items():
        if key not in ("torch_dtype", "quantization_config") and exported.get(key) != value:
            found.append(f"config.json: {key} {exported.get(key)!r}, the caller's {value!r}")
    hf = model_config.hf_config
    for key in ("num_experts", "n_routed_experts"):
        if key in raw and getattr(hf, key, None) != raw[key]:
            found.append(f"vLLM reads {key} {getattr(hf, key, None)!r}, the caller's {raw[key]!r}")
    rope = (getattr(hf, "rope_parameters", None) or {}).get("rope_theta")
    if rope is None:  # DeepSeek-V4's nest one dict per layer type; its rope reads the flat one
        rope = getattr(hf, "rope_theta", None)
    if "rope_theta" in raw and rope != raw["rope_theta"]:
        found.append(f"vLLM reads rope_theta {rope!r}, the caller's {raw['rope_theta']!r}")
    return found


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
