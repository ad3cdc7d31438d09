"""One of the two gloo processes of tests/test_engines_vllm_invariant_models.py: the models
of helpers/vllm_invariant_models.py filled by ``--load-format fp8_dummy_invariant`` (and
``fp8_dummy_realistic``), through vLLM's get_model_loader, and compared byte for byte with
the oracle, first at TP=1, then at TP=2 (one vLLM import for both).

fp8_dummy_realistic's oracle is the export of the same config (``python -m fp8_dummy
export``) loaded by vLLM's own safetensors loader, at each TP (:func:`_realistic_case`).
fp8_dummy_invariant's: TP=1 (each process its half of the models, as two TP=1 replicas): each
model against the format's logical tensors, and against a zeroed copy loaded by the model's
own ``load_weights`` from the checkpoint made of its tensors; checkpoints, shapes and
persistent buffers go to OUT/tp1-<rank>.pt. Then the model-parallel groups are rebuilt at TP=2: each
rank, each model (and two with expert parallelism), against a zeroed copy loaded from the
TP=1 checkpoint; buffers against TP=1's. Both: the negative controls. Findings go to
OUT/<rank>.json as {"1": {case: ...}, "2": {case: ...}}.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path


def main(rank: int, port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"  # FusedMoE's backend choice needs it
    here = os.path.dirname(os.path.abspath(__file__))  # not sys.path[0]: see the other worker
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{rank}.json", _run, rank, port, Path(out), rank=rank)


def _run(rank: int, port: int, out: Path) -> dict:
    from helpers import vllm_invariant_models as M

    base = M.start(rank, port, str(out))
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.load import LoadConfig
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel
    from vllm.model_executor.model_loader import get_model_loader

    fmt = {
        f: get_model_loader(LoadConfig(load_format=name, model_loader_extra_config=extra))
        for f, (name, extra) in M.LOADS.items()
    }
    cases = [(m, q, False, f) for f in M.FORMATS for m, q in M.CASES if M.runs(f, m, q)]
    found: dict = {"1": {}, "2": {}}
    saved: dict = {}
    for model, quant, ep, f in cases[rank::2]:
        found["1"][M.key(model, quant, f)] = _case(M, fmt, f, out, 1, rank, model, quant, ep, saved)
    torch.save(saved, out / f"tp1-{rank}.pt")
    torch.distributed.barrier()  # both halves written
    tp1 = {k: v for r in (0, 1) for k, v in torch.load(out / f"tp1-{r}.pt").items()}

    destroy_model_parallel()
    with set_current_vllm_config(base):
        initialize_model_parallel(tensor_model_parallel_size=2)
    cases += [(m, q, True, f) for f in M.FORMATS for m, q in M.EP_CASES if M.runs(f, m, q)]
    for model, quant, ep, f in cases:
        case = M.key(model, quant, f) + ("-ep" if ep else "")
        found["2"][case] = _case(M, fmt, f, out, 2, rank, model, quant, ep, tp1)
    return found


def _case(M, fmts, f, out: Path, tp: int, rank: int, model: str, quant: str, ep: bool, tp1: dict):
    """One model at TP=``tp``; at TP=1 its checkpoint goes into ``tp1``, at TP=2 it is
    read from there. Any exception is the case's finding (the other process must not wait
    for this one at the barrier)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import get_tensor_model_parallel_world_size

    fmt = fmts[f]
    if type(fmt).__name__ == "FP8DummyRealisticModelLoader":
        return _realistic_case(M, fmt, f, out, tp, rank, model, quant, ep)
    key = M.key(model, quant, f)  # the TP=1 checkpoint's
    t0 = time.perf_counter()
    r: dict = {}
    try:
        folder = out / f"config-{tp}-{rank}" / (key + ("-ep" if ep else ""))
        ours, vllm_config, model_config = M.build(model, quant, folder, tp, ep)
        oracle = M.build(model, quant, folder, tp, ep)[0]

        def fill(m):
            M.poison(m)
            with set_current_vllm_config(vllm_config):
                fmt.load_weights(m, model_config)

        params = dict(ours.named_parameters())
        r["tp"] = get_tensor_model_parallel_world_size()
        r["classes"] = sorted({type(p).__name__ for p in params.values()})
        r["experts"] = [  # (an expert map, local experts) of each MoE layer
            (getattr(m, "_expert_map", None) is not None, m.local_num_experts)
            for m in ours.modules()
            if type(m).__name__ == "RoutedExperts"
        ]
        try:
            fill(ours)
        except Exception as e:  # noqa: BLE001 (the test names it)
            r["error"] = f"{type(e).__name__}: {e}"
            return r
        buffers = {n: t for n, t in M.tensors(ours).items() if n not in params}
        shapes = {n: list(p.shape) for n, p in params.items()}
        if tp == 1:
            r["logical"] = M.differing(M.tensors(ours), M.logical(ours))
            ckpt = M.checkpoint(ours)
            copies = {n: b.clone() for n, b in buffers.items()}
            tp1[key] = {"checkpoint": ckpt, "buffers": copies, "shapes": shapes}
        elif key not in tp1:
            r["error"] = "no TP=1 checkpoint (the TP=1 run failed on this model)"
            return r
        else:
            ckpt = tp1[key]["checkpoint"]
            r["buffers"] = M.differing(buffers, tp1[key]["buffers"])
            r["sharded"] = sum(shapes[n] != s for n, s in tp1[key]["shapes"].items())
        loaded = M.load_checkpoint(oracle, ckpt)
        r["checked"] = len(params)
        r["not_loaded"] = sorted(set(params) - loaded)
        r["mismatch"] = M.differing(params, dict(oracle.named_parameters()))
        r["distinct_fp8"] = _distinct_fp8(params)
        r["kv_scales"] = sorted(
            n for n, p in params.items() if type(p).__name__ == "KVCacheScaleParameter"
        )
        if r["kv_scales"]:
            r["negative"] = _negative_control(fill, ours, oracle, M)
            r["no_rule"] = _without_the_rule(fill, ours, M)
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


