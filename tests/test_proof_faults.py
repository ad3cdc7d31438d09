"""A broken fast path is caught: with FP8_DUMMY_FAULT naming it (docs/development.md), the
path corrupts one byte of every output; its proof must refuse it, the bytes returned must
be the reference's (checked against torch's reference or the emulated one, and against the
independent numpy models), one warning must name the key, and self_check_report() must
list the refusal. One fresh process per path (the switch is read once). The CUDA paths run
through the emulator (their launchers' own probes and verdicts, cuda_plan/cuda_proof.h); the
engines through a stand-in vLLM and SGLang's loop in plain torch (tests/oracles/engines.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PRELUDE = """
import json, sys, warnings
import numpy as np
import torch
import fp8_dummy
from conftest import cpu_formula, poison
from ext import emulator
from oracles import cpu_reference as cpu_oracle, cuda_reference as cuda_oracle
from oracles import engines as engine_oracle, stateless as stateless_oracle

def same(a, b):
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                            b.contiguous().reshape(-1).view(torch.uint8)))

def fp8_oracle(n, seed, sm, mt, name="float8_e4m3fn"):
    halves, _ = cuda_oracle.reference_halves(n, -1.0, 1.0, seed, 0, sm, mt)
    return torch.from_numpy(cuda_oracle.fp8_table(name)[halves.view(np.uint16)])
