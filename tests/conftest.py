from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# tests/ on the path: the test modules import conftest, oracles/ and helpers/.
sys.path.insert(0, str(Path(__file__).parent))
# The tests read nothing outside the repository: the architecture facts' disk cache is off
# for them and their children (tests/test_realistic_facts_cache.py turns it on, in tmp_path).
os.environ["FP8_DUMMY_FACTS_CACHE"] = "0"

FP8_DTYPES = [
    getattr(torch, name)
    for name in (
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    )
    if hasattr(torch, name)
]
WIDE_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# The last pair: high rounds to half 65472, so the CUDA path's float16 range (65472 + 48 in
# half precision) is inf and every CUDA value overflows; the CPU's float range stays finite.
BOUNDS = [
    (-1e-3, 1e-3),
    (-1.0, 1.0),
    (-500.0, 500.0),
    (0.0, 60000.0),
    (0.25, 0.25),
    (-48.0, 65456.0),
]


def needs_gpu_memory(gib: int):
    """Skip unless cuda:0 exists and has at least `gib` GiB (for > 2^30-element tests)."""
    enough = (
        torch.cuda.is_available()
        and torch.cuda.get_device_properties(0).total_memory >= gib * 2**30
    )
    return pytest.mark.skipif(not enough, reason=f"needs a GPU with {gib} GiB")


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def cpu_formula() -> dict:
    """Which CPU uniform_ formula the installed torch uses (docs/contract.md R4)."""
    formula = "24bit" if torch_version() >= (2, 12) else "11bit"
    # torch's AVX2/AVX512 kernels contract the multiply-add into an FMA, the
    # DEFAULT (non-vectorized) build does not.
    fma = torch.backends.cpu.get_cpu_capability() != "DEFAULT"
    # CPU copy_ to float8_e4m3fn saturates from torch 2.13 on (docs/contract.md R5).
    return {"formula": formula, "fma": fma, "saturate_e4m3fn": torch_version() >= (2, 13)}


def cpu_reference_refuses(dtype: torch.dtype, low: float, high: float) -> bool:
    """Whether torch's CPU uniform_ on the float16 values refuses these bounds: the 11-bit
    kernel (torch <= 2.11) checks half(high) - half(low), computed in half precision, against
    65504, and [-48, 65456] overflows it (65472 + 48 rounds to inf) though high - low does
    not. Later kernels compute in float and take them."""
    import numpy as np

    if cpu_formula()["formula"] != "11bit" or dtype.itemsize > 2 or dtype == torch.bfloat16:
        return False
    with np.errstate(over="ignore"):
        diff = np.float16(np.float32(np.float16(high)) - np.float32(np.float16(low)))
    return bool(np.isinf(diff))


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """All bytes of t's storage (including those outside a view)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def poison(t: torch.Tensor, byte: int = 0x55) -> torch.Tensor:
    """Fill every byte of t's storage with `byte` so unwritten bytes show up."""
    storage_bytes(t).fill_(byte)
    return t


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """Logical-order bytes of t (contiguous copy, so layouts compare elementwise)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)


# Strict mode, FP8_DUMMY_STRICT=1 (scripts/gpu_check.sh sets it for the GPU tests): a test
# during which a fast path was refused fails, naming the key, since its bytes then came from
# the reference path and prove nothing about our kernel. Tests that provoke refusals on
# purpose are marked `refusals`. A key refused earlier in the session fails that test only.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if os.environ.get("FP8_DUMMY_STRICT") != "1" or item.get_closest_marker("refusals"):
        yield
        return
    import fp8_dummy
    from fp8_dummy.check import counts

    before = {e.key for e in fp8_dummy.self_check_report()}
    outcome = yield
    new = [e for e in fp8_dummy.self_check_report() if e.key not in before and counts(e)]
    refused = [f"{e.key}: {e.detail}" for e in new if not e.proven]
    if refused and outcome.excinfo is None:
        why = "; ".join(refused)
        fail = pytest.fail.Exception(f"FP8_DUMMY_STRICT=1: refused: {why}", pytrace=False)
        outcome.force_exception(fail)
