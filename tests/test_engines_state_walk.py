"""The walk in SGLang's order (fp8_dummy.tensors.state_dict_shape: its loop in C,
csrc/python_state_walk.cpp, and the Python loop it leaves a model to) against state_dict()
itself, the oracle, and the C loop against the Python loop, on random module trees of every
branch the walk takes: nested and shared modules (walked under each name), tied, None,
non-persistent and subclassed tensors, odd dictionaries, and every refusal (hooks, a module
class's own state_dict, _save_to_state_dict or extra state, a tensor class's own
__torch_function__, a buffer under a parameter's name, nesting past the limit, a cycle)."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import as_bytes

from fp8_dummy import tensors
from fp8_dummy.engines import core
from fp8_dummy.tensors import shape_names, state_dict_shape, state_dict_shape_python


class Param(torch.nn.Parameter):
    """A Parameter's subclass: Parameter's disabled __torch_function__, state_dict detaches it."""


class Own(torch.Tensor):
    """A tensor class of its own __torch_function__: state_dict's detach would run it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class PlainSub(torch.Tensor):
    """A tensor subclass keeping Tensor's __torch_function__ (not Parameter's disabled one)."""


class OwnStateDict(torch.nn.Module):
    def state_dict(self, *args, **kwargs):
        return super().state_dict(*args, **kwargs)


class OwnSave(torch.nn.Module):
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)


class OwnExtra(torch.nn.Module):
    def get_extra_state(self):
        return 1


class ParamDict(dict):
    """A parameters' dictionary of another class: the C loop leaves it to the Python loop."""


def c_walk(model: torch.nn.Module):
    """The C loop alone, as state_dict_shape calls it (False: it leaves the model to Python)."""
    with torch._C.DisableTorchFunctionSubclass():
        return tensors._C_STATE_WALK(
            model,
            tensors._PLAIN_STATE,
            torch.nn.Module,
            tensors._OWN_STATE,
            tensors._PLAIN_TENSORS,
            tensors._DISABLED,
            tensors._DEEPEST,
        )


def tensor(rng: random.Random) -> torch.Tensor:
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int8])
    shape = [rng.randint(1, 4) for _ in range(rng.randint(0, 2))]
    size = torch.empty((), dtype=dtype).element_size()
    t = torch.randint(0, 256, [*shape, size], dtype=torch.uint8).view(dtype).squeeze(-1)
    return t.transpose(0, 1) if t.dim() == 2 and rng.random() < 0.3 else t


def random_tree(rng: random.Random, depth: int = 0, pool: list | None = None) -> torch.nn.Module:
    pool = [] if pool is None else pool
    m = torch.nn.Module()
    for i in range(rng.randint(0, 4)):
        kind = rng.choice(
            ["param", "none", "buffer", "transient", "child", "child", "shared", "nochild",
             "subparam", "tied", "layer", "nonebuffer", "parambuffer"]
        )  # fmt: skip
        name = f"{kind}{i}"
        if kind == "param":
            m.register_parameter(name, torch.nn.Parameter(tensor(rng), False))
        elif kind == "none":
            m.register_parameter(name, None)
        elif kind in ("buffer", "transient"):
            m.register_buffer(name, tensor(rng), persistent=kind == "buffer")
        elif kind == "nonebuffer":
            m.register_buffer(name, None)
        elif kind == "parambuffer":  # a Parameter kept as a buffer
            m._buffers[name] = torch.nn.Parameter(tensor(rng), False)
        elif kind == "subparam":
            m.register_parameter(name, Param(tensor(rng), False))
        elif kind == "tied" and pool:
            held = [t for p in pool for t in p._parameters.values() if t is not None]
            if held:
                m.register_parameter(name, rng.choice(held))  # one tensor under two names
        elif kind == "layer":
            m.add_module(name, rng.choice([torch.nn.Linear(2, 3), torch.nn.LayerNorm(3)]))
        elif kind == "child" and depth < 4:
            m.add_module(name, random_tree(rng, depth + 1, pool))
        elif kind == "shared" and pool:
            m.add_module(name, rng.choice(pool))  # the same module under a second name
        elif kind == "nochild":
            m.add_module(name, None)
    pool.append(m)
    return m


