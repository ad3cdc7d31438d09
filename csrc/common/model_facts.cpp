// What the engines' whole-model plan (fp8_dummy/engines/core/) asks of thousands of tensors,
// answered for the whole list at once, without a Python object per tensor:
// - tensor_kinds: each tensor's kind (everything of the tensor the plan's answers read:
//   dtype, device, dimensions, meta, inference, contiguity, overlap), numbered in order of
//   first appearance, then the facts a kept plan is checked against (dtype, device,
//   dimensions, meta, inference and where the bytes are: storage, data pointer, offset,
//   sizes, strides), last whether every tensor's storage is its own; facts_match: whether a
//   list's facts are still those; init_many_kept: that check and a kept plan's batch filled,
//   in one pass over the list;
// - fill_order: which entries a fill runs and which strictly in order: an alias with the same
//   action filled once, a storage touched in other ways in list order.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/held_tensors.h"
#include "common/open_table.h"
#include "common/reference.h"

namespace fp8_dummy {
namespace {

// A tensor whose strides and bytes can be read (a functional or fake tensor's storage
// refuses its data pointer).
bool strided_with_storage(const at::Tensor& t) {
  if (!t.defined() || t.layout() != c10::kStrided || !t.has_storage()) return false;
  try {
    static_cast<void>(t.storage().data());
    static_cast<void>(t.const_data_ptr());
  } catch (const c10::Error&) {
    return false;
  }
  return true;
}

// The kind's facts in one number; -1: a kind of its own (no strides to read: `strided` false).
int64_t kind_code(const at::Tensor& t, bool strided) {
  if (!strided) return -1;
  const auto overlap = at::has_internal_overlap(t);
  const bool distinct =
      overlap == at::MemOverlap::No ||
      (overlap == at::MemOverlap::TooHard && first_overlap(t.sizes(), t.strides()).first < 0);
  uint64_t code = static_cast<uint64_t>(t.scalar_type()) & 0xff;
  code = code << 8 | (static_cast<uint64_t>(t.device().type()) & 0xff);
  code = code << 16 | (static_cast<uint64_t>(t.device().index() + 1) & 0xffff);
  code = code << 8 | (static_cast<uint64_t>(t.dim()) & 0xff);
  code = code << 2 | static_cast<uint64_t>(overlap);
  code = code << 1 | static_cast<uint64_t>(distinct);
  code = code << 1 | static_cast<uint64_t>(t.is_meta());
  code = code << 1 | static_cast<uint64_t>(t.is_inference());
  code = code << 1 | static_cast<uint64_t>(t.is_contiguous());
  return static_cast<int64_t>(code);
}

// What a kept plan is checked against, appended to `out`: where the bytes are and how they
// are laid out (the kind is a function of these: dtype, device, dimensions, meta, inference,
// storage, data pointer, offset, sizes, strides); a tensor without strides: -1 and its place.
void append_facts(const at::Tensor& t, bool strided, int64_t index, std::vector<int64_t>& out) {
  if (!strided) {
    out.push_back(-1);
    out.push_back(index);
    return;
  }
  uint64_t code = static_cast<uint64_t>(t.scalar_type()) & 0xff;
  code = code << 8 | (static_cast<uint64_t>(t.device().type()) & 0xff);
  code = code << 16 | (static_cast<uint64_t>(t.device().index() + 1) & 0xffff);
  code = code << 8 | (static_cast<uint64_t>(t.dim()) & 0xff);
  code = code << 1 | static_cast<uint64_t>(t.is_meta());
  code = code << 1 | static_cast<uint64_t>(t.is_inference());
  out.push_back(static_cast<int64_t>(code));
  out.push_back(reinterpret_cast<int64_t>(t.storage().unsafeGetStorageImpl()));
  out.push_back(reinterpret_cast<int64_t>(t.storage().data()));
  out.push_back(t.storage_offset());
  for (const int64_t s : t.sizes()) out.push_back(s);
  for (const int64_t s : t.strides()) out.push_back(s);
}

struct StorageKey {
  int64_t type, index;
  uintptr_t base;
  bool operator==(const StorageKey& o) const {
    return type == o.type && index == o.index && base == o.base;
  }
};

// Storages numbered in order of first appearance (a node per tensor, a node-based map's, made the
// allocator most of the pass's time).
struct StorageIds {
  struct Slot {
    StorageKey key{};
    int64_t id = -1;  // -1: vacant
  };
  using Key = StorageKey;
  static Key key(const Slot& s) { return s.key; }
  static bool vacant(const Slot& s) { return s.id < 0; }
  static uint64_t word(const Key& k) {
    return static_cast<uint64_t>(k.base) ^ static_cast<uint64_t>(k.type * 31 + k.index);
  }
};

// Whether storages are each met once, in a table of one word per slot: the data pointer with
// the device folded in. Two storages whose words are equal are taken as one: at worst a storage
// taken as shared that is not (the plan then reads its entries), never the reverse.
class DistinctStorages {
 public:
  explicit DistinctStorages(size_t n) {
    TORCH_CHECK_WITH(OutOfMemoryError, words_.reserve(n),
                     "fp8_dummy: tensor_kinds: no memory for the storages of ", n, " tensors");
  }
  // False where the storage (or one whose word is equal) was met before.
  bool add(const at::Tensor& t) {
    const auto device = static_cast<uint64_t>(t.device().type()) << 8 |
                        static_cast<uint64_t>(t.device().index() + 1);
    const auto base = reinterpret_cast<uint64_t>(t.storage().data());
    const uint64_t word = base ^ device << 48;
    if (word == 0) return std::exchange(zero_, true) == false;  // 0 marks a vacant slot
    // Never grows: room for n reserved.
    const auto [slot, added] = words_.insert(word);
    TORCH_CHECK_WITH(OutOfMemoryError, slot != nullptr,
                     "fp8_dummy: tensor_kinds: no memory for the storages");
    return added;
  }

