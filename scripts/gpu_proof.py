"""The proof step of scripts/gpu_check.sh: "which paths hold here", in one call.

Runs every path that replaces a reference without being asked, once per kind of call, so
that each proves itself against torch on this machine (docs/contract.md, "Proof before
use"): init_ (seed and generator forms; dense, odd-address and gapped layouts; small and
large bounds, i.e. the hardware and the software FP8 conversion; every FP8 dtype),
init_many_ (a batch per dtype), init_stateless_ (linear and general kernels), random_,
and TensorRT-LLM's contiguous temp (contiguous_temp=True: FP8, int8 and uint8, row-major,
transposed and gapped; init_ and init_many_);
on every CUDA device, and on the CPU. Without a GPU (gpu_check.sh --dry-run) the CUDA
launchers' proofs run through the emulator instead. Prints fp8_dummy.self_check_report()
and stores it in SUMMARY (summary.json) under "self_check_report"; exits 1 if a key was
refused (the run goes on: refused keys are filled by the reference).

Usage: python scripts/gpu_proof.py SUMMARY_JSON
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch

import fp8_dummy

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
FP8 += [torch.float8_e8m0fnu] if hasattr(torch, "float8_e8m0fnu") else []
BOUNDS = [(-1.0, 1.0), (-1e-3, 1e-3), (-500.0, 500.0)]  # hardware conversion, subnormals, wide


def layouts(device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    base = torch.empty(3001, 40, dtype=dtype, device=device)
    return [base, base.view(-1)[1:], base[:, ::2]]  # dense, odd address, gaps


def run_device(device: str) -> None:
    for dtype in FP8:
        for low, high in BOUNDS:
            for t in layouts(device, dtype):
                fp8_dummy.init_(t, low, high, seed=1234)
                g = torch.Generator(device=device).manual_seed(7)
                fp8_dummy.init_(t, low, high, generator=g)
        fp8_dummy.init_many_([torch.empty(n, dtype=dtype, device=device) for n in (5, 70_001)])
        for t in layouts(device, dtype)[::2]:
            fp8_dummy.init_stateless_(t, -1.0, 1.0, seed=3)
    for dtype, low, high in ((torch.int8, -128, 128), (torch.uint8, 0, 256)):
        fp8_dummy.random_(torch.empty(70_001, dtype=dtype, device=device), low, high, seed=3)
    run_contiguous_temp(device)


def run_contiguous_temp(device: str) -> None:
    """TensorRT-LLM's temp (its bounds per dtype), every layout kind of its keys."""
    for dtype, low, high in ((torch.float8_e4m3fn, -3.0, 3.0), (torch.int8, -3.0, 3.0)):
        for t in layouts(device, dtype) + [torch.empty(40, 3001, dtype=dtype, device=device).t()]:
            fp8_dummy.init_(t, low, high, seed=0, contiguous_temp=True)
        fp8_dummy.init_many_(
            [torch.empty(n, dtype=dtype, device=device) for n in (5, 70_001)], low, high, 0,
            contiguous_temp=True,
        )  # fmt: skip
    fp8_dummy.init_(torch.empty(3001, 40, dtype=torch.uint8, device=device), 0.0, 64.0, 0,
                    contiguous_temp=True)  # fmt: skip


def run_emulated() -> None:
    # The emulators are in the test extension (tests/ext/, built by gpu_check.sh's build step).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from ext import emulator

    sm, mt = emulator.H200
    for form in (False, True):
        t = torch.empty(3001, 40, dtype=torch.float8_e4m3fn)
        emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, 5, sm_count=sm, generator_form=form)
    emulator.emulate_proven_cuda_init_many_(
        [torch.empty(n, dtype=torch.float8_e4m3fn) for n in (5, 70_001)], -1.0, 1.0, 5, sm_count=sm
    )
    for t in layouts("cpu", torch.float8_e4m3fn)[::2]:
        emulator.emulate_proven_cuda_init_stateless_(t, -1.0, 1.0, 3, sm_count=sm)
    t = torch.empty(40, 3001, dtype=torch.int8).t()
    emulator.emulate_proven_cuda_init_(
        t, -3.0, 3.0, 0, sm_count=sm, saturate_e4m3fn=False, contiguous_temp=True
    )
    del mt


def main() -> int:
    summary = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_device("cpu")
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                run_device(f"cuda:{i}")
            torch.cuda.synchronize()
        else:
            print("proof: no GPU, the CUDA launchers' proofs run on the emulator")
            run_emulated()
    report = fp8_dummy.self_check_report()
    for e in report:
        verdict = "proven " if e.proven else "REFUSED"
        print(f"proof: {verdict} {e.key}" + (f": {e.detail}" if e.detail else ""))
    for w in caught:
        if "self-check refused" not in str(w.message):
            print(f"proof: warning: {w.message}")
    refused = [e for e in report if not e.proven and not e.path.startswith("cpu.uniform_")]
    refused = [e for e in refused if e.path != "cpu.random_" or "kernels" not in e.key]
    print(f"proof: {len(report)} keys, {len(refused)} refused")
    data = json.load(open(summary)) if os.path.exists(summary) else {"steps": []}
    data["self_check_report"] = [e._asdict() for e in report]
    with open(summary, "w") as f:
        json.dump(data, f, indent=1)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
