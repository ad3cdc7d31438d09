// random_ on int8/uint8 tensors (the engines' int8, uint8 and packed-FP4 weights): the
// checks every kernel runs, and the order torch's CPU random_ hands out its numbers in.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "common/reference.h"

namespace fp8_dummy {

// The checks of self.random_(from, to) in torch's order and messages (prefixed), and that
// self is int8 or uint8; before anything is written or drawn.
void check_random_args(const at::Tensor& self, int64_t from, int64_t to);

// A view whose row-major order is torch's CPU random_'s (TensorIterator's: the smallest
// stride innermost), coalesced; nullopt where first_overlap shows no distinct elements.
std::optional<MemoryOrder> random_order(const at::Tensor& self);

}  // namespace fp8_dummy
