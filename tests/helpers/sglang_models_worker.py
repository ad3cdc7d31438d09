"""One process of tests/test_engines_sglang_realistic.py: rank RANK of a WORLD-rank gloo group
(TP=WORLD). For each case (helpers/sglang_models.py), two copies of SGLang's own model built
from the export's config.json: one filled by ``FP8_DUMMY_SGLANG=realistic``'s fill (its
parameters poisoned 0x55 first), the other (poisoned 0xAA) loaded from the export's files by
SGLang's own safetensors reader and the model's ``load_weights``. Findings go to
OUT/<world>-<rank>.json as {case: {...}}."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path


def main(world: int, rank: int, port: int, root: str, out: str, repo: str, run=None) -> None:
    """This rank's process set up (the repository's tests first on the path, helpers/ not
    shadowing them), then ``run`` (default: this worker's cases) reported to OUT."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    here = os.path.dirname(os.path.abspath(__file__))  # not sys.path[0]: helpers/ shadows
    sys.path[:] = [repo, os.path.join(repo, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{world}-{rank}.json", run or _run, world, rank, port, Path(root))


def _run(world: int, rank: int, port: int, root: Path) -> dict:
    from helpers import sglang_models as S

    S.prepare()
    S.start(root / S.CASES[0] / "checkpoint", world, rank, port)
    return {
        case: _case(S, root / case / "checkpoint", world, rank, S.MORE.get(case.split("-")[1], {}))
        for case in S.CASES
    }


def _case(S, ckpt: Path, world: int, rank: int, more: dict) -> dict:
    import torch

    from fp8_dummy.engines import sglang as fsglang

    t0 = time.perf_counter()
    r: dict = {}
    try:
        ours, theirs = S.build(ckpt, world, rank, **more), S.build(ckpt, world, rank, **more)
        for model, byte in ((ours, 0x55), (theirs, 0xAA)):
            for p in model.parameters():
                p.data.reshape(p.shape or (1,)).view(torch.uint8).fill_(byte)
        from fp8_dummy.realistic import logical
        from fp8_dummy.realistic.lazy_tensor import materialized

        materialized.clear()
        # at TP=2 these tiny models' weights as stand-ins too (at TP=1 each tensor whole)
        logical.EAGER_BYTES = 1024 if world == 2 else logical.EAGER_BYTES
        with torch.no_grad():
            fsglang._fill_realistic(ours)
        r["materialized"] = sorted(materialized)  # stand-ins SGLang needed whole values of
        S.load_safetensors(theirs, ckpt)
        found = S.compare(ours, theirs)
        # what neither loader writes: kept apart, the test says which may be
        r.update(unreached=found["neither"], checked=found["checked"], mismatch=found["mismatch"])
        r["shapes"] = {n: list(p.shape) for n, p in ours.named_parameters()}
        fp8 = [p for p in ours.parameters() if p.dtype == torch.float8_e4m3fn]
        big = max(fp8, key=lambda p: p.numel()) if fp8 else None
        r["distinct_fp8"] = int(torch.unique(big.data.view(torch.uint8)).numel()) if fp8 else 0
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7])
