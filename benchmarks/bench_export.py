"""``python -m fp8_dummy export`` against writing the same bytes with safetensors from memory.

Two configs, bf16 and fp8-block: a Llama-3.2-1B-shaped one (hidden 2048, 16 layers,
vocabulary 128,256: 1.24 B parameters; ``--layers`` changes the depth) and DeepSeek-V3's real
dimensions with 2 layers (hidden 7168, 256 experts of intermediate 2048, vocabulary 129,280,
the first layer dense: 11.6 B parameters, ~13 GB in fp8-block; ``--deepseek``, skipped by
default on a machine with under 40 GB of free disk). Per config and format, medians of
--repeats runs into a fresh directory of the same disk, each after ``os.sync()`` (no dirty
pages of the run before; what is timed is the write into the page cache, both sides), after
one untimed run of each side, the two sides' runs interleaved in alternating order (export
first, then safetensors first: the disk's rate swings between runs, and on a VM the first
writer after memory was freed can pay seconds of system time for the host backing it again)
and each pair's ratio printed too, with each run's user and system CPU time in the JSON.
Two times per run: into the page cache (what the call takes: on a disk, the bytes are not
on it yet) and on disk (the same plus the ``os.sync()`` after it: the rate a model larger
than the page cache gets):
  export       fp8_dummy.realistic.export.export(...): the logical model made block by
               block, written
  safetensors  the same tensors (made beforehand, held in memory) written by
               safetensors.torch.save_file into shards of the same size (the disk's own rate)
and the export's peak resident memory above its start (sampled every 10 ms) against the
largest tensor. Example:
  python benchmarks/bench_export.py --json benchmarks/results/export_vm2cpu_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

import fp8_dummy
from fp8_dummy.realistic import build_model, logical_model
from fp8_dummy.realistic import export as E
from fp8_dummy.realistic import safetensors_writer as W

sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from measure import cpu_model  # noqa: E402


def llama(layers: int):
    import transformers as tf

    return tf.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True,
    )  # fmt: skip


def deepseek():
    import transformers as tf

    return tf.DeepseekV3Config(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=8, n_group=8, topk_group=4, num_attention_heads=128,
        num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128,
    )  # fmt: skip


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def synced(seconds: float) -> float:
    """``seconds`` plus the time ``os.sync()`` takes now: the run's bytes on disk."""
    t0 = time.perf_counter()
    os.sync()
    return seconds + time.perf_counter() - t0


def timed_call(fn) -> float:
    """Seconds of ``fn()``, after ``os.sync()``."""
    os.sync()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def with_cpu(fn):
    """(``fn()``, (user, system) CPU seconds of the process during it)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    value = fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return value, (r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime)


def peak_during(fn) -> tuple[float, int]:
    """(seconds, peak resident bytes above the start) of ``fn()``."""
    start, peak, done = rss(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], rss() - start)
            time.sleep(0.01)

    t = threading.Thread(target=watch)
    os.sync()  # each run starts with no dirty pages of the one before to write back
    t.start()
    t0 = time.perf_counter()
    try:
        fn()
    finally:
        seconds = time.perf_counter() - t0
        done.set()
        t.join()
    return seconds, peak[0]


class Runs:
    """Each side's timed runs: seconds into the page cache, on disk, CPU (user, system)."""

    def __init__(self) -> None:
        self.ours, self.ours_disk, self.peaks, self.ours_cpu = [], [], [], []
        self.theirs, self.theirs_disk, self.theirs_cpu = [], [], []

    def export(self, src: Path, fmt: str, out: Path, timed: bool = True) -> None:
        run = functools.partial(E.export, src, out, format=fmt, progress=False)
        (s, peak), cpu = with_cpu(lambda: peak_during(run))
        if timed:
            self.ours.append(s)
            self.ours_disk.append(synced(s))
            self.peaks.append(peak)
            self.ours_cpu.append(cpu)
        shutil.rmtree(out)

    def baseline(self, held: list[dict], out: Path, timed: bool = True) -> None:
        from safetensors.torch import save_file

        out.mkdir()

        def write() -> None:
            for j, group in enumerate(held):
                save_file(group, str(out / f"model-{j:05d}.safetensors"))

        s, cpu = with_cpu(lambda: timed_call(write))
        if timed:
            self.theirs.append(s)
            self.theirs_disk.append(synced(s))
            self.theirs_cpu.append(cpu)
        shutil.rmtree(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--formats", default="bf16,fp8-block")
    p.add_argument("--deepseek", action="store_true", help="also DeepSeek-V3 dims, 2 layers")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    p.add_argument("--json", default=None)
    p.add_argument("--memory-gb", type=float, default=6.0, help="the baseline's largest model")
    a = p.parse_args(argv)
    json_out.check(p, a.json)
    root = Path(a.dir or tempfile.mkdtemp(prefix="fp8_dummy_bench_export_"))
    try:  # the temporary exports (gigabytes) go whatever happens
        return _run(a, root)
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)


