"""fp8_dummy: fill FP8 (and wider float) tensors in place with the bytes of torch's
``empty_like(float16).uniform_().copy_()`` dummy-weight path, without its scratch."""

from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401  (must be loaded before the extension)

from . import (
    _C,  # noqa: F401  (loads the library, which registers torch.ops.fp8_dummy)
    reference,
)
from .model import initialize_dummy_weights, is_scale_tensor
from .ops import init_

__all__ = [
    "init_",
    "initialize_dummy_weights",
    "is_scale_tensor",
    "library_path",
    "reference",
]


def library_path() -> str:
    """Path of the compiled library, for ``torch.ops.load_library`` in other processes."""
    return str(Path(_C.__file__).resolve())