def same_as_state_dict(model: torch.nn.Module, shaped) -> None:
    """The walk's names are state_dict()'s, each tensor its tensor (the same memory, bytes,
    layout and dtype), of its class where not a Parameter (which state_dict detaches)."""
    theirs = model.state_dict()
    assert shape_names(shaped[0]) == list(theirs)
    for ours, t in zip(shaped[1], theirs.values(), strict=True):
        assert ours.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        assert (ours.storage_offset(), ours.shape, ours.stride(), ours.dtype) == (
            t.storage_offset(), t.shape, t.stride(), t.dtype)  # fmt: skip
        assert torch.equal(as_bytes(ours.detach()), as_bytes(t))
        assert type(ours) is type(t) or (
            type(ours) is torch.nn.Parameter and type(t) is torch.Tensor
        )


def same_walk(c, python) -> None:
    """The C loop's shape and tensors are the Python loop's: the same key objects, the same
    tensor objects (a detached one: of the same class and memory)."""
    assert c[0] == python[0] and len(c[1]) == len(python[1])
    assert all(x is y for x, y in zip(c[0], python[0]) if isinstance(x, str))
    for x, y in zip(c[1], python[1]):
        assert x is y or (
            type(x) is type(y) is torch.Tensor
            and (x.data_ptr(), x.shape, x.stride()) == (y.data_ptr(), y.shape, y.stride())
        )


def refuse(rng: random.Random, model: torch.nn.Module, how: str) -> None:
    """Makes the model one state_dict_shape declines, the way `how` says, at a random module."""
    m = rng.choice(list(model.modules()))
    if how == "hook":
        m._register_state_dict_hook(lambda *a: None)
    elif how == "pre_hook":
        m.register_state_dict_pre_hook(lambda *a: None)
    elif how == "own_tf":
        m.register_buffer("own", torch.empty(2).as_subclass(Own))
    elif how == "plain_sub":
        m.register_parameter("sub", torch.nn.Parameter(torch.empty(2), False))
        m._parameters["sub"] = torch.empty(2).as_subclass(PlainSub)
    elif how in ("state_dict", "save", "extra"):
        kind = {"state_dict": OwnStateDict, "save": OwnSave, "extra": OwnExtra}[how]
        m.add_module("odd", kind())
    elif how == "clash":  # set in the dictionaries directly: register_buffer refuses it
        m.register_parameter("both", torch.nn.Parameter(torch.empty(1), False))
        m._buffers["both"] = torch.empty(4)


REFUSALS = ["hook", "pre_hook", "own_tf", "plain_sub", "state_dict", "save", "extra", "clash"]


@pytest.mark.parametrize("seed", range(60))
def test_the_state_dict_walk_is_state_dicts_and_the_python_loops(seed):
    rng = random.Random(seed)
    model = random_tree(rng)
    model.tail = random_tree(rng)
    how = REFUSALS[seed % len(REFUSALS)] if seed % 3 == 0 else None
    if how is not None:
        refuse(rng, model, how)
    ours, python = c_walk(model), state_dict_shape_python(model)
    if how is not None:
        assert ours is None and python is None and state_dict_shape(model) is None
        assert core.walks.walked(model, "state_dict").names == list(model.state_dict())
        return
    assert ours is not False and ours is not None  # the C loop walked it
    same_walk(ours, python)
    same_as_state_dict(model, ours)
    same_as_state_dict(model, state_dict_shape(model))
    walked = core.walks.walked(model, "state_dict")
    assert walked.names is None and walked.shape == ours[0]


def test_a_clash_with_a_none_parameter_is_no_clash():
    # state_dict() keeps a None parameter out: the buffer under its name is an entry of its own.
    model = torch.nn.Linear(2, 3)
    model.register_parameter("gone", None)
    model._buffers["gone"] = torch.empty(2)
    ours = c_walk(model)
    same_walk(ours, state_dict_shape_python(model))
    same_as_state_dict(model, ours)


def chain(links: int) -> torch.nn.Module:
    root = m = torch.nn.Module()
    for _ in range(links):
        m.c = torch.nn.Module()
        m = m.c
    m.weight = torch.nn.Parameter(torch.empty(1), False)
    return root


