// The host path's hash table (csrc/common/open_table.h) on keys a test chooses: words that
// collide in the table's slots, zero, growth from any reserve (schema in test_ops.cpp).
#include <torch/library.h>

#include <cstdint>
#include <vector>

#include "common/open_table.h"

namespace fp8_dummy {
namespace {

struct Numbered {
  struct Slot {
    uint64_t word = 0;
    int64_t number = -1;  // -1: vacant
  };
  using Key = uint64_t;
  static Key key(const Slot& s) { return s.word; }
  static bool vacant(const Slot& s) { return s.number < 0; }
  static uint64_t word(const Key& k) { return k; }
};

std::vector<int64_t> open_table(at::IntArrayRef keys, int64_t reserve) {
  TORCH_CHECK(reserve >= 0, "fp8_dummy_test.open_table: reserve must be >= 0");
  OpenTable<Numbered> table;
  std::vector<int64_t> out{table.reserve(static_cast<size_t>(reserve)) ? 1 : 0};
  for (const int64_t k : keys) {
    const auto next = static_cast<int64_t>(table.size());
    const auto [slot, added] = table.insert({static_cast<uint64_t>(k), next});
    TORCH_CHECK(slot != nullptr, "fp8_dummy_test.open_table: no memory");
    out.push_back(slot->number);
    out.push_back(added ? 1 : 0);
    out.push_back(static_cast<int64_t>(table.capacity()));
  }
  for (const int64_t k : keys) {
    const Numbered::Slot* slot = table.find(static_cast<uint64_t>(k));
    out.push_back(slot == nullptr ? -1 : slot->number);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeImplicitAutograd, m) {
  m.impl("open_table", TORCH_FN(open_table));
}

}  // namespace fp8_dummy
