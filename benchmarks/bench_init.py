"""Benchmark fp8_dummy.init_ against the reference paths it replaces.

For each device (CPU, and CUDA when present), dtype, size and (CPU) thread count: median
and spread of
  old   vLLM's older path  (p.to(float16).uniform_().to(p.dtype), copy_)
  new   vLLM's current path (empty_like(float16).uniform_(), copy_) -- the baseline
  init_ fp8_dummy.init_ with a seed, and with a caller's generator
  init_[exact] / init_[fast]  the two CPU paths, forced (FP8_DUMMY_CPU_PATH)
  fill_ (floor)  p.view(uint8).fill_(): writing the same bytes, the memory floor
  triton  a plain fused Triton kernel (tl.rand + cast; NOT byte-identical), if installed
For the dtypes int8 and uint8 the rows are the engines' random_ instead: new = torch's
p.random_(low, high) with a fresh seeded generator (int8: [-128, 128), uint8: [0, 256)),
init_ = fp8_dummy.random_ (same bytes), and the fill_ floor.
With elements/s, effective GB/s (bytes of the tensor per second), the ratio against the
new path at the same thread count and the peak scratch memory. Writes a table (stdout), a
JSON file and, with matplotlib installed, a PNG plot (time and speedup vs size, log-log).

Example: python benchmarks/bench_init.py --sizes 1Ki,1Mi,128Mi --out benchmarks/out
         python benchmarks/bench_init.py --devices cpu --sizes 128Mi --threads 1,2 \
             --dtypes float8_e4m3fn,uint8
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import cpu_model, peak_scratch, summarize, sync, time_calls  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy import reference  # noqa: E402

UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
DEFAULT_SIZES = {
    "cpu": "1Ki,16Ki,256Ki,4Mi,16Mi,64Mi,128Mi",
    "cuda": "1Ki,16Ki,256Ki,4Mi,16Mi,64Mi,128Mi,256Mi,1Gi",
}
LOW, HIGH, SEED = -1e-3, 1e-3, 1234


def parse_size(text: str) -> int:
    for suffix in ("Gi", "Mi", "Ki", ""):
        if text.endswith(suffix) and text[: len(text) - len(suffix)].isdigit():
            return int(text[: len(text) - len(suffix)]) * UNITS[suffix]
    raise argparse.ArgumentTypeError(f"bad size {text!r}: use e.g. 4097, 64Ki, 128Mi, 1Gi")


def fmt_size(n: int) -> str:
    for suffix in ("Gi", "Mi", "Ki"):
        if n % UNITS[suffix] == 0:
            return f"{n // UNITS[suffix]}{suffix}"
    return str(n)


def cpu_path_env(path: str):
    def call(p: torch.Tensor) -> None:
        old = os.environ.get("FP8_DUMMY_CPU_PATH")
        os.environ["FP8_DUMMY_CPU_PATH"] = path
        try:
            fp8_dummy.init_(p, LOW, HIGH, SEED)
        finally:
            if old is None:
                del os.environ["FP8_DUMMY_CPU_PATH"]
            else:
                os.environ["FP8_DUMMY_CPU_PATH"] = old

    return call


BYTE_RANGES = {torch.int8: (-128, 128), torch.uint8: (0, 256)}


def floor(p: torch.Tensor) -> None:
    p.view(torch.uint8).fill_(0x37)


def byte_methods() -> dict:
    """The engines' random_ on int8/uint8: torch's (the reference) and ours."""

    def reference_random(p: torch.Tensor) -> None:
        g = torch.Generator(device=p.device).manual_seed(SEED)
        p.random_(*BYTE_RANGES[p.dtype], generator=g)

    return {
        "new": reference_random,
        "init_": lambda p: fp8_dummy.random_(p, *BYTE_RANGES[p.dtype], SEED),
        "fill_ (floor)": floor,
    }


def methods(device: torch.device, dtype: torch.dtype) -> dict:
    if dtype in BYTE_RANGES:
        return byte_methods()
    gens = {}

    def with_generator(p: torch.Tensor) -> None:
        g = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(SEED))
        fp8_dummy.init_(p, LOW, HIGH, generator=g)

    table = {
        "old": lambda p: reference.old_path(p, LOW, HIGH, SEED),
        "new": lambda p: reference.new_path(p, LOW, HIGH, SEED),
        "init_": lambda p: fp8_dummy.init_(p, LOW, HIGH, SEED),
        "init_(generator)": with_generator,
    }
    if device.type == "cpu":  # both CPU paths, forced (FP8_DUMMY_CPU_PATH)
        for path in ("exact", "fast"):
            table[f"init_[{path}]"] = cpu_path_env(path)
    table["fill_ (floor)"] = floor
    if device.type == "cuda":
        try:
            from triton_baseline import triton_uniform_
        except ImportError:
            pass
        else:
            table["triton (not exact)"] = lambda p: triton_uniform_(p, LOW, HIGH, SEED)
    return table


def buffers_for(n: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Enough output tensors to rotate through more than the last-level cache."""
    cache = 64 << 20
    if device.type == "cuda":
        cache = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", cache)
    count = max(1, min(8, -(-2 * cache // n)))
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        count = max(1, min(count, (free - 3 * n) // max(n, 1)))
    bufs = [torch.empty(n, dtype=dtype, device=device) for _ in range(count)]
    for b in bufs:
        b.view(torch.uint8).fill_(0x55)  # resident before timing
    return bufs


def repeats_for(n: int, device: torch.device, requested: int | None) -> int:
    if requested:
        return requested
    if device.type == "cuda":
        return 20 if n >= 1 << 26 else 50
    return 3 if n >= 1 << 24 else 10


def bench_one(device, dtype, n, table, repeats, progress) -> dict:
    bufs = buffers_for(n, dtype, device)
    results = {}
    for name, fn in table.items():
        progress(f"{device.type} {str(dtype)[6:]} {fmt_size(n)}: {name}")
        times = time_calls(lambda i, fn=fn: fn(bufs[i % len(bufs)]), device, repeats)
        with peak_scratch(device) as peak:
            fn(bufs[0])
        sync(device)
        stats = summarize(times)
        stats["elements_per_s"] = n / stats["median_s"]
        stats["effective_GBps"] = n * dtype.itemsize / stats["median_s"] / 1e9
        stats["peak_scratch_bytes"] = peak.bytes
        results[name] = stats
    base = results["new"]["median_s"]
    for stats in results.values():
        stats["speedup_vs_new"] = base / stats["median_s"]
    return results


def print_table(rows: list[dict]) -> None:
    header = f"{'device':6} {'dtype':14} {'size':>6} {'thr':>3} {'method':20} {'median':>11} "
    header += f"{'spread':>9} "
    header += f"{'Gelem/s':>8} {'GB/s':>7} {'vs new':>7} {'scratch':>10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        for name, s in row["results"].items():
            scratch = s["peak_scratch_bytes"]
            scratch = "n/a" if scratch is None else f"{scratch / 2**20:.1f} MiB"
            print(
                f"{row['device']:6} {row['dtype']:14} {fmt_size(row['n']):>6} "
                f"{row.get('threads', ''):>3} {name:20} "
                f"{s['median_s'] * 1e3:9.3f}ms {s['iqr_s'] / s['median_s'] * 100:8.1f}% "
                f"{s['elements_per_s'] / 1e9:8.3f} {s['effective_GBps']:7.2f} "
                f"{s['speedup_vs_new']:6.2f}x {scratch:>10}"
            )


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    groups = sorted({(r["device"], r["dtype"], r.get("threads", 0)) for r in rows})
    fig, axes = plt.subplots(2, len(groups), figsize=(6 * len(groups), 8), squeeze=False)
    for col, (device, dtype, threads) in enumerate(groups):
        sel = [r for r in rows if (r["device"], r["dtype"], r.get("threads", 0)) == groups[col]]
        for name in sel[0]["results"]:
            ns = [r["n"] for r in sel]
            axes[0][col].plot(ns, [r["results"][name]["median_s"] for r in sel], "o-", label=name)
            axes[1][col].plot(ns, [r["results"][name]["speedup_vs_new"] for r in sel], "o-")
        axes[0][col].set_title(f"{device} {dtype}" + (f" {threads} threads" if threads else ""))
        axes[0][col].set_ylabel("median time (s)")
        axes[1][col].set_ylabel("speedup vs new path")
        for ax in axes[:, col]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("elements")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", default=None, help="comma list (default: cpu and cuda if any)")
    parser.add_argument("--dtypes", default="float8_e4m3fn,float8_e5m2")
    parser.add_argument("--sizes", default=None, help="e.g. 1Ki,64Mi (default per device)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per point")
    parser.add_argument(
        "--threads", default=None, help="CPU: comma list of torch.set_num_threads values"
    )
    parser.add_argument("--out", default="benchmarks/out", help="folder for the JSON and PNG")
    args = parser.parse_args()

    devices = (
        args.devices.split(",")
        if args.devices
        else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    def progress(msg: str) -> None:
        print(f"\r\033[K... {msg}", end="", file=sys.stderr, flush=True)

    default_threads = torch.get_num_threads()
    thread_counts = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    for dev_name in devices:
        device = torch.device(dev_name)
        sizes = [parse_size(s) for s in (args.sizes or DEFAULT_SIZES[device.type]).split(",")]
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            table = methods(device, dtype)
            for n in sizes:
                if device.type == "cuda" and 4 * n > torch.cuda.mem_get_info(device)[0]:
                    progress(f"skipping {fmt_size(n)}: not enough GPU memory\n")
                    continue
                repeats = repeats_for(n, device, args.repeats)
                for threads in thread_counts if device.type == "cpu" else [None]:
                    torch.set_num_threads(threads or default_threads)
                    results = bench_one(device, dtype, n, table, repeats, progress)
                    row = {"device": dev_name, "dtype": dtype_name, "n": n, "results": results}
                    if device.type == "cpu":
                        row["threads"] = torch.get_num_threads()
                    rows.append(row)
    torch.set_num_threads(default_threads)
    print("\r\033[K", end="", file=sys.stderr)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "machine": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_fast_path": fp8_dummy.cpu_fast_path_info(),
        "loadavg": os.getloadavg(),
        "gpu": torch.cuda.get_device_name() if "cuda" in devices else None,
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "bounds": [LOW, HIGH],
        "seed": SEED,
    }
    print(json.dumps(meta))
    print_table(rows)
    (out / "bench_init.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"json: {out / 'bench_init.json'}")
    plot(rows, out / "bench_init.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
