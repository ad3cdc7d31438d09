"""The results the tools write, and what their loaders are given, tried as an unlucky user
would: every benchmark's ``--json`` refused before the benchmark runs where it could not be
written at the end, and written whole (the package's one writer); the export benchmark's
temporary checkpoints (gigabytes) removed when a run fails; ``check --json`` written with the
user's modes, and a write that fails at the end (a full disk) one line with the verdict kept,
not a traceback; the engines' load formats given a model_loader_extra_config that is not an
object, refused naming it. Every file is written under the test's temporary directory."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Every benchmark script that takes --json (a new one is tested without being listed).
SCRIPTS = sorted(
    p.stem for p in (ROOT / "benchmarks").glob("*.py") if 'add_argument("--json"' in p.read_text()
)
REQUIRED = {"bench_engines": ["vllm"]}  # a script's required arguments besides --json


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmarks_json_that_cannot_be_written_is_refused_before_it_runs(tmp_path, script):
    target = tmp_path / "missing" / "out.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *REQUIRED.get(script, [])]
        + ["--json", str(target)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-2000:]
    assert "argument --json" in p.stderr and "does not exist" in p.stderr, p.stderr[-2000:]
    assert sorted(tmp_path.iterdir()) == []


def _bench_export():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        path = ROOT / "benchmarks" / "bench_export.py"
        spec = importlib.util.spec_from_file_location("bench_export", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


def test_the_export_benchmark_removes_its_temporary_checkpoints_when_a_run_fails(
    tmp_path, monkeypatch
):
    bench = _bench_export()
    root = tmp_path / "bench"

    def mkdtemp(prefix=""):
        root.mkdir()
        return str(root)

    def failing(*a, **k):
        (Path(a[1])).mkdir()
        (Path(a[1]) / "model-00001-of-00001.safetensors").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bench.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(bench.E, "export", failing)
    with pytest.raises(OSError):
        bench.main(["--layers", "1", "--repeats", "1", "--formats", "bf16", "--memory-gb", "0"])
    assert not root.exists(), "the temporary checkpoints are left behind"


def _quick_check(monkeypatch):
    """check.main with every path's child answered at once ("ok")."""
    from fp8_dummy import check

    monkeypatch.setattr(check, "run_child", lambda *a, **k: ({"status": "ok", "detail": ""}, ""))
    return check


def test_check_json_gets_the_users_modes(tmp_path, monkeypatch):
    check = _quick_check(monkeypatch)
    old = os.umask(0o022)
    try:
        assert check.main(["--device", "cpu", "--json", str(tmp_path / "c.json")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "c.json").stat().st_mode) == 0o644
    assert json.loads((tmp_path / "c.json").read_text())["ok"] is True


def test_a_check_json_that_fails_at_the_end_keeps_the_verdict(tmp_path, monkeypatch, capsys):
    check = _quick_check(monkeypatch)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    assert check.main(["--device", "cpu", "--json", str(tmp_path / "c.json")]) == 1
    out, err = capsys.readouterr()
    assert "verdict: OK" in out
    assert err.strip().splitlines() == [
        f"python -m fp8_dummy check: --json {tmp_path / 'c.json'} not written: "
        "No space left on device"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra", ["zipf:1.2", ["routing", "zipf:1.2"]])
def test_a_load_formats_extra_config_that_is_no_object_is_refused_naming_it(extra):
    from fp8_dummy.engines.vllm.invariant import _initializer

    class Base:
        def __init__(self, load_config):
            self.load_config = load_config

    class Loader(Base):
        __init__ = _initializer(Base)

    class LoadConfig:
        model_loader_extra_config = extra

    with pytest.raises(ValueError, match="model_loader_extra_config is a .*not a JSON object"):
        Loader(LoadConfig())
