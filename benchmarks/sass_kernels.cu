// The product's CUDA kernels, instantiated alone for benchmarks/sass_report.py: the same
// headers and templates csrc/cuda/*.cu launch, compiled with the product's nvcc flags, so
// their SASS can be read without building (or loading) the extension. Never linked.
#include "cuda/init_kernel.cuh"
#include "cuda/init_many_kernel.cuh"
#include "cuda/stateless_kernel.cuh"

namespace fp8_dummy {
namespace cuda_kernels {
using cuda::Fp8Format;
template __global__ void init_fp8_kernel<Fp8Format::kE4m3fn, true>(const PieceArgs);
template __global__ void init_fp8_kernel<Fp8Format::kE5m2, true>(const PieceArgs);
template __global__ void init_fp8_kernel<Fp8Format::kE4m3fn, false>(const PieceArgs);
template __global__ void init_fp8_kernel<Fp8Format::kE5m2, false>(const PieceArgs);
template __global__ void init_many_fp8_kernel<Fp8Format::kE4m3fn>(
    const BatchPiece*, int64_t, int64_t, const __grid_constant__ BatchCall);
template __global__ void init_many_fp8_kernel<Fp8Format::kE5m2>(const BatchPiece*, int64_t, int64_t,
                                                                const __grid_constant__ BatchCall);
}  // namespace cuda_kernels
namespace stateless_kernels {
template __global__ void linear_kernel<Fp8Out>(const __grid_constant__ Args);
template __global__ void general_kernel<Fp8Out>(const __grid_constant__ Args);
}  // namespace stateless_kernels
}  // namespace fp8_dummy
