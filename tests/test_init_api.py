"""Bad input, opcheck, torch.compile, meta tensors and whole-model initialization."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, as_bytes, poison, storage_bytes, torch_version
from helpers.build_util import extension_test_ops
from torch.utils._python_dispatch import TorchDispatchMode

import fp8_dummy
from fp8_dummy import reference

BAD_BOUNDS = [
    (1.0, 0.0, r"\[from, to\) range"),
    (-70000.0, 0.0, "from is out of bounds"),
    (0.0, 70000.0, "to is out of bounds"),
    (float("nan"), 1.0, "from is out of bounds"),
    (0.0, float("inf"), "to is out of bounds"),
    (-40000.0, 40000.0, "to-from"),
]


@pytest.mark.parametrize("low,high,match", BAD_BOUNDS)
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float16], ids=str)
def test_bad_bounds(low, high, match, dtype):
    t = poison(torch.empty(100, dtype=dtype))
    g = torch.Generator().manual_seed(1)
    state = g.get_state()
    with pytest.raises(RuntimeError, match=match):
        fp8_dummy.init_(t, low, high, generator=g)
    with pytest.raises(RuntimeError, match=match):
        fp8_dummy.init_(t, low, high, 5)
    # the reference refuses the same bounds
    with pytest.raises(RuntimeError):
        reference.new_path(torch.empty(100, dtype=dtype), low, high, 5)
    assert bool((storage_bytes(t) == 0x55).all())
    assert torch.equal(state, g.get_state())


def test_bad_bounds_zero_elements_still_checked():
    with pytest.raises(RuntimeError, match="range"):
        fp8_dummy.init_(torch.empty(0, dtype=torch.float8_e4m3fn), 1.0, 0.0)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.bool, torch.complex64], ids=str)
def test_bad_dtype(dtype):
    t = torch.zeros(10, dtype=dtype)
    with pytest.raises(RuntimeError, match="unsupported dtype.*supported dtypes: float8_e4m3fn"):
        fp8_dummy.init_(t)
    assert not t.any()


def test_overlapping_tensor_refused_untouched():
    base = poison(torch.empty(3, 1, dtype=torch.float8_e4m3fn))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        fp8_dummy.init_(base.expand(3, 4))
    assert bool((storage_bytes(base) == 0x55).all())
    with pytest.raises(RuntimeError, match="more than one element"):
        reference.new_path(base.expand(3, 4))


def test_sparse_refused():
    with pytest.raises(RuntimeError, match="only strided tensors"):
        fp8_dummy.init_(torch.zeros(4, 4).to_sparse())


def _writers(t):
    """Every public wrapper, writing t (as the first tensor, or the second of a list)."""
    ok = poison(torch.empty(4, dtype=torch.float8_e4m3fn))
    return {
        "init_": lambda: fp8_dummy.init_(t, -1.0, 1.0),
        "init_ generator": lambda: fp8_dummy.init_(t, -1.0, 1.0, generator=torch.Generator()),
        "init_many_": lambda: fp8_dummy.init_many_([ok, ok, t], -1.0, 1.0),
        "init_stateless_": lambda: fp8_dummy.init_stateless_(t, -1.0, 1.0),
        "random_": lambda: fp8_dummy.random_(t, 0, 2),
    }, ok


@pytest.mark.parametrize("value", [[1, 2], 3.0, None, "t", torch.Generator()], ids=repr)
def test_a_non_tensor_is_a_type_error_naming_the_argument(value):
    writers, ok = _writers(value)
    for name, write in writers.items():
        op = name.split()[0]
        arg = "tensors\\[2\\]" if op == "init_many_" else "t"
        kind = type(value).__name__
        with pytest.raises(
            TypeError, match=rf"^fp8_dummy\.{op}: {arg} must be a Tensor, got {kind}$"
        ):
            write()
    assert bool((storage_bytes(ok) == 0x55).all())


def _kinds():
    yield "quantized", torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.qint8)
    yield "nested", torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    yield (
        "jagged",
        torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged),
    )
    yield "sparse_coo", torch.zeros(4, 4).to_sparse()
    yield "sparse_csr", torch.zeros(4, 4).to_sparse_csr()


@pytest.mark.filterwarnings("ignore::UserWarning")  # nested and sparse tensors are prototypes
def test_quantized_nested_and_sparse_tensors_are_named():
    for kind, t in _kinds():
        writers, ok = _writers(t)
        what = {"quantized": r"quantized \(torch.qint8\)", "jagged": "nested"}.get(kind, kind)
        for name, write in writers.items():
            where = rf"^fp8_dummy\.{name.split()[0]}: (t|tensors\[2\])"
            with pytest.raises(RuntimeError, match=rf"{where} is a (torch\.)?{what} tensor; only"):
                write()
        assert bool((storage_bytes(ok) == 0x55).all()), kind


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("low,high", [(0, 2**70), (-(2**70), 1), (0, 2**63), (0, 300), (-300, 0)])
def test_random_bounds_out_of_range_name_the_bound_and_the_range(dtype, low, high):
    t = poison(torch.empty(8, dtype=dtype))
    with pytest.raises(RuntimeError, match="out of bounds.*takes low in .* and high in "):
        fp8_dummy.random_(t, low, high)
    assert bool((storage_bytes(t) == 0x55).all())


@pytest.mark.parametrize("low,high,match", BAD_BOUNDS[:1] + BAD_BOUNDS[3:5])
def test_init_many_of_no_tensor_checks_the_bounds(low, high, match):
    """As a list of any dtype would: the checks every dtype applies (float64's)."""
    with pytest.raises(RuntimeError, match=f"^fp8_dummy.init_many_: .*{match}"):
        fp8_dummy.init_many_([], low, high)
    with pytest.raises(RuntimeError, match=match):
        fp8_dummy.init_many_([torch.empty(3, dtype=torch.float64)], low, high)
    assert fp8_dummy.init_many_([], -1.0, 1.0) == []


def test_meta_tensor_checks_only():
    t = torch.empty(4, 4, dtype=torch.float8_e4m3fn, device="meta")
    fp8_dummy.init_(t)
    with pytest.raises(RuntimeError, match="range"):
        fp8_dummy.init_(t, 1.0, 0.0)
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        fp8_dummy.init_(torch.empty(3, dtype=torch.int32, device="meta"))


NON_AOT_OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_opcheck_full(dtype):
    t = torch.empty(33, 17, dtype=dtype)
    torch.library.opcheck(torch.ops.fp8_dummy.init_.default, (t, -1.0, 1.0, 7))
    g = torch.Generator().manual_seed(0)
    kwargs = {"generator": g}
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_.generator, (t, -1.0, 1.0), kwargs, test_utils=NON_AOT_OPCHECKS
    )
    torch.library.opcheck(torch.ops.fp8_dummy.init_.generator, (t, -1.0, 1.0), {"generator": None})


