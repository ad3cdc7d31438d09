#include "common/proof.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <shared_mutex>
#include <sstream>
#include <system_error>
#include <unordered_map>

namespace fp8_dummy {
namespace proof {
namespace {

struct Registry {
  std::shared_mutex mutex;  // the verdicts: a call's lookup takes it shared
  std::unordered_map<std::string, size_t> index;
  std::vector<Entry> entries;
  std::recursive_mutex probing;  // one probe at a time; a probe may need another key
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: probes may run at exit
  return *r;
}

std::atomic<void (*)(const std::string&)> warning_sink{nullptr};
std::atomic<int64_t> changes{0};  // generation()

// The paths FP8_DUMMY_FAULT may name (docs/development.md); ":oom" only for the C++ ones,
// whose probes go through verdict().
constexpr const char* kCppPaths[] = {"cpu.init_", "cpu.random_", "cuda.init_", "cuda.init_many_",
                                     "cuda.init_stateless_"};
constexpr const char* kPythonPaths[] = {"vllm", "sglang", "trtllm"};

// A fault of one branch only: the linear CUDA kernel's checked stores (a dense tensor not
// 16-byte aligned), which only a probe that runs that branch catches.
constexpr const char* kBranchFaults[] = {"cuda.init_:checked-stores"};

bool known_fault(const std::string& item) {
  for (const char* p : kBranchFaults) {
    if (item == p) return true;
  }
  for (const char* p : kCppPaths) {
    if (item == p || item == std::string(p) + ":oom") return true;
  }
  for (const char* p : kPythonPaths) {
    if (item == p) return true;
  }
  return false;
}

// FP8_DUMMY_FAULT's items, read once ("path", "path:oom"). An unknown item is an error at the
// first use (and every later one): a mistyped fault would otherwise test nothing, silently.
const std::vector<std::string>& faults() {
  static const std::vector<std::string> items = [] {
    std::vector<std::string> out;
    const char* env = std::getenv("FP8_DUMMY_FAULT");
    std::stringstream list(env ? env : "");
    for (std::string item; std::getline(list, item, ',');) {
      const auto first = item.find_first_not_of(" \t");
      item = first == std::string::npos
                 ? ""
                 : item.substr(first, item.find_last_not_of(" \t") - first + 1);
      if (item.empty()) continue;
      if (!known_fault(item)) {
        std::string valid;
        for (const char* p : kCppPaths) ((valid += p) += ", ") += std::string(p) + ":oom, ";
        for (const char* p : kBranchFaults) (valid += p) += ", ";
        for (const char* p : kPythonPaths) (valid += p) += ", ";
        valid.resize(valid.size() - 2);
        TORCH_CHECK(false, "fp8_dummy: FP8_DUMMY_FAULT=", env, ": unknown fault '", item,
                    "'; valid ones (a comma-separated list; a test switch, unset it in "
                    "production): ",
                    valid);
      }
      out.push_back(item);
    }
    return out;
  }();
  return items;
}

std::string path_of(const std::string& key) { return key.substr(0, key.find(':')); }

// Stores a verdict unless the key is decided; the entry kept and whether this call decided it.
std::pair<Entry, bool> store(const std::string& key, State state, const std::string& detail) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  const auto [it, added] = r.index.try_emplace(key, r.entries.size());
  if (added) r.entries.push_back({key, state, detail});
  Entry& e = r.entries[it->second];
  const bool decides = e.state == State::kUnproven && state != State::kUnproven;
  if (!added && e.state == State::kUnproven) e = {key, state, detail};
  return {e, added || decides};
}

void warn_if_refused(const Entry& entry, bool fresh, Warn warn) {
  if (!fresh || entry.state != State::kRefused || warn != Warn::kOnRefusal) return;
  const std::string message = "fp8_dummy: self-check refused " + entry.key + ": " + entry.detail +
                              ". The reference path is used for it from now on.";
  if (auto* sink = warning_sink.load()) {
    sink(message);
  } else {
    TORCH_WARN(message);
  }
}

// Lack of memory or threads: no verdict on the path (CPU allocations fail as c10::Error).
bool transient(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e) ||
      dynamic_cast<const std::system_error*>(&e)) {
    return true;
  }
  const std::string what = e.what();
  return what.find("out of memory") != std::string::npos ||
         what.find("allocate memory") != std::string::npos;
}

}  // namespace

std::string key(std::string_view path, std::initializer_list<std::string_view> parts) {
  std::string out(path);
  out += ':';
  for (const auto p : parts) (out += ' ') += p;
  return out;
}

State lookup(const std::string& key) {
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  const auto it = r.index.find(key);
  return it == r.index.end() ? State::kUnproven : r.entries[it->second].state;
}

State verdict(const std::string& key, const std::function<Verdict()>& probe, Warn warn) {
  if (const State s = lookup(key); s != State::kUnproven) return s;
  std::unique_lock<std::recursive_mutex> probing(registry().probing);
  if (const State s = lookup(key); s != State::kUnproven) return s;
  const auto& fault_items = faults();  // an unknown fault throws here, not as a refusal
  State state = State::kRefused;
  std::string detail;
  try {
    static std::set<std::string> oom_done;  // under `probing`
    const std::string oom = path_of(key) + ":oom";
    for (const auto& f : fault_items) {
      if (f == oom && oom_done.insert(f).second) throw std::bad_alloc();
    }
    const Verdict v = probe();
    state = v.passed ? State::kProven : State::kRefused;
    detail = v.detail;
  } catch (const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10 ? c10->what_without_backtrace() : e.what();
    state = transient(e) ? State::kUnproven : State::kRefused;
    detail = state == State::kUnproven ? "unproven: the probe failed: " + what + " (will retry)"
                                       : "the probe failed: " + what;
  }
  const auto [entry, fresh] = store(key, state, detail);
  probing.unlock();
  warn_if_refused(entry, fresh, warn);
  return entry.state;
}

