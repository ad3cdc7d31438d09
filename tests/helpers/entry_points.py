"""Make fp8_dummy's entry points (pyproject.toml) visible to importlib.metadata without
installing the package: a minimal .dist-info on sys.path, as pip would write one. The
engines find their plugins this way (vLLM: vllm.general_plugins, SGLang:
sglang.srt.plugins)."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared(group: str) -> dict[str, str]:
    """pyproject.toml's entry points of ``group``: {name: "module:function"} (read with a
    pattern: tomllib is Python 3.11+)."""
    text = PYPROJECT.read_text()
    header = re.search(rf'^\[project\.entry-points\."{re.escape(group)}"\]$', text, re.M)
    if header is None:
        return {}
    body = re.split(r"^\[", text[header.end() :], maxsplit=1, flags=re.M)[0]
    return dict(re.findall(r'^\s*([\w.-]+)\s*=\s*"([^"]+)"', body, re.M))


def provide(group: str, where: Path) -> str:
    """Ensure ``group`` lists fp8_dummy's entry point; returns how (for messages)."""
    wanted = declared(group)
    assert wanted, f"pyproject.toml declares no entry point in {group}"
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=group)}
    if all(found.get(k) == v for k, v in wanted.items()):
        return "installed"
    info = where / "fp8_dummy_entry_points-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fp8-dummy-entry-points\nVersion: 0.0\n"
    )
    lines = [f"[{group}]"] + [f"{k} = {v}" for k, v in wanted.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    if str(where) not in sys.path:
        sys.path.append(str(where))
    return f"dist-info in {where}"
