"""Whole-model dummy initialization with a serving engine's semantics."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any, Callable, Literal

import torch

from . import reference
from ._engine_common import Action, fusable, random_bytes_, sglang_action, vllm_action
from ._progress import Progress
from ._proof import corrupt_, fault
from .ops import init_, init_many_
from .stateless import init_stateless_

__all__ = ["SEMANTICS", "initialize_dummy_weights", "is_scale_tensor"]

# Show progress by default only for models at least this large, on a terminal.
PROGRESS_THRESHOLD_BYTES = 1 << 30
# With progress shown, CUDA tensors are batched in runs of about this many bytes (in
# walk order), so the display advances per run; without, one batch per call.
PROGRESS_BATCH_BYTES = 1 << 30

SEMANTICS = ("vllm-0.33", "vllm-0.30", "sglang-0.5")
Semantics = Literal["vllm-0.33", "vllm-0.30", "sglang-0.5"]
Entry = tuple[str, torch.Tensor, Action]  # (dotted name, tensor, what to do)

_SCALE_NAME = re.compile(r"(scale|scale_inv|_scale_[^.]*)$")


def is_scale_tensor(name: str, tensor: torch.Tensor) -> bool:
    """The default rule of ``scales="neutral"``: a 0-dim tensor, or one whose last name
    component ends in ``scale`` or ``scale_inv`` or contains ``_scale_`` followed by a
    suffix (``weight_scale``, ``input_scale``, ``k_scale``, ``weight_scale_inv``,
    ``weight_scale_2``). Such tensors multiply FP8 values; random ±1e-3 there turns a
    model's activations into noise or zeros, so benchmarks want 1.0 instead."""
    return tensor.dim() == 0 or bool(_SCALE_NAME.search(name.rsplit(".", 1)[-1]))


def initialize_dummy_weights(
    model: torch.nn.Module,
    low: float | None = None,
    high: float | None = None,
    seed: int = 1234,
    *,
    semantics: Semantics = "vllm-0.33",
    mode: Literal["reference", "stateless"] = "reference",
    scales: Literal["random", "neutral"] = "random",
    is_scale: Callable[[str, torch.Tensor], bool] = is_scale_tensor,
    progress: bool | None = None,
) -> None:
    """Fill the model's weights in place with the bytes a serving engine's dummy loader
    gives them: every tensor its own fresh generator of its device seeded with ``seed``.

    semantics (see docs/engines.md):
      ``"vllm-0.33"`` (default): vLLM 0.33's ``DummyModelLoader`` (every module's own
        parameters and persistent buffers). 8-bit floats in ±1.0 and wider floats in
        ±1e-3 unless ``low``/``high`` are given; E8M0 tensors and uint8 tensors named
        ``*scale*`` set to byte 120 (2^-7); int8, uint8 and packed FP4 random bytes;
        other integers untouched; a parameter's ``dummy_weight_value`` attribute wins.
      ``"vllm-0.30"``: vLLM 0.28-0.32: floating tensors only, in ±1e-3 by default
        (``dummy_weight_value`` honoured as from 0.30).
      ``"sglang-0.5"``: SGLang 0.5.23's ``initialize_dummy_weights``: the floating
        tensors of ``state_dict()``, ±1e-3 by default, names ending in
        ``weight_scale_inv`` or ``weight_scale_2`` set to 1.0.
    Meta tensors are skipped (vLLM defers them; SGLang raises). Where the engine raises
    (SGLang on meta tensors, packed FP4 through a float path), so does this, before
    anything is written. A tensor reachable under several names (tied weights) is filled
    once. CUDA float tensors are filled by :func:`fp8_dummy.init_many_` (one launch per
    device and FP8 dtype), the rest one by one; tensors sharing storage in other ways are
    filled one by one in the engine's order.

    mode: ``"reference"`` (the default): the engine's bytes, which on CUDA depend on
        the GPU model for large tensors, as the engine's do. ``"stateless"``: random
        floats by :func:`fp8_dummy.init_stateless_` instead (the same bytes on every
        device); integer random bytes stay the engine's.
    scales: ``"neutral"`` sets the floating tensors that would get random values and for
        which ``is_scale(name, tensor)`` holds (``name`` dotted) to 1.0 (opt-in: it
        changes those bytes).
    progress: show tensors done, bytes done and throughput (tqdm if installed, else one
        line on stderr). ``None``: only for models of at least 1 GiB on a terminal.
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    if scales not in ("random", "neutral"):
        raise ValueError(f"scales must be 'random' or 'neutral', got {scales!r}")
    rocm = torch.version.hip is not None
    entries = []
    for name, local, t in walk(model, "state_dict" if semantics == "sglang-0.5" else "modules"):
        if semantics == "sglang-0.5":
            lo, hi = (-1e-3 if low is None else low), (1e-3 if high is None else high)
            action = sglang_action(t, lo, hi, name)
        else:
            generation = 33 if semantics == "vllm-0.33" else 30
            action = vllm_action(t, low, high, local, generation, rocm=rocm)
        if scales == "neutral" and action.kind == "uniform" and is_scale(name, t):
            action = Action("fill", value=1.0)
        entries.append((name, t, action))
    # SGLang's float path is vLLM's older one (.to(float16)): the same bytes, but it is
    # what a tensor we do not fuse (a wrapper subclass) must go through.
    sglang = semantics == "sglang-0.5"
    run_plan(entries, seed, mode=mode, progress=progress, reference=_ref_old if sglang else None)


def walk(model: torch.nn.Module, how: str) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(dotted name, local name, tensor) in an engine's order. ``"modules"``: vLLM
    >= 0.30's loader, every module's own parameters then buffers, non-persistent buffers
    left out, the tensors themselves (their attributes visible); ``"state_dict"``:
    ``model.state_dict()`` (detached tensors, attributes gone)."""
    if how == "state_dict":
        for name, t in model.state_dict().items():
            yield name, name.rsplit(".", 1)[-1], t
        return
    for prefix, layer in model.named_modules():
        own = {**layer._parameters, **layer._buffers}
        for local, t in own.items():
            if t is not None and local not in layer._non_persistent_buffers_set:
                yield (f"{prefix}.{local}" if prefix else local), local, t