def _realistic_case(M, fmt, f, out: Path, tp: int, rank: int, model: str, quant: str, ep: bool):
    """fp8_dummy_realistic at TP=``tp`` against the export of the same config: a model from
    the export's config.json filled in-engine (parameters poisoned 0x55 first), and its twin
    (0xAA) loaded from the export's files by vLLM's own safetensors loader. Every tensor either
    loader writes must agree byte for byte; what neither writes keeps its differing poison."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import get_tensor_model_parallel_world_size

    t0 = time.perf_counter()
    r: dict = {}
    try:
        case = M.key(model, quant, f) + ("-ep" if ep else "")
        routing = M.LOADS[f][1].get("routing", "balanced")
        ckpt = M.export(model, quant, out / f"export-{tp}-{rank}" / case, routing)
        ours, vllm_config, model_config = M.build_from(ckpt, tp, ep)
        theirs = M.build_from(ckpt, tp, ep)[0]
        # parameters poisoned apart; buffers (attention's _k_scale...) as vLLM made them
        for model_, byte in ((ours, 0x55), (theirs, 0xAA)):
            for p in model_.parameters():
                M.as_bytes(p).fill_(byte)
        params = dict(ours.named_parameters())
        r["tp"] = get_tensor_model_parallel_world_size()
        r["classes"] = sorted({type(p).__name__ for p in params.values()})
        from fp8_dummy.realistic import logical
        from fp8_dummy.realistic.lazy_tensor import materialized

        materialized.clear()
        eager = logical.EAGER_BYTES  # at TP=2 these tiny models' weights as stand-ins too
        logical.EAGER_BYTES = 1024 if tp == 2 else eager
        with set_current_vllm_config(vllm_config), torch.no_grad():
            try:
                fmt.load_weights(ours, model_config)
            except Exception as e:  # noqa: BLE001 (the test names it)
                r["error"] = f"{type(e).__name__}: {e}"
                return r
            finally:
                logical.EAGER_BYTES = eager
            r["materialized"] = sorted(materialized)  # stand-ins vLLM needed whole values of
            loaded = M.load_safetensors(theirs, model_config)
        # KV-cache scales: no checkpoint holds them; vLLM sets their defaults after loading
        kv = {n for n, p in params.items() if type(p).__name__ == "KVCacheScaleParameter"}
        r["kv_unloaded"] = sorted((set(params) - loaded) & kv)
        r["not_loaded"] = sorted(set(params) - loaded - kv)
        mine, other = M.tensors(ours), M.tensors(theirs)
        for n in r["kv_unloaded"]:
            del mine[n], other[n]
        r["checked"] = len(mine)
        r["mismatch"] = M.differing(mine, other)
        r["distinct_fp8"] = _distinct_fp8(params)
        r["shapes"] = {n: list(p.shape) for n, p in params.items()}
        if tp == 1 and (model, quant, f) == ("qwen3_moe", "blk", "realistic"):
            r["unreached"] = _unreached(M, fmt, ckpt.parent / "source")
        if tp == 1:
            r["offsets"] = {  # the routing's offsets, to compare with transformers' model
                n: (t if t.dim() == 1 else t[:, -1]).float().tolist()
                for n, t in mine.items()
                if n.endswith(("e_score_correction_bias", "mlp.gate.weight"))
            }
            r["routers"] = {  # what a routing profile must change
                n: float(t.float().abs().sum())
                for n, t in mine.items()
                if n.endswith(("gate.weight", "e_score_correction_bias", "embed_tokens.weight"))
            }
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


def _unreached(M, fmt, source: Path) -> str:
    """The source config has no ``ignored_layers``: vLLM then quantizes Qwen3-MoE's router,
    whose scale the checkpoint (router unquantized) never reaches. The load must say so."""
    from vllm.config import set_current_vllm_config

    model, vllm_config, model_config = M.build_from(source, 1)
    try:
        with set_current_vllm_config(vllm_config):
            fmt.load_weights(model, model_config)
    except Exception as e:  # noqa: BLE001 (the test checks the message)
        return f"{type(e).__name__}: {e}"
    return ""


def _distinct_fp8(params) -> int:
    """Distinct bytes in the largest FP8 weight (0: none): the values are not degenerate."""
    import torch

    fp8 = [p for p in params.values() if p.dtype == torch.float8_e4m3fn]
    if not fp8:
        return 0
    w = max(fp8, key=lambda p: p.numel())
    return int(torch.unique(w.data.view(torch.uint8)).numel())


def _negative_control(fill, ours, oracle, M) -> list[str]:
    """A wrong KV-scale rule (each rank its own element of a [tp]-long scale, as if the
    replicated scalar were sharded): what the same comparison then reports."""
    from vllm.distributed import get_tensor_model_parallel_rank as rank_of
    from vllm.distributed import get_tensor_model_parallel_world_size as size_of

    from fp8_dummy.engines.vllm import placement as P

    real = P.kv_cache_scale

    def sharded(t, fn):
        if real(t, fn) is None:
            return None
        return P.Placement((size_of(),), (P.Piece((), (rank_of(),)),))

    P.kv_cache_scale = sharded
    try:
        fill(ours)
        return M.differing(dict(ours.named_parameters()), dict(oracle.named_parameters()))
    finally:
        P.kv_cache_scale = real
        fill(ours)


def _without_the_rule(fill, ours, M) -> dict:
    """No KV-scale rule (fp8_dummy before it): the load is refused, naming the parameter,
    before any tensor is written."""
    from fp8_dummy.engines.vllm import placement as P

    real = P.kv_cache_scale
    P.kv_cache_scale = lambda t, fn: None
    try:
        fill(ours)
        raised = None
    except Exception as e:  # noqa: BLE001 (the test checks the kind)
        raised = f"{type(e).__name__}: {e}"
    finally:
        P.kv_cache_scale = real
    untouched = all(bool((M.as_bytes(t) == 0x55).all()) for t in M.tensors(ours).values())
    fill(ours)
    return {"raised": raised, "untouched": untouched}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
