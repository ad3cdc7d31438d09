"""One process of tests/test_engines_sglang_mtp.py: rank RANK of a WORLD-rank gloo group. For
each case, two copies of SGLang's own speculative draft class (``DeepseekV3ForCausalLMNextN``,
``Glm4MoeForCausalLMNextN``, ``Qwen3NextForCausalLMMTP``, ``Qwen3_5ForCausalLMMTP``,
``Glm4MoeLiteForCausalLMNextN``, ``Ernie4_5_MoeForCausalLMMTP``, ``HYV3ForCausalLMNextN``,
``GlmOcrForConditionalGenerationNextN``, ``NemotronHForCausalLMMTP``,
``LongcatFlashForCausalLMNextN``, ``HYV4ForCausalLMNextN``, ``DeepseekV4ForCausalLMNextN``:
what SGLang's draft config names) built from the export's
config.json, after the target where the case says (as SGLang's scheduler builds them): one
filled by ``FP8_DUMMY_SGLANG=realistic``'s fill with the case's ``$FP8_DUMMY_ACCEPTANCE``
(poisoned 0x55 first), the other (0xAA) loaded from the export's files by SGLang's own
safetensors reader and the class's ``load_weights``, each load's failure apart (``fill_error``,
``load_error``). Findings go to OUT/<world>-<rank>.json as {case: {...}}."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

# Qwen3-Next and Qwen3.5 are hybrid models: no radix cache, whose variant for them needs a
# platform's Mamba cache snapshots (ServerArgs checks); it has no say in the parameters
MORE = {"disable_radix_cache": True}


def main(world: int, rank: int, port: int, root: str, out: str, repo: str) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [repo, os.path.join(repo, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    from helpers.workers import report

    report(Path(out) / f"{world}-{rank}.json", _run, world, rank, port, Path(root))


def _run(world: int, rank: int, port: int, root: Path) -> dict:
    from helpers import sglang_models as S

    cases = json.loads((root / "cases.json").read_text())
    S.prepare()
    S.start(root / next(iter(cases)) / "checkpoint", world, rank, port, **MORE)
    return {c: _case(S, root / c / "checkpoint", world, rank, **v) for c, v in cases.items()}


def _case(S, ckpt: Path, world: int, rank: int, acceptance, target: bool, budget, more) -> dict:
    from fp8_dummy.realistic import arch

    default = arch.TWIN_BUDGET_BYTES
    try:  # the probe's budget the export was made with (the test's edge cases: their own)
        arch.TWIN_BUDGET_BYTES = budget or default
        return _compare(S, ckpt, acceptance, target, world, rank, dict(MORE, **more))
    except Exception:  # noqa: BLE001 (reported to the parent test)
        return {"error": traceback.format_exc()}
    finally:
        arch.TWIN_BUDGET_BYTES = default


def _compare(S, ckpt: Path, acceptance, target: bool, world: int, rank: int, more: dict) -> dict:
    import torch

    from fp8_dummy.engines import sglang as fsglang

    # SGLang's scheduler builds the target before its draft, in the same process: the draft's
    # fill takes the main model's depth from it where SGLang's draft settings changed it
    if target:
        S.build(ckpt, world, rank, **more)
    ours = S.build(ckpt, world, rank, draft=True, **more)
    theirs = S.build(ckpt, world, rank, draft=True, **more)
    for model, byte in ((ours, 0x55), (theirs, 0xAA)):
        for p in model.parameters():
            p.data.reshape(p.shape or (1,)).view(torch.uint8).fill_(byte)
    os.environ["FP8_DUMMY_ACCEPTANCE"] = "" if acceptance is None else str(acceptance)
    failed = {}  # each load's failure apart: the test tells SGLang's own load's from the fill's
    try:
        with torch.no_grad():
            fsglang._fill_realistic(ours)
    except Exception:  # noqa: BLE001 (reported to the parent test)
        failed["fill_error"] = traceback.format_exc()
    try:
        S.load_safetensors(theirs, ckpt)
    except Exception:  # noqa: BLE001 (reported to the parent test)
        failed["load_error"] = traceback.format_exc()
    if failed:
        return failed
    shapes = {n: list(p.shape) for n, p in ours.named_parameters()}
    return dict(S.compare(ours, theirs), shapes=shapes, cls=type(ours).__name__)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]), *sys.argv[4:7])