def _run(a: argparse.Namespace, root: Path) -> int:
    configs = [("llama-1B", llama(a.layers))] + (
        [("deepseek-v3-2L", deepseek())] if a.deepseek else []
    )
    rows = []
    for label, config in configs:
        src = root / f"{label}-config"
        config.save_pretrained(src)
        for fmt in a.formats.split(","):
            lm = logical_model(build_model(config, dtype=torch.bfloat16), 0, format=fmt)
            total = sum(t.nbytes for t in lm.tensors.values())
            largest = max(t.nbytes for t in lm.tensors.values())
            shards = W.shards(list(lm.tensors.values()), E.parse_size("5GB"))
            # the same bytes from memory, written by safetensors (where they fit in memory)
            fits = total <= a.memory_gb * 1e9
            held = [{t.name: lm.fill(t.name, torch.empty(t.shape, dtype=t.dtype)) for t in g}
                    for g in shards] if fits else []  # fmt: skip
            runs = Runs()
            # One untimed run of each side first, then the timed runs in alternating order
            # (export first, then safetensors first): on a VM, the first writer after memory
            # was freed can pay for the host backing it again (seconds of system time, either
            # side), and a fixed order would always charge the same side.
            runs.export(src, fmt, root / f"{label}-{fmt}-warm", timed=False)
            if fits:
                runs.baseline(held, root / f"{label}-{fmt}-st-warm", timed=False)
            for i in range(a.repeats):
                out = root / f"{label}-{fmt}-{i}"
                sides = [functools.partial(runs.export, src, fmt, out)]
                if fits:
                    sides.append(
                        functools.partial(runs.baseline, held, out.with_name(out.name + "-st"))
                    )
                for side in sides if i % 2 == 0 else sides[::-1]:
                    side()
            ours, theirs = runs.ours, runs.theirs
            del held
            row = dict(config=label, format=fmt, bytes=total, largest_tensor=largest,
                       export_s=statistics.median(ours),
                       safetensors_s=statistics.median(theirs) if fits else None,
                       export_peak_rss=max(runs.peaks))  # fmt: skip
            row["ratio"] = row["export_s"] / row["safetensors_s"] if fits else None
            # each run against the baseline run beside it: the disk's swings cancel
            row["pair_ratios"] = [x / y for x, y in zip(ours, theirs)]
            row["export_runs_s"], row["safetensors_runs_s"] = ours, theirs
            # (user, system) CPU seconds of each run: where a slow run's time went
            row["export_runs_cpu_s"], row["safetensors_runs_cpu_s"] = runs.ours_cpu, runs.theirs_cpu
            row["export_GBps"] = total / row["export_s"] / 1e9
            # the same with each run's bytes on disk (its os.sync() timed)
            row["export_on_disk_s"] = statistics.median(runs.ours_disk)
            row["safetensors_on_disk_s"] = statistics.median(runs.theirs_disk) if fits else None
            row["ratio_on_disk"] = (
                row["export_on_disk_s"] / row["safetensors_on_disk_s"] if fits else None
            )
            row["pair_ratios_on_disk"] = [x / y for x, y in zip(runs.ours_disk, runs.theirs_disk)]
            row["export_on_disk_runs_s"] = runs.ours_disk
            row["safetensors_on_disk_runs_s"] = runs.theirs_disk
            rows.append(row)
            print(
                f"{label} {fmt}: {total / 1e9:.2f} GB, export {row['export_s']:.2f} s "
                f"({row['export_GBps']:.2f} GB/s, peak +{row['export_peak_rss'] / 2**20:.0f} MiB, "
                f"largest tensor {largest / 2**20:.0f} MiB), "
                + (
                    f"safetensors from memory {row['safetensors_s']:.2f} s: export/safetensors "
                    f"{row['ratio']:.2f}x (run by run: "
                    f"{', '.join(f'{r:.2f}' for r in row['pair_ratios'])}); on disk "
                    f"{row['export_on_disk_s']:.2f} s vs {row['safetensors_on_disk_s']:.2f} s: "
                    f"{row['ratio_on_disk']:.2f}x (run by run: "
                    f"{', '.join(f'{r:.2f}' for r in row['pair_ratios_on_disk'])})"
                    if fits
                    else "safetensors from memory: does not fit"
                ),
                flush=True,
            )
    if a.json:
        meta = dict(date=datetime.date.today().isoformat(), machine=cpu_model(),
                    cpus=torch.get_num_threads(), torch=torch.__version__, out_dir=str(root),
                    fp8_dummy=fp8_dummy.__version__, command=" ".join(sys.argv))  # fmt: skip
        json_out.write(a.json, dict(meta=meta, rows=rows), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
