"""Our operators behave as torch's in-place operators around the numbers: the
version counter, autograd (leaves, non-leaves, views, saved tensors), inference tensors,
mixed-device lists, the whole unsigned 64-bit seed range, one generator shared by threads,
fork after a small call, argument types. Each expectation is checked against what torch's
own reference path does in the same situation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, as_bytes, poison, storage_bytes
from oracles import stateless as so

import fp8_dummy
from fp8_dummy import reference

CALLS = {
    "init_": lambda t: torch.ops.fp8_dummy.init_.default(t, -1.0, 1.0, 3),
    "init_.generator": lambda t: torch.ops.fp8_dummy.init_.generator(
        t, -1.0, 1.0, generator=torch.Generator(device=t.device).manual_seed(3)
    ),
    "init_many_": lambda t: torch.ops.fp8_dummy.init_many_.default([t], -1.0, 1.0, 3),
    "init_stateless_": lambda t: torch.ops.fp8_dummy.init_stateless_.default(t, -1.0, 1.0, 3),
}
REFERENCE = lambda t: reference.new_path(t, -1.0, 1.0, 3)  # noqa: E731


def error_of(fn, *args) -> str | None:
    try:
        fn(*args)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


# ---------------------------------------------------------------- 1. version counter


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("dtype", FP8_DTYPES + WIDE_DTYPES, ids=str)
def test_version_counter_bumped_once_as_the_reference(call, dtype):
    ours, ref = torch.empty(40, dtype=dtype), torch.empty(40, dtype=dtype)
    CALLS[call](ours)
    REFERENCE(ref)
    assert ours._version == ref._version == 1


def test_saved_tensor_modified_is_detected_by_backward():
    for call in CALLS.values():
        x = torch.ones(6, requires_grad=True)
        u = torch.ones(6)
        y = x * u  # saves u
        call(u)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# ---------------------------------------------------------------- 2-3. autograd


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float32], ids=str)
def test_leaf_that_requires_grad_is_refused_like_the_reference(call, dtype):
    if not dtype.is_floating_point or dtype.itemsize == 1:
        p = torch.nn.Parameter(poison(torch.empty(8, dtype=dtype)), requires_grad=False)
        p.requires_grad_(True)  # FP8 parameters can require grad too
    else:
        p = torch.nn.Parameter(poison(torch.empty(8, dtype=dtype)))
    ref = torch.nn.Parameter(torch.empty(8, dtype=dtype), requires_grad=True)
    expected = error_of(REFERENCE, ref)
    assert expected and "leaf Variable that requires grad" in expected
    before = storage_bytes(p).clone()
    assert error_of(CALLS[call], p) == expected
    assert torch.equal(storage_bytes(p), before)  # refused before anything was written
    with torch.no_grad():  # as vLLM calls it: allowed, as for the reference
        CALLS[call](p)


def test_view_of_a_leaf_is_refused_like_the_reference():
    leaf = torch.zeros(10, requires_grad=True)
    expected = error_of(lambda v: v.uniform_(-1.0, 1.0), leaf[2:])
    for call in CALLS.values():
        assert error_of(call, leaf[2:]) == expected


@pytest.mark.parametrize("call", sorted(CALLS))
def test_non_leaf_gets_the_reference_gradient(call):
    a = torch.ones(5, requires_grad=True)
    b = a * 2
    CALLS[call](b)
    (b * 3).sum().backward()
    a_ref = torch.ones(5, requires_grad=True)
    b_ref = a_ref * 2
    b_ref.uniform_(-1.0, 1.0)
    (b_ref * 3).sum().backward()
    assert torch.equal(a.grad, a_ref.grad)  # zeros: the new values ignore the old ones
    assert b.requires_grad and b.grad_fn is not None


def test_non_leaf_view_rebases_its_base():
    a = torch.ones(6, requires_grad=True)
    base = a * 1
    torch.ops.fp8_dummy.init_stateless_.default(base[1:4], -1.0, 1.0, 3)
    base.sum().backward()
    assert a.grad.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]


# ---------------------------------------------------------------- 4. inference tensors


@pytest.mark.parametrize("call", sorted(CALLS))
def test_inference_tensor_outside_inference_mode_is_refused(call):
    with torch.inference_mode():
        t = poison(torch.empty(16, dtype=torch.float8_e5m2))
        ref = torch.empty(16, dtype=torch.float8_e5m2)
    expected = error_of(REFERENCE, ref)
    assert expected and "inference tensor outside InferenceMode" in expected
    assert error_of(CALLS[call], t) == expected
    assert (t.view(torch.uint8) == 0x55).all()  # nothing written
    with torch.inference_mode():
        CALLS[call](t)  # allowed there, as for torch's own ops


# ---------------------------------------------------------------- 5. mixed-device lists


def test_init_many_with_a_meta_tensor_fills_the_others():
    cpu = [poison(torch.empty(n, dtype=torch.float8_e4m3fn)) for n in (33, 700)]
    meta = torch.empty(50, dtype=torch.float8_e4m3fn, device="meta")
    tensors = [cpu[0], meta, cpu[1]]
    fp8_dummy.init_many_(tensors, -1.0, 1.0, 9)
    for t in cpu:
        expected = reference.new_path(torch.empty_like(t), -1.0, 1.0, 9)
        assert torch.equal(as_bytes(t), as_bytes(expected))
    with pytest.raises(RuntimeError, match="range"):  # meta tensors are still checked
        fp8_dummy.init_many_([cpu[0], meta], 1.0, 0.0, 9)
    # The operator itself: its Meta kernel (the fake) writes nothing, so it refuses the
    # list, before writing, rather than leave the real tensors unfilled.
    for t in cpu:
        poison(t)
    with pytest.raises(RuntimeError, match=r"tensors\[0\] is on cpu in a list with meta"):
        torch.ops.fp8_dummy.init_many_.default(tensors, -1.0, 1.0, 9)
    assert all((storage_bytes(t) == 0x55).all() for t in cpu)


# ---------------------------------------------------------------- 6. the unsigned seed range


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1, 2**63 + 12345, -1, -(2**63)])
def test_seed_form_takes_every_64_bit_seed(seed):
    for dtype in (torch.float8_e4m3fn, torch.bfloat16):
        ours, ref = torch.empty(999, dtype=dtype), torch.empty(999, dtype=dtype)
        fp8_dummy.init_(ours, -1.0, 1.0, seed)
        reference.new_path(ref, -1.0, 1.0, seed)  # manual_seed(seed)
        assert torch.equal(as_bytes(ours), as_bytes(ref))


@pytest.mark.parametrize("seed,key_offset", [(2**64 - 1, 0), (5, 2**63 + 7), (2**63, 2**64 - 3)])
def test_stateless_takes_every_64_bit_key(seed, key_offset):
    t = torch.empty(257, dtype=torch.float8_e4m3fn)
    fp8_dummy.init_stateless_(t, -1.0, 1.0, seed, key_offset=key_offset)
    want = so.expected_bytes(
        np.arange(257), torch.float8_e4m3fn, -1.0, 1.0, seed, key_offset, so.e4m3fn_saturates()
    )
    np.testing.assert_array_equal(t.view(torch.uint8).numpy(), want)


def test_bad_seeds_and_types_are_clear():
    t = torch.empty(4, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="64 bits"):
        fp8_dummy.init_(t, -1.0, 1.0, 2**64)
    with pytest.raises(TypeError, match="seed must be an int"):
        fp8_dummy.init_(t, -1.0, 1.0, 1.5)
    with pytest.raises(TypeError, match="'low' must be float"):
        fp8_dummy.init_(t, "a", 1.0)
    with pytest.raises(TypeError, match="generator"):
        fp8_dummy.init_(t, -1.0, 1.0, generator="cpu")
    with pytest.raises(TypeError, match="'high' must be float"):
        fp8_dummy.init_many_([t], -1.0, None)
    with pytest.raises(TypeError, match="key_offset must be an int"):
        fp8_dummy.init_stateless_(t, key_offset=2.0)


# ---------------------------------------------------------------- 7. one generator, threads


def _race(start: torch.Tensor, n: int, unwritten: int):
    """Two calls on one generator (state `start`), the second made once the first has
    written its first piece; whether the first was then not yet half done (seen from here,
    which also shows that a call runs without the GIL)."""
    shared = torch.Generator().set_state(start)
    a, b = (poison(torch.empty(n, dtype=torch.float8_e5m2), unwritten) for _ in range(2))
    go, midway = threading.Event(), []

    def second_call():
        go.wait()
        midway.append(int(a.view(torch.uint8)[n // 2]) == unwritten)
        fp8_dummy.init_(b, -1.0, 1.0, generator=shared)

    kw = {"generator": shared}
    threads = [threading.Thread(target=second_call)]
    threads.append(threading.Thread(target=fp8_dummy.init_, args=(a, -1.0, 1.0), kwargs=kw))
    for t in threads:
        t.start()
    while int(a.view(torch.uint8)[0]) == unwritten and threads[1].is_alive():
        pass
    go.set()
    for t in threads:
        t.join()
    return a, b, shared, midway == [True]


def test_exact_path_holds_the_generator_for_the_whole_call(monkeypatch):
    # Each call must get one unbroken stretch of the stream, the first call the first one
    # and the second the next, never pieces of one interleaved with the other's.
    monkeypatch.setenv("FP8_DUMMY_CPU_PATH", "exact")
    n = 16 * (1 << 18) + 5  # 17 of the exact path's 512 KiB pieces
    g = torch.Generator().manual_seed(31)
    start = g.get_state()
    first, second = (torch.empty(n, dtype=torch.float8_e5m2) for _ in range(2))
    reference.new_path(first, -1.0, 1.0, generator=g)
    reference.new_path(second, -1.0, 1.0, generator=g)
    overlapped = 0
    for _ in range(24):
        a, b, shared, midway = _race(start, n, unwritten=0x55)  # 0x55: 80.0, never drawn
        assert torch.equal(as_bytes(a), as_bytes(first))
        assert torch.equal(as_bytes(b), as_bytes(second))
        assert torch.equal(shared.get_state(), g.get_state())
        overlapped += midway
        if overlapped == 6:
            break
    # The calls did overlap: the second began before the first was half done, several times.
    assert overlapped >= 3, f"the second call began mid-way through the first {overlapped} times"


# ---------------------------------------------------------------- 8. fork


@pytest.mark.slow  # a fresh Python process
def test_fork_after_a_small_call_is_safe():
    # A small first call must not start torch's OpenMP pool: a child forked after it would
    # hang in its first parallel operation.
    code = textwrap.dedent("""
        import os, signal, torch, fp8_dummy
        t = torch.empty(8, dtype=torch.float8_e4m3fn)
        fp8_dummy.init_(t, -1.0, 1.0, 3)
        fp8_dummy.init_stateless_(t, -1.0, 1.0, 3)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)
            x = torch.randn(1500, 1500)
            assert float((x @ x).sum()) == float((x @ x).sum())
            torch.randn(10**7).sum()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="2"),
    )
    assert out.returncode == 0 and "child status 0" in out.stdout, out.stdout + out.stderr[-2000:]


