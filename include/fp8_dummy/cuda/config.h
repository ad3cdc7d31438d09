// Qualifiers for the torch-free headers under fp8_dummy/cuda/: __host__ __device__
// when compiled by nvcc, plain inline otherwise, so host-only C++ (the CPU emulator,
// anyone's g++ code) includes the very functions the CUDA kernel runs.
#pragma once

#if defined(__CUDACC__)
#define FP8_DUMMY_HD __host__ __device__ __forceinline__
#else
#define FP8_DUMMY_HD inline
#endif

// True only in device code compiled for sm_89 or newer, where the packed
// float16 -> FP8 conversion instructions exist.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_DUMMY_HW_FP8 1
#else
#define FP8_DUMMY_HW_FP8 0
#endif
