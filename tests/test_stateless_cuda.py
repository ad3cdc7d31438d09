"""The stateless mode on a GPU: CUDA bytes equal CPU bytes (device independence) for
every dtype, layouts and shards; CUDA equals torch.func._random on CUDA; graph capture.
Skipped without a GPU (the CPU side is tests/test_stateless_cpu.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import FP8_DTYPES as FP8

import fp8_dummy  # noqa: F401  (registers the ops)
from fp8_dummy.stateless import init_shard_, init_stateless_, shard_slices

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = FP8 + [torch.float16, torch.bfloat16, torch.float32, torch.float64]
BOUNDS = [(-1e-3, 1e-3), (-1.0, 1.0), (-500.0, 500.0), (0.0, 60000.0), (0.25, 0.25), (-0.3, 0.7)]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(
        a.cpu().contiguous().view(torch.uint8), b.cpu().contiguous().view(torch.uint8)
    )


def both(shape, dtype, *args, **kwargs):
    gpu = init_stateless_(torch.empty(shape, dtype=dtype, device="cuda"), *args, **kwargs)
    cpu = init_stateless_(torch.empty(shape, dtype=dtype), *args, **kwargs)
    return gpu, cpu


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 3, 5, 17, 4097, (1 << 20) + 3, 5_000_011])
def test_cuda_equals_cpu_sizes(dtype, n):
    gpu, cpu = both((n,), dtype, -1.0, 1.0, 1234)
    assert same(gpu, cpu)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("low,high", BOUNDS)
def test_cuda_equals_cpu_bounds_and_keys(dtype, low, high):
    for seed, key_offset in [(1234, 0), (2**40 + 3, 8), (7, -3), (0, 2**32 - 1)]:
        gpu, cpu = both((3, 4099), dtype, low, high, seed, key_offset=key_offset)
        assert same(gpu, cpu), (seed, key_offset)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float16, torch.float64], ids=str)
def test_cuda_layouts(dtype):
    for make in (
        lambda d: torch.empty(40, 66, dtype=dtype, device=d).t(),
        lambda d: torch.empty(40, 66, dtype=dtype, device=d)[:, ::2],
        lambda d: torch.empty(40, 66, dtype=dtype, device=d)[3:, 5:60],
        lambda d: torch.empty(4, 6, 10, dtype=dtype, device=d).permute(2, 0, 1),
        lambda d: torch.empty(1001, dtype=dtype, device=d)[1:],  # unaligned start
    ):
        gpu = init_stateless_(make("cuda"), -1.0, 1.0, 3)
        cpu = init_stateless_(make("cpu"), -1.0, 1.0, 3)
        assert same(gpu, cpu)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(64, 48), (96, 33), (4096, 1000)])
def test_cuda_shards(dtype, shape):
    full = init_stateless_(torch.empty(shape, dtype=dtype), -1.0, 1.0, 11)  # on the CPU
    for world in (2, 3, 8):
        for dim in (0, -1):
            parts = []
            for rank in range(world):
                sshape, offsets = shard_slices(shape, dim, rank, world)
                part = torch.empty(sshape, dtype=dtype, device="cuda")
                parts.append(init_shard_(part, shape, offsets, -1.0, 1.0, 11))
            assert same(torch.cat(parts, dim=dim), full), (world, dim)


def _philox_uniform_on_cuda() -> str | None:
    try:
        import torch.func._random as R

        R.uniform_(R.key(0, device="cuda"), torch.empty(1, device="cuda", dtype=torch.float16))
    except Exception as exc:  # noqa: BLE001  (absent API or kernel: skip with the reason)
        return f"torch {torch.__version__}: torch.func._random.uniform_ on CUDA: {exc!s:.80}"
    return None


def _torch_cpu_kernel() -> bool:
    try:
        key = torch.tensor([0, 0], dtype=torch.uint64)
        torch.ops.aten._philox_uniform_(torch.empty(1, dtype=torch.float32), key, 0.0, 1.0)
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_against_torch_func_random(dtype):
    reason = _philox_uniform_on_cuda()
    if reason:
        pytest.skip(reason)
    for low, high in BOUNDS:
        for seed, key_offset, n in [(1234, 0, 100003), (2**40 + 3, 8, 4097)]:
            key = torch.tensor([seed, key_offset], dtype=torch.uint64, device="cuda")
            temp = torch.empty(n, device="cuda", dtype=torch.float16 if dtype in FP8 else dtype)
            torch.ops.aten._philox_uniform_(temp, key, low, high)
            if dtype in (torch.float32, torch.float64) and _torch_cpu_kernel():
                # The mode follows torch's CPU kernel (separate multiply and add). If
                # torch's own CUDA kernel fuses them, torch is not device-independent
                # here and no single answer can match both.
                cpu = torch.empty(n, dtype=dtype)
                torch.ops.aten._philox_uniform_(cpu, key.cpu(), low, high)
                if not same(cpu, temp):
                    pytest.skip(
                        f"torch's _philox_uniform_ differs between CPU and CUDA for {dtype}"
                    )
            got = init_stateless_(
                torch.empty(n, dtype=dtype, device="cuda"), low, high, seed, key_offset=key_offset
            )
            assert same(got, temp.to(dtype)), (low, high, seed, key_offset)


def test_cuda_graph_capture_and_stream():
    t = torch.empty(1 << 20, dtype=torch.float8_e4m3fn, device="cuda")
    init_stateless_(t)  # warm up (builds the host table)
    graph = torch.cuda.CUDAGraph()
    t.view(torch.uint8).zero_()
    with torch.cuda.graph(graph):
        init_stateless_(t)
    graph.replay()
    torch.cuda.synchronize()
    assert same(t, init_stateless_(torch.empty(1 << 20, dtype=torch.float8_e4m3fn)))


def test_cuda_second_device_if_present():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    a = init_stateless_(torch.empty(12345, dtype=torch.float8_e4m3fn, device="cuda:1"))
    assert same(a, init_stateless_(torch.empty(12345, dtype=torch.float8_e4m3fn)))


INT_BOUNDS = {torch.int8: [(-128, 128), (-5, 3)], torch.uint8: [(0, 256), (7, 200)]}


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
def test_cuda_equals_cpu_integer_bytes(dtype):
    # Integer random bytes: the same bytes on the GPU, every layout and shard.
    for low, high in INT_BOUNDS[dtype]:
        for n in (1, 17, 4097, 5_000_011):
            gpu, cpu = both((n,), dtype, low, high, 99, key_offset=5)
            assert same(gpu, cpu), (low, high, n)
    for make in (
        lambda d: torch.empty(40, 66, dtype=dtype, device=d).t(),
        lambda d: torch.empty(40, 66, dtype=dtype, device=d)[3:, 5:60:3],
        lambda d: torch.empty(1001, dtype=dtype, device=d)[1:],
    ):
        gpu = init_stateless_(make("cuda"), *INT_BOUNDS[dtype][0], 3, element_offset=11)
        cpu = init_stateless_(make("cpu"), *INT_BOUNDS[dtype][0], 3, element_offset=11)
        assert same(gpu, cpu)
