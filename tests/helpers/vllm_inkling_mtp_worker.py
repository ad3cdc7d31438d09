"""One of the two gloo processes of tests/test_engines_vllm_inkling_mtp.py: vLLM 0.33's
``InklingMTP`` built on this CPU as its proposer builds the draft (helpers/vllm_mtp_models.py's
``build``) from the config.json of Inkling's small multimodal config with one MTP layer, at
TP=1 and TP=2; its parameters (name -> shape) go to OUT/<rank>.json as {"1": ..., "2": ...}."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(rank: int, port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{rank}.json", _run, rank, port, Path(out), rank=rank)


def _run(rank: int, port: int, out: Path) -> dict:
    from helpers import speculative as H
    from helpers import vllm_invariant_models as M
    from helpers import vllm_mtp_models as T

    base = M.start(rank, port, str(out))
    from vllm.config import set_current_vllm_config
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    folder = out / f"config-{rank}"
    folder.mkdir()
    config = H.inkling_mm(mtp=1, hidden=64, vocab=200).to_dict()
    config["architectures"] = ["InklingForConditionalGeneration"]
    (folder / "config.json").write_text(json.dumps(config))
    found = {}
    for tp in (1, 2):
        if tp == 2:
            destroy_model_parallel()
            with set_current_vllm_config(base):
                initialize_model_parallel(tensor_model_parallel_size=2)
        model = T.build(folder, tp, 1)[0]
        found[str(tp)] = {
            "class": type(model).__name__,
            "params": {n: list(p.shape) for n, p in model.named_parameters()},
        }
    return found


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
