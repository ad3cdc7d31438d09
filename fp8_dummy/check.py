"""``python -m fp8_dummy check``: does every path hold here, and how fast. One line per path
and device: its cases (every dtype, bounds class and layout kind, both generator forms, the
contiguous temp, int8/uint8, init_many_, stateless, random_, the >2^31-element split), our bytes
against the reference path's, and its proof's verdicts (a refused key gets the reference's
bytes: both are needed), each path in a child process with a timeout (a fault or a hang is that
path's alone). The verdict comes last; the exit status is 0 only if everything holds."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import warnings
from collections import namedtuple
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from pathlib import Path
from typing import Any

import torch

from ._atomic_file import target_problem, write_file
from ._build import build_info
from ._isolated import run_child
from ._proof import ProofEntry, check_fault_switch, first_difference, self_check_report
from ._verdict_cache import driver_version
from .ops import init_, init_many_, random_
from .reference import contiguous_path, new_path
from .stateless import init_stateless_
from .tensors import E8M0, FLOAT8

E4M3, I8, U8 = torch.float8_e4m3fn, torch.int8, torch.uint8
# (dtype, bounds): the hardware conversion's range, subnormals, overflow (e4m3: saturation or
# NaN), float16's range; int8/uint8 in range, then wrapped or saturated.
BYTES = [(d, b) for d in (*FLOAT8, *(d for d in (E8M0,) if d is not None))
         for b in ((-1.0, 1.0), (-1e-3, 1e-3), (-500.0, 500.0), (0.0, 6e4))]  # fmt: skip
INTS = [(d, b) for d in (I8, U8) for b in ((-3, 3), (-99, 300))]
WIDE = [(d, (-1.0, 1.0)) for d in (torch.half, torch.bfloat16, torch.float, torch.double)]
RANGES = [(I8, (-128, 128)), (U8, (0, 256)), (I8, (-5, 7)), (U8, (3, 200))]  # random_, stateless
LAYOUTS = ("dense", "odd", "gaps", "transposed", "transposed-gaps")
BATCH = [("dense", (1, 1)), ("dense", (1, 255)), ("odd", (1, 65537)), ("gaps", (300, 41)),
         ("transposed", (300, 41))]  # fmt: skip
GROUPS = ("cpu.init_", "cpu.random_", "cuda.init_", "cuda.init_ >2^31", "cuda.init_many_",
          "cuda.init_stateless_", "cuda.random_")  # fmt: skip
BAD, SEED = ("fault", "error", "refused", "differs", "absent"), 1234
F, TF = (False,), (False, True)


# A case: the op, dtype, bounds, layout kind, (rows, cols), contiguous_temp, the generator
# form (a generator in use, `skip` numbers drawn), skip (init_stateless_: the element offset).
Case = namedtuple(
    "Case", "op dtype low high kind shape temp gen skip", defaults=(False, False, 1237)
)


def counts(e: ProofEntry) -> bool:
    """Whether a report entry is a path's verdict, not a search's candidate (misses expected)."""
    return e.path not in ("cpu.uniform_", "cuda.copy_") and ": kernels" not in e.key


def _cases(group: str, device: str) -> Iterator[Case]:
    """A path's cases: the products of the axes below, per op it runs."""
    cpu, op = device == "cpu", group.split(".", 1)[1]
    shape = [(1001, 40) if cpu else (751, 4000)]  # CUDA: three grid steps of an H200
    split = [(2**16 + 1, 64)]  # the CPU's split between threads (2^21 words each at least)
    # op: [(the op run, dtypes and bounds, layouts, temps, generator forms, shapes, skips)]
    families = {
        "init_": [("init_", BYTES + INTS, LAYOUTS, TF, TF, shape, [1237]),
                  ("init_", WIDE, ["gaps"], F, F, shape, [0])]  # torch's own uniform_
        + cpu * [("init_", [(E4M3, (-1.0, 1.0)), (I8, (-99, 300))], LAYOUTS[::2], TF, TF, split,
                  [7]), ("init_many_", BYTES + INTS, ["dense"], TF, F, [(1, 70_001)], [0])],
        "init_many_": [("init_many_", BYTES + INTS, ["dense"], TF, F, shape, [0])],
        "init_stateless_": [("init_stateless_", BYTES + RANGES + WIDE, LAYOUTS, F, F, shape,
                             [0, 99])],  # ints: random bytes in [low, high)
        "random_": [("random_", RANGES, LAYOUTS, F, TF, shape + split * cpu, [1237])],
    }  # fmt: skip
    for o, pairs, *axes in families.get(op, []):
        for (d, (lo, hi)), kind, temp, gen, size, skip in product(pairs, *axes):
            yield Case(o, d, lo, hi, kind, size, temp, gen, skip)
    if op == "init_ >2^31":  # the reference's split in halves, twice; sampled offsets
        if (free := torch.cuda.mem_get_info(device)[0]) < 24 << 30:
            raise RuntimeError(f"skipped: needs 24 GiB of GPU memory free, {free >> 30} free")
        big = (2**21 + 1, 1024)
        yield Case("init_", E4M3, -1.0, 1.0, "dense", big)
        yield Case("init_", E4M3, -1.0, 1.0, "dense", big, gen=True, skip=70_001)
        yield Case("init_", torch.float8_e5m2, -500.0, 500.0, "odd", big, gen=True, skip=4099)
        yield Case("init_", E4M3, -1.0, 1.0, "transposed", big, temp=True, gen=True, skip=333)


