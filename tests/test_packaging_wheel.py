"""The wheel, consumed as users do: built with `pip wheel`, installed into a fresh venv,
imported from a neutral directory; its headers and CMake package used by a CMake
project. Slow (one CPU-only compile of the extension, ~1 min on 2 cores): deselect with
-m "not slow"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch
from helpers.build_util import (
    CONSUMER,
    ROOT,
    cmake_args,
    copy_source_tree,
    run,
    tool_env,
    undefined_python_symbols,
    which,
)

pytestmark = pytest.mark.slow

VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
HEADERS = sorted(
    str(p.relative_to(ROOT / "include")) for p in (ROOT / "include").rglob("*") if p.is_file()
)
CMAKE_FILES = ["fp8_dummyConfig.cmake", "fp8_dummyConfigVersion.cmake"]

# Run by the fresh venv's interpreter, from an empty directory.
SMOKE = r"""
import subprocess, sys
from pathlib import Path
import torch
import fp8_dummy
from fp8_dummy import reference

prefix = Path(sys.prefix).resolve()
paths = {
    "package": fp8_dummy.__file__,
    "library": fp8_dummy.library_path(),
    "include": fp8_dummy.get_include(),
    "cmake": fp8_dummy.get_cmake_dir(),
}
for what, path in paths.items():
    assert prefix in Path(path).resolve().parents, f"{what} not from the venv: {path}"
    print(f"{what}: {path}")
assert paths["library"].endswith(".abi3.so"), paths["library"]
assert (Path(paths["include"]) / "fp8_dummy" / "fp8_dummy.h").is_file()
assert (Path(paths["cmake"]) / "fp8_dummyConfig.cmake").is_file()
cli = subprocess.run([sys.executable, "-I", "-m", "fp8_dummy", "--cmakedir"], check=True,
                     stdout=subprocess.PIPE, text=True).stdout.strip()
assert cli == paths["cmake"], (cli, paths["cmake"])

checked = 0
for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
              torch.float8_e5m2fnuz, torch.float16, torch.bfloat16, torch.float32):
    for transposed in (False, True):
        make = lambda: torch.empty(70, 33, dtype=dtype).t() if transposed else torch.empty(
            33, 70, dtype=dtype)
        ours, expected = make(), make()
        fp8_dummy.init_(ours, -1.0, 1.0, seed=99)
        reference.new_path(expected, -1.0, 1.0, seed=99)
        assert torch.equal(ours.contiguous().view(torch.uint8),
                           expected.contiguous().view(torch.uint8)), (dtype, transposed)
        checked += 1
