"""Benchmark of the stateless mode (fp8_dummy.init_stateless_).

CPU (float8_e4m3fn, 64 Mi elements by default): init_stateless_ on 1 and 2 threads
(torch.set_num_threads) against torch's reference new path (fp8_dummy.reference.new_path:
empty_like float16, uniform_, copy_) on the default thread count; medians. Also bfloat16
(the stateless fill of every bf16 tensor of a realistic model or an export) on 1 and 2
threads, and on 2 threads with the SIMD level capped at AVX2 (FP8_DUMMY_STATELESS_SIMD=1:
its table lookups one element at a time), for the AVX-512 word permutes' gain.
CUDA, when a GPU is present (128 Mi elements): init_stateless_ against a plain fill_ of
the same tensor (the HBM write bound), CUDA events, same run.

Usage: python benchmarks/bench_stateless.py [--cpu-numel N] [--cuda-numel N] [--reps R]
       [--json PATH] [--no-cpu] [--no-cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import fp8_dummy  # noqa: F401  (registers the ops)
from fp8_dummy.reference import new_path
from fp8_dummy.stateless import init_stateless_

sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from measure import cpu_model  # noqa: E402

DTYPE = torch.float8_e4m3fn


def wall(fn, reps: int) -> tuple[float, float, float]:
    """Median and min wall seconds of fn() over reps runs (after one warm-up run), and the
    median process CPU seconds (all threads): on a shared machine the wall-clock speedup
    of 2 threads is capped by how much of the second core others leave free, while CPU
    time shows whether the work itself is split without overhead."""
    fn()
    times, cpu = [], []
    for _ in range(reps):
        c0, start = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), min(times), statistics.median(cpu)


def bench_cpu(numel: int, reps: int) -> dict:
    t = torch.empty(numel, dtype=DTYPE)
    before = torch.get_num_threads()
    rows = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            rows[f"stateless_{threads}t"] = wall(lambda: init_stateless_(t), reps)
        # Wide bounds: many distinct FP8 bytes, the table-gather path instead of run counts.
        rows["stateless_2t_bounds_pm1"] = wall(lambda: init_stateless_(t, -1.0, 1.0), reps)
        b = torch.empty(numel, dtype=torch.bfloat16)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            rows[f"stateless_bf16_{threads}t"] = wall(lambda: init_stateless_(b), reps)
        cap = os.environ.get("FP8_DUMMY_STATELESS_SIMD")
        os.environ["FP8_DUMMY_STATELESS_SIMD"] = "1"  # read at each call
        try:
            rows["stateless_bf16_2t_avx2"] = wall(lambda: init_stateless_(b), reps)
        finally:
            if cap is None:
                del os.environ["FP8_DUMMY_STATELESS_SIMD"]
            else:
                os.environ["FP8_DUMMY_STATELESS_SIMD"] = cap
        torch.set_num_threads(1)
        rows["reference_new_path_1t"] = wall(lambda: new_path(t), max(3, reps // 2))
        torch.set_num_threads(before)
        rows[f"reference_new_path_{before}t"] = wall(lambda: new_path(t), max(3, reps // 2))
    finally:
        torch.set_num_threads(before)
    med = {k: v[0] for k, v in rows.items()}
    ref = med[f"reference_new_path_{before}t"]
    return {
        "numel": numel,
        "dtype": str(DTYPE),
        "threads_available": before,
        "load_average": os.getloadavg(),
        "median_s": med,
        "min_s": {k: v[1] for k, v in rows.items()},
        "cpu_s": {k: v[2] for k, v in rows.items()},
        "speedup_2t_over_1t": med["stateless_1t"] / med["stateless_2t"],
        "speedup_2t_over_1t_min": rows["stateless_1t"][1] / rows["stateless_2t"][1],
        "speedup_over_reference": ref / min(med["stateless_1t"], med["stateless_2t"]),
        "speedup_1t_over_reference_1t": med["reference_new_path_1t"] / med["stateless_1t"],
    }


def bench_cuda(numel: int, reps: int) -> dict:
    t = torch.empty(numel, dtype=DTYPE, device="cuda")
    raw = t.view(torch.uint8)

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        return statistics.median(times)

    fill = timed(lambda: raw.fill_(0x55))
    stateless = timed(lambda: init_stateless_(t))
    out = {
        "numel": numel,
        "device": torch.cuda.get_device_name(),
        "median_s": {"fill_": fill, "stateless": stateless},
        "ratio_to_fill": stateless / fill,
        "write_GBps": {"fill_": numel / fill / 1e9, "stateless": numel / stateless / 1e9},
    }
    try:  # torch's own stateless composite, for comparison (float16 temp + copy_)
        import torch.func._random as R

        temp = torch.empty(numel, dtype=torch.float16, device="cuda")
        key = R.key(1234, device="cuda")
        out["median_s"]["torch_func_random_composite"] = timed(
            lambda: t.copy_(R.uniform_(key, temp, low=-1e-3, high=1e-3))
        )
    except Exception as exc:  # noqa: BLE001
        out["torch_func_random_composite"] = f"unavailable: {exc!s:.100}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-numel", type=int, default=64 << 20)
    ap.add_argument("--cuda-numel", type=int, default=128 << 20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--no-cuda", action="store_true")
    args = ap.parse_args()
    json_out.check(ap, args.json)
    result = {
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
    }
    if not args.no_cpu:
        cpu = result["cpu_bench"] = bench_cpu(args.cpu_numel, args.reps)
        print(f"CPU, {cpu['numel']} x {cpu['dtype']}, load average {cpu['load_average']}")
        for name, sec in cpu["median_s"].items():
            low, used = cpu["min_s"][name] * 1e3, cpu["cpu_s"][name] * 1e3
            print(f"  {name:28s} median {sec * 1e3:8.1f} ms  min {low:8.1f} ms  cpu {used:8.1f} ms")
        print(
            f"  2 threads / 1 thread speedup: {cpu['speedup_2t_over_1t']:.2f}x "
            f"(best runs: {cpu['speedup_2t_over_1t_min']:.2f}x)"
        )
        print(f"  stateless vs reference new path: {cpu['speedup_over_reference']:.1f}x faster")
        one = cpu["speedup_1t_over_reference_1t"]
        print(f"  both on 1 thread: stateless {one:.1f}x faster")
    if not args.no_cuda and torch.cuda.is_available():
        gpu = result["cuda_bench"] = bench_cuda(args.cuda_numel, max(args.reps, 20))
        print(f"CUDA {gpu['device']}, {gpu['numel']} x {DTYPE}")
        for name, sec in gpu["median_s"].items():
            print(f"  {name:28s} median {sec * 1e3:9.3f} ms")
        print(f"  stateless / fill_: {gpu['ratio_to_fill']:.2f}x (target <= 1.5x)")
    elif not args.no_cuda:
        result["cuda_bench"] = "pending: no GPU in this run"
        print("CUDA: no GPU, skipped (pending)")
    if args.json:
        json_out.write(args.json, result, indent=2)


if __name__ == "__main__":
    main()
