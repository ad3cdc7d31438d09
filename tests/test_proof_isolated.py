"""A proof run in a child process, its verdict cached on disk (fp8_dummy/_isolated.py, the
mechanism; through the engines: tests/test_engines_isolated.py): a stand-in engine whose
first proof's child crashes, hangs or differs keeps running with its own weights and one
warning; a second start (a fresh process) uses the cached verdict without a child; a
corrupt cache file is ignored; a timeout is not cached. The probes are stand-ins
(tests/helpers/isolated_probes.py) that count the children that ran them. Slow: each start
and each child is a fresh Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fp8_dummy
from fp8_dummy._isolated import run_child

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parent

# A stand-in engine's start: its dummy-weight fill asks the proof mechanism for its path's
# first proof on this device, the probe run in a child, then fills with fp8_dummy if proven,
# else with its own weights (the reference path); every byte must be the reference's.
ENGINE = """
import json, sys, warnings
import torch
import fp8_dummy
from fp8_dummy._isolated import verdict
from fp8_dummy._proof import proven as proof
from fp8_dummy.reference import new_path

probe, marker, timeout, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
key, target = "vllm: stand-in engine " + name, "helpers.isolated_probes:" + probe
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    proven = proof(key, lambda: verdict(key, target, [marker], "cpu", timeout))
    again = proof(key, lambda: verdict(key, target, [marker], "cpu"))
    weight, ref = (torch.empty(300, 41, dtype=torch.float8_e4m3fn) for _ in range(2))
    (fp8_dummy.init_ if proven else new_path)(weight, -1.0, 1.0, 1234)
    new_path(ref, -1.0, 1.0, 1234)
same = torch.equal(weight.view(torch.uint8), ref.view(torch.uint8))
report = [list(e) for e in fp8_dummy.self_check_report() if e.path == "vllm"]
warned = [str(w.message) for w in caught if "self-check refused" in str(w.message)]
print("RESULT", json.dumps({"proven": proven, "again": again, "same": same, "report": report,
                            "warnings": warned}))
