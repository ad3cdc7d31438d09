// The one proof mechanism (docs/contract.md, "Proof before use"): a path that replaces a
// reference runs only where proven(key, probe) says so; the key's first call runs the probe
// (both on scratch tensors, every byte compared), the verdict is kept for the process and
// reported, a refusal warns once. A probe out of memory is no verdict (probed again later).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace fp8_dummy {
namespace proof {

enum class State { kUnproven, kRefused, kProven };

// A key's text: "path: part part ...", the path being what FP8_DUMMY_FAULT names.
std::string key(std::string_view path, std::initializer_list<std::string_view> parts);

struct Verdict {
  bool passed = false;
  std::string detail;  // refused: what differs
};

struct Entry {
  std::string key;
  State state;
  std::string detail;  // refused: why; unproven: why the probe failed
};

// Candidates of a search (cpu/fast_path.cpp) are reported but do not warn when refused.
enum class Warn { kOnRefusal, kNever };

// The state of `key`, probing it first unless proven or refused. One probe at a time in the
// process (a probe may ask for other keys). A probe that throws is a refusal, except for
// lack of memory or threads (unproven: tried again by the next call).
State verdict(const std::string& key, const std::function<Verdict()>& probe,
              Warn warn = Warn::kOnRefusal);
inline bool proven(const std::string& key, const std::function<Verdict()>& probe,
                   Warn warn = Warn::kOnRefusal) {
  return verdict(key, probe, warn) == State::kProven;
}

// A verdict reached elsewhere (the engines' probes, in Python); a key already decided keeps
// its verdict, which is returned.
State record(const std::string& key, State state, const std::string& detail,
             Warn warn = Warn::kOnRefusal);

// Never probes (inside CUDA graph capture).
State lookup(const std::string& key);

std::vector<Entry> report();  // in the order first needed

// Tests: forgets the keys starting with `prefix`; returns how many.
int64_t forget(const std::string& prefix);

// Where refusal warnings go instead of TORCH_WARN, which torch does not forward to Python
// from torch.ops calls (ops.cpp installs Python's; it throws where a filter says "error").
void set_warning_sink(void (*sink)(const std::string& message));

// FP8_DUMMY_FAULT (docs/development.md, "Fault injection"): whether it names `path`, whose
// outputs then get one byte corrupted by corrupt() (the first byte's lowest bit).
bool fault(const std::string& path);
void corrupt(const at::Tensor& t);

// The logical elements of two tensors of one shape and dtype (any devices), byte for byte.
Verdict same_bytes(const at::Tensor& ours, const at::Tensor& ref, const std::string& what);

}  // namespace proof
}  // namespace fp8_dummy
