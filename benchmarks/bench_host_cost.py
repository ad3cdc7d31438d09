"""Where a whole-model fill's host cost per tensor goes, and how it grows with the number of
tensors: bench_model.py's host-cost model (``--model tiny``: FP8 weights of 16 elements,
float32 scales and bfloat16 norms of one, in modules of Llama's layout) at each of --sizes,
the CPU time per tensor (one thread, medians of --repeats after a warm-up) of

  reference          vLLM's loop over the collected tensors (bench_model.py's row)
  new plan           fp8_dummy.initialize_dummy_weights on a model it has not planned (its
                     kept plans forgotten first: what an engine's one load per process pays)
  initialize         fp8_dummy.initialize_dummy_weights, its plan kept from the last fill;
                     its steps:
    walk             the walk of the model in vLLM's order, as a kept fill makes it: its
                     shape and tensors, no names (fp8_dummy.tensors.walk_shape)
    facts            the kept plan's check of every tensor's facts (one C++ call)
    init_many_       the fill: the batch through the operator (one C++ call)
    facts + fill     both in the one call a kept fill makes (init_many_kept: the list
                     read once)
and beside them what a fill of a model held as torch modules cannot avoid:
  modules            a loop over the module tree reading each module's dictionaries (no
                     tensor touched): the least a walk does
  list into an op    torch turning the list of tensors into an operator's arguments (an
                     operator that returns at once): facts and init_many_ each pay it

CPU time (time.process_time), not wall time: the growth shown is the work's, not the waits
of a machine shared with other processes. Each size checks first that initialize gives the
reference loop's bytes.

Two columns per size: warm (the repeats back to back: the model's objects in the caches as
far as they fit) and cold (before each timed call, a buffer of --evict times the L3 cache's
size written and read, outside the timing: what a user's one fill per load meets, the
model's objects built long before). The L3 size is read from /sys (else lscpu) and recorded.

Example: python benchmarks/bench_host_cost.py --sizes 4576,20000,50000,100000 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_model  # noqa: E402
import json_out  # noqa: E402
from measure import run_meta, time_calls  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy import reference  # noqa: E402
from fp8_dummy.engines import core  # noqa: E402
from fp8_dummy.engines.core import execution, kinds  # noqa: E402
from fp8_dummy.tensors import walk_lists, walk_shape  # noqa: E402

LOW, HIGH, SEED = bench_model.LOW, bench_model.HIGH, bench_model.SEED
NO_FACTS = torch.empty(0, 0, dtype=torch.long)  # facts_match returns at once on it


def modules_only(model: torch.nn.Module) -> None:
    """Each module once, depth first, its dictionaries read: what any walk does (the walk's
    loop without its tensors and names)."""
    stack, seen = [model], set()
    push = stack.append
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        d = m.__dict__
        if d["_parameters"] is None:
            continue
        for child in d["_modules"].values():
            if child is not None:
                push(child)


def l3_bytes() -> int:
    """The L3 cache's size (the largest level /sys lists for cpu0, else lscpu's), in bytes."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes[level] = int(text.rstrip("KMG")) * unit
    if sizes:
        return sizes[max(sizes)]
    out = subprocess.run(["lscpu", "-B"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("L3 cache:"):
            return int(line.split(":")[1].split()[0])
    raise SystemExit("no L3 size found in /sys or lscpu: pass --evict-bytes")


def evicter(size: int) -> Callable[[], None]:
    """Writes and reads ``size`` bytes: whatever the caches held is gone afterwards."""
    buf = torch.zeros(size // 8, dtype=torch.int64)

    def evict() -> None:
        buf.add_(1)
        int(buf[:: 4096 // 8].sum())

    return evict


def cold_times(fn: Callable[[], object], repeats: int, evict: Callable[[], None]) -> list:
    """CPU seconds of ``fn`` per call, the caches evicted before each (not timed)."""
    fn()
    times = []
    for _ in range(repeats):
        evict()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return times


def steps(model: torch.nn.Module) -> dict:
    names, tensors = walk_lists(model, "modules")
    facts = kinds.tensor_facts(tensors)
    every = list(range(len(tensors)))

    def fill() -> None:
        with torch.no_grad():
            execution.init_many_(tensors, LOW, HIGH, SEED)

    def fused() -> None:
        with torch.no_grad():
            assert kinds.init_many_kept(tensors, facts, every, LOW, HIGH, SEED, False)

    def afresh() -> None:
        core.kept.forget()  # the plan made again (its proofs are the process's: kept)
        fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED)

    return {
        "reference": lambda: [reference.new_path(t, LOW, HIGH, SEED) for t in tensors],
        "new plan": afresh,
        "initialize": lambda: fp8_dummy.initialize_dummy_weights(model, LOW, HIGH, SEED),
        "walk": lambda: walk_shape(model),
        "facts": lambda: kinds.facts_match(tensors, facts),
        "init_many_": fill,
        "facts + fill": fused,
        "modules": lambda: modules_only(model),
        "list into an op": lambda: kinds.facts_match(tensors, NO_FACTS),
    }


def measure(size: int, repeats: int, evict: Callable[[], None]) -> dict:
    args = SimpleNamespace(tensors=size)
    cpu = torch.device("cpu")
    model = bench_model.make("tiny", cpu, args)
    count = len(walk_lists(model, "modules")[1])
    identical = bench_model.same_bytes("tiny", model, cpu, args)
    rows = {}
    for name, fn in steps(model).items():
        times = time_calls(lambda _i, fn=fn: fn(), cpu, repeats, clock=time.process_time)
        cold = cold_times(fn, repeats, evict)
        rows[name] = {"median_cpu_s": statistics.median(times), "min_cpu_s": min(times)}
        rows[name]["us_per_tensor"] = rows[name]["median_cpu_s"] / count * 1e6
        rows[name]["cold_median_cpu_s"] = statistics.median(cold)
        rows[name]["cold_us_per_tensor"] = rows[name]["cold_median_cpu_s"] / count * 1e6
        warm, chill = rows[name]["us_per_tensor"], rows[name]["cold_us_per_tensor"]
        print(f"  {count} tensors: {name} {warm:.3f} us, cold {chill:.3f}", file=sys.stderr)
    return {"tensors": count, "identical": identical, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="4576,20000,50000,100000", help="tensors, a list")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--evict", type=float, default=4.0, help="x the L3 size, cold runs")
    parser.add_argument("--evict-bytes", type=int, default=None, help="the L3 size, if given")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    json_out.check(parser, args.json)
    sizes = [int(s) for s in args.sizes.split(",")]
    l3 = args.evict_bytes or l3_bytes()
    evict_size = int(l3 * args.evict)
    print(f"L3 {l3 / 2**20:.0f} MiB; cold: {evict_size / 2**20:.0f} MiB evicted", file=sys.stderr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host's work per tensor, on one thread
    try:
        evict = evicter(evict_size)
        results = [measure(n, args.repeats, evict) for n in sizes]
    finally:
        torch.set_num_threads(threads)
    names = list(results[0]["rows"])
    for key, label in (("us_per_tensor", "warm"), ("cold_us_per_tensor", "cold")):
        print(f"\n{label}: CPU time per tensor (us), one thread; x: over the first size's")
        print(f"{'step':<18}" + "".join(f"{r['tensors']:>16,}" for r in results))
        for name in names:
            first = results[0]["rows"][name][key]
            cells = [r["rows"][name][key] for r in results]
            print(f"{name:<18}" + "".join(f"{c:>9.3f} {c / first:>5.2f}x" for c in cells))
    print("identical: " + ", ".join(str(r["identical"]) for r in results))
    if args.json:
        meta = {**run_meta(), "l3_bytes": l3, "evict_bytes": evict_size}
        json_out.write(args.json, {"meta": meta, "results": results})
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
