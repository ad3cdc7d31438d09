"""What the whole-model plan reads in bulk (csrc/common/model_facts.cpp, fp8_dummy/tensors.py):
the walk in vLLM's module order (named_modules, each module once) on random module trees;
each tensor's kind (equal kinds: equal dtype, device, dimensions, meta, inference, contiguity
and overlap, by a Python transcription); the fill order (aliases with the same action once, a
storage touched otherwise in list order) against a Python model of that rule on random
views of a few storages."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import poison, storage_bytes

from fp8_dummy import tensors
from fp8_dummy.engines import core
from fp8_dummy.engines.core import Action, Kind
from fp8_dummy.tensors import shape_names, state_dict_shape, walk

# ---- the walk ------------------------------------------------------------------------------


def named_modules_walk(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [
        (f"{prefix}.{k}" if prefix else k, t)
        for prefix, m in model.named_modules()
        for k, t in {**m._parameters, **m._buffers}.items()
        if t is not None and k not in m._non_persistent_buffers_set
    ]


def random_tree(rng: random.Random, depth: int = 0, pool: list | None = None) -> torch.nn.Module:
    pool = [] if pool is None else pool
    m = torch.nn.Module()
    for i in range(rng.randint(0, 3)):
        kind = rng.choice(["param", "none", "buffer", "transient", "child", "shared", "nochild"])
        name = f"{kind}{i}"
        if kind == "param":
            m.register_parameter(name, torch.nn.Parameter(torch.empty(2)))
        elif kind == "none":
            m.register_parameter(name, None)
        elif kind in ("buffer", "transient"):
            m.register_buffer(name, torch.empty(3), persistent=kind == "buffer")
        elif kind == "child" and depth < 4:
            m.add_module(name, random_tree(rng, depth + 1, pool))
        elif kind == "shared" and pool:
            m.add_module(name, rng.choice(pool))  # the same module under a second name
        elif kind == "nochild":
            m.add_module(name, None)
    pool.append(m)
    return m


class OwnOrder(torch.nn.Module):
    """A module whose named_modules lists its children backwards: the walk follows it."""

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        yield prefix, self
        for name, child in reversed(list(self._modules.items())):
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name)


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_is_named_modules_order(seed):
    rng = random.Random(seed)
    model = random_tree(rng)
    if seed % 5 == 0:
        inner = OwnOrder()
        inner.a, inner.b = random_tree(rng), random_tree(rng)
        model.add_module("own", inner)
    ours, theirs = walk(model, "modules"), named_modules_walk(model)
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    assert all(a is b for (_, a), (_, b) in zip(ours, theirs))


class ParamDict(dict):
    """A parameters' dictionary of another class: the Python loop reads it."""


def odd_modules(rng: random.Random, model: torch.nn.Module) -> None:
    """What a module tree's dictionaries can hold beyond register_*'s: a buffer under a
    parameter's name, entries set in the dictionaries directly, None children and tensors."""
    ms = list(model.modules())
    m = rng.choice(ms)
    m._parameters["both"] = torch.nn.Parameter(torch.empty(1))
    m._buffers["both"] = torch.empty(4)  # {**params, **buffers}: the buffer, in params' place
    m._buffers["later"] = torch.empty(5)
    rng.choice(ms)._parameters["gone"] = None
    rng.choice(ms)._modules["empty"] = None
    m = rng.choice(ms)
    m._buffers["quiet"] = torch.empty(2)
    m._non_persistent_buffers_set.add("quiet")


def same_walk(a, b) -> None:
    assert a[0] == b[0] and len(a[1]) == len(b[1])
    assert all(x is y for x, y in zip(a[0], b[0]) if isinstance(x, str))  # the dicts' keys
    assert all(x is y for x, y in zip(a[1], b[1]))


def test_the_walk_runs_in_c():
    # setup.py's build has the module walk in fp8_dummy._C; without it every fill walks in
    # Python (the same shapes: below).
    assert tensors._C_WALK is not None


