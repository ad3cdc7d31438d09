"""fp8_dummy built and installed as users do, in a fresh venv that has torch: a plain
`pip install .` (build isolation on, dependencies resolved) must compile against that torch
and leave it as it was; the package is then used from a neutral directory, its headers and
CMake package by a CMake project. A plain `pip wheel .` gives the wheel whose contents are
checked. A venv without torch is refused before anything is compiled; the sdist carries
the build backend. Slow (a CPU-only compile of the extension, ~1 min on 2 cores; the second
build takes ccache's objects where ccache is installed; pip fetches setuptools, wheel and
ninja for the isolated builds): deselect with -m "not slow".
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from helpers.build_util import (
    CONSUMER,
    ROOT,
    cmake_args,
    copy_source_tree,
    extension_test_ops,
    run,
    tool_env,
    undefined_python_symbols,
    which,
)

pytestmark = pytest.mark.slow

VERSION_FILE = (ROOT / "fp8_dummy" / "_version.py").read_text()
VERSION = re.search(r'^__version__ = "([^"]+)"', VERSION_FILE, re.M)[1]
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
info = fp8_dummy.build_info()
assert info == {"version": fp8_dummy.__version__, "torch": torch.__version__.split("+")[0],
                "cuda": False}, info
print(f"smoke ok: {checked} byte comparisons, torch {torch.__version__}, {info}")
"""


def _pip(python: Path, *args, **kwargs) -> subprocess.CompletedProcess:
    return run([python, "-m", "pip", "--disable-pip-version-check", *args], **kwargs)


def _torch_of(python: Path) -> str:
    """The version and place of the torch `python` imports."""
    code = "import torch; print(torch.__version__, torch.__file__)"
    return run([python, "-I", "-c", code]).stdout.strip()


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with torch and pip only.

    torch: with FP8_DUMMY_TEST_TORCH_SPEC set (e.g. torch==2.13.0), pip installs it
    (and its dependencies) into the venv. By default, this test's own torch through a
    .pth line naming its site-packages: installing torch's wheel again would add a
    minute and maybe the network (pip sees it as installed all the same, and the venv's
    own old setuptools goes, so that torch's setuptools>=77 is met as an install of torch
    meets it). This interpreter's editable install of fp8_dummy is not seen: it is a .pth
    finder, and .pth files of a directory named in a .pth file are not run; the venv's own
    site-packages, holding fp8_dummy once installed, comes first anyway. The smoke test
    checks that every path it uses is inside the venv."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    torch_spec = os.environ.get("FP8_DUMMY_TEST_TORCH_SPEC")
    if torch_spec:
        _pip(python, "install", "-q", torch_spec)
    else:
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        torch_site = Path(torch.__file__).resolve().parents[1]
        parent_sites = [torch_site, Path(sysconfig.get_paths()["purelib"])]
        lines = "\n".join(dict.fromkeys(str(p) for p in parent_sites))
        (Path(site.stdout.strip()) / "_parent_torch.pth").write_text(lines + "\n")
        _pip(python, "uninstall", "-q", "-y", "setuptools")
    return python


def _build_env(src: Path) -> dict[str, str]:
    # CPU only. ccache (torch's build calls it where it is installed) keys paths under the
    # copy relative to it and leaves the build directory out, so the second build of this
    # module reuses the first one's objects.
    return tool_env(FP8_DUMMY_CUDA="0", CCACHE_BASEDIR=str(src), CCACHE_NOHASHDIR="1")


@pytest.fixture(scope="module")
def venv_python(fresh_venv: Path, tmp_path_factory: pytest.TempPathFactory):
    """The fresh venv after a plain `pip install .` of a clean copy of the checkout (build
    isolation on, dependencies resolved as pip does), which must build against the venv's
    torch and leave it as it was; and the build log."""
    src = copy_source_tree(tmp_path_factory.mktemp("src"))
    before = _torch_of(fresh_venv)
    log = _pip(fresh_venv, "install", "-v", ".", cwd=src, env=_build_env(src)).stdout
    assert _torch_of(fresh_venv) == before, log[-4000:]
    return fresh_venv, log


