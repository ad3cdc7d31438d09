"""The probe of what a MoE block's code multiplies its experts' outputs by beyond a normalized
combination: the router's combine weights summing to c per token (Inkling's ``route_scale``
8, DeepSeek-V3's and GLM-4.5's ``routed_scaling_factor``), found by a forward of the model,
never by a config key. The rule divides the output weights of the experts those weights
multiply by c (:attr:`.arch.Arch.combine`), so that a MoE branch adds to the residual stream
what a dense one does (docs/realistic.md#the-rule-per-architecture)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping

import torch

from .probes import forward, input_of, stand_ins
from .rules import ROUTER

__all__ = ["block_calls", "combine_gains", "fixed_inputs", "moe_routers"]

_TOLERANCE = 1e-3  # a sum constant per token to this (relative): the code normalizes it
_GRID = 1024  # c rounded to 1/1024: float32's rounding never moves it (2.5 and 8 are exact)


def moe_routers(layers: list) -> list[tuple[str, torch.nn.Module, torch.nn.Module]]:
    """(MoE block's name, block, router) of each router (a module named ``gate``/``router``
    with a 2-D weight) directly inside a child of a decoder layer."""
    found = []
    for prefix, layer in layers:
        for local, child in layer.named_children():
            for sub, m in child.named_children():
                w = getattr(m, "weight", None)
                if sub in ROUTER and isinstance(w, torch.Tensor) and w.dim() == 2:
                    found.append((f"{prefix}.{local}", child, m))
    return found


def _weights(out) -> list[int]:
    """The positions of a router's combine weights in its output tuple: its floating tensors
    after the first (the logits), those of the token count's leading shape."""
    if not isinstance(out, (tuple, list)) or len(out) < 2:
        return []
    return [i for i, t in enumerate(out) if i and isinstance(t, torch.Tensor)
            and t.is_floating_point() and t.dim() >= 1]  # fmt: skip


