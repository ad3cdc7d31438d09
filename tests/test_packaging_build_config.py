"""The build's decisions and messages, without building: the CUDA architectures chosen for
an nvcc (build_backend/fp8_dummy_build_config.py), the warning for a CUDA torch without
nvcc, the build backend's refusal where there is no torch, the CUDA kernels of a build
without CUDA, the import error of a library built for another torch, version and py.typed.
The builds themselves: tests/test_packaging_wheel.py (slow)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import poison, storage_bytes

import fp8_dummy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))
import fp8_dummy_backend as backend  # noqa: E402
import fp8_dummy_build_config as config  # noqa: E402

NVCC_13_0 = "compute_75 compute_80 compute_86 compute_87 compute_88 compute_89 compute_90\n"
NVCC_13_0 += "compute_100 compute_110 compute_103 compute_120 compute_121\n"
NVCC_12_6 = "\n".join(f"compute_{a}" for a in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87))
NVCC_12_6 += "\ncompute_89\ncompute_90\ncompute_90a\n"


def test_arch_list_parsing():
    assert config.parse_nvcc_arch_list(NVCC_13_0) >= {"8.0", "9.0", "10.0", "12.0", "12.1"}
    assert "9.0" in config.parse_nvcc_arch_list(NVCC_12_6)
    assert not {"10.0", "12.0"} & config.parse_nvcc_arch_list(NVCC_12_6)
    # Architecture-specific variants (compute_90a, compute_100f) are not plain targets.
    assert config.parse_nvcc_arch_list("compute_90a compute_100f") == set()
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.6, V12.6.77"
    assert config.parse_nvcc_version(text) == (12, 6)
    assert config.parse_nvcc_version("no version here") is None


@pytest.mark.parametrize(
    "supported,expected",
    [
        (config.parse_nvcc_arch_list(NVCC_13_0), "8.0;8.9;9.0;10.0;12.0+PTX"),
        (config.parse_nvcc_arch_list(NVCC_12_6), "8.0;8.9;9.0+PTX"),  # CUDA 12.1-12.6
        ({"7.5", "8.0", "8.6"}, "8.0+PTX"),  # an nvcc before 11.8
        # A future nvcc that dropped 8.0: dropped here too.
        ({"8.9", "9.0", "10.0", "12.0", "13.0"}, "8.9;9.0;10.0;12.0+PTX"),
    ],
)
def test_default_archs_follow_nvcc(supported, expected):
    archs, why = config.choose_arch_list(None, supported, [], editable=False)
    assert (archs, why) == (expected, "the defaults the installed nvcc can build")


def test_default_archs_from_the_version_alone():
    # An nvcc that cannot list its architectures: the first release of each.
    def known(version):
        return {a for a, first in config.FIRST_NVCC.items() if version >= first}

    assert config.default_arch_list(known((12, 4))) == "8.0;8.9;9.0+PTX"
    assert config.default_arch_list(known((12, 8))) == "8.0;8.9;9.0;10.0;12.0+PTX"
    with pytest.raises(ValueError, match="builds none of the architectures"):
        config.default_arch_list({"5.0", "6.0"})


def test_arch_list_rules():
    full = config.parse_nvcc_arch_list(NVCC_13_0)
    # TORCH_CUDA_ARCH_LIST always wins, even where nvcc or a visible GPU says otherwise.
    for editable in (False, True):
        got = config.choose_arch_list(" 7.0;7.5 ", full, ["9.0"], editable)
        assert got == ("7.0;7.5", "TORCH_CUDA_ARCH_LIST")
    # Editable: the visible GPUs nvcc can build for, each once, in order.
    assert config.choose_arch_list(None, full, ["9.0", "8.6", "9.0"], True)[0] == "8.6;9.0"
    # A GPU nvcc cannot build for, or none visible: the defaults.
    nvcc_12_6 = config.parse_nvcc_arch_list(NVCC_12_6)
    assert config.choose_arch_list(None, nvcc_12_6, ["12.0"], True)[0] == "8.0;8.9;9.0+PTX"
    assert config.choose_arch_list(None, full, [], True)[0] == "8.0;8.9;9.0;10.0;12.0+PTX"
    # A wheel (not editable) never follows the build machine's GPU.
    assert config.choose_arch_list(None, full, ["9.0"], False)[0] == "8.0;8.9;9.0;10.0;12.0+PTX"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
def test_the_installed_nvcc_answers():
    supported, how = config.nvcc_archs(shutil.which("nvcc"))
    assert supported and "--list-gpu-arch" in how, how
    assert "9.0" in config.default_arch_list(supported)


def test_cuda_decision():
    # The flag decides; then a CUDA torch with a toolkit. A CUDA torch without one warns.
    assert config.cuda_decision("1", "2.13.0", None, None) == (True, None)
    assert config.cuda_decision("off", "2.13.0", "13.0", "/usr/local/cuda") == (False, None)
    assert config.cuda_decision(None, "2.13.0+cpu", None, "/usr/local/cuda") == (False, None)
    assert config.cuda_decision("", "2.14.1", "13.0", "/usr/local/cuda") == (True, None)
    use, warning = config.cuda_decision(None, "2.14.1", "13.0", None)
    assert not use
    for words in ("WARNING", "torch 2.14.1", "CUDA 13.0", "WITHOUT the CUDA kernels", "CUDA_HOME"):
        assert words in warning, words
    assert config.cuda_decision("0", "2.14.1", "13.0", None) == (False, None)  # on purpose


def test_backend_finds_this_torch_outside_isolation(monkeypatch):
    # As under pip's isolation: PYTHONPATH names a directory that hides site-packages.
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-isolation-site")
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    found = backend.installed_torch()
    assert Path(found["origin"]).resolve() == Path(torch.__file__).resolve()
    assert found["version"] == torch.__version__
    site = Path(torch.__file__).resolve().parents[1]
    assert site in [Path(p).resolve() for p in found["path"] if p]
    assert backend.torch_problem(found) is None


def test_backend_refuses_no_torch_or_an_old_one():
    problem = backend.torch_problem({"origin": None, "version": None}, python="/venv/bin/python")
    assert "no torch is installed for /venv/bin/python" in problem
    assert "pip install --no-build-isolation ." in problem and "pip install torch" in problem
    old = backend.torch_problem({"origin": "/x/torch/__init__.py", "version": "2.6.0+cpu"})
    assert "needs torch >= 2.7" in old and "2.6.0+cpu" in old
    assert backend.torch_problem({"origin": "/x/torch/__init__.py", "version": "2.13.0"}) is None
    # A torch without metadata (a source checkout): setup.py's import of it decides.
    assert backend.torch_problem({"origin": "/x/torch/__init__.py", "version": None}) is None


def test_build_info_names_this_torch():
    info = fp8_dummy.build_info()
    assert info["version"] == fp8_dummy.__version__
    assert info["torch"] == torch.__version__.split("+")[0]
    assert isinstance(info["cuda"], bool)
    # The same line is in the file, where the import error reads it.
    on_file = fp8_dummy._build.read_build_info(Path(fp8_dummy.library_path()))
    assert on_file == {"torch": info["torch"], "cuda": "yes" if info["cuda"] else "no"}


def test_version_and_py_typed_in_the_source():
    version = re.search(
        r'^__version__ = "([^"]+)"', (ROOT / "fp8_dummy/_version.py").read_text(), re.M
    )
    assert fp8_dummy.__version__ == version[1]
    assert (ROOT / "fp8_dummy" / "py.typed").is_file()


def _calls(t: torch.Tensor) -> dict:
    """Every public op's overload and arguments, for the tensor t."""
    ops, q = torch.ops.fp8_dummy, t.view(torch.uint8)
    return {
        "init_": (ops.init_.default, (t, -1.0, 1.0, 3), {}),
        "init_.generator": (ops.init_.generator, (t, -1.0, 1.0), {"generator": None}),
        "init_many_": (ops.init_many_.default, ([t], -1.0, 1.0, 3), {}),
        "init_stateless_": (ops.init_stateless_.default, (t, -1.0, 1.0, 3), {}),
        "random_": (ops.random_.default, (q, 0, 256, 3), {}),
        "random_.generator": (ops.random_.generator, (q, 0, 256), {"generator": None}),
    }


