"""Import ``fp8_dummy.dtensor`` (DTensor rules for our ops) exactly when DTensor exists.

``import torch.distributed.tensor`` takes seconds, so ``import fp8_dummy`` does not do it.
A DTensor can only exist once that module is imported, and the rules must be registered
before ``torch.ops.fp8_dummy.*`` first meets one. So: register now if it is already
imported, else right after its import, through the one after-import hook of the package
(:func:`fp8_dummy._after_import.after_import`, which the engine plugins use too).
"""

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
    """Called by ``fp8_dummy/__init__.py``."""
    if torch.distributed.is_available():
        after_import(_TARGET, _register)
