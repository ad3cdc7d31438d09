"""One of the two gloo processes of tests/test_engines_vllm_mtp.py: vLLM 0.33's MTP draft
classes (helpers/vllm_mtp_models.py) filled by ``--load-format fp8_dummy_realistic`` with the
case's acceptance in the extra config, against a twin loaded from the export of the same config
by vLLM's own safetensors loader (the two poisoned apart first), at TP=1 (each process its half
of the cases) and TP=2. Also at TP=1: a per-position acceptance whose length is not vLLM's
``num_speculative_tokens`` is refused before anything is written. Findings go to
OUT/<rank>.json as {"1": {case: ...}, "2": {case: ...}}."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path


def main(rank: int, port: int, out: str, root: str, run=None) -> None:
    """Rank ``rank``'s findings of ``run`` (default this lane's) written to OUT/<rank>.json."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{rank}.json", run or _run, rank, port, Path(out), rank=rank)


def _run(rank: int, port: int, out: Path) -> dict:
    from helpers import vllm_invariant_models as M
    from helpers import vllm_mtp_models as T

    base = M.start(rank, port, str(out))
    from helpers import vllm_sparse_mla

    # the indexed sparse MLA's backend (DeepSeek-V3.2, GLM-5, GLM-5-Next, HY-V4)
    vllm_sparse_mla.allow()
    from helpers.vllm_swigluoai_moe_backend import allow_swigluoai_moe

    allow_swigluoai_moe()  # MiniMax-M3's experts: their kernel choice (the module says why)
    from vllm.config import set_current_vllm_config
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    found: dict = {"1": {}, "2": {}}
    for case in T.CASES[rank::2]:
        found["1"][T.key(case)] = _case(M, T, out, 1, rank, case)
    if rank == 0:
        found["1"]["wrong-length"] = _wrong_length(M, T, out)
    else:
        found["1"]["draft-model"] = _case(M, T, out, 1, rank, T.DRAFT)
    destroy_model_parallel()
    with set_current_vllm_config(base):
        initialize_model_parallel(tensor_model_parallel_size=2)
    for case in [*T.CASES, T.DRAFT]:
        found["2"][T.key(case)] = _case(M, T, out, 2, rank, case)
    return found


def _loader(acceptance):
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    extra = {} if acceptance is None else {"acceptance": acceptance}
    return get_model_loader(
        LoadConfig(load_format="fp8_dummy_realistic", model_loader_extra_config=extra)
    )


def _case(M, T, out: Path, tp: int, rank: int, case: tuple) -> dict:
    """The draft at TP=``tp`` filled in-engine (poisoned 0x55 first) against its twin (0xAA)
    loaded from the export's files: every tensor either writes must agree byte for byte."""
    import torch
    from vllm.config import set_current_vllm_config

    t0 = time.perf_counter()
    r: dict = {}
    try:
        ckpt = T.export(case, out / f"export-{tp}-{rank}" / T.key(case))
        ours, vllm_config, draft_config = T.build(ckpt, tp, case[3])
        theirs = T.build(ckpt, tp, case[3])[0]
        for model_, byte in ((ours, 0x55), (theirs, 0xAA)):
            for p in model_.parameters():
                M.as_bytes(p).fill_(byte)
        params = dict(ours.named_parameters())
        r["class"] = type(ours).__name__
        r["draft_class"] = _registered(draft_config, type(ours))
        with set_current_vllm_config(vllm_config), torch.no_grad():
            # both loads tried, each one's failure told apart: the in-engine fill's, or vLLM's
            # own reading of the export
            failed = []
            try:
                _loader(case[4]).load_weights(ours, draft_config)
            except Exception:  # noqa: BLE001 (the test names it)
                failed.append("the in-engine fill: " + traceback.format_exc(limit=-4))
            try:
                loaded = M.load_safetensors(theirs, draft_config)
            except Exception:  # noqa: BLE001 (the test names it)
                failed.append("vLLM's load of the export: " + traceback.format_exc(limit=-4))
            if failed:
                r["error"] = "\n".join(failed)
                return r
        if not loaded:  # a class whose load_weights reports nothing (HYV3MTP): its poison says
            loaded = {n for n, t in theirs.named_parameters() if not (M.as_bytes(t) == 0xAA).all()}
        # KV-cache quantization parameters (an FP8 attention's scales, compressed-tensors'
        # zero points): no checkpoint holds them; vLLM sets their defaults after loading
        kv = {n for n, p in params.items() if type(p).__name__ == "KVCacheScaleParameter"}
        kv |= {n for n in params if n.endswith(M.KV_SCALES)}
        shared = set(T.SHARED.get(case[0], ()))  # the target's, in vLLM's proposer
        r["kv_unloaded"] = sorted((set(params) - loaded) & kv)
        r["shared"] = sorted(shared & set(params))
        r["not_loaded"] = sorted(set(params) - loaded - kv - shared)
        mine, other = M.tensors(ours), M.tensors(theirs)
        for n in r["kv_unloaded"]:
            del mine[n], other[n]
        mine = {n: t for n, t in mine.items() if n not in shared}
        other = {n: t for n, t in other.items() if n not in shared}
        # rows no checkpoint tensor holds (Qwen4-Exp's padding): compared without them, and
        # left as poisoned by both loaders
        r["padding"] = []
        for end, start in T.padding(case[0], draft_config.hf_text_config).items():
            for n in [n for n in mine if n.endswith(end)]:
                kept = (M.as_bytes(mine[n][start:]) == 0x55).all()
                kept &= (M.as_bytes(other[n][start:]) == 0xAA).all()
                r["padding"].append([n, mine[n].shape[0] - start, bool(kept)])
                mine[n], other[n] = mine[n][:start], other[n][:start]
        r["checked"] = len(mine)
        r["mismatch"] = M.differing(mine, other)
        r["poisoned"] = sorted(n for n, t in mine.items() if bool((M.as_bytes(t) == 0x55).all()))
        # each bf16 matrix's share of nonzero values an e4m3 code holds exactly: all of them
        # where vLLM's loader cast an FP8 checkpoint tensor into the parameter (its scale
        # dropped), about 1/16 for bf16 values (the design's exact zeros not counted)
        r["fp8_exact"] = {n: _fp8_exact(t) for n, t in params.items()
                          if t.dim() == 2 and t.dtype == torch.bfloat16}  # fmt: skip
        r["shapes"] = {n: list(p.shape) for n, p in params.items()}
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    finally:
        _config_classes_as_defined()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


