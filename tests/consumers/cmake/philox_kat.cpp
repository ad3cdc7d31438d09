// Host code using fp8_dummy's torch-free device headers (fp8_dummy::cuda_headers)
// with a plain C++ compiler: Philox4x32-10 against Random123's known-answer vectors
// (the rows of tests/data/philox_kat.txt). Exit status 0 when all match.
#include <fp8_dummy/cuda/philox.h>

#include <cstdint>
#include <cstdio>

namespace {

struct Kat {
  uint32_t counter[4];
  uint32_t key[2];
  uint32_t expected[4];
};

constexpr Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

// The one place that names the device headers' Philox API.
void philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  const fp8_dummy::cuda::Words4 c{{counter[0], counter[1], counter[2], counter[3]}};
  const fp8_dummy::cuda::Words4 r = fp8_dummy::cuda::philox4x32_10(c, key[0], key[1]);
  for (int i = 0; i < 4; ++i) out[i] = r.w[i];
}

}  // namespace

int main() {
  int failures = 0;
  for (const Kat& kat : kKats) {
    uint32_t out[4];
    philox(kat.counter, kat.key, out);
    std::printf("%08x %08x %08x %08x\n", out[0], out[1], out[2], out[3]);
    for (int i = 0; i < 4; ++i) failures += out[i] != kat.expected[i];
  }
  std::printf("philox_kat: %s\n", failures == 0 ? "ok" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}
