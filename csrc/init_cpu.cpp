// CPU kernel. FP8 tensors: random numbers come from torch's own uniform_ on a small
// float16 buffer (the CPU stream is one mt19937 word per element in memory order, so
// filling in pieces gives the reference's bytes), then go through a float16 -> FP8
// table built from torch's own copy_ and are scattered in the temp's memory order.
// Scratch: one 512 KiB buffer, whatever the tensor's size.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <mutex>

#include "common.h"
#include "strided_walk.h"

namespace fp8_dummy {
namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // float16 elements: 512 KiB of scratch

// Half bits -> FP8 byte for every one of the 65536 float16 values, made by the
// installed torch's CPU copy_, so the conversion (out-of-range values included,
// which changed across torch versions) is the reference's by construction.
const uint8_t* fp8_table(c10::ScalarType dtype) {
  static std::array<std::array<uint8_t, 65536>, 5> tables;
  static std::array<std::once_flag, 5> once;
  int slot = 0;
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
      slot = 0;
      break;
    case c10::ScalarType::Float8_e5m2:
      slot = 1;
      break;
    case c10::ScalarType::Float8_e4m3fnuz:
      slot = 2;
      break;
    case c10::ScalarType::Float8_e5m2fnuz:
      slot = 3;
      break;
    default:
      slot = 4;
      break;  // Float8_e8m0fnu
  }
  std::call_once(once[slot], [&] {
    const auto halves =
        at::arange(65536, at::TensorOptions().dtype(at::kInt)).to(at::kShort).view(at::kHalf);
    const auto bytes = halves.to(dtype).view(at::kByte).contiguous();
    std::memcpy(tables[slot].data(), bytes.const_data_ptr(), 65536);
  });
  return tables[slot].data();
}

void fill_fp8(const at::Tensor& self, double low, double high,
              const std::optional<at::Generator>& gen) {
  const int64_t n = self.numel();
  const uint8_t* table = fp8_table(self.scalar_type());
  StridedWalk walk(memory_order(self));
  auto* base = static_cast<uint8_t*>(self.mutable_data_ptr());
  auto buf = at::empty({std::min(n, kChunk)}, self.options().dtype(at::kHalf));
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(kChunk, n - done);
    auto piece = buf.narrow(0, 0, count);
    piece.uniform_(low, high, gen);
    const auto* src = static_cast<const uint16_t*>(piece.const_data_ptr());
    walk.next(count, [&](int64_t offset, int64_t stride, int64_t len, int64_t first) {
      uint8_t* dst = base + offset;
      const uint16_t* s = src + first;
      if (stride == 1) {
        for (int64_t i = 0; i < len; ++i) dst[i] = table[s[i]];
      } else {
        for (int64_t i = 0; i < len; ++i) dst[i * stride] = table[s[i]];
      }
    });
    done += count;
  }
}

void fill(const at::Tensor& self, double low, double high,
          const std::optional<at::Generator>& gen) {
  if (is_fp8(self.scalar_type())) {
    fill_fp8(self, low, high, gen);
  } else {
    // float16 and wider: the reference is uniform_ on the tensor itself.
    at::Tensor(self).uniform_(low, high, gen);
  }
}

void init_seed_cpu(at::Tensor& self, double low, double high, int64_t seed) {
  check_init_args(self, low, high);
  if (self.numel() == 0) return;  // the reference draws nothing either
  // Same state as torch.Generator().manual_seed(seed): mt19937 seeded with the low
  // 32 bits of the seed's two's-complement value.
  fill(self, low, high, at::detail::createCPUGenerator(static_cast<uint64_t>(seed)));
}

void init_generator_cpu(at::Tensor& self, double low, double high,
                        std::optional<at::Generator> gen) {
  check_init_args(self, low, high);
  TORCH_CHECK(!gen.has_value() || !gen->defined() || gen->device().is_cpu(),
              "fp8_dummy.init_: expected a generator of device type 'cpu' for a CPU tensor, "
              "got one of device '",
              gen.has_value() && gen->defined() ? gen->device().str() : "", "'");
  if (self.numel() == 0) return;
  fill(self, low, high, gen);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy, CPU, m) {
  m.impl("init_", TORCH_FN(init_seed_cpu));
  m.impl("init_.generator", TORCH_FN(init_generator_cpu));
}

}  // namespace fp8_dummy
