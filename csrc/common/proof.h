// The one proof mechanism (docs/contract.md, "Proof before use"): every path that replaces a
// reference without the user asking (the CPU fast path of init_ and random_, the CUDA
// per-tensor, batched and stateless kernels, the engine integrations in Python) asks
// proven(key, probe) before it runs. The key names everything that selects the code path
// (device, dtype, bounds class, layout kind, generator form, ...); the first call with a key
// runs its probe, which fills probe tensors both ways and compares every byte (and the
// generator state); the verdict is cached for the process, listed by report()
// (fp8_dummy.self_check_report()), and a refusal warns once, naming the key and the first
// differing byte. A refused or failing key means: the reference for it from then on.
//
// FP8_DUMMY_FAULT (read once; a comma-separated list of path names such as cuda.init_ or
// vllm) makes those paths corrupt one byte of every output, so tests can show that a broken
// path is caught and replaced (docs/development.md). Off by default.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace fp8_dummy {
namespace proof {

struct Verdict {
  bool passed = false;
  std::string detail;  // refused: why (first differing byte, or the probe's error)
};

struct Entry {
  std::string key;
  bool passed;
  std::string detail;
};

// Candidates searched for (which of the transforms torch has used is this torch's) are
// reported but do not warn when refused: only the path that would have run does.
enum class Warn { kOnRefusal, kNever };

// Whether the path named `key` is proven in this process. The first call runs `probe` (one
// probe at a time in the process; a probe may ask for other keys); a probe that throws is a
// refusal, with the error as the detail.
bool proven(const std::string& key, const std::function<Verdict()>& probe,
            Warn warn = Warn::kOnRefusal);

// A verdict reached elsewhere (the engine integrations' probes run in Python): cached,
// reported and warned about as proven() does; returns `passed`. A key already known keeps
// its first verdict (which is returned).
bool record(const std::string& key, bool passed, const std::string& detail,
            Warn warn = Warn::kOnRefusal);

// -1: not probed yet, 0: refused, 1: proven. Never probes (e.g. inside CUDA graph capture).
int lookup(const std::string& key);

// Every key probed or recorded in this process, in that order.
std::vector<Entry> report();

// Tests only: forgets every key starting with `prefix`, so the next call probes again.
// Returns how many were forgotten.
int64_t forget(const std::string& prefix);

// The path name of a key: what precedes its first ':' (the name FP8_DUMMY_FAULT uses).
std::string path_of(const std::string& key);

// Bumped by forget(): memos (below) drop what they remember.
uint32_t epoch();

// A memo of the registry's verdicts for one path whose branch parameters pack into a small
// code: a hit is one atomic load, so a call does not rebuild its key's text (a few
// microseconds) to look it up. The registry stays the one record: a miss asks it (which
// probes once per key), and forget() empties every memo.
template <size_t N>
class Memo {
 public:
  Memo() {
    for (auto& s : state_) s.store(-1, std::memory_order_relaxed);
  }

  // proven(key(), probe), remembered under `code` (< N).
  template <class KeyFn>
  bool proven(size_t code, KeyFn&& key, const std::function<Verdict()>& probe) {
    TORCH_INTERNAL_ASSERT(code < N, "fp8_dummy: proof memo code out of range");
    refresh();
    const int8_t known = state_[code].load(std::memory_order_acquire);
    if (known >= 0) return known == 1;
    const bool passed = proof::proven(key(), probe);
    state_[code].store(passed ? 1 : 0, std::memory_order_release);
    return passed;
  }

  // lookup(key()) == 1, remembered once known (inside CUDA graph capture: never probes).
  template <class KeyFn>
  bool known_proven(size_t code, KeyFn&& key) {
    TORCH_INTERNAL_ASSERT(code < N, "fp8_dummy: proof memo code out of range");
    refresh();
    const int8_t known = state_[code].load(std::memory_order_acquire);
    if (known >= 0) return known == 1;
    const int found = lookup(key());
    if (found >= 0) state_[code].store(static_cast<int8_t>(found), std::memory_order_release);
    return found == 1;
  }

 private:
  void refresh() {
    const uint32_t now = epoch();
    if (seen_.load(std::memory_order_acquire) != now) {
      for (auto& s : state_) s.store(-1, std::memory_order_relaxed);
      seen_.store(now, std::memory_order_release);
    }
  }
  std::array<std::atomic<int8_t>, N> state_;
  std::atomic<uint32_t> seen_{0};
};

// Whether FP8_DUMMY_FAULT names `path`.
bool fault(const std::string& path);

// Flips the lowest bit of the byte at t's data pointer (any device, any dtype): the injected
// fault. No-op for empty tensors.
void corrupt(const at::Tensor& t);

// Compares the logical elements of two tensors of one shape and dtype (any devices) byte
// for byte: passed, or the first differing element with both bytes in hex.
Verdict same_bytes(const at::Tensor& ours, const at::Tensor& ref, const std::string& what);

}  // namespace proof
}  // namespace fp8_dummy
