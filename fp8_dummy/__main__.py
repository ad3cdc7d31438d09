"""``python -m fp8_dummy check [--device cpu|cuda|all] [--bench] [--json FILE]``: does every
path hold here, and how fast (``check --help``). ``python -m fp8_dummy --includedir |
--cmakedir | --library``: paths for build scripts, like ``python -m pybind11 --cmakedir``:
``cmake -Dfp8_dummy_DIR=$(python -m fp8_dummy --cmakedir)``. Loads the package, so torch must
import.
"""

from __future__ import annotations

import argparse
import sys

import fp8_dummy


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check"]:
        from .check import main as check

        return check(argv[1:])
    usage = "python -m fp8_dummy (check ... | --includedir | --cmakedir | --library)"
    parser = argparse.ArgumentParser(prog="python -m fp8_dummy", usage=usage, description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--includedir", action="store_true", help="fp8_dummy.get_include()")
    group.add_argument("--cmakedir", action="store_true", help="fp8_dummy.get_cmake_dir()")
    group.add_argument("--library", action="store_true", help="fp8_dummy.library_path()")
    args = parser.parse_args(argv)
    if args.includedir:
        print(fp8_dummy.get_include())
    elif args.cmakedir:
        print(fp8_dummy.get_cmake_dir())
    else:
        print(fp8_dummy.library_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())
