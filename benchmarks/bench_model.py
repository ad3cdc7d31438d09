"""Whole-model benchmark: a synthetic model of 2,000 FP8 linear weights with
Llama-70B-like shapes, scaled down, plus their float32 weight scales and bfloat16 norms.

Layer i has q, k, v, o, gate, up, down FP8 weights of Llama-70B's shapes (hidden 8192,
8 KV heads of 128, intermediate 28672) divided by --scale, a float32 per-channel
weight_scale each, and two bfloat16 norms; --layers 286 (default) gives 2,002 FP8
tensors (4,576 in all, 918 MiB at --scale 16). Timed, medians of --repeats calls after a warm-up:
  reference        vLLM's loop: a fresh generator per tensor, the reference path
  init_ loop       the same loop with fp8_dummy.init_ (one launch per tensor on CUDA)
  initialize       fp8_dummy.initialize_dummy_weights (batched init_many_ on CUDA)
  init_many_       the op alone on the state_dict's tensors (no Python walk)
with peak scratch, tensors/s and GB/s (model bytes per second). Checks first that
initialize gives the reference loop's bytes. CPU by default, CUDA too when present.

Example: python benchmarks/bench_model.py --devices cpu --json out.json
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
from measure import peak_scratch, summarize, time_calls  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy import reference  # noqa: E402

LOW, HIGH, SEED = -1e-3, 1e-3, 1234
# Llama-3-70B: (out, in) of each linear of a decoder layer.
HIDDEN, KV, INTER = 8192, 8 * 128, 28672
LINEARS = {
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (KV, HIDDEN),
    "self_attn.v_proj": (KV, HIDDEN),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (INTER, HIDDEN),
    "mlp.up_proj": (INTER, HIDDEN),
    "mlp.down_proj": (HIDDEN, INTER),
}


class SyntheticModel(torch.nn.Module):
    def __init__(self, layers: int, scale: int, device: torch.device):
        super().__init__()

        def param(shape, dtype):
            return torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device), False)

        hidden = HIDDEN // scale
        for i in range(layers):
            layer = torch.nn.Module()
            for name, (out_f, in_f) in LINEARS.items():
                lin = torch.nn.Module()
                lin.weight = param((out_f // scale, in_f // scale), torch.float8_e4m3fn)
                lin.weight_scale = param((out_f // scale, 1), torch.float32)
                parent = layer
                for part in name.split(".")[:-1]:
                    if not hasattr(parent, part):
                        parent.add_module(part, torch.nn.Module())
                    parent = getattr(parent, part)
                parent.add_module(name.split(".")[-1], lin)
            layer.input_layernorm = param((hidden,), torch.bfloat16)
            layer.post_attention_layernorm = param((hidden,), torch.bfloat16)
            self.add_module(f"layer{i}", layer)


def methods(model: torch.nn.Module) -> dict:
    tensors = [t for t in model.state_dict().values() if t.is_floating_point()]
    return {
        "reference": lambda: [reference.new_path(t, LOW, HIGH, SEED) for t in tensors],
        "init_ loop": lambda: [fp8_dummy.init_(t, LOW, HIGH, SEED) for t in tensors],
        "initialize": lambda: fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED),
        "init_many_": lambda: fp8_dummy.init_many_(tensors, LOW, HIGH, SEED),
    }


def same_bytes(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values())
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in pairs)


def bench_device(device: torch.device, layers: int, scale: int, repeats: int, check: bool):
    model = SyntheticModel(layers, scale, device)
    tensors = list(model.state_dict().values())
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    fp8 = sum(t.dtype == torch.float8_e4m3fn for t in tensors)
    result = {"device": str(device), "tensors": len(tensors), "fp8_tensors": fp8}
    result["model_bytes"] = nbytes
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    if check:  # the timed path must give the reference loop's bytes
        ref = SyntheticModel(layers, scale, device)
        methods(ref)["reference"]()
        fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED)
        result["identical"] = same_bytes(model, ref)
        del ref
        if device.type == "cuda":
            torch.cuda.empty_cache()
    rows = {}
    for name, fn in methods(model).items():
        times = time_calls(lambda _i, fn=fn: fn(), device, repeats)
        with peak_scratch(device) as peak:
            fn()
        stats = summarize(times)
        stats["peak_scratch_bytes"] = peak.bytes
        stats["tensors_per_s"] = len(tensors) / stats["median_s"]
        stats["gb_per_s"] = nbytes / stats["median_s"] / 1e9
        rows[name] = stats
        print(f"  {device}: {name} {stats['median_s'] * 1e3:.1f} ms", file=sys.stderr)
    result["methods"] = rows
    return result


def print_table(results: list[dict]) -> None:
    for r in results:
        size = f"{r['model_bytes'] / 2**20:.0f} MiB"
        print(f"\n{r['device']} {r.get('gpu', '')}: {r['tensors']} tensors ({r['fp8_tensors']} "
              f"FP8), {size}, identical: {r.get('identical')}")  # fmt: skip
        print(f"{'method':<12} {'median ms':>10} {'min ms':>9} {'tensors/s':>10} {'GB/s':>7} "
              f"{'x ref':>6} {'scratch MiB':>12}")  # fmt: skip
        ref = r["methods"]["reference"]["median_s"]
        for name, s in r["methods"].items():
            scratch = s["peak_scratch_bytes"]
            scratch_text = "n/a" if scratch is None else f"{scratch / 2**20:.1f}"
            print(f"{name:<12} {s['median_s'] * 1e3:>10.1f} {s['min_s'] * 1e3:>9.1f} "
                  f"{s['tensors_per_s']:>10.0f} {s['gb_per_s']:>7.2f} "
                  f"{ref / s['median_s']:>6.2f} {scratch_text:>12}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", default=None, help="comma list (default: cpu, cuda if any)")
    parser.add_argument("--layers", type=int, default=286, help="7 FP8 linears per layer")
    parser.add_argument("--scale", type=int, default=16, help="divides Llama-70B's dimensions")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-check", action="store_true", help="skip the byte comparison")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    json_out.check(parser, args.json)
    if args.devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = args.devices.split(",")
    results = [
        bench_device(torch.device(d), args.layers, args.scale, args.repeats, not args.no_check)
        for d in devices
    ]
    print_table(results)
    if args.json:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "cpu_threads": torch.get_num_threads(),
            "layers": args.layers,
            "scale": args.scale,
        }
        json_out.write(args.json, {"meta": meta, "results": results})
    ok = all(r.get("identical", True) for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