def _config_classes_as_defined() -> None:
    """transformers' config classes under their own model types again. vLLM's config loading
    renames a transformers class it reads another model type's config.json with, for the whole
    process, and registers it for that type (DeepSeek-V3's class becomes ``deepseek_v32`` for a
    DeepSeek-V3.2 checkpoint). A vLLM process loads one model; this worker loads every case's
    in turn, so each starts from the classes and the registry as transformers defines them
    (each class registered for one model type), as it would in a process of its own."""
    import sys

    from transformers import PreTrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    extra = CONFIG_MAPPING._extra_content  # AutoConfig.register's entries
    for kind, c in list(extra.items()):
        own = CONFIG_MAPPING_NAMES.get(kind)
        if c.__module__.startswith("transformers.") and own is not None and own != c.__name__:
            del extra[kind]  # a transformers class registered for another type than its own
    types: dict[str, set] = {}
    for kind, name in CONFIG_MAPPING_NAMES.items():
        types.setdefault(name, set()).add(kind)
    for module in [m for n, m in sys.modules.items() if n.startswith("transformers.models.")]:
        for c in vars(module).values():
            own = types.get(getattr(c, "__name__", None), ())
            if isinstance(c, type) and issubclass(c, PreTrainedConfig) and len(own) == 1:
                if c.__module__ == module.__name__ and c.model_type not in own:
                    c.model_type = next(iter(own))


def _registered(draft_config, built: type) -> str:
    """``module.class`` of the draft architecture vLLM's speculative config named, as vLLM's
    registry resolves it, where that is the class built (else what was built instead)."""
    import importlib

    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    entry = _SPECULATIVE_DECODING_MODELS.get(draft_config.hf_config.architectures[0])
    if entry is None:
        return f"unregistered: {built.__module__}.{built.__name__}"
    module, name = entry
    module = module if "." in module else f"vllm.model_executor.models.{module}"
    same = getattr(importlib.import_module(module), name) is built
    return f"{module}.{name}" if same else f"{built.__module__}.{built.__name__}"


def _fp8_exact(t) -> float:
    import torch

    x = t.detach().float()
    x = x[x != 0]
    if x.numel() == 0:
        return 0.0
    return float((x.to(torch.float8_e4m3fn).float() == x).float().mean())


def _wrong_length(M, T, out: Path) -> dict:
    """A list of two rates where vLLM drafts one token: refused, the draft untouched."""
    from vllm.config import set_current_vllm_config

    case = ("deepseek_v3", "bf16", 1, 1, None)
    ckpt = T.export(case, out / "wrong-length")
    model, vllm_config, draft_config = T.build(ckpt, 1, 1)
    for p in model.parameters():
        M.as_bytes(p).fill_(0x55)
    try:
        with set_current_vllm_config(vllm_config):
            _loader([0.8, 0.5]).load_weights(model, draft_config)
        raised = None
    except Exception as e:  # noqa: BLE001 (the test checks the message)
        raised = f"{type(e).__name__}: {e}"
    untouched = all(bool((M.as_bytes(p) == 0x55).all()) for p in model.parameters())
    return {"raised": raised, "untouched": untouched}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
