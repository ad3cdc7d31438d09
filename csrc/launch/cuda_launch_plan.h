// Host-side decisions shared by the CUDA launcher (cuda/init_cuda.cu) and its CPU
// emulator (emulator/init_cuda_emulator.cpp), so that CPU tests exercise the very code that picks
// the layout and the FP8 conversion the GPU runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cmath>
#include <optional>
#include <type_traits>

#include "common/reference.h"
#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/layout.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {

using cuda::FreshOffsets;  // (fp8_dummy/cuda/uniform.h)

// fn(std::integral_constant<cuda::Fp8Format, F>{}) for the format F of `format`: a
// kernel template instantiated for each format, picked at run time.
template <typename Fn>
void with_fp8_format(cuda::Fp8Format format, Fn&& fn) {
  using F = cuda::Fp8Format;
  switch (format) {
    case F::kE4m3fn:
      return fn(std::integral_constant<F, F::kE4m3fn>{});
    case F::kE5m2:
      return fn(std::integral_constant<F, F::kE5m2>{});
    case F::kE4m3fnuz:
      return fn(std::integral_constant<F, F::kE4m3fnuz>{});
    case F::kE5m2fnuz:
      return fn(std::integral_constant<F, F::kE5m2fnuz>{});
    case F::kInt8:
      return fn(std::integral_constant<F, F::kInt8>{});
    case F::kUint8:
      return fn(std::integral_constant<F, F::kUint8>{});
    default:
      return fn(std::integral_constant<F, F::kE8m0fnu>{});
  }
}

// The overflow modes a format can have, in the order the one-time probe tries them.
inline std::array<cuda::E4m3fnOverflow, 2> overflow_modes(cuda::Fp8Format format) {
  if (cuda::is_integer_format(format)) {
    return {cuda::E4m3fnOverflow::kWrap, cuda::E4m3fnOverflow::kSaturate};
  }
  return {cuda::E4m3fnOverflow::kSaturate, cuda::E4m3fnOverflow::kNan};
}

// The emulator's `saturate_e4m3fn` flag as a mode: saturation, else the format's other mode
// (float8_e4m3fn NaN, int8/uint8 wrap modulo 256).
inline cuda::E4m3fnOverflow emulated_overflow(cuda::Fp8Format format, bool saturate) {
  if (saturate) return cuda::E4m3fnOverflow::kSaturate;
  return cuda::is_integer_format(format) ? cuda::E4m3fnOverflow::kWrap : cuda::E4m3fnOverflow::kNan;
}

// The overflow mode as the proof keys name it.
inline const char* overflow_name(cuda::E4m3fnOverflow mode) {
  return mode == cuda::E4m3fnOverflow::kSaturate ? "saturate"
         : mode == cuda::E4m3fnOverflow::kNan    ? "nan"
                                                 : "wrap";
}

// The kernel's view of a MemoryOrder; nullopt when it has too many dimensions (the
// caller then takes the exact reference path).
inline std::optional<cuda::StridedLayout> to_layout(const MemoryOrder& order) {
  cuda::StridedLayout layout{};
  if (order.sizes.empty()) {  // one element
    layout.ndim = 1;
    layout.sizes[0] = 1;
    layout.strides[0] = 1;
    return layout;
  }
  if (order.sizes.size() > static_cast<size_t>(cuda::kMaxLayoutDims)) return std::nullopt;
  layout.ndim = static_cast<int>(order.sizes.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.sizes[d] = order.sizes[d];
    layout.strides[d] = order.strides[d];
  }
  return layout;
}

// Which of our conversions gives the bytes of `table` (torch's own copy_ of all 65536
// float16 bit patterns to `dtype`, on the device in question) on every finite input,
// the only inputs uniform_ produces. nullopt: none does (the caller then takes the
// exact reference path). Formats with one behaviour report kSaturate when they match.
inline std::optional<cuda::E4m3fnOverflow> pick_fp8_mode(c10::ScalarType dtype,
                                                         const uint8_t* table) {
  const cuda::Fp8Format format = fp8_format(dtype);
  for (const auto mode : overflow_modes(format)) {
    bool same = true;
    for (uint32_t h = 0; h < 65536 && same; ++h) {
      if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf and NaN: never produced
      same = cuda::half_to_fp8(static_cast<uint16_t>(h), format, mode) == table[h];
    }
    if (same) return mode;
  }
  return std::nullopt;
}

// Whether `hw_table` (our hardware pair conversion of all 65536 float16 bit patterns,
// made on the GPU) gives torch's bytes `torch_table` on every finite input within
// hw_limit: checked once per device and dtype, so that a hardware detail (say,
// subnormal inputs) can only ever cost speed, never bytes.
inline bool hw_table_agrees(c10::ScalarType dtype, cuda::E4m3fnOverflow mode,
                            const uint8_t* hw_table, const uint8_t* torch_table) {
  const float limit = cuda::hw_limit(fp8_format(dtype), mode);
  if (limit <= 0.0f) return false;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    if (std::fabs(cuda::half_to_float(static_cast<uint16_t>(h))) > limit) continue;
    if (hw_table[h] != torch_table[h]) return false;
  }
  return true;
}

// The largest |value| uniform_ can produce with these bounds: every value is a half
// rounded from a float in [from, from + range] (u in (0, 1]), then possibly replaced by
// from; with one float16 step of margin for the roundings.
inline float max_abs_uniform(const cuda::UniformParams& p) {
  const float a = std::fabs(p.from);
  const float b = std::fabs(p.from + p.range);
  return (a > b ? a : b) * (1.0f + 1.0f / 512.0f);
}

}  // namespace fp8_dummy
