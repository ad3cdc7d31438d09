"""An engine for a test module: imported here (not only installed: the workers import it the
same way), else the module is skipped with why, or, in CI (``FP8_DUMMY_REQUIRE_ENGINES=1``),
fails."""

from __future__ import annotations

import importlib
import os

import pytest


def require(module: str, version: str | None = None, what: str = "") -> None:
    """Skip the calling test module unless ``module`` imports (and its package's version
    starts with ``version``: the release ``what`` is about)."""
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 (not installed, or not for this torch)
        if os.environ.get("FP8_DUMMY_REQUIRE_ENGINES") == "1":  # CI: missing is a failure
            raise
        pytest.skip(
            f"{module} is not importable here ({type(e).__name__}: {e}); "
            "scripts/ci_engines.sh installs it",
            allow_module_level=True,
        )
    top = importlib.import_module(module.split(".")[0])
    have = getattr(top, "__version__", "")
    if version is not None and not have.startswith(version):
        pytest.skip(f"{what} are {version}x's; this is {have}", allow_module_level=True)
