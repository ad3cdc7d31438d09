"""What a folder holds, to show that a cache wrote nothing into one it does not trust."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int, int]]:
    """Every entry under root: its bytes (a symlink: its target), owner and mode."""
    out = {}
    for p in sorted(root.rglob("*")) if root.exists() else []:
        st = p.lstat()
        what = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else b"dir"
        out[str(p.relative_to(root))] = (what, st.st_uid, stat.S_IMODE(st.st_mode))
    return out
