"""An engine test module's first step: the engine importable at the release its rules are
read from, else the module skipped, saying why (in CI, FP8_DUMMY_REQUIRE_ENGINES=1: a failure,
never a silent skip)."""

from __future__ import annotations

import importlib
import os

import pytest


def require(package: str, release: str) -> str:
    """The installed version of ``package`` where it starts with ``release``."""
    try:
        version = importlib.import_module(package).__version__
    except Exception as e:  # noqa: BLE001 (not installed, or not for this torch)
        if os.environ.get("FP8_DUMMY_REQUIRE_ENGINES") == "1":
            raise
        pytest.skip(
            f"{package} is not importable here ({type(e).__name__}: {e}); "
            "scripts/ci_engines.sh installs it",
            allow_module_level=True,
        )
    if not version.startswith(release):
        pytest.skip(
            f"this test reads {package} {release}; this is {version}", allow_module_level=True
        )
    return version
