// Objects made once, a failure not kept (csrc/common/made_once.h), with a maker that fails at
// the calls a test chooses (the walks' interned names fail only where Python's memory does).
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/made_once.h"

namespace fp8_dummy {
namespace {

constexpr int64_t kSlots = 4;

// made_once over four slots, called until it says they are made (at most a call per failure
// and one more): per call whether it made them (0/1) and the maker's calls so far; then per
// slot the number of the maker's call that made it. The maker's call n fails where n is in
// `failing`, else gives the n-th cell.
std::vector<int64_t> made_once_test(at::IntArrayRef failing) {
  std::vector<int64_t> cells(kSlots + failing.size() + 1);
  int64_t calls = 0;
  auto make = [&](const char* /*text*/) -> int64_t* {
    const int64_t n = calls++;
    TORCH_CHECK(n < static_cast<int64_t>(cells.size()),
                "fp8_dummy_test.made_once: the maker was called past its cells");
    if (std::find(failing.begin(), failing.end(), n) != failing.end()) return nullptr;
    cells[n] = n;
    return &cells[n];
  };
  int64_t* slots[kSlots] = {};
  std::vector<int64_t> out;
  for (size_t tries = 0; tries <= failing.size(); ++tries) {
    const bool made = made_once<int64_t>(
        {{&slots[0], "a"}, {&slots[1], "b"}, {&slots[2], "c"}, {&slots[3], "d"}}, make);
    out.push_back(made ? 1 : 0);
    out.push_back(calls);
    if (made) break;
  }
  for (int64_t* slot : slots) out.push_back(slot == nullptr ? -1 : *slot);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8_dummy_test, CompositeImplicitAutograd, m) {
  m.impl("made_once", TORCH_FN(made_once_test));
}

}  // namespace fp8_dummy
