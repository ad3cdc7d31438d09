"""The realistic rule over a whole model: each tensor's :class:`~.rules.Spec` from its name,
logical shape, dtype, module, its module's other tensors and the architecture's facts
(:mod:`.arch`); and which tensors vLLM's dummy loader fills, in its order."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from ..tensors import walk
from .arch import Arch, derive
from .rules import LAYER_INDEX, Spec, module_kind, router_holders, tensor_spec
from .ssm import scan_gains

__all__ = ["model_specs", "model_tensors"]


def _layers(model: torch.nn.Module, names: list[str]) -> int:
    """The number of decoder layers: the config's, else the highest ``layers.<i>`` + 1."""
    config = getattr(model, "config", None)
    for c in (config, getattr(config, "text_config", None)):
        n = getattr(c, "num_hidden_layers", None)
        if isinstance(n, int) and n > 0:
            return n
    found = [int(m.group(1)) for m in map(LAYER_INDEX.search, names) if m]
    return max(found, default=0) + 1


def model_specs(
    model: torch.nn.Module,
    tensors: Sequence[tuple[torch.nn.Module, str, torch.Tensor, Sequence[int]]],
    num_layers: int | None = None,
    arch: Arch | None = None,
    heads: Collection[str] = (),
) -> dict[str, Spec]:
    """Full name -> :func:`tensor_spec` for each ``(module, full name, tensor, logical shape)``
    (a sharded loader passes the TP=1 shapes: every layout gets the same specs); ``arch``:
    the architecture's facts, by default :func:`.arch.derive` of ``model``; ``heads``: names
    that are the lm_head whatever they are called (a checkpoint's name of the class's output
    embedding: DeepSeek-V4's ``head.weight``)."""
    if num_layers is None:
        num_layers = _layers(model, [name for _, name, _, _ in tensors])
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
    arch = derive(model) if arch is None else arch
    siblings: dict[str, dict] = {}
    split = [name.rpartition(".") for _, name, _, _ in tensors]  # (owner, ".", local)
    for (_, _, t, shape), (prefix, _, local) in zip(tensors, split):
        siblings.setdefault(prefix, {})[local] = (tuple(shape), t.dtype)
    # tensor_spec reads a name's last two parts only (the tensor's and its owner's): a model's
    # experts and layers are a few kinds of tensor, each spec made once. A kind's key holds
    # what tensor_spec reads (its owner's tensors by a number per set of them: hashed once).
    sets: dict[tuple, int] = {}
    # (an owner of one tensor, most of a MoE's, needs no sort)
    near = {prefix: sets.setdefault(tuple(sorted(d.items()) if len(d) > 1 else d.items()),
                                    len(sets))
            for prefix, d in siblings.items()}  # fmt: skip
    kinds: dict[int, str] = {}  # id(module) -> module_kind
    # the modules whose weight is a router's, whatever its name (none known without the model)
    routers = router_holders(model) if model is not None else set()
    residual, gains, centered, combine = arch.residual, arch.gains, arch.centered, arch.combine
    # an SSM scan's output projection reads its C . B products' RMS (:mod:`.ssm`): by the config
    scans = scan_gains(getattr(model, "config", None), siblings)
    if scans:
        combine = {**combine, **{o: combine.get(o, 1.0) * g for o, g in scans.items()}}
    normed = {*arch.post, *arch.multiplier, *arch.offset}  # norm_value is 1 for the others
    made: dict[tuple, Spec] = {}
    specs = {}
    for (module, name, t, shape), (owner, dot, local) in zip(tensors, split):
        kind = kinds.get(id(module))
        if kind is None:
            kind = kinds[id(module)] = module_kind(module)
        if name in heads:
            kind = "lm_head"
        value = getattr(t, "dummy_weight_value", None)
        norm = arch.norm_value(owner, num_layers) if owner in normed else 1.0
        # the name's last two parts, as name.rsplit(".", 2)[-2:] joined
        tail = f"{owner.rpartition('.')[2]}.{local}" if dot else local
        key = (tail, tuple(shape), t.dtype, near[owner], kind,
               value, owner in residual, norm, name in gains, combine.get(owner, 1.0),
               name in centered, id(module) in routers and local == "weight")  # fmt: skip
        spec = made.get(key)
        if spec is None:
            kw = dict(layers=num_layers, module=kind, value=value, residual=key[6], norm=norm)
            kw.update(gain=key[8], combine=key[9], centered=key[10], router=key[11])
            spec = made[key] = tensor_spec(
                name, shape, t.dtype, embed_scale=arch.embed_scale, siblings=siblings[owner], **kw
            )
        specs[name] = spec
    return specs


def model_tensors(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.Tensor, tuple]]:
    """(module, full name, tensor, shape) of each tensor vLLM's dummy loader fills, in its
    order: what :func:`model_specs` takes for a whole (unsharded) model."""
    modules = dict(model.named_modules(remove_duplicate=False))
    return [(modules[n.rpartition(".")[0]], n, t, t.shape) for n, t in walk(model, "modules")]