@pytest.mark.parametrize("seed", range(40))
def test_the_c_walk_is_the_python_walk(seed):
    rng = random.Random(seed)
    model = random_tree(rng)
    model.tail = random_tree(rng)
    if seed % 2:
        odd_modules(rng, model)
    if seed % 7 == 3:  # a module that keeps its own order: both decline
        model.add_module("own", OwnOrder())
    ours, theirs = tensors.walk_shape(model), tensors.walk_shape_python(model)
    if seed % 7 == 3:
        assert ours is None and theirs is None
        return
    same_walk(ours, theirs)
    assert tensors._C_WALK(model, tensors._OWN_ORDER, tensors._NAMED_MODULES, "") is not False
    named = [n for n, _ in named_modules_walk(model)]
    assert shape_names(ours[0]) == named
    # What a new plan reads of the shape: the local names, and the dotted names of a few
    assert tensors.shape_locals(ours[0]) == [n.rpartition(".")[2] for n in named]
    for _ in range(5):
        wanted = sorted(rng.sample(range(len(named)), rng.randint(0, len(named))))
        assert tensors.shape_names_at(ours[0], wanted) == [named[i] for i in wanted]


def test_the_c_walk_leaves_odd_dictionaries_to_python():
    model = random_tree(random.Random(3))
    model.child = torch.nn.Linear(2, 2)
    model.child._parameters = ParamDict(model.child._parameters)
    assert tensors._C_WALK(model, tensors._OWN_ORDER, tensors._NAMED_MODULES, "") is False
    same_walk(tensors.walk_shape(model), tensors.walk_shape_python(model))
    del model.child.__dict__["_parameters"]  # not a Module's dictionaries: no walk
    assert tensors.walk_shape(model) is None and tensors.walk_shape_python(model) is None
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model[0].register_buffer("b", torch.empty(1))
    del model[0].__dict__["_non_persistent_buffers_set"]  # the Python loop's KeyError
    with pytest.raises(KeyError):
        tensors.walk_shape(model)


