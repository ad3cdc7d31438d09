// The one proof mechanism (docs/contract.md, "Proof before use"): a path runs only where
// proven(key, probe) says so; a key's first call probes, the verdict is kept for the process
// and reported, a refusal warns once, a probe out of memory is no verdict (tried again).
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

// The state of `key`, probing it first unless decided; one probe at a time (a probe may ask
// for other keys). A throw refuses, but lack of memory or threads leaves it unproven.
State verdict(const std::string& key, const std::function<Verdict()>& probe,
              Warn warn = Warn::kOnRefusal);
inline bool proven(const std::string& key, const std::function<Verdict()>& probe,
                   Warn warn = Warn::kOnRefusal) {
  return verdict(key, probe, warn) == State::kProven;
}

// A verdict reached in Python (the engines); a decided key keeps its verdict, returned.
State record(const std::string& key, State state, const std::string& detail,
             Warn warn = Warn::kOnRefusal);

// Never probes (inside CUDA graph capture).
State lookup(const std::string& key);

std::vector<Entry> report();  // in the order first needed

// Tests: forgets the keys starting with `prefix`; returns how many.
int64_t forget(const std::string& prefix);

// Changes whenever record() adds or decides a key (the verdicts reached in Python: the
// engines') or keys are forgotten: the engines' whole-model plan, made from those verdicts
// and kept for the next fill, is made again. (The operators' own keys decide nothing there.)
int64_t generation();

// Where refusal warnings go instead of TORCH_WARN, which torch.ops calls do not forward to
// Python (ops.cpp installs Python's).
void set_warning_sink(void (*sink)(const std::string& message));

// Whether FP8_DUMMY_FAULT names `path` (docs/development.md), whose outputs then corrupt().
bool fault(const std::string& path);
// Throws, naming the valid ones, if FP8_DUMMY_FAULT names an unknown fault: every operator's
// argument checks call it, so a mistyped switch fails before anything is written.
void check_fault_switch();
// Flips the lowest bit of the byte `byte` bytes past t's first (its first by default).
void corrupt(const at::Tensor& t, int64_t byte = 0);

// Probe layouts, the kinds kernels branch on: one run of memory (aligned or odd address), a
// view with gaps (every other column), a transposed one (a contiguous temp's strided walk).
enum class Layout { kDense, kUnaligned, kGaps, kRowMajor };

// A probe of at least n elements in that layout (5 columns), every byte 0x55 (on the CPU by
// memset: no OpenMP pool starts, which would hang a process forked after it).
at::Tensor make_probe(const at::TensorOptions& options, int64_t n, Layout layout);

// The logical elements of two tensors of one shape and dtype (any devices), byte for byte.
Verdict same_bytes(const at::Tensor& ours, const at::Tensor& ref, const std::string& what);

}  // namespace proof
}  // namespace fp8_dummy
