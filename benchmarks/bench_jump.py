"""The cost of the CPU stream's parts, and a projection of the parallel split to more cores.

Measures (medians; 1 thread unless said):
  jump      the mt19937 jump-ahead (fp8_dummy_test.cpu_mt19937_jump) by k words, with
            the AVX2 and the portable polynomial arithmetic, for k from 2^20 to 70 G
  spawn     starting and joining one extra thread of the stream (cpu_mt19937_words on 8
            words with 8 threads, minus 1 thread, over 7): the split's fixed cost
  r         per element: init_'s fast path on float8_e4m3fn (bounds +-1e-3), random_ on
            uint8 [0, 256), and fill_ of the same bytes, each at 128 Mi elements
Then the PROJECTION (arithmetic, not a measurement) of the split on T cores. A tensor of n
elements gets t = min(T, n / 2 Mi) threads (the op's cap), and takes
    t_T(n) = n r / t + J(n) + (t - 1) spawn
(every range n/t words; the slowest thread jumps nearly n words; thread 0 starts the others
one after another), against t_1(n) = n r. A whole model is the sum over its tensors (each
tensor is one call): Llama-70B's shapes (80 layers of q, k, v, o, gate, up, down at 8192
hidden, 1024 kv, 28672 MLP, and two 128256 x 8192 embeddings: 70.6 G elements). It assumes
each core keeps the 1-thread per-element rate, i.e. that memory bandwidth does not bind;
the fill_ rate per core shows how far that is.

Example: python benchmarks/bench_jump.py --json out.json (after bash tests/ext/build.sh PYTHON:
the jump and the split stream are test operators, in the test extension)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import fp8_dummy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from ext import test_ops  # noqa: E402  (the test extension, tests/ext/)

JUMP_K = {
    "2^20": 1 << 20,
    "2^24": 1 << 24,
    "2^27 (128 Mi)": 1 << 27,
    "2^30": 1 << 30,
    "2^33": 1 << 33,
    "70 G": 70 * 10**9,
}
CORES = (16, 64, 128)
MIN_WORDS_PER_THREAD = 1 << 21  # csrc/cpu/mt19937.h kMinWordsPerThread
LAYER = [8192 * 8192, 8192 * 1024, 8192 * 1024, 8192 * 8192] + [28672 * 8192] * 3
MODELS = {
    "one 128 Mi tensor": [128 << 20],
    "Llama-70B shapes (70.6 G)": LAYER * 80 + [128256 * 8192] * 2,
}


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    json_out.check(parser, args.json)
    torch.set_num_threads(1)
    jump = test_ops.cpu_mt19937_jump
    words = test_ops.cpu_mt19937_words
    g = torch.Generator().manual_seed(1)
    info = fp8_dummy.cpu_fast_path_info()
    levels = [True, False] if "avx2=unavailable" not in info else [False]
    out = {"jump_ms": {}, "meta": {}}
    for name, k in JUMP_K.items():
        for avx2 in levels:
            ms = median_time(lambda k=k, a=avx2: jump(g, k, a), args.repeats) * 1e3
            out["jump_ms"][f"{name} {'avx2' if avx2 else 'portable'}"] = ms
    one = median_time(lambda: words(g, 8, 1, 0), 200)
    eight = median_time(lambda: words(g, 8, 8, 0), 200)
    spawn = max(0.0, (eight - one) / 7)
    n = 128 << 20
    fp8 = torch.empty(n, dtype=torch.float8_e4m3fn)
    u8 = torch.empty(n, dtype=torch.uint8)
    rep = max(3, args.repeats // 3)
    r = {
        "init_ fp8 (fast)": median_time(lambda: fp8_dummy.init_(fp8, -1e-3, 1e-3, 1), rep) / n,
        "random_ uint8": median_time(lambda: fp8_dummy.random_(u8, 0, 256, 1), rep) / n,
        "fill_ (floor)": median_time(lambda: u8.fill_(7), rep) / n,
    }
    out["spawn_us"] = spawn * 1e6
    out["ns_per_element"] = {key: v * 1e9 for key, v in r.items()}
    jname = "avx2" if levels[0] else "portable"
    jpoints = sorted((k, out["jump_ms"][f"{name} {jname}"] / 1e3) for name, k in JUMP_K.items())

    def jump_s(k: int) -> float:  # the measured cost at the next measured distance up
        return next((j for d, j in jpoints if d >= k), jpoints[-1][1])

    def t_tensor(n: int, rate: float, cores: int) -> float:
        t = max(1, min(cores, n // MIN_WORDS_PER_THREAD))
        return n * rate / t + (jump_s(n) + (t - 1) * spawn if t > 1 else 0.0)

    proj = {}
    for model, tensors in MODELS.items():
        for what in ("init_ fp8 (fast)", "random_ uint8"):
            t1 = sum(n * r[what] for n in tensors)
            for cores in CORES:
                t = sum(t_tensor(n, r[what], cores) for n in tensors)
                proj[f"{what}, {model}, {cores} cores"] = {
                    "t1_ms": t1 * 1e3,
                    "tT_ms": t * 1e3,
                    "speedup": t1 / t,
                    "efficiency": t1 / t / cores,
                }
    out["projection"] = proj
    out["meta"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "loadavg": os.getloadavg(),
        "cpu_fast_path": info,
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
    }
    print(json.dumps(out["meta"]))
    print("jump (ms):")
    for key, ms in out["jump_ms"].items():
        print(f"  {key:24} {ms:8.3f}")
    print(f"thread start + join: {out['spawn_us']:.1f} us")
    print("per element, 1 thread (ns):")
    for key, v in out["ns_per_element"].items():
        print(f"  {key:24} {v:8.3f}")
    print("PROJECTION t_T(n) = n r / t + J(n) + (t - 1) spawn, t = min(T, n / 2 Mi), per tensor:")
    for key, p in proj.items():
        print(
            f"  {key:56} t(1) {p['t1_ms']:10.1f} ms  t(T) {p['tT_ms']:9.2f} ms  "
            f"{p['speedup']:6.1f}x  ({p['efficiency'] * 100:.0f}% of ideal)"
        )
    if args.json:
        json_out.write(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
