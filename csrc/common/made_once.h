// Objects made once and kept for the process, where making one can fail (the walks' interned
// names, python_api.h): a failure is not kept. A slot whose making failed stays empty, so the
// next call makes it again and says again whether it could; a slot made once is never made
// twice. Torch-free and Python-free, so that the test extension runs it with a maker that
// fails when told to (tests/test_made_once.py).
#pragma once
#include <initializer_list>
#include <utility>

namespace fp8_dummy {

// Each empty slot (nullptr) filled with make(text), in order; false at the first that make
// leaves empty (nullptr: the maker says why, e.g. Python's error set), the later ones untried.
// Not thread-safe by itself: its callers hold a lock around it (Python's GIL).
template <typename T, typename Make>
bool made_once(std::initializer_list<std::pair<T**, const char*>> slots, Make&& make) {
  for (const auto& [slot, text] : slots) {
    if (*slot == nullptr) *slot = make(text);
    if (*slot == nullptr) return false;
  }
  return true;
}

}  // namespace fp8_dummy
