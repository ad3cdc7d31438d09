"""benchmarks/sass_report.py: the hot-path counter on hand-written SASS (always), and the report
itself where nvcc, cuobjdump and a CUDA build of torch are present (CI's CUDA compile step):
the JSON format, no spill on sm_90 and sm_100, no count over its ceiling
(benchmarks/sass_budgets.json). Elsewhere that test skips, saying which tool is missing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "sass_report.py"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # sass_report imports sass_hotpath and json_out by name
    spec.loader.exec_module(mod)
    return mod


hp = load("sass_hotpath")
load("json_out")  # sass_report's --json
sr = load("sass_report")


def sass(lines: list[str]) -> list:
    text = "\t\tFunction : k\n" + "\n".join(
        f"        /*{16 * i:04x}*/                   {x} ;" for i, x in enumerate(lines)
    )
    return hp.parse_functions(text)["k"]


def test_hot_path_takes_the_wide_store_branch_and_counts_the_loop_once():
    code = sass(
        [
            "S2R R0, SR_TID.X",  # 0x00 setup, outside the loop
            "IMAD.WIDE.U32 R2, R0, 0x4, RZ",  # 0x10 loop head
            "@P0 BRA 0x60",  # 0x20 to the byte stores
            "STG.E desc[UR4][R2.64], R5",  # 0x30 wide path
            "IADD3 R0, R0, 0x1, RZ",  # 0x40
            "BRA 0xa0",  # 0x50
            "STG.E.U8 desc[UR4][R2.64], R5",  # 0x60 byte path: same bytes, more instructions
            "STG.E.U8 desc[UR4][R2.64+0x1], R6",
            "STG.E.U8 desc[UR4][R2.64+0x2], R7",
            "STG.E.U8 desc[UR4][R2.64+0x3], R8",  # 0x90
            "ISETP.GE.AND P1, PT, R0, R9, PT",  # 0xa0
            "@!P1 BRA 0x10",  # 0xb0 back edge
            "EXIT",
        ]
    )
    n, imad, stored, widest, looped = hp.HotPath(code).count()
    assert looped and stored == 4 and widest == 4
    assert n == 7  # IMAD.WIDE, BRA, STG, IADD3, BRA, ISETP, BRA
    assert imad == 2  # IMAD.WIDE: two cycles of the half-rate pipe


def test_a_call_counts_its_callee_and_a_loopless_kernel_ends_at_exit():
    code = sass(
        [
            "IMAD R1, R0, R0, RZ",  # 0x00
            "CALL.REL.NOINC 0x40",  # 0x10
            "STG.E.128 desc[UR4][R2.64], R4",  # 0x20
            "EXIT",  # 0x30
            "IMAD.HI.U32 R1, R1, R1, RZ",  # 0x40 callee
            "RET.REL.NODEC R20 0x0",
        ]
    )
    n, imad, stored, widest, looped = hp.HotPath(code).count()
    assert not looped and stored == 16 and widest == 16
    assert (n, imad) == (6, 2)  # 4 + the callee's 2


def test_budgets_name_only_reported_kernels():
    budgets = json.loads(sr.BUDGETS.read_text())
    names = {n for n, _ in sr.PRODUCT}
    for table in ("target", "ceiling"):
        for arch, per in budgets[table].items():
            assert arch.startswith("sm_") and set(per) <= names, (table, arch, set(per) - names)
    assert set(budgets["target_reference_ratio"]) <= names
    assert budgets["spill_free_archs"] == ["sm_90", "sm_100"]


def test_the_report_meets_its_ceilings(tmp_path):
    why = sr.missing_tools()
    if why:
        pytest.skip(f"sass_report needs nvcc, cuobjdump and a CUDA torch: {why}")
    out = tmp_path / "sass.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--arch", "sm_90,sm_100", "--json", str(out), "--check"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())["kernels"]
    keys = {"name", "arch", "instructions_per_element", "registers", "spills_bytes"}
    keys |= {"store_bytes", "predicted_us_h200_128Mi"}
    assert all(keys <= set(r) for r in rows)
    want = {n for n, _ in sr.PRODUCT} | {"reference.uniform_", "reference.copy_"}
    for arch in ("sm_90", "sm_100"):
        assert {r["name"] for r in rows if r["arch"] == arch} == want
    assert all(r["spills_bytes"] == 0 for r in rows if not r["name"].startswith("reference."))
    assert all(r["instructions_per_element"] > 0 and r["store_bytes"] >= 1 for r in rows)
    assert "predicted" in proc.stdout and "BUDGET EXCEEDED" not in proc.stdout


def test_a_predicated_store_and_its_else_part_do_not_count_twice():
    # nvcc's if/else: `@!P3 STG.E; @!P3 BRA end` then the else part's byte stores
    code = sass(
        [
            "ISETP.GE.AND P3, PT, R0, R9, PT",  # 0x00 loop head
            "@!P3 STG.E desc[UR4][R2.64], R5",  # 0x10
            "@!P3 BRA 0x70",  # 0x20
            "STG.E.U8 desc[UR4][R2.64], R5",  # 0x30
            "STG.E.U8 desc[UR4][R2.64+0x1], R6",
            "STG.E.U8 desc[UR4][R2.64+0x2], R7",
            "STG.E.U8 desc[UR4][R2.64+0x3], R8",  # 0x60
            "@P0 BRA 0x0",  # 0x70 back edge
            "EXIT",
        ]
    )
    n, imad, stored, widest, looped = hp.HotPath(code).count()
    assert (stored, widest, n) == (4, 4, 4), (stored, widest, n)


# torch's float16 -> float8_e4m3fn copy kernels as c++filt names them, by torch version.
FUNCTOR = "at::native::ConvertToFloat8E4M3fnOp<c10::Half>"  # torch >= 2.12
LAMBDA = "at::native::float8_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::Half)#%d}"


def copy_kernel(width: int, func: str, last: str) -> str:
    """vectorized_elementwise_kernel<width, func, std::array<char*, 2ul>{last}>."""
    return (
        f"void at::native::vectorized_elementwise_kernel<{width}, {func}, std::array<char*, 2ul>"
        f"{last}>(int, {func}, std::array<char*, 2ul>)"
    )


def pick_copy(named: dict[str, str], torch_version: tuple[int, int] = (2, 14)) -> str:
    """The mangled name sass_report takes for reference.copy_ out of {mangled: demangled}."""
    forms = next(forms for name, _, forms, *_ in sr.REFERENCE if name == "reference.copy_")
    names = list(named), list(named.values())
    return sr.pick_reference("reference.copy_", forms, *names, "lib", torch_version)


def test_reference_copy_is_the_kernel_each_torch_launches():
    # torch 2.14: the functor, 8-wide, not its sm_107 variant (true) nor the internal-linkage
    # host stub of the same name; float8_copy_kernel_cuda's lambda #1 is e5m2's there.
    t214 = {f"F{w}{b}": copy_kernel(w, FUNCTOR, b) for w in (4, 8) for b in (", false", ", true")}
    t214 |= {f"L{w}": copy_kernel(w, LAMBDA % 1, ", false") for w in (2, 4, 8)}
    t214["_ZN2at6nativeL_F8"] = t214["F8, false"]
    assert pick_copy(t214) == "F8, false"
    # torch 2.12, 2.13: the same, before the kernel's last template argument.
    t212 = {f"F{w}": copy_kernel(w, FUNCTOR, " ") for w in (2, 4, 8)}
    t212 |= {f"L{w}": copy_kernel(w, LAMBDA % 1, " ") for w in (2, 4, 8)}
    assert pick_copy(t212, (2, 12)) == "F8"
    # a torch 2.12 whose functor kernel is missing: its lambda #1 (e5m2's) is never taken
    with pytest.raises(RuntimeError, match="0 kernels"):
        pick_copy({k: v for k, v in t212.items() if k.startswith("L")}, (2, 12))
    # torch 2.11: no functor; e4m3fn's is lambda #1 (of 5), 4-wide (1-byte outputs capped at 4).
    t211 = {f"L{w}#{k}": copy_kernel(w, LAMBDA % k, " ") for w in (2, 4, 8) for k in range(1, 6)}
    assert pick_copy(t211, (2, 11)) == "L4#1"


def test_reference_copy_fails_listing_the_candidates():
    t214 = {
        "F4": copy_kernel(4, FUNCTOR, ", false"),
        "F8 sm_107": copy_kernel(8, FUNCTOR, ", true"),
    }
    with pytest.raises(RuntimeError, match="0 kernels in lib match") as e:
        pick_copy(t214)
    assert copy_kernel(8, FUNCTOR, ", true") in str(e.value)
    t214["F8"] = t214["F8 again"] = copy_kernel(8, FUNCTOR, ", false")
    with pytest.raises(RuntimeError, match="2 kernels in lib match") as e:
        pick_copy(t214)
    assert copy_kernel(8, FUNCTOR, ", false") in str(e.value)
