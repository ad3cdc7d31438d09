"""GPU benchmark of fp8_dummy.init_ against the reference paths.

For each FP8 dtype, on tensors of --numel elements (default 128 Mi): median time (CUDA
events, warm-up, rotating buffers larger than L2) of the old path, the new path, init_
(both overloads), the Philox-only roofline (the same Philox calls, no stores) and a
plain byte fill (the write bound); peak scratch (max_memory_allocated above the start);
elements/s and effective bandwidth (bytes of the FP8 tensor per second); the ratios and
the targets. Prints a table; --json writes everything. Run from the repo root with
PYTHONPATH=. (or fp8_dummy installed); scripts/gpu_check.sh does.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

import torch

import fp8_dummy  # noqa: F401  (registers the ops)
from fp8_dummy.reference import new_path, old_path

# The roofline kernel is test machinery: the test extension (tests/ext/build.sh builds it).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from ext import test_ops  # noqa: E402

LOW, HIGH, SEED = -1e-3, 1e-3, 1234
TARGETS = {"new_over_init": 4.0, "old_over_init": 8.0, "init_over_roofline": 1.3}


def time_ms(fn, buffers, repeats: int, warmup: int) -> list[float]:
    """Per-call times in ms; the buffers rotate so no call finds its output in L2."""
    for i in range(warmup):
        fn(buffers[i % len(buffers)])
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for i, (start, end) in enumerate(events):
        buf = buffers[i % len(buffers)]
        start.record()
        fn(buf)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def peak_scratch(fn, buf) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(buf)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def bench_dtype(dtype, numel: int, repeats: int, warmup: int, rotate: int) -> dict:
    buffers = [torch.empty(numel, dtype=dtype, device="cuda") for _ in range(rotate)]
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    words_needed = test_ops.philox_roofline(
        torch.empty(0, dtype=torch.int32, device="cuda"), numel, SEED
    )
    words = torch.empty(words_needed, dtype=torch.int32, device="cuda")
    paths = {
        "old_path": lambda b: old_path(b, LOW, HIGH, SEED),
        "new_path": lambda b: new_path(b, LOW, HIGH, SEED),
        "init_": lambda b: torch.ops.fp8_dummy.init_.default(b, LOW, HIGH, SEED),
        "init_generator": lambda b: torch.ops.fp8_dummy.init_.generator(
            b, LOW, HIGH, generator=gen
        ),
        "philox_roofline": lambda b: test_ops.philox_roofline(words, numel, SEED),
        "byte_fill": lambda b: b.view(torch.uint8).fill_(0x3C),
    }
    # Correctness first: the timed kernel must give the reference's bytes.
    check = torch.empty_like(buffers[0])
    paths["init_"](buffers[0])
    new_path(check, LOW, HIGH, SEED)
    identical = torch.equal(buffers[0].view(torch.uint8), check.view(torch.uint8))
    del check
    torch.cuda.empty_cache()
    rows = {}
    for name, fn in paths.items():
        times = sorted(time_ms(fn, buffers, repeats, warmup))
        median = statistics.median(times)
        rows[name] = {
            "median_ms": median,
            "min_ms": times[0],
            "p90_ms": times[int(0.9 * (len(times) - 1))],
            "max_ms": times[-1],
            "scratch_bytes": peak_scratch(fn, buffers[0]),
            "elements_per_s": numel / (median * 1e-3),
            "effective_GBps": numel * dtype.itemsize / (median * 1e-3) / 1e9,
        }
    t = {k: v["median_ms"] for k, v in rows.items()}
    ratios = {
        "new_over_init": t["new_path"] / t["init_"],
        "old_over_init": t["old_path"] / t["init_"],
        "init_over_roofline": t["init_"] / t["philox_roofline"],
        "init_over_byte_fill": t["init_"] / t["byte_fill"],
    }
    met = {
        "new_over_init": ratios["new_over_init"] >= TARGETS["new_over_init"],
        "old_over_init": ratios["old_over_init"] >= TARGETS["old_over_init"],
        "init_over_roofline": ratios["init_over_roofline"] <= TARGETS["init_over_roofline"],
        "zero_scratch": rows["init_"]["scratch_bytes"] == 0
        and rows["init_generator"]["scratch_bytes"] == 0,
        "identical_bytes": identical,
    }
    return {"dtype": str(dtype), "numel": numel, "paths": rows, "ratios": ratios, "met": met}


def table(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r['dtype']}  numel={r['numel']}")
        lines.append(
            f"  {'path':16} {'median ms':>10} {'min':>8} {'max':>8} {'Gelem/s':>9} "
            f"{'GB/s':>8} {'scratch MiB':>12}"
        )
        for name, p in r["paths"].items():
            lines.append(
                f"  {name:16} {p['median_ms']:10.4f} {p['min_ms']:8.4f} "
                f"{p['max_ms']:8.4f} {p['elements_per_s'] / 1e9:9.2f} "
                f"{p['effective_GBps']:8.1f} {p['scratch_bytes'] / 2**20:12.1f}"
            )
        q = r["ratios"]
        lines.append(
            f"  new/init_ {q['new_over_init']:.2f}x (target >= 4)   "
            f"old/init_ {q['old_over_init']:.2f}x (target >= 8)   "
            f"init_/roofline {q['init_over_roofline']:.2f} (target <= 1.3)   "
            f"init_/byte_fill {q['init_over_byte_fill']:.2f}"
        )
        lines.append("  targets met: " + ", ".join(f"{k}={v}" for k, v in r["met"].items()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=128 * 2**20)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rotate", type=int, default=3, help="buffers per dtype (> L2 in all)")
    parser.add_argument("--dtypes", default="float8_e4m3fn,float8_e5m2")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    json_out.check(parser, args.json)
    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA GPU", file=sys.stderr)
        return 2
    results = [
        bench_dtype(getattr(torch, name), args.numel, args.repeats, args.warmup, args.rotate)
        for name in args.dtypes.split(",")
    ]
    props = torch.cuda.get_device_properties(0)
    meta = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "python": platform.python_version(),
        "bounds": [LOW, HIGH],
        "seed": SEED,
        "repeats": args.repeats,
    }
    print(table(results))
    if args.json:
        json_out.write(args.json, {"meta": meta, "results": results}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
