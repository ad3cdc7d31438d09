"""Per-rank checks of fp8_dummy on DTensors (run by tests/test_stateless_dtensor.py in each
process of a gloo group). Each check raises AssertionError naming the case."""

from __future__ import annotations

import functools
import warnings

import torch
from conftest import storage_bytes
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

import fp8_dummy
from fp8_dummy import reference

# Uneven for 2 and 4 ranks; (5, 3) on 4 ranks leaves a rank with no rows.
SHAPES = [(7, 5), (13,), (3, 4, 5), (5, 3)]
DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float32]
LOW, HIGH, SEED = -1.0, 1.0, 1234
SENTINEL = 3.0  # outside [LOW, HIGH]: an element left unwritten shows
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_GLOO = {**_INT, 2: torch.float16}  # gloo has no int16; all_gather only moves the bits


def meshes(world: int) -> list:
    two_d = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    return [init_device_mesh("cpu", (world,)), two_d]


def placements(mesh, ndim: int) -> list[tuple]:
    last = ndim - 1
    if mesh.ndim == 1:
        return [(Shard(d),) for d in range(ndim)] + [(Replicate(),)]
    # The last one is FSDP2 + tensor parallel on one dimension (right-to-left sharding).
    return [
        (Shard(0), Shard(last)),
        (Shard(0), Shard(0)),
        (Replicate(), Shard(last)),
        (Shard(last), Replicate()),
        (_StridedShard(0, split_factor=mesh.size(1)), Shard(0)),
    ]


def cases(world: int):
    for mesh in meshes(world):
        for shape in SHAPES:
            for pl in placements(mesh, len(shape)):
                yield mesh, shape, pl


def make(mesh, shape, dtype, pl) -> DTensor:
    """A DTensor filled with SENTINEL (torch's own local split, no communication)."""
    dt = distribute_tensor(torch.empty(shape, dtype=dtype), mesh, list(pl), src_data_rank=None)
    dt.to_local().fill_(SENTINEL)
    return dt


def full_bits(dt: DTensor) -> torch.Tensor:
    """The gathered global tensor as integers of the same width (gloo moves no FP8)."""
    width = dt.element_size()
    local = dt.to_local().view(_GLOO[width])
    spec = dict(shape=dt.shape, stride=dt.stride(), run_check=False)
    full = DTensor.from_local(local, dt.device_mesh, dt.placements, **spec).full_tensor()
    return full.view(_INT[width])


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT[t.element_size()])


def check_stateless(world: int, rank: int) -> int:
    """init_stateless_ on every case: full_tensor() == one fill of the full shape."""
    n = 0
    for mesh, shape, pl in cases(world):
        for dtype in DTYPES:
            where = f"rank {rank}/{world} mesh {tuple(mesh.shape)} {pl} {shape} {dtype}"
            full = fp8_dummy.init_stateless_(torch.empty(shape, dtype=dtype), LOW, HIGH, SEED)
            dt = make(mesh, shape, dtype, pl)
            assert fp8_dummy.init_stateless_(dt, LOW, HIGH, SEED) is dt, where
            assert torch.equal(full_bits(dt), bits(full)), where
            # The operator itself, on a fresh DTensor: the same local bytes.
            op_dt = make(mesh, shape, dtype, pl)
            torch.ops.fp8_dummy.init_stateless_(op_dt, LOW, HIGH, SEED)
            assert torch.equal(bits(op_dt.to_local()), bits(dt.to_local())), where
            n += 1
        # key_offset, element_offset and element_strides refer to the global tensor.
        strides, step = [], 1  # column-major, with gaps between the columns
        for size in shape:
            strides.append(step)
            step *= 2 * max(size, 1)
        kw = dict(key_offset=5, element_offset=11, element_strides=strides)
        full = fp8_dummy.init_stateless_(torch.empty(shape, dtype=DTYPES[0]), LOW, HIGH, 7, **kw)
        dt = make(mesh, shape, DTYPES[0], pl)
        torch.ops.fp8_dummy.init_stateless_(dt, LOW, HIGH, 7, **kw)
        assert torch.equal(full_bits(dt), bits(full)), f"{where} {kw}"
    return n