# ---------------------------------------------------------------- 9. SIGINT


@pytest.mark.slow  # a fresh Python process and a 1 GiB reference
def test_sigint_during_a_fill_arrives_when_it_returns():
    """docs/api.md: a fill cannot be interrupted. A SIGINT sent while the call runs (seen by
    its first byte written and its last not yet) is a KeyboardInterrupt once it returns,
    the tensor and the generator complete: the reference's bytes and state."""
    code = textwrap.dedent("""
        import json, os, signal, threading, torch, fp8_dummy
        from fp8_dummy import reference
        # Python's own handler, whatever this child inherited (a shell's background job
        # starts with SIGINT ignored, and Python then installs none)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        n = 256 << 20
        t = torch.full((n,), 0x55, dtype=torch.uint8).view(torch.float8_e4m3fn)  # never drawn
        g = torch.Generator().manual_seed(1)
        b, during = t.view(torch.uint8), []

        def interrupt():
            while int(b[0]) == 0x55:
                pass
            os.kill(os.getpid(), signal.SIGINT)
            during.append(int(b[-1]) == 0x55)

        threading.Thread(target=interrupt, daemon=True).start()
        try:
            fp8_dummy.init_(t, -1.0, 1.0, generator=g)
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        ref, g_ref = torch.empty(n, dtype=t.dtype), torch.Generator().manual_seed(1)
        reference.new_path(ref, -1.0, 1.0, generator=g_ref)
        print(json.dumps(dict(interrupted=interrupted, during=during,
                              same_bytes=torch.equal(b, ref.view(torch.uint8)),
                              same_state=torch.equal(g.get_state(), g_ref.get_state()))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["interrupted"] and got["same_bytes"] and got["same_state"], got
    if got["during"] != [True]:
        pytest.skip("the signal was sent after the fill had ended (a loaded machine)")


# ---------------------------------------------------------------- 10. element strides


def test_element_strides_must_be_distinct_ints():
    t = torch.empty(3, 4, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="element_strides must be ints"):
        fp8_dummy.init_stateless_(t, element_strides=[2.5, 1])
    with pytest.raises(RuntimeError, match="same global index"):
        fp8_dummy.init_stateless_(t, element_strides=[1, 1])
    with pytest.raises(RuntimeError, match="same global index"):
        torch.ops.fp8_dummy.init_stateless_.default(t, -1.0, 1.0, 3, element_strides=[3, 1])
    fp8_dummy.init_stateless_(t, element_strides=[4, 1])  # row-major: fine
    fp8_dummy.init_stateless_(t, element_strides=[1, 3])  # column-major block: fine
    with pytest.raises(ValueError, match="element_offset"):
        fp8_dummy.init_stateless_(t, element_offset=2**63)


# ---------------------------------------------------------------- random_

RANDOM_CALLS = {
    "random_": lambda t: torch.ops.fp8_dummy.random_.default(t, 0, 256, 3),
    "random_.generator": lambda t: torch.ops.fp8_dummy.random_.generator(
        t, 0, 256, generator=torch.Generator().manual_seed(3)
    ),
}


@pytest.mark.parametrize("call", sorted(RANDOM_CALLS))
def test_random_bumps_the_version_and_refuses_inference_tensors_as_torch(call):
    ours, ref = torch.empty(40, dtype=torch.uint8), torch.empty(40, dtype=torch.uint8)
    RANDOM_CALLS[call](ours)
    ref.random_(0, 256, generator=torch.Generator().manual_seed(3))
    assert ours._version == ref._version == 1
    with torch.inference_mode():
        t = poison(torch.empty(16, dtype=torch.uint8))
        ref = torch.empty(16, dtype=torch.uint8)
    expected = error_of(lambda r: r.random_(0, 256), ref)
    assert expected and "inference tensor outside InferenceMode" in expected
    assert error_of(RANDOM_CALLS[call], t) == expected
    assert (t == 0x55).all()  # nothing written


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1, -1])
def test_random_takes_every_64_bit_seed(seed):
    ours, ref = torch.empty(999, dtype=torch.int8), torch.empty(999, dtype=torch.int8)
    fp8_dummy.random_(ours, -128, 128, seed)
    ref.random_(-128, 128, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(ours, ref)
    with pytest.raises(TypeError, match="low must be an int"):
        fp8_dummy.random_(ours, -128.0, 128)
