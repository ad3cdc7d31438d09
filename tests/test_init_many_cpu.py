"""init_many_ (the batched op) on the CPU: every tensor gets the bytes of its own
init_ / the reference path, argument checks before anything is written, overlaps in list
order, opcheck and torch.compile; initialize_dummy_weights on a model of every dtype."""

from __future__ import annotations

import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, as_bytes, poison, storage_bytes
from helpers.models import EveryDtype, loop_reference

import fp8_dummy
from fp8_dummy import reference


def mixed(dtypes=FP8_DTYPES + WIDE_DTYPES):
    out = []
    for i, dt in enumerate(dtypes):
        out += [
            torch.empty(257 + i, dtype=dt),
            torch.empty(31, 17, dtype=dt).t(),
            torch.empty(9, 2 * 13, dtype=dt)[:, ::2],
            torch.empty((), dtype=dt),
            torch.empty(0, 3, dtype=dt),
        ]
    return out


def test_same_bytes_as_the_reference_loop():
    ours, ref = mixed(), mixed()
    for t in ours + ref:
        poison(t)
    fp8_dummy.init_many_(ours, -1.0, 1.0, 42)
    for t in ref:
        reference.new_path(t, -1.0, 1.0, 42)
    for a, b in zip(ours, ref):
        assert torch.equal(storage_bytes(a), storage_bytes(b)), (a.dtype, a.shape)


def test_overlapping_tensors_in_list_order():
    a, b = torch.empty(1000, dtype=torch.float8_e5m2), torch.empty(1000, dtype=torch.float8_e5m2)
    fp8_dummy.init_many_([a[:600], a[400:], a[:600].view(torch.uint8).view(a.dtype)], seed=9)
    for v in (b[:600], b[400:], b[:600]):
        reference.new_path(v, -1e-3, 1e-3, 9)
    assert torch.equal(as_bytes(a), as_bytes(b))


def test_checks_every_tensor_before_writing():
    # Messages name init_many_ and the tensor's place in the list, not init_.
    good = poison(torch.empty(100, dtype=torch.float8_e4m3fn))
    for bad, match in [
        (torch.empty(4, dtype=torch.int32), "unsupported dtype Int"),
        (torch.empty(1, 4, dtype=torch.float8_e4m3fn).expand(3, 4), "unsupported operation: more"),
    ]:
        with pytest.raises(RuntimeError, match=rf"^fp8_dummy\.init_many_: tensors\[1\]: {match}"):
            fp8_dummy.init_many_([good, bad])
        assert bool((storage_bytes(good) == 0x55).all())
    with pytest.raises(RuntimeError, match=r"^fp8_dummy\.init_many_: tensors\[0\]: uniform_ "):
        fp8_dummy.init_many_([good], 1.0, 0.0)
    with pytest.raises(RuntimeError, match=r"^fp8_dummy\.init_many_: tensors\[2\]: to is out"):
        fp8_dummy.init_many_([torch.empty(3), torch.empty(2), good], -1.0, 70000.0)
    assert bool((storage_bytes(good) == 0x55).all())
    assert fp8_dummy.init_many_([]) == []


def test_opcheck():
    tensors = [torch.empty(33, 17), torch.empty(5, dtype=torch.float16)]
    torch.library.opcheck(torch.ops.fp8_dummy.init_many_.default, (tensors, -1.0, 1.0, 7))
    fp8 = [torch.empty(33, 17, dtype=d) for d in FP8_DTYPES]
    tests = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(
        torch.ops.fp8_dummy.init_many_.default, (fp8, -1.0, 1.0, 7), test_utils=tests
    )


@pytest.mark.slow  # torch.compile
def test_compile_fullgraph():
    def f(xs):
        fp8_dummy.init_many_(xs, -1.0, 1.0, 5)
        return xs[0]

    xs = [poison(torch.empty(64, 33, dtype=d)) for d in (torch.float8_e4m3fn, torch.bfloat16)]
    ys = [poison(torch.empty_like(x)) for x in xs]
    torch.compile(f, fullgraph=True, dynamic=False)(xs)
    f(ys)
    for x, y in zip(xs, ys):
        assert torch.equal(as_bytes(x), as_bytes(y))


def test_meta_tensors_checks_only():
    fp8_dummy.init_many_([torch.empty(4, dtype=torch.float8_e4m3fn, device="meta")])
    # The Meta kernel's checks (fp8_dummy/ops.py) name the op and the tensor too.
    meta = [torch.empty(2, device="meta"), torch.empty(4, dtype=torch.float8_e5m2, device="meta")]
    with pytest.raises(RuntimeError, match=r"^fp8_dummy\.init_many_: tensors\[1\]: to is out"):
        fp8_dummy.init_many_(meta, -1.0, 70000.0)


def test_list_mixing_meta_and_cpu():
    # The wrapper fills the real tensors and checks the meta ones; the op itself (whose Meta
    # kernel is the fake, which writes nothing) refuses such a list before writing.
    real = poison(torch.empty(300, dtype=torch.float8_e4m3fn))
    ref = torch.empty(300, dtype=torch.float8_e4m3fn)
    meta = torch.empty(5, dtype=torch.float8_e5m2, device="meta")
    fp8_dummy.init_many_([meta, real], -1.0, 1.0, seed=3)
    reference.new_path(ref, -1.0, 1.0, seed=3)
    assert torch.equal(as_bytes(real), as_bytes(ref))
    with pytest.raises(RuntimeError, match=r"init_many_: tensors\[1\]: to is out"):
        fp8_dummy.init_many_([torch.empty(3), meta], -1.0, 70000.0)  # the meta one's check
    poison(real)
    with pytest.raises(RuntimeError, match=r"tensors\[1\] is on cpu in a list with meta"):
        torch.ops.fp8_dummy.init_many_([meta, real])
    assert (as_bytes(real) == 0x55).all()


def test_every_fake_kernel_is_in_ops_py():
    # One place for the fakes (fp8_dummy/ops.py, the module ops.cpp names), none in C++.
    from torch._library.simple_registry import singleton

    for op in ("init_", "init_many_", "init_stateless_", "random_"):
        kernel = singleton.find(f"fp8_dummy::{op}").fake_impl.kernel
        assert kernel is not None and kernel.source.split(":")[0].endswith("fp8_dummy/ops.py"), op


@pytest.mark.parametrize("scales", ["random", "neutral"])
def test_model_of_every_dtype(scales, device="cpu"):
    a, b = EveryDtype(device), EveryDtype(device)
    for t in list(a.state_dict().values()) + list(b.state_dict().values()):
        if t.is_floating_point():
            poison(t)
    fp8_dummy.initialize_dummy_weights(a, -1.0, 1.0, seed=13, scales=scales)
    loop_reference(b, -1.0, 1.0, 13, scales)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(as_bytes(x), as_bytes(y)), name
