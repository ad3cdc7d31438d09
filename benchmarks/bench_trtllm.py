"""TensorRT-LLM's dummy weights: its path against fp8_dummy's drop-in on a model
of --elements float8_e4m3fn elements (default 256 Mi) in --tensors weights (default 1), plus
one int8 and one uint8 weight of 1/16 that size (its int8 and FP4-packed kinds), every weight
a transposed view with --transposed.

  trtllm       TensorRT-LLM's initialize_dummy_weights as written in its source
               (docs/trtllm.md): per state_dict tensor a fresh generator (seed 0), a
               contiguous float16 temp, uniform_ in the dtype's bounds, .to(dtype) into a
               second temp, copy_: 3 bytes of scratch per element
  fp8_dummy    fp8_dummy.trtllm.initialize_dummy_weights (the same bytes, no temp)

Medians of --repeats calls after a warm-up, peak scratch (CPU: the resident high-water mark
above the start; CUDA: allocated bytes above the start), the ratio in the same run. Checks
first that both give the same bytes. CPU by default, --devices cuda on a GPU.

Example: python benchmarks/bench_trtllm.py --devices cpu --json out.json
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
from fp8_dummy import reference, trtllm  # noqa: E402
from fp8_dummy.engines.trtllm import BYTE_BOUNDS as TRTLLM_BYTE_BOUNDS  # noqa: E402


def make_model(elements: int, tensors: int, transposed: bool, device: torch.device):
    model = torch.nn.Module()
    cols = 8192
    kinds = [(torch.float8_e4m3fn, elements // tensors)] * tensors
    kinds += [(torch.int8, elements // 16), (torch.uint8, elements // 16)]
    for i, (dtype, n) in enumerate(kinds):
        rows = max(1, n // cols)
        t = torch.empty((cols, rows) if transposed else (rows, cols), dtype=dtype, device=device)
        model.register_parameter(f"w{i}", torch.nn.Parameter(t.t() if transposed else t, False))
    return model


@torch.no_grad()
def trtllm_path(model: torch.nn.Module, low=-1e-3, high=1e-3, seed=0) -> None:
    """TensorRT-LLM's loop, its temps included (the bounds by dtype: its _get_random_min_max)."""
    for t in model.state_dict().values():
        if t.element_size() < 2:
            reference.contiguous_path(t, *TRTLLM_BYTE_BOUNDS[t.dtype], seed)
        elif t.is_floating_point():
            reference.contiguous_path(t, low, high, seed)


def same_bytes(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values())
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in pairs)


def bench_device(device: torch.device, args) -> dict:
    model = make_model(args.elements, args.tensors, args.transposed, device)
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    result = {"device": str(device), "model_bytes": nbytes, "transposed": args.transposed}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    ref = make_model(args.elements, args.tensors, args.transposed, device)
    trtllm_path(ref)
    trtllm.initialize_dummy_weights(model)
    result["identical"] = same_bytes(model, ref)
    del ref
    if device.type == "cuda":
        torch.cuda.empty_cache()
    rows = {}
    methods = {"trtllm": trtllm_path, "fp8_dummy": trtllm.initialize_dummy_weights}
    for name, fn in methods.items():
        times = time_calls(lambda _i, fn=fn: fn(model), device, args.repeats)
        with peak_scratch(device) as peak:
            fn(model)
        stats = summarize(times)
        stats["peak_scratch_bytes"] = peak.bytes
        stats["gb_per_s"] = nbytes / stats["median_s"] / 1e9
        rows[name] = stats
        print(f"  {device}: {name} {stats['median_s'] * 1e3:.1f} ms", file=sys.stderr)
    rows["fp8_dummy"]["x_trtllm"] = rows["trtllm"]["median_s"] / rows["fp8_dummy"]["median_s"]
    result["methods"] = rows
    return result


def print_table(results: list[dict]) -> None:
    for r in results:
        print(f"\n{r['device']} {r.get('gpu', '')}: {r['model_bytes'] / 2**20:.0f} MiB, "
              f"transposed: {r['transposed']}, identical: {r['identical']}")  # fmt: skip
        print(f"{'method':<10} {'median ms':>10} {'min ms':>9} {'GB/s':>7} {'x trtllm':>9} "
              f"{'scratch MiB':>12}")  # fmt: skip
        ref = r["methods"]["trtllm"]["median_s"]
        for name, s in r["methods"].items():
            scratch = s["peak_scratch_bytes"]
            scratch_text = "n/a" if scratch is None else f"{scratch / 2**20:.1f}"
            ratio = ref / s["median_s"]
            print(f"{name:<10} {s['median_s'] * 1e3:>10.1f} {s['min_s'] * 1e3:>9.1f} "
                  f"{s['gb_per_s']:>7.2f} {ratio:>9.2f} {scratch_text:>12}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", default="cpu", help="comma list, e.g. cpu,cuda")
    parser.add_argument("--elements", type=int, default=256 << 20, help="float8_e4m3fn elements")
    parser.add_argument("--tensors", type=int, default=1, help="float8_e4m3fn weights")
    parser.add_argument("--transposed", action="store_true", help="every weight a transposed view")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    json_out.check(parser, args.json)
    results = [bench_device(torch.device(d), args) for d in args.devices.split(",")]
    print_table(results)
    if args.json:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "fp8_dummy_cpu": fp8_dummy.cpu_fast_path_info(),
            "platform": platform.platform(),
            "cpu_threads": torch.get_num_threads(),
            "elements": args.elements,
            "tensors": args.tensors,
        }
        json_out.write(args.json, {"meta": meta, "results": results})
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