class AllEqual(torch.nn.Module):
    """A module class whose modules are all equal: named_modules' set meets only the first."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(2))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AllEqual)

    def __hash__(self) -> int:
        return 0


def test_the_c_walk_leaves_modules_of_their_own_equality_to_python():
    """The C walk meets modules by identity, which is Python's set only where their class
    keeps object's hash and equality: another class's model is walked by the Python loop."""
    model = random_tree(random.Random(5))
    model.first, model.second = AllEqual(), AllEqual()
    assert tensors._C_WALK(model, tensors._OWN_ORDER, tensors._NAMED_MODULES, "") is False
    ours = tensors.walk_shape(model)
    same_walk(ours, tensors.walk_shape_python(model))
    names = shape_names(ours[0])
    assert "first.weight" in names and "second.weight" not in names  # as named_modules
    assert names == [n for n, _ in named_modules_walk(model)]


@pytest.mark.parametrize("seed", range(40))
def test_the_state_dict_walk_is_state_dicts(seed):
    # Shared modules walked under each name, tied tensors under each, None and non-persistent
    # left out; a Parameter's subclass detached (state_dict's class), a hook: state_dict().
    rng = random.Random(seed)
    model = random_tree(rng)
    model.sub = torch.nn.Module()
    model.sub.odd = Param(torch.empty(2), False)
    if seed % 4 == 1:
        rng.choice(list(model.modules()))._register_state_dict_hook(lambda *a: None)
    if seed % 4 == 2:  # a class of its own __torch_function__: state_dict's detach runs it
        rng.choice(list(model.modules())).register_buffer("own", Own(torch.empty(2)))
    theirs = model.state_dict()
    shaped = state_dict_shape(model)
    if seed % 4 in (1, 2):
        assert shaped is None
        assert core.walks.walked(model, "state_dict").names == list(theirs)
        return
    assert shape_names(shaped[0]) == list(theirs)
    for ours, t in zip(shaped[1], theirs.values(), strict=True):
        assert ours.data_ptr() == t.data_ptr() and ours.shape == t.shape
        assert type(ours) in (type(t), torch.nn.Parameter)
    walked = core.walks.walked(model, "state_dict")
    assert walked.names is None and walked.shape == shaped[0]


def test_the_state_dict_walk_proves_itself():
    assert core.walks.state_walk_probe() is None


class Param(torch.nn.Parameter):
    pass


class Own(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


# ---- kinds ---------------------------------------------------------------------------------


def python_facts(t: torch.Tensor) -> tuple:
    """The facts a kind stands for; distinct: torch says no overlap, or it cannot tell and the
    sorted-strides rule (csrc/common/reference.cpp, first_overlap) shows none."""
    overlap = torch._debug_has_internal_overlap(t)
    free, reach = True, 0
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n > 1):
        free, reach = free and stride > reach, reach + stride * (size - 1)
    free = free or 0 in t.shape
    return (t.dtype, t.device, t.dim(), t.is_meta, t.is_inference(), t.is_contiguous(),
            overlap, overlap == 0 or overlap == 2 and free)  # fmt: skip


def random_tensors(rng: random.Random, n: int) -> list[torch.Tensor]:
    out = []
    for _ in range(n):
        dtype = rng.choice([torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.int8])
        shape = [rng.randint(1, 4) for _ in range(rng.randint(0, 3))]
        t = torch.empty(shape, dtype=dtype, device=rng.choice(["cpu", "cpu", "meta"]))
        pick = rng.randint(0, 4)
        if pick == 1 and t.dim() >= 2:
            t = t.transpose(0, 1)
        elif pick == 2 and t.dim() >= 1:
            t = t.unsqueeze(0).expand(2, *t.shape)  # elements sharing memory
        elif pick == 3 and t.dim() >= 1 and t.shape[-1] > 1:
            t = t[..., ::2]
        elif pick == 4:
            t = torch.empty(12, dtype=dtype).as_strided((3, 3), (3, 2))  # too hard for torch
        out.append(t)
    return out


@pytest.mark.parametrize("seed", range(10))
def test_equal_kinds_are_equal_facts(seed):
    tensors = random_tensors(random.Random(seed), 60)
    with torch.inference_mode():
        tensors += random_tensors(random.Random(seed + 100), 10)
    kinds = core.kinds.tensor_facts(tensors)[: len(tensors)].tolist()
    first: dict = {}
    for t, k in zip(tensors, kinds):
        facts = python_facts(t)
        assert first.setdefault(k, facts) == facts, (k, facts)
    assert len(set(first.values())) == len(first)  # and different facts, different kinds


class Tagged(torch.nn.Parameter):
    """A parameter class whose attribute is a property (found on the class, not the instance)."""

    @property
    def dummy_weight_value(self):
        return 0.25


def python_kinds(locals_, tensors, fact_kinds, attr):
    """The numbering by the rule, in plain Python: (local, class, facts' kind[, attribute])
    numbered in order of first appearance; a key that does not hash, a kind of its own."""
    keys, kind_of, firsts, count = {}, [], [], 0
    for i, (local, t, k) in enumerate(zip(locals_, tensors, fact_kinds)):
        key = (local, type(t), k) + ((getattr(t, attr, None),) if attr else ())
        try:
            number = keys.setdefault(key, count)
        except TypeError:
            number = count
        if number == count:
            firsts.append(i)
            count += 1
        kind_of.append(number)
    return kind_of, firsts


@pytest.mark.parametrize("seed", range(8))
def test_the_classes_are_the_distinct_types(seed):
    """The plan's question of which classes a list holds, in C where the library has it: each
    item's class once, in order of first appearance, past the few it scans as well."""
    found = getattr(core.kinds, "_C_CLASSES", None)
    if found is None:
        pytest.skip("the library has no _classes (no Python API in the process)")
    rng = random.Random(seed)
    pool = [type(f"T{i}", (torch.Tensor,), {}) for i in range(rng.randint(1, 20))]
    items = []
    for _ in range(rng.randint(0, 300)):
        kind = rng.choice(pool + [torch.nn.Parameter, torch.Tensor])
        items.append(torch.empty(1).as_subclass(kind) if kind is not torch.nn.Parameter
                     else torch.nn.Parameter(torch.empty(1)))  # fmt: skip
    assert found(items) == list(dict.fromkeys(map(type, items)))
    wrapper = type("Dispatching", (torch.Tensor,), {"__torch_dispatch__": classmethod(
        lambda cls, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))})  # fmt: skip
    items.insert(rng.randint(0, len(items)), torch.empty(1).as_subclass(wrapper))
    assert core.kinds.any_dispatching(items)