 private:
  OpenTable<NonzeroSet<uint64_t>> words_;
  bool zero_ = false;
};

StorageKey storage_key(const at::Tensor& t) {
  return {static_cast<int64_t>(t.device().type()), t.device().index(),
          reinterpret_cast<uintptr_t>(t.storage().data())};
}

// tensor_kinds of the `count` tensors `at(i)` gives.
template <class At>
at::Tensor kinds_of(int64_t n, const At& at) {
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  out.reserve(static_cast<size_t>(n) * 8 + 1);
  std::map<int64_t, int64_t> ids;
  int64_t next = 0;
  DistinctStorages storages(static_cast<size_t>(n));
  bool own_storages = true;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor& t = at(i);
    const bool strided = strided_with_storage(t);
    const int64_t code = kind_code(t, strided);
    const int64_t id = code < 0 ? next++ : ids.try_emplace(code, next).first->second;
    if (id == next) ++next;
    out[static_cast<size_t>(i)] = id;
    append_facts(t, strided, i, out);
    own_storages = own_storages && strided && storages.add(t);
  }
  // The last word: 1 where every tensor has strides and a storage no other tensor of the list
  // has (no alias, nothing to fill in order: the plan's program by kinds alone), else 0.
  out.push_back(own_storages ? 1 : 0);
  return at::tensor(out, at::TensorOptions().dtype(at::kLong));
}

at::Tensor tensor_kinds_op(at::TensorList tensors) {
  return kinds_of(static_cast<int64_t>(tensors.size()),
                  [&](int64_t i) -> const at::Tensor& { return tensors[static_cast<size_t>(i)]; });
}

// tensor_kinds, and the list kept as the operator received it (no handle copied) for
// init_many_held. Boxed, as init_many_held: a kernel whose signature names the held class is
// checked against it when registered, which static initialization may run before the class is.
void tensor_kinds_held_boxed(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  c10::List<at::Tensor> tensors = std::move(stack->back()).toTensorList();
  stack->pop_back();
  const auto& list = tensors;
  at::Tensor kinds =
      kinds_of(static_cast<int64_t>(list.size()),
               [&](int64_t i) -> const at::Tensor& { return list.get(static_cast<size_t>(i)); });
  stack->emplace_back(std::move(kinds));
  stack->emplace_back(c10::make_intrusive<HeldTensors>(std::move(tensors)));
}

// Whether every tensor's facts are those of `kinds` (a tensor_kinds answer for as many
// tensors), compared as they are read: no list made. The tensors `fill` names (ascending)
// are gathered into `batch` in the same pass: each tensor's metadata is read once, right
// before its handle is copied (a model of 100,000 tensors outgrows the caches: every extra
// pass over it waits on memory).
bool match_facts(at::TensorList tensors, const at::Tensor& kinds, at::IntArrayRef fill,
                 c10::List<at::Tensor>& batch) {
  const auto n = static_cast<int64_t>(tensors.size());
  if (kinds.dim() != 1 || kinds.scalar_type() != at::kLong || kinds.numel() < n + 1) return false;
  const auto* want = kinds.const_data_ptr<int64_t>();
  // The facts end before the last word (whether the storages are the tensors' own).
  const int64_t end = kinds.numel() - 1;
  int64_t at = n;
  size_t next = 0;  // the next index of `fill`
  batch.reserve(fill.size());
  std::vector<int64_t> facts;
  for (int64_t i = 0; i < n; ++i) {
    facts.clear();
    append_facts(tensors[i], strided_with_storage(tensors[i]), i, facts);
    const auto size = static_cast<int64_t>(facts.size());
    if (at + size > end || !std::equal(facts.begin(), facts.end(), want + at)) return false;
    at += size;
    if (next < fill.size() && fill[next] == i) {
      batch.push_back(tensors[i]);
      ++next;
    }
  }
  TORCH_CHECK(next == fill.size(),
              "fp8_dummy: init_many_kept needs `fill` ascending and within the list");
  return at == end;
}

bool facts_match_op(at::TensorList tensors, const at::Tensor& kinds) {
  c10::List<at::Tensor> none;
  return match_facts(tensors, kinds, {}, none);
}

// facts_match and, where every fact holds, init_many_ on the `fill` tensors. The batch is
// made as the operator's boxed argument itself (its kernels are boxed): one handle per
// tensor, not a vector and then a list.
bool init_many_kept_op(at::TensorList tensors, const at::Tensor& kinds, at::IntArrayRef fill,
                       double low, double high, int64_t seed, bool contiguous_temp) {
  c10::List<at::Tensor> batch;
  if (!match_facts(tensors, kinds, fill, batch)) return false;
  if (batch.empty()) return true;
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("fp8_dummy::init_many_", "");
  torch::jit::Stack stack{c10::IValue(std::move(batch)), c10::IValue(low), c10::IValue(high),
                          c10::IValue(seed), c10::IValue(contiguous_temp)};
  op.callBoxed(&stack);
  return true;
}

// init_many_ on the held tensors `fill` names (an int64 vector, ascending; None: all of them,
// the list passed on as it was received). `fill` is a tensor, not an int[]: torch's Python call
// of an operator that takes a held object first looks through every argument's items in Python.
// Nothing is checked here that the operator does not check itself.
void init_many_held_boxed(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  const bool contiguous_temp = stack->back().toBool();
  const int64_t seed = (*stack)[stack->size() - 2].toInt();
  const double high = (*stack)[stack->size() - 3].toDouble();
  const double low = (*stack)[stack->size() - 4].toDouble();
  const c10::IValue fill = std::move((*stack)[stack->size() - 5]);
  const auto held = (*stack)[stack->size() - 6].toCustomClass<HeldTensors>();
  torch::jit::drop(*stack, 6);
  const c10::List<at::Tensor>& all = held->tensors;
  c10::List<at::Tensor> batch;
  if (fill.isNone()) {
    batch = all;  // the same list: no handle copied
  } else {
    const at::Tensor& idx = fill.toTensor();
    TORCH_CHECK(idx.dim() == 1 && idx.scalar_type() == at::kLong && idx.device().is_cpu() &&
                    idx.is_contiguous(),
                "fp8_dummy: init_many_held needs `fill` as a contiguous int64 CPU vector");
    const auto n = static_cast<int64_t>(all.size());
    const int64_t* at = idx.const_data_ptr<int64_t>();
    batch.reserve(static_cast<size_t>(idx.numel()));
    int64_t last = -1;
    for (int64_t k = 0; k < idx.numel(); ++k) {
      const int64_t i = at[k];
      TORCH_CHECK(i > last && i < n,
                  "fp8_dummy: init_many_held needs `fill` ascending and within the list");
      batch.push_back(all.get(static_cast<size_t>(i)));
      last = i;
    }
  }
  if (batch.empty()) return;
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("fp8_dummy::init_many_", "");
  torch::jit::Stack call{c10::IValue(std::move(batch)), c10::IValue(low), c10::IValue(high),
                         c10::IValue(seed), c10::IValue(contiguous_temp)};
  op.callBoxed(&call);
}

// Numbers equal keys (sizes and strides of any length) in order of first appearance.
class Numbering {
 public:
  int64_t operator()(std::vector<int64_t>&& key) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (const int64_t w : key) h = (h ^ static_cast<uint64_t>(w)) * 1099511628211ull;
    auto& bucket = ids_[h];
    for (const auto& [k, id] : bucket) {
      if (k == key) return id;
    }
    bucket.emplace_back(std::move(key), next_);
    return next_++;
  }

