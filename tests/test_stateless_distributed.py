"""Sharded stateless init across processes (torch.distributed, gloo, CPU, loopback only).

Each rank fills its column-parallel (dim 0: output features) and row-parallel (last dim:
input features) shards of a few weight shapes with init_shard_; the shards, gathered with
all_gather and put together, must equal a single-process init_stateless_ of the full
weight byte for byte, on every rank, for world sizes 2 and 4 (uneven splits follow
torch.tensor_split). Each rank's shard must also equal the same slice of the full fill.
"""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import workers as W

import fp8_dummy  # noqa: F401  (registers the ops)
from fp8_dummy.stateless import init_shard_, init_stateless_, shard_slices

SHAPES = [(64, 48), (96, 33), (7, 130), (5, 3)]
DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float32]
SEED, LOW, HIGH = 1234, -1.0, 1.0
TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")


def _gather_bytes(shard: torch.Tensor, max_bytes: int, world: int) -> list[torch.Tensor]:
    """Every rank's shard bytes (all_gather needs equal sizes: pad to the largest)."""
    raw = shard.contiguous().view(torch.uint8).reshape(-1)
    padded = torch.zeros(max_bytes, dtype=torch.uint8)
    padded[: raw.numel()] = raw
    out = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(out, padded)
    return out


def _check_rank(rank: int, world: int) -> None:
    for shape in SHAPES:
        for dtype in DTYPES:
            full = init_stateless_(torch.empty(shape, dtype=dtype), LOW, HIGH, SEED)
            for dim in (0, -1):
                sshape, offsets = shard_slices(shape, dim, rank, world)
                shard = init_shard_(
                    torch.empty(sshape, dtype=dtype), shape, offsets, LOW, HIGH, SEED
                )
                where = f"rank {rank}/{world} shape {shape} {dtype} dim {dim}"
                # Rank independence: my shard is the slice of the full fill.
                mine = full.narrow(dim, offsets[dim], sshape[dim])
                assert torch.equal(shard.view(torch.uint8), mine.contiguous().view(torch.uint8)), (
                    where
                )
                # Reassembly of everyone's shards equals the full fill.
                shapes = [shard_slices(shape, dim, r, world)[0] for r in range(world)]
                sizes = [int(torch.Size(s).numel()) * full.element_size() for s in shapes]
                got = _gather_bytes(shard, max(sizes), world)
                parts = [g[:n].view(dtype).reshape(s) for g, n, s in zip(got, sizes, shapes)]
                whole = torch.cat(parts, dim=dim)
                assert torch.equal(whole.view(torch.uint8), full.view(torch.uint8)), where


def _worker(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    try:
        _check_rank(rank, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # gloo processes
@pytest.mark.parametrize("world", [2, 4])
def test_sharded_init_across_ranks(world):
    ctx = mp.spawn(_worker, args=(world, W.free_port()), nprocs=world, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"world size {world}: ranks did not finish in {TIMEOUT_S} s")


def test_single_process_reference_is_rank_free():
    # The same checks in one process for world sizes 1..5 (no gloo): every rank's shard is
    # its slice of the full fill, whatever the world size.
    for world in range(1, 6):
        for shape in SHAPES:
            full = init_stateless_(torch.empty(shape, dtype=torch.float8_e4m3fn), LOW, HIGH, SEED)
            for dim in (0, -1):
                parts = []
                for rank in range(world):
                    sshape, offsets = shard_slices(shape, dim, rank, world)
                    part = torch.empty(sshape, dtype=torch.float8_e4m3fn)
                    parts.append(init_shard_(part, shape, offsets, LOW, HIGH, SEED))
                whole = torch.cat(parts, dim=dim)
                assert torch.equal(whole.view(torch.uint8), full.view(torch.uint8))
