"""The DTensor rules (``fp8_dummy.dtensor``) registered right after ``torch.distributed.tensor``
is imported, before any DTensor can exist: ``import fp8_dummy`` does not import it (seconds)."""

from __future__ import annotations

import warnings
from types import ModuleType

import torch

from ._after_import import after_import

_TARGET = "torch.distributed.tensor"


def _register(_module: ModuleType | None = None) -> None:
    try:
        from . import dtensor  # noqa: F401  (registers on import)
    except Exception as e:  # never break the user's import of torch.distributed.tensor
        warnings.warn(f"fp8_dummy: DTensor support not registered: {e!r}", stacklevel=2)


def install() -> None:
    if torch.distributed.is_available():
        after_import(_TARGET, _register)
