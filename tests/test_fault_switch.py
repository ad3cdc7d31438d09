"""FP8_DUMMY_FAULT mistyped or left on: an unknown fault is an error at the first use of every
operator and of the whole-model fill, naming the valid ones, before any byte is written; and
``python -m fp8_dummy check`` under an active fault reports the fault and fails. Each in a
fresh process (the switch is read once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fp8_dummy import _proof, check

pytestmark = pytest.mark.slow

ATTEMPTS = """
import json, torch, fp8_dummy
E4M3 = torch.float8_e4m3fn
def poisoned(dtype, n=1000):
    t = torch.empty(n, dtype=dtype)
    t.view(torch.uint8).fill_(0x55)
    return t
calls = {
    "init_": lambda t: fp8_dummy.init_(t, -1.0, 1.0, 7),
    "init_many_": lambda t: fp8_dummy.init_many_([t], -1.0, 1.0, 7),
    "init_stateless_": lambda t: fp8_dummy.init_stateless_(t, -1.0, 1.0, 7),
    "random_": lambda t: fp8_dummy.random_(t.view(torch.int8), -3, 3, 7),
    "initialize_dummy_weights": lambda t: fp8_dummy.initialize_dummy_weights(model),
}
out = {}
for name, call in calls.items():
    t = poisoned(E4M3)
    model = torch.nn.Module()
    model.norm = torch.nn.LayerNorm(8)  # filled with a constant first, were nothing checked
    model.weight = torch.nn.Parameter(t, requires_grad=False)
    before = [x.detach().clone().view(torch.uint8) for x in model.state_dict().values()]
    try:
        call(t)
        error = None
    except RuntimeError as e:
        error = str(e)
    after = [x.detach().view(torch.uint8) for x in model.state_dict().values()]
    out[name] = {"error": error, "untouched": all(torch.equal(a, b) for a, b in zip(before, after))}
print("RESULT " + json.dumps(out))
"""


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_DUMMY_")}
    return {**env, **extra}


@pytest.mark.parametrize("fault", ["cpu.int_", "cpu.init_,bogus", "vllm:oom", "CPU.INIT_"])
def test_an_unknown_fault_is_an_error_naming_the_valid_ones_before_any_write(fault):
    proc = subprocess.run(
        [sys.executable, "-c", ATTEMPTS], capture_output=True, text=True, timeout=600,
        env=clean_env(FP8_DUMMY_FAULT=fault),
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    for name, r in json.loads(lines[-1][len("RESULT ") :]).items():
        assert r["error"] is not None, f"{name}: FP8_DUMMY_FAULT={fault} accepted"
        assert f"FP8_DUMMY_FAULT={fault}: unknown fault" in r["error"], (name, r["error"])
        assert "cpu.init_, cpu.init_:oom" in r["error"] and "trtllm" in r["error"], r["error"]
        assert r["untouched"], f"{name} wrote before refusing"


def test_known_faults_with_spaces_around_items_are_accepted():
    proc = subprocess.run(
        [sys.executable, "-c", ATTEMPTS], capture_output=True, text=True, timeout=600,
        env=clean_env(FP8_DUMMY_FAULT=" vllm , cpu.random_:oom,"),
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    assert all(r["error"] is None for r in json.loads(lines[-1][len("RESULT ") :]).values())


def test_check_refuses_an_unknown_fault_before_any_check(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8_dummy", "check", "--device", "cpu", "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=clean_env(FP8_DUMMY_FAULT="cpu.int_"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown fault 'cpu.int_'" in proc.stderr and "cpu.init_" in proc.stderr
    assert "cpu.init_ " not in proc.stdout and not out.exists()  # no check ran, nothing written


def test_check_under_an_active_fault_reports_it_and_fails(monkeypatch, tmp_path):
    """A fault on a path this device's check does not run (vllm) left every row "ok": the
    check must still report the switch and fail."""
    ok = {"status": "ok", "detail": "stand-in", "keys": [], "cases": 1, "differ": []}
    monkeypatch.setattr(check, "run_child", lambda target, args, timeout: (dict(ok), ""))
    # The C++ side reads the switch once per process: read it now, unset, so that this
    # process's later tests run unfaulted; the check itself sees the variable it is given.
    monkeypatch.delenv("FP8_DUMMY_FAULT", raising=False)
    _proof.check_fault_switch()
    monkeypatch.setenv("FP8_DUMMY_FAULT", "vllm")
    out = tmp_path / "check.json"
    assert check.main(["--device", "cpu", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["ok"] is False and "FP8_DUMMY_FAULT" in data["verdict"], data["verdict"]
    (row,) = [r for r in data["checks"] if r["path"] == "FP8_DUMMY_FAULT"]
    assert row["status"] == "fault" and "vllm" in row["detail"]
