"""One rank of tests/test_engines_vllm_invariant.py: vLLM 0.33's layers at TP=world (and
with EP), filled by fp8_dummy's invariant init, compared byte for byte with the oracle
(vLLM's own weight_loader fed the TP=1 tensor). Writes its findings as JSON to OUT/rank.json.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main(rank: int, world: int, port: int, out: str, root: str) -> None:
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"  # FusedMoE's backend choice needs it
    # Run as a script, this file's folder is sys.path[0]: its modules would shadow
    # top-level packages that torch imports (a helper named like `cuda` once did).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, os.path.join(root, "tests")] + [
        p for p in sys.path if os.path.abspath(p or ".") != here
    ]
    result: dict = {"rank": rank}
    try:
        result.update(_run(rank, world, port))
    except Exception:  # noqa: BLE001 (reported to the parent test)
        result["error"] = traceback.format_exc()
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def _run(rank: int, world: int, port: int) -> dict:
    import torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    from fp8_dummy.engines import vllm as fv
    from fp8_dummy.engines.vllm import UncoveredParameterError
    from fp8_dummy.engines.vllm import placement as vp
    from helpers import vllm_invariant_layers as L

    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    L.no_fp8_gemm_kernel()
    found: dict = {"mismatch": [], "negative": [], "checked": 0}
    with set_current_vllm_config(cfg):
        init_distributed_environment(world, rank, f"tcp://127.0.0.1:{port}", rank, backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=world)
        L.stand_in_model_config(cfg)  # after: initialize_model_parallel reads the real one
        ours, oracle, full = torch.nn.Module(), torch.nn.Module(), {}
        kinds = {}
        for name, kind, kwargs in L.linear_specs(world):
            ours.add_module(name, L.build_linear(kind, kwargs))
            oracle.add_module(name, L.build_linear(kind, kwargs))
            full[name] = L.build_linear(kind, kwargs, disable_tp=True)
            kinds[name] = kind
    placements = [None] + (["linear", "round_robin"] if world > 1 else [])
    static, block = L.quant_configs()
    for placement in placements:
        for label, quant in (("bf16", None), ("fp8", static), ("blk", block)):
            name = f"moe_{placement or 'tp'}_{label}"
            with set_current_vllm_config(L.moe_config(cfg, placement)):
                ours.add_module(name, L.build_moe(quant, f"{name}.ours"))
                oracle.add_module(name, L.build_moe(quant, f"{name}.oracle"))
            with set_current_vllm_config(L.moe_config(cfg, None)):
                full[name] = L.build_moe(quant, f"{name}.tp1", tp1=True)
            kinds[name] = "MoE"
    found["experts"] = {  # (has an expert map, the placement vLLM chose)
        n: (getattr(m, "_expert_map", None) is not None, m.expert_placement_strategy)
        for n, m in ours.named_children()
        if kinds[n] == "MoE"
    }

    def stateless(lname, pname, layer, p):  # the invariant format's TP=1 tensor
        shape = list(full[lname].get_parameter(pname).shape)
        if kinds[lname] in VOCAB:
            shape[0] = layer.org_vocab_size  # the checkpoint's rows: unpadded
        return L.checkpoint_tensor(f"{lname}.{pname}", shape, p.dtype)

    _feed(oracle, kinds, L, stateless)

    def compare(into: list) -> None:
        found["checked"] += len(list(ours.parameters()))
        into += _differing(ours, oracle)

    for _, p in ours.named_parameters():
        p.data.view(torch.uint8).fill_(0x55)  # poisoned: every byte must be written
    fv.initialize_invariant_dummy_weights(ours, seed=1234)
    compare(found["mismatch"])
    found["values"] = _values(ours, L)

    # Negative control: QKV through the merged-column rule (its output_sizes count a
    # replicated KV head once per rank): must be caught by the same comparison.
    from vllm.model_executor.layers import linear as vl

    qkv = ("vllm.model_executor.layers.linear", "QKVParallelLinear")
    real = vp.RULES[qkv]

    def ignore_replication(layer, name, t, cls, fn):
        return vp.linear(layer, name, t, vl.MergedColumnParallelLinear, fn)

    vp.RULES[qkv] = (real[0], ignore_replication)
    try:
        fv.initialize_invariant_dummy_weights(ours, seed=1234)
        compare(found["negative"])
    finally:
        vp.RULES[qkv] = real
    fv.initialize_invariant_dummy_weights(ours, seed=1234)  # right again, for the next check

    found["uncovered"] = _uncovered(cfg, UncoveredParameterError)
    found["load_format"] = _load_format(cfg, ours, L, kinds)
    return found


VOCAB = ("VocabParallelEmbedding", "ParallelLMHead")


def _feed(oracle, kinds, L, tensor_of) -> None:
    """The oracle: every parameter zeroed, then the TP=1 tensor ``tensor_of(layer name,
    parameter name, layer, parameter)`` through vLLM's own loader."""
    import torch

    with torch.no_grad():
        for lname, layer in oracle.named_children():
            for pname, p in layer.named_parameters(recurse=False):
                p.data.view(torch.uint8).zero_()
                g = tensor_of(lname, pname, layer, p)
                if kinds[lname] == "MoE":
                    L.feed_moe(layer, pname, p, g)
                else:
                    L.feed_linear(layer, kinds[lname], pname, p, g)


