"""Which float16 -> FP8 conversion the installed torch's CUDA copy_ runs, per dtype and per
architecture in its libtorch_cuda.so, read from the SASS (no GPU needed):

    python benchmarks/sass_conversions.py [--json OUT]

For each FP8 dtype it takes the dense copy kernel torch launches for a float16 source
(`vectorized_elementwise_kernel<4, ...>`, built for every architecture) and says whether it
holds the hardware conversion (`F2FP.SATFINITE.E4M3` / `.E5M2`: sm_89+ instructions) or
software only. A GPU runs the SASS of the newest architecture in the wheel not newer than its
own (sm_89 runs sm_86's: software). docs/cuda.md, "float16 -> FP8 in torch's copy_", records
the answer per torch version and what fp8_dummy does with it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import json_out
from sass_hotpath import parse_functions
from sass_report import demangle, libtorch_cuda, missing_tools, run, symbols_in, tool

# The dense float16-source copy kernels (4-wide vectors: built for every architecture):
# float8_e4m3fn has its own functor; the other four FP8 dtypes are the four float16 lambdas of
# float8_copy_kernel_cuda (e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu; the SASS does not name which).
HALF_OPS = {
    "float8_e4m3fn": ["ConvertToFloat8E4M3fnOp<c10::Half>, std::array<char*, 2ul>, false>"],
    "other FP8": [
        f"float8_copy_kernel_cuda(at::TensorIteratorBase&)::{{lambda(c10::Half)#{k}}}, "
        "std::array<char*, 2ul>, false>"
        for k in range(1, 5)
    ],
}


def archs_in(lib: Path) -> list[str]:
    listing = run([tool("cuobjdump"), "-lelf", str(lib)])
    return sorted(
        set(re.findall(r"\.(sm_\d+a?)\.cubin", listing)), key=lambda a: int(re.sub(r"\D", "", a))
    )


def facts() -> list[dict]:
    lib = libtorch_cuda()
    mangled = symbols_in(lib, "vectorized_elementwise_kernel")
    # One name per kernel: a kernel with internal linkage ("_ZN2at6nativeL...") is known by
    # that name only; where both exist, the other is the kernel's.
    by_name: dict[str, str] = {}
    for m, d in zip(mangled, demangle(mangled)):
        if d not in by_name or "6nativeL" in by_name[d]:
            by_name[d] = m
    named = [(m, d) for d, m in by_name.items()]
    rows = []
    for dtype, keys in HALF_OPS.items():
        chosen = []
        for key in keys:
            found = [
                m
                for m, d in named
                if key in d and d.startswith("void at::native::vectorized_elementwise_kernel<4,")
            ]
            if len(found) != 1:
                raise RuntimeError(f"{dtype}: {len(found)} float16 copy kernels match {key!r}")
            chosen += found
        for arch in archs_in(lib):
            hw, seen = set(), 0
            for sym in chosen:
                text = run([tool("cuobjdump"), "-sass", "-arch", arch, "-fun", sym, str(lib)])
                code = parse_functions(text).get(sym, [])
                seen += bool(code)
                hw |= {i.op for i in code if i.base == "F2FP" and re.search("E4M3|E5M2", i.op)}
            if seen == len(chosen):
                rows.append(
                    {
                        "dtype": dtype,
                        "arch": arch,
                        "conversion": "hardware" if hw else "software",
                        "instructions": sorted(hw),
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    json_out.check(ap, args.json)
    why = missing_tools()
    if why:
        print(f"sass_conversions: cannot run: {why}", file=sys.stderr)
        return 2
    import torch

    rows = facts()
    print(f"torch {torch.__version__}: float16 -> FP8 copy_ kernels in {libtorch_cuda().name}")
    print("(architectures with this SASS; a GPU runs the newest not newer than its own)")
    for r in rows:
        what = r["conversion"] + (f" ({', '.join(r['instructions'])})" if r["instructions"] else "")
        print(f"{r['dtype']:14} {r['arch']:7} {what}")
    if args.json:
        json_out.write(args.json, {"torch": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
