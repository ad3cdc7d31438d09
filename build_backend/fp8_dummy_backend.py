"""fp8_dummy's PEP 517 build backend: setuptools' own, with one rule added. The extension
is compiled against the torch of the environment it is installed into, and a build never
makes pip install, upgrade or replace a torch (why: docs/cpp.md). Each hook asks the target
interpreter, outside pip's isolation, where its torch is and appends that import path to
sys.path, after the isolated environment's own; with no torch (or too old a one) it stops
before compiling and prints the commands that work. Without isolation: torch as it is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from setuptools import build_meta as _setuptools

MIN_TORCH = (2, 7)

# Run by the target interpreter: its import path and its torch, without importing torch
# (a few ms instead of seconds).
_PROBE = r"""
import importlib.metadata, importlib.util, json, sys
spec = importlib.util.find_spec("torch")
try:
    version = importlib.metadata.version("torch") if spec else None
except importlib.metadata.PackageNotFoundError:
    version = None
print(json.dumps({"path": sys.path, "origin": spec and spec.origin, "version": version}))
"""

# pip's isolation: PYTHONPATH names a sitecustomize.py that drops site-packages (and what
# their .pth files add) from sys.path; PYTHONNOUSERSITE hides the user site.
_ISOLATION_VARIABLES = ("PYTHONPATH", "PYTHONNOUSERSITE")

WORKING_COMMANDS = (
    "  pip install torch                      # the torch to run with, first\n"
    "  pip install .                          # then fp8_dummy, built against it\n"
    "or, building against an environment's torch explicitly:\n"
    "  pip install --no-build-isolation .     # also: pip wheel --no-build-isolation .,\n"
    "                                         #       python -m build --no-isolation"
)


def installed_torch(python: str = sys.executable) -> dict:
    """{"path": [...], "origin": torch/__init__.py or None, "version": str or None} of
    `python` as it starts outside pip's isolation."""
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATION_VARIABLES}
    out = subprocess.run(
        [python, "-c", _PROBE], env=env, stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def torch_problem(found: dict, python: str = sys.executable) -> str | None:
    """Why `found` (installed_torch's answer) cannot be built against, or None."""
    if not found.get("origin"):
        return (
            f"fp8_dummy: no torch is installed for {python}. fp8_dummy is compiled against the "
            "torch it will run with, and its build never installs or replaces one.\n"
            + WORKING_COMMANDS
        )
    version = found.get("version")  # None: a torch without metadata (a source checkout)
    if version is not None and _major_minor(version) < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return (
            f"fp8_dummy: needs torch >= {need}; {python} has torch {version} "
            f"({found['origin']}). Upgrade it (pip install 'torch>={need}'), then:\n"
            + WORKING_COMMANDS
        )
    return None


def _expose_installed_torch() -> None:
    if importlib.util.find_spec("torch") is not None:
        return  # a build without isolation: nothing to do
    found = installed_torch()
    problem = torch_problem(found)
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(1)
    sys.path.extend(p for p in found["path"] if p and p not in sys.path)
    version = found["version"] or "(version unknown)"
    where = os.path.dirname(found["origin"])
    print(f"fp8_dummy: building against the installed torch {version} ({where})", file=sys.stderr)


def _with_torch(name: str):
    hook = getattr(_setuptools, name)

    def run_hook(*args, **kwargs):
        _expose_installed_torch()
        return hook(*args, **kwargs)

    run_hook.__name__ = run_hook.__qualname__ = name
    return run_hook


# Every PEP 517 hook setuptools has (the PEP 660 editable ones from setuptools 64 on; an
# older one gets pip's legacy editable install), after _expose_installed_torch.
for _name in (
    "build_wheel build_sdist build_editable get_requires_for_build_wheel "
    "get_requires_for_build_sdist get_requires_for_build_editable "
    "prepare_metadata_for_build_wheel prepare_metadata_for_build_editable"
).split():
    if hasattr(_setuptools, _name):
        globals()[_name] = _with_torch(_name)
