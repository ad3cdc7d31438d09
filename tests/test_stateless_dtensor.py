"""fp8_dummy on DTensors (torch.distributed.tensor, gloo, CPU, loopback only).

One process group per world size (2 and 4), each rank running every check of
tests/helpers/dtensor_checks.py: 1-D and 2-D meshes; Shard(0), Shard(1), nested Shard,
Replicate and FSDP2+TP's _StridedShard; uneven shapes; a sub-mesh; FP8 and wide dtypes;
init_stateless_ (full_tensor() == one fill of the full shape, wrapper and operator),
init_/init_many_ (== torch's reference path on the same DTensor), whole models (FSDP2
fully_shard, tensor parallel, both), refusals. Plus single-process tests of the pieces.
"""

from __future__ import annotations

import ast
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import workers as W

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")
TIMEOUT_S = 240
ROOT = Path(__file__).resolve().parent.parent


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    try:
        from helpers import dtensor_checks as checks

        counts = {
            "stateless": checks.check_stateless(world, rank),
            "reference": checks.check_reference(world, rank),
            "models": checks.check_models(world, rank),
        }
        checks.check_layout(world, rank)
        checks.check_submesh(world, rank)
        checks.check_refusals(world, rank)
        dist.barrier()
        if rank == 0:
            Path(out).write_text(repr(counts))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # gloo processes
@pytest.mark.parametrize("world", [2, 4])
def test_dtensor_across_ranks(world, tmp_path):
    out = tmp_path / "counts"
    ctx = mp.spawn(_worker, args=(world, W.free_port(), str(out)), nprocs=world, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"world size {world}: ranks did not finish in {TIMEOUT_S} s")
    counts = ast.literal_eval(out.read_text())  # written by rank 0 after every check passed
    assert counts["stateless"] >= 100 and counts["reference"] >= 100 and counts["models"] >= 50


def _cuda_worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        import fp8_dummy

        mesh = init_device_mesh("cuda", (1,))
        full = torch.empty(7, 5, dtype=torch.float8_e4m3fn)
        fp8_dummy.init_stateless_(full, -1.0, 1.0, 1234)
        host = torch.empty(7, 5, dtype=torch.float8_e4m3fn)
        dt = distribute_tensor(host.cuda(), mesh, [Shard(0)], src_data_rank=None)
        fp8_dummy.init_stateless_(dt, -1.0, 1.0, 1234)  # device-independent: the CPU bytes
        assert torch.equal(dt.to_local().cpu().view(torch.uint8), full.view(torch.uint8))
        try:
            fp8_dummy.init_(dt, -1.0, 1.0, 1234)
        except RuntimeError as e:
            assert "cuda meshes are not supported" in str(e) and "init_stateless_" in str(e)
        else:
            raise AssertionError("init_ on a CUDA DTensor: no error")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_mesh():
    # init_stateless_ works on a CUDA mesh; init_ refuses it, naming init_stateless_.
    mp.spawn(_cuda_worker, args=(W.free_port(),), nprocs=1)


def _python(code: str) -> str:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow  # a fresh Python process
def test_registration_is_lazy_and_follows_the_import():
    # import fp8_dummy does not import torch.distributed.tensor (seconds); importing it
    # later registers the rules and leaves torch's loader as it was. (One fresh process:
    # this one has imported both long ago.)
    out = _python(
        "import sys, fp8_dummy\n"
        "print('torch.distributed.tensor' in sys.modules, 'fp8_dummy.dtensor' in sys.modules)\n"
        "import torch.distributed.tensor as m\n"
        "print('fp8_dummy.dtensor' in sys.modules, 'exec_module' in vars(m.__loader__))\n"
    )
    assert out.splitlines() == ["False False", "True False"]


def test_install_after_the_import_registers():
    pytest.importorskip("torch.distributed.tensor")
    import fp8_dummy
    from fp8_dummy import _after_import, dtensor

    # torch.distributed.tensor is imported: registers now (once)
    _after_import.after_import("torch.distributed.tensor", fp8_dummy._register_dtensor)
    assert dtensor._REGISTERED and fp8_dummy.init_stateless_ is not None


def test_runs_of():
    pytest.importorskip("torch.distributed.tensor")
    from fp8_dummy.dtensor import _runs_of

    assert _runs_of([]) == []
    assert _runs_of([4, 5, 6]) == [(0, 4, 3)]
    assert _runs_of([0, 1, 4, 5, 9]) == [(0, 0, 2), (2, 4, 2), (4, 9, 1)]
