"""The engines' dummy-weight semantics without the engines: fp8_dummy's whole-model and
per-tensor functions against plain-torch transcriptions of vLLM's and SGLang's code
(tests/oracles/engines.py, themselves proven against the real engines in
tests/test_engines_vllm.py and tests/test_engines_sglang.py), on the CPU and on CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, poison, storage_bytes
from helpers.engine_models import EngineModel, all_tensors, assert_same_bytes, changed
from oracles import engines as oracle

import fp8_dummy
from fp8_dummy import _proof
from fp8_dummy.engines import core
from fp8_dummy.engines import sglang as fsglang
from fp8_dummy.engines import vllm as fvllm

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
    ),
]
ENGINE_DTYPES = FP8_DTYPES + WIDE_DTYPES + [torch.int8, torch.uint8, torch.float4_e2m1fn_x2]
ENGINE_DTYPES += [torch.int32, torch.bool]
NAMES = ["weight", "weight_scale", "k_scale_inv"]
BOUNDS = [(None, None), (-0.5, 0.5), (None, 2.0), (-1e-3, 1e-3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("semantics", ["vllm-0.33", "vllm-0.30"])
@pytest.mark.parametrize("bounds", [(None, None), (-0.25, 0.5)])
def test_model_vllm_semantics_match_the_loader(device, semantics, bounds):
    gen = 33 if semantics == "vllm-0.33" else 30
    a = EngineModel(device, fp4=gen >= 33, meta=True)
    b = EngineModel(device, fp4=gen >= 33, meta=True)
    fp8_dummy.initialize_dummy_weights(a, *bounds, seed=99, semantics=semantics)
    oracle.vllm_load_weights(b, gen, *bounds, seed=99)
    assert assert_same_bytes(a, b) > 60
    done = changed(a)
    assert "layers.0.inv_freq" not in done and "layers.1.positions" not in done
    assert ("layers.0.int8_proj.weight" in done) == (gen >= 33)
    assert bool((a.layers[0].norm.weight == 1.0).all())  # dummy_weight_value
    if gen >= 33:
        assert bool((a.layers[1].mx_proj.weight_scale.view(torch.uint8) == 120).all())


@pytest.mark.parametrize("device", DEVICES)
def test_model_default_is_vllm_033_fp8_at_one(device):
    m = EngineModel(device)
    fp8_dummy.initialize_dummy_weights(m)
    w = m.layers[0].q_proj.weight.float()
    assert float(w.abs().max()) > 0.5 and float(w.abs().max()) <= 1.0  # not +-1e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bounds", [(), (-0.5, 0.25)])
def test_model_sglang_semantics_match_sglang(device, bounds):
    a, b = EngineModel(device), EngineModel(device)
    fp8_dummy.initialize_dummy_weights(a, *bounds, seed=5, semantics="sglang-0.5")
    oracle.sglang_initialize_dummy_weights(b, *bounds, seed=5)
    assert_same_bytes(a, b)
    assert bool((a.layers[0].nv_proj.weight_scale_2 == 1.0).all())
    assert "layers.0.int8_proj.weight" not in changed(a)


@pytest.mark.parametrize("device", DEVICES)
def test_sglang_drop_in_matches_sglang(device):
    a, b = EngineModel(device), EngineModel(device)
    fsglang.initialize_dummy_weights(a, -0.1, 0.1, 3)
    oracle.sglang_initialize_dummy_weights(b, -0.1, 0.1, 3)
    assert_same_bytes(a, b)


@pytest.mark.parametrize(
    "semantics,kwargs,error",
    [
        ("sglang-0.5", {"meta": True}, RuntimeError),
        ("sglang-0.5", {"fp4": True}, NotImplementedError),
        ("vllm-0.30", {"fp4": True}, NotImplementedError),
    ],
)
def test_model_raises_where_the_engine_raises_before_writing(semantics, kwargs, error):
    m = EngineModel(**kwargs)
    with pytest.raises(error, match="fp8_dummy: "):
        fp8_dummy.initialize_dummy_weights(m, semantics=semantics)
    assert changed(m) == set()


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_old_api_matches_vllm_030(device):
    a, b = EngineModel(device, meta=True), EngineModel(device, meta=True)
    fvllm.initialize_dummy_weights(a, None, -0.5, 0.5, 21)
    oracle.vllm_initialize_dummy_weights(b, -0.5, 0.5, 21)
    assert_same_bytes(a, b)
    assert "layers.0.norm.weight" in changed(a)  # state_dict: no dummy_weight_value
    assert not bool((a.layers[0].norm.weight == 1.0).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ENGINE_DTYPES, ids=str)
def test_vllm_single_matches_vllm(device, dtype):
    gen = fvllm.generation()
    for name in NAMES:
        for low, high in BOUNDS:
            for layout in ("dense", "transposed", "gaps"):
                base = torch.empty(6, 34, dtype=dtype, device=device)
                x = {"dense": base, "transposed": base.t(), "gaps": base[:, ::3]}[layout]
                y = torch.empty_like(base)
                y = {"dense": y, "transposed": y.t(), "gaps": y[:, ::3]}[layout]
                poison(x), poison(y)
                err = None
                try:
                    oracle.vllm_single(y, low, high, 8, name, generation=gen)
                except (NotImplementedError, RuntimeError) as e:
                    err = type(e)
                if err is not None:
                    with pytest.raises(err):
                        fvllm.initialize_single_dummy_weight(x, low, high, 8, name)
                    continue
                fvllm.initialize_single_dummy_weight(x, low, high, 8, name)
                where = f"{name} {low} {high} {layout}"
                assert torch.equal(storage_bytes(x), storage_bytes(y)), where


def test_vllm_single_skips_meta_and_fills_dummy_weight_value():
    fvllm.initialize_single_dummy_weight(torch.empty(3, device="meta"))
    p = torch.nn.Parameter(torch.empty(4, dtype=torch.bfloat16), requires_grad=True)
    p.dummy_weight_value = 0.5
    fvllm.initialize_single_dummy_weight(p)
    assert bool((p == 0.5).all())


def test_scales_neutral_touches_only_random_float_scales():
    a, b = EngineModel(fp4=True), EngineModel(fp4=True)
    fp8_dummy.initialize_dummy_weights(a, scales="neutral")
    fp8_dummy.initialize_dummy_weights(b)
    blk_a, blk_b = a.layers[0], b.layers[0]
    assert bool((blk_a.q_proj.weight_scale == 1.0).all()) and float(blk_a.q_proj.input_scale) == 1
    assert torch.equal(
        blk_a.mx_e8m0.weight_scale.view(torch.uint8),
        torch.full_like(blk_b.mx_e8m0.weight_scale.view(torch.uint8), 120),
    )  # the engine's own rule stays
    assert torch.equal(blk_a.q_proj.weight.view(torch.uint8), blk_b.q_proj.weight.view(torch.uint8))


def _shared_storage_model() -> torch.nn.Module:
    # One uint8 tensor under two local names: vLLM 0.33 fills it as "weight" (random)
    # and then as "weight_scale" (byte 120); and an FP8 weight with a view into it.
    m = torch.nn.Module()
    m.a, m.b, m.c = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    shared = torch.nn.Parameter(torch.empty(8, 8, dtype=torch.uint8), requires_grad=False)
    m.a.weight = shared
    m.b.weight_scale = shared
    big = torch.nn.Parameter(torch.empty(4, 16, dtype=torch.float8_e4m3fn), requires_grad=False)
    m.c.weight = big
    m.c.head = torch.nn.Parameter(big.data[:2], requires_grad=False)
    m.c.head.dummy_weight_value = 0.5  # so the view's fill differs from the weight's
    for t in all_tensors(m).values():
        storage_bytes(t).fill_(0x55)
    return m


def test_shared_storage_keeps_the_engine_order():
    a, b = _shared_storage_model(), _shared_storage_model()
    fp8_dummy.initialize_dummy_weights(a, seed=4)
    oracle.vllm_load_weights(b, 33, seed=4)
    assert_same_bytes(a, b)
    assert bool((a.a.weight == 120).all()) and bool((a.c.weight[:2].float() == 0.5).all())


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1
def test_a_refused_key_warns_once_and_is_remembered():
    key = "test: a probe that differs"
    probes = []

    def probe():
        probes.append(1)
        return "first differing byte at element 0"

    torch.ops.fp8_dummy_internal.proof_forget("test:")
    with pytest.warns(RuntimeWarning, match="self-check refused test: a probe that differs"):
        assert not _proof.proven(key, probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _proof.proven(key, probe)  # remembered: no probe, no second warning
    assert probes == [1]
    entry = next(e for e in fp8_dummy.self_check_report() if e.key == key)
    assert (entry.path, entry.proven, entry.detail) == ("test", False, probe())
    assert _proof.proven("test: a probe that matches", lambda: None)
    assert _proof.proven("test: a probe that matches", probe)  # cached verdict


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1
def test_a_probe_that_raises_is_a_refusal():
    torch.ops.fp8_dummy_internal.proof_forget("test:")

    def probe():
        raise ValueError("no such thing")

    with pytest.warns(RuntimeWarning, match="the probe failed: ValueError: no such thing"):
        assert not _proof.proven("test: raises", probe)


def test_random_bytes_helper_is_torchs_random():
    x = torch.empty(1000, dtype=torch.int8)
    core.random_bytes_(x, -128, 128, 11)
    g = torch.Generator()
    g.manual_seed(11)
    assert torch.equal(x, torch.empty(1000, dtype=torch.int8).random_(-128, 128, generator=g))


@pytest.mark.parametrize("semantics", ["vllm-0.33", "vllm-0.30", "sglang-0.5", "trtllm-1.2"])
@pytest.mark.parametrize("bad", ["bounds", "expanded", "expanded int8"])
def test_a_refused_tensor_means_nothing_written(semantics, bad):
    """Every tensor is checked before any is written."""
    m = torch.nn.Module()
    m.a = torch.nn.Parameter(torch.full((4,), 7.0))
    args, match = (), "more than one element refers to a single memory location"
    if bad == "bounds":
        m.b = torch.nn.Parameter(torch.full((4,), 7.0, dtype=torch.float16))
        args, match = (-1e5, 1e5), "from is out of bounds for c10::Half"
    elif bad == "expanded":
        m.b = torch.nn.Parameter(torch.full((4, 1), 7.0).expand(4, 4))
    else:
        m.b = torch.nn.Parameter(torch.full((4, 1), 7, dtype=torch.int8).expand(4, 4), False)
        if semantics in ("vllm-0.30", "sglang-0.5"):
            return  # integers untouched there: nothing to refuse
    with pytest.raises(RuntimeError, match=f"^fp8_dummy: b: .*{match}"):
        fp8_dummy.initialize_dummy_weights(m, *args, semantics=semantics)
    assert bool((m.a == 7.0).all()) and bool((m.b == 7).all())


def test_bad_semantics_is_refused():
    with pytest.raises(ValueError, match="semantics must be one of"):
        fp8_dummy.initialize_dummy_weights(EngineModel(), semantics="vllm")


@pytest.mark.slow  # fresh Python processes
def test_importing_fp8_dummy_imports_no_engine(tmp_path):
    # A stand-in "vllm" and "sglang" that fail on import: importing our modules (and
    # asking vLLM's version) must not touch them.
    for name in ("vllm", "sglang"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('imported')\n")
    code = (
        "import sys, fp8_dummy, fp8_dummy.engines.vllm, fp8_dummy.engines.sglang\n"
        "fp8_dummy.vllm.version()\n"
        "assert not {'vllm', 'sglang'} & set(sys.modules), sorted(sys.modules)\n"
    )
    root = Path(fp8_dummy.__file__).resolve().parent.parent
    env = {"PYTHONPATH": f"{root}:{tmp_path}", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path, timeout=300)


def test_a_plan_asks_the_proof_once_per_kind_of_tensor_it_proved(monkeypatch):
    """Thousands of tensors of a few kinds: a kind (local name, device, dtype, dims, layout)
    proven once is not asked again in that plan; one refused is asked at each tensor (as a
    probe to retry would be). The bytes are the loader's either way."""
    asked, real, verdict = [], core.planning.proven, [False]

    def counted(sem, engine, name, t, call):
        asked.append((name, t))
        return real(sem, engine, name, t, call) if verdict[0] else False

    monkeypatch.setattr(core.planning, "proven", counted)
    for verdict[0] in (False, True):
        asked.clear()
        a, b = (torch.nn.ModuleList(EngineModel("cpu") for _ in range(3)) for _ in "ab")
        fp8_dummy.initialize_dummy_weights(a, seed=7)
        oracle.vllm_load_weights(b, 33, seed=7)
        assert assert_same_bytes(a, b) > 60
        if not verdict[0]:  # refused: asked at every fusable tensor of the three models
            every = [n for n, _ in asked]
            first = [n for n in every if n.startswith("0.")]
            assert len(every) == len(set(every)) == 3 * len(first) > 0
            kinds = {}  # each kind's first tensor, in the order of the walk
            for n, t in asked:  # (vLLM's float path's bytes do not depend on the layout)
                kinds.setdefault((n.rsplit(".", 1)[-1], t.dtype, min(t.dim(), 2)), n)
    assert [n for n, _ in asked] == list(kinds.values())  # proven: once per kind, at its first


