"""The walk a whole-model fill plans over (:class:`Walked`): the engine's order of the model's
tensors, made without a Python object per tensor where that is proven to be the same walk.
``"modules"`` (a loop over the modules): :func:`fp8_dummy.tensors.walk_shape`, its shape and
tensors, the names made only for a new plan. ``"state_dict"`` (a loop over ``state_dict()``):
:func:`fp8_dummy.tensors.state_dict_shape`, a reading of the modules' dictionaries as torch's
``state_dict`` reads them, used once proven against ``state_dict()`` itself on a probe model
of every branch it takes (keyed by torch's version: the proof registry), and only where the
fill reads no more of a tensor than its data (a Parameter's own attributes are not its
detached copy's); else state_dict()."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ... import _proof
from ...tensors import shape_names, state_dict_shape, walk_lists, walk_shape

__all__ = ["Walked", "state_walk_probe", "walked"]

_STATE_KEY = f"core: torch {torch.__version__}: the state_dict walk"


class Walked(NamedTuple):
    """A model's walk as two lists (:func:`fp8_dummy.tensors.walk_lists`): what a fill plans.
    ``shape``: the walk's shape (:func:`fp8_dummy.tensors.walk_shape`), of which the names
    are a function: then ``names`` may be None, made only where the plan is not kept."""

    names: list[str] | None
    tensors: list[torch.Tensor]
    shape: list | None = None


def walked(model: torch.nn.Module, order: str, objects: bool = False) -> Walked:
    """The model's walk in ``order``: its shape and tensors where that walk is proven.
    ``objects``: the fill looks at the tensor objects beyond their data (a rule reading their
    attributes, an engine's function called with them): state_dict()'s own objects then."""
    shaped = None
    if order == "modules":
        shaped = walk_shape(model)
    elif order == "state_dict" and not objects and _proof.proven(_STATE_KEY, state_walk_probe):
        shaped = state_dict_shape(model)
    if shaped is None:
        return Walked(*walk_lists(model, order))
    return Walked(None, shaped[1], shaped[0])


def state_walk_probe() -> str | None:
    """None if :func:`fp8_dummy.tensors.state_dict_shape` gives ``state_dict()``'s names and
    tensors (the same bytes, the class as state_dict's where not a Parameter) on a model of
    each branch: nested modules, one reached under two names, a parameter tied into a second
    module, a None parameter, persistent and non-persistent buffers, a Parameter's subclass,
    torch's own layers; else what differs."""

    class Param(torch.nn.Parameter):
        pass

    root, inner = torch.nn.Module(), torch.nn.Module()
    root.weight = torch.nn.Parameter(torch.empty(2, 3), False)
    root.register_parameter("bias", None)
    root.register_buffer("scale", torch.empty(2))
    root.register_buffer("cache", torch.empty(3), persistent=False)
    inner.norm = Param(torch.empty(3), False)
    inner.tied = root.weight
    root.first, root.again = inner, inner
    root.layers = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    theirs, shaped = root.state_dict(), state_dict_shape(root)
    if shaped is None:
        return "the walk declined the probe model"
    names = shape_names(shaped[0])
    if names != list(theirs) or len(shaped[1]) != len(names):
        return f"names {names}, state_dict's {list(theirs)}"
    for name, ours, t in zip(names, shaped[1], theirs.values()):
        where = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride())
        if (ours.untyped_storage().data_ptr(), ours.storage_offset(), ours.shape,
                ours.stride()) != where or ours.dtype != t.dtype:  # fmt: skip
            return f"{name}: another tensor than state_dict's"
        if type(ours) is not type(t) and type(ours) is not torch.nn.Parameter:
            return f"{name}: {type(ours).__name__}, state_dict's {type(t).__name__}"
    return None
