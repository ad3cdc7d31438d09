// The seed form of init_ on small CPU tensors: every tensor of a call starts from a fresh
// torch.Generator().manual_seed(seed), so each gets the first values of one stream. They are
// made once per (seed, dtype, bounds), by the reference itself on kFirstValues elements, and
// each small tensor whose random numbers go to memory in order gets a copy of its first
// numel(): no generator, no draw. Proven per dtype and temp (keys "cpu.init_: first values").
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace fp8_dummy {
namespace cpu {

// The largest tensor that takes the first values (elements): above it the tensor's own work
// (about a nanosecond an element) outweighs the usual path's start (a generator seeded, a
// plan, a proof's lookup: microseconds). At most 32 KiB a key (float64).
constexpr int64_t kFirstValues = 4096;

// One call's first values (init_, or a whole init_many_): looked up once per dtype.
class FirstValues {
 public:
  FirstValues(double low, double high, int64_t seed, bool contiguous_temp);

  // Fills `self` (CPU, checked, numel() > 0) with the reference's bytes and returns true, or
  // writes nothing and returns false (too large, an order that is not memory order, not
  // proven, FP8_DUMMY_CPU_PATH other than auto): the caller's usual path then.
  bool fill(const at::Tensor& self);

 private:
  struct Slot {
    c10::ScalarType dtype;
    std::shared_ptr<const std::vector<uint8_t>> bytes;  // null: not usable for this call
  };
  const Slot& slot(c10::ScalarType dtype);

  double low_, high_;
  int64_t seed_;
  bool contiguous_temp_;
  bool enabled_;
  bool fault_;  // FP8_DUMMY_FAULT=cpu.first_values
  c10::SmallVector<Slot, 4> slots_;
};

}  // namespace cpu
}  // namespace fp8_dummy