def _differing(ours, oracle) -> list[str]:
    import torch

    return [
        n
        for (n, a), (_, b) in zip(ours.named_parameters(), oracle.named_parameters())
        if not torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8))
    ]


def _values(model, L) -> dict:
    """Non-degenerate values: distinct FP8 bytes of a 64 Ki weight, distinct tensors of one
    shape, every value in its bounds."""
    import torch

    w = model.get_parameter("fp8_col.weight").data
    out = {"fp8_numel": w.numel(), "fp8_distinct": int(torch.unique(w.view(torch.uint8)).numel())}
    a, b = model.get_parameter("qkv_rep2.weight"), model.get_parameter("qkv_split.weight")
    out["same_shape_differ"] = a.shape != b.shape or not torch.equal(a, b)
    bad = []
    for n, p in model.named_parameters():
        if p.dtype.is_floating_point:
            low, high = L.bounds(p.dtype)
            v = p.data.float()
            if not bool(((v >= low) & (v <= high)).all()):
                bad.append(n)
    out["out_of_bounds"] = bad
    return out


def _uncovered(cfg, error) -> dict:
    """A layer class with its own weight_loader, and a plain parameter with a custom
    loader: both refused by name, before anything is written."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.linear import ColumnParallelLinear

    from fp8_dummy.engines import vllm as fv

    class CustomColumn(ColumnParallelLinear):
        def weight_loader_v2(self, param, loaded_weight):  # e.g. a model's own sharding
            super().weight_loader_v2(param, loaded_weight)

    with set_current_vllm_config(cfg):
        model = torch.nn.Module()
        model.add_module("first", ColumnParallelLinear(16, 32, params_dtype=torch.bfloat16))
        model.add_module("custom", CustomColumn(16, 32, params_dtype=torch.bfloat16))
    extra = torch.nn.Module()
    extra.conv = torch.nn.Parameter(torch.empty(4, 4), requires_grad=False)
    extra.conv.weight_loader = lambda p, w: p.data.copy_(w)  # a closure, as Mamba's
    model.add_module("mamba", extra)
    out = {}
    for drop in ("none", "custom"):
        if drop == "custom":
            del model.custom
        for p in model.parameters():
            p.data.view(torch.uint8).fill_(0x55)
        try:
            fv.initialize_invariant_dummy_weights(model)
            out[drop] = {"raised": None}
        except error as e:
            untouched = all(
                bool((p.data.view(torch.uint8) == 0x55).all()) for p in model.parameters()
            )
            out[drop] = {"raised": str(e), "untouched": untouched}
    return out


def _load_format(cfg, ours, L, kinds) -> dict:
    """--load-format fp8_dummy_invariant through vLLM's own get_model_loader."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.load import LoadConfig

    from fp8_dummy.engines import vllm as fvllm

    fvllm.register()
    from vllm.model_executor.model_loader import get_model_loader

    loader = get_model_loader(LoadConfig(load_format="fp8_dummy_invariant"))
    with set_current_vllm_config(cfg):
        model = torch.nn.Module()
        for name, kind, kwargs in L.linear_specs(0):
            model.add_module(name, L.build_linear(kind, kwargs))
    for p in model.parameters():
        p.data.view(torch.uint8).fill_(0x55)
    loader.load_weights(model, cfg.model_config)
    fv_ours = dict(ours.named_parameters())
    differ = [
        n
        for n, p in model.named_parameters()
        if not torch.equal(p.data.view(torch.uint8), fv_ours[n].data.view(torch.uint8))
    ]
    return {"loader": type(loader).__name__, "differ": differ}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
