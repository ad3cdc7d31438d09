"""Every path named in docs/development.md's "Where things are" section exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _section() -> str:
    text = (ROOT / "docs" / "development.md").read_text()
    start = text.index("## Where things are\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_every_path_in_where_things_are_exists():
    paths = [p for p in re.findall(r"`([^`\s]+)`", _section()) if "/" in p or p.endswith(".md")]
    assert len(paths) >= 15  # the reader found the paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == []
