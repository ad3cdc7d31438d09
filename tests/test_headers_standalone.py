"""The include/fp8_dummy/cuda/ headers are torch-free: plain g++ host code compiles
against them alone (-Wall -Wextra -Werror) and gets the same answers as the extension."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from ext import test_ops

import fp8_dummy  # noqa: F401  (registers the ops)

pytestmark = pytest.mark.slow  # compiles programs with g++

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = r"""
#include <cstdio>
#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/layout.h"
#include "fp8_dummy/cuda/philox.h"
#include "fp8_dummy/cuda/uniform.h"
using namespace fp8_dummy::cuda;
int main() {
  const Words4 w = philox4x32_10(Words4{{0, 0, 0, 0}}, 0, 0);
  std::printf("%u %u %u %u\n", w.w[0], w.w[1], w.w[2], w.w[3]);
  const UniformParams p = make_uniform_params(-1.0, 1.0);
  const ReferenceGrid g = reference_grid(1000, 132, 2048);
  const Words4 r = philox_words(1234, 5, 8, 0);
  std::printf("%d %lld %llu\n", uniform_half(r.w[0], p), static_cast<long long>(g.threads),
              static_cast<unsigned long long>(g.counter_offset));
  unsigned sum = 0;
  for (unsigned h = 0; h < 65536; ++h) {
    sum = sum * 31 + half_to_fp8(h, Fp8Format::kE5m2, E4m3fnOverflow::kSaturate);
  }
  std::printf("%u\n", sum);
  return 0;
}
"""


def test_headers_compile_without_torch(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "standalone.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "standalone"
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{ROOT / 'include'}",
            str(src),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split(
        "\n"
    )
    assert lines[0].split() == [str(x) for x in test_ops.philox4x32_10([0] * 4, [0] * 2)]
    half, threads, offset = (int(x) for x in lines[1].split())
    assert (threads, offset) == (1024, 4)
    # The same element through the extension's emulator: n = 6 on a 1-SM GPU puts
    # subsequence 5, word 0 at element 5; the generator's offset 8.
    t = torch.empty(6, dtype=torch.float16)
    test_ops.emulate_cuda_init_(t, -1.0, 1.0, 1234, 8, 1, 256)
    assert int(t.view(torch.int16)[5]) & 0xFFFF == half
    table = test_ops.fp8_convert_table(torch.float8_e5m2, True).tolist()
    digest = 0
    for b in table:
        digest = (digest * 31 + b) & 0xFFFFFFFF
    assert int(lines[2]) == digest


C10_PROGRAM = r"""
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e4m3fnuz.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Float8_e5m2fnuz.h>
#include <c10/util/Float8_e8m0fnu.h>
#include <c10/util/Half.h>
#include <cstdio>
#include "fp8_dummy/cuda/fp8_convert.h"
using namespace fp8_dummy::cuda;
template <typename T>
unsigned c10_byte(unsigned h) {
  return T(static_cast<float>(c10::Half(h, c10::Half::from_bits()))).x;
}
int main() {
  int bad[6] = {0, 0, 0, 0, 0, 0};
  for (unsigned h = 0; h < 65536; ++h) {
    const auto sat = E4m3fnOverflow::kSaturate;
    bad[0] += c10_byte<c10::Float8_e4m3fn>(h) != half_to_fp8(h, Fp8Format::kE4m3fn, sat);
    bad[1] += c10_byte<c10::Float8_e4m3fn>(h) !=
              half_to_fp8(h, Fp8Format::kE4m3fn, E4m3fnOverflow::kNan);
    bad[2] += c10_byte<c10::Float8_e5m2>(h) != half_to_fp8(h, Fp8Format::kE5m2, sat);
    bad[3] += c10_byte<c10::Float8_e4m3fnuz>(h) != half_to_fp8(h, Fp8Format::kE4m3fnuz, sat);
    bad[4] += c10_byte<c10::Float8_e5m2fnuz>(h) != half_to_fp8(h, Fp8Format::kE5m2fnuz, sat);
    bad[5] += c10_byte<c10::Float8_e8m0fnu>(h) != half_to_fp8(h, Fp8Format::kE8m0fnu, sat);
  }
  std::printf("%d %d %d %d %d %d\n", bad[0], bad[1], bad[2], bad[3], bad[4], bad[5]);
}
"""


def test_conversions_match_the_installed_c10(tmp_path):
    """c10's Float8 constructors are what torch's copy_ runs in software on CPU and CUDA:
    ours equal them on all 65536 float16 patterns, in exactly one e4m3fn mode."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    from torch.utils.cpp_extension import include_paths

    src = tmp_path / "c10_tables.cpp"
    src.write_text(C10_PROGRAM)
    exe = tmp_path / "c10_tables"
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{ROOT / 'include'}"]
    subprocess.run(
        [cxx, "-std=c++17", "-O1", *includes, str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
        text=True,
    )
    sat, nan, *others = (
        int(x)
        for x in subprocess.run(
            [str(exe)], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    assert others == [0, 0, 0, 0]
    assert (sat == 0) != (nan == 0), (sat, nan)
