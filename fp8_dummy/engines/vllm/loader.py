"""vLLM's ``DummyModelLoader.load_weights`` as one planned fill (docs/engines.md, "vLLM: the
plugin"): the walk of its loop (each module's parameters and persistent buffers in
``model.modules()``'s order, through vLLM's own helpers), every tensor planned and checked
before any is written, each kind of tensor proven against vLLM's own per-tensor function
called as the loop calls it, and one run. ``--load-format fp8_dummy``'s loader, and the
plugin's ``dummy`` where vLLM's method is one we have read (:func:`recognized`) and its walk
proves itself (:func:`walk_proven`)."""

from __future__ import annotations

import contextvars
import inspect
import types
from typing import Any, Callable, NamedTuple

import torch

from ... import _proof
from .. import core
from .rules import generation, semantics

__all__ = ["READ", "Online", "fill", "named", "probe_model", "recognized", "recording", "walk"]
__all__ += ["walk_proven"]

# Every name the released methods (0.30-0.33) use: their loop, its checks, vLLM's online
# quantization step and the per-tensor function. A release that adds a step (a call, a test
# of a layer's class) is left to its own method.
READ = frozenset(
    {"modules", "get_layerwise_info", "can_load", "_process_online_quant_layer"}
    | {"get_layer_tensors", "items", "_non_persistent_buffers_set"}
    | {"initialize_single_dummy_weight"}
)
# Set while the walk's probe runs vLLM's method: the plugin's per-tensor function then records
# each call (the tensor, the arguments after it) instead of filling.
recording: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "fp8_dummy_vllm_recording", default=None
)


class Online(NamedTuple):
    """An online-quantized layer: vLLM's own processing materializes, fills and quantizes it."""

    layer: torch.nn.Module
    info: Any


def named(local: str) -> core.Call:
    """The loop's call of the per-tensor function on a tensor of this local name (0.33 on; one
    function for every load: a plan kept from the last load is found again)."""
    return (), {"name": local}


def recognized(method: Any) -> bool:
    """Whether ``method`` (vLLM's ``DummyModelLoader.load_weights``) uses only names of the
    released ones we read (:data:`READ`; its nested code too)."""
    code = getattr(inspect.unwrap(method), "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return names <= READ


def walk(model: torch.nn.Module, dl: Any, online: bool = True) -> list | None:
    """The loop's tensors, as :class:`core.Walked` lists (local names) between the
    :class:`Online` layers, in order; ``online=False``: None where there is one."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    steps: list = [core.Walked(names, tensors)]
    for layer in model.modules():
        info = dl.get_layerwise_info(layer)
        if info.can_load():
            if not online:
                return None
            names, tensors = [], []
            steps += [Online(layer, info), core.Walked(names, tensors)]
            continue
        skip = layer._non_persistent_buffers_set
        for name, t in dl.get_layer_tensors(layer).items():
            if name not in skip:
                names.append(name)
                tensors.append(t)
    return [s for s in steps if isinstance(s, Online) or s.tensors]


def _call() -> core.Call | Callable[[str], core.Call]:
    return named if generation() >= 33 else ((), {})


def fill(loader: Any, steps: list, own: Callable | None) -> None:
    """The walk's steps: every tensor planned and checked before any is written (``own``:
    vLLM's per-tensor function, proven against, bound where ours does not fill), then each
    step in order (online-quantized layers by vLLM's own processing)."""
    sem, call = semantics(), _call()
    if len(steps) == 1 and not isinstance(steps[0], Online):  # one plan, kept for the next load
        core.fill(steps[0], sem, call, engine=own)
        return
    plans = [s if isinstance(s, Online) else core.plan(s, sem, call, engine=own) for s in steps]
    for step in plans:
        if isinstance(step, Online):
            loader._process_online_quant_layer(step.layer, step.info)
        else:
            core.run(step)


def probe_model() -> torch.nn.Module:
    """What the loop's walk decides, each once: modules nested and one reached twice (visited
    once), a parameter tied into a second module (filled twice), a None parameter, a
    persistent and a non-persistent buffer, a meta parameter, local names the per-tensor
    function reads (``weight``, ``*scale``)."""
    # Devices and dtypes explicit: vLLM loads under its target device's and dtype's contexts.
    root, inner = torch.nn.Module(), torch.nn.Module()
    root.weight = _param((2, 3), torch.float8_e4m3fn)
    root.register_parameter("bias", None)
    root.register_buffer("weight_scale", torch.empty(2, dtype=torch.uint8, device="cpu"))
    root.register_buffer("cache", torch.empty(3, dtype=torch.float32, device="cpu"), False)
    inner.norm = _param((3,), torch.bfloat16)
    inner.deferred = _param((2,), torch.float32, "meta")
    inner.tied = root.weight
    root.first, root.again = inner, inner
    return root


def _param(shape: tuple, dtype: torch.dtype, device: str = "cpu") -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device), False)


def walk_proven(loader: Any, dl: Any, theirs: Callable, model_config: Any) -> bool:
    """Whether vLLM's own ``load_weights`` (``theirs``) on :func:`probe_model` calls the
    per-tensor function on exactly the tensors, in the order and with the arguments, that
    :func:`walk` and the plan's call give (so the plan's fill, each kind of tensor proven
    against that function called so, is vLLM's). The walk is the same code on every device:
    a CPU probe, keyed by vLLM's version (the proof registry, docs/contract.md)."""
    sem = semantics()
    key = f"{sem.path}: {sem.name} DummyModelLoader.load_weights: the walk of one plan"

    def probe() -> str | None:
        model, calls = probe_model(), []
        token = recording.set(calls)
        try:
            theirs(loader, model, model_config)
        finally:
            recording.reset(token)
        steps, call = walk(model, dl, online=False), _call()
        if steps is None:
            return "the probe model has an online-quantized layer"
        ours = [
            (t, *(call(n) if callable(call) else call))
            for s in steps
            for n, t in zip(s.names, s.tensors)
        ]
        for i, (a, b) in enumerate(zip(calls, ours)):
            if a[0] is not b[0] or a[1:] != b[1:]:
                return f"call {i}: vLLM's loop made {_shown(a)}, ours {_shown(b)}"
        if len(calls) != len(ours):
            return f"vLLM's loop made {len(calls)} per-tensor calls, ours {len(ours)}"
        return None

    return _proof.proven(key, probe)


def _shown(call: tuple) -> str:
    t, args, kwargs = call
    given = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join([f'<{t.dtype} {tuple(t.shape)}>', *given])})"
