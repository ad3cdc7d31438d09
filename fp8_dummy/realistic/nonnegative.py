"""The probe of which expert weights only ever multiply a non-negative activation (Nemotron-H's
non-gated squared-ReLU experts: ``down_proj(relu(up_proj(x))²)``), found by a forward of the
model, never by a class or config name. Such an activation has a mean that is the same for every
token, so through random output weights the experts add to the residual stream a part common to
every token, which shifts every later router's logits alike and moves its routing off its
target; the rule gives those weights rows of zero sum over their inputs
(:attr:`.arch.Arch.centered`, docs/realistic.md#the-rule-per-architecture), and the common
part vanishes. A gated activation (``act(gate) * up``) takes both signs: never centered."""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from .combine import fixed_inputs, moe_routers
from .probes import forward, stand_ins

__all__ = ["Products", "nonnegative_inputs"]

_F = torch.nn.functional
# the products a weight meets its input in: a linear, a matrix product, experts' grouped ones
_PRODUCTS = {_F.linear, torch.matmul, torch.mm, torch.bmm, torch.einsum, torch.Tensor.matmul}
_PRODUCTS |= {torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm}
_GROUPED = (getattr(torch, "_grouped_mm", None), getattr(_F, "grouped_mm", None))
_PRODUCTS |= {f for f in _GROUPED if f is not None}


def _root(t: torch.Tensor) -> torch.Tensor:
    while t._base is not None:
        t = t._base
    return t


class Products(TorchFunctionMode):
    """Records, per stand-in matrix of ``params`` (by the tensor its views come from), whether
    every input it was multiplied with was non-negative and not all zero; ``ran``: whether the
    forward it watched ran to its end (set by whoever runs it)."""

    def __init__(self, params: dict[str, torch.Tensor]):
        super().__init__()
        self.owners = {id(_root(t)): name for name, t in params.items() if t.dim() >= 2}
        self.seen: dict[str, bool] = {}
        self.ran = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _PRODUCTS:
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            names = [self.owners.get(id(_root(t))) for t in tensors]
            inputs = [t for t, n in zip(tensors, names) if n is None and t.is_floating_point()]
            for name in filter(None, names):
                ok = bool(inputs) and bool((inputs[0] >= 0).all()) and bool(inputs[0].any())
                self.seen[name] = self.seen.get(name, True) and ok
        return func(*args, **kwargs)


@contextlib.contextmanager
def _removed(hooks: list):
    """``hooks`` held for the block, removed when it ends, however it ends."""
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def nonnegative_inputs(
    model: torch.nn.Module, layers: list, failed: list, watched: Products | None = None
) -> frozenset:
    """The names of the matrices in the MoE blocks (experts, shared experts; routers included
    but never found) that are multiplied only with non-negative inputs, on a fixed random input
    with the parameters :func:`.probes.stand_ins` (what the model holds is neither read nor
    written). ``watched``: the products of that same forward run by another probe (the combine
    probe's first: :func:`.combine.combine_gains`), read where it ran to its end; else the
    forward is run here."""
    if watched is not None and watched.ran:
        return frozenset(name for name, ok in watched.seen.items() if ok)
    routers = moe_routers(layers)
    if not routers:
        return frozenset()
    params = stand_ins([(block, moe) for block, moe, _ in routers])
    mode = Products(params)
    with _removed(fixed_inputs(routers)), mode:
        why = forward(model, params)
    if why:
        failed.append(f"the probe of the experts' activations failed ({why}): their output "
                      "weights get the plain rule")  # fmt: skip
        return frozenset()
    return frozenset(name for name, ok in mode.seen.items() if ok)
