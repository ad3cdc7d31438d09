"""fp8_dummy: fill FP8 (and wider float) tensors in place with the bytes of torch's
``empty_like(float16).uniform_().copy_()`` dummy-weight path, without its scratch."""

from __future__ import annotations

import warnings

import torch  # must be loaded before the extension

# _library loads the library (torch.ops.fp8_dummy and fp8_dummy_internal) before the modules
# after it: the source build's, or a release wheel's for this torch; where it cannot, an
# ImportError that says why.
from . import _after_import, _library, reference, stateless  # noqa: F401  (_library: first)
from ._build import build_info
from ._paths import get_cmake_dir, get_include, library_path
from ._proof import ProofEntry, self_check_report
from ._version import __version__
from .engines import SEMANTICS, initialize_dummy_weights, is_scale_tensor, sglang, trtllm, vllm
from .ops import cpu_fast_path_info, init_, init_many_, random_
from .realistic import initialize_realistic_dummy_weights
from .stateless import init_shard_, init_stateless_, shard_slices

__all__ = ["SEMANTICS", "ProofEntry", "__version__", "build_info", "cpu_fast_path_info"]
__all__ += ["get_cmake_dir", "get_include", "init_", "init_many_", "init_shard_", "init_stateless_"]
__all__ += ["initialize_dummy_weights", "initialize_realistic_dummy_weights", "is_scale_tensor"]
__all__ += ["library_path", "random_", "reference", "self_check_report", "shard_slices"]
__all__ += ["sglang", "stateless", "trtllm", "vllm"]


def _register_dtensor(_module: object = None) -> None:
    """The DTensor rules (dtensor.py), right after torch.distributed.tensor's import (slow)."""
    try:
        from . import dtensor  # noqa: F401  (registers on import)
    except Exception as e:  # never break the user's import of torch.distributed.tensor
        warnings.warn(f"fp8_dummy: DTensor support not registered: {e!r}", stacklevel=2)


if torch.distributed.is_available():
    _after_import.after_import("torch.distributed.tensor", _register_dtensor)