def check_layout(world: int, rank: int) -> None:
    """A local tensor that is a view with gaps: its elements filled, the gaps untouched."""
    for mesh in meshes(world):
        pl = placements(mesh, 2)[0]
        shape = (7, 5)
        local_shape = make(mesh, shape, torch.float8_e5m2, pl).to_local().shape
        base = torch.empty(local_shape[0], 2 * local_shape[1], dtype=torch.float8_e5m2)
        storage_bytes(base).fill_(0x55)
        dt = DTensor.from_local(
            base[:, ::2], mesh, pl, shape=torch.Size(shape), stride=(5, 1), run_check=False
        )
        fp8_dummy.init_stateless_(dt, LOW, HIGH, SEED)
        full = fp8_dummy.init_stateless_(torch.empty(shape, dtype=torch.float8_e5m2), -1, 1, SEED)
        assert torch.equal(full_bits(dt), bits(full)), f"rank {rank} mesh {tuple(mesh.shape)}"
        assert bool((base[:, 1::2].view(torch.uint8) == 0x55).all()), f"rank {rank} gaps"


def check_submesh(world: int, rank: int) -> None:
    """A mesh of ranks 0 and 1 only: the others hold nothing and do nothing, as torch."""
    mesh = DeviceMesh("cpu", [0, 1])
    shape = (7, 5)
    full = fp8_dummy.init_stateless_(torch.empty(shape, dtype=torch.bfloat16), LOW, HIGH, SEED)
    dt = make(mesh, shape, torch.bfloat16, (Shard(1),))
    fp8_dummy.init_stateless_(dt, LOW, HIGH, SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp8_dummy.init_(make(mesh, shape, torch.bfloat16, (Shard(1),)), LOW, HIGH, SEED)
    if rank < 2:
        assert torch.equal(full_bits(dt), bits(full)), f"rank {rank} sub-mesh"
    else:
        assert dt.to_local().numel() == 0, f"rank {rank} outside the mesh holds data"


def _reference_and_ours(mesh, shape, dtype, pl, fill_ref, fill_ours, seed: int):
    """Run the reference and ours from the same default-generator state (different on
    every rank): local bytes and the generator state after must agree."""
    a, b = make(mesh, shape, dtype, pl), make(mesh, shape, dtype, pl)
    torch.manual_seed(seed)
    fill_ref(a)
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    fill_ours(b)
    where = f"mesh {tuple(mesh.shape)} {pl} {shape} {dtype}"
    assert torch.equal(bits(a.to_local()), bits(b.to_local())), where
    assert torch.equal(torch.get_rng_state(), state), f"{where}: default generator state"
    assert not (b.to_local().float() == SENTINEL).any(), f"{where}: unwritten"


def check_reference(world: int, rank: int) -> int:
    """init_ on CPU DTensors == torch's reference path on the same DTensor."""
    n = 0
    warnings.simplefilter("ignore")  # torch: "may not have complete support"; ours: seed
    g_ref, g_ours = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    ops = torch.ops.fp8_dummy

    def ref(t: torch.Tensor) -> None:
        reference.new_path(t, LOW, HIGH, SEED)

    forms = [
        (ref, lambda t: fp8_dummy.init_(t, LOW, HIGH, SEED)),
        (ref, lambda t: ops.init_(t, LOW, HIGH, SEED)),
        (ref, lambda t: ops.init_many_([t], LOW, HIGH, SEED)),
        (
            lambda t: reference.new_path(t, LOW, HIGH, generator=g_ref),
            lambda t: fp8_dummy.init_(t, LOW, HIGH, generator=g_ours),
        ),
    ]
    for i, (mesh, shape, pl) in enumerate(cases(world)):
        dtype = DTYPES[i % len(DTYPES)]
        seed = 1000 * rank + i
        for fill_ref, fill_ours in forms:
            _reference_and_ours(mesh, shape, dtype, pl, fill_ref, fill_ours, seed)
            n += 1
    # torch drops the caller's generator on a CPU DTensor: untouched, both ways.
    untouched = torch.Generator().manual_seed(9).get_state()
    assert torch.equal(g_ref.get_state(), untouched), "torch changed: it used the generator"
    assert torch.equal(g_ours.get_state(), untouched), "caller's generator state"
    # init_many_ mixing DTensors and plain tensors == a loop of the reference, in order.
    mesh = meshes(world)[-1]
    fp8, f32, bf16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16
    specs = [(fp8, True), (fp8, False), (f32, True), (bf16, False), (torch.float8_e5m2, True)]
    outs = []
    for fill in ("ref", "ours"):
        pl = (Shard(0), Shard(1))
        ts = [make(mesh, (7, 5), d, pl) if dt else torch.empty(7, 5, dtype=d) for d, dt in specs]
        torch.manual_seed(rank)
        if fill == "ref":
            for t in ts:
                reference.new_path(t, LOW, HIGH, SEED)
        else:
            fp8_dummy.init_many_(ts, LOW, HIGH, SEED)
        locals_ = [bits(t.to_local() if isinstance(t, DTensor) else t) for t in ts]
        outs.append((locals_, torch.get_rng_state()))
    (want, ref_state), (got, ours_state) = outs
    assert all(torch.equal(x, y) for x, y in zip(want, got)), f"rank {rank}: init_many_ mixed"
    assert torch.equal(ref_state, ours_state), f"rank {rank}: init_many_ generator state"
    return n


def _raises(fn, match: str, where: str) -> None:
    try:
        fn()
    except RuntimeError as e:
        assert match in str(e), f"{where}: {e}"
        return
    raise AssertionError(f"{where}: no error")


def check_refusals(world: int, rank: int) -> None:
    import torch.distributed.tensor._random as dt_random

    mesh = meshes(world)[0]
    partial = DTensor.from_local(torch.zeros(3, 2), mesh, [Partial()], run_check=False)
    for name, fn in (
        ("init_stateless_", lambda: fp8_dummy.init_stateless_(partial, LOW, HIGH, SEED)),
        ("init_", lambda: fp8_dummy.init_(partial, LOW, HIGH, SEED)),
        ("init_many_", lambda: fp8_dummy.init_many_([torch.empty(2), partial], LOW, HIGH)),
    ):
        _raises(fn, "Partial", f"rank {rank} {name}")
    assert not partial.to_local().any(), "Partial: written"
    # A local tensor whose elements may share memory (rows 2 apart, 5 long): refused by
    # every op on every rank, nothing written.
    base = torch.full((17,), SENTINEL)
    over = DTensor.from_local(base.as_strided((7, 5), (2, 1)), mesh, [Replicate()], run_check=False)
    for name, fn in (
        ("init_stateless_", lambda: fp8_dummy.init_stateless_(over, LOW, HIGH, SEED)),
        ("init_", lambda: fp8_dummy.init_(over, LOW, HIGH, SEED)),
        ("init_many_", lambda: fp8_dummy.init_many_([torch.empty(2), over], LOW, HIGH)),
    ):
        _raises(fn, "may share memory", f"rank {rank} {name}")
    assert bool((base == SENTINEL).all()), "overlapping local: written"
    # A local tensor that does not match the placements (never 6 rows of 7 on 2 or 4 ranks).
    spec = dict(shape=torch.Size((7, 5)), stride=(5, 1), run_check=False)
    wrong = DTensor.from_local(torch.empty(6, 5), mesh, [Shard(0)], **spec)
    _raises(lambda: fp8_dummy.init_stateless_(wrong), "the local tensor has shape", "shape")
    # Bad arguments: plain tensors' messages (the op's own name first), on every rank,
    # before anything is written.
    dt = make(mesh, (7, 5), torch.float8_e4m3fn, (Shard(0),))
    plain = torch.empty(7, 5, dtype=torch.float8_e4m3fn)
    # TensorRT-LLM's contiguous temp has no sharded meaning: refused by name.
    _raises(lambda: fp8_dummy.init_(dt, contiguous_temp=True), "contiguous_temp=True", "temp")
    many = lambda t, **kw: fp8_dummy.init_many_([torch.empty(2), t], **kw)  # noqa: E731
    for fn, kw in (
        (fp8_dummy.init_stateless_, dict(low=1.0, high=-1.0)),
        (fp8_dummy.init_stateless_, dict(element_strides=[1])),
        (fp8_dummy.init_stateless_, dict(element_offset=2**63 - 10)),  # overflows
        (fp8_dummy.init_, dict(low=-1.0, high=70000.0)),
        (many, dict(low=-1.0, high=70000.0)),
    ):
        message = None
        try:
            fn(plain, **kw)
        except RuntimeError as e:
            message = str(e).splitlines()[0]
        assert message, f"{kw}: a plain tensor took it"
        op = "init_many_: tensors[1]" if fn is many else fn.__name__
        assert message.startswith(f"fp8_dummy.{op}: "), message
        _raises(functools.partial(fn, dt, **kw), message, f"rank {rank} {kw}")
    assert bool((dt.to_local().float() == SENTINEL).all()), "bad arguments: written"

    # An active DTensor RNG tracker (a GPU mesh ran a random op): torch's path changes.
    class Tracker:
        distribute_region_enabled = True

    saved, dt_random._rng_tracker = dt_random._rng_tracker, Tracker()
    try:
        _raises(lambda: fp8_dummy.init_(dt), "RNG tracker", f"rank {rank} tracker")
    finally:
        dt_random._rng_tracker = saved


def _model(dtype: torch.dtype, tied: bool = False) -> torch.nn.Module:
    # Two layers of one shape: distinct DTensors alike in everything but their data.
    sizes = [(5, 7), (7, 7), (7, 7), (7, 3)]
    m = torch.nn.Sequential(*[torch.nn.Linear(i, o) for i, o in sizes]).to(dtype)
    if tied:
        m[2].weight = m[1].weight
    return m


def _shard_model(m: torch.nn.Module, how: str, world: int) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh1, mesh2 = meshes(world)
    plan = {"0": ColwiseParallel(), "1": RowwiseParallel()}
    plan.update({"2": ColwiseParallel(), "3": RowwiseParallel()})
    if how == "fsdp":
        fully_shard(m, mesh=mesh1)
    elif how == "tp":
        parallelize_module(m, mesh1, plan)
    else:  # FSDP2 + TP on a 2-D mesh: colwise weights get (_StridedShard(0), Shard(0))
        parallelize_module(m, mesh2["tp"], plan)
        fully_shard(m, mesh=mesh2["dp"])
    return m


def check_models(world: int, rank: int) -> int:
    """initialize_dummy_weights(mode="stateless") on FSDP2, TP and FSDP2+TP models: every
    full weight == the unsharded model's; mode="generator" == the reference loop."""
    n = 0
    for how in ("fsdp", "tp", "fsdp+tp"):
        # gloo scatters no FP8, and parallelize_module scatters: FP8 with FSDP2 only.
        for dtype in [torch.float32, torch.bfloat16] + ([torch.float8_e4m3fn] * (how == "fsdp")):
            torch.manual_seed(0)  # the same module parameters on every rank
            m = _shard_model(_model(dtype), how, world)
            plain = _model(dtype)
            fp8_dummy.initialize_dummy_weights(m, LOW, HIGH, SEED, mode="stateless")
            fp8_dummy.initialize_dummy_weights(plain, LOW, HIGH, SEED, mode="stateless")
            want = plain.state_dict()
            for name, p in m.state_dict().items():
                where = f"rank {rank} {how} {dtype} {name} {p.placements}"
                assert torch.equal(full_bits(p), bits(want[name])), where
                n += 1
    warnings.simplefilter("ignore")
    for how in ("fsdp", "fsdp+tp"):
        a, b = (_shard_model(_model(torch.float32, tied=True), how, world) for _ in range(2))
        torch.manual_seed(rank)
        for p in a.state_dict().values():  # vLLM's loop: every name, tied ones twice
            reference.new_path(p, LOW, HIGH, SEED)
        state = torch.get_rng_state()
        torch.manual_seed(rank)
        fp8_dummy.initialize_dummy_weights(b, LOW, HIGH, SEED)
        for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(bits(p.to_local()), bits(q.to_local())), f"{how} ref {name}"
        assert torch.equal(torch.get_rng_state(), state), f"{how}: generator state"
    return n
