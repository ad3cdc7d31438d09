"""``python -m fp8_dummy check`` (fp8_dummy/check.py): on a CPU-only install it proves the CPU
paths, one line per path and the verdict last, exit status 0, the JSON holding every path's
verdict; a broken path (FP8_DUMMY_FAULT) is named and fails it; a path whose child process
crashes or hangs is that path's fault while the others still run. The cases cover every
dtype class, layout kind, generator form and temp of each path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fp8_dummy
from fp8_dummy import _isolated, check

TESTS = Path(__file__).resolve().parent
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only install's answer")


def run_check(*args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_DUMMY_")}
    env.update({"FP8_DUMMY_FAULT": fault} if fault else {})
    cmd = [sys.executable, "-m", "fp8_dummy", "check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)


def path_lines(stdout: str) -> dict[str, str]:
    return {line.split()[1]: line for line in stdout.splitlines() if line.startswith("cpu ")}


@pytest.mark.slow
@cpu_only
def test_a_cpu_only_install_proves_the_cpu_paths(tmp_path):
    out = tmp_path / "check.json"
    proc = run_check("--bench", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("verdict: OK: every path holds on cpu (no CUDA device)"), lines
    paths = path_lines(proc.stdout)
    for path in ("cpu.init_", "cpu.random_", "bench"):
        assert paths[path].split()[2] == "ok", paths
    assert any(x.startswith("cuda ") and "no CUDA device" in x for x in lines), lines
    data = json.loads(out.read_text())
    assert data["ok"] is True and data["verdict"] == lines[-1][len("verdict: ") :]
    assert data["fp8_dummy"] == fp8_dummy.build_info() and data["torch"] == torch.__version__
    assert data["devices"]["cpu"]["simd"] == torch.backends.cpu.get_cpu_capability()
    rows = {(r["device"], r["path"]): r for r in data["checks"]}
    for path in ("cpu.init_", "cpu.random_"):
        row = rows["cpu", path]
        assert row["status"] == "ok" and row["cases"] > 50 and not row["differ"], row
        assert row["keys"] and all(proven for _, proven, _ in row["keys"]), row["keys"]
        assert all(key.startswith(path + ":") for key, _, _ in row["keys"])
    init_keys = " ".join(k for k, _, _ in rows["cpu", "cpu.init_"]["keys"])
    for part in ("generator=given", "generator=seed", "temp=contiguous", "layout=gaps", "Char"):
        assert part in init_keys, part
    if torch.get_num_threads() > 1:
        assert "threads=split" in init_keys
    assert rows["cuda", "cuda.*"]["status"] == "skipped"
    bench = rows["cpu", "bench"]
    assert bench["status"] == "ok" and bench["numel"] == 16 << 20 and bench["init__ms"] > 0


@pytest.mark.slow
def test_a_broken_path_is_named_and_fails_the_check():
    proc = run_check("--device", "cpu", fault="cpu.init_")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    paths = path_lines(proc.stdout)
    assert paths["cpu.init_"].split()[2] == "REFUSED" and "cpu.init_: " in paths["cpu.init_"]
    assert "first differing byte" in paths["cpu.init_"]
    assert paths["cpu.random_"].split()[2] == "ok"  # the other path still ran, and holds
    assert proc.stdout.splitlines()[-1] == (
        "verdict: FAILED: cpu.init_ on cpu (refused), FP8_DUMMY_FAULT on all (fault)"
    )


@pytest.mark.slow
def test_a_crash_or_a_hang_is_that_paths_fault_and_the_others_still_run(monkeypatch, tmp_path):
    # Each path's child runs a stand-in instead: one answers, one crashes (as an illegal
    # address would), one hangs past the timeout. The check's --timeout (3 s) reaches the
    # hanging child only: the others, which must start Python and torch on a loaded machine
    # to answer or crash, get 120 s that they never use, and the hang costs 3 s, not minutes.
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setattr(check, "GROUPS", ("cpu.init_", "cpu.random_", "cpu.hang"))
    marker = str(tmp_path / "children.txt")
    ok = {"status": "ok", "detail": "stand-in", "keys": [], "cases": 1, "differ": []}
    stand_ins = {"cpu.init_": ("answers", [ok]), "cpu.random_": ("crashes", [marker]),
                 "cpu.hang": ("hangs", [marker])}  # fmt: skip

    def run_child(target, args, timeout):
        probe, probe_args = stand_ins[args[1]]
        timeout = timeout if probe == "hangs" else 120
        return _isolated.run_child(f"helpers.isolated_probes:{probe}", probe_args, timeout)

    monkeypatch.setattr(check, "run_child", run_child)
    out = tmp_path / "check.json"
    assert check.main(["--device", "cpu", "--timeout", "3", "--json", str(out)]) == 1
    rows = {r["path"]: r for r in json.loads(out.read_text())["checks"]}
    assert rows["cpu.init_"]["status"] == "ok"
    assert rows["cpu.random_"]["status"] == "fault"
    assert "killed by signal 11" in rows["cpu.random_"]["detail"]
    assert (
        rows["cpu.hang"]["status"] == "fault" and "no answer in 3 s" in rows["cpu.hang"]["detail"]
    )
    assert json.loads(out.read_text())["verdict"].startswith("FAILED: cpu.random_ on cpu (fault)")


def test_the_cases_cover_every_class_of_each_path():
    cases = {g: list(check._cases(g, "cuda:0")) for g in check.GROUPS if g[:4] == "cuda"
             and g != "cuda.init_ >2^31"}  # fmt: skip
    init = cases["cuda.init_"]
    fp8 = [d for d in (check.BYTES + check.INTS) if d[0].is_floating_point]
    assert {c.dtype for c in init} >= {d for d, _ in (check.BYTES + check.INTS)} | {
        torch.int8,
        torch.uint8,
    }
    assert {(c.dtype, (c.low, c.high)) for c in init} >= set(check.BYTES + check.INTS) and len(
        fp8
    ) >= 16
    assert {(c.kind, c.temp, c.gen) for c in init} == {
        (k, t, g) for k in check.LAYOUTS for t in (False, True) for g in (False, True)
    }
    assert {c.dtype for c in init if c.dtype.itemsize > 1} == {d for d, _ in check.WIDE}
    many = cases["cuda.init_many_"]
    assert {(c.dtype, c.temp) for c in many} == {
        (d, t) for d, _ in (check.BYTES + check.INTS) for t in (0, 1)
    }
    stateless = cases["cuda.init_stateless_"]
    assert {c.kind for c in stateless} == set(check.LAYOUTS) and {c.skip for c in stateless} == {
        0,
        99,
    }
    assert {c.dtype for c in stateless} >= {d for d, _ in check.WIDE + check.RANGES}
    assert {(c.dtype, c.low, c.high) for c in cases["cuda.random_"]} == {
        (d, lo, hi) for d, (lo, hi) in check.RANGES
    }
    cpu = list(check._cases("cpu.init_", "cpu"))
    split = [c for c in cpu if c.shape[0] * c.shape[1] >= 2**22]  # two threads' worth of words
    assert {(c.temp, c.gen) for c in split} == {(t, g) for t in (0, 1) for g in (0, 1)}
    assert {c.op for c in cpu} == {"init_", "init_many_"}


def test_searches_do_not_count_as_refusals():
    entry = fp8_dummy.ProofEntry
    assert check.counts(entry("cpu.init_: Float8_e4m3fn simd=avx2", "cpu.init_", False, "x"))
    assert check.counts(entry("cuda.init_many_: cuda:0 ...", "cuda.init_many_", True, ""))
    assert not check.counts(entry("cpu.uniform_: formula=24 simd=avx2", "cpu.uniform_", False, ""))
    assert not check.counts(entry("cuda.copy_: cuda:0 e4m3", "cuda.copy_", False, ""))
    assert not check.counts(entry("cpu.random_: kernels simd=avx2", "cpu.random_", False, ""))


def test_the_check_needs_neither_numpy_nor_the_test_only_extension():
    for name in ("check.py", "_isolated.py", "__main__.py"):
        text = (Path(check.__file__).parent / name).read_text()
        for word in ("numpy", "emulat", "fp8_dummy_internal"):
            assert word not in text, (name, word)


@pytest.mark.parametrize(
    "argv,why",
    [
        (["--timeout", "nan"], "finite number of seconds above 0"),
        (["--timeout", "inf"], "finite number of seconds above 0"),
        (["--timeout=-inf"], "finite number of seconds above 0"),
        (["--timeout", "0"], "finite number of seconds above 0"),
        (["--timeout", "-1"], "finite number of seconds above 0"),
        (["--timeout", "soon"], "not a number of seconds"),
        (["--json", "{tmp}/missing/check.json"], "does not exist"),
        (["--json", "{tmp}"], "is a directory"),
        (["--device", "gpu"], "invalid choice"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_every_argument_is_checked_before_any_check_runs(monkeypatch, tmp_path, capsys, argv, why):
    """A bad argument is argparse's error (exit status 2) before the first check: no child
    started, nothing written (the directory compared before and after)."""
    (tmp_path / "kept.txt").write_bytes(b"untouched")
    started = []
    monkeypatch.setattr(check, "run_child", lambda *a: started.append(a) or (None, "ran"))
    before = sorted((p.name, p.read_bytes() if p.is_file() else b"") for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_:
        check.main(["--device", "cpu", *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    assert exit_.value.code == 2 and not started
    assert why in capsys.readouterr().err
    after = sorted((p.name, p.read_bytes() if p.is_file() else b"") for p in tmp_path.iterdir())
    assert after == before


def test_the_json_is_written_whole_through_a_fresh_temporary_file(monkeypatch, tmp_path):
    ok = {"status": "ok", "detail": "stand-in", "keys": [], "cases": 1, "differ": []}
    monkeypatch.setattr(check, "run_child", lambda *a: (dict(ok), ""))
    monkeypatch.delenv("FP8_DUMMY_FAULT", raising=False)
    out = tmp_path / "check.json"
    assert check.main(["--device", "cpu", "--timeout", "1e-3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["ok"] and [p.name for p in tmp_path.iterdir()] == [out.name]
