// random_ on 8-bit integer tensors (the engines' dummy init of int8, uint8 and packed-FP4
// weights): the argument checks every device's kernel and the fake kernel run, and the
// order in which torch's CPU random_ hands out its random numbers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "common/reference.h"

namespace fp8_dummy {

// The checks of self.random_(from, to), in torch's order and with torch's messages
// (prefixed "fp8_dummy.random_: "), and that self is int8 or uint8. Throws c10::Error
// before anything is written or drawn.
void check_random_args(const at::Tensor& self, int64_t from, int64_t to);

// A view whose row-major order is the order torch's CPU random_ visits self's elements in
// (TensorIterator's: dimensions by increasing stride, the smallest innermost), coalesced;
// random number m goes to element m of it. nullopt where the elements are not shown
// distinct (first_overlap), which check_random_args refuses.
std::optional<MemoryOrder> random_order(const at::Tensor& self);

}  // namespace fp8_dummy
