"""A whole-model plan kept for the next fill (fp8_dummy/engines/core/kept.py): the second fill
of the same model asks none of the plan's questions again and gives vLLM's loader's bytes;
anything that decides the plan, changed, makes a new one with the loader's bytes: a parameter
replaced, its data swapped (dtype, storage shared with another's), resized in place, a module
renamed, an attribute the rule reads set, other arguments, inference mode, a verdict recorded
or forgotten. A state_dict()-order fill (new tensor objects each call) finds its plan again.
A plan whose proof did not pass is not kept; a kept plan holds no tensor."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from conftest import poison, storage_bytes
from helpers.engine_models import EngineModel, all_tensors, assert_same_bytes
from oracles import engines as oracle

import fp8_dummy
from fp8_dummy.engines import core
from fp8_dummy.engines.vllm import rules


@pytest.fixture
def plans(monkeypatch):
    """How many fills' plans were made afresh, counted from here (not the plans of probes,
    which prove nothing)."""
    core.kept.forget()
    made = []
    real = core.planning.decider

    def counted(sem, call, engine, prove, *rest):
        made.extend([1] * prove)
        return real(sem, call, engine, prove, *rest)

    monkeypatch.setattr(core.planning, "decider", counted)
    return made


def refill(model: torch.nn.Module, **kw) -> None:
    for t in all_tensors(model).values():
        if t.device.type != "meta":
            poison(t)
    fp8_dummy.initialize_dummy_weights(model, **kw)


def loader(model: torch.nn.Module, seed: int = 1234) -> torch.nn.Module:
    """vLLM 0.33's loader on the same model poisoned (a copy of its tensors' layout)."""
    for t in all_tensors(model).values():
        poison(t)
    oracle.vllm_load_weights(model, 33, seed=seed)
    return model


def twin(change=None) -> tuple[torch.nn.Module, torch.nn.Module]:
    a, b = EngineModel("cpu"), EngineModel("cpu")
    if change is not None:
        change(a)
        change(b)
    return a, b


def test_the_second_fill_reuses_the_plan(plans):
    a, b = twin()
    for i in range(3):
        refill(a, seed=5)
        assert assert_same_bytes(a, loader(b, seed=5)) > 40
        assert len(plans) == 1, i  # made once, kept for the next fills


def share_head_with_weight(m: torch.nn.Module) -> None:
    # The head becomes a view of the weight with its own value: the loader's order decides.
    block = m.layers[0].q_proj
    block.head = torch.nn.Parameter(torch.empty(2, 48, dtype=block.weight.dtype), False)
    block.head.dummy_weight_value = 0.5


def retie(block: torch.nn.Module, other: torch.Tensor) -> None:
    # The head now a view of another block's weight, its attribute kept: only its facts tell.
    block.head = torch.nn.Parameter(other.data[1:3], False)
    block.head.dummy_weight_value = 0.5


CHANGES = {
    "a parameter replaced": lambda m: setattr(
        m.layers[1], "k_scale", torch.nn.Parameter(torch.empty(3, dtype=torch.bfloat16), False)
    ),
    "its data swapped for another dtype": lambda m: setattr(
        m.layers[0].q_proj.weight, "data", torch.empty(40, 48, dtype=torch.float8_e5m2)
    ),
    "its storage shared with another's, other value": lambda m: setattr(
        m.layers[0].q_proj.head, "data", m.layers[0].q_proj.weight.data[:2]
    ),
    "a parameter replaced by one like it": lambda m: setattr(
        m.layers[1].q_proj,
        "weight",
        torch.nn.Parameter(torch.empty_like(m.layers[1].q_proj.weight), False),
    ),
    "the tie undone": lambda m: setattr(
        m.head, "weight", torch.nn.Parameter(torch.empty_like(m.embed.weight), False)
    ),
    "retied to another's bytes": lambda m: retie(m.layers[0].q_proj, m.layers[1].q_proj.weight),
    "resized in place": lambda m: m.layers[1].rope.resize_(3, 7),
    "a module renamed": lambda m: m.add_module("extra2", m._modules.pop("extra")),
    "an attribute the rule reads": lambda m: setattr(m.wide, "dummy_weight_value", 0.25),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_makes_a_new_plan(plans, change):
    a, b = twin(share_head_with_weight)
    refill(a, seed=3)
    assert_same_bytes(a, loader(b, seed=3))
    CHANGES[change](a)
    CHANGES[change](b)
    refill(a, seed=3)
    assert_same_bytes(a, loader(b, seed=3))
    assert len(plans) == 2
    refill(a, seed=3)  # and that one is kept
    assert len(plans) == 2


def test_a_kept_fill_checks_and_fills_in_one_call(plans, monkeypatch):
    # The kept plan's facts checked by the call that fills its batch: no other check of them.
    calls = []
    real = core.execution.init_many_kept
    monkeypatch.setattr(core.kept, "facts_match", lambda *a: calls.append("facts") or True)
    monkeypatch.setattr(core.execution, "init_many_kept", lambda *a: calls.append(a[2]) or real(*a))
    a, b = twin()
    refill(a, seed=7)
    assert calls == []  # a new plan: its facts read while it is made
    refill(a, seed=7)
    assert len(calls) == 1 and calls[0] != "facts" and len(calls[0]) > 0
    assert_same_bytes(a, loader(b, seed=7))
    assert len(plans) == 1


def test_a_new_plan_fills_the_list_its_facts_call_held(plans, monkeypatch):
    # A new plan's batch goes to the operator from the list its facts' call received: no
    # second list of the tensors turned into an argument; a kept plan's fill does not hold one.
    held, lists = [], []
    real_held, real_many = core.execution.init_many_held, core.execution.init_many_
    monkeypatch.setattr(
        core.execution, "init_many_held", lambda *a: held.append(a[2]) or real_held(*a)
    )
    monkeypatch.setattr(
        core.execution, "init_many_", lambda ts, *a, **k: lists.append(ts) or real_many(ts, *a, **k)
    )
    a, b = twin()
    refill(a, seed=9)
    # (init_many_ of one tensor: an entry the plan runs alone, not a batch)
    assert len(held) >= 1 and all(len(ts) == 1 for ts in lists)
    assert_same_bytes(a, loader(b, seed=9))
    held.clear()
    refill(a, seed=9)  # kept: its one call checks the facts and fills
    assert held == []
    assert_same_bytes(a, loader(b, seed=9))


def test_other_arguments_or_inference_mode_make_a_new_plan(plans):
    a, b = twin()
    refill(a, seed=3)
    refill(a, seed=4)
    assert_same_bytes(a, loader(b, seed=4))
    assert len(plans) == 2
    refill(a, seed=4, semantics="vllm-0.30")
    assert len(plans) == 3
    with torch.inference_mode():
        refill(a, seed=4)
    assert len(plans) == 4
    assert_same_bytes(a, loader(b, seed=4))


def test_a_verdict_recorded_or_forgotten_makes_a_new_plan(plans):
    a, b = twin()
    refill(a, seed=2)
    torch.ops.fp8_dummy_internal.proof_forget("vllm:")  # the plan's proofs, made again
    refill(a, seed=2)
    assert len(plans) == 2
    core.planning._proof.proven("test: another verdict", lambda: None)
    refill(a, seed=2)
    assert len(plans) == 3
    assert_same_bytes(a, loader(b, seed=2))


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1
def test_a_plan_whose_proof_did_not_pass_is_not_kept(plans, monkeypatch):
    monkeypatch.setattr(core.planning, "proven", lambda *a: False)  # the reference, asked again
    a, b = twin()
    refill(a, seed=9)
    refill(a, seed=9)
    assert len(plans) == 2
    assert_same_bytes(a, loader(b, seed=9))


def test_a_kept_plan_holds_no_tensor(plans):
    a = EngineModel("cpu")
    refill(a, seed=1)
    dead = weakref.ref(a.layers[0].q_proj.weight)
    del a
    gc.collect()
    assert dead() is None


def test_the_kept_fill_writes_what_the_first_wrote_and_only_that():
    core.kept.forget()
    a = EngineModel("cpu")
    refill(a, seed=6)
    first = {n: storage_bytes(t).clone() for n, t in all_tensors(a).items()}
    refill(a, seed=6)
    for n, t in all_tensors(a).items():
        assert torch.equal(storage_bytes(t), first[n]), n


def test_a_state_dict_fill_finds_its_plan_with_new_tensor_objects(plans):
    # SGLang's order: state_dict() gives new (detached) tensor objects at every call; the
    # plan is a function of their facts, not of the objects.
    a, b = twin()
    for seed in (8, 8, 8):
        for t in all_tensors(a).values():
            poison(t)
        fp8_dummy.initialize_dummy_weights(a, seed=seed, semantics="sglang-0.5")
        for t in all_tensors(b).values():
            poison(t)
        oracle.sglang_initialize_dummy_weights(b, seed=seed)
        assert_same_bytes(a, b)
    assert len(plans) == 1


def test_a_kept_fill_with_progress_shown_writes_the_same(plans, capsys):
    # Progress pieces the batches: the kept plan's facts checked alone first, then the fill.
    a, b = twin(share_head_with_weight)
    refill(a, seed=4)
    refill(a, seed=4, progress=True)
    assert "tensors" in capsys.readouterr().err
    assert_same_bytes(a, loader(b, seed=4))
    retie(a.layers[0].q_proj, a.layers[1].q_proj.weight)  # facts changed: a new plan
    retie(b.layers[0].q_proj, b.layers[1].q_proj.weight)
    refill(a, seed=4, progress=True)
    assert_same_bytes(a, loader(b, seed=4))
    assert len(plans) == 2


@pytest.fixture
def asked(monkeypatch):
    """The names the fills' plans asked decisions for, in order (not the probes' plans)."""
    core.kept.forget()
    names = []
    real = core.planning.decider

    def counted(sem, call, engine, prove, *rest):
        decide, memo = real(sem, call, engine, prove, *rest)

        def decide_(name, t):
            names.extend([name] * prove)
            return decide(name, t)

        return decide_, memo

    monkeypatch.setattr(core.planning, "decider", counted)
    return names


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1 (the unproven case)
@pytest.mark.parametrize("case", ["kept", "stateless", "unproven"])
def test_a_new_plan_asks_each_tensor_at_most_once(asked, monkeypatch, case):
    # A new plan decides each kind at its first tensor; where a kind's decision is not all
    # there is to it (the stateless mode's checks per tensor, a proof that did not pass and is
    # asked again per tensor) the entries take over from that first answer, not asking again.
    if case == "unproven":
        monkeypatch.setattr(core.planning, "proven", lambda *a: False)
    a, b = twin()
    mode = "stateless" if case == "stateless" else "generator"
    refill(a, seed=5, mode=mode)
    count = len(all_tensors(a))
    assert len(asked) == len(set(asked)), asked
    if case != "unproven":
        assert 0 < len(asked) < count
    if case != "stateless":
        assert_same_bytes(a, loader(b, seed=5))


def loader_call(local: str) -> tuple:
    """vLLM 0.33's loop's arguments after the tensor (one function: the plan's call is the same
    at each fill)."""
    return (), {"name": local}


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own-storages"])
def test_kinds_the_engine_fills_itself_run_from_the_kinds(plans, monkeypatch, tied):
    # vLLM's function fills some kinds itself (a dummy_weight_value, its byte and integer
    # branches): its call bound to each such tensor as the run reaches it, so the plan is made
    # and kept from its kinds alone (no entries made), with vLLM's loader's bytes, new and kept;
    # with every storage its own the program comes from the kinds too.
    made, by_kinds = [], []
    real_entries, real_program = core.planning.entries, core.execution._program_by_kinds

    def entries(*a):  # the fill's (a probe's plan of one tensor makes its one entry)
        made.extend([1] * (len(a[1]) > 1))
        return real_entries(*a)

    monkeypatch.setattr(core.planning, "entries", entries)
    monkeypatch.setattr(core.execution, "_program_by_kinds",
                        lambda *a: by_kinds.append(p := real_program(*a)) or p)  # fmt: skip
    change = None if tied else CHANGES["the tie undone"]
    a, b = twin(change)
    bound = []
    real_bound = core.deciding.bound
    monkeypatch.setattr(core.kept, "bound", lambda *x: bound.append(1) or real_bound(*x))
    sem, call, counts = rules.semantics(33), loader_call, []
    for i in range(3):
        for t in all_tensors(a).values():
            poison(t)
        core.fill(a, sem, call, engine=oracle.vllm_single)
        assert assert_same_bytes(a, loader(b, seed=1234)) > 40
        assert len(plans) == 1 and made == [], i  # one plan, from its kinds, kept
        counts.append(len(bound))  # vLLM's own branches, bound as each fill runs them
        if not tied:  # its program from the kinds: no dotted name made for the run
            assert core.kept._plans[-1].names is None
    assert counts[2] - counts[1] == counts[1] - counts[0] > 0
    assert len(by_kinds) == 1 and (by_kinds[0] is None) == tied
