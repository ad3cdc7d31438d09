"""scripts/gpu_check.sh without a GPU: its --dry-run runs the same steps in the same order
with the same bookkeeping (GPU tests skip, benchmarks are skipped), writes at most 7 files,
and its one global budget skips what no longer fits instead of overrunning. Slow (each run
starts pytest a few times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEPS = [
    "build",
    "proof",
    "bytes",
    "capture",
    "bench_cuda",
    "bench_model",
    "bench_stateless",
    "bench_trtllm",
    "rest",
]


def run(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), *args, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_dry_run_runs_every_step_and_writes_at_most_7_files(tmp_path):
    proc = run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 7 and {"log.txt", "summary.json"} <= set(files), files
    data = summary(tmp_path)
    assert data["environment"]["dry_run"] is True
    steps = {s["name"]: s for s in data["steps"]}
    assert [s["name"] for s in data["steps"]] == STEPS
    assert all(steps[n]["status"] == "ok" for n in ("build", "proof", "bytes", "capture", "rest"))
    assert all(steps[n]["status"] == "skipped" for n in STEPS[4:8])
    # the proof comes first after the build, and its report is in the summary
    report = data["self_check_report"]
    assert {"cpu.init_", "cuda.init_", "cuda.init_many_", "cuda.init_stateless_"} <= {
        e["path"] for e in report
    }
    assert all(e["proven"] for e in report if e["path"] in ("cpu.init_", "cuda.init_"))
    assert "skipped" in steps["bytes"]["detail"]  # the GPU tests ran and skipped here
    assert "passed" in steps["rest"]["detail"]


def test_budget_skips_what_no_longer_fits(tmp_path):
    # A budget smaller than the first step needs: every step is skipped with the reason,
    # the run ends at once with a failing status, and the summary says so.
    proc = run(tmp_path, "--dry-run", "--budget", "5")
    assert proc.returncode == 1
    data = summary(tmp_path)
    assert data["steps"][0]["name"] == "build" and data["steps"][0]["status"] == "skipped"
    assert "budget" in data["steps"][0]["detail"]


def test_quick_skips_capture_and_rest(tmp_path):
    proc = run(tmp_path, "--dry-run", "--quick")
    assert proc.returncode == 0, proc.stdout[-3000:]
    steps = {s["name"]: s for s in summary(tmp_path)["steps"]}
    assert steps["capture"]["status"] == steps["rest"]["status"] == "skipped"
    assert steps["bytes"]["status"] == steps["proof"]["status"] == "ok"
