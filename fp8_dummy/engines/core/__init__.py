"""The engine-agnostic core (docs/engines.md): it names no engine. An engine's function as
data (:mod:`.semantics`), which tensors we may write and how (:mod:`.checks`), the kinds of a
model's tensors (:mod:`.kinds`), the plan of a fill with its one proof (:mod:`.planning`),
each kind's decision (:mod:`.deciding`), kept for the next fill (:mod:`.kept`), the walk it
plans over (:mod:`.walks`), carrying it
out (:mod:`.execution`; the cycle collector paused meanwhile: :mod:`fp8_dummy.collector`), and what
the plugins share inside the engine (:mod:`.plugins`)."""

from __future__ import annotations

from .checks import FUSED_DTYPES, checked, cuda_kernels, distinct, fusable
from .execution import PROGRESS_BATCH_BYTES, PROGRESS_THRESHOLD_BYTES, apply, random_bytes_, run
from .planning import (
    ISOLATE,
    child_probe,
    fill,
    plan,
    probe_model,
    probe_tensor,
    proven,
)
from .plugins import account, enabled, guarded, installed, own_function
from .semantics import (
    ROWS,
    SEMANTICS,
    SKIP,
    Action,
    Call,
    Kind,
    Planned,
    Rule,
    Semantics,
    bind,
    error,
    is_scale_tensor,
)
from .walks import Walked

__all__ = ["FUSED_DTYPES", "ISOLATE", "PROGRESS_BATCH_BYTES", "PROGRESS_THRESHOLD_BYTES"]
__all__ += ["ROWS", "SEMANTICS", "SKIP", "Action", "Call", "Kind", "Planned", "Rule", "Semantics"]
__all__ += ["Walked"]
__all__ += ["account", "apply", "bind", "checked", "child_probe", "cuda_kernels", "distinct"]
__all__ += ["enabled", "error", "fill", "fusable", "guarded", "installed"]
__all__ += ["is_scale_tensor", "own_function", "plan", "probe_model", "probe_tensor", "proven"]
__all__ += ["random_bytes_", "run"]
