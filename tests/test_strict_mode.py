"""Strict mode (FP8_DUMMY_STRICT=1, tests/conftest.py): a test during which a fast path was
refused fails and names the key, since its bytes came from the reference path. Shown on a
byte test of the CUDA path through the emulator whose kernel is broken on purpose
(FP8_DUMMY_FAULT=cuda.init_): it passes without strict mode (the fallback's bytes are right)
and fails with it; a test marked `refusals` is exempt; without a fault strict mode passes.
Each in a child pytest (the fault switch is read once per process). Slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import poison
from ext import emulator

HERE = Path(__file__).resolve()
subject = pytest.mark.skipif(
    os.environ.get("FP8_DUMMY_STRICT_SUBJECT") != "1", reason="run by the tests below in a child"
)


def _cuda_bytes():
    t = poison(torch.empty(30_001, dtype=torch.float8_e4m3fn))
    ref = poison(torch.empty_like(t))
    emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, 9, sm_count=2, max_threads_per_sm=1024)
    emulator.emulate_cuda_init_(ref, -1.0, 1.0, 9, sm_count=2, max_threads_per_sm=1024)
    assert torch.equal(t.view(torch.uint8), ref.view(torch.uint8))


@subject
def test_subject_cuda_bytes():
    _cuda_bytes()


@subject
@pytest.mark.refusals
def test_subject_exempt():
    _cuda_bytes()


def _pytest(k: str, strict: bool, fault: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_DUMMY_")}
    env.update(FP8_DUMMY_STRICT_SUBJECT="1", FP8_DUMMY_STRICT="1" if strict else "0")
    env.update({"FP8_DUMMY_FAULT": "cuda.init_"} if fault else {})
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rf",
        str(HERE),
        "-k",
        k,
    ]
    return subprocess.Popen(cmd, cwd=HERE.parents[1], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


@pytest.mark.slow
def test_strict_mode_fails_a_test_whose_fast_path_was_refused():
    runs = {  # (test, strict, fault): all four at once
        "refused, strict": _pytest("subject_cuda_bytes", True, True),
        "refused, not strict": _pytest("subject_cuda_bytes", False, True),
        "refused, strict, exempt": _pytest("subject_exempt", True, True),
        "proven, strict": _pytest("subject_cuda_bytes", True, False),
    }
    out = {name: (p.communicate(timeout=600)[0], p.returncode) for name, p in runs.items()}
    text, rc = out["refused, strict"]
    assert rc == 1 and "1 failed" in text, text[-3000:]
    assert "FP8_DUMMY_STRICT=1: refused: cuda.init_: " in text, text[-3000:]
    assert "first differing byte" in text
    for name in ("refused, not strict", "refused, strict, exempt", "proven, strict"):
        text, rc = out[name]
        assert rc == 0 and "1 passed" in text, (name, text[-3000:])
