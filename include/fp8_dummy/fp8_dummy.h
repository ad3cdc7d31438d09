// fp8_dummy's C++ API: header-only, for other PyTorch C++/CUDA extensions and
// libtorch programs.
//
//   #include <fp8_dummy/fp8_dummy.h>
//   fp8_dummy::init_(weight, -1e-3, 1e-3, /*seed=*/1234);
//   fp8_dummy::init_(weight, -1e-3, 1e-3, generator);  // std::optional<at::Generator>
//   fp8_dummy::init_many_({w1, w2, w3}, -1e-3, 1e-3, 1234);
//   fp8_dummy::init_(weight, -3.0, 3.0, 0, /*contiguous_temp=*/true);  // TensorRT-LLM's temp
//   fp8_dummy::init_stateless_(weight, -1e-3, 1e-3, 1234);
//   fp8_dummy::random_(int8_weight, -128, 128, /*seed=*/1234);  // int8 / uint8 tensors
//
// The calls go through the PyTorch dispatcher to the operators fp8_dummy's library
// registers (torch.ops.fp8_dummy: init_, init_.generator, init_many_, init_stateless_,
// random_, random_.generator), so
// a consumer needs fp8_dummy's headers only: no link-time dependency on fp8_dummy's
// library, nor a matching build of it. The library must be loaded in the process before the first
// call, by any of
//   - Python: `import fp8_dummy`, or
//     `torch.ops.load_library(fp8_dummy.library_path())` (no Python import of the
//     package needed, e.g. in a worker that only gets the path);
//   - C++: dlopen() of the library: fp8_dummy.library_path() of a pip install, or
//     libfp8_dummy.so of a CMake install (fp8_dummy_LIBRARY in CMake), or linking
//     the CMake target fp8_dummy::fp8_dummy.
// Otherwise the call throws c10::Error saying so. The results are those of the
// Python op: the bytes of torch's empty_like(float16).uniform_().copy_() path.
// Needs torch's headers (at::Tensor, c10::Dispatcher); nothing else.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>

namespace fp8_dummy {

// The operators' C++ signatures, as their kernels are registered. A mutable tensor
// argument (`Tensor(a!)` in the schema) is `at::Tensor&`; the dispatcher checks that
// a typed handle has exactly the kernels' signature.
using InitSeedFn = void(at::Tensor&, double, double, int64_t, bool);
using InitGeneratorFn = void(at::Tensor&, double, double, std::optional<at::Generator>, bool);
using InitManyFn = void(at::TensorList, double, double, int64_t, bool);
using InitStatelessFn = void(at::Tensor&, double, double, int64_t, int64_t, int64_t,
                             at::OptionalIntArrayRef);
using RandomSeedFn = void(at::Tensor&, int64_t, int64_t, int64_t);
using RandomGeneratorFn = void(at::Tensor&, int64_t, int64_t, std::optional<at::Generator>);

namespace detail {

// The handle of operator `name`.`overload`, or a c10::Error telling how to load
// fp8_dummy's library. Looked up on every call until it succeeds: the callers keep
// the result in a function-local static, whose initialization is retried if it
// throws, so a call made before the library is loaded does not poison later ones.
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

// Seeds and key offsets are 64-bit patterns: a uint64_t seed u is passed as
// static_cast<int64_t>(u), which is what torch.Generator.manual_seed(u) reads.
//
// Fills `self` in place with uniform random numbers in [low, high): the bytes of
// torch's reference path (for 1-byte dtypes, FP8, int8 and uint8: a float16 temp filled by
// uniform_, then copy_; float16 and wider: self.uniform_) with a fresh generator of self's
// device seeded with `seed`. contiguous_temp: the temp is torch.empty(self.sizes()) (random
// numbers in row-major order whatever self's strides, as TensorRT-LLM's dummy loader) instead
// of empty_like(self). Same checks and messages as the Python op (c10::Error). Returns `self`.
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

// The device-independent mode: the element of `self` at multi-index idx takes the value
// element element_offset + sum(idx[d] * element_strides[d]) of a global tensor filled by
// torch.func._random.uniform_ with key (seed, key_offset) has (element_strides: default the
// row-major strides of self's shape). The same bytes on every device and for any sharding.
inline at::Tensor& init_stateless_(at::Tensor& self, double low = -1e-3, double high = 1e-3,
                                   int64_t seed = 1234, int64_t key_offset = 0,
                                   int64_t element_offset = 0,
                                   at::OptionalIntArrayRef element_strides = std::nullopt) {
  static const auto op = detail::find_op<InitStatelessFn>("fp8_dummy::init_stateless_", "");
  op.call(self, low, high, seed, key_offset, element_offset, element_strides);
  return self;
}

// Fills the int8 or uint8 tensor `self` in place with the bytes of
// self.random_(low, high, generator) for a fresh generator of self's device seeded with
// `seed` (the engines' dummy init of int8, uint8 and, viewed as uint8, packed-FP4 weights).
// torch's checks and messages (c10::Error). Returns `self`.
inline at::Tensor& random_(at::Tensor& self, int64_t low, int64_t high, int64_t seed = 1234) {
  static const auto op = detail::find_op<RandomSeedFn>("fp8_dummy::random_", "");
  op.call(self, low, high, seed);
  return self;
}

// The same with the caller's generator (std::nullopt: the device's default generator), left
// in the state torch's random_ leaves it in.
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