def fixed_inputs(routers: list) -> list:
    """Hooks that give each MoE block of ``routers`` (:func:`moe_routers`) a fixed random input
    of its input's shape, in float32 (the block then computes in its stand-ins' dtype), the same
    in every forward, and hand its output back in the model's dtype: what the model holds
    before the block is never read (a poisoned or filled model gives the same facts)."""
    inputs: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}

    def on_block(block):
        def hook(_, args, kwargs):  # a fixed input, the same in every run
            x = input_of(args, kwargs)
            if x is None:
                return None
            if block not in inputs:
                g = torch.Generator().manual_seed(1)
                inputs[block] = torch.randn(x.shape, generator=g).to(x.device)
                dtypes[block] = x.dtype
            if args:
                return (inputs[block], *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": inputs[block]}

        return hook

    def on_block_out(block):
        def hook(_, __, out):  # back to the model's dtype for the layers after it
            dtype = dtypes.get(block)
            if dtype is None:
                return None
            if isinstance(out, torch.Tensor):
                return out.to(dtype)
            if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
                return type(out)([out[0].to(dtype), *out[1:]])
            return None

        return hook

    hooks = []
    for block, moe, _ in routers:
        hooks.append(moe.register_forward_pre_hook(on_block(block), with_kwargs=True))
        hooks.append(moe.register_forward_hook(on_block_out(block)))
    return hooks


def block_calls(routers: list) -> tuple[list, dict[str, list]]:
    """Hooks recording how a forward calls each MoE block of ``routers``
    (:func:`moe_routers`), and the record: block name -> one entry per call, (shape, dtype,
    device) of its input where the call passes that one tensor alone (``block(x)``), else
    None."""
    calls: dict[str, list] = {}

    def on_block(block):
        def hook(_, args, kwargs):
            x = args[0] if len(args) == 1 and not kwargs else None
            plain = isinstance(x, torch.Tensor) and type(x) is torch.Tensor
            calls.setdefault(block, []).append((x.shape, x.dtype, x.device) if plain else None)

        return hook

    seen: set[int] = set()
    hooks = []
    for block, moe, _ in routers:
        if id(moe) not in seen:
            seen.add(id(moe))
            hooks.append(moe.register_forward_pre_hook(on_block(block), with_kwargs=True))
    return hooks, calls


def _alone(routers: list, calls: Mapping[str, list] | None) -> list | None:
    """(block name, block, its input's (shape, dtype, device)) of each MoE block, in the
    forward's order, where a forward of the model (``calls``: :func:`block_calls`' record) called
    every block once with its input alone; else None."""
    if not calls:
        return None
    blocks: dict[str, tuple] = {}
    for block, moe, _ in routers:
        made = calls.get(block, [])
        if len(made) != 1 or made[0] is None or blocks.get(block, (None, moe))[1] is not moe:
            return None
        blocks[block] = (block, moe, made[0])
    if len(calls) != len(blocks) or len({id(b[1]) for b in blocks.values()}) != len(blocks):
        return None
    return list(blocks.values())


def _run_alone(blocks: list, params: dict[str, torch.Tensor]) -> str:
    """Each block of ``blocks`` (:func:`_alone`) called as the model's forward calls it, on an
    input of its shape (the probe's hooks put the fixed input in its place) with its
    parameters of ``params``: "", or why one failed (:func:`.probes.forward`'s words)."""
    owned: dict[str, dict[str, torch.Tensor]] = {block: {} for block, _, _ in blocks}
    for name, t in params.items():  # each parameter under its block's own name
        block, _, local = name.rpartition(".")
        while block and block not in owned:
            block, _, more = block.rpartition(".")
            local = f"{more}.{local}"
        if block:
            owned[block][local] = t
    for block, moe, (shape, dtype, device) in blocks:
        own = owned[block]
        try:
            torch.func.functional_call(moe, own, (torch.zeros(shape, dtype=dtype, device=device),))
        except Exception as e:  # noqa: BLE001 (a probe never raises: the plain rule instead)
            return f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return ""


def combine_gains(
    model: torch.nn.Module,
    layers: list,
    failed: list,
    watch: Callable | None = None,
    calls: Mapping[str, list] | None = None,
) -> dict[str, float]:
    """Module name -> c for each module holding weights that a MoE block's combine weights
    multiply, where those weights sum to a constant c != 1 per token, on a fixed random
    input with the parameters :func:`.probes.stand_ins` (what the model holds is neither read nor
    written): one forward records the sums; where one is c != 1, a second, with the combine
    weights doubled, names the block's children whose outputs change (the weighted experts; a
    shared expert the code adds unweighted keeps its output). ``watch``: called with those
    parameters, a context the first forward runs in (its hooks return nothing: the forward is
    the plain one on these inputs and parameters), whose ``ran`` is set True where that
    forward ran to its end. ``calls``: how a forward of the model that ran to the last decoder
    layer called the MoE blocks (:func:`block_calls`); where it called each once with its input
    alone, the forwards are the blocks' own, called so (what runs in a block is its own code
    on the fixed input and the stand-ins: what comes before it is never read), else the
    model's."""
    routers = moe_routers(layers)
    if not routers:
        return {}
    sums: dict[str, float] = {}
    seen: dict[str, list] = {}
    double = [False]
    hooks = fixed_inputs(routers)

    def on_router(block):
        def hook(_, __, out):
            picks = _weights(out)
            if not picks:
                return None
            if double[0]:
                return type(out)(t * 2 if i in picks else t for i, t in enumerate(out))
            rows = [out[i].float().reshape(-1, out[i].shape[-1]).sum(-1) for i in picks]
            if len({r.numel() for r in rows}) != 1:
                return None  # not one weight per token and expert
            total = sum(rows)
            if total.numel() and total.abs().max() > 0:
                c = total.mean().item()
                if math.isfinite(c) and (total - c).abs().max().item() <= _TOLERANCE * abs(c):
                    sums[block] = round(c * _GRID) / _GRID  # the same c from any run
            return None

        return hook

    def on_child(name):
        def hook(_, __, out):
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(first, torch.Tensor):
                seen.setdefault(name, []).append(first.detach().float().clone())

        return hook

    for block, moe, router in routers:
        hooks.append(router.register_forward_hook(on_router(block)))
        for local, child in moe.named_children():
            if child is not router:
                hooks.append(child.register_forward_hook(on_child(f"{block}.{local}")))
    params = stand_ins([(block, moe) for block, moe, _ in routers])
    alone = _alone(routers, calls)
    run = (lambda: forward(model, params)) if alone is None else (
        lambda: _run_alone(alone, params)
    )  # fmt: skip
    watcher = watch(params) if watch is not None else None
    try:
        with watcher if watcher is not None else contextlib.nullcontext():
            why = run()
        if watcher is not None:
            watcher.ran = not why
        double[0] = True
        # the second names the experts a sum c != 1 multiplies: none to name where every sum
        # is 1 or no constant (their experts get the plain rule either way)
        if not why and any(abs(c - 1) >= _TOLERANCE for c in sums.values()):
            why = run()
    finally:
        for h in hooks:
            h.remove()
    if why:
        failed.append(f"the probe of the MoE blocks' combine weights failed ({why}): their "
                      "experts get the plain rule")  # fmt: skip
        return {}
    gains = {}
    modules = dict(model.named_modules())
    for name, outs in seen.items():
        block = name.rpartition(".")[0]
        c = sums.get(block)
        if c is None or abs(c - 1) < _TOLERANCE or len(outs) != 2 or torch.equal(*outs):
            continue
        for sub, m in modules[name].named_modules(prefix=name):
            if any(True for _ in m.parameters(recurse=False)):
                gains[sub] = c
    return gains
