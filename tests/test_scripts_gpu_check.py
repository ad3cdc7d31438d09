"""scripts/gpu_check.sh without a GPU: its --dry-run prints the steps it would run, in order
(preflight, build, `fp8_dummy check`, bench_cuda, the strict GPU tests, the other
benchmarks) with the ones its budget would cut at the planned durations, and exits 0 at once:
it runs nothing (PYTHON is a stand-in that records any start) and writes nothing (its OUTDIR,
HOME and the checkout compared before and after); with --wheel its build step lays the
wheel out instead of building. Its arguments are checked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ESSENTIAL = ["build", "check", "bench_cuda", "tests"]
STEPS = ["preflight", *ESSENTIAL, "capture", "bench_model", "bench_stateless", "bench_trtllm"]
STEPS += ["bench_export", "sass_report"]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(root.rglob("*"))}  # fmt: skip


def status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True
    ).stdout


@pytest.fixture(autouse=True)
def stand_in(tmp_path):
    """A PYTHON (and python3 on PATH) that records any start; an empty HOME."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho started >> {tmp_path / 'home' / 'python-started'}\nexit 1\n")
    fake.chmod(0o755)
    (fake.parent / "python3").symlink_to(fake)
    (tmp_path / "home").mkdir()


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The script with a PYTHON that only records that it was started."""
    fake = tmp_path / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_DUMMY_")}
    env.update(PYTHON=str(fake), HOME=str(tmp_path / "home"), PATH=f"{fake.parent}:{env['PATH']}")
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", *args],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path / "home",
    )  # fmt: skip


@pytest.mark.parametrize("outdir", ["missing", "existing", None])
def test_dry_run_prints_the_steps_in_order_and_runs_and_writes_nothing(tmp_path, outdir):
    out = tmp_path / "out"
    if outdir == "existing":
        out.mkdir()
        (out / "log.txt").write_bytes(b"an earlier run's log\n")
    before, git_before = tree(tmp_path), status()
    proc = run(tmp_path, *([str(out)] if outdir else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    starts = [next(i for i, x in enumerate(lines) if x.startswith(f"== {s}:")) for s in STEPS]
    assert starts == sorted(starts), lines
    assert "fp8_dummy check" in lines[starts[2]] and "FP8_DUMMY_STRICT=1" in lines[starts[4]]
    # at the planned durations (measured on the H200) the default budget of 290 s runs every
    # essential step and capture
    assert all("planned" in lines[i] for i in starts[:6]), lines
    assert lines[-1].startswith("gpu_check: verdict: DRY RUN") and "nothing run" in lines[-1]
    assert tree(tmp_path) == before and status() == git_before  # no file, no Python started
    assert not (tmp_path / "home" / "python-started").exists()


def test_dry_run_budget_for_every_step(tmp_path):
    proc = run(tmp_path, "--budget", "395", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [x for x in proc.stdout.splitlines() if x.startswith("== ")]
    assert [x.split(":")[0][3:] for x in lines] == STEPS
    assert all("planned" in x for x in lines) and "the budget would cut" not in proc.stdout


def test_dry_run_shows_what_a_small_budget_cuts_and_still_exits_0(tmp_path):
    proc = run(tmp_path, "--budget", "60", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {x.split(":")[0][3:]: x for x in proc.stdout.splitlines() if x.startswith("== ")}
    assert "planned" in lines["build"] and "cut by the budget" in lines["check"]
    assert "cut check bench_cuda tests" in proc.stdout.splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_dry_run_with_a_wheel_lays_it_out_instead_of_building(tmp_path):
    wheel = tmp_path / "fp8_dummy-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl"
    wheel.write_bytes(b"not opened by a dry run")
    before = tree(tmp_path)
    proc = run(tmp_path, "--wheel", str(wheel), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = next(x for x in proc.stdout.splitlines() if x.startswith("== build:"))
    assert str(wheel) in build and "setup.py" not in build, build
    assert tree(tmp_path) == before and not (tmp_path / "home" / "python-started").exists()


BAD = [["--budget", "x"], ["--budget", "0"], ["--budget"], ["--bogus"], ["a", "b"], ["--wheel"]]
BAD += [["--wheel", "missing.whl"], ["--wheel", "bin/python"]]


@pytest.mark.parametrize("args", BAD)
def test_bad_arguments_are_refused(tmp_path, args):
    args = [str(tmp_path / a) if a.startswith("bin/") else a for a in args]
    proc = run(tmp_path, *args)
    assert proc.returncode == 1 and "usage:" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "home" / "python-started").exists() and not proc.stdout
