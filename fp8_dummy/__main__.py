"""``python -m fp8_dummy check [--device cpu|cuda|all] [--bench] [--json FILE]``: does every path
hold here, and how fast (``check --help``). ``python -m fp8_dummy routing CONFIG --routing P``:
the MoE load a routing profile gives (``routing --help``). ``python -m fp8_dummy acceptance
CONFIG --acceptance A``: the speculative acceptance a designed stream gives (``acceptance
--help``). ``python -m fp8_dummy export CONFIG
OUT``: the dummy model as a checkpoint (``export --help``). ``python -m fp8_dummy --includedir
| --cmakedir | --library``: paths for build scripts
(``-Dfp8_dummy_DIR=$(python -m fp8_dummy --cmakedir)``)."""

from __future__ import annotations

import argparse
import sys

from ._paths import get_cmake_dir, get_include, library_path

_PATHS = {"includedir": get_include, "cmakedir": get_cmake_dir, "library": library_path}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check"]:
        from .check import main as check

        return check(argv[1:])
    if argv[:1] == ["export"]:
        from .realistic.export import main as export

        return export(argv[1:])
    if argv[:1] == ["routing"]:
        from .realistic.routing.report import main as routing

        return routing(argv[1:])
    if argv[:1] == ["acceptance"]:
        from .realistic.speculative.report import main as acceptance

        return acceptance(argv[1:])
    usage = "python -m fp8_dummy (check ... | export ... | routing ... | acceptance ... | "
    usage += "--includedir | "
    usage += "--cmakedir | --library)"
    parser = argparse.ArgumentParser(prog="python -m fp8_dummy", usage=usage, description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    for name, fn in _PATHS.items():
        group.add_argument(f"--{name}", action="store_true", help=f"fp8_dummy.{fn.__name__}()")
    args = vars(parser.parse_args(argv))
    print(next(fn() for name, fn in _PATHS.items() if args[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
