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