@pytest.mark.parametrize("links", [tensors._DEEPEST, tensors._DEEPEST + 1])
def test_nesting_to_the_limit_walks_and_past_it_declines(links):
    model = chain(links)
    ours, python = c_walk(model), state_dict_shape_python(model)
    if links > tensors._DEEPEST:
        assert ours is None and python is None
        return
    same_walk(ours, python)
    # state_dict() itself may pass Python's recursion limit here: its names, written out.
    assert shape_names(ours[0]) == [".".join(["c"] * links + ["weight"])]
    assert ours[1][0] is model.get_submodule(".".join(["c"] * links)).weight


def test_a_cycle_declines():
    model = random_tree(random.Random(1))
    model.loop = torch.nn.Module()
    model.loop.back = model
    assert c_walk(model) is None and state_dict_shape_python(model) is None


def test_odd_dictionaries_are_left_to_the_python_loop():
    model = random_tree(random.Random(3))
    model.child = torch.nn.Linear(2, 2)
    model.child._parameters = ParamDict(model.child._parameters)
    assert c_walk(model) is False
    same_as_state_dict(model, state_dict_shape(model))
    same_walk(state_dict_shape(model), state_dict_shape_python(model))


DICTIONARIES = ["_state_dict_hooks", "_state_dict_pre_hooks", "_non_persistent_buffers_set"]
DICTIONARIES += ["_parameters", "_buffers", "_modules"]


@pytest.mark.parametrize("missing", DICTIONARIES)
def test_a_module_without_a_dictionary_declines(missing):
    # Python's KeyError: not a Module's dictionaries, state_dict() decides (and raises).
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    del model[0].__dict__[missing]
    assert c_walk(model) is None and state_dict_shape_python(model) is None


def test_a_module_that_is_no_module_declines():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model._modules["thing"] = object()
    assert c_walk(model) is None and state_dict_shape_python(model) is None


class Growing(torch.nn.Parameter):
    """A Parameter's subclass whose detach adds a parameter to the module that holds it."""

    holder: torch.nn.Module | None = None

    def detach(self):
        Growing.holder._parameters[f"more{len(Growing.holder._parameters)}"] = None
        return super().detach()


def test_a_detach_that_changes_the_dictionary_is_left_to_the_python_loop():
    model = torch.nn.Linear(2, 2)
    model.register_parameter("grows", Growing(torch.empty(2), False))
    Growing.holder = model
    assert c_walk(model) is False
    with pytest.raises(RuntimeError, match="changed size"):  # as state_dict()'s own loop
        state_dict_shape(model)
    with pytest.raises(RuntimeError, match="changed size"):
        model.state_dict()


def test_a_parameter_subclass_is_detached_as_state_dict_detaches_it():
    model = torch.nn.Linear(2, 2)
    model.register_parameter("odd", Param(torch.randn(3), False))
    model._buffers["kept"] = Param(torch.randn(2), False)
    ours = c_walk(model)
    same_as_state_dict(model, ours)
    assert [type(t) for t in ours[1]] == [torch.nn.Parameter] * 2 + [torch.Tensor] * 2
    assert ours[1][2] is not model.odd  # a new, detached tensor


def test_the_walk_runs_in_c():
    # setup.py's build has the state_dict walk in fp8_dummy._C.
    assert tensors._C_STATE_WALK is not None


class Swapper(torch.nn.Parameter):
    """A Parameter's subclass whose detach replaces one value of a module's dictionary (its
    size unchanged) with another object (a tensor, a child module), once per arming."""

    swap: tuple[dict, str, object] | None = None

    def detach(self):
        if Swapper.swap is not None:
            held, key, value = Swapper.swap
            held[key] = value
            Swapper.swap = None
        return super().detach()


