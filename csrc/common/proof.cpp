#include "common/proof.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

// Read by Python through ctypes (a plain load: cheaper than an operator call after every fill).
extern "C" {
__attribute__((visibility("default"))) std::atomic<int64_t> fp8_dummy_proof_pending{0};
}

namespace fp8_dummy {
namespace proof {
namespace {

struct Registry {
  // Recursive: a probe may need another key's verdict (e.g. a CUDA probe needs the
  // conversion found for its dtype), on the same thread.
  std::recursive_mutex mutex;
  std::map<std::string, size_t> index;  // key -> position in entries
  std::vector<Entry> entries;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: probes may run at exit
  return *r;
}

// Python turns these into Python warnings (fp8_dummy/_proof.py): TORCH_WARN does not
// reach Python's warnings from a torch.ops call, so there the messages wait in `pending`
// (the count in fp8_dummy_proof_pending, which Python reads without a call) until the
// wrapper that made the call takes them. Elsewhere (C++ users) TORCH_WARN prints them.
std::atomic<bool> deferred{false};
std::mutex pending_mutex;
std::vector<std::string> pending;

void warn_refused(const Entry& e) {
  std::string message = "fp8_dummy: self-check refused " + e.key + ": " + e.detail +
                        ". The reference path is used for it from now on.";
  if (deferred.load()) {
    std::lock_guard<std::mutex> lock(pending_mutex);
    pending.push_back(std::move(message));
    fp8_dummy_proof_pending.store(static_cast<int64_t>(pending.size()));
    return;
  }
  TORCH_WARN(message);
}

// Stores a verdict (the first one wins); returns the stored entry and whether it is new.
std::pair<Entry, bool> store(const std::string& key, bool passed, const std::string& detail) {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  const auto it = r.index.find(key);
  if (it != r.index.end()) return {r.entries[it->second], false};
  r.index.emplace(key, r.entries.size());
  r.entries.push_back({key, passed, detail});
  return {r.entries.back(), true};
}

std::string error_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace

bool proven(const std::string& key, const std::function<Verdict()>& probe, Warn warn) {
  Registry& r = registry();
  std::unique_lock<std::recursive_mutex> lock(r.mutex);
  const auto it = r.index.find(key);
  if (it != r.index.end()) return r.entries[it->second].passed;
  Verdict v;
  try {
    v = probe();
  } catch (const std::exception& e) {
    v = {false, "the probe failed: " + error_text(e)};
  }
  const auto [entry, fresh] = store(key, v.passed, v.detail);
  lock.unlock();
  if (fresh && !entry.passed && warn == Warn::kOnRefusal) warn_refused(entry);
  return entry.passed;
}

bool record(const std::string& key, bool passed, const std::string& detail, Warn warn) {
  const auto [entry, fresh] = store(key, passed, detail);
  if (fresh && !entry.passed && warn == Warn::kOnRefusal) warn_refused(entry);
  return entry.passed;
}

int lookup(const std::string& key) {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  const auto it = r.index.find(key);
  return it == r.index.end() ? -1 : (r.entries[it->second].passed ? 1 : 0);
}

std::vector<Entry> report() {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  return r.entries;
}

std::atomic<uint32_t> forgotten_epoch{0};

uint32_t epoch() { return forgotten_epoch.load(std::memory_order_acquire); }

int64_t forget(const std::string& prefix) {
  forgotten_epoch.fetch_add(1, std::memory_order_acq_rel);
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  std::vector<Entry> kept;
  for (auto& e : r.entries) {
    if (e.key.compare(0, prefix.size(), prefix) != 0) kept.push_back(std::move(e));
  }
  const auto forgotten = static_cast<int64_t>(r.entries.size() - kept.size());
  r.entries = std::move(kept);
  r.index.clear();
  for (size_t i = 0; i < r.entries.size(); ++i) r.index.emplace(r.entries[i].key, i);
  return forgotten;
}

std::string path_of(const std::string& key) { return key.substr(0, key.find(':')); }

bool fault(const std::string& path) {
  static const std::vector<std::string> faults = [] {
    std::vector<std::string> out;
    const char* env = std::getenv("FP8_DUMMY_FAULT");
    std::stringstream list(env ? env : "");
    for (std::string item; std::getline(list, item, ',');) {
      if (!item.empty()) out.push_back(item);
    }
    return out;
  }();
  for (const auto& f : faults) {
    if (f == path) return true;
  }
  return false;
}

void corrupt(const at::Tensor& t) {
  if (t.numel() == 0) return;
  // A one-byte uint8 view of the first byte of t's data, whatever t's dtype and strides.
  auto byte = at::empty({0}, t.options().dtype(at::kByte));
  byte.set_(t.storage(), t.storage_offset() * static_cast<int64_t>(t.element_size()), {1}, {1});
  byte.bitwise_xor_(1);
}

Verdict same_bytes(const at::Tensor& ours, const at::Tensor& ref, const std::string& what) {
  TORCH_CHECK(ours.sizes() == ref.sizes() && ours.scalar_type() == ref.scalar_type(),
              "fp8_dummy: same_bytes needs tensors of one shape and dtype");
  const auto a = ours.to(at::kCPU).contiguous();
  const auto b = ref.to(at::kCPU).contiguous();
  const auto size = static_cast<int64_t>(a.element_size());
  const auto* pa = static_cast<const uint8_t*>(a.const_data_ptr());
  const auto* pb = static_cast<const uint8_t*>(b.const_data_ptr());
  const int64_t bytes = a.numel() * size;
  for (int64_t i = 0; i < bytes; ++i) {
    if (pa[i] != pb[i]) {
      char buf[160];
      std::snprintf(
          buf, sizeof(buf),
          "%s: first differing byte at element %lld (byte %lld): 0x%02x, the reference 0x%02x",
          what.c_str(), static_cast<long long>(i / size), static_cast<long long>(i % size), pa[i],
          pb[i]);
      return {false, buf};
    }
  }
  return {true, ""};
}

}  // namespace proof

namespace {

std::vector<std::string> proof_report_op() {
  std::vector<std::string> flat;
  for (const auto& e : proof::report()) {
    flat.push_back(e.key);
    flat.push_back(e.passed ? "proven" : "refused");
    flat.push_back(e.detail);
  }
  return flat;
}

int64_t proof_lookup_op(c10::string_view key) { return proof::lookup(std::string(key)); }

bool proof_record_op(c10::string_view key, bool passed, c10::string_view detail) {
  return proof::record(std::string(key), passed, std::string(detail));
}

bool proof_fault_op(c10::string_view path) { return proof::fault(std::string(path)); }

int64_t proof_forget_op(c10::string_view prefix) { return proof::forget(std::string(prefix)); }

void proof_defer_warnings_op(bool defer) { proof::deferred.store(defer); }

std::vector<std::string> proof_take_warnings_op() {
  std::lock_guard<std::mutex> lock(proof::pending_mutex);
  std::vector<std::string> out;
  out.swap(proof::pending);
  fp8_dummy_proof_pending.store(0);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("proof_report", TORCH_FN(proof_report_op));
  m.impl("proof_lookup", TORCH_FN(proof_lookup_op));
  m.impl("proof_record", TORCH_FN(proof_record_op));
  m.impl("proof_fault", TORCH_FN(proof_fault_op));
  m.impl("proof_forget", TORCH_FN(proof_forget_op));
  m.impl("proof_defer_warnings", TORCH_FN(proof_defer_warnings_op));
  m.impl("proof_take_warnings", TORCH_FN(proof_take_warnings_op));
}

}  // namespace fp8_dummy
