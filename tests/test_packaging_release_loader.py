"""The release wheel's loader (fp8_dummy/_library.py), without building a wheel: which torch
and CUDA runtime its libraries run with, the errors that name what it supports and the
source build otherwise, and (fresh processes, slow) a package laid out as the wheel with this
checkout's library as its one torch's. The wheel itself: scripts/build_wheels.sh, tested
installed by scripts/test_wheel.sh (CI's torch matrix)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fp8_dummy
from fp8_dummy import _library

ROOT = Path(__file__).resolve().parents[1]
ENTRY = {"built_with": "2.1x.0+cu130", "host": "h.so", "cuda": "c.so"}
WHEEL = {"cuda": "13.0", "cuda_archs": "8.0;9.0a+PTX", "torch": {}}
WHEEL["torch"] = {f"2.{minor}": ENTRY for minor in (11, 12, 13, 14, 15)}
CPU_ONLY = {**WHEEL, "cuda": None, "cuda_archs": None}


@pytest.mark.parametrize(
    "version,cuda",
    [("2.11.0+cu130", "13.0"), ("2.13.0+cpu", None), ("2.15.0", "13.2"), ("2.14.1", "13.0")],
)
def test_a_supported_torch_loads(version, cuda):
    assert _library.problem(WHEEL, version, cuda, None) == ""


def test_a_cpu_only_wheel_loads_on_a_cuda_torch():
    # Built without CUDA on purpose: its operators' CUDA kernels raise, saying so (as a
    # source build without nvcc), tests/test_packaging_build_config.py.
    assert _library.problem(CPU_ONLY, "2.14.1", "13.0", None) == ""


@pytest.mark.parametrize("version", ["2.16.0", "2.10.1+cu128", "3.0.0"])
def test_a_torch_outside_the_range_names_the_supported_ones(version):
    message = _library.problem(WHEEL, version, "13.0", None)
    assert "torch 2.11, 2.12, 2.13, 2.14, 2.15 (CPU and CUDA 13.0 builds)" in message, message
    assert f"this Python has torch {version}" in message
    assert "pip install --no-binary fp8_dummy fp8_dummy" in message and "docs/cpp.md" in message
    cpu_only = _library.problem(CPU_ONLY, version, None, None)
    assert "(CPU code only)" in cpu_only, cpu_only


@pytest.mark.parametrize("torch_cuda", ["12.8", "12.6", "14.0"])
def test_a_cuda_runtime_of_another_major_is_refused(torch_cuda):
    message = _library.problem(WHEEL, "2.13.0+cu128", torch_cuda, None)
    assert f"built for CUDA {torch_cuda}" in message, message
    assert "built with CUDA 13.0" in message and "Install a CUDA 13 build of torch" in message
    assert f"an nvcc of CUDA {torch_cuda}" in message


def test_an_older_cuda_runtime_of_the_same_major_is_refused():
    newer = {**WHEEL, "cuda": "13.1"}
    assert "built for CUDA 13.0" in _library.problem(newer, "2.13.0", "13.0", None)
    assert _library.problem(newer, "2.13.0", "13.1", None) == ""


def test_a_rocm_torch_is_refused():
    message = _library.problem(WHEEL, "2.13.0+rocm7.0", None, "7.0.1")
    assert "a ROCm build (HIP 7.0.1)" in message and "--no-binary fp8_dummy" in message


def test_a_source_build_has_no_manifest():
    # This checkout's package: the library is fp8_dummy/_C itself, no release layout.
    if _library.manifest() is not None:
        pytest.skip("fp8_dummy is a release wheel's here")
    assert _library.files() == [Path(fp8_dummy._C.__file__)]
    assert _library.cuda_library is None


def _wheel_layout(tmp_path: Path, versions: list[str]) -> Path:
    """A copy of the package laid out as the release wheel: this checkout's library as the
    host library of each version in `versions` (major.minor), no CUDA kernels."""
    package = tmp_path / "fp8_dummy"
    shutil.copytree(ROOT / "fp8_dummy", package, ignore=shutil.ignore_patterns("*.so", "__py*"))
    entries = {}
    for mm in versions:
        (package / "_libs" / f"torch-{mm}").mkdir(parents=True)
        shutil.copy2(fp8_dummy.library_path(), package / "_libs" / f"torch-{mm}" / "_C.abi3.so")
        entries[mm] = {"built_with": torch.__version__, "host": f"torch-{mm}/_C.abi3.so"}
    manifest = {"cuda": None, "cuda_archs": None, "torch": entries}
    (package / "_libs" / "manifest.json").write_text(json.dumps(manifest))
    return package


def _import(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    # (An editable install's finder would serve fp8_dummy from the checkout: not here.)
    prelude = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in "
        f"getattr(f, '__name__', '')]; sys.path.insert(0, {str(tmp_path)!r}); "
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=tmp_path
    )


@pytest.mark.slow  # fresh Python processes
@pytest.mark.skipif(torch.version.cuda is not None, reason="the layout has no CUDA kernels")
def test_the_wheel_layout_loads_this_torchs_library(tmp_path):
    mm = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    package = _wheel_layout(tmp_path, ["2.11", mm])
    code = (
        "import torch, fp8_dummy; from fp8_dummy import _library\n"
        "t = torch.empty(100, dtype=torch.float8_e5m2); fp8_dummy.init_(t, -1.0, 1.0, seed=3)\n"
        "g = torch.Generator().manual_seed(3)\n"
        "r = torch.empty(100, dtype=torch.float16).uniform_(-1.0, 1.0, generator=g).to(t.dtype)\n"
        "assert torch.equal(t.view(torch.uint8), r.view(torch.uint8))\n"
        "print(fp8_dummy.library_path()); print(_library.files())\n"
    )
    proc = _import(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    library = str(package / "_libs" / f"torch-{mm}" / "_C.abi3.so")
    assert proc.stdout.splitlines()[-2] == library, proc.stdout
    assert proc.stdout.splitlines()[-1] == f"[PosixPath('{library}')]"


@pytest.mark.slow  # a fresh Python process
def test_the_wheel_layout_refuses_a_torch_it_has_no_library_for(tmp_path):
    _wheel_layout(tmp_path, ["2.11", "2.99"])
    proc = _import(tmp_path, "import fp8_dummy")
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: fp8_dummy: fp8_dummy's wheel has libraries for torch")
    assert "torch 2.11, 2.99 (CPU code only)" in message, message
    assert f"this Python has torch {torch.__version__}" in message
