"""Whole-model benchmark: the engines' path (fp8_dummy.initialize_dummy_weights: the plan of
every tensor, then one init_many_ per bounds and seed) and the op alone, against vLLM's loop,
per tensor, each row beside the loop measured in the same run.

Models (--model, a comma list runs several):
  scaled       Llama-70B's linear shapes divided by --scale (default 16): --layers (286) of
               q, k, v, o, gate, up, down FP8 weights, a float32 per-channel weight_scale
               each, two bfloat16 norms: 4,576 tensors, 918 MiB.
  tiny         the host-cost mode: the same tensors at 16 elements (FP8 weights 4 x 4) and 1
               (scales, norms), --tensors of them (default 4,576; 100,000 for a checkpoint
               with per-expert tensors; a list runs each size); on the CPU one thread. The
               bytes cost nothing here: what is left is each path's work per tensor on the
               host (Python, dispatch, generators, launches on a GPU).
  llama-3-70b  the real Llama-3-70B FP8 checkpoint's shapes (scale 1): 80 layers of FP8
               linears with float32 per-channel scales, bfloat16 norms, the bfloat16
               embedding and head: 1,283 tensors, about 72 GB. A GPU with room for it only:
               refused on the CPU (and where the GPU lacks the memory), never scaled down.
Rows (medians of --repeats calls after a warm-up):
  reference        vLLM's loop over the collected tensors: a fresh generator per tensor, the
                   reference path (no walk of the model: the loop's own work only)
  init_ loop       the same loop with fp8_dummy.init_
  initialize       fp8_dummy.initialize_dummy_weights: the walk, the plan (kept from the
                   previous call: these repeats fill the same model), the fill
  initialize, new plan  the same with no plan kept (the first fill of a model; its proofs
                   are decided already)
  init_many_       the op alone on the collected tensors
with us per tensor, x ref (the loop's time over the row's), tensors/s, GB/s and peak scratch.
Checks first that initialize gives the reference loop's bytes (llama-3-70b: tensor by tensor
against one scratch tensor). CPU by default, CUDA too when present.

Examples: python benchmarks/bench_model.py --devices cpu --json out.json
          python benchmarks/bench_model.py --model tiny --tensors 4576,100000 --devices cpu
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from measure import cpu_model, peak_scratch, summarize, time_calls  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy import reference  # noqa: E402
from fp8_dummy.engines import core  # noqa: E402

LOW, HIGH, SEED = -1e-3, 1e-3, 1234
# Llama-3-70B: (out, in) of each linear of a decoder layer; its vocabulary and depth.
HIDDEN, KV, INTER, VOCAB, LAYERS_70B = 8192, 8 * 128, 28672, 128256, 80
LINEARS = {
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (KV, HIDDEN),
    "self_attn.v_proj": (KV, HIDDEN),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (INTER, HIDDEN),
    "mlp.up_proj": (INTER, HIDDEN),
    "mlp.down_proj": (HIDDEN, INTER),
}
PER_LAYER = 2 * len(LINEARS) + 2  # a weight and a scale per linear, two norms


def param(shape, dtype, device) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device), False)


def decoder_layer(device, scale: int | None) -> torch.nn.Module:
    """One layer's linears (FP8 weights, float32 per-channel scales) and norms; ``scale``
    divides the shapes, None: every weight 4 x 4, every scale and norm one element."""
    layer = torch.nn.Module()
    for name, (out_f, in_f) in LINEARS.items():
        lin = torch.nn.Module()
        shape = (4, 4) if scale is None else (out_f // scale, in_f // scale)
        lin.weight = param(shape, torch.float8_e4m3fn, device)
        lin.weight_scale = param((shape[0] if scale else 1, 1), torch.float32, device)
        parent = layer
        for part in name.split(".")[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(name.split(".")[-1], lin)
    norm = (HIDDEN // scale,) if scale else (1,)
    layer.input_layernorm = param(norm, torch.bfloat16, device)
    layer.post_attention_layernorm = param(norm, torch.bfloat16, device)
    return layer


class SyntheticModel(torch.nn.Module):
    """``layers`` decoder layers of Llama-70B's shapes divided by ``scale`` (None: tiny)."""

    def __init__(self, layers: int, scale: int | None, device: torch.device):
        super().__init__()
        for i in range(layers):
            self.add_module(f"layer{i}", decoder_layer(device, scale))


