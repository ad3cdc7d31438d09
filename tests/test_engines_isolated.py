"""The engines' first proof of a CUDA key runs in a child process (core/planning.py `proven`,
fp8_dummy/_isolated.py): the probe is rebuilt there from data (`child_probe`), a child that
dies leaves the engine on its own weights with one warning, and the verdict cached on disk
spares later starts the child. No GPU here: ``FP8_DUMMY_ISOLATE=all`` sends the CPU keys to
the child the CUDA keys go to. In-process tests (the child's call made here, its arguments
through JSON) cover every engine form; fresh processes with a stand-in vLLM
(tests/helpers/fake_vllm.py) whose child our kernel kills cover the starts."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import poison
from helpers import fake_vllm
from helpers.engine_models import QuantLinear, all_tensors, assert_same_bytes
from oracles import engines as oracle
from oracles import trtllm as trtllm_oracle
from torch import nn

import fp8_dummy
from fp8_dummy import _isolated
from fp8_dummy.engines import core, sglang, trtllm
from fp8_dummy.engines.vllm import rules
from fp8_dummy.tensors import walk

TESTS = Path(__file__).resolve().parent
E4M3 = torch.float8_e4m3fn


def model() -> nn.Module:
    """FP8 weights (one transposed: TensorRT-LLM's row-major temp), float32 and bfloat16
    scales, 0-dim scales, int8 (TensorRT-LLM's float path, vLLM's random bytes)."""
    m = nn.Module()
    m.q = QuantLinear(40, 48, E4M3, torch.float32, "cpu")
    m.k = QuantLinear(24, 48, E4M3, torch.bfloat16, "cpu", transpose=True)
    m.i8 = QuantLinear(16, 32, torch.int8, torch.float32, "cpu")
    for t in all_tensors(m).values():
        poison(t)
    return m


def vllm_fill(m: nn.Module, engine=oracle.vllm_single) -> None:
    """vLLM 0.33's loader through the core: per tensor, by local name."""
    tensors = walk(m, "modules")
    core.fill(tensors, rules.semantics(33), lambda n: ((), {"name": n}), engine=engine)


# name: (our fill through the core, the engine's own function on a whole model)
ENGINES = {
    "vllm per tensor": (vllm_fill, oracle.vllm_load_weights),
    "vllm semantics": (lambda m: fp8_dummy.initialize_dummy_weights(m), oracle.vllm_load_weights),
    "sglang": (
        lambda m: core.fill(m, sglang.SEMANTICS, engine=oracle.sglang_initialize_dummy_weights),
        oracle.sglang_initialize_dummy_weights,
    ),
    "trtllm": (
        lambda m: core.fill(m, trtllm.SEMANTICS, engine=trtllm_oracle.initialize_dummy_weights),
        trtllm_oracle.initialize_dummy_weights,
    ),
}
PATHS = ("vllm", "sglang", "trtllm")


@pytest.fixture
def children(monkeypatch, tmp_path):
    """FP8_DUMMY_ISOLATE=all, an empty cache, the engines' keys forgotten; each child's call
    made in this process, its arguments through JSON (what a child gets): the list of them."""
    monkeypatch.setenv("FP8_DUMMY_ISOLATE", "all")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def run_child(target, args, timeout):
        calls.append(args)
        module, _, function = target.partition(":")
        result = getattr(importlib.import_module(module), function)(*json.loads(json.dumps(args)))
        return json.loads(json.dumps(result)), ""

    monkeypatch.setattr(_isolated, "run_child", run_child)

    def forget():
        for path in PATHS:
            torch.ops.fp8_dummy_internal.proof_forget(path)

    forget()
    yield calls
    forget()


def keys() -> list:
    return [e for e in fp8_dummy.self_check_report() if e.path in PATHS]


def gathers(monkeypatch) -> list:
    """One entry per gathering pass of a plan (the tensors it went over)."""
    passes, real = [], core.planning._prove_together

    def counted(tensors, *args):
        passes.append(len(tensors))
        real(tensors, *args)

    monkeypatch.setattr(core.planning, "_prove_together", counted)
    return passes


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_form_is_probed_in_the_child_and_cached(
    children, tmp_path, monkeypatch, engine
):
    ours, theirs = ENGINES[engine]
    gathered = gathers(monkeypatch)
    filled, expected = model(), model()
    theirs(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing refused
        ours(filled)
    assert assert_same_bytes(filled, expected) == 9
    proven = keys()
    assert proven and all(e.proven for e in proven), proven
    # Keys whose float path is ours: FP8 weight, 0-dim and 2-dim float32 scales, bfloat16
    # scales; TensorRT-LLM's also the transposed weight (its temp is row-major) and int8.
    floats = 6 if engine == "trtllm" else 4
    assert len(children) == 1  # one child for the fill's keys together
    specs = [spec for _, spec in children[0][0]]
    assert len(specs) == floats, [spec[3] for spec in specs]
    assert any(strided for *_, strided, _, _ in specs) == (engine == "trtllm")
    assert len(list((tmp_path / "fp8_dummy/proofs").iterdir())) == floats
    # A later start: this process's verdicts forgotten, the disk's kept: no child.
    torch.ops.fp8_dummy_internal.proof_forget(proven[0].path)
    again = model()
    ours(again)
    assert len(children) == 1 and assert_same_bytes(again, expected)
    assert len(gathered) == 1  # the plan's dry pass: once, at the first key that needed a child


@pytest.mark.parametrize("fault", ["raises", "dies"])
def test_keys_a_shared_child_leaves_undecided_are_proven_each_in_its_own(
    children, monkeypatch, fault
):
    # The shared child's second probe raises (its key and the one after it are proven alone),
    # or the shared child dies (every key alone); the verdicts are the same either way.
    probes = []
    real_probe, real_run = core.planning.child_probe, _isolated.run_child

    def probe(*args):
        probes.append(args[3][0])
        if fault == "raises" and len(probes) == 2:
            raise RuntimeError("a stand-in for a fault")
        return real_probe(*args)

    def run_child(target, args, timeout):
        if fault == "dies" and target.endswith(":_each"):
            children.append(args)
            return None, "the child process ended without a result, killed by signal 11"
        return real_run(target, args, timeout)

    monkeypatch.setattr(core.planning, "child_probe", probe)
    monkeypatch.setattr(_isolated, "run_child", run_child)
    filled, expected = model(), model()
    oracle.vllm_load_weights(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing refused
        vllm_fill(filled)
    assert assert_same_bytes(filled, expected) == 9
    assert keys() and all(e.proven for e in keys()), keys()
    alone = len(children) - 1  # the shared child, then a child per key it left undecided
    assert alone == (3 if fault == "raises" else 4), children
    if fault == "raises":
        assert len(probes) == 2 + 3  # the shared child stopped at the one that raised


def test_an_engine_function_a_child_cannot_import_is_left_its_tensors(children, tmp_path):
    def own(t, *args, **kwargs):  # a closure: no name a fresh process can import
        oracle.vllm_single(t, *args, **kwargs)

    filled, expected = model(), model()
    oracle.vllm_load_weights(expected)
    with pytest.warns(RuntimeWarning, match="a child process cannot import") as caught:
        vllm_fill(filled, engine=own)
    assert len([w for w in caught if "self-check refused" in str(w.message)]) == 4
    assert assert_same_bytes(filled, expected) == 9
    assert not children and not (tmp_path / "fp8_dummy").exists()  # nothing to cache
    assert keys() and not any(e.proven for e in keys())


@pytest.mark.parametrize("setting", [None, "0"])
def test_cpu_keys_are_proven_in_process_unless_asked(children, monkeypatch, setting):
    if setting is None:
        monkeypatch.delenv("FP8_DUMMY_ISOLATE")
    else:
        monkeypatch.setenv("FP8_DUMMY_ISOLATE", setting)
    gathered = gathers(monkeypatch)
    filled, expected = model(), model()
    oracle.vllm_load_weights(expected)
    vllm_fill(filled)
    assert assert_same_bytes(filled, expected) == 9
    assert not children and keys() and all(e.proven for e in keys())
    assert not gathered  # no key needed a child: the plan made once


# ---- fresh processes: an engine's starts, its child killed by our kernel ---------------------

# Appended to the stand-in vLLM's weight_utils.py, so that it runs in every process that
# imports the engine (its start, and the child that imports its function): records the
# process, and puts our CPU kernels (core.execution.init_, init_many_ and init_many_held: what
# the child's probe runs, and a new plan's batch; one record per tensor) behind a stand-in for
# a fault, STANDIN_KILL=1: the process dies by SIGSEGV, as on an illegal address.
HOOK = """
import os, signal
import fp8_dummy.engines.core.execution as _core


def _ours(kernel, count=lambda t, *_: len(t) if isinstance(t, list) else 1):
    def run(t, *args, **kwargs):
        with open(os.environ["STANDIN_MARKER"], "a") as f:
            f.write(f"ours {os.getpid()}\\n" * count(t, *args))
        if os.environ.get("STANDIN_KILL") == "1":
            os.kill(os.getpid(), signal.SIGSEGV)
        return kernel(t, *args, **kwargs)

    return run


_core.init_, _core.init_many_ = _ours(_core.init_), _ours(_core.init_many_)
_core.init_many_held = _ours(_core.init_many_held, lambda held, n, fill, *_: len(fill))
with open(os.environ["STANDIN_MARKER"], "a") as f:
    f.write(f"engine {os.getpid()}\\n")
"""

# An engine's start: vLLM loads its plugins, then its dummy loader fills a model of two FP8
# weights (one kind of tensor: one proof); vLLM's own function fills the expected bytes.
START = """
import json, os, sys, warnings
from pathlib import Path
import torch
from helpers import entry_points
entry_points.provide("vllm.general_plugins", Path(sys.argv[1]))
import fp8_dummy
from fp8_dummy.engines import vllm as fvllm
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from vllm import plugins
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    plugins.load_general_plugins()
    model = torch.nn.ModuleList([torch.nn.Module() for _ in range(2)])
    for m in model:
        m.weight = torch.nn.Parameter(torch.empty(300, 41, dtype=torch.float8_e4m3fn), False)
    get_model_loader(LoadConfig(load_format="dummy")).load_weights(model, None)
same = True
for m in model:
    own = torch.empty_like(m.weight)
    fvllm.originals["single"](own, name="weight")
    same = same and torch.equal(own.view(torch.uint8), m.weight.view(torch.uint8))
# the loader's walk (proven in-process: it records calls, runs no kernel), each kind's key
walk = [e.proven for e in fp8_dummy.self_check_report() if "load_weights: the walk" in e.key]
report = [list(e) for e in fp8_dummy.self_check_report()
          if e.path == "vllm" and "load_weights: the walk" not in e.key]
warned = [str(w.message) for w in caught if "fp8_dummy" in str(w.message)]
print("RESULT", json.dumps({"pid": os.getpid(), "same": same, "report": report,
                            "walk": walk, "warnings": warned}))
"""


def start(tmp_path: Path, **env: str) -> dict:
    """One start of the engine (a fresh process); its cache and stand-in vLLM in tmp_path."""
    site = tmp_path / "site"
    if not site.exists():
        fake_vllm.write(site, "0.33.0")
        with open(site / "vllm/model_executor/model_loader/weight_utils.py", "a") as f:
            f.write(HOOK)
    marker = tmp_path / "marker.txt"
    marker.unlink(missing_ok=True)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), FP8_DUMMY_ISOLATE="all",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(site)]), STANDIN_MARKER=str(marker),
               **env)  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "entry_points")],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    records = [line.split() for line in marker.read_text().splitlines()]
    result["children"] = {int(p) for what, p in records if what == "engine"} - {result["pid"]}
    result["ours"] = [int(p) == result["pid"] for what, p in records if what == "ours"]
    return result


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "bytes"])
def test_a_child_that_dies_or_differs_leaves_the_engine_on_its_own_weights(tmp_path, fault):
    env = {"STANDIN_KILL": "1"} if fault == "kill" else {"FP8_DUMMY_FAULT": "vllm"}
    why = "killed by signal 11" if fault == "kill" else "first differing byte"
    first = start(tmp_path, **env)
    assert first["same"] and first["walk"] == [True], first  # vLLM's own bytes
    assert len(first["children"]) == 1 and first["ours"] == [False]  # ours ran in the child only
    assert len(first["warnings"]) == 1, first["warnings"]
    # a faulted run's verdicts are its own: never cached (nor read)
    cached = "not cached: FP8_DUMMY_FAULT is set" if fault == "bytes" else "cached in"
    assert why in first["warnings"][0] and f"in a child process; {cached}" in first["warnings"][0]
    assert [e[2] for e in first["report"]] == [False] and why in first["report"][0][3]
    assert "e4m3fn name='weight' dims=2" in first["report"][0][0]
    # A second start: the cached verdict, no child, ours never run, one warning naming the file
    # (under the fault: proved again in a child).
    second = start(tmp_path, **env)
    assert second["same"] and second["ours"] == ([] if fault == "kill" else [False])
    assert len(second["children"]) == (0 if fault == "kill" else 1)
    again = "cached at an earlier start" if fault == "kill" else "not cached: FP8_DUMMY_FAULT"
    assert len(second["warnings"]) == 1 and again in second["warnings"][0]
    assert why in second["warnings"][0]


@pytest.mark.slow
def test_a_proven_verdict_is_cached_and_the_next_start_runs_no_child(tmp_path):
    first = start(tmp_path)
    assert first["same"] and not first["warnings"] and len(first["children"]) == 1
    assert first["walk"] == [True]
    assert first["ours"] == [False, True, True]  # the child's probe, then both weights here
    assert [e[2] for e in first["report"]] == [True]
    second = start(tmp_path)
    assert second["same"] and not second["warnings"] and not second["children"]
    assert second["ours"] == [True, True] and [e[2] for e in second["report"]] == [True]