"""


def start(tmp_path: Path, probe: str, timeout: float = 120.0, key: str | None = None) -> dict:
    """One start of the stand-in engine (a fresh process), its cache under tmp_path; its
    proof's key names `key` (default: the probe), so that a later start can find a key's
    first probe answering otherwise."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(TESTS))
    env.pop("FP8_DUMMY_FAULT", None)
    marker = tmp_path / "children.txt"
    proc = subprocess.run(
        [sys.executable, "-c", ENGINE, probe, str(marker), str(timeout), key or probe],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    result["children"] = marker.read_text().splitlines() if marker.exists() else []
    return result


def cached(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (tmp_path / "cache/fp8_dummy/proofs").glob("*")]


@pytest.mark.parametrize("probe", ["crashes", "exits", "raises", "differs"])
def test_a_refusing_child_leaves_the_engine_running_with_its_own_weights(tmp_path, probe):
    first = start(tmp_path, probe)
    assert first["proven"] is False and first["again"] is False and first["same"]
    assert len(first["children"]) == 1  # one child, however often the process asks
    assert len(first["warnings"]) == 1, first["warnings"]
    why = {
        "crashes": "killed by signal 11",
        "exits": "exit status 3",
        "raises": "ValueError: the probe could not run",
        "differs": "first differing byte",
    }
    assert why[probe] in first["warnings"][0] and "in a child process" in first["warnings"][0]
    assert [e[2] for e in first["report"]] == [False] and why[probe] in first["report"][0][3]
    (record,) = cached(tmp_path)
    assert record["key"] == f"vllm: stand-in engine {probe}" and why[probe] in record["value"]
    # A second start: the cached verdict, no child, the same one warning naming the file.
    second = start(tmp_path, probe)
    assert second["proven"] is False and second["same"] and len(second["children"]) == 1
    assert len(second["warnings"]) == 1 and "cached at an earlier start" in second["warnings"][0]
    assert not [p for p in (tmp_path / "cache/fp8_dummy/proofs").iterdir() if ".tmp" in p.name]


def test_a_proven_verdict_is_cached_and_the_next_start_runs_no_child(tmp_path):
    first = start(tmp_path, "holds")
    assert first["proven"] and first["again"] and first["same"] and not first["warnings"]
    assert [e[2] for e in first["report"]] == [True]
    second = start(tmp_path, "holds")
    assert second["proven"] and not second["warnings"] and len(second["children"]) == 1
    assert cached(tmp_path)[0]["value"] == ""


def test_a_timeout_refuses_and_is_tried_again_at_the_next_start(tmp_path):
    first = start(tmp_path, "hangs", timeout=30)
    assert first["proven"] is False and first["same"] and len(first["children"]) == 1
    assert "no answer in 30 s" in first["warnings"][0] and "not cached" in first["warnings"][0]
    assert cached(tmp_path) == []  # a busy machine's timeout must not refuse for good
    # The next start asks for the same key, whose child now answers (the machine is no longer
    # busy): proven, in a second child. A cached timeout would refuse it with no child.
    second = start(tmp_path, "holds", key="hangs")
    assert second["proven"] and second["same"] and not second["warnings"], second
    assert len(second["children"]) == 2 and second["children"][1].startswith("holds ")
    assert [r["key"] for r in cached(tmp_path)] == ["vllm: stand-in engine hangs"]


def test_a_child_out_of_memory_is_no_verdict_and_is_tried_again(tmp_path):
    """Lack of memory in the child is no verdict: the reference's bytes, no warning, the key
    unproven in the report, nothing cached, and the next call runs a child again."""
    first = start(tmp_path, "runs_out_of_memory")
    assert first["proven"] is False and first["again"] is False and first["same"]
    assert len(first["children"]) == 2 and not first["warnings"], first
    ((_, _, proven, detail),) = first["report"]
    assert not proven and detail.startswith("unproven:") and "out of memory" in detail, detail
    assert cached(tmp_path) == []


def test_a_corrupt_cache_file_is_ignored_and_replaced(tmp_path):
    start(tmp_path, "holds")
    (path,) = (tmp_path / "cache/fp8_dummy/proofs").iterdir()
    path.write_text('{"key": "vllm: stand-in engine holds", "det')  # a torn write, say
    again = start(tmp_path, "holds")
    assert again["proven"] and len(again["children"]) == 2  # proved again
    assert json.loads(path.read_text())["value"] == ""


def test_run_child_returns_the_result_or_says_why_none_came(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    assert run_child("helpers.isolated_probes:answers", [{"a": [1, 2]}]) == ({"a": [1, 2]}, "")
    result, why = run_child("helpers.isolated_probes:no_such_probe", [])
    assert result is None and "exit status 1" in why and "no_such_probe" in why
    result, why = run_child("helpers.isolated_probes:answers_garbage", [])
    assert result is None and "does not parse" in why and "{not json" in why
    assert fp8_dummy.__version__  # the package the children import is this one


def test_keys_proven_together_share_one_child_until_one_raises(tmp_path, monkeypatch):
    from fp8_dummy import _isolated

    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FP8_DUMMY_FAULT", raising=False)
    monkeypatch.setattr(_isolated, "_together", {})
    marker = tmp_path / "children.txt"
    probes = ["holds", "differs", "raises", "holds"]
    requests = [(f"vllm: together {i}", f"helpers.isolated_probes:{p}", [str(marker)], "cpu")
                for i, p in enumerate(probes)]  # fmt: skip
    _isolated.prove_together(requests)
    runs = [line.split() for line in marker.read_text().splitlines()]
    assert [what for what, _ in runs] == probes[:3]  # none after the one that raised
    assert len({pid for _, pid in runs}) == 1 and int(runs[0][1]) != os.getpid()
    assert _isolated._together == {"vllm: together 0": "", "vllm: together 1": _differs()}
    # The keys' verdicts: the shared child's answers, cached; the rest each in its own child.
    assert _isolated.verdict(*requests[0]) is None
    assert _isolated.verdict(*requests[1]).startswith(_differs() + " (in a child process; cached")
    assert "ValueError: the probe could not run" in _isolated.verdict(*requests[2])
    assert _isolated.verdict(*requests[3]) is None
    assert len(marker.read_text().splitlines()) == 3 + 2 and not _isolated._together
    assert len(cached(tmp_path)) == 4
    # A shared child that dies decides nothing.
    marker.unlink()
    crash = [(f"vllm: crash {i}", f"helpers.isolated_probes:{p}", [str(marker)], "cpu")
             for i, p in enumerate(["crashes", "holds"])]  # fmt: skip
    _isolated.prove_together(crash)
    assert marker.read_text().split()[0] == "crashes" and _isolated._together == {}


def _differs() -> str:
    return "first differing byte at element 3 (byte 0): 0x01, the reference 0x00"