class Llama70B(torch.nn.Module):
    """Llama-3-70B's FP8 checkpoint at its real shapes, named as in the checkpoint."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Module()
        self.model.embed_tokens.weight = param((VOCAB, HIDDEN), torch.bfloat16, device)
        self.model.layers = torch.nn.ModuleList(decoder_layer(device, 1) for _ in range(LAYERS_70B))
        self.model.norm = torch.nn.Module()
        self.model.norm.weight = param((HIDDEN,), torch.bfloat16, device)
        self.lm_head = torch.nn.Module()
        self.lm_head.weight = param((VOCAB, HIDDEN), torch.bfloat16, device)


def llama70b_bytes() -> int:
    linear = sum(o * i + o * 4 for o, i in LINEARS.values())
    return LAYERS_70B * (linear + 2 * HIDDEN * 2) + 2 * VOCAB * HIDDEN * 2 + HIDDEN * 2


def make(kind: str, device: torch.device, args) -> torch.nn.Module:
    if kind == "scaled":
        return SyntheticModel(args.layers, args.scale, device)
    if kind == "tiny":
        return SyntheticModel(-(-args.tensors // PER_LAYER), None, device)
    return Llama70B(device)


def refusal(kind: str, device: torch.device) -> str | None:
    """Why this model cannot run on this device (never a scaled-down stand-in), or None."""
    if kind != "llama-3-70b":
        return None
    need = llama70b_bytes() + 2 * INTER * HIDDEN * 2  # the model and the reference's temps
    if device.type != "cuda":
        return f"llama-3-70b needs a GPU with {need / 2**30:.0f} GiB free (the real shapes)"
    free, _ = torch.cuda.mem_get_info(device)
    if free < need:
        return f"llama-3-70b needs {need / 2**30:.0f} GiB on {device}, {free / 2**30:.0f} free"
    return None


def floats(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t for t in model.state_dict().values() if t.is_floating_point()]


def methods(model: torch.nn.Module) -> dict:
    tensors = floats(model)

    def afresh() -> None:
        core.kept.forget()  # the first fill of a model: its plan made, its proofs decided
        fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED)

    return {
        "reference": lambda: [reference.new_path(t, LOW, HIGH, SEED) for t in tensors],
        "init_ loop": lambda: [fp8_dummy.init_(t, LOW, HIGH, SEED) for t in tensors],
        "initialize": lambda: fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED),
        "initialize, new plan": afresh,
        "init_many_": lambda: fp8_dummy.init_many_(tensors, LOW, HIGH, SEED),
    }


def same_bytes(kind: str, model: torch.nn.Module, device: torch.device, args) -> bool:
    """initialize's bytes are the reference loop's: a second model (the large one: one
    scratch tensor at a time)."""
    fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED)
    if kind == "llama-3-70b":
        for t in floats(model):
            ref = reference.new_path(torch.empty_like(t), LOW, HIGH, SEED)
            if not torch.equal(t.view(torch.uint8), ref.view(torch.uint8)):
                return False
        return True
    other = make(kind, device, args)
    methods(other)["reference"]()
    pairs = zip(model.state_dict().values(), other.state_dict().values())
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in pairs)


def bench(kind: str, device: torch.device, args) -> dict:
    result = {"model": kind, "device": str(device)}
    if (why := refusal(kind, device)) is not None:
        print(f"  {device}: {kind}: refused: {why}", file=sys.stderr)
        return {**result, "refused": why}
    threads = torch.get_num_threads()
    if kind == "tiny" and device.type == "cpu":
        torch.set_num_threads(1)  # the host's work per tensor, on one thread
    try:
        model = make(kind, device, args)
        tensors = list(model.state_dict().values())
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        fp8 = sum(t.dtype == torch.float8_e4m3fn for t in tensors)
        result.update(tensors=len(tensors), fp8_tensors=fp8, model_bytes=nbytes)
        result["threads"] = torch.get_num_threads()
        if device.type == "cuda":
            result["gpu"] = torch.cuda.get_device_name(device)
        if not args.no_check:  # the timed path must give the reference loop's bytes
            result["identical"] = same_bytes(kind, model, device, args)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rows = {}
        for name, fn in methods(model).items():
            times = time_calls(lambda _i, fn=fn: fn(), device, args.repeats)
            with peak_scratch(device) as peak:
                fn()
            stats = summarize(times)
            stats["peak_scratch_bytes"] = peak.bytes
            stats["us_per_tensor"] = stats["median_s"] / len(tensors) * 1e6
            stats["tensors_per_s"] = len(tensors) / stats["median_s"]
            stats["gb_per_s"] = nbytes / stats["median_s"] / 1e9
            rows[name] = stats
            print(f"  {device}: {kind}: {name} {stats['median_s'] * 1e3:.1f} ms", file=sys.stderr)
        result["methods"] = rows
        return result
    finally:
        torch.set_num_threads(threads)


def print_table(results: list[dict]) -> None:
    for r in results:
        if "refused" in r:
            print(f"\n{r['device']}: {r['model']}: refused: {r['refused']}")
            continue
        size = f"{r['model_bytes'] / 2**20:.1f} MiB"
        print(f"\n{r['device']} {r.get('gpu', '')}: {r['model']}, {r['tensors']} tensors "
              f"({r['fp8_tensors']} FP8), {size}, {r['threads']} thread(s), "
              f"identical: {r.get('identical')}")  # fmt: skip
        print(f"{'method':<21} {'median ms':>10} {'us/tensor':>10} {'x ref':>7} {'min ms':>9} "
              f"{'tensors/s':>10} {'GB/s':>7} {'scratch MiB':>12}")  # fmt: skip
        ref = r["methods"]["reference"]["median_s"]
        for name, s in r["methods"].items():
            scratch = s["peak_scratch_bytes"]
            scratch_text = "n/a" if scratch is None else f"{scratch / 2**20:.1f}"
            print(f"{name:<21} {s['median_s'] * 1e3:>10.2f} {s['us_per_tensor']:>10.2f} "
                  f"{s['median_s'] / ref:>7.3f} {s['min_s'] * 1e3:>9.2f} "
                  f"{s['tensors_per_s']:>10.0f} {s['gb_per_s']:>7.2f} "
                  f"{scratch_text:>12}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", default=None, help="comma list (default: cpu, cuda if any)")
    parser.add_argument("--model", default="scaled", help="scaled, tiny, llama-3-70b (a list)")
    parser.add_argument("--layers", type=int, default=286, help="scaled: 7 FP8 linears a layer")
    parser.add_argument("--scale", type=int, default=16, help="scaled: divides Llama-70B's shapes")
    parser.add_argument(
        "--tensors", default=str(286 * PER_LAYER), help="tiny: how many (a list: each size)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-check", action="store_true", help="skip the byte comparison")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    json_out.check(parser, args.json)
    kinds = args.model.split(",")
    if unknown := set(kinds) - {"scaled", "tiny", "llama-3-70b"}:
        parser.error(f"unknown model {sorted(unknown)}: scaled, tiny, llama-3-70b")
    if args.devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = args.devices.split(",")
    sizes = [int(n) for n in str(args.tensors).split(",")]
    runs = [(k, n) for k in kinds for n in (sizes if k == "tiny" else sizes[:1])]
    results = [
        bench(k, torch.device(d), argparse.Namespace(**{**vars(args), "tensors": n}))
        for d in devices
        for k, n in runs
    ]
    print_table(results)
    if args.json:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "cpu_threads": torch.get_num_threads(),
            "argv": sys.argv[1:],
        }
        json_out.write(args.json, {"meta": meta, "results": results})
    if any("refused" in r for r in results):
        return 2
    return 0 if all(r.get("identical", True) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
