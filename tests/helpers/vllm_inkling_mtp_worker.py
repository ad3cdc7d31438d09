"""One of the two gloo processes of tests/test_engines_vllm_inkling_mtp.py: vLLM 0.33's
``InklingMTP`` built on this CPU as its proposer builds the draft (helpers/vllm_mtp_models.py's
``build``) from the export of Inkling's small multimodal config with one MTP layer (made by the
test, in OUT/export), at TP=1 and TP=2; its parameters poisoned (NaN), then its own
``load_weights`` given every tensor of the export, as vLLM's loader gives a draft the
checkpoint's. Per TP: the parameters it reports loaded, every parameter's name and whether it
holds, byte for byte, the export's tensor (its rank's rows or columns; stacked ones
concatenated), cast to the parameter's dtype as its loader casts it. Findings go to
OUT/<rank>.json as {"1": ..., "2": ...}."""

from __future__ import annotations

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
    import torch
    from safetensors import safe_open

    from helpers import vllm_invariant_models as M
    from helpers import vllm_mtp_models as T

    base = M.start(rank, port, str(out))
    from vllm.config import set_current_vllm_config
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    export = out / "export"
    tensors = {}
    for f in sorted(export.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            tensors.update({n: h.get_tensor(n) for n in h.keys()})
    found = {}
    for tp in (1, 2):
        if tp == 2:
            destroy_model_parallel()
            with set_current_vllm_config(base):
                initialize_model_parallel(tensor_model_parallel_size=2)
        model, vllm_config, _ = T.build(export, tp, 1)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for p in params.values():
                p.fill_(float("nan"))
        with set_current_vllm_config(vllm_config):
            loaded = model.load_weights(iter(tensors.items()))
        same = {}
        for name, p in params.items():
            want = _expected(name, tensors, tp, rank % tp).to(p.dtype)
            same[name] = tuple(want.shape) == tuple(p.shape) and torch.equal(
                p.detach().view(torch.uint8), want.contiguous().view(torch.uint8)
            )
        found[str(tp)] = {"class": type(model).__name__, "loaded": sorted(loaded), "same": same}
    return found


# the draft's parameter (after its prefix) -> the checkpoint's tensors stacked into it
_STACKED = {"attn.qkvr.weight": ["attn.wq_du.weight", "attn.wk_dv.weight", "attn.wv_dv.weight",
                                 "attn.wr_du.weight"],
            "mlp.gate_up_proj.weight": ["mlp.w13_dn.weight"],
            "mlp.down_proj.weight": ["mlp.w2_md.weight"]}  # fmt: skip
# row-parallel (split by columns); column-parallel and the short convolutions split by rows
_COLUMNS = ("attn.wo_ud.weight", "mlp.down_proj.weight")
_ROWS = ("attn.qkvr.weight", "mlp.gate_up_proj.weight", "attn.k_sconv.weight",
         "attn.v_sconv.weight", "attn_sconv.weight", "mlp_sconv.weight")  # fmt: skip


def _expected(name: str, tensors: dict, tp: int, rank: int):
    """The export's tensor(s) a parameter of the draft holds at ``rank`` of ``tp``: a column-
    parallel parameter each of its stacked tensors' rows of the rank (the fused ``w13_dn``
    whole: vLLM's dense MLP's ``gate_up_proj`` is a plain column-parallel linear, each rank
    the gate and up rows in turn of its share), a row-parallel one its columns, the others
    whole."""
    import torch

    if name == "model.backbone_embed_norm.weight":
        return tensors["model.llm.embed_norm.weight"]
    if name == "model.chain_norm.weight":
        return tensors["model.mtp.chain_norm.weight"]
    head, _, rest = name.partition("transformer_block.")
    prefix = head.replace("model.layers.", "model.mtp.layers.") + "transformer_block."
    if not rest:
        return tensors[name.replace("model.layers.", "model.mtp.layers.")]
    parts = [tensors[prefix + n] for n in _STACKED.get(rest, [rest])]
    if rest in _ROWS:
        parts = [p.chunk(tp, dim=0)[rank] for p in parts]
    if rest in _COLUMNS:
        parts = [p.chunk(tp, dim=1)[rank] for p in parts]
    return torch.cat(parts, dim=0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