def _storage(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _tensor(kind: str, shape: tuple[int, int], dtype: torch.dtype, device: str) -> torch.Tensor:
    """A (rows, cols) tensor of a layout kind, every byte of its storage 0x55."""
    r, c = shape
    full = {"odd": [r * c + 1], "gaps": (r, 2 * c), "transposed": (c, r)}.get(kind, shape)
    base = torch.empty(
        (2 * c, r) if kind == "transposed-gaps" else full, dtype=dtype, device=device
    )
    _storage(base).fill_(0x55)
    views = {"odd": lambda: base[1:].view(r, c), "gaps": lambda: base[:, ::2], "transposed": base.t}
    return views.get(kind, lambda: base[::2].t() if kind == "transposed-gaps" else base)()


def _fill(c: Case, device: str, ours: bool) -> list[torch.Tensor]:
    """The outputs filled by our path or the reference, and the generator's state afterwards."""
    dev = "cpu" if c.op == "init_stateless_" and not ours else device  # the CPU's bytes
    out = [_tensor(c.kind, c.shape, c.dtype, dev)]
    if c.op == "init_many_":  # every size, an odd address, layouts left to init_, float16
        out += [_tensor(k, s, c.dtype, dev) for k, s in BATCH]
        out += [_tensor("odd", (7, 3), torch.half, dev), out[0].view(-1)[5:900]]  # an alias last
    g = torch.Generator(dev).manual_seed(SEED) if c.gen or c.op == "random_" and not ours else None
    if c.gen:
        torch.empty(c.skip, device=dev).uniform_(generator=g)
    lo, hi, t = c.low, c.high, out[0]
    if c.op == "random_":
        random_(t, lo, hi, SEED, generator=g) if ours else t.random_(lo, hi, generator=g)
    elif c.op == "init_stateless_":
        init_stateless_(t, lo, hi, SEED, element_offset=c.skip)
    elif c.op == "init_many_" and ours:
        init_many_(out, lo, hi, SEED, contiguous_temp=c.temp)
    elif ours:
        init_(t, lo, hi, SEED, generator=g, contiguous_temp=c.temp)
    else:
        for t in out:
            (contiguous_path if c.temp else new_path)(t, lo, hi, SEED, generator=g)
    return out + ([g.get_state()] if c.gen else [])


def run_group(device: str, group: str) -> dict[str, Any]:
    """A child's work: every case of ``group`` on ``device``, then this fresh process's
    report (the keys these cases needed). Stops at an error: a CUDA context may be lost."""
    warnings.simplefilter("ignore")  # the refusals are read from the report
    start, done, differ, error, case = time.monotonic(), 0, [], "", "no case yet"
    try:
        for case in _cases(group, device):
            for i, (a, b) in enumerate(zip(_fill(case, device, True), _fill(case, device, False))):
                a, b = _storage(a), _storage(b).to(a.device)
                if not torch.equal(a, b):
                    differ.append(f"{case}: output {i}: {first_difference(a, b)}")
                    break
            done += 1
        torch.cuda.synchronize(device) if device != "cpu" else None
    except Exception as e:  # noqa: BLE001 (reported as this path's)
        error = str(e) if str(e).startswith("skipped") else f"{case}: {type(e).__name__}: {e}"
    keys = [[e.key, e.proven, e.detail] for e in self_check_report() if counts(e)]
    bad = [f"{key}: {why}" for key, proven, why in keys if not proven]
    why = [error] * bool(error) + [f"{len(bad)} of {len(keys)} keys refused: {x}" for x in bad[:1]]
    why += [f"{len(differ)} of {done} cases differ from the reference: {x}" for x in differ[:1]]
    status = "error" if error else "refused" if bad else "differs" if differ else "ok"
    ok = f"{done} cases: the reference's bytes, {len(keys)} keys proven"
    return {"status": "skipped" if error.startswith("skipped") else status, "detail":
            "; ".join(why) or ok, "seconds": round(time.monotonic() - start, 1), "cases": done,
            "differ": differ[:20], "keys": keys}  # fmt: skip


def run_bench(device: str) -> dict[str, Any]:
    """A child's work: init_ and the reference on one float8_e4m3fn tensor (128 Mi elements on
    a GPU, 16 Mi on a CPU): median times, peak scratch (CUDA's allocator), the same bytes."""
    cuda, n = device != "cpu", (128 if device != "cpu" else 16) << 20
    ours, ref = (torch.empty(n, dtype=E4M3, device=device) for _ in TF)
    sync, r = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None), {"numel": n}
    for name, fn in (("init_", lambda: init_(ours, -1.0, 1.0, SEED)),
                     ("reference", lambda: new_path(ref, -1.0, 1.0, SEED))):  # fmt: skip
        times = []
        for _ in range(21 if cuda else 6):  # the first: the proof, the allocator's warm-up
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
        r[f"{name}_ms"], r[f"{name}_scratch"] = statistics.median(times[1:]), None
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
            base, _ = torch.cuda.memory_allocated(device), fn()
            r[f"{name}_scratch"] = torch.cuda.max_memory_allocated(device) - base
    same = torch.equal(ours.view(torch.uint8), ref.view(torch.uint8))
    x = r["reference_ms"] / r["init__ms"]
    mib = [(r[f"{k}_scratch"] or 0) / 2**20 for k in ("init_", "reference")]
    scratch = f", scratch {mib[0]:.1f} vs {mib[1]:.1f} MiB" if cuda else ""
    detail = f"{n >> 20} Mi float8_e4m3fn: init_ {r['init__ms']:.3f} ms, the reference "
    detail += f"{r['reference_ms']:.3f} ms ({x:.2f}x){scratch}, {'the same' if same else 'OTHER'}"
    return {**r, "speedup": x, "status": "ok" if same else "differs", "detail": detail + " bytes"}


