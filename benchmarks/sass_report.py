"""Static SASS report: the CUDA kernels' hot paths counted from nvcc's output, no GPU needed.

    python benchmarks/sass_report.py [--arch sm_90,sm_100] [--json OUT] [--check]

Compiles benchmarks/sass_kernels.cu (the product's kernel templates, the product's nvcc flags)
for each architecture, reads the reference path's two kernels (torch's uniform_ fill of
float16 and its float16 -> float8_e4m3fn copy_) out of the installed torch's libtorch_cuda.so,
and counts per kernel the SASS instructions of its hot path per element, its integer-multiply
pipe load, registers, spills and store width; then a **predicted** H200 time at 128 Mi elements
from the model in docs/cuda.md ("Predicted speed from the SASS"), calibrated on the published
GB200 figures of the reference path. Budgets: benchmarks/sass_budgets.json; --check exits 1 on a
spill or a count over its ceiling (the targets are reported, met or not).

Needs nvcc (CUDA_HOME, else /usr/local/cuda-13.0, else PATH), a CUDA build of torch, and
cuobjdump (the nvidia-cuda-cuobjdump wheel or the toolkit's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import json_out
from sass_hotpath import HotPath, Instr, parse_functions

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "benchmarks" / "sass_kernels.cu"
BUDGETS = ROOT / "benchmarks" / "sass_budgets.json"
N = 128 * 2**20  # elements the prediction is for

# ---- the model (derivation and constants: docs/cuda.md, "Predicted speed from the SASS")
# Per machine: SMs, clock (GHz), HBM bandwidth (TB/s); spec-sheet values.
MACHINES = {
    "H200": {"sms": 132, "ghz": 1.98, "hbm_tbs": 4.8},
    "GB200": {"sms": 148, "ghz": 1.965, "hbm_tbs": 8.0},
}
LANES_ISSUE = 4 * 32  # per SM and clock: 4 schedulers, one warp instruction each
LANES_IMAD = 4 * 16  # per SM and clock: the integer multiply-add (fma-heavy) pipe, half rate
HBM_EFFICIENCY = 0.90  # fraction of the spec bandwidth a streaming kernel reaches (assumed)
# Fraction of the issue / multiply-pipe peak that the kernels reach, fitted so that the model
# gives the published GB200 time of the reference path (see calibrate()).
PUBLISHED_GB200_US = {"reference": 301.0, "older": 665.0}


@dataclass
class Kernel:
    name: str
    arch: str
    symbol: str
    elem_bytes: int  # bytes one element takes in the stores of the hot path
    hbm_bytes: int  # bytes per element to and from memory
    registers: int = 0
    spills_bytes: int = 0
    instructions_per_element: float = 0.0
    imad_per_element: float = 0.0
    store_bytes: int = 0
    elements_per_pass: float = 0.0
    loop: bool = True
    notes: list[str] = field(default_factory=list)


# ---- tools


def tool(name: str) -> str | None:
    """cuobjdump / nvdisasm / nvcc: the cu13 wheel's, the toolkit's, or PATH's."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0"))
    for cand in (purelib / "nvidia" / "cu13" / "bin" / name, cuda_home / "bin" / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def missing_tools() -> str | None:
    """Why the report cannot run here (None: it can)."""
    if tool("nvcc") is None:
        return "no nvcc (set CUDA_HOME or put it on PATH)"
    if tool("cuobjdump") is None:
        return "no cuobjdump (pip install nvidia-cuda-cuobjdump)"
    if tool("nvdisasm") is None:
        return "no nvdisasm, which cuobjdump -sass runs (pip install nvidia-cuda-nvdisasm)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.version.cuda:
        return f"torch {torch.__version__} is not a CUDA build (its libtorch_cuda.so is read)"
    return None


def run(cmd: list[str]) -> str:
    env = dict(os.environ)
    disasm = tool("nvdisasm")  # cuobjdump -sass runs it, from PATH or NVDISASM_PATH
    if disasm is not None:
        env["NVDISASM_PATH"] = str(Path(disasm).parent)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed:\n{out.stderr[-3000:]}")
    return out.stdout + out.stderr


# ---- the kernels

PRODUCT = [
    # name, mangled-name pattern, dtype tag
    ("init_.float8_e4m3fn.linear", r"init_fp8_kernelILNS_4cuda9Fp8FormatE0ELb1E"),
    ("init_.float8_e5m2.linear", r"init_fp8_kernelILNS_4cuda9Fp8FormatE1ELb1E"),
    ("init_.float8_e4m3fn.strided", r"init_fp8_kernelILNS_4cuda9Fp8FormatE0ELb0E"),
    ("init_.float8_e5m2.strided", r"init_fp8_kernelILNS_4cuda9Fp8FormatE1ELb0E"),
    ("init_many_.float8_e4m3fn", r"init_many_fp8_kernelILNS_4cuda9Fp8FormatE0E"),
    ("init_many_.float8_e5m2", r"init_many_fp8_kernelILNS_4cuda9Fp8FormatE1E"),
    ("init_stateless_.linear", r"linear_kernelINS0_6Fp8OutE"),
    ("init_stateless_.general", r"general_kernelINS0_6Fp8OutE"),
]

# The reference path's kernels, by demangled name (docs/cuda.md): the float16 temp's uniform_
# (curand_uniform4, the trivial 1-d store lambda) and copy_ to float8_e4m3fn (what torch's
# launch_vectorized_kernel launches for a dense 2-byte -> 1-byte copy on sm_90 and sm_100).
# Per kernel: name, a word of its mangled name, its forms (contains, endswith[, the torch it
# is only below]) in order, newest torch first: the first form that any symbol takes is the
# torch's, and it must pick exactly one kernel (an older form can still name another kernel in
# a newer torch), bytes per element stored, bytes per element to and from memory.
_TO_E4M3FN = "at::native::ConvertToFloat8E4M3fnOp<c10::Half>"
_TO_E4M3FN_LAMBDA = (
    "at::native::float8_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::Half)#1}"
)
REFERENCE = [
    (
        "reference.uniform_",
        r"distribution_elementwise_grid_stride_kernel",
        [
            (
                [
                    "uniform_and_transform<c10::Half, float,",
                    "templates::cuda::uniform_kernel<",
                    "{lambda(curandStatePhilox4_32_10*)#2}",
                    "distribution_nullary_kernel<c10::Half, float, float4,",
                ],
                "{lambda(int, float)#1})",
            ),
        ],
        2,
        2,
    ),
    (
        "reference.copy_",
        r"vectorized_elementwise_kernel",
        [
            # torch >= 2.14: the functor, 8-wide (since 2.12 torch caps 1-byte outputs at 4 only
            # in builds for CUDA < 12.8; the report needs a cu13 one); the last template
            # argument (use_128b_tws) is true only for sm_107.
            (
                [f"vectorized_elementwise_kernel<8, {_TO_E4M3FN},"],
                f"false>(int, {_TO_E4M3FN}, std::array<char*, 2ul>)",
            ),
            # torch 2.12, 2.13: the same kernel, before use_128b_tws.
            (
                [f"vectorized_elementwise_kernel<8, {_TO_E4M3FN},"],
                f"2ul> >(int, {_TO_E4M3FN}, std::array<char*, 2ul>)",
            ),
            # torch <= 2.11 only: no functor but a lambda of float8_copy_kernel_cuda, 4-wide
            # (1-byte outputs were capped at 4). Its e4m3fn branch comes first, so the float16
            # lambda is #1; in 2.12+ #1 is e5m2's, never to be taken.
            (
                [f"vectorized_elementwise_kernel<4, {_TO_E4M3FN_LAMBDA},"],
                f"2ul> >(int, {_TO_E4M3FN_LAMBDA}, std::array<char*, 2ul>)",
                (2, 12),
            ),
        ],
        1,
        3,
    ),
]


def nvcc_flags(arch: str) -> list[str]:
    import torch

    inc = Path(torch.__file__).parent / "include"
    purelib = Path(sysconfig.get_paths()["purelib"])
    # torch's CUDAExtension flags (setup.py adds -O3 -lineinfo).
    return [
        f"-arch={arch}",
        "-O3",
        "-lineinfo",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-D__CUDA_NO_HALF_OPERATORS__",
        "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__",
        f"-I{ROOT / 'include'}",
        f"-I{ROOT / 'csrc'}",
        f"-I{inc}",
        f"-I{inc / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{purelib / 'nvidia' / 'cu13' / 'include'}",
        "-Xptxas",
        "-v",
    ]


def ptxas_usage(log: str) -> dict[str, tuple[int, int]]:
    """{mangled name: (registers, spill store bytes)} from ptxas -v."""
    usage: dict[str, tuple[int, int]] = {}
    name = None
    spills = 0
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            spills = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            usage[name] = (int(m.group(1)), spills)
            name = None
    return usage


def product_kernels(arch: str, tmp: Path) -> list[Kernel]:
    cubin = tmp / f"kernels_{arch}.cubin"
    log = run([tool("nvcc"), "-cubin", *nvcc_flags(arch), "-o", str(cubin), str(SOURCE)])
    usage = ptxas_usage(log)
    funcs = parse_functions(run([tool("cuobjdump"), "-sass", str(cubin)]))
    kernels = []
    for name, pattern in PRODUCT:
        matches = [f for f in funcs if re.search(pattern, f)]
        if len(matches) != 1:
            raise RuntimeError(f"{name}: {len(matches)} functions match {pattern} for {arch}")
        k = Kernel(name, arch, matches[0], elem_bytes=1, hbm_bytes=1)
        k.registers, k.spills_bytes = usage.get(matches[0], (0, -1))
        measure(k, funcs[matches[0]])
        kernels.append(k)
    return kernels


def libtorch_cuda() -> Path:
    import torch

    return Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"


def symbols_in(lib: Path, word: str) -> list[str]:
    """Mangled names containing `word` in the library's bytes (the kernel registration)."""
    pat = re.compile(rb"_ZN2at6native[A-Za-z0-9_]*" + re.escape(word.encode()) + rb"[A-Za-z0-9_]*")
    found: set[bytes] = set()
    chunk, keep = 64 << 20, 1 << 16
    with open(lib, "rb") as f:
        tail = b""
        while True:
            block = f.read(chunk)
            if not block:
                break
            data = tail + block
            found.update(m.group(0) for m in pat.finditer(data))
            tail = data[-keep:]
    return sorted(s.decode() for s in found)


def demangle(names: list[str]) -> list[str]:
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return out.stdout.splitlines()


def pick_reference(
    name: str,
    forms: list[tuple],
    mangled: list[str],
    demangled: list[str],
    lib: Path | str,
    torch_version: tuple[int, int],
) -> str:
    """The one kernel of the first form (see REFERENCE) for ``torch_version`` that any symbol
    takes; else an error that lists the candidates."""
    # ("_ZN2at6nativeL...": the internal-linkage host stub's name, not the kernel's)
    named = [(m, d) for m, d in zip(mangled, demangled) if "6nativeL" not in m]
    forms = [f[:2] for f in forms if len(f) < 3 or torch_version < f[2]]
    for contains, endswith in forms:
        chosen = [
            (m, d) for m, d in named if all(c in d for c in contains) and d.endswith(endswith)
        ]
        if len(chosen) == 1:
            return chosen[0][0]
        if chosen:
            why = f"{len(chosen)} kernels in {lib} match (want 1)"
            break
    else:
        # Candidates: the kernels closest to a form (most of its parts), how this torch names
        # what the form meant.
        def parts(d: str) -> int:
            return max(sum(c in d for c in cs) + d.endswith(e) for cs, e in forms)

        best = max(map(parts, (d for _, d in named)), default=0)
        chosen = [(m, d) for m, d in named if best and parts(d) == best]
        why = f"0 kernels in {lib} match (want 1); the closest ({best} of a form's parts)"
    listed = sorted(d for _, d in chosen)
    listed = listed[:20] + [f"... {len(listed) - 20} more"] * (len(listed) > 20)
    raise RuntimeError(f"{name}: {why}:\n  " + "\n  ".join(listed))


def reference_kernels(arch: str) -> list[Kernel]:
    import torch

    lib = libtorch_cuda()
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    cuda = tuple(int(x) for x in re.findall(r"\d+", torch.version.cuda or "0.0")[:2])
    if version >= (2, 12) and cuda < (12, 8):  # its copy_ launches 4-wide, not the 8-wide form
        raise RuntimeError(
            f"torch {torch.__version__} (CUDA {torch.version.cuda}): the reference kernels are "
            "read from a CUDA 12.8+ build of torch >= 2.12 (or any build of 2.11)"
        )
    kernels = []
    for name, word, forms, elem_bytes, hbm_bytes in REFERENCE:
        mangled = symbols_in(lib, word)
        sym = pick_reference(name, forms, mangled, demangle(mangled), lib, version)
        text = run([tool("cuobjdump"), "-sass", "-arch", arch, "-fun", sym, str(lib)])
        funcs = parse_functions(text)
        if sym not in funcs:
            raise RuntimeError(f"{name}: no {arch} SASS for it in {lib}")
        res = run([tool("cuobjdump"), "-res-usage", "-arch", arch, "-fun", sym, str(lib)])
        k = Kernel(name, arch, sym, elem_bytes=elem_bytes, hbm_bytes=hbm_bytes)
        m = re.search(r"REG:(\d+) STACK:(\d+)", res)
        k.registers = int(m.group(1)) if m else 0
        # spills: the local-memory stores the SASS holds (torch's ptxas log is not shipped)
        k.spills_bytes = sum(
            int(x.op.split(".")[-1]) // 8 if x.op.split(".")[-1] in ("64", "128") else 4
            for x in funcs[sym]
            if x.base == "STL"
        )
        measure(k, funcs[sym])
        kernels.append(k)
    return kernels


def measure(k: Kernel, code: list[Instr]) -> None:
    n, w, stored, widest, looped = HotPath(code).count()
    k.elements_per_pass = stored / k.elem_bytes
    k.instructions_per_element = n / k.elements_per_pass
    k.imad_per_element = w / k.elements_per_pass
    k.store_bytes = widest
    k.loop = looped


# ---- the model


def model_us(k: Kernel, machine: str, eta: float) -> tuple[float, str]:
    """Predicted time (us) of k over N elements on `machine`, and what bounds it."""
    m = MACHINES[machine]
    clock = m["sms"] * m["ghz"] * 1e3  # SM-cycles per microsecond
    times = {
        "issue": N * k.instructions_per_element / (LANES_ISSUE * clock) / eta,
        "imad": N * k.imad_per_element / (LANES_IMAD * clock) / eta,
        "hbm": N * k.hbm_bytes / (m["hbm_tbs"] * 1e6 * HBM_EFFICIENCY),
    }
    bound = max(times, key=times.get)
    return times[bound], bound


def calibrate(ref_sm100: list[Kernel]) -> tuple[float, dict]:
    """eta such that the model gives the published GB200 reference time (uniform_ + copy_);
    the older path (to(float16) first: one more copy, 3 bytes per element) as the check."""

    def total(eta: float) -> float:
        return sum(model_us(k, "GB200", eta)[0] for k in ref_sm100)

    lo, hi = 0.05, 1.0
    if total(hi) > PUBLISHED_GB200_US["reference"]:
        eta = hi  # even at peak the model is slower than measured: no fit, say so
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if total(mid) > PUBLISHED_GB200_US["reference"] else (lo, mid)
        eta = (lo + hi) / 2
    m = MACHINES["GB200"]
    extra_copy = N * 3 / (m["hbm_tbs"] * 1e6 * HBM_EFFICIENCY)
    older = total(eta) + extra_copy
    info = {
        "eta": eta,
        "uncalibrated_reference_us": total(1.0),
        "reference_us": total(eta),
        "older_path_us": older,
        "older_path_error": older / PUBLISHED_GB200_US["older"] - 1,
        "uncalibrated_error": total(1.0) / PUBLISHED_GB200_US["reference"] - 1,
    }
    return eta, info


# ---- budgets


def check(rows: list[dict], budgets: dict) -> tuple[list[str], list[str], list[str]]:
    """(failures, targets met, targets unmet)."""
    failures, met, unmet = [], [], []
    for r in rows:
        if r["name"].startswith("reference."):
            continue
        if r["arch"] in budgets["spill_free_archs"] and r["spills_bytes"] != 0:
            failures.append(f"{r['name']} {r['arch']}: {r['spills_bytes']} bytes spilled")
        ceiling = budgets["ceiling"].get(r["arch"], {}).get(r["name"])
        if ceiling is not None and r["instructions_per_element"] > ceiling:
            failures.append(
                f"{r['name']} {r['arch']}: {r['instructions_per_element']:.2f} instructions "
                f"per element, over the ceiling {ceiling}"
            )
        t = budgets["target"].get(r["arch"], {}).get(r["name"])
        if t is not None:
            ok = r["instructions_per_element"] <= t
            line = f"{r['name']} {r['arch']}: {r['instructions_per_element']:.2f} <= {t}"
            (met if ok else unmet).append(line)
    for name, want in budgets["target_reference_ratio"].items():
        for r in rows:
            if r["name"] == name and r["arch"] == "sm_90":
                line = f"{name}: predicted {r['reference_ratio']:.2f}x the reference >= {want}x"
                (met if r["reference_ratio"] >= want else unmet).append(line)
    return failures, met, unmet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90,sm_100")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--check", action="store_true", help="exit 1 on a spill or a ceiling exceeded")
    args = ap.parse_args(argv)
    json_out.check(ap, args.json)
    why = missing_tools()
    if why:
        print(f"sass_report: cannot run: {why}", file=sys.stderr)
        return 2
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    kernels: list[Kernel] = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs:
            kernels += product_kernels(arch, Path(tmp))
            kernels += reference_kernels(arch)
    ref_sm100 = [k for k in kernels if k.arch == "sm_100" and k.name.startswith("reference.")]
    if not ref_sm100:
        ref_sm100 = reference_kernels("sm_100")
    eta, cal = calibrate(ref_sm100)
    rows = []
    for k in kernels:
        us, bound = model_us(k, "H200", eta)
        rows.append(
            {
                "name": k.name,
                "arch": k.arch,
                "instructions_per_element": round(k.instructions_per_element, 2),
                "imad_per_element": round(k.imad_per_element, 2),
                "registers": k.registers,
                "spills_bytes": k.spills_bytes,
                "store_bytes": k.store_bytes,
                "elements_per_pass": k.elements_per_pass,
                "predicted_us_h200_128Mi": round(us, 1),
                "predicted_bound": bound,
                "predicted_us_gb200_128Mi": round(model_us(k, "GB200", eta)[0], 1),
            }
        )
    for arch in archs:
        ref = sum(
            r["predicted_us_h200_128Mi"]
            for r in rows
            if r["arch"] == arch and r["name"].startswith("reference.")
        )
        for r in rows:
            if r["arch"] == arch:
                r["reference_ratio"] = round(ref / r["predicted_us_h200_128Mi"], 2)
    budgets = json.loads(BUDGETS.read_text())
    failures, met, unmet = check(rows, budgets)
    ref_us = PUBLISHED_GB200_US["reference"]
    print(f"SASS hot paths; PREDICTED H200 times at {N // 2**20} Mi elements (docs/cuda.md model,")
    print(f"eta = {eta:.3f}, fitted on the published GB200 reference path, {ref_us:.0f} us)")
    cols = ("kernel", "arch", "instr/el", "imad/el", "regs", "spill", "st B", "predicted us")
    print(
        "{:30} {:6} {:>8} {:>7} {:>4} {:>5} {:>4} {:>12} {:>5} {:>9}".format(
            *cols, "bound", "ref ratio"
        )
    )
    for r in rows:
        print(
            f"{r['name']:30} {r['arch']:6} {r['instructions_per_element']:8.2f} "
            f"{r['imad_per_element']:7.2f} {r['registers']:4d} {r['spills_bytes']:5d} "
            f"{r['store_bytes']:4d} {r['predicted_us_h200_128Mi']:12.1f} "
            f"{r['predicted_bound']:>5} {r['reference_ratio']:8.2f}x"
        )
    print(
        f"calibration: at eta = 1 the model predicts the GB200 reference path "
        f"{cal['uncalibrated_reference_us']:.0f} us, published {ref_us:.0f} us "
        f"(error {cal['uncalibrated_error']:+.0%}); fitted, it predicts the older path "
        f"{cal['older_path_us']:.0f} us, published {PUBLISHED_GB200_US['older']:.0f} us "
        f"(error {cal['older_path_error']:+.0%})"
    )
    for line in met:
        print(f"target met (predicted): {line}")
    for line in unmet:
        print(f"target NOT met (predicted): {line}")
    for line in failures:
        print(f"BUDGET EXCEEDED: {line}")
    if args.json:
        json_out.write(args.json, {"kernels": rows, "calibration": cal, "model": model_constants()})
    return 1 if (args.check and failures) else 0


def model_constants() -> dict:
    return {
        "machines": MACHINES,
        "lanes_issue_per_sm_clock": LANES_ISSUE,
        "lanes_imad_per_sm_clock": LANES_IMAD,
        "hbm_efficiency": HBM_EFFICIENCY,
        "published_gb200_us": PUBLISHED_GB200_US,
        "elements": N,
    }


if __name__ == "__main__":
    sys.exit(main())
