"""Timing, peak-scratch and machine helpers shared by the benchmarks and the demo."""

from __future__ import annotations

import datetime
import platform
import re
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

import torch


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's "AMD EPYC ..."), else the platform's (on Linux
    platform.processor() is only "x86_64")."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


class Peak:
    """Peak extra memory (bytes) while the `with` block ran; None where unmeasurable."""

    bytes: int | None = None


@contextmanager
def peak_scratch(device: torch.device) -> Iterator[Peak]:
    """CUDA: max_memory_allocated above the start. CPU (Linux): the process's resident
    high-water mark, reset at the start (/proc/self/clear_refs), above the start."""
    peak = Peak()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        yield peak
        torch.cuda.synchronize(device)
        peak.bytes = torch.cuda.max_memory_allocated(device) - start
        return
    start = _proc_status_kib("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        start = None
    yield peak
    end = _proc_status_kib("VmHWM")
    if start is not None and end is not None:
        peak.bytes = max(0, end - start) * 1024


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(
    fn: Callable[[int], object], device: torch.device, repeats: int, warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:  # fmt: skip
    """Seconds per call of fn(i) (i = repeat index, e.g. to rotate buffers).
    CUDA: events around each call; CPU: ``clock`` (wall time; time.process_time: CPU time)."""
    for i in range(warmup):
        fn(i)
    sync(device)
    times = []
    for i in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = clock()
            fn(i)
            times.append(clock() - t0)
    return times


def run_meta() -> dict:
    """What a result file records of its run: the date (UTC), torch, platform, CPU, argv."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "argv": sys.argv[1:],
    }


def summarize(times: list[float]) -> dict[str, float]:
    """Median and spread (min, max, interquartile range) in seconds."""
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "iqr_s": q[2] - q[0],
        "repeats": len(times),
    }