def swapped_model(seed: int):
    """A random tree with a Swapper at a random module and a target: a random tensor entry of
    a random module's parameters or buffers, or (even seeds) a parameter after the Swapper in
    its own dictionary. `arm()` puts the target's first value back and arms the swap to its
    replacement; the third item: whether the target is that later parameter."""
    rng = random.Random(seed)
    model = random_tree(rng)
    model.last = torch.nn.Linear(2, 2)  # a target at least
    holder = rng.choice(list(model.modules()))
    holder.register_parameter(f"swapper{seed}", Swapper(tensor(rng), False))
    entries = [
        (d, k)
        for m in model.modules()
        for d in (m._parameters, m._buffers)
        for k, t in d.items()
        if t is not None and type(t) is not Swapper
    ]
    if seed % 2 == 0:  # read after the swap, in the same dictionary
        holder.register_parameter("after", torch.nn.Parameter(tensor(rng), False))
        entries = [(holder._parameters, "after")]
    held, key = rng.choice(entries)
    first = held[key]
    again = type(first)(tensor(rng), False) if type(first) is not torch.Tensor else tensor(rng)

    def arm() -> None:
        held[key] = first
        Swapper.swap = (held, key, again)

    return model, arm, seed % 2 == 0


def same_as(theirs: dict, shaped) -> None:
    """same_as_state_dict against a state_dict() made before (its tensors: the same memory)."""
    assert shape_names(shaped[0]) == list(theirs)
    for ours, t in zip(shaped[1], theirs.values(), strict=True):
        assert ours.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        assert (ours.storage_offset(), ours.shape, ours.stride(), ours.dtype) == (
            t.storage_offset(), t.shape, t.stride(), t.dtype)  # fmt: skip
        assert torch.equal(as_bytes(ours.detach()), as_bytes(t))


@pytest.mark.parametrize("seed", range(24))
def test_a_detach_that_replaces_a_value_is_read_as_state_dict_reads_it(seed):
    # The dictionary keeps its size: the C loop tells the change by its values, not its size.
    model, arm, later = swapped_model(seed)
    arm()
    theirs = model.state_dict()
    arm()
    ours = c_walk(model)
    if later:  # read after the swap: the C loop leaves the model to the Python loop
        assert ours is False
    if ours is not False:  # the swap read before it, or in a module walked before
        same_as(theirs, ours)
    arm()
    same_as(theirs, state_dict_shape_python(model))
    arm()
    shaped = state_dict_shape(model)
    # Where the C loop declines, its detach has swapped: the Python loop reads the model as
    # it is now, as state_dict() now reads it (nothing armed).
    same_as(theirs if ours is not False else model.state_dict(), shaped)


@pytest.mark.parametrize("seed", range(8))
def test_a_detach_that_replaces_a_child_still_to_walk_declines(seed):
    # state_dict() walks the new child: neither loop has it, so neither walks the model.
    rng = random.Random(seed)
    model = torch.nn.Module()
    model.first = random_tree(rng)
    model.first.register_parameter("replacer", Swapper(tensor(rng), False))
    model.second = random_tree(rng)
    model.second.weight = torch.nn.Parameter(tensor(rng), False)
    before, after = model.second, random_tree(rng)
    after.other = torch.nn.Parameter(tensor(rng), False)

    def arm() -> None:
        model._modules["second"] = before
        Swapper.swap = (model._modules, "second", after)

    arm()
    theirs = model.state_dict()
    assert any(n.startswith("second.other") for n in theirs)
    arm()
    assert c_walk(model) is False
    arm()
    assert state_dict_shape_python(model) is None
    arm()
    shaped = state_dict_shape(model)
    # The C loop's detach has replaced it: the Python loop reads the model as it is now, as
    # state_dict() now reads it (nothing armed).
    same_as(model.state_dict(), shaped)
    assert model.second is after


class Counting(torch.nn.Parameter):
    """A Parameter's subclass that counts its detach() calls."""

    calls = 0

    def detach(self):
        Counting.calls += 1
        return super().detach()


@pytest.mark.parametrize("how", ["grow", "swap"])
def test_the_c_loop_declines_before_another_detach_runs(how):
    # Python code that changed the dictionary runs no further in the C loop: the Python loop
    # reads the model from there.
    model = torch.nn.Module()
    if how == "grow":
        model.register_parameter("first", Growing(torch.empty(2), False))
        Growing.holder = model
    else:
        model.register_parameter("first", Swapper(torch.empty(2), False))
        model.register_parameter("other", torch.nn.Parameter(torch.empty(3), False))
        Swapper.swap = (model._parameters, "other", torch.nn.Parameter(torch.empty(1), False))
    model.register_parameter("counts", Counting(torch.empty(2), False))
    Counting.calls = 0
    assert c_walk(model) is False
    assert Counting.calls == 0
