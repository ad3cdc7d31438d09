"""The shape of the package's imports (fp8_dummy/): no import circles, and no private name
imported from another module.

How the imports are read: every ``import`` and ``from ... import`` statement of every module
under fp8_dummy/ (``ast``, so those inside functions and ``if`` blocks count too), relative
or absolute, that names a module of the package. ``from X import n`` is an import of the
module ``X.n`` where that is a module (a .py file, a package or the compiled extension), else
of ``X`` (a name defined there). Not counted: the import of a module's parent packages that
Python performs first (a package's ``__init__`` importing its children is the normal shape;
a child importing a name from its parent's ``__init__`` is an edge to the parent and shows
as a circle), and imports by string (``importlib.import_module``).

The rule for private names: ``from X import _n`` is allowed only where ``X._n`` is a module
(a private module imported as a module, ``from . import _proof``); importing a private name
(a function, class or constant whose name starts with ``_``) defined in another module is
not: it is a sign of a missing public interface or of code in the wrong place.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fp8_dummy"


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every .py module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_module(name: str, modules: dict[str, Path]) -> bool:
    if name in modules:
        return True
    package, _, leaf = name.rpartition(".")
    if package not in modules or modules[package].name != "__init__.py":
        return False
    folder = modules[package].parent
    return any(folder.glob(f"{leaf}.*.so")) or (folder / f"{leaf}.so").exists()


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(imported module, imported private name or None) for each intra-package import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] == "fp8_dummy"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "fp8_dummy":
                continue
            for alias in node.names:
                child = f"{source}.{alias.name}"
                if _is_module(child, modules):
                    out.append((child, None))
                else:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    out.append((source, alias.name if private else None))
    return [(m, p) for m, p in out if m in modules or _is_module(m, modules)]


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, path in modules.items():
        for target, name_imported in _imports(name, path, modules):
            if target != name and target in modules:
                graph[name].add(target)
            if name_imported is not None and target != name:
                private.append(f"{name} imports {name_imported} from {target}")
    return graph, private


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    graph, _ = _graph()
    assert sum(len(e) for e in graph.values()) > 40  # the reader sees the imports
    assert _circles(graph) == []


def test_no_private_name_imported_from_another_module():
    _, private = _graph()
    assert private == []


def test_the_reader_finds_circles_and_private_imports(tmp_path, monkeypatch):
    """The checks can fail: a package with a circle through a function-level relative import
    and a private name imported from a sibling."""
    pkg = tmp_path / "fp8_dummy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub.b import helper\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def helper():\n    from ..a import _secret\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    graph, private = _graph()
    assert _circles(graph) == [["fp8_dummy.a", "fp8_dummy.sub.b"]]
    assert private == ["fp8_dummy.sub.b imports _secret from fp8_dummy.a"]


def test_engines_live_in_the_engines_package_and_the_core_names_none():
    """Engine code only under fp8_dummy/engines/ (the attributes fp8_dummy.vllm, .sglang and
    .trtllm are those modules, not aliases in sys.modules); the core names no engine."""
    import importlib

    import fp8_dummy

    graph, _ = _graph()
    for name in ("vllm", "sglang", "trtllm"):
        assert not (PACKAGE / f"{name}.py").exists() and f"fp8_dummy.{name}" not in graph
        engine = importlib.import_module(f"fp8_dummy.engines.{name}")
        assert getattr(fp8_dummy, name) is engine and f"fp8_dummy.{name}" not in sys.modules
    core = "".join(p.read_text() for p in (PACKAGE / "engines" / "core").glob("*.py")).lower()
    for engine in ("vllm", "sglang", "tensorrt", "trtllm"):
        assert engine not in core, engine
    for module in (m for m in graph if m.startswith("fp8_dummy.engines.core")):
        inner = (t for t in graph[module] if not t.startswith("fp8_dummy.engines.core"))
        assert not any(t.startswith("fp8_dummy.engines.") for t in inner), module


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_runs_upward():
    """No module imports a package it lies in (the package's face, ``__init__``, or an
    ancestor's): a face imports its files, never the reverse. The compiled library, loaded by
    ``from . import _C``, is a module of its own and not the face."""
    graph, _ = _graph()
    modules = _modules()
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    upward = [
        f"{m} imports {t}"
        for m, targets in graph.items()
        for t in targets
        if t in packages and _inside(m, t) and m != t
    ]
    assert upward == []


def test_realistic_and_engines_meet_only_through_the_shared_facts_and_the_face():
    """The realistic wing (fp8_dummy/realistic/) imports nothing of the engines; the engines
    import the realistic wing only through its face (``fp8_dummy.realistic``), never one of its
    files; what both need of tensors is in fp8_dummy/tensors.py."""
    graph, _ = _graph()
    realistic, engines = "fp8_dummy.realistic", "fp8_dummy.engines"
    assert realistic in graph and engines in graph and "fp8_dummy.tensors" in graph
    crossing = [
        f"{m} imports {t}"
        for m, targets in graph.items()
        for t in targets
        if (_inside(m, realistic) and _inside(t, engines))
        or (_inside(m, engines) and _inside(t, realistic) and t != realistic)
    ]
    assert crossing == []
    users = {m for m, targets in graph.items() if "fp8_dummy.tensors" in targets}
    assert any(_inside(m, realistic) for m in users) and any(_inside(m, engines) for m in users)


def test_the_layers_of_the_package_import_one_way():
    """Collapsed to its layers (each top-level module, and each subpackage whole), the
    package's imports form no circle, call-time imports included: no layer reaches back into
    one that imports it."""
    graph, _ = _graph()

    def layer(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2])

    layers: dict[str, set[str]] = {}
    for m, targets in graph.items():
        if m == "fp8_dummy":
            continue  # the package's face imports every layer
        layers.setdefault(layer(m), set()).update(
            layer(t) for t in targets if t != "fp8_dummy" and layer(t) != layer(m)
        )
    for node in list(layers.values()):
        for t in node:
            layers.setdefault(t, set())
    assert _circles(layers) == []


def test_every_exported_name_exists():
    """Each module's ``__all__`` names only what the module has (a name left behind by a
    move is an AttributeError at ``from module import *``)."""
    import importlib

    missing = []
    for name in _modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert missing == []
