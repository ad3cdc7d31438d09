// fp8_dummy's C++ API (docs/cpp.md): header-only, needs torch's headers and nothing else.
// The calls go through the PyTorch dispatcher to the operators fp8_dummy's library registers
// (torch.ops.fp8_dummy), so a consumer does not link that library, but it must be loaded
// before the first call (Python: `import fp8_dummy` or
// torch.ops.load_library(fp8_dummy.library_path()); C++: dlopen that path or a CMake
// install's libfp8_dummy.so, or link fp8_dummy::fp8_dummy), else the call throws c10::Error
// saying so. Results and errors (c10::Error) are the Python op's.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>

namespace fp8_dummy {

// The operators' C++ signatures, as registered (the dispatcher checks a typed handle's
// signature exactly; a `Tensor(a!)` argument is `at::Tensor&`).
using InitSeedFn = void(at::Tensor&, double, double, int64_t, bool);
using InitGeneratorFn = void(at::Tensor&, double, double, std::optional<at::Generator>, bool);
using InitManyFn = void(at::TensorList, double, double, int64_t, bool);
using InitStatelessFn = void(at::Tensor&, double, double, int64_t, int64_t, int64_t,
                             at::OptionalIntArrayRef);
using RandomSeedFn = void(at::Tensor&, int64_t, int64_t, int64_t);
using RandomGeneratorFn = void(at::Tensor&, int64_t, int64_t, std::optional<at::Generator>);

namespace detail {

// The handle of operator `name`.`overload`, or a c10::Error telling how to load the library.
// Callers keep it in a function-local static, whose initialization is retried after a throw:
// a call made before the library is loaded does not poison later ones.
template <typename Fn>
c10::TypedOperatorHandle<Fn> find_op(const char* name, const char* overload) {
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "fp8_dummy's operators are not registered (no schema for ", name,
              overload[0] != '\0' ? "." : "", overload,
              "): import fp8_dummy or torch.ops.load_library(fp8_dummy.library_path()) "
              "first (from C++: dlopen that library)");
  return handle->typed<Fn>();
}

}  // namespace detail

// Seeds and key offsets are 64-bit patterns: pass a uint64_t seed u as static_cast<int64_t>(u)
// (what torch.Generator.manual_seed(u) reads).
//
// Fills `self` in place with uniform numbers in [low, high): the bytes of torch's reference
// path (1-byte dtypes: a float16 temp filled by uniform_, then copy_; wider: self.uniform_)
// with a fresh generator of self's device seeded with `seed`. contiguous_temp: the temp is
// torch.empty(self.sizes()) (TensorRT-LLM's), not empty_like(self). Returns `self`.
inline at::Tensor& init_(at::Tensor& self, double low = -1e-3, double high = 1e-3,
                         int64_t seed = 1234, bool contiguous_temp = false) {
  static const auto op = detail::find_op<InitSeedFn>("fp8_dummy::init_", "");
  op.call(self, low, high, seed, contiguous_temp);
  return self;
}

// The same with the caller's generator (std::nullopt: the device's default
// generator), advanced exactly as the reference path advances it.
inline at::Tensor& init_(at::Tensor& self, double low, double high,
                         std::optional<at::Generator> generator, bool contiguous_temp = false) {
  static const auto op = detail::find_op<InitGeneratorFn>("fp8_dummy::init_", "generator");
  op.call(self, low, high, std::move(generator), contiguous_temp);
  return self;
}

// Every tensor of `tensors` gets the bytes init_(t, low, high, seed, contiguous_temp) gives
// it (each its own fresh generator); on CUDA the dense 1-byte tensors of a (device, dtype) are
// filled by one kernel launch. Every tensor's arguments are checked before the first is written.
inline void init_many_(at::TensorList tensors, double low = -1e-3, double high = 1e-3,
                       int64_t seed = 1234, bool contiguous_temp = false) {
  static const auto op = detail::find_op<InitManyFn>("fp8_dummy::init_many_", "");
  op.call(tensors, low, high, seed, contiguous_temp);
}

// The device-independent mode (docs/modes.md): the element of `self` at multi-index idx
// takes the value of element element_offset + sum(idx[d] * element_strides[d]) (default:
// self's row-major strides) of torch.func._random.uniform_ with key (seed, key_offset).
inline at::Tensor& init_stateless_(at::Tensor& self, double low = -1e-3, double high = 1e-3,
                                   int64_t seed = 1234, int64_t key_offset = 0,
                                   int64_t element_offset = 0,
                                   at::OptionalIntArrayRef element_strides = std::nullopt) {
  static const auto op = detail::find_op<InitStatelessFn>("fp8_dummy::init_stateless_", "");
  op.call(self, low, high, seed, key_offset, element_offset, element_strides);
  return self;
}

// Fills the int8 or uint8 tensor `self` with the bytes of self.random_(low, high) under a
// fresh generator of self's device seeded with `seed` (the engines' int8, uint8 and, viewed
// as uint8, packed-FP4 dummy weights). Returns `self`.
inline at::Tensor& random_(at::Tensor& self, int64_t low, int64_t high, int64_t seed = 1234) {
  static const auto op = detail::find_op<RandomSeedFn>("fp8_dummy::random_", "");
  op.call(self, low, high, seed);
  return self;
}

// The same with the caller's generator (std::nullopt: the device's default), left as
// torch's random_ leaves it.
inline at::Tensor& random_(at::Tensor& self, int64_t low, int64_t high,
                           std::optional<at::Generator> generator) {
  static const auto op = detail::find_op<RandomGeneratorFn>("fp8_dummy::random_", "generator");
  op.call(self, low, high, std::move(generator));
  return self;
}

// Whether fp8_dummy's operators are registered in this process (its library loaded).
inline bool is_loaded() {
  return c10::Dispatcher::singleton().findSchema({"fp8_dummy::init_", ""}).has_value();
}

}  // namespace fp8_dummy