"""

# Each body fills two tensors the fast path would fill (a second call must not warn again)
# and sets `checks`: every one must be True.
BODIES = {
    "cpu.init_": """
        checks = []
        for seed, rows in ((5, 1000), (6, 500)):
            t = poison(torch.empty(rows, 77, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            fp8_dummy.init_(t, -1.0, 1.0, seed=seed)
            fp8_dummy.reference.new_path(ref, -1.0, 1.0, seed)
            want = cpu_oracle.reference_bytes(t.shape, t.stride(), "float8_e4m3fn", seed,
                                              -1.0, 1.0, **cpu_formula())
            checks += [same(t, ref), same(t.view(torch.uint8), torch.from_numpy(want))]
    """,
    "cpu.random_": """
        checks = []
        for seed in (3, 4):
            q = poison(torch.empty(10007, dtype=torch.int8))
            fp8_dummy.random_(q, -128, 128, seed=seed)
            ref = torch.empty_like(q).random_(-128, 128,
                                              generator=torch.Generator().manual_seed(seed))
            words = cpu_oracle.mt19937_words(seed, q.numel())
            want = (words.astype(np.int64) % 256 - 128).astype(np.int8)
            checks += [same(q, ref), same(q, torch.from_numpy(want))]
    """,
    "cuda.init_": """
        checks = []
        for seed, n in ((9, 30_001), (10, 4097)):
            t = poison(torch.empty(n, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, seed, sm_count=2,
                                               max_threads_per_sm=1024)
            emulator.emulate_cuda_init_(ref, -1.0, 1.0, seed, sm_count=2,
                                        max_threads_per_sm=1024)
            checks += [same(t, ref), same(t.view(torch.uint8), fp8_oracle(n, seed, 2, 1024))]
    """,
    "cuda.init_many_": """
        checks = []
        for seed in (21, 22):
            ts = [poison(torch.empty(n, dtype=torch.float8_e4m3fn)) for n in (1, 4097, 30_001)]
            emulator.emulate_proven_cuda_init_many_(ts, -1.0, 1.0, seed, sm_count=2,
                                                    max_threads_per_sm=1024)
            for t in ts:
                ref = poison(torch.empty_like(t))
                emulator.emulate_cuda_init_(ref, -1.0, 1.0, seed, sm_count=2,
                                            max_threads_per_sm=1024)
                oracle = fp8_oracle(t.numel(), seed, 2, 1024)
                checks += [same(t, ref), same(t.view(torch.uint8), oracle)]
    """,
    "cuda.init_stateless_": """
        checks = []
        for seed in (4, 5):
            t = poison(torch.empty(700, 31, dtype=torch.bfloat16))
            ref = poison(torch.empty_like(t))
            emulator.emulate_proven_cuda_init_stateless_(t, -1.0, 1.0, seed, sm_count=2)
            fp8_dummy.init_stateless_(ref, -1.0, 1.0, seed)
            want = stateless_oracle.expected_bytes(np.arange(t.numel()), t.dtype, -1.0, 1.0, seed)
            bits = stateless_oracle.tensor_bits(t).reshape(-1)
            checks += [same(t, ref), bool(np.array_equal(bits, want))]
    """,
    "vllm": """
        from pathlib import Path
        from helpers import entry_points, fake_vllm
        root = Path(sys.argv[1])
        sys.path.insert(0, str(fake_vllm.write(root / "site", "0.33.0")))
        entry_points.provide("vllm.general_plugins", root / "entry_points")
        from vllm import plugins
        from vllm.model_executor.model_loader import dummy_loader
        plugins.load_general_plugins()
        assert dummy_loader._fp8_dummy_patched
        checks = []
        for rows in (1000, 300):
            t = poison(torch.empty(rows, 77, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            dummy_loader.initialize_single_dummy_weight(t, name="weight")  # as the loader
            engine_oracle.vllm_single(ref, name="weight")
            ours_new = poison(torch.empty_like(t))
            fp8_dummy.reference.new_path(ours_new, -1.0, 1.0, 1234)  # vLLM's +-1.0 for FP8
            checks += [same(t, ref), same(t, ours_new)]
    """,
    "sglang": """
        from fp8_dummy import sglang as fsglang
        def model():
            m = torch.nn.Sequential(torch.nn.Linear(77, 300), torch.nn.Linear(300, 77))
            for p in m.parameters():
                p.data = poison(torch.empty(p.shape, dtype=torch.float8_e4m3fn))
            return m
        ours, theirs = model(), model()
        fsglang._around(engine_oracle.sglang_initialize_dummy_weights, ours, -1.0, 1.0)
        engine_oracle.sglang_initialize_dummy_weights(theirs, -1.0, 1.0)
        checks = [same(a, b) for a, b in zip(ours.state_dict().values(),
                                             theirs.state_dict().values())]
    """,
}

EPILOGUE = """
refused = [str(w.message) for w in caught if "self-check refused" in str(w.message)]
report = [[e.path, e.proven, e.key] for e in fp8_dummy.self_check_report()]
want = globals().get("refusals")
print("RESULT", json.dumps({"checks": checks, "refused": refused, "report": report, "want": want}))
"""


def _script(body: str) -> str:
    inner = textwrap.indent(textwrap.dedent(body), "    ")
    run = "with warnings.catch_warnings(record=True) as caught:\n"
    run += '    warnings.simplefilter("always")\n' + inner
    return PRELUDE + run + EPILOGUE


def _env(fault: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{TESTS}:{os.environ.get('PYTHONPATH', '')}")
    env.pop("FP8_DUMMY_CPU_PATH", None)  # auto: the proof decides
    env.pop("FP8_DUMMY_FAULT", None)
    if fault is not None:
        env["FP8_DUMMY_FAULT"] = fault
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """Every path's script in its own fresh process, all started at once (each spends most
    of its time importing torch), plus all scripts together without the switch (key None)."""
    scripts = {path: _script(body) for path, body in BODIES.items()}
    together = "\n".join(textwrap.dedent(b) for b in BODIES.values())
    together = together.replace("checks = []", "").replace("checks = [", "checks += [")
    scripts[None] = _script("checks = []\n" + together)
    return _run_all(scripts, tmp_path_factory)


def _run_all(scripts: dict, tmp_path_factory) -> dict:
    """Each script (keyed by its fault switch) in its own fresh process, all started at once;
    each one's RESULT line."""
    procs = {}
    for fault, code in scripts.items():
        where = tmp_path_factory.mktemp(str(fault).replace(".", "_").replace(":", "_"))
        procs[fault] = subprocess.Popen(
            [sys.executable, "-c", code, str(where)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(fault),
            cwd=where,
        )
    out = {}
    for fault, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"{fault}: {stdout}{stderr[-3000:]}"
        out[fault] = json.loads(lines[-1][len("RESULT ") :])
    return out


@pytest.mark.parametrize("path", list(BODIES))
def test_injected_fault_is_caught(path, results):
    result = results[path]
    assert result["checks"] and all(result["checks"]), result  # the reference's bytes
    refused = [r for r in result["refused"] if f"refused {path}:" in r]
    assert len(refused) == 1, result["refused"]  # one warning, for the key of the fault
    entries = [e for e in result["report"] if e[0] == path and not e[1]]
    assert len(entries) == 1 and entries[0][2] in refused[0], result["report"]


def test_no_fault_no_refusal(results):
    # The same scripts together without the switch: every key proven, nothing refused.
    result = results[None]
    assert result["checks"] and all(result["checks"]) and not result["refused"], result
    assert set(BODIES) <= {e[0] for e in result["report"] if e[1]}, result["report"]


# Beyond one fault per path, each in a fresh process: the environment, and a body that sets
# `checks` (every one must be True) and `refusals` (how many refusal warnings must show).
SCENARIOS = {
    # A probe that runs out of memory is no verdict: that call takes the reference, the key
    # stays unproven (the report says why), and the next call proves it.
    "cpu.init_:oom": """
        def call(seed):
            t = poison(torch.empty(3000, 7, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            fp8_dummy.init_(t, -1.0, 1.0, seed=seed)
            fp8_dummy.reference.new_path(ref, -1.0, 1.0, seed)
            keys = [e for e in fp8_dummy.self_check_report() if e.path == "cpu.init_"]
            return same(t, ref), keys
        ok1, keys1 = call(5)
        ok2, keys2 = call(6)
        checks = [ok1, ok2, len(keys1) == 1, not keys1[0].proven, keys1[0].unproven,
                  "out of memory" in keys1[0].detail or "bad_alloc" in keys1[0].detail,
                  "(will retry)" in keys1[0].detail,
                  [(e.key, e.proven) for e in keys2] == [(keys1[0].key, True)]]
        refusals = 0
    """,
    "cuda.init_:oom": """
        checks = []
        for seed in (9, 10):
            t = poison(torch.empty(30_001, dtype=torch.float8_e4m3fn))
            emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, seed, sm_count=2,
                                               max_threads_per_sm=1024)
            checks.append(same(t.view(torch.uint8), fp8_oracle(30_001, seed, 2, 1024)))
            keys = [e for e in fp8_dummy.self_check_report() if e.path == "cuda.init_"]
            checks += [len(keys) == 1, keys[0].unproven if seed == 9 else keys[0].proven]
        refusals = 0
    """,
    # A fault of the linear kernel's checked stores alone (dense, not 16-byte aligned): the
    # key is proven by an aligned call, and its probe runs that branch too, so the proof
    # refuses it there and the later unaligned call gets the reference's bytes.
    "cuda.init_:checked-stores": """
        checks = []
        cases = ((9, 0, False), (10, 4, False), (11, 1, False), (12, 0, False), (13, 0, True),
                 (14, 4, True))
        for seed, skip, split in cases:
            n = 30_001
            t = poison(torch.empty(n + skip, dtype=torch.float8_e4m3fn))[skip:]
            emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, seed, sm_count=2,
                                               max_threads_per_sm=1024, split_probe=split)
            checks.append(same(t.view(torch.uint8), fp8_oracle(n, seed, 2, 1024)))
        keys = [e for e in fp8_dummy.self_check_report() if e.path == "cuda.init_"]
        checks += [len(keys) == 3, not any(e.proven for e in keys)]
        refusals = 3
    """,
    # A forced path proves itself like any other: a fault gives the reference's bytes and
    # one warning (init_ and random_).
    "cpu.init_,cpu.random_": """
        import os
        os.environ["FP8_DUMMY_CPU_PATH"] = "fast"
        checks = []
        for seed in (5, 6):
            t = poison(torch.empty(1000, 77, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            fp8_dummy.init_(t, -1.0, 1.0, seed=seed)
            fp8_dummy.reference.new_path(ref, -1.0, 1.0, seed)
            q = poison(torch.empty(10007, dtype=torch.uint8))
            fp8_dummy.random_(q, 0, 256, seed=seed)
            g = torch.Generator().manual_seed(seed)
            qref = torch.empty_like(q).random_(0, 256, generator=g)
            checks += [same(t, ref), same(q, qref)]
        refusals = 2
    """,
    # Small tensors take init_'s first values (under its path's name): both its key and the
    # usual path's are refused, and the bytes are the reference's (and the numpy model's).
    "cpu.init_": """
        checks = []
        for seed in (13, 14):
            ts = [poison(torch.empty(n, dtype=torch.float8_e4m3fn)) for n in (1, 700, 4096)]
            fp8_dummy.init_many_(ts, -1.0, 1.0, seed)
            for t in ts:
                ref = poison(torch.empty_like(t))
                fp8_dummy.reference.new_path(ref, -1.0, 1.0, seed)
                want = cpu_oracle.reference_bytes(t.shape, t.stride(), "float8_e4m3fn", seed,
                                                  -1.0, 1.0, **cpu_formula())
                checks += [same(t, ref), same(t.view(torch.uint8), torch.from_numpy(want))]
        keys = [e for e in fp8_dummy.self_check_report() if "first values" in e.key]
        checks += [len(keys) == 1, not keys[0].proven]
        refusals = 2
    """,
    # The split's key (a call over 2^30 elements) is refused on its two-piece probe.
    "cuda.init_": """
        checks = []
        for seed in (9, 10):
            t = poison(torch.empty(30_001, dtype=torch.float8_e4m3fn))
            emulator.emulate_proven_cuda_init_(t, -1.0, 1.0, seed, sm_count=2,
                                               max_threads_per_sm=1024, split_probe=True)
            checks.append(same(t.view(torch.uint8), fp8_oracle(30_001, seed, 2, 1024)))
        keys = [e for e in fp8_dummy.self_check_report() if e.path == "cuda.init_"]
        checks += [len(keys) == 1, "split=yes" in keys[0].key, not keys[0].proven]
        refusals = 1
    """,
}


# The drop-ins called where their engine is not loaded: nothing to call as the loader does, so
# each proves itself against the engine's semantics through the plain-torch path (docs/engines.md).
WITHOUT_ENGINE = {
    "sglang": """
        from fp8_dummy import sglang as drop_in
        checks = []
        for rows in (1000, 300):
            linear = torch.nn.Linear
            ours, theirs = (
                torch.nn.Sequential(linear(77, rows, bias=False), linear(rows, 77, bias=False))
                for _ in range(2)
            )
            for m in (ours, theirs):
                for p in m.parameters():
                    p.data = poison(torch.empty(p.shape, dtype=torch.float8_e4m3fn))
            drop_in.initialize_dummy_weights(ours, -1.0, 1.0, 3)
            engine_oracle.sglang_initialize_dummy_weights(theirs, -1.0, 1.0, 3)
            checks += [same(a, b) for a, b in zip(ours.parameters(), theirs.parameters())]
        checks.append("sglang" not in sys.modules)
    """,
    "trtllm": """
        from fp8_dummy import trtllm as drop_in
        from oracles import trtllm as trtllm_oracle
        checks = []
        for rows in (1000, 300):
            ours, theirs = torch.nn.Module(), torch.nn.Module()
            for m in (ours, theirs):
                m.register_buffer("w", poison(torch.empty(rows, 77, dtype=torch.int8)))
            drop_in.initialize_dummy_weights(ours, seed=3)
            trtllm_oracle.initialize_dummy_weights(theirs, seed=3)
            checks.append(same(ours.w, theirs.w))
        checks.append("tensorrt_llm" not in sys.modules)
    """,
    "vllm": """
        import fp8_dummy
        checks = []
        for rows in (1000, 300):
            t = poison(torch.empty(rows, 77, dtype=torch.float8_e4m3fn))
            ref = poison(torch.empty_like(t))
            fp8_dummy.vllm.initialize_single_dummy_weight(t, seed=3, name="weight")
            engine_oracle.vllm_single(ref, seed=3, name="weight")
            checks.append(same(t, ref))
        checks.append("vllm" not in sys.modules)
    """,
}


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> dict:
    return _run_all({f: _script(b) for f, b in SCENARIOS.items()}, tmp_path_factory)


@pytest.mark.parametrize("fault", list(SCENARIOS))
def test_scenario(fault, scenarios):
    result = scenarios[fault]
    assert result["checks"] and all(result["checks"]), result
    assert len(result["refused"]) == result["want"], result["refused"]


@pytest.mark.slow  # a fresh process under RLIMIT_AS
def test_out_of_address_space_is_no_verdict():
    """Under RLIMIT_AS every first-use probe fails; the call still
    gives the reference's bytes, and once memory is back the search completes."""
    script = textwrap.dedent("""
        import os, resource, torch, fp8_dummy
        from fp8_dummy.reference import new_path
        os.environ["FP8_DUMMY_CPU_PATH"] = "exact"  # the copy_ table first, no search
        fp8_dummy.init_(torch.empty(10, dtype=torch.float8_e4m3fn))
        del os.environ["FP8_DUMMY_CPU_PATH"]
        t = torch.empty(5000, dtype=torch.float8_e4m3fn)
        r = torch.empty_like(t)
        new_path(r, -1.0, 1.0, 5)
        vm = int(open(f"/proc/{os.getpid()}/statm").read().split()[0]) * 4096
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 10), hard))
        try:
            fp8_dummy.init_(t, -1.0, 1.0, seed=5)
            info = fp8_dummy.cpu_fast_path_info()
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        assert torch.equal(t.view(torch.uint8), r.view(torch.uint8))
        assert "until its search completes" in info, info
        report = fp8_dummy.self_check_report()
        assert report and all(e.unproven for e in report), report
        t.zero_()
        fp8_dummy.init_(t, -1.0, 1.0, seed=5)
        assert torch.equal(t.view(torch.uint8), r.view(torch.uint8))
        assert "portable=pass" in fp8_dummy.cpu_fast_path_info(), fp8_dummy.cpu_fast_path_info()
        assert all(e.proven for e in fp8_dummy.self_check_report()), fp8_dummy.self_check_report()
        print("ok")
    """)
    # glibc serves a block below its (growing) mmap threshold from heap it already holds, so
    # a probe could succeed under the limit by luck; fixed at 64 KiB, every probe's buffer
    # (128 KiB and up) needs new address space, as the test intends
    env = dict(_env(None), MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("path", list(WITHOUT_ENGINE))
def test_fault_without_the_engine_is_not_silent(path, tmp_path):
    """FP8_DUMMY_FAULT names a drop-in called without its engine: the unfaulted bytes, one
    warning per refused kind of tensor, and the refusal in self_check_report()."""
    proc = subprocess.run(
        [sys.executable, "-c", _script(WITHOUT_ENGINE[path]), str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(path),
        cwd=tmp_path,
        timeout=600,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["checks"] and all(result["checks"]), result
    refused = [r for r in result["refused"] if f"refused {path}:" in r]
    assert len(refused) == 1 and "semantics" in refused[0], result["refused"]
    entries = [e for e in result["report"] if e[0] == path and not e[1]]
    assert len(entries) == 1 and entries[0][2] in refused[0], result["report"]
