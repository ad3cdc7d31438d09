"""fp8_dummy.trtllm against TensorRT-LLM's semantics: tests/oracles/trtllm.py, a plain-torch
loop written from docs/trtllm.md (no TensorRT-LLM wheel is installable here). Every dtype,
contiguous / transposed / permuted / sliced parameters, tied tensors, every refused dtype,
meta and overlapping tensors and bad bounds (the same exception type and message, raised
before anything is written where TensorRT-LLM fills the tensors before), bounds and seeds;
then with a loaded model loader (a stand-in module whose function is the oracle): the
proofs, a refusal, patch(). CPU here, CUDA in scripts/gpu_check.sh."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch
from conftest import poison, storage_bytes
from oracles import trtllm as oracle
from torch import nn

import fp8_dummy
from fp8_dummy.engines import trtllm as ft

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
    ),
]
FILLED = [torch.float8_e4m3fn, torch.int8, torch.uint8]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
UNTOUCHED = [torch.int32, torch.int64, torch.int16]
REFUSED = [
    torch.float8_e5m2,
    torch.float8_e8m0fnu,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.bool,
    torch.float4_e2m1fn_x2,
]
LAYOUTS = {
    "contiguous": lambda make: make((37, 53)),
    "transposed": lambda make: make((53, 37)).t(),
    "permuted": lambda make: make((3, 5, 7, 11)).permute(2, 0, 3, 1),
    "sliced": lambda make: make((41, 66))[:, 1::2],
    "vector": lambda make: make((301,)),
    "scalar": lambda make: make(()),
}


def model_of(dtypes, device="cpu", layouts=tuple(LAYOUTS)) -> nn.Module:
    """Parameters of every (dtype, layout), a tied module and a tied parameter, all poisoned."""
    m = nn.Module()
    for i, dtype in enumerate(dtypes):
        layer = nn.Module()
        for layout in layouts:
            t = LAYOUTS[layout](lambda shape, dt=dtype: torch.empty(shape, dtype=dt, device=device))
            layer.register_parameter(layout, nn.Parameter(poison(t), requires_grad=False))
        m.add_module(f"layer{i}", layer)
    m.tied = m.layer0  # the same tensors under a second name (state_dict lists both)
    m.head = nn.Module()
    m.head.weight = m.layer0.get_parameter(layouts[-1])
    return m


def same_bytes(a: nn.Module, b: nn.Module) -> int:
    """Every state_dict entry's whole storage equal; returns how many entries."""
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(storage_bytes(sa[name]), storage_bytes(sb[name])), name
    return len(sa)


@pytest.fixture(autouse=True)
def _no_loader(monkeypatch):
    """No TensorRT-LLM loader unless a test installs its stand-in; fresh proofs."""
    monkeypatch.delitem(sys.modules, ft.LOADER, raising=False)
    ft.originals.clear()
    torch.ops.fp8_dummy_internal.proof_forget("trtllm")


def loader(function) -> types.ModuleType:
    """A stand-in model loader module at TensorRT-LLM's import path, with `function`."""
    module = types.ModuleType(ft.LOADER)
    module.initialize_dummy_weights = function
    sys.modules[ft.LOADER] = module
    return module


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", [(), (-0.5, 0.25), (-1e-3, 1e-3, 1234)], ids=str)
def test_every_dtype_and_layout(device, args):
    dtypes = FILLED + FLOATS + UNTOUCHED
    ours, ref = model_of(dtypes, device), model_of(dtypes, device)
    ft.initialize_dummy_weights(ours, *args)
    oracle.initialize_dummy_weights(ref, *args)
    assert same_bytes(ours, ref) == (len(dtypes) + 1) * len(LAYOUTS) + 1  # + tied, head
    for i, dtype in enumerate(dtypes):  # the oracle did write what it should
        written = bool((storage_bytes(ref.get_parameter(f"layer{i}.contiguous")) != 0x55).any())
        assert written == (dtype not in UNTOUCHED), dtype


def test_the_whole_model_fill_with_its_semantics():
    dtypes = FILLED + FLOATS + UNTOUCHED
    ours, ref = model_of(dtypes), model_of(dtypes)
    fp8_dummy.initialize_dummy_weights(ours, -0.5, 0.25, semantics="trtllm-1.2")
    oracle.initialize_dummy_weights(ref, -0.5, 0.25)
    same_bytes(ours, ref)


