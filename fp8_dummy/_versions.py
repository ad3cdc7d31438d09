"""The one reading of a version string ("2.13.0+cpu", "0.33.0rc1", "0.34.0.dev3")."""

from __future__ import annotations

import re

__all__ = ["major_minor"]

_MAJOR_MINOR = re.compile(r"^\s*v?(\d+)\.(\d+)")


def major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version, or None if it does not start with them (callers treat
    an unreadable version as a newer one, whose behaviour is proven, not assumed)."""
    m = _MAJOR_MINOR.match(version)
    return (int(m.group(1)), int(m.group(2))) if m else None