@pytest.mark.parametrize("c", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("seed", range(12))
def test_kinds_are_numbered_by_the_rule(seed, c, monkeypatch):
    """kinds_of's numbering (in C where the library has it, else the Python loop) against the
    rule, from a walk's shape and from names, with the rule's attribute absent, set on the
    tensor, a class's property, or a value that does not hash (a kind of its own)."""
    if not c:
        monkeypatch.setattr(core.kinds, "_C_KINDS", None)
    elif core.kinds._C_KINDS is None:
        pytest.skip("the library has no _kinds (no Python API in the process)")
    rng = random.Random(seed)
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(8)])  # alike, but for
    model.tree, model.tail = random_tree(rng), random_tree(rng)  # the attributes set below
    shape, ts = tensors.walk_shape(model)
    for t in ts:
        pick = rng.randint(0, 5)
        if pick == 1:
            t.dummy_weight_value = rng.choice([0.5, 1.0])
        elif pick == 2 and seed % 2:
            t.dummy_weight_value = [0.5]  # does not hash
        elif pick == 3 and isinstance(t, torch.nn.Parameter):
            t.__class__ = Tagged
    names = shape_names(shape)
    locals_ = [n.rpartition(".")[2] for n in names]
    fact_kinds = core.kinds.tensor_facts(ts)[: len(ts)].tolist() if ts else []
    for attr in (None, "dummy_weight_value"):
        reads = (attr,) if attr else ()
        want = python_kinds(locals_, ts, fact_kinds, attr)
        shaped, named = (core.kinds.kinds_of(None, ts, reads, shape),
                         core.kinds.kinds_of(names, ts, reads))  # fmt: skip
        for got in (shaped, named):
            assert (got.kind_of, got.firsts) == want if ts else got.kind_of == []
            if attr and ts:  # the attributes a kept plan keeps, read once
                assert [id(a) for a in got.attrs] == [id(getattr(t, attr, None)) for t in ts]


# ---- the fill order ------------------------------------------------------------------------


def python_order(entries: list[tuple[torch.Tensor, Action]]) -> list[tuple[int, bool]]:
    """The rule: per storage the set of (view, action) uses; a storage with more than one is
    touched in order, every entry; otherwise each view once."""

    def ids(t):
        storage = (t.device, t.untyped_storage().data_ptr())
        return storage, (storage[0], t.data_ptr(), t.dtype, tuple(t.shape), t.stride())

    keys = [ids(t) for t, _ in entries]
    uses: dict = {}
    for (storage, view), (_, action) in zip(keys, entries):
        uses.setdefault(storage, set()).add((view, action))
    out, seen = [], set()
    for i, (storage, view) in enumerate(keys):
        ordered = len(uses[storage]) > 1
        if ordered or view not in seen:
            seen.add(view)
            out.append((i, ordered))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_the_fill_order_is_the_rules(seed):
    rng = random.Random(seed)
    bases = [torch.empty(rng.randint(8, 40), dtype=torch.float8_e4m3fn) for _ in range(3)]
    actions = [Action(Kind.UNIFORM, -1.0, 1.0), Action(Kind.UNIFORM, -2.0, 2.0),
               Action(Kind.FILL, value=0.5), Action(Kind.SKIP)]  # fmt: skip
    entries = []
    for _ in range(rng.randint(1, 12)):
        base = rng.choice(bases)
        a, b = sorted(rng.sample(range(base.numel() + 1), 2))
        own = torch.empty(rng.randint(1, 9), dtype=torch.float8_e4m3fn)  # a storage of its own
        view = rng.choice([base, base[a:b], base[a:b], base.view(torch.uint8), own])
        entries.append((view, rng.choice(actions)))
    sem = core.SEMANTICS["vllm-0.33"]
    planned = [(f"t{i}", t, action, (sem, 7)) for i, (t, action) in enumerate(entries)]
    prog = core.execution.program(planned, "generator")
    live = [i for i, (_, action) in enumerate(entries) if action.kind is not Kind.SKIP]
    want = [(live[j], o) for j, o in python_order([entries[i] for i in live])]
    assert prog.others == [(i, o) for i, o in want if o or entries[i][1].kind is not Kind.UNIFORM]
    batched = sorted(i for _, idx in prog.batches for i in idx)
    assert batched == [i for i, o in want if not o and entries[i][1].kind is Kind.UNIFORM]