@pytest.mark.skipif(
    torch_version() < (2, 13),
    reason="torch < 2.13 cannot trace a Generator argument in AOT dispatch (torch/fx/proxy.py: "
    "NotImplementedError 'argument of type: <class torch._C.Generator>'), for any op",
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_opcheck_generator_aot(dtype):
    t = torch.empty(33, 17, dtype=dtype)
    g = torch.Generator().manual_seed(0)
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_.generator,
        (t, -1.0, 1.0),
        {"generator": g},
        test_utils=("test_aot_dispatch_static", "test_aot_dispatch_dynamic"),
    )


@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=str)
def test_opcheck_fp8(dtype):
    # test_schema compares outputs with allclose, which has no FP8 kernel.
    tests = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    t = torch.empty(33, 17, dtype=dtype)
    torch.library.opcheck(torch.ops.fp8_dummy.init_.default, (t, -1.0, 1.0, 7), test_utils=tests)


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16], ids=str)
def test_compile_fullgraph(dtype):
    def f(x, y):
        fp8_dummy.init_(x, -1.0, 1.0, 99)
        torch.ops.fp8_dummy.init_(y[:, ::2], -500.0, 500.0, 3)
        return x

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    x1, y1 = poison(torch.empty(64, 33, dtype=dtype)), poison(torch.empty(5, 40, dtype=dtype))
    x2, y2 = poison(torch.empty(64, 33, dtype=dtype)), poison(torch.empty(5, 40, dtype=dtype))
    out = compiled(x1, y1)
    f(x2, y2)
    assert out.data_ptr() == x1.data_ptr()
    assert torch.equal(as_bytes(x1), as_bytes(x2))
    assert torch.equal(storage_bytes(y1), storage_bytes(y2))


