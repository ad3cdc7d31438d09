"""One process of tests/test_engines_sglang_eagle3.py: rank RANK of a WORLD-rank gloo group
(TP=WORLD). For each case, the EAGLE-3 draft that ``export --draft-layout eagle3`` wrote
(ROOT/CASE/draft, made by the test: helpers/vllm_eagle3_worker.py's target and draft), built
by SGLang 0.5.23 as its scheduler builds the draft of ``--speculative-algorithm EAGLE3``
(``ServerArgs`` of the exported target naming the draft's folder, the draft's ``ModelConfig`` with
``is_draft_model``, the loader's ``_initialize_model``: SGLang's ``LlamaForCausalLMEagle3``),
poisoned 0x55, then loaded by SGLang's own safetensors reader and the class's ``load_weights``.
The oracle: the export's tensors read with the safetensors library and placed as SGLang's
parallel layers place a checkpoint (helpers/vllm_eagle3_worker.py's ``expected``: SGLang's
parameter names, stacking and vocabulary padding (64) are vLLM's). Also recorded: what the
class reads of the draft's config, and whether SGLang's EAGLE worker, handing the draft the
target's embedding (``set_embed``), would replace the draft's own. Findings go to
OUT/<world>-<rank>.json as {case: {...}}."""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script: this folder is sys.path[0], so the realistic worker's set-up is importable.
from sglang_models_worker import main as set_up_and_report


def main(world: int, rank: int, port: int, root: str, out: str, repo: str) -> None:
    set_up_and_report(world, rank, port, root, out, repo, run=_run)


def spec_args(draft: Path) -> dict:
    """The ServerArgs of EAGLE-3 speculative decoding with the exported draft."""
    return dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(draft))


def build_draft(S, target: Path, draft: Path, world: int, rank: int):
    """SGLang's EAGLE-3 draft model, as its scheduler's draft worker builds it."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import _get_quantization_config, _initialize_model
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    args = S.server_args(target, world, **spec_args(draft))
    config = ModelConfig.from_server_args(args, model_path=str(draft), is_draft_model=True)
    load = LoadConfig(load_format="auto", tp_rank=rank)
    quant = _get_quantization_config(config, load)
    with set_default_torch_dtype(config.dtype), torch.device("cpu"):
        return _initialize_model(config, load, quant)


def _run(world: int, rank: int, port: int, root: Path) -> dict:
    from helpers import sglang_models as S

    cases = sorted(p.name for p in root.iterdir() if (p / "draft").is_dir())
    S.prepare()
    S.start(root / cases[0] / "target", world, rank, port, **spec_args(root / cases[0] / "draft"))
    return {case: _case(S, root / case, world, rank) for case in cases}


def _case(S, folder: Path, world: int, rank: int) -> dict:
    import torch

    from helpers import vllm_eagle3_worker as E
    from helpers import vllm_invariant_models as V

    model = build_draft(S, folder / "target", folder / "draft", world, rank)
    params = dict(model.named_parameters())
    for p in params.values():
        V.as_bytes(p).fill_(0x55)
    S.load_safetensors(model, folder / "draft")
    want = E.expected(folder, world, rank)
    inner = model.model
    r = {
        "class": type(model).__name__,
        "unexpected": sorted(set(params) ^ set(want)),
        "mismatch": V.differing({n: params[n] for n in want if n in params}, want),
        "poisoned": sorted(n for n, p in params.items() if bool((V.as_bytes(p) == 0x55).all())),
        "shapes": {n: list(p.shape) for n, p in params.items()},
        # what the class read of the config: the aux states fc takes, its width, the vocabulary
        # of its head, its own head (not the target's), the draft-to-target map
        "aux": inner.num_aux_hidden_states,
        "fc_in": inner.fc.in_features,
        "head_vocab": model.config.draft_vocab_size,
        "head_from_target": model.load_lm_head_from_target,
        "hot_token_id": model.hot_token_id is not None,
        "norm_before_fc": inner.norm_before_fc, "fc_norm": inner.fc_norm is not None,
    }  # fmt: skip
    # SGLang's EAGLE worker hands an EAGLE-3 draft of its own head the target's embedding
    # (``set_embed``), which the class keeps only where the widths are equal
    own = inner.embed_tokens.weight
    model.set_embed(torch.nn.Parameter(torch.zeros(1), requires_grad=False))
    r["keeps_own_embedding"] = inner.embed_tokens.weight is own
    return r


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7])