def test_the_facts_last_word_says_whether_every_storage_is_the_tensors_own():
    base = torch.empty(64, dtype=torch.float8_e4m3fn)
    own = [torch.empty(n, dtype=torch.bfloat16) for n in (1, 5, 9)]
    cases = {
        "own": (own + [base], 1),
        "a view of another's storage": (own + [base, base[8:16]], 0),
        "the same tensor twice": (own + [own[0]], 0),
        "two views of one storage, no other": ([base[:8], base[8:]], 0),
    }
    for what, (ts, want) in cases.items():
        assert int(core.kinds.tensor_facts(ts)[-1]) == want, what


@pytest.mark.parametrize("seed", range(30))
def test_a_program_by_kinds_is_the_entries(seed):
    """A kept plan's program from its kinds alone (tensors of their own storages, every entry
    its kind's decision) is the program made by walking its entries, in both modes."""
    rng = random.Random(seed)
    dtypes = [torch.float8_e4m3fn, torch.bfloat16, torch.float32]
    ts = [torch.empty(rng.randint(1, 6), dtype=rng.choice(dtypes))
          for _ in range(rng.randint(1, 40))]  # fmt: skip
    names = [f"m{i}.{rng.choice(['weight', 'bias', 'scale'])}" for i in range(len(ts))]
    kinds = core.kinds.kinds_of(names, ts, ())
    sem = core.SEMANTICS["vllm-0.33"]
    actions = [Action(Kind.UNIFORM, -1.0, 1.0), Action(Kind.UNIFORM, -2.0, 2.0),
               Action(Kind.FILL, value=0.5), Action(Kind.SKIP)]  # fmt: skip
    metas = [(sem, 7), (sem, 8)]
    decided = [(rng.choice(actions), rng.choice(metas), None, False, True, True)
               for _ in kinds.firsts]  # fmt: skip
    planned = [(n, t, decided[k][0], decided[k][1]) for n, t, k in zip(names, ts, kinds.kind_of)]
    kept = core.kept.Kept((), names, [], None, kinds.facts, 0, kinds.kind_of, decided)
    for mode in ("generator", "stateless"):
        walked = core.execution.program(planned, mode)
        by_kinds = core.execution._program_by_kinds(kept, mode)
        assert by_kinds is not None
        assert by_kinds.others == walked.others
        assert [(k, sorted(i)) for k, i in by_kinds.batches] == [
            (k, sorted(i)) for k, i in walked.batches
        ]
    one = (actions[0], metas[0], None, False, True, True)  # one batch of every tensor
    kept.decided = [one] * len(kinds.firsts)
    planned = [(n, t, one[0], one[1]) for n, t in zip(names, ts)]
    walked = core.execution.program(planned, "generator")
    by_kinds = core.execution._program_by_kinds(kept, "generator")
    assert (by_kinds.others, by_kinds.batches[0][0]) == (walked.others, walked.batches[0][0])
    assert list(by_kinds.batches[0][1]) == walked.batches[0][1] == list(range(len(ts)))
    shared = core.kinds.kinds_of(names + ["alias"], ts + [ts[0][:1]], ())
    kept.facts = shared.facts  # a storage two tensors share: the entries decide
    assert core.execution._program_by_kinds(kept, "generator") is None


# ---- a kept plan's check and fill in one call -------------------------------------------------


def reference_bytes(t: torch.Tensor, low: float, high: float, seed: int) -> torch.Tensor:
    """The reference path's bytes on a tensor like t (plain torch: 1-byte dtypes through a
    float16 temp, wider ones uniform_ itself)."""
    g = torch.Generator(device=t.device).manual_seed(seed)
    if t.element_size() > 1:
        want = torch.empty_like(t).uniform_(low, high, generator=g)
    else:
        tmp = torch.empty_like(t, dtype=torch.float16).uniform_(low, high, generator=g)
        want = torch.empty_like(t).copy_(tmp)
    return want.contiguous().reshape(-1).view(torch.uint8)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def random_matrices(rng: random.Random, device: str) -> list[torch.Tensor]:
    """3-12 matrices of random sizes and dtypes, some of them transposed."""
    dtypes = [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float32]
    tensors = [
        torch.empty(rng.randint(1, 9), rng.randint(1, 7), dtype=rng.choice(dtypes), device=device)
        for _ in range(rng.randint(3, 12))
    ]
    return [t if rng.random() < 0.7 else t.t() for t in tensors]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("seed", range(4))