@pytest.mark.skipif(fp8_dummy.build_info()["cuda"], reason="this build has CUDA kernels")
@pytest.mark.parametrize("name", list(_calls(torch.empty(0))))
def test_cuda_calls_in_a_build_without_cuda_say_so(name):
    # The CUDA kernel of every public op, called as a CUDA tensor would reach it (a CPU
    # tensor stands in: the kernel refuses before it looks at the data).
    t = poison(torch.empty(8, dtype=torch.float8_e4m3fn))
    overload, args, kwargs = _calls(t)[name]
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with pytest.raises(RuntimeError) as info:
        overload.redispatch(cuda, *args, **kwargs)
    message = str(info.value)
    op = name.split(".")[0]
    assert message.startswith(f"fp8_dummy.{op}: this fp8_dummy was built without CUDA"), message
    assert f"against torch {torch.__version__.split('+')[0]}" in message
    assert "CUDA_HOME=" in message and "pip install" in message
    assert bool((storage_bytes(t) == 0x55).all())


@pytest.mark.slow  # fresh Python processes
def test_import_error_names_both_torches(tmp_path):
    # A package whose library was built for another torch: here a file that does not load
    # at all, holding the build line of a torch 2.99.0 build.
    package = tmp_path / "fp8_dummy"
    shutil.copytree(ROOT / "fp8_dummy", package, ignore=shutil.ignore_patterns("*.so", "__py*"))
    (package / "_C.abi3.so").write_bytes(
        b"\x7fELF not a library\0fp8_dummy-build-info: torch=2.99.0 cuda=yes\0more"
    )
    # (An editable install's finder would serve fp8_dummy._C from the checkout: not here.)
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in "
        f"getattr(f, '__name__', '')]; sys.path.insert(0, {str(tmp_path)!r}); import fp8_dummy"
    )
    proc = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: fp8_dummy: its compiled library"), message
    assert str(package / "_C.abi3.so") in message
    assert "built for torch 2.99.0" in message
    assert f"this Python has torch {torch.__version__}" in message
    assert "pip install --force-reinstall --no-deps" in message  # not a source tree
    # No library at all.
    (package / "_C.abi3.so").unlink()
    proc = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    message = proc.stderr.strip().splitlines()[-1]
    assert "is not in" in message and f"torch {torch.__version__}" in message, message


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None, reason="no g++/nm")
def test_a_private_copy_of_libstdcxx_streams_is_refused(tmp_path):
    # The same source linked two ways: against libstdc++.so, and with libstdc++ inside.
    src = tmp_path / "streams.cpp"
    src.write_text(
        "#include <sstream>\n#include <string>\n"
        'extern "C" int width(long v) { std::ostringstream o; o << v; return o.str().size(); }\n'
    )
    libs = {}
    for name, extra in (("shared", []), ("static", ["-static-libstdc++"])):
        libs[name] = tmp_path / f"lib{name}.so"
        cmd = ["g++", "-O2", "-fPIC", "-shared", *extra, str(src), "-o", str(libs[name])]
        subprocess.run(cmd, check=True, capture_output=True)
    assert config.private_stdlib_symbols(str(libs["shared"])) == []
    found = config.private_stdlib_symbols(str(libs["static"]))
    assert found and all(config.PRIVATE_STDLIB.match(s) for s in found)
    assert any(s.startswith("_ZNSt6locale") for s in found)  # std::locale's own members
    # The library this checkout built is sound (setup.py refuses one that is not).
    assert config.private_stdlib_symbols(fp8_dummy._C.__file__) == []
    # Without nm there is no verdict, not a false one.
    assert config.private_stdlib_symbols(str(libs["static"]), nm=str(tmp_path / "no-nm")) is None
    message = config.private_stdlib_error(
        str(libs["static"]), found, {"CXX": "/opt/gcc/bin/g++", "PATH": "/usr/bin"}
    )
    assert str(libs["static"]) in message and f"{len(found)} of libstdc++" in message
    assert "CXX=/opt/gcc/bin/g++" in message and "PATH" not in message
    assert "CC=gcc CXX=g++" in message and "removed" in message
    assert "(the default)" in config.private_stdlib_error("x.so", found, {})
    # CMake's build applies the same rule after linking (cmake/check_private_stdlib.cmake).
    cmake = shutil.which("cmake")
    if cmake is None:
        return
    script = ROOT / "cmake" / "check_private_stdlib.cmake"
    for name, sound in (("shared", True), ("static", False)):
        cmd = [cmake, f"-DLIB={libs[name]}", f"-DNM={shutil.which('nm')}", "-DCXX=c++", "-P"]
        proc = subprocess.run([*cmd, str(script)], capture_output=True, text=True)
        assert (proc.returncode == 0) == sound, proc.stderr
        assert libs[name].exists() == sound  # the unsound one is removed
        if not sound:
            assert "of libstdc++'s own stream and locale symbols" in proc.stderr
            assert str(libs[name]) in " ".join(proc.stderr.split())
