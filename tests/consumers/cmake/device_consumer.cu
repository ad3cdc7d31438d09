// CUDA code using fp8_dummy's torch-free device headers (fp8_dummy::cuda_headers) in
// its own kernel, as a quantization library would: Philox4x32-10 words -> uniform
// float16 -> float8_e4m3fn bytes. Torch-free: nvcc and the headers only. With a GPU,
// main() checks the kernel's bytes against the same functions run on the host; without
// one it says so and exits 0 (CI compiles it: tests/test_packaging_cmake.py, the CUDA job).
#include <cuda_runtime.h>
#include <fp8_dummy/cuda/fp8_convert.h>
#include <fp8_dummy/cuda/philox.h>
#include <fp8_dummy/cuda/uniform.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace fpc = fp8_dummy::cuda;

// The one place that names the device headers' API (adapt here if it changes).
__host__ __device__ inline uint8_t element(int64_t i, uint64_t seed,
                                           const fpc::UniformParams& params) {
  const fpc::Words4 counter{{static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0}};
  const fpc::Words4 words =
      fpc::philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint16_t half = fpc::uniform_half(words.w[0], params);
  return fpc::half_to_fp8(half, fpc::Fp8Format::kE4m3fn, fpc::E4m3fnOverflow::kSaturate);
}

__global__ void fill_e4m3fn(uint8_t* out, int64_t n, uint64_t seed, fpc::UniformParams params) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = element(i, seed, params);
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("device_consumer: no GPU, compiled only\n");
    return 0;
  }
  constexpr int64_t n = 1 << 16;
  const uint64_t seed = 1234;
  const fpc::UniformParams params = fpc::make_uniform_params(-1.0, 1.0);
  uint8_t* device_out = nullptr;
  cudaMalloc(&device_out, n);
  fill_e4m3fn<<<(n + 255) / 256, 256>>>(device_out, n, seed, params);
  std::vector<uint8_t> got(n);
  cudaMemcpy(got.data(), device_out, n, cudaMemcpyDeviceToHost);
  cudaFree(device_out);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mismatches += got[i] != element(i, seed, params);
  std::printf("device_consumer: %lld of %lld bytes differ between device and host\n",
              static_cast<long long>(mismatches), static_cast<long long>(n));
  return mismatches == 0 ? 0 : 1;
}
