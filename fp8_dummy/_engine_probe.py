"""The proof of a whole-model engine function (SGLang's and TensorRT-LLM's
``initialize_dummy_weights``): once per kind of tensor, the engine's own function runs on a
probe model holding one small poisoned tensor under the real tensor's dotted name, called
exactly as the engine's loader called it, and our plan of that call on a twin model; the
bytes are compared (fp8_dummy/_proof.py keeps the verdicts). Where the engine raises, our
plan must refuse that tensor with the same exception type."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ._engine_common import Action, probe_tensor
from ._proof import first_difference, proven

__all__ = ["call_text", "fill_whole_model", "probe_model", "proven_tensor_kind"]

Entry = tuple[str, torch.Tensor, Action]


def _whole_model_bounds(
    args: tuple, kwargs: dict, seed: int, engine: str
) -> tuple[float, float, int]:
    """(low, high, seed) of a call ``f(model, low=-1e-3, high=1e-3, seed=...)``, the
    signature SGLang's and TensorRT-LLM's functions share but for the default ``seed``; a
    TypeError naming ``engine`` for any other call (a later release's own function decides)."""
    if len(args) > 3 or set(kwargs) - {"low", "high", "seed"}:
        raise TypeError(f"not {engine}'s initialize_dummy_weights signature")
    values = {"low": -1e-3, "high": 1e-3, "seed": seed, **dict(zip(("low", "high", "seed"), args))}
    values.update(kwargs)
    return values["low"], values["high"], values["seed"]


def call_text(args: tuple, kwargs: dict) -> str:
    """The call as the keys show it: ``(model, a, b, k=v)``."""
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return "(" + ", ".join(["model", *shown]) + ")"


def probe_model(name: str, like: torch.Tensor, strided: bool = False) -> torch.nn.Module:
    """A module tree whose only state_dict entry is ``name`` (dotted), a probe tensor."""
    root = torch.nn.Module()
    *path, leaf = name.split(".")
    m = root
    for part in path:
        child = torch.nn.Module()
        m.add_module(part, child)
        m = child
    m.register_buffer(leaf, probe_tensor(like, strided))
    return root


def proven_tensor_kind(
    engine: str,
    original: Callable[..., Any],
    name: str,
    t: torch.Tensor,
    call: tuple[tuple, dict],
    plan: Callable[[torch.nn.Module], list[Entry]],
    fill: Callable[[list[Entry]], None],
    *,
    layout: bool = False,
) -> bool:
    """Whether our plan of ``original(model, *args, **kwargs)`` may stand in for it on
    tensors like ``t``: once per (engine and version, device, dtype, local name, number of
    dimensions, [row-major contiguous or not,] the arguments). ``plan(model)`` gives our
    entries for a model, ``fill(entries)`` carries them out. ``layout``: the engine's bytes
    depend on whether the tensor is row-major contiguous (TensorRT-LLM), so the key and the
    probe's layout follow it."""
    args, kwargs = call
    strided = layout and t.dim() > 0 and not t.is_contiguous()
    local = name.rsplit(".", 1)[-1]
    key = f"{engine} {t.device} {t.dtype} name={local!r} dims={min(t.dim(), 2)}"
    if layout:
        key += f" layout={'strided' if strided else 'contiguous'}"
    key += f" call={call_text(args, kwargs)}"

    def probe() -> str | None:
        theirs, ours = probe_model(name, t, strided), probe_model(name, t, strided)
        entries = plan(ours)
        try:
            original(theirs, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 (the same refusal as ours is a match)
            action = entries[0][2]
            refusal = action.value if action.kind == "error" else None
            if refusal is not None and isinstance(e, refusal[0]):
                return None
            return f"the engine raised {type(e).__name__}: {e}; our plan is {action.kind!r}"
        fill(entries)
        return first_difference(ours.get_buffer(name), theirs.get_buffer(name))

    return proven(key, probe)


def fill_whole_model(
    engine: str,
    original: Callable[..., Any] | None,
    model: torch.nn.Module,
    call: tuple[tuple, dict],
    *,
    seed: int,
    key: str,
    plan: Callable[[torch.nn.Module, float, float], list[Entry]],
    run: Callable[[list[Entry], int], None],
    layout: bool = False,
) -> None:
    """The model as the engine's whole-model function ``original`` called with ``call``
    (args, kwargs after the model) fills it: ours where every kind of tensor met passed its
    probe against ``original`` (None: our semantics alone), else ``original`` itself on the
    whole model (its semantics may be a later release's). ``seed``: the engine's default;
    ``key``: the engine and version as the proof keys name them; ``plan(model, low, high)``
    our entries, ``run(entries, seed)`` their fill."""
    args, kwargs = call
    try:
        low, high, seed = _whole_model_bounds(args, kwargs, seed, engine)
    except TypeError:  # arguments of a later release: its own function decides
        if original is None:
            raise
        return original(model, *args, **kwargs)

    def plan_of(m: torch.nn.Module) -> list[Entry]:
        return plan(m, low, high)

    def fill(entries: list[Entry]) -> None:
        run(entries, seed)

    entries = plan_of(model)
    if original is not None:
        for name, t, _ in entries:
            if t.is_meta:
                continue  # nothing to compare: both sides refuse or skip it alike
            if not proven_tensor_kind(key, original, name, t, call, plan_of, fill, layout=layout):
                return original(model, *args, **kwargs)
    fill(entries)
