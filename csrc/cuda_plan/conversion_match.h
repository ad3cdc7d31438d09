// The CUDA conversion search, host side (device side: cuda/conversion_search.cu): which of our
// conversions gives torch's CUDA copy_ bytes, and whether the hardware one may stand in.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cmath>
#include <optional>

#include "common/reference.h"
#include "fp8_dummy/cuda/fp8_convert.h"
#include "fp8_dummy/cuda/uniform.h"

namespace fp8_dummy {

struct Fp8Conversion {
  cuda::E4m3fnOverflow mode;
  bool hw;  // the hardware pair conversion gives torch's bytes within cuda::hw_limit
};

// The overflow modes a format can have, in the order they are tried.
inline std::array<cuda::E4m3fnOverflow, 2> overflow_modes(cuda::Fp8Format format) {
  if (cuda::is_integer_format(format)) {
    return {cuda::E4m3fnOverflow::kWrap, cuda::E4m3fnOverflow::kSaturate};
  }
  return {cuda::E4m3fnOverflow::kSaturate, cuda::E4m3fnOverflow::kNan};
}

// The emulator's `saturate_e4m3fn` flag as a mode: saturation, else the format's other mode.
inline cuda::E4m3fnOverflow emulated_overflow(cuda::Fp8Format format, bool saturate) {
  if (saturate) return cuda::E4m3fnOverflow::kSaturate;
  return cuda::is_integer_format(format) ? cuda::E4m3fnOverflow::kWrap : cuda::E4m3fnOverflow::kNan;
}

inline const char* overflow_name(cuda::E4m3fnOverflow mode) {  // as the proof keys name it
  return mode == cuda::E4m3fnOverflow::kSaturate ? "saturate"
         : mode == cuda::E4m3fnOverflow::kNan    ? "nan"
                                                 : "wrap";
}

// The conversion giving `torch_table`'s bytes on every finite input (all uniform_ makes), or
// nullopt; hw_table (null: none) is checked within hw_limit, so hardware can cost only speed.
inline std::optional<Fp8Conversion> match_conversion(c10::ScalarType dtype,
                                                     const uint8_t* torch_table,
                                                     const uint8_t* hw_table) {
  const cuda::Fp8Format format = fp8_format(dtype);
  auto finite = [](uint32_t h) { return ((h >> 10) & 0x1f) != 0x1f; };
  for (const auto mode : overflow_modes(format)) {
    bool same = true;
    for (uint32_t h = 0; h < 65536 && same; ++h) {
      same =
          !finite(h) || cuda::half_to_fp8(static_cast<uint16_t>(h), format, mode) == torch_table[h];
    }
    if (!same) continue;
    const float limit = cuda::hw_limit(format, mode);
    bool hw = hw_table != nullptr && limit > 0.0f;
    for (uint32_t h = 0; h < 65536 && hw; ++h) {
      const bool used =
          finite(h) && std::fabs(cuda::half_to_float(static_cast<uint16_t>(h))) <= limit;
      hw = !used || hw_table[h] == torch_table[h];
    }
    return Fp8Conversion{mode, hw};
  }
  return std::nullopt;
}

// Whether these bounds may use the hardware conversion: values are halves rounded from
// [from, from + range], with a float16 step of margin.
inline bool use_hw_conversion(const Fp8Conversion& c, cuda::Fp8Format format,
                              const cuda::UniformParams& p) {
  const float most =
      std::fmax(std::fabs(p.from), std::fabs(p.from + p.range)) * (1.0f + 1.0f / 512.0f);
  return c.hw && cuda::hw_conversion_ok(format, c.mode, most);
}

}  // namespace fp8_dummy