@pytest.mark.parametrize("enabled", [True, False])
def test_a_fill_pauses_the_cycle_collector_and_leaves_it_as_it_was(monkeypatch, enabled):
    """Paused while the fill plans and runs (and the plans its probes make), also when it
    raises, and while fills in other threads run; afterwards on or off as before; a child
    forked during a fill starts with it as it was before the fill."""
    import gc
    import threading

    seen = []
    real = core.planning._plan

    def spy(*args):
        seen.append(gc.isenabled())
        if len(seen) == 1 and hasattr(os, "fork"):
            pid = os.fork()
            if pid == 0:  # the child: the collector as before the fill, nothing paused
                os._exit(0 if gc.isenabled() == enabled else 1)
            assert os.waitpid(pid, 0)[1] == 0
        return real(*args)

    monkeypatch.setattr(core.planning, "_plan", spy)
    (gc.enable if enabled else gc.disable)()
    try:
        fp8_dummy.initialize_dummy_weights(EngineModel("cpu"), seed=1)
        assert gc.isenabled() == enabled and seen and not any(seen)  # probes plan too
        with pytest.raises(ValueError, match="semantics"):
            fp8_dummy.initialize_dummy_weights(EngineModel("cpu"), semantics="none")
        with pytest.raises(ValueError, match="64 bits"):  # refused inside the plan
            fp8_dummy.initialize_dummy_weights(EngineModel("cpu"), seed=2**64)
        assert gc.isenabled() == enabled
        inside = threading.Event()
        release = threading.Event()

        def slow(*args):
            inside.set()
            release.wait(10)
            return real(*args)

        monkeypatch.setattr(core.planning, "_plan", slow)
        fill = fp8_dummy.initialize_dummy_weights
        other = threading.Thread(target=fill, args=(EngineModel("cpu"),))
        other.start()
        assert inside.wait(10)
        monkeypatch.setattr(core.planning, "_plan", spy)
        fp8_dummy.initialize_dummy_weights(EngineModel("cpu"), seed=3)  # ends first
        assert not gc.isenabled()  # the other thread's fill is still under way
        release.set()
        other.join(10)
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