@pytest.fixture(scope="module")
def wheel(venv_python, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain `pip wheel .` in the same venv (--no-deps: pip wheel would otherwise also
    download a wheel of every dependency, torch's included)."""
    python, _ = venv_python
    src = copy_source_tree(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheelhouse")
    before = _torch_of(python)
    _pip(python, "wheel", ".", "--no-deps", "-q", "-w", out, cwd=src, env=_build_env(src))
    assert _torch_of(python) == before
    (wheel,) = out.glob("fp8_dummy-*.whl")
    return wheel


def test_pip_install_built_against_the_installed_torch(venv_python) -> None:
    python, log = venv_python
    assert f"fp8_dummy: building against the installed torch {torch.__version__}" in log, log
    code = "import importlib.metadata as m; print(m.version('fp8_dummy'))"
    assert run([python, "-I", "-c", code]).stdout.strip() == VERSION


def test_no_torch_stops_before_compiling(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    src = copy_source_tree(tmp_path / "src")
    proc = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "wheel", ".", "--no-deps", "-w", tmp_path / "out"],
        cwd=src,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=tool_env(),
    )
    assert proc.returncode != 0, proc.stdout
    assert f"fp8_dummy: no torch is installed for {venv / 'bin' / 'python'}" in proc.stdout
    assert "pip install --no-build-isolation ." in proc.stdout, proc.stdout
    assert "Getting requirements to build wheel" in proc.stdout  # it stopped there
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_sdist_carries_the_build_backend(tmp_path: Path) -> None:
    src = copy_source_tree(tmp_path / "src")
    code = "import sys, fp8_dummy_backend as b; print(b.build_sdist(sys.argv[1]))"
    env = tool_env(PYTHONPATH=str(src / "build_backend"))
    name = run([sys.executable, "-c", code, tmp_path], cwd=src, env=env).stdout.split()[-1]
    with tarfile.open(tmp_path / name) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in (
        "build_backend/fp8_dummy_backend.py",
        "build_backend/fp8_dummy_build_config.py",
        "fp8_dummy/_version.py",
        "fp8_dummy/py.typed",
        "csrc/build_info.cpp",
    ):
        assert needed in names, needed


def test_wheel_is_abi3_with_cxx_api(wheel: Path, tmp_path: Path) -> None:
    # torch >= 2.6 (pyproject.toml asks for 2.7): built against Python's limited API.
    assert re.fullmatch(rf"fp8_dummy-{re.escape(VERSION)}-cp39-abi3-linux_\w+\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"fp8_dummy-{VERSION}.dist-info/METADATA").decode()
        version_file = zf.read(f"fp8_dummy/share/cmake/fp8_dummy/{CMAKE_FILES[1]}").decode()
        zf.extract("fp8_dummy/_C.abi3.so", tmp_path)
    assert "fp8_dummy/_C.abi3.so" in names and "fp8_dummy/py.typed" in names
    assert f"Version: {VERSION}" in metadata.splitlines()
    assert HEADERS and "fp8_dummy/fp8_dummy.h" in HEADERS
    missing = [h for h in HEADERS if f"fp8_dummy/include/{h}" not in names]
    missing += [f for f in CMAKE_FILES if f"fp8_dummy/share/cmake/fp8_dummy/{f}" not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert f'set(PACKAGE_VERSION "{VERSION}")' in version_file
    assert not [n for n in names if n.endswith((".cpp", ".cu", ".cmake.in"))]
    assert not [n for n in names if "emulator" in n or "test_ops" in n], names  # tests/ext/
    # The TensorRT-LLM opt-in: a .pth line and its shim at the top of site-packages.
    assert {"fp8_dummy_startup.pth", "_fp8_dummy_startup.py"} <= names
    # Tied to the torch it was built with (major.minor), whose C++ ABI it uses.
    major_minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert f"Requires-Dist: torch=={major_minor}.*" in metadata.splitlines(), metadata
    # abi3 in fact: the one Python function the library calls is in the limited API.
    symbols = undefined_python_symbols(tmp_path / "fp8_dummy" / "_C.abi3.so")
    if symbols is not None:
        assert symbols <= {"PyModule_Create2"}, symbols


def test_installed_in_fresh_venv(venv_python, tmp_path: Path) -> None:
    proc = run([venv_python[0], "-I", "-c", SMOKE], cwd=tmp_path)
    print(proc.stdout)
    assert "smoke ok" in proc.stdout


# Operators only tests and benchmarks call: they live in the test extension (tests/ext/),
# never in the library users install.
TEST_ONLY_OPS = {
    "emulate_cuda_init_",
    "emulate_cuda_init_many_",
    "emulate_cuda_kernel_init_",
    "emulate_proven_cuda_init_",
    "emulate_proven_cuda_init_many_",
    "emulate_proven_cuda_init_stateless_",
    "cpu_mt19937_jump",
    "cpu_mt19937_words",
    "cpu_transform",
    "cuda_launch_plan",
    "cuda_batch_table",
    "cuda_batch_divide",
    "cuda_probe_numel",
    "fp8_convert_table",
    "philox4x32_10",
    "philox_roofline",
}


def test_installed_library_has_no_test_machinery(venv_python, tmp_path: Path) -> None:
    """The installed library registers the public operators and what the product calls, none
    of the test extension's, and has no fp8_dummy.emulator."""
    script = (
        "import importlib.util, torch, fp8_dummy\n"
        "ops = torch._C._dispatch_get_all_op_names()\n"
        "print(' '.join(sorted(n for n in ops if n.startswith('fp8_dummy'))))\n"
        "print(importlib.util.find_spec('fp8_dummy.emulator'), hasattr(fp8_dummy, 'emulator'))\n"
    )
    out = run([venv_python[0], "-I", "-c", script], cwd=tmp_path).stdout
    *_, listed, emulator = out.splitlines()  # the last two lines (torch may warn first)
    ops = set(listed.split())
    assert {"fp8_dummy::init_", "fp8_dummy_internal::check_init_args"} <= ops, ops
    assert TEST_ONLY_OPS <= extension_test_ops()
    leaked = {n for n in ops if n.split("::")[1] in extension_test_ops()}
    assert not leaked and not any(n.startswith("fp8_dummy_test::") for n in ops), leaked
    assert emulator == "None False", emulator


def test_wheel_installs_the_trtllm_opt_in(venv_python: tuple[Path, str], tmp_path: Path) -> None:
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
    for value, module in (("1", "fp8_dummy.engines.trtllm"), ("0", "oracles.trtllm")):
        env = dict(os.environ, FP8_DUMMY_TRTLLM=value)
        proc = subprocess.run(
            [venv_python[0], "-I", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and proc.stdout.split() == [module], proc.stdout + proc.stderr


@pytest.mark.skipif(which("cmake") is None, reason="cmake not installed")
def test_wheel_cmake_package(venv_python, tmp_path: Path) -> None:
    """find_package(fp8_dummy VERSION) with the wheel's CMake package (no Torch: the
    torch-free target only); it names the wheel's library in fp8_dummy_LIBRARY."""
    script = "import fp8_dummy as f; print(f.get_cmake_dir()); print(f.library_path())"
    # The last two lines: torch may warn first (no numpy in a venv of FP8_DUMMY_TEST_TORCH_SPEC).
    out = run([venv_python[0], "-I", "-c", script], cwd=tmp_path).stdout
    cmake_dir, library = out.split()[-2:]
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


def test_wheel_beside_torch_alone(wheel: Path, tmp_path: Path) -> None:
    """The wheel installed into a fresh venv that has torch and torch's own dependencies
    only (no numpy): pip installs what the wheel declares, then `import fp8_dummy`, the op and
    `python -m fp8_dummy check --device cpu` work. torch: this test's, through a .pth line
    naming a directory of links to its site-packages less numpy and fp8_dummy."""
    site = Path(torch.__file__).resolve().parents[1]
    alone = tmp_path / "torch-alone"
    alone.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith(("numpy", "fp8_dummy", "_fp8_dummy", "__editable__")):
            (alone / entry.name).symlink_to(entry)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(purelib.stdout.strip()) / "_torch_alone.pth").write_text(f"{alone}\n")
    no_numpy = "import importlib.util as u; print(u.find_spec('numpy'))"
    assert run([python, "-c", no_numpy]).stdout.strip() == "None"  # torch alone
    _pip(python, "install", "-q", wheel)
    code = (
        "import torch, fp8_dummy\n"
        "t = torch.empty(64, 3, dtype=torch.float8_e4m3fn); fp8_dummy.init_(t, -1.0, 1.0, seed=7)\n"
        "g = torch.Generator().manual_seed(7)\n"
        "r = torch.empty(64, 3, dtype=torch.float16).uniform_(-1.0, 1.0, generator=g).to(t.dtype)\n"
        "assert torch.equal(t.view(torch.uint8), r.view(torch.uint8)); print('op ok')\n"
    )
    assert "op ok" in run([python, "-I", "-c", code], cwd=tmp_path).stdout
    check = run([python, "-I", "-m", "fp8_dummy", "check", "--device", "cpu"], cwd=tmp_path)
    assert check.returncode == 0, check.stdout