def _machine(which: str) -> dict[str, Any]:
    """The build, torch, the FP8_DUMMY_* settings and the devices asked for."""
    info = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    cpu = re.search(r"model name\s*: (.*)", info)
    devices = {} if which == "cuda" else {"cpu": {"name": cpu[1] if cpu else platform.machine(),
               "cores": os.cpu_count(), "threads": torch.get_num_threads(),
               "simd": torch.backends.cpu.get_cpu_capability()}}  # fmt: skip
    for i in range(torch.cuda.device_count() if which != "cpu" else 0):
        p = torch.cuda.get_device_properties(i)
        devices[f"cuda:{i}"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "driver":
                                driver_version(), "SMs": p.multi_processor_count,
                                "GiB": round(p.total_memory / 2**30, 1)}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k.startswith("FP8_DUMMY_")}
    return {"fp8_dummy": build_info(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "python": platform.python_version(),
            "platform": platform.platform(), "devices": devices, "environment": env}  # fmt: skip


def _seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0 (nan, inf, 0 and below are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0: {text!r}")
    return value


def _json_target(parser: argparse.ArgumentParser, name: str) -> Path:
    """--json's file: writable (its directory exists and is writable, it is no directory),
    checked before any check runs (a check takes minutes; its verdict must not be lost at the
    end)."""
    why = target_problem(name)
    if why is not None:
        parser.error(f"argument --json: {why}")
    return Path(name)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """The whole file or none (:func:`fp8_dummy._atomic_file.write_file`)."""
    write_file(path, (json.dumps(data, indent=1) + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fp8_dummy check", description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    parser.add_argument(
        "--bench", action="store_true", help="init_ vs the reference: time, scratch"
    )
    parser.add_argument("--json", metavar="FILE", help="everything, for benchmarks/results/")
    parser.add_argument(
        "--timeout", type=_seconds, default=300.0, help="seconds per path (a child), > 0"
    )
    args = parser.parse_args(argv)
    # Every argument and setting is checked before the first check runs (exit status 2).
    json_path = _json_target(parser, args.json) if args.json is not None else None
    try:
        check_fault_switch()
    except RuntimeError as e:
        parser.error(str(e).splitlines()[0])
    fault = os.environ.get("FP8_DUMMY_FAULT", "").strip()
    m, say = _machine(args.device), lambda *a: print(*a, flush=True)
    b = m["fp8_dummy"]
    say(
        f"fp8_dummy {b['version']} (built with torch {b['torch']}, CUDA kernels: {b['cuda']}); "
        f"torch {m['torch']} (CUDA {m['torch_cuda']}); Python {m['python']}, {m['platform']}"
    )
    for k, v in m["environment"].items():
        say(f"environment: {k}={v}")
    for name, d in m["devices"].items():
        say(f"{name:8} {d['name']}: " + ", ".join(f"{k} {v}" for k, v in d.items() if k != "name"))
    tasks, rows = [(d, g) for d in m["devices"] for g in GROUPS if g[:3] == d[:3]], []

    def report(device: str, path: str, result: dict | None, failure: str = "") -> None:
        r = {"device": device, "path": path, **(result or {"status": "fault", "detail": failure})}
        status, seconds = r["status"], f" ({r['seconds']} s)" if "seconds" in r else ""
        say(f"{device:8} {path:21} {status.upper() if status in BAD else status:8} "
            f"{r['detail']}{seconds}")  # fmt: skip
        rows.append(r)

    with ThreadPoolExecutor(max(1, min(len(tasks), (os.cpu_count() or 2) // 2))) as pool:
        futures = [pool.submit(run_child, f"{__name__}:run_group", t, args.timeout) for t in tasks]
        for t, f in zip(tasks, futures):
            report(*t, *f.result())
    if args.device != "cpu" and "cuda:0" not in m["devices"]:
        absent = "absent" if args.device == "cuda" else "skipped"  # asked for: a failure
        report("cuda", "cuda.*", {"status": absent, "detail": "no CUDA device"})
    say("engines  vllm, sglang, trtllm: each proves itself inside the engine, at its first load")
    for d in m["devices"] if args.bench else ():  # alone, after the checks
        report(d, "bench", *run_child(f"{__name__}:run_bench", [d], args.timeout))
    if fault:  # faults injected on purpose: whatever the paths answered, this is no pass
        why = f"FP8_DUMMY_FAULT={fault}: fault injection is active (a test switch); unset it"
        report("all", "FP8_DUMMY_FAULT", {"status": "fault", "detail": why})
    failed = [f"{r['path']} on {r['device']} ({r['status']})" for r in rows if r["status"] in BAD]
    held = "OK: every path holds on " + ", ".join(m["devices"]) + " (no CUDA device)" * (
        args.device == "all" and "cuda:0" not in m["devices"])  # fmt: skip
    verdict = f"FAILED: {', '.join(failed)}" if failed else held
    m.update(checks=rows, ok=not failed, verdict=verdict, date=time.strftime("%Y-%m-%d %H:%M"))
    unwritten = ""
    if json_path is not None:
        try:  # checked writable at the start; a full disk now still loses only the file
            _write_json(json_path, m)
        except OSError as e:
            unwritten = f"--json {json_path} not written: {e.strerror or e}"
    say(f"verdict: {verdict}")
    if unwritten:
        print(f"python -m fp8_dummy check: {unwritten}", file=sys.stderr)
    return 1 if failed or unwritten else 0
