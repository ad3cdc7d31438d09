"""The proof child imports only the library (fp8_dummy/_isolated.py): it starts isolated from
the caller's working directory and environment (``python -I``, its own working directory, an
import path it is given: where the library, torch and the engine were found), so a ``json.py``
planted in the caller's working directory or in a PYTHONPATH entry set after the start never
runs in it, while the library, torch and the probes still import there. Every planted file is
under the test's temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fp8_dummy._isolated import run_child

ROOT = Path(__file__).resolve().parents[1]


def plant(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two directories each holding a json.py that records that it ran."""
    marker = tmp_path / "ran"
    dirs = []
    for name in ("cwd", "env"):
        d = tmp_path / name
        d.mkdir()
        (d / "json.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
        dirs.append(d)
    return marker, dirs[0], dirs[1]


def test_the_child_imports_nothing_from_the_callers_directory_or_environment(tmp_path, monkeypatch):
    marker, cwd, env = plant(tmp_path)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PYTHONPATH", str(env))
    result, why = run_child("os.path:join", ["a", "b"], timeout=120)
    assert (result, why) == ("a/b", "")
    assert not marker.exists(), f"a planted json.py ran in the child: {marker.read_text()}"


def test_the_childs_path_is_absolute_and_holds_the_library(tmp_path, monkeypatch):
    from fp8_dummy._isolated import import_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")
    monkeypatch.syspath_prepend(str(tmp_path))  # `python -m` puts the directory there so
    path = import_path("fp8_dummy.check:run_group")
    assert all(os.path.isabs(p) for p in path)
    assert str(ROOT) in path and str(tmp_path) not in path


ENGINE_FILL = """
import json, os, sys, torch, fp8_dummy
model = torch.nn.Linear(64, 64).to(torch.float8_e4m3fn)
os.chdir(sys.argv[1])  # a server that moved to a directory others write
os.environ["PYTHONPATH"] = sys.argv[2]
fp8_dummy.initialize_dummy_weights(model)
report = [e for e in fp8_dummy.self_check_report() if e.path.startswith("vllm")]
print("proven" if report and all(e.proven for e in report) else f"refused: {report}")
"""


def test_an_engine_fill_proven_in_a_child_imports_only_the_library(tmp_path):
    """FP8_DUMMY_ISOLATE=all: the whole-model fill's first proof runs in a child."""
    marker, cwd, env = plant(tmp_path)
    environ = dict(os.environ, FP8_DUMMY_ISOLATE="all", XDG_CACHE_HOME=str(tmp_path / "cache"))
    environ["PYTHONPATH"] = str(ROOT)
    p = subprocess.run(
        [sys.executable, "-c", ENGINE_FILL, str(cwd), str(env)], capture_output=True,
        text=True, env=environ, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "proven", p.stdout + p.stderr[-3000:]
    assert not marker.exists(), f"a planted json.py ran in the child: {marker.read_text()}"
    assert list((tmp_path / "cache" / "fp8_dummy" / "proofs").iterdir()), "a child proved it"
