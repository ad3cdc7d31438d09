"""The test extension: operators only tests and benchmarks call (torch.ops.fp8_dummy_test),
kept out of the library users install. Importing this package loads it for the fp8_dummy
and torch in use (`from ext import emulator, test_ops`, with tests/ on sys.path as
conftest.py puts it); `bash tests/ext/build.sh PYTHON` builds it (scripts/test.sh and the
CI scripts do). A library that is missing, or older than the sources it is compiled from,
is an ImportError naming that command: the tests that need it fail, never skip.
"""

from __future__ import annotations

import sys

import torch

import fp8_dummy  # the product library first: ours links against it

from .build import library_file, newer_inputs


def _load() -> None:
    library = library_file()
    rebuild = f"run: bash tests/ext/build.sh {sys.executable}"
    if not library.is_file():
        raise ImportError(
            f"the test extension is not built for {fp8_dummy.library_path()} "
            f"(torch {torch.__version__}; no {library}): {rebuild}"
        )
    newer = newer_inputs(library)
    if newer:
        raise ImportError(f"the test extension {library} is older than {newer[0]}: {rebuild}")
    torch.ops.load_library(str(library))


_load()
test_ops = torch.ops.fp8_dummy_test