def test_bounds_by_dtype_ignore_low_high():
    m = model_of(FILLED, layouts=("contiguous",))
    ft.initialize_dummy_weights(m, -100.0, 100.0, 0)
    e4m3, i8, u8 = (m.get_parameter(f"layer{i}.contiguous") for i in range(3))
    assert float(e4m3.float().abs().max()) <= 3.0
    # truncation of [-3, 3) (-3 itself only from the bound or the reverse-bound clamp)
    assert -3 <= int(i8.min()) <= -2 and int(i8.max()) == 2
    assert int(u8.min()) == 0 and int(u8.max()) == 63


def test_row_major_not_memory_order():
    """A transposed parameter gets the contiguous one's values at the same logical positions:
    the temp is row-major (memory order, empty_like's, would give other bytes)."""
    a = model_of([torch.int8], layouts=("contiguous", "transposed"))
    ft.initialize_dummy_weights(a)
    assert torch.equal(a.layer0.contiguous, a.layer0.transposed)  # both (37, 53)
    memory_order = torch.empty(53, 37, dtype=torch.int8).t()
    fp8_dummy.init_(memory_order, -3.0, 3.0, 0)
    assert not torch.equal(memory_order, a.layer0.contiguous)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("refused", REFUSED, ids=str)
def test_refused_dtype_before_writing_anything(device, refused):
    dtypes = [torch.float8_e4m3fn, torch.bfloat16, refused, torch.int8]
    ours, ref = model_of(dtypes, device), model_of(dtypes, device)
    message = f"Unknown quantized type: {refused}."
    with pytest.raises(NotImplementedError) as theirs:
        oracle.initialize_dummy_weights(ref)
    with pytest.raises(NotImplementedError) as mine:
        ft.initialize_dummy_weights(ours)
    assert str(theirs.value) == message and str(mine.value).endswith(": " + message)
    for i in range(4):  # TensorRT-LLM filled those before the refusal; we wrote nothing
        filled = bool((storage_bytes(ref.get_parameter(f"layer{i}.contiguous")) != 0x55).any())
        assert filled == (i < 2), (i, dtypes[i])
    assert untouched(ours)


def untouched(m: nn.Module) -> bool:
    return all(
        bool((storage_bytes(t) == 0x55).all()) for t in m.state_dict().values() if not t.is_meta
    )


def with_last(bad: torch.Tensor) -> nn.Module:
    """An int8 vector, then (after it in state_dict order) the tensor `bad`."""
    m = model_of([torch.int8], layouts=("vector",))
    m.add_module("zz", nn.Module())
    m.zz.register_buffer("bad", bad)
    return m


def test_meta_tensor_refused_alike():
    ours = with_last(torch.empty(4, 4, dtype=torch.int32, device="meta"))
    ref = with_last(torch.empty(4, 4, dtype=torch.int32, device="meta"))
    with pytest.raises(RuntimeError):
        oracle.initialize_dummy_weights(ref)
    with pytest.raises(RuntimeError, match="meta"):
        ft.initialize_dummy_weights(ours)
    assert untouched(ours) and not untouched(ref)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.uint8, torch.bfloat16], ids=str)
def test_overlapping_tensor_refused_alike(dtype):
    bases = [poison(torch.empty(3, 1, dtype=dtype)) for _ in range(2)]
    ours, ref = (with_last(b.expand(3, 4)) for b in bases)
    with pytest.raises(RuntimeError):
        oracle.initialize_dummy_weights(ref)
    with pytest.raises(RuntimeError, match="single memory location"):
        ft.initialize_dummy_weights(ours)
    assert untouched(ours) and not untouched(ref)
    for b in bases:
        assert bool((storage_bytes(b) == 0x55).all())


def test_bad_bounds_refused_at_the_first_float():
    ours, ref = model_of([torch.int8, torch.float32]), model_of([torch.int8, torch.float32])
    with pytest.raises(RuntimeError):
        oracle.initialize_dummy_weights(ref, 1.0, -1.0)
    with pytest.raises(RuntimeError, match="from=1 > to=-1"):
        ft.initialize_dummy_weights(ours, 1.0, -1.0)
    assert untouched(ours) and not untouched(ref)


def test_proven_against_the_loaders_own_function():
    loader(oracle.initialize_dummy_weights)
    dtypes = FILLED + FLOATS + UNTOUCHED
    ours, ref = model_of(dtypes), model_of(dtypes)
    ft.initialize_dummy_weights(ours)
    oracle.initialize_dummy_weights(ref)
    same_bytes(ours, ref)
    keys = [e for e in fp8_dummy.self_check_report() if e.path == "trtllm"]
    assert keys and all(e.proven for e in keys), keys
    assert any("layout=strided" in e.key for e in keys)
    assert any("torch.int8" in e.key and "layout=contiguous" in e.key for e in keys)


def test_refused_dtype_is_proven_as_a_refusal():
    loader(oracle.initialize_dummy_weights)
    ours, ref = model_of([torch.int8, torch.float8_e5m2]), model_of([torch.int8, torch.float8_e5m2])
    with pytest.raises(NotImplementedError):
        ft.initialize_dummy_weights(ours)
    with pytest.raises(NotImplementedError):
        oracle.initialize_dummy_weights(ref)
    assert untouched(ours) and not untouched(ref)
    keys = [e for e in fp8_dummy.self_check_report() if e.path == "trtllm"]
    assert any("float8_e5m2" in e.key and e.proven for e in keys), keys


@pytest.mark.refusals  # exempt from FP8_DUMMY_STRICT=1
def test_a_loader_that_differs_fills_the_model_itself():
    """A later TensorRT-LLM with other bounds: the probe refuses, its own function runs."""

    def later(model, low=-1e-3, high=1e-3, seed=0):
        for t in model.state_dict().values():
            g = torch.Generator().manual_seed(seed)
            if t.dtype == torch.int8:
                temp = torch.empty(t.shape, dtype=torch.float16).uniform_(-5, 5, generator=g)
                t.copy_(temp.to(t.dtype))
            elif t.is_floating_point() and t.element_size() >= 2:
                t.uniform_(low, high, generator=g)

    loader(later)
    ours, ref = model_of([torch.int8, torch.float32]), model_of([torch.int8, torch.float32])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ft.initialize_dummy_weights(ours)
    later(ref)
    same_bytes(ours, ref)
    assert any("refused trtllm" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_patch_replaces_and_keeps_the_original():
    module = loader(oracle.initialize_dummy_weights)
    ft.patch(module)
    ft.patch(module)  # idempotent
    assert module.initialize_dummy_weights is ft._patched
    assert ft.originals["function"] is oracle.initialize_dummy_weights
    ours, ref = model_of(FILLED + FLOATS), model_of(FILLED + FLOATS)
    module.initialize_dummy_weights(ours)  # as ModelLoader.load calls it
    oracle.initialize_dummy_weights(ref)
    same_bytes(ours, ref)
    with pytest.raises(NotImplementedError, match="Unknown quantized type"):
        module.initialize_dummy_weights(model_of([torch.float8_e5m2]))


def test_patched_falls_back_on_an_unknown_argument():
    module = loader(oracle.initialize_dummy_weights)
    ft.patch(module)
    with pytest.raises(TypeError):  # the loader's own function decides, and refuses
        module.initialize_dummy_weights(model_of([torch.int8]), scale=2)


def test_fault_in_our_fill_is_refused_by_the_proof(tmp_path):
    """FP8_DUMMY_FAULT=trtllm corrupts one byte of each fused fill: the probe against the
    loader's function refuses it and that function fills the model (a fresh process: the
    switch is read once)."""
    import subprocess
    import textwrap
    from pathlib import Path

    script = textwrap.dedent(
        f"""
        import sys, warnings, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_engines_trtllm as t
        from oracles import trtllm as oracle
        import fp8_dummy
        from fp8_dummy import trtllm as ft
        t.loader(oracle.initialize_dummy_weights)
        ours, ref = t.model_of([torch.int8]), t.model_of([torch.int8])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ft.initialize_dummy_weights(ours)
        oracle.initialize_dummy_weights(ref)
        t.same_bytes(ours, ref)
        assert any("refused trtllm" in str(x.message) for x in w)
        assert not all(e.proven for e in fp8_dummy.self_check_report() if e.path == "trtllm")
        print("ok")
        """
    )
    env = {**__import__("os").environ, "FP8_DUMMY_FAULT": "trtllm"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
