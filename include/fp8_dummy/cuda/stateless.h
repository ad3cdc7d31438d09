// The device-independent ("stateless") mode: the value of global element e depends only
// on (seed, key offset, e), never on the device, the launch or the sharding: the value
// torch.func._random.uniform_(key(seed) + offset, t) gives element e of a contiguous t
// (torch >= 2.14 on the CPU; the rule per dtype: docs/modes.md). Philox4x32-10, key (seed),
// counter (key_offset + e / 4, 0) and word e % 4 (float64: e / 2, words 2 (e % 2) and
// 2 (e % 2) + 1, hi and lo), masked to the dtype's mantissa digits and scaled to [0, 1);
// FP8 takes copy_ of the float16 value; int8/uint8 take low + word % (high - low), as
// torch's random_ reduces a 32-bit draw. Torch-free, host and device.
#pragma once

#include <cstdint>

#include "fp8_dummy/cuda/config.h"
#include "fp8_dummy/cuda/philox.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {
namespace cuda {

// Philox call and word for element e of a 16- or 32-bit dtype (4 elements per call).
FP8_DUMMY_HD Words4 stateless_call(uint64_t seed, uint64_t key_offset, uint64_t call) {
  const uint64_t c = key_offset + call;
  const Words4 counter{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Round to nearest even onto bfloat16 (uniform_ never makes NaN).
FP8_DUMMY_HD uint16_t float_to_bf16_rn(float f) {
  const uint32_t u = float_bits(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

FP8_DUMMY_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Bounds as each dtype's kernel sees them.
struct StatelessParams {
  float from;  // float16 / bfloat16 / float32
  float range;
  double from_d;  // float64
  double range_d;
  int32_t int_low;  // int8 / uint8: [int_low, int_low + int_range), 1 <= int_range <= 256
  uint32_t int_range;
};

FP8_DUMMY_HD StatelessParams stateless_params_half(double low, double high) {
  const UniformParams u = make_uniform_params(low, high);  // same bound roundings
  return StatelessParams{u.from, u.range, 0.0, 0.0, 0, 0u};
}

FP8_DUMMY_HD StatelessParams stateless_params_bf16(double low, double high) {
  const float from = bf16_to_float(float_to_bf16_rn(static_cast<float>(low)));
  const float to = bf16_to_float(float_to_bf16_rn(static_cast<float>(high)));
  return StatelessParams{from, bf16_to_float(float_to_bf16_rn(to - from)), 0.0, 0.0, 0, 0u};
}

FP8_DUMMY_HD StatelessParams stateless_params_float(double low, double high) {
  const float from = static_cast<float>(low);
  return StatelessParams{from, static_cast<float>(high) - from, 0.0, 0.0, 0, 0u};
}

FP8_DUMMY_HD StatelessParams stateless_params_double(double low, double high) {
  return StatelessParams{0.0f, 0.0f, low, high - low, 0, 0u};
}

FP8_DUMMY_HD StatelessParams stateless_params_int(double low, double high) {
  const auto lo = static_cast<int32_t>(low);
  return StatelessParams{0.0f, 0.0f, 0.0,
                         0.0,  lo,   static_cast<uint32_t>(static_cast<int32_t>(high) - lo)};
}

// An integer byte for a word (range a power of two: the word's low bits).
FP8_DUMMY_HD uint8_t stateless_byte(uint32_t word, const StatelessParams& p) {
  return static_cast<uint8_t>(static_cast<uint32_t>(p.int_low) + word % p.int_range);
}

// float16 bits for a word: 11 random bits. Also the input of the FP8 conversion.
FP8_DUMMY_HD uint16_t stateless_half(uint32_t word, const StatelessParams& p) {
  const float x = static_cast<float>(word & 0x7ffu) * 0.00048828125f;  // 2^-11
  return float_to_half_rn(x * p.range + p.from);
}

FP8_DUMMY_HD uint16_t stateless_bf16(uint32_t word, const StatelessParams& p) {
  const float x = static_cast<float>(word & 0xffu) * 0.00390625f;  // 2^-8
  return float_to_bf16_rn(x * p.range + p.from);
}

// The product of two 24-bit significands is not exact here: multiply and add must
// round separately, so the device intrinsics keep nvcc from fusing them.
FP8_DUMMY_HD float stateless_float(uint32_t word, const StatelessParams& p) {
  const float x = static_cast<float>(word & 0xffffffu) * 5.9604644775390625e-8f;  // 2^-24
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(x, p.range), p.from);
#else
  const volatile float product = x * p.range;  // host callers: see csrc/cpu/stateless_cpu.cpp
  return product + p.from;
#endif
}

FP8_DUMMY_HD double stateless_double(uint32_t hi, uint32_t lo, const StatelessParams& p) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) & ((uint64_t{1} << 53) - 1);
  const double x = static_cast<double>(bits) * 1.1102230246251565e-16;  // 2^-53
#if defined(__CUDA_ARCH__)
  return __dadd_rn(__dmul_rn(x, p.range_d), p.from_d);
#else
  const volatile double product = x * p.range_d;
  return product + p.from_d;
#endif
}

}  // namespace cuda
}  // namespace fp8_dummy