print(f"smoke ok: {checked} byte comparisons, torch {torch.__version__}")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel . --no-build-isolation` of a clean copy of the checkout, CPU only."""
    src = copy_source_tree(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps"]
    run([*pip, "-w", out], cwd=src, env=tool_env(FP8_DUMMY_CUDA="0"))
    (wheel,) = out.glob("fp8_dummy-*.whl")
    return wheel


@pytest.fixture(scope="module")
def venv_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel (and pip) and torch.

    torch: with FP8_DUMMY_TEST_TORCH_SPEC set (e.g. torch==2.13.0), pip installs it
    (and its dependencies) into the venv. By default, this test's own torch through a
    .pth line naming its site-packages: installing torch's wheel again would add a
    minute and maybe the network. This interpreter's editable install of fp8_dummy is
    not seen: it is a .pth finder, and .pth files of a directory named in a .pth file
    are not run; the venv's own site-packages, holding the wheel, comes first anyway.
    The smoke test checks that every path it uses is inside the venv."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    torch_spec = os.environ.get("FP8_DUMMY_TEST_TORCH_SPEC")
    if torch_spec:
        run([python, "-m", "pip", "install", "-q", torch_spec])
    else:
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        torch_site = Path(torch.__file__).resolve().parents[1]
        parent_sites = [torch_site, Path(sysconfig.get_paths()["purelib"])]
        lines = "\n".join(dict.fromkeys(str(p) for p in parent_sites))
        (Path(site.stdout.strip()) / "_parent_torch.pth").write_text(lines + "\n")
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel])
    return python


def test_wheel_is_abi3_with_cxx_api(wheel: Path, tmp_path: Path) -> None:
    # torch >= 2.6 (pyproject.toml asks for 2.7): built against Python's limited API.
    assert re.fullmatch(rf"fp8_dummy-{re.escape(VERSION)}-cp39-abi3-linux_\w+\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"fp8_dummy-{VERSION}.dist-info/METADATA").decode()
        version_file = zf.read(f"fp8_dummy/share/cmake/fp8_dummy/{CMAKE_FILES[1]}").decode()
        zf.extract("fp8_dummy/_C.abi3.so", tmp_path)
    assert "fp8_dummy/_C.abi3.so" in names
    assert HEADERS and "fp8_dummy/fp8_dummy.h" in HEADERS
    missing = [h for h in HEADERS if f"fp8_dummy/include/{h}" not in names]
    missing += [f for f in CMAKE_FILES if f"fp8_dummy/share/cmake/fp8_dummy/{f}" not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert f'set(PACKAGE_VERSION "{VERSION}")' in version_file
    assert not [n for n in names if n.endswith((".cpp", ".cu", ".cmake.in"))]
    # The TensorRT-LLM opt-in: a .pth line and its shim at the top of site-packages.
    assert {"fp8_dummy_startup.pth", "_fp8_dummy_startup.py"} <= names
    # Tied to the torch it was built with (major.minor), whose C++ ABI it uses.
    major_minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert f"Requires-Dist: torch=={major_minor}.*" in metadata.splitlines(), metadata
    # abi3 in fact: the one Python function the library calls is in the limited API.
    symbols = undefined_python_symbols(tmp_path / "fp8_dummy" / "_C.abi3.so")
    if symbols is not None:
        assert symbols <= {"PyModule_Create2"}, symbols


def test_wheel_in_fresh_venv(venv_python: Path, tmp_path: Path) -> None:
    proc = run([venv_python, "-I", "-c", SMOKE], cwd=tmp_path)
    print(proc.stdout)
    assert "smoke ok" in proc.stdout


def test_wheel_installs_the_trtllm_opt_in(venv_python: Path, tmp_path: Path) -> None:
    """The installed wheel's .pth runs at every start-up of the venv's Python: with
    FP8_DUMMY_TRTLLM=1 a stand-in TensorRT-LLM's loader function is replaced on import,
    without it the stand-in keeps its own (docs/trtllm.md)."""
    from test_engines_trtllm_hook import write_engine

    engine = write_engine(tmp_path / "engine")
    tests = Path(__file__).resolve().parent
    script = (
        f"import sys; sys.path[:0] = [{str(engine)!r}, {str(tests)!r}]\n"
        "import tensorrt_llm._torch.pyexecutor.model_loader as ml\n"
        "print(ml.initialize_dummy_weights.__module__)\n"
    )
    for value, module in (("1", "fp8_dummy.trtllm"), ("0", "oracles.trtllm")):
        env = dict(os.environ, FP8_DUMMY_TRTLLM=value)
        proc = subprocess.run(
            [venv_python, "-I", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0 and proc.stdout.split() == [module], proc.stdout + proc.stderr


@pytest.mark.skipif(which("cmake") is None, reason="cmake not installed")
def test_wheel_cmake_package(venv_python: Path, tmp_path: Path) -> None:
    """find_package(fp8_dummy VERSION) with the wheel's CMake package (no Torch: the
    torch-free target only); it names the wheel's library in fp8_dummy_LIBRARY."""
    script = "import fp8_dummy as f; print(f.get_cmake_dir()); print(f.library_path())"
    cmake_dir, library = run([venv_python, "-I", "-c", script], cwd=tmp_path).stdout.split()
    cmake = [which("cmake"), "-S", CONSUMER, *cmake_args(), f"-Dfp8_dummy_DIR={cmake_dir}"]
    build = tmp_path / "build"
    configure = run([*cmake, "-B", build, f"-DCONSUMER_FP8_DUMMY_VERSION={VERSION}"]).stdout
    assert f"fp8_dummy_LIBRARY={library}" in configure, configure
    # A version the wheel is not compatible with is refused.
    refused = subprocess.run(
        [*cmake, "-B", tmp_path / "refused", "-DCONSUMER_FP8_DUMMY_VERSION=99.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=tool_env(),
    )
    assert refused.returncode != 0 and "99.0" in refused.stdout, refused.stdout
    # The device headers' Philox from host code, once the wheel carries them.
    if (Path(cmake_dir).parents[2] / "include" / "fp8_dummy" / "cuda" / "philox.h").is_file():
        run([which("cmake"), "--build", build, "-j", "2"])
        assert "philox_kat: ok" in run([build / "philox_kat"]).stdout
