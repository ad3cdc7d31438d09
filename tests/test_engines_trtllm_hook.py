"""The TensorRT-LLM opt-in (docs/trtllm.md): startup/fp8_dummy_startup.pth and the shim it
imports, as a wheel installs them at the top of site-packages, in fresh processes (Python
runs .pth lines at start-up; site.addsitedir does exactly that for a directory), with a
stand-in ``tensorrt_llm`` tree whose model loader has the function at TensorRT-LLM's import
path (tests/oracles/trtllm.py) and calls it as ModelLoader.load does. On: the function is
replaced when TensorRT-LLM imports its loader, and fills the same bytes. Off: nothing of
fp8_dummy is even imported. A failure inside the hook: the stand-in keeps its own function
and works, with one warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

LOADER = """
import torch  # TensorRT-LLM's loader imports torch, so the hook may import it then
from oracles.trtllm import initialize_dummy_weights  # the stand-in of TensorRT-LLM's function


def load(model):  # as ModelLoader.load calls it for LoadFormat.DUMMY: the module's global
    initialize_dummy_weights(model)
    return model
"""

SCRIPT = """
import os, site, sys
sys.path.insert(0, {tests!r})
for shadow in {shadows!r}:
    sys.path.insert(0, shadow)
site.addsitedir({site!r})  # the .pth line runs here, as at the start of any process
site.addsitedir({site!r} + "64")  # and again, as through a venv's lib64 -> lib link
heavy = [m for m in ("torch", "fp8_dummy") if m in sys.modules]
print("before:", heavy, "_fp8_dummy_startup" in sys.modules)
import tensorrt_llm._torch.pyexecutor.model_loader as ml
from oracles import trtllm as oracle
print("function:", ml.initialize_dummy_weights.__module__, ml.initialize_dummy_weights.__name__)
import torch


def model():  # a contiguous and a transposed tensor per dtype, every byte 0x55
    m = torch.nn.Module()
    for i, dt in enumerate([torch.float8_e4m3fn, torch.int8, torch.uint8, torch.bfloat16]):
        for name, shape in (("c", (38, 53)), ("t", (53, 38))):
            t = torch.empty(shape, dtype=dt)
            torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).fill_(0x55)
            m.register_buffer(f"{{name}}{{i}}", t if name == "c" else t.t())
    return m


ours, ref = model(), model()
ml.load(ours)
oracle.initialize_dummy_weights(ref)
for name, t in ours.state_dict().items():
    a, b = t.contiguous().view(torch.uint8), ref.get_buffer(name).contiguous().view(torch.uint8)
    assert torch.equal(a, b), name
print("fp8_dummy imported:", "fp8_dummy" in sys.modules)
if "fp8_dummy.engines.trtllm" in sys.modules:
    import fp8_dummy
    keys = [e for e in fp8_dummy.self_check_report() if e.path == "trtllm"]
    print("proofs:", len(keys), all(e.proven for e in keys))
print("ok")
"""


def write_engine(root: Path) -> Path:
    """The stand-in ``tensorrt_llm`` package tree under ``root`` (its loader imports
    tests/oracles, so tests/ must be importable where it runs)."""
    pkg = root / "tensorrt_llm" / "_torch" / "pyexecutor"
    pkg.mkdir(parents=True)
    for d in (root / "tensorrt_llm", root / "tensorrt_llm" / "_torch", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "model_loader.py").write_text(LOADER)
    return root


def site_dir(tmp: Path) -> Path:
    """What a wheel install puts at the top of site-packages, plus the stand-in engine."""
    site = write_engine(tmp / "site")
    for f in ("fp8_dummy_startup.pth", "_fp8_dummy_startup.py"):
        shutil.copy(ROOT / "startup" / f, site / f)
    (tmp / "site64").symlink_to(site, target_is_directory=True)
    return site


def run(
    tmp: Path, env_value: str | None, shadows: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FP8_DUMMY_TRTLLM"}
    if env_value is not None:
        env["FP8_DUMMY_TRTLLM"] = env_value
    script = SCRIPT.format(tests=str(TESTS), site=str(site_dir(tmp)), shadows=list(shadows))
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.rstrip().endswith("ok"), out.stdout + out.stderr
    return out


@pytest.mark.parametrize("value", ["1", "true", "ON", "yes"])
def test_on_replaces_the_function_on_import(tmp_path, value):
    out = run(tmp_path, value)
    assert "before: [] True" in out.stdout  # nothing heavy imported before TensorRT-LLM
    assert "function: fp8_dummy.engines.trtllm _patched" in out.stdout
    assert "proofs: 8 True" in out.stdout  # each kind (dtype, name, layout) proven
    assert "RuntimeWarning" not in out.stderr


@pytest.mark.parametrize("value", [None, "0", "", "off", "no"])
def test_off_changes_nothing(tmp_path, value):
    out = run(tmp_path, value)
    assert "before: [] False" in out.stdout  # the .pth line did not even import the shim
    assert "function: oracles.trtllm initialize_dummy_weights" in out.stdout
    assert "fp8_dummy imported: False" in out.stdout
    assert "fp8_dummy" not in out.stderr


def test_import_error_inside_the_hook_leaves_the_engine_working(tmp_path):
    """An fp8_dummy that fails to import when the hook fires (here a shadowing package whose
    __init__ raises): the stand-in keeps its own function, works, and one warning says why."""
    shadow = tmp_path / "shadow"
    (shadow / "fp8_dummy").mkdir(parents=True)
    shutil.copy(ROOT / "fp8_dummy" / "_after_import.py", shadow / "fp8_dummy" / "_after_import.py")
    (shadow / "fp8_dummy" / "__init__.py").write_text("raise ImportError('simulated breakage')\n")
    out = run(tmp_path, "1", (str(shadow),))
    assert "function: oracles.trtllm initialize_dummy_weights" in out.stdout
    assert "TensorRT-LLM hook's patch of TensorRT-LLM's model loader failed" in out.stderr
    assert "simulated breakage" in out.stderr


def test_hook_that_cannot_load_leaves_the_engine_working(tmp_path):
    """The shim cannot even load the hook (an fp8_dummy without _after_import.py)."""
    shadow = tmp_path / "shadow"
    (shadow / "fp8_dummy").mkdir(parents=True)
    (shadow / "fp8_dummy" / "__init__.py").write_text("")
    out = run(tmp_path, "1", (str(shadow),))
    assert "function: oracles.trtllm initialize_dummy_weights" in out.stdout
    assert "the TensorRT-LLM hook could not be installed" in out.stderr


def test_wheel_layout_is_what_setup_ships():
    """setup.py's build_py puts exactly these two files at the top of site-packages."""
    text = (ROOT / "setup.py").read_text()
    assert 'STARTUP_FILES = ("fp8_dummy_startup.pth", "_fp8_dummy_startup.py")' in text
    line = (ROOT / "startup" / "fp8_dummy_startup.pth").read_text().strip()
    assert line.startswith("import ") and "\n" not in line  # one line that site.py executes


def test_shim_names_what_the_package_names():
    """The shim names the variable and the loader module before torch is imported, so it
    holds its own copy of fp8_dummy.engines.trtllm's names: they must agree."""
    from fp8_dummy.engines import trtllm

    text = (ROOT / "startup" / "_fp8_dummy_startup.py").read_text()
    assert f'ENV = "{trtllm.ENV}"' in text and f'LOADER = "{trtllm.LOADER}"' in text
    assert f'"{trtllm.ENV}"' in (ROOT / "startup" / "fp8_dummy_startup.pth").read_text()
