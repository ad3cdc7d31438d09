"""One of the two gloo processes of tests/test_engines_vllm_deepseek_v4_mtp.py: vLLM 0.33's GPU
``DeepSeekV4MTP`` built on this CPU (helpers/vllm_dsv4_gpu_choices.py: the GPU-only choices
it makes while built, replaced) as vLLM's proposer builds the draft, from the export of
a tiny DeepSeek-V4 config with one or two MTP layers in each format; filled by
``--load-format fp8_dummy_realistic`` with the case's acceptance, against a twin loaded from
the export by vLLM's own safetensors loader (the two poisoned apart first), at TP=1 (each
process its half of the cases) and TP=2. Findings go to OUT/<rank>.json as
{"1": {case: ...}, "2": {case: ...}}."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

FORMATS = ["bf16", "fp8-block", "fp8", "fp8-channel", "nvfp4"]
# (format, MTP layers): vLLM drafts as many tokens as there are MTP layers
CASES = [(fmt, n) for fmt in FORMATS for n in (1, 2)]
ACCEPTANCE = {1: 0.6, 2: "0.8,0.5"}


def key(case: tuple) -> str:
    return f"{case[0]}-{case[1]}mtp"


def main(rank: int, port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{rank}.json", _run, rank, port, Path(out), rank=rank)


def _run(rank: int, port: int, out: Path) -> dict:
    from helpers import vllm_invariant_models as M

    base = M.start(rank, port, str(out))
    from vllm.config import set_current_vllm_config
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    exported: dict = {}  # a case's export, made once by this process
    found: dict = {"1": {}, "2": {}}
    for case in CASES[rank::2]:
        found["1"][key(case)] = _case(M, out, 1, rank, case, exported)
    destroy_model_parallel()
    with set_current_vllm_config(base):
        initialize_model_parallel(tensor_model_parallel_size=2)
    for case in CASES:
        found["2"][key(case)] = _case(M, out, 2, rank, case, exported)
    return found


def config(fmt: str, n: int):
    """tests/test_realistic_speculative_deepseek_v4.py's tiny DeepSeek-V4 (hidden 128,
    vocabulary 1024, two layers, four streams) with ``n`` MTP layers, sized as vLLM's FP8 block
    layers take them (128 a block): the query's LoRA rank 128 (its merged projection with the
    KV's splits at a block), the experts' and shared expert's intermediate 256 and the o_proj's
    ``o_groups * o_lora_rank`` 256 (split at TP=2 by whole blocks); noaux_tc routing (vLLM's
    gate builds its correction bias only with it); a caller's copy of DeepSeek-V4-Flash's
    ``expert_dtype`` "fp4", over which the export says "fp8" in every format (the experts it
    writes)."""
    from test_realistic_speculative_deepseek_v4 import config as deepseek_v4

    cfg = deepseek_v4(128, 1024, 2, 4)
    cfg.num_nextn_predict_layers = n
    cfg.moe_intermediate_size, cfg.o_lora_rank, cfg.q_lora_rank = 256, 128, 128
    cfg.topk_method = "noaux_tc"
    cfg.expert_dtype = "fp4"
    return cfg


def export(case: tuple, folder: Path) -> Path:
    from fp8_dummy.realistic.export import export as write

    fmt, n = case
    config(fmt, n).save_pretrained(folder / "source")
    write(folder / "source", folder / "checkpoint", acceptance=ACCEPTANCE[n], progress=False,
          allow_unknown=True, format=fmt)  # fmt: skip
    return folder / "checkpoint"


def _case(M, out: Path, tp: int, rank: int, case: tuple, exported: dict) -> dict:
    """The draft at TP=``tp`` filled in-engine (poisoned 0x55 first) against its twin (0xAA)
    loaded from the export's files: every tensor either writes must agree byte for byte."""
    import torch
    from vllm.config import set_current_vllm_config

    from helpers import vllm_dsv4_gpu_choices as C
    from helpers import vllm_mtp_models as T
    from helpers.vllm_mtp_worker import _loader

    t0 = time.perf_counter()
    r: dict = {}
    try:
        if case not in exported:
            exported[case] = export(case, out / f"export-{rank}" / key(case))
        ckpt = exported[case]
        # each its own vLLM config (an attention layer registers its name in it)
        vllm_config, draft_config = T.configs(ckpt, tp, case[1], eager=True)
        twin_config, twin_draft = T.configs(ckpt, tp, case[1], eager=True)
        ours, theirs = C.build(vllm_config, draft_config), C.build(twin_config, twin_draft)
        for model_, byte in ((ours, 0x55), (theirs, 0xAA)):
            for p in model_.parameters():
                M.as_bytes(p).fill_(byte)
        params = dict(ours.named_parameters())
        r["class"] = f"{type(ours).__module__}.{type(ours).__name__}"
        with set_current_vllm_config(vllm_config), torch.no_grad():
            try:
                _loader(ACCEPTANCE[case[1]]).load_weights(ours, draft_config)
            except Exception as e:  # noqa: BLE001 (the test names it)
                r["error"] = f"{type(e).__name__}: {e}"
                return r
        with set_current_vllm_config(twin_config):
            loaded = M.load_safetensors(theirs, twin_draft)
        r["not_loaded"] = sorted(set(params) - loaded)
        mine, other = M.tensors(ours), M.tensors(theirs)
        r["checked"] = len(mine)
        r["mismatch"] = M.differing(mine, other)
        r["poisoned"] = sorted(n for n, t in mine.items() if bool((M.as_bytes(t) == 0x55).all()))
        r["poisoned_twin"] = sorted(
            n for n, t in other.items() if bool((M.as_bytes(t) == 0xAA).all())
        )
        r["params"] = {n: [list(p.shape), str(p.dtype).removeprefix("torch.")]
                       for n, p in params.items()}  # fmt: skip
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
