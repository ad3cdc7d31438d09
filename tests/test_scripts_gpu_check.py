"""scripts/gpu_check.sh without a GPU: its --dry-run prints the plan in order (preflight,
build, `fp8_dummy check`, the strict GPU tests, bench_cuda before any other benchmark) and runs
what runs without a GPU (the preflight, the installed extension's import, `check --device
cpu`, the GPU tests' collection), writing at most 8 files; its budget cuts what does not fit
at the planned durations, and a cut is reported as a cut, never as a failure. Slow (each run
starts Python a few times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ESSENTIAL = ["build", "check", "tests", "bench_cuda"]
STEPS = ["preflight", *ESSENTIAL, "sass_report", "capture", "bench_model", "bench_stateless"]
STEPS += ["bench_trtllm"]


def run(out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_DUMMY_")}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", *args, str(out)],
        env=dict(env, PYTHON=sys.executable), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    steps = {s["name"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}
    return proc, steps


def test_dry_run_plans_every_step_in_order_and_runs_the_cpu_parts(tmp_path):
    proc, steps = run(tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list(steps) == STEPS
    # stdout: the steps in this order, the check's own lines and verdict, the verdict last
    starts = [next(i for i, x in enumerate(lines) if x.startswith(f"== {s}")) for s in STEPS[1:]]
    assert starts == sorted(starts), lines
    assert any(x.startswith("preflight: nvcc: ") for x in lines[: starts[0]])
    assert any(x.startswith("cpu      cpu.init_") and " ok " in x for x in lines), lines
    assert "== check: ok" in proc.stdout and "verdict: OK: every path holds on cpu" in proc.stdout
    assert lines[-1].startswith("gpu_check: verdict: DRY RUN"), lines[-1]
    assert all(steps[s]["status"] == "ok" for s in ("preflight", "build", "check", "tests"))
    assert steps["bench_cuda"]["status"] == "planned" and "collected" in steps["tests"]["detail"]
    # at the planned durations the default budget cuts the last benchmarks: not a failure
    assert steps["bench_trtllm"]["status"] == "cut" and "bench_trtllm cut" in lines[-1]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 8 and {"log.txt", "summary.json", "check_cpu.json"} <= set(files)
    check = json.loads((tmp_path / "check_cpu.json").read_text())
    assert check["ok"] and {r["path"] for r in check["checks"]} >= {"cpu.init_", "cpu.random_"}
    preflight = json.loads((tmp_path / "summary.json").read_text())["preflight"]
    assert {"nvcc", "g++", "ninja", "setuptools", "nproc", "simd", "torch"} <= set(preflight)


def test_a_budget_cut_of_an_essential_step_is_incomplete_not_failed(tmp_path):
    # 120 s at the planned durations: the build fits, the check does not, nothing fails.
    proc, steps = run(tmp_path, "--budget", "120")
    assert proc.returncode == 3, proc.stdout[-3000:]
    assert steps["build"]["status"] == "ok" and steps["check"]["status"] == "cut"
    assert "budget" in steps["check"]["detail"]
    assert not [s for s in steps.values() if s["status"] in ("failed", "timeout")], steps
    assert proc.stdout.splitlines()[-1].startswith("gpu_check: verdict: INCOMPLETE (the budget")


def test_a_budget_smaller_than_the_build_cuts_it(tmp_path):
    proc, steps = run(tmp_path, "--budget", "5")
    assert proc.returncode == 3 and steps["build"]["status"] == "cut", proc.stdout[-3000:]
    assert "INCOMPLETE" in proc.stdout.splitlines()[-1]