def test_the_kept_call_checks_every_fact_before_its_first_write(seed, device):
    rng = random.Random(seed)
    tensors = random_matrices(rng, device)
    facts = core.kinds.tensor_facts(tensors)
    fill = sorted(rng.sample(range(len(tensors)), rng.randint(1, len(tensors))))
    low, high, s = -rng.random(), rng.random(), rng.randint(0, 2**40)
    # Any one tensor's place changed (its data moved): False, and not a byte written.
    moved = list(tensors)
    j = rng.randrange(len(tensors))
    moved[j] = torch.empty_like(tensors[j])
    for t in moved:
        poison(t)
    with torch.no_grad():
        assert not core.kinds.init_many_kept(moved, facts, fill, low, high, s, False)
    for t in moved:
        assert bool((storage_bytes(t) == 0x55).all())
    # The facts hold: the tensors of `fill` get the reference's bytes, the others none.
    for t in tensors:
        poison(t)
    with torch.no_grad():
        assert core.kinds.init_many_kept(tensors, facts, fill, low, high, s, False)
    for i, t in enumerate(tensors):
        if i in fill:
            want = reference_bytes(t, low, high, s)
            assert torch.equal(t.contiguous().reshape(-1).view(torch.uint8), want), i
        else:
            assert bool((storage_bytes(t) == 0x55).all()), i
    assert tensors[fill[0]]._version > 0  # an in-place write, as init_many_'s


def test_the_kept_call_refuses_a_fill_list_out_of_order():
    tensors = [torch.empty(4, dtype=torch.float8_e4m3fn) for _ in range(3)]
    facts = core.kinds.tensor_facts(tensors)
    with pytest.raises(RuntimeError, match="ascending"):
        core.kinds.init_many_kept(tensors, facts, [2, 0], -1.0, 1.0, 1, False)


# ---- a new plan's list held between its facts and its fill ---------------------------------------


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("seed", range(4))
def test_the_held_list_has_the_facts_and_fills_what_it_is_told(seed, device):
    rng = random.Random(seed)
    tensors = random_matrices(rng, device)
    facts, held = core.kinds.tensor_facts(tensors, hold=True)
    assert torch.equal(facts, core.kinds.tensor_facts(tensors))
    n = len(tensors)
    for fill in (list(range(n)), sorted(rng.sample(range(n), rng.randint(1, n - 1)))):
        low, high, s = -rng.random(), rng.random(), rng.randint(0, 2**40)
        for t in tensors:
            poison(t)
        versions = [t._version for t in tensors]
        with torch.no_grad():
            core.kinds.init_many_held(held, n, fill, low, high, s, False)
        for i, t in enumerate(tensors):
            if i in fill:
                want = reference_bytes(t, low, high, s)
                assert torch.equal(t.contiguous().reshape(-1).view(torch.uint8), want), i
                assert t._version > versions[i]  # an in-place write, as init_many_'s
            else:
                assert bool((storage_bytes(t) == 0x55).all()), i


@pytest.mark.parametrize("fill", [[2, 0], [1, 1], [0, 3], [-1]])
def test_the_held_fill_refuses_a_list_out_of_order_before_any_write(fill):
    tensors = [torch.empty(4, dtype=torch.float8_e4m3fn) for _ in range(3)]
    _, held = core.kinds.tensor_facts(tensors, hold=True)
    for t in tensors:
        poison(t)
    with pytest.raises(RuntimeError, match="ascending and within the list"):
        core.kinds.init_many_held(held, 3, fill, -1.0, 1.0, 1, False)
    for t in tensors:
        assert bool((storage_bytes(t) == 0x55).all())


def test_the_held_fill_makes_the_operators_checks():
    # Through fp8_dummy::init_many_: a leaf that requires grad is refused, nothing written.
    tensors = [torch.empty(4, dtype=torch.float32) for _ in range(3)]
    tensors[1].requires_grad_()
    _, held = core.kinds.tensor_facts(tensors, hold=True)
    with torch.no_grad():
        for t in tensors:
            poison(t)
    with pytest.raises(RuntimeError, match="requires grad"):
        core.kinds.init_many_held(held, 3, [0, 1, 2], -1.0, 1.0, 1, False)
    for t in tensors:
        assert bool((storage_bytes(t) == 0x55).all())