@pytest.mark.slow  # torch.compile
def test_compile_generator_form_is_not_traced_like_torchs_uniform():
    """docs/api.md: a Generator argument cannot be traced, for ours as for torch's own
    uniform_(generator=g): fullgraph=True raises torch._dynamo.exc.Unsupported; without it
    the call is a graph break and runs eagerly, with its bytes and generator use."""

    def ours(t, g):
        fp8_dummy.init_(t, -1.0, 1.0, generator=g)
        return t

    def op(t, g):
        torch.ops.fp8_dummy.init_.generator(t, -1.0, 1.0, generator=g)
        return t

    def torchs(t, g):
        return t.uniform_(-1.0, 1.0, generator=g)

    for f in (ours, op, torchs):
        torch._dynamo.reset()
        t, g = torch.empty(8, 8, dtype=torch.float16), torch.Generator().manual_seed(1)
        with pytest.raises(torch._dynamo.exc.Unsupported):
            torch.compile(f, fullgraph=True)(t, g)
        torch._dynamo.reset()
        a, b = (
            poison(torch.empty(64, 33, dtype=torch.float16)),
            torch.empty(64, 33, dtype=torch.float16),
        )
        ga, gb = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
        torch.compile(f)(a, ga)
        f(b, gb)
        assert torch.equal(as_bytes(a), as_bytes(b)), f.__name__
        assert torch.equal(ga.get_state(), gb.get_state()), f.__name__
    torch._dynamo.reset()
    t = poison(torch.empty(8, 8, dtype=torch.float8_e4m3fn))  # generator=None: traced
    torch.compile(lambda t: op(t, None), fullgraph=True)(t)
    assert not bool((storage_bytes(t) == 0x55).any())


@pytest.mark.slow  # torch.compile
def test_compile_refuses_an_overlapping_view_at_trace_time():
    t = torch.zeros(200 * 150 + 150, dtype=torch.float8_e4m3fn).as_strided((200, 300), (150, 1))
    for dynamic in (False, True):
        torch._dynamo.reset()
        with pytest.raises(Exception, match="may share memory"):
            torch.compile(
                lambda t: fp8_dummy.init_(t, -1.0, 1.0, 3), fullgraph=True, dynamic=dynamic
            )(t)
        assert not t.view(torch.uint8).any()


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16, dtype=torch.bfloat16)
        self.proj = torch.nn.Linear(16, 32, bias=False).to(torch.float8_e4m3fn)
        self.proj2 = torch.nn.Linear(32, 16, bias=False).to(torch.float8_e5m2)
        self.register_buffer("scale", torch.tensor(1.0))
        self.register_buffer("steps", torch.tensor([1, 2, 3]))
        self.norm = torch.nn.LayerNorm(16, dtype=torch.float16)
        self.head = torch.nn.Linear(16, 50, bias=False, dtype=torch.bfloat16)
        self.head.weight = self.embed.weight  # tied


def test_initialize_dummy_weights_matches_vllm_loop():
    a, b = TinyModel(), TinyModel()
    for t in list(a.state_dict().values()) + list(b.state_dict().values()):
        if t.is_floating_point():
            poison(t)
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=11)
    for p in b.state_dict().values():  # vLLM's loop
        if torch.is_floating_point(p):
            reference.new_path(p, -1.0, 1.0, seed=11)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(as_bytes(x), as_bytes(y)), name
    assert torch.equal(a.steps, torch.tensor([1, 2, 3]))  # integers untouched


def test_supported_dtypes_cover_every_float():
    floats = [d for d in vars(torch).values() if isinstance(d, torch.dtype) and d.is_floating_point]
    assert set(floats) <= set(FP8_DTYPES + WIDE_DTYPES) | {getattr(torch, "float4_e2m1fn_x2", None)}


class MetaOps(TorchDispatchMode):
    """Records every op that touches a meta tensor."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        if any(isinstance(x, torch.Tensor) and x.is_meta for x in leaves):
            self.seen.append(str(func))
        return func(*args, **kwargs)


def test_initialize_skips_meta_tensors():
    # Meta tensors hold no data (vLLM defers them): no op touches them, and every other
    # tensor gets the loop's bytes, as if the meta ones were not there.
    a, b = TinyModel(), TinyModel()
    for m in (a, b):
        m.proj2.to("meta")
        for t in m.state_dict().values():
            if t.is_floating_point() and not t.is_meta:
                poison(t)
    with MetaOps() as ops:
        fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=11)
    assert ops.seen == []
    for p in b.state_dict().values():  # vLLM's loop, which skips meta tensors
        if torch.is_floating_point(p) and not p.is_meta:
            reference.new_path(p, -1.0, 1.0, seed=11)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert x.is_meta == y.is_meta == name.startswith("proj2."), name
        if not x.is_meta:
            assert torch.equal(as_bytes(x), as_bytes(y)), name
    everything = TinyModel().to("meta")
    with MetaOps() as ops:
        fp8_dummy.initialize_dummy_weights(everything)
    assert ops.seen == []


@pytest.mark.parametrize(
    "name,shape,expected",
    [
        ("layers.0.proj.weight_scale", (32, 1), True),
        ("layers.0.proj.weight_scale_inv", (8, 8), True),
        ("layers.0.attn.k_scale", (1,), True),
        ("layers.0.mlp.weight_scale_2", (4,), True),
        ("layers.0.proj.input_scale", (), True),
        ("layers.0.temperature", (), True),  # 0-dim
        ("layers.0.proj.weight", (32, 16), False),
        ("layers.0.scale_proj.weight", (32, 16), False),  # only the last component counts
        ("layers.0.norm.bias", (16,), False),
    ],
)
def test_is_scale_tensor_rule(name, shape, expected):
    assert fp8_dummy.is_scale_tensor(name, torch.empty(shape)) is expected


class ScaledModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = TinyModel().proj
        self.proj.weight_scale = torch.nn.Parameter(torch.empty(32, 1))
        self.proj.input_scale = torch.nn.Parameter(torch.empty(()))
        self.norm = torch.nn.LayerNorm(16)


def test_scales_neutral_sets_scales_to_one_and_leaves_the_rest_as_reference():
    a, b = ScaledModel(), ScaledModel()
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=3, scales="neutral")
    fp8_dummy.initialize_dummy_weights(b, -1.0, 1.0, seed=3)
    assert bool((a.proj.weight_scale == 1.0).all()) and float(a.proj.input_scale) == 1.0
    assert not bool((b.proj.weight_scale == 1.0).any())
    assert torch.equal(as_bytes(a.proj.weight), as_bytes(b.proj.weight))
    assert torch.equal(a.norm.weight, b.norm.weight)
    # a custom rule: only names ending in "weight_scale"
    c = ScaledModel()
    fp8_dummy.initialize_dummy_weights(
        c, -1.0, 1.0, seed=3, scales="neutral", is_scale=lambda n, t: n.endswith("weight_scale")
    )
    assert bool((c.proj.weight_scale == 1.0).all())
    assert torch.equal(c.proj.input_scale, b.proj.input_scale)
    with pytest.raises(ValueError, match="scales must be"):
        fp8_dummy.initialize_dummy_weights(c, scales="ones")


def test_progress_plain_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # force the plain-line display
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    fp8_dummy.initialize_dummy_weights(TinyModel(), progress=True)
    err = capsys.readouterr().err
    assert "[fp8_dummy] 6/6 tensors" in err and "GB/s" in err  # 7 names, one tied
    fp8_dummy.initialize_dummy_weights(TinyModel())  # small model: silent by default
    assert capsys.readouterr().err == ""


def test_vllm_drop_in_signatures_and_bytes():
    from fp8_dummy import vllm as fv

    a, b = TinyModel(), TinyModel()
    fv.initialize_dummy_weights(a, None, -1.0, 1.0, 77)
    for p in b.state_dict().values():
        fv.initialize_single_dummy_weight(p, -1.0, 1.0, 77)
    c = TinyModel()
    for p in c.state_dict().values():  # vLLM's old path, as in its initialize_single_dummy_weight
        if torch.is_floating_point(p):
            reference.old_path(p, -1.0, 1.0, 77)
    for x, y, z in zip(a.state_dict().values(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(as_bytes(x), as_bytes(z)) and torch.equal(as_bytes(y), as_bytes(z))


def test_initialize_stateless_mode():
    a, b = TinyModel(), TinyModel()
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=5, mode="stateless")
    for t in b.state_dict().values():
        if t.is_floating_point():
            fp8_dummy.init_stateless_(t, -1.0, 1.0, seed=5)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(as_bytes(x), as_bytes(y)), name
    with pytest.raises(ValueError, match="mode must be"):
        fp8_dummy.initialize_dummy_weights(a, mode="fast")


PUBLIC_OPS = {"init_", "init_many_", "init_stateless_", "random_"}


def test_public_namespace_holds_only_public_operators():
    # What users see in torch.ops.fp8_dummy: the operators they call, nothing internal.
    registered = {n for n in torch._C._dispatch_get_all_op_names() if n.startswith("fp8_dummy::")}
    assert {n.split("::")[1].split(".")[0] for n in registered} == PUBLIC_OPS
    for name in PUBLIC_OPS:
        getattr(torch.ops.fp8_dummy, name)
    assert {n for n in dir(torch.ops.fp8_dummy) if not n.startswith("_")} >= PUBLIC_OPS
    assert {n for n in dir(torch.ops.fp8_dummy) if not n.startswith("_")} - {"name"} == PUBLIC_OPS
    # The internal ones are reachable under their own namespace; the test-only ones are not
    # in the library (the test extension, tests/ext/, has them).
    internal = {
        n.split("::")[1]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("fp8_dummy_internal::")
    }
    assert {"check_init_args", "cpu_fast_path_info", "build_info"} <= internal
    assert {"check_random_args", "cpu_random_info", "check_stateless_args"} <= internal
    test_only = extension_test_ops()
    assert {"emulate_cuda_init_", "cpu_mt19937_jump", "philox_roofline"} <= test_only
    assert not internal & test_only, internal & test_only
    assert isinstance(fp8_dummy.cpu_fast_path_info(), str)
