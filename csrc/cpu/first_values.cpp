// See first_values.h.
#include "cpu/first_values.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "common/proof.h"
#include "common/reference.h"

namespace fp8_dummy {
namespace cpu {
namespace {

using Bytes = std::vector<uint8_t>;

// Whether the reference hands `self`'s elements their random numbers in memory order from its
// first byte: a 1-byte tensor whose temp's order is one run (cpu/init_cpu.cpp's dense layouts),
// a wider one that uniform_ walks in memory order (dense, any permutation).
bool in_memory_order(const at::Tensor& self, bool contiguous_temp) {
  if (self.is_contiguous()) return true;
  if (!self.is_non_overlapping_and_dense()) return false;
  return !uses_half_temp(self.scalar_type()) || memory_order(self, contiguous_temp).linear();
}

// The reference on a fresh generator seeded with `seed`: `self` as an init_ call fills it.
void reference_fill(const at::Tensor& self, double low, double high, int64_t seed,
                    bool contiguous_temp) {
  const at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  if (uses_half_temp(self.scalar_type())) {
    reference_path(self, low, high, gen, contiguous_temp);
  } else {
    at::Tensor(self).uniform_(low, high, gen);
  }
}

// The first kFirstValues elements' bytes of (seed, dtype, bounds, temp), made once per
// process by the reference on a one-dimensional tensor (at most 64 MiB of them kept).
std::shared_ptr<const Bytes> first_bytes(int64_t seed, c10::ScalarType dtype, double low,
                                         double high, bool contiguous_temp) {
  using Key = std::tuple<int64_t, int, uint64_t, uint64_t, bool>;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Bytes>> made;
  uint64_t lo, hi;
  std::memcpy(&lo, &low, sizeof lo);
  std::memcpy(&hi, &high, sizeof hi);
  const Key key{seed, static_cast<int>(dtype), lo, hi, contiguous_temp};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = made.find(key); it != made.end()) return it->second;
  }
  const at::Tensor t = at::empty({kFirstValues}, at::TensorOptions().dtype(dtype));
  reference_fill(t, low, high, seed, contiguous_temp);
  const auto* data = static_cast<const uint8_t*>(t.const_data_ptr());
  auto bytes = std::make_shared<const Bytes>(data, data + t.numel() * t.element_size());
  static size_t kept = 0;  // bytes, under `mutex`
  const std::lock_guard<std::mutex> lock(mutex);
  if (kept + bytes->size() > (size_t{64} << 20)) {
    made.clear();
    kept = 0;
  }
  kept += bytes->size();
  return made.emplace(key, std::move(bytes)).first->second;
}

// init_'s path on the CPU (keys "cpu.init_: first values ...", FP8_DUMMY_FAULT=cpu.init_).
constexpr const char* kPath = "cpu.init_";

// The path itself: the first numel() values, then the fault.
void write_first(const at::Tensor& self, const Bytes& bytes, bool fault) {
  std::memcpy(self.mutable_data_ptr(), bytes.data(),
              static_cast<size_t>(self.numel() * static_cast<int64_t>(self.element_size())));
  if (fault) proof::corrupt(self);
}

// Against the reference on fresh generators, poisoned tensors of every size class (a 0-dim
// one, a block's edge at 624, the largest) and layout a call takes (row-major, transposed,
// permuted: those in memory order under this temp).
proof::Verdict probe(c10::ScalarType dtype, const Bytes& bytes, double low, double high,
                     int64_t seed, bool contiguous_temp) {
  const auto options = at::TensorOptions().dtype(dtype);
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {1}, {3}, {624}, {625}, {1001}, {kFirstValues}, {64, 64}, {7, 13}, {3, 4, 5}};
  const auto make = [&](const std::vector<int64_t>& shape, int kind) {
    at::Tensor p = at::empty(shape, options);
    if (kind == 1) p = p.t();
    if (kind == 2) p = p.permute({2, 0, 1});
    std::memset(p.storage().mutable_data(), 0x55, p.storage().nbytes());
    return p;
  };
  for (const auto& shape : shapes) {
    for (int kind = 0; kind < 3; ++kind) {
      if ((kind == 1 && shape.size() != 2) || (kind == 2 && shape.size() != 3)) continue;
      at::Tensor ours = make(shape, kind), ref = make(shape, kind);
      if (!in_memory_order(ours, contiguous_temp)) continue;  // a call takes the usual path
      write_first(ours, bytes, proof::fault(kPath));
      reference_fill(ref, low, high, seed, contiguous_temp);
      const proof::Verdict v = proof::same_bytes(ours, ref, "first values");
      if (!v.passed) return v;
    }
  }
  return {true, ""};
}

}  // namespace

namespace {

// Per (dtype, temp): 1 + the proof registry's generation at which the key was found proven, 0
// none (a verdict stands until keys are forgotten, which changes the generation): init_ on
// one small tensor makes no key text then.
std::atomic<int64_t>& proven_at(c10::ScalarType dtype, int temp) {
  static std::atomic<int64_t> known[3 * 64] = {};
  return known[static_cast<int>(dtype) % 64 * 3 + temp];
}

}  // namespace

FirstValues::FirstValues(double low, double high, int64_t seed, bool contiguous_temp)
    : low_(low), high_(high), seed_(seed), contiguous_temp_(contiguous_temp) {
  // A path chosen by FP8_DUMMY_CPU_PATH (exact, fast, a SIMD level, or a mistyped one that
  // init_ refuses) is the path that runs: the first values only where it says auto.
  const char* path = std::getenv("FP8_DUMMY_CPU_PATH");
  enabled_ = path == nullptr || *path == '\0' || std::strcmp(path, "auto") == 0;
  static const bool fault = proof::fault(kPath);  // FP8_DUMMY_FAULT is read once
  fault_ = fault;
}

const FirstValues::Slot& FirstValues::slot(c10::ScalarType dtype) {
  for (const Slot& s : slots_) {
    if (s.dtype == dtype) return s;
  }
  Slot s{dtype, nullptr};
  try {
    auto bytes = first_bytes(seed_, dtype, low_, high_, contiguous_temp_);
    const int temp = !uses_half_temp(dtype) ? 0 : contiguous_temp_ ? 1 : 2;
    std::atomic<int64_t>& known = proven_at(dtype, temp);
    const int64_t generation = proof::generation();
    bool proven = known.load() == generation + 1;
    if (!proven) {
      const char* names[] = {"temp=none", "temp=contiguous", "temp=empty_like"};
      const std::string key =
          proof::key(kPath, {"first values", c10::toString(dtype), names[temp]});
      proven = proof::proven(
          key, [&] { return probe(dtype, *bytes, low_, high_, seed_, contiguous_temp_); });
      if (proven) known.store(generation + 1);
    }
    if (proven) s.bytes = std::move(bytes);
  } catch (const std::exception&) {
    // The reference refused these values (torch's own bounds checks): the usual path raises
    // that error for the tensor itself, at its moment.
  }
  slots_.push_back(std::move(s));
  return slots_.back();
}

bool FirstValues::fill(const at::Tensor& self) {
  if (!enabled_ || self.numel() > kFirstValues || !in_memory_order(self, contiguous_temp_)) {
    return false;
  }
  const Slot& s = slot(self.scalar_type());
  if (!s.bytes) return false;
  write_first(self, *s.bytes, fault_);
  return true;
}

}  // namespace cpu
}  // namespace fp8_dummy