 private:
  std::unordered_map<uint64_t, std::vector<std::pair<std::vector<int64_t>, int64_t>>> ids_;
  int64_t next_ = 0;
};

std::vector<int64_t> fill_order_op(at::TensorList tensors, at::IntArrayRef actions,
                                   at::IntArrayRef flags) {
  const size_t n = tensors.size();
  TORCH_CHECK(actions.size() == n && flags.size() == n,
              "fp8_dummy: fill_order needs an action and a flag per tensor");
  OpenTable<StorageIds> storage_ids;
  TORCH_CHECK_WITH(OutOfMemoryError, storage_ids.reserve(n),
                   "fp8_dummy: fill_order: no memory for the storages of ", n, " tensors");
  std::vector<int64_t> storage(n), view(n, -1), count;
  int64_t own = -1;  // opaque tensors: a storage and a view of their own (negative ids)
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = tensors[i];
    if (flags[i] == 1 || !strided_with_storage(t)) {
      storage[i] = view[i] = own--;
      continue;
    }
    const auto next = static_cast<int64_t>(storage_ids.size());
    // Never grows: room for n reserved.
    const auto [slot, added] = storage_ids.insert({storage_key(t), next});
    TORCH_CHECK_WITH(OutOfMemoryError, slot != nullptr,
                     "fp8_dummy: fill_order: no memory for the storages");
    if (added) count.push_back(0);
    storage[i] = slot->id;
    ++count[static_cast<size_t>(slot->id)];
  }
  // Views are told apart only within a storage that several entries touch (most storages
  // hold one tensor of the model: nothing to number there).
  Numbering views;
  for (size_t i = 0; i < n; ++i) {
    if (storage[i] < 0) continue;
    if (count[static_cast<size_t>(storage[i])] == 1) {
      view[i] = -1 - static_cast<int64_t>(n) - static_cast<int64_t>(i);  // its own
      continue;
    }
    const at::Tensor& t = tensors[i];
    std::vector<int64_t> key{storage[i], reinterpret_cast<int64_t>(t.const_data_ptr()),
                             static_cast<int64_t>(t.scalar_type()), t.dim()};
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
    view[i] = views(std::move(key));
  }
  // A storage is touched in order when its entries differ in view or action (or an entry is
  // flagged 2: a DTensor drawing from the default generator, filled as often as listed).
  std::vector<std::array<int64_t, 3>> uses;
  for (size_t i = 0; i < n; ++i) {
    const bool shared = storage[i] >= 0 && count[static_cast<size_t>(storage[i])] > 1;
    if (shared || flags[i] == 2) {
      uses.push_back({storage[i], view[i], actions[i]});
      if (flags[i] == 2) uses.push_back({storage[i], -1, std::numeric_limits<int64_t>::min()});
    }
  }
  std::sort(uses.begin(), uses.end());
  uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
  std::vector<char> ordered(count.size(), 0);
  for (size_t j = 1; j < uses.size(); ++j) {
    if (uses[j][0] == uses[j - 1][0]) ordered[static_cast<size_t>(uses[j][0])] = 1;
  }
  std::vector<int64_t> out;
  out.reserve(2 * n);
  std::unordered_set<int64_t> seen;  // the views of shared storages filled so far
  for (size_t i = 0; i < n; ++i) {
    const bool shared = storage[i] >= 0 && count[static_cast<size_t>(storage[i])] > 1;
    const bool in_order = storage[i] >= 0 && ordered[static_cast<size_t>(storage[i])] != 0;
    // A storage of one entry (or an opaque tensor) is a view no other entry has.
    if (in_order || !shared || seen.insert(view[i]).second) {
      if (in_order) seen.insert(view[i]);
      out.push_back(static_cast<int64_t>(i));
      out.push_back(in_order ? 1 : 0);
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeExplicitAutograd, m) {
  m.impl("tensor_kinds", TORCH_FN(tensor_kinds_op));
  m.impl("tensor_kinds_held",
         torch::CppFunction::makeFromBoxedFunction<&tensor_kinds_held_boxed>());
  m.impl("facts_match", TORCH_FN(facts_match_op));
  m.impl("fill_order", TORCH_FN(fill_order_op));
}

TORCH_LIBRARY_IMPL(fp8_dummy_internal, CompositeImplicitAutograd, m) {
  m.impl("init_many_kept", TORCH_FN(init_many_kept_op));
  m.impl("init_many_held", torch::CppFunction::makeFromBoxedFunction<&init_many_held_boxed>());
}

}  // namespace fp8_dummy
