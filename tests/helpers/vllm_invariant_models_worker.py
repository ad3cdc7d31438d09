"""One rank of tests/test_engines_vllm_invariant_models.py: every model of
helpers/vllm_invariant_models.py at TP=world, filled by ``--load-format
fp8_dummy_invariant`` (through vLLM's get_model_loader), compared byte for byte with the
oracle.

world 1: each model against the format's logical tensors, and against a zeroed copy loaded
by the model's own ``load_weights`` from the checkpoint made of its tensors; checkpoints,
shapes and persistent buffers go to OUT/tp1.pt. world 2 (started at the same time: the
vLLM import overlaps): each rank, once tp1.pt exists, against a zeroed copy loaded from
that checkpoint, its buffers against TP=1's. Both: the negative controls. Findings go to
OUT/<world>-<rank>.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def main(rank: int, world: int, port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"  # FusedMoE's backend choice needs it
    here = os.path.dirname(os.path.abspath(__file__))  # not sys.path[0]: see the other worker
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    result: dict = {"rank": rank}
    try:
        result.update(_run(rank, world, port, Path(out)))
    except Exception:  # noqa: BLE001 (reported to the parent test)
        result["error"] = traceback.format_exc()
    (Path(out) / f"{world}-{rank}.json").write_text(json.dumps(result))


def _run(rank: int, world: int, port: int, out: Path) -> dict:
    from helpers import vllm_invariant_models as M

    M.prepare(str(out))
    import torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.config.load import LoadConfig
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader import get_model_loader

    from fp8_dummy import vllm_plugin

    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world, rank, f"tcp://127.0.0.1:{port}", rank, backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=world)
    vllm_plugin.register()
    fmt = get_model_loader(LoadConfig(load_format="fp8_dummy_invariant"))
    tp1 = _wait_for_tp1(out) if world > 1 else {}
    saved, found = {}, {}
    cases = [(m, q, False) for m, q in M.CASES]
    cases += [(m, q, True) for m, q in M.EP_CASES] if world > 1 else []
    for model, quant, ep in cases:
        key, t0 = f"{model}-{quant}", time.perf_counter()  # the TP=1 checkpoint's
        case = key + ("-ep" if ep else "")
        folder = out / f"config-{world}-{rank}" / case
        ours, vllm_config, model_config = M.build(model, quant, folder, world, ep)
        oracle = M.build(model, quant, folder, world, ep)[0]

        def fill(m, vllm_config=vllm_config, model_config=model_config):
            M.poison(m)
            with set_current_vllm_config(vllm_config):
                fmt.load_weights(m, model_config)

        params = dict(ours.named_parameters())
        r: dict = {"classes": sorted({type(p).__name__ for p in params.values()})}
        found[case] = r
        try:
            fill(ours)
        except Exception as e:  # noqa: BLE001 (the test names it)
            r["error"] = f"{type(e).__name__}: {e}"
            continue
        buffers = {n: t for n, t in M.tensors(ours).items() if n not in params}
        shapes = {n: list(p.shape) for n, p in params.items()}
        if world == 1:
            r["logical"] = M.differing(M.tensors(ours), M.logical(ours))
            ckpt = M.checkpoint(ours)
            copies = {n: b.clone() for n, b in buffers.items()}
            saved[case] = {"checkpoint": ckpt, "buffers": copies, "shapes": shapes}
        elif key not in tp1:
            r["error"] = "no TP=1 checkpoint (the TP=1 run failed on this model)"
            continue
        else:
            ckpt = tp1[key]["checkpoint"]
            r["buffers"] = M.differing(buffers, tp1[key]["buffers"])
            r["sharded"] = sum(shapes[n] != s for n, s in tp1[key]["shapes"].items())
            r["experts"] = [  # (an expert map, local experts) of each MoE layer
                (getattr(m, "_expert_map", None) is not None, m.local_num_experts)
                for m in ours.modules()
                if type(m).__name__ == "RoutedExperts"
            ]
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
        r["seconds"] = round(time.perf_counter() - t0, 2)
    if world == 1:
        torch.save(saved, out / "tp1.tmp")
        (out / "tp1.tmp").rename(out / "tp1.pt")
    return {"cases": found}


def _wait_for_tp1(out: Path, timeout: float = 600.0) -> dict:
    """TP=1's checkpoints, once its worker has written them (it writes tp1.pt before its
    JSON: a JSON without tp1.pt means it failed)."""
    import torch

    deadline = time.monotonic() + timeout
    while not (out / "tp1.pt").exists():
        if (out / "1-0.json").exists() or time.monotonic() > deadline:
            raise RuntimeError("the TP=1 worker wrote no checkpoints (see its result)")
        time.sleep(0.2)
    return torch.load(out / "tp1.pt")


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

    from fp8_dummy import _vllm_placement as P

    real = P._kv_cache_scale

    def sharded(t, fn):
        if real(t, fn) is None:
            return None
        return P.Placement((size_of(),), (P.Piece((), (rank_of(),)),))

    P._kv_cache_scale = sharded
    try:
        fill(ours)
        return M.differing(dict(ours.named_parameters()), dict(oracle.named_parameters()))
    finally:
        P._kv_cache_scale = real
        fill(ours)


def _without_the_rule(fill, ours, M) -> dict:
    """No KV-scale rule (fp8_dummy before it): the load is refused, naming the parameter,
    before any tensor is written."""
    from fp8_dummy import _vllm_placement as P

    real = P._kv_cache_scale
    P._kv_cache_scale = lambda t, fn: None
    try:
        fill(ours)
        raised = None
    except Exception as e:  # noqa: BLE001 (the test checks the kind)
        raised = f"{type(e).__name__}: {e}"
    finally:
        P._kv_cache_scale = real
    untouched = all(bool((M.as_bytes(t) == 0x55).all()) for t in M.tensors(ours).values())
    fill(ours)
    return {"raised": raised, "untouched": untouched}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