def _ref_old(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    reference.old_path(t, low, high, seed)


def run_plan(
    entries: list[Entry],
    seed: int,
    *,
    mode: str = "reference",
    progress: bool | None = False,
    reference: Callable[[torch.Tensor, float, float, int], Any] | None = None,
    fault_path: str | None = None,
) -> None:
    """Carry out the actions. ``uniform`` goes through our fused operator where
    :func:`fusable` allows it (the engines' drop-ins decide beforehand what their proofs
    allow: ``reference`` actions), else through ``reference`` (default
    :func:`fp8_dummy.reference.new_path`); ``call`` runs ``action.value()``. ``fault_path``:
    the engine integration whose injected fault (FP8_DUMMY_FAULT) corrupts one byte of each
    fused fill (tests of the proof). No progress display by default: inside an engine, its
    own loader shows none.

    Fill order only matters where tensors share memory, so: an exact alias with the same
    action is filled once; every entry on a storage that is touched in any other way
    (different views, or one tensor under different actions) is done strictly in the
    given order; the rest is free to be batched."""
    if mode not in ("reference", "stateless"):
        raise ValueError(f"mode must be 'reference' or 'stateless', got {mode!r}")
    for name, _, action in entries:  # refuse before anything is written
        if action.kind == "error":
            kind, message = action.value
            raise kind(f"fp8_dummy: {name}: {message}")
    entries = [e for e in entries if e[2].kind != "skip"]
    ids = [_identity(t) for _, t, _ in entries]
    views: dict[tuple, set[tuple]] = {}
    first: dict[tuple, Action] = {}
    ordered_storages: set[tuple] = set()
    for (_, t, action), (storage, key) in zip(entries, ids):
        views.setdefault(storage, set()).add(key)
        # In reference mode a DTensor's fill draws from the default generator (docs/modes.md),
        # so a tied one filled twice differs from once: fill it as often as the loop does.
        redrawn = mode == "reference" and _is_dtensor(t)
        if first.setdefault(key, action) != action or len(views[storage]) > 1 or redrawn:
            ordered_storages.add(storage)
    todo, seen = [], set()
    for (_, t, action), (storage, key) in zip(entries, ids):
        if storage in ordered_storages:
            todo.append((t, action, True))
        elif key not in seen:
            seen.add(key)
            todo.append((t, action, False))
    total = sum(t.numel() * t.element_size() for t, _, _ in todo)
    if progress is None:
        progress = total >= PROGRESS_THRESHOLD_BYTES and sys.stderr.isatty()
    bar = Progress(len(todo), total) if progress else None
    ref = reference or _reference_new
    # Fused uniform CUDA tensors, one init_many_ call per (low, high, temp): 8-bit floats
    # and wider ones have different default bounds in vLLM >= 0.33 and TensorRT-LLM.
    batches: dict[tuple[float, float, bool], list[torch.Tensor]] = {}
    batch_bytes = 0

    corrupt = fault_path is not None and fault(fault_path)

    def flush() -> None:
        for (lo, hi, contiguous), batch in batches.items():
            init_many_(batch, lo, hi, seed, contiguous_temp=contiguous)
            for x in batch if corrupt else ():
                corrupt_(x)
            if bar is not None:
                for x in batch:
                    bar.update(x)
        batches.clear()

    try:
        with torch.no_grad():
            for t, action, ordered in todo:
                fused = action.kind == "uniform" and mode == "reference" and fusable(t)
                if fused and t.is_cuda and not ordered:
                    key = (action.low, action.high, action.contiguous)
                    batches.setdefault(key, []).append(t.data)
                    batch_bytes += t.numel() * t.element_size()
                    if bar is not None and batch_bytes >= PROGRESS_BATCH_BYTES:
                        flush()
                        batch_bytes = 0
                    continue
                if fused:
                    init_(t.data, action.low, action.high, seed, contiguous_temp=action.contiguous)
                    if corrupt:
                        corrupt_(t.data)
                elif action.kind == "uniform" and mode == "stateless":
                    init_stateless_(t.data, action.low, action.high, seed)
                elif action.kind in ("uniform", "reference"):
                    ref(t, action.low, action.high, seed)
                else:
                    apply_action(t, action, seed)
                if bar is not None:
                    bar.update(t)
            flush()
    finally:
        if bar is not None:
            bar.close()


def apply_action(t: torch.Tensor, action: Action, seed: int) -> None:
    """The non-uniform actions, as the engines carry them out."""
    kind = action.kind
    if kind == "fill":
        t.fill_(action.value)
    elif kind == "byte":
        t.view(torch.uint8).fill_(action.value)
    elif kind == "int8":
        random_bytes_(t, -128, 128, seed)
    elif kind == "uint8":
        random_bytes_(t.view(torch.uint8), 0, 256, seed)
    elif kind == "zero":
        t.zero_()
    elif kind == "call":
        action.value()
    elif kind != "skip":
        raise RuntimeError(f"fp8_dummy: no way to carry out {action}")


def _reference_new(t: torch.Tensor, low: float, high: float, seed: int) -> None:
    reference.new_path(t, low, high, seed)


def _is_dtensor(t: torch.Tensor) -> bool:
    return hasattr(t, "to_local") and hasattr(t, "placements")


def _identity(t: torch.Tensor) -> tuple[tuple, tuple]:
    """(storage, view) keys. A tensor without accessible storage (a wrapper subclass)
    counts as its own storage and view."""
    # A DTensor has no storage of its own (data_ptr() 0): its local shard's is what it writes.
    local = t.to_local() if _is_dtensor(t) else t
    try:
        storage = (t.device, local.untyped_storage().data_ptr())
        return storage, (t.device, local.data_ptr(), t.dtype, tuple(t.shape), t.stride())
    except (RuntimeError, NotImplementedError, TypeError):
        return ("opaque", id(t)), ("opaque", id(t))