State record(const std::string& key, State state, const std::string& detail, Warn warn) {
  const auto [entry, fresh] = store(key, state, detail);
  if (fresh) changes.fetch_add(1);
  warn_if_refused(entry, fresh, warn);
  return entry.state;
}

std::vector<Entry> report() {
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  return r.entries;
}

int64_t forget(const std::string& prefix) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  std::vector<Entry> kept;
  for (auto& e : r.entries) {
    if (e.key.compare(0, prefix.size(), prefix) != 0) kept.push_back(std::move(e));
  }
  const auto forgotten = static_cast<int64_t>(r.entries.size() - kept.size());
  r.entries = std::move(kept);
  r.index.clear();
  for (size_t i = 0; i < r.entries.size(); ++i) r.index.emplace(r.entries[i].key, i);
  changes.fetch_add(1);
  return forgotten;
}

int64_t generation() { return changes.load(); }

void set_warning_sink(void (*sink)(const std::string&)) { warning_sink.store(sink); }

void check_fault_switch() { faults(); }

bool fault(const std::string& path) {
  for (const auto& f : faults()) {
    if (f == path) return true;
  }
  return false;
}

void corrupt(const at::Tensor& t, int64_t byte) {
  if (t.numel() == 0) return;
  auto one = at::empty({0}, t.options().dtype(at::kByte));  // a byte of t, any dtype
  one.set_(t.storage(), t.storage_offset() * static_cast<int64_t>(t.element_size()) + byte, {1},
           {1});
  one.bitwise_xor_(1);
}

at::Tensor make_probe(const at::TensorOptions& options, int64_t n, Layout layout) {
  at::Tensor p;
  if (layout == Layout::kDense) {
    p = at::empty({n}, options);
  } else if (layout == Layout::kUnaligned) {  // one element in: an odd address
    p = at::empty({n + 1}, options).narrow(0, 1, n);
  } else if (layout == Layout::kGaps) {  // every other column of a row-major block
    p = at::empty({(n + 4) / 5, 10}, options).slice(1, 0, 10, 2);
  } else {  // every other row of a block of 10 rows, transposed
    p = at::empty({10, (n + 4) / 5}, options).slice(0, 0, 10, 2).t();
  }
  if (p.is_cpu()) {
    std::memset(p.storage().mutable_data(), 0x55, p.storage().nbytes());
  } else {
    at::empty({0}, options.dtype(at::kByte)).set_(p.storage()).fill_(0x55);
  }
  return p;
}

Verdict same_bytes(const at::Tensor& ours, const at::Tensor& ref, const std::string& what) {
  TORCH_CHECK(ours.sizes() == ref.sizes() && ours.scalar_type() == ref.scalar_type(),
              "fp8_dummy: same_bytes needs tensors of one shape and dtype");
  const auto a = ours.to(at::kCPU).contiguous();
  const auto b = ref.to(at::kCPU).contiguous();
  const auto size = static_cast<int64_t>(a.element_size());
  const auto* pa = static_cast<const uint8_t*>(a.const_data_ptr());
  const auto* pb = static_cast<const uint8_t*>(b.const_data_ptr());
  for (int64_t i = 0; i < a.numel() * size; ++i) {
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

const char* state_name(proof::State s) {
  return s == proof::State::kProven    ? "proven"
         : s == proof::State::kRefused ? "refused"
                                       : "unproven";
}

std::vector<std::string> proof_report_op() {
  std::vector<std::string> flat;
  for (const auto& e : proof::report()) {
    flat.insert(flat.end(), {e.key, state_name(e.state), e.detail});
  }
  return flat;
}

int64_t proof_lookup_op(c10::string_view key) {
  const proof::State s = proof::lookup(std::string(key));
  return s == proof::State::kProven ? 1 : s == proof::State::kRefused ? 0 : -1;
}

bool proof_record_op(c10::string_view key, bool passed, c10::string_view detail, bool retry) {
  const auto state = retry    ? proof::State::kUnproven
                     : passed ? proof::State::kProven
                              : proof::State::kRefused;
  return proof::record(std::string(key), state, std::string(detail)) == proof::State::kProven;
}

bool proof_fault_op(c10::string_view path) { return proof::fault(std::string(path)); }

int64_t proof_forget_op(c10::string_view prefix) { return proof::forget(std::string(prefix)); }

int64_t proof_generation_op() { return proof::generation(); }

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("proof_report", TORCH_FN(proof_report_op));
  m.impl("proof_lookup", TORCH_FN(proof_lookup_op));
  m.impl("proof_record", TORCH_FN(proof_record_op));
  m.impl("proof_fault", TORCH_FN(proof_fault_op));
  m.impl("proof_forget", TORCH_FN(proof_forget_op));
  m.impl("proof_generation", TORCH_FN(proof_generation_op));
}

}  // namespace fp8_dummy
