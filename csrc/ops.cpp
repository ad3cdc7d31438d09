// The public operators' schemas (torch.ops.fp8_dummy; docs/api.md). Their kernels register
// by device in cpu/, cuda/ and build_info.cpp, their fake kernels in fp8_dummy/ops.py; the
// Python module fp8_dummy._C that loads this library is python_module.cpp.
#include <torch/library.h>

namespace fp8_dummy {

TORCH_LIBRARY(fp8_dummy, m) {
  m.set_python_module("fp8_dummy.ops");  // the fake kernels: torch imports it when needed
  // The reference path's bytes (docs/contract.md), g a fresh generator seeded with `seed`:
  // t = empty_like(self, float16).uniform_(low, high, generator=g); self.copy_(t) (1-byte
  // dtypes; contiguous_temp: TensorRT-LLM's torch.empty(self.shape)); wider: self.uniform_.
  m.def(
      "init_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // The caller's generator (None: the device's default), advanced as by the reference.
  m.def(
      "init_.generator(Tensor(a!) self, float low, float high, *, Generator? generator, "
      "bool contiguous_temp=False) -> ()");
  // Every tensor gets init_'s bytes; on CUDA one launch per (device, dtype); tensors sharing
  // bytes with another last, in list order, as in a loop.
  m.def(
      "init_many_(Tensor(a!)[] tensors, float low=-0.001, float high=0.001, int seed=1234, *, "
      "bool contiguous_temp=False) -> ()");
  // int8/uint8: self.random_(low, high, generator=g)'s bytes, checks and messages.
  m.def("random_(Tensor(a!) self, int low, int high, int seed=1234) -> ()");
  m.def("random_.generator(Tensor(a!) self, int low, int high, *, Generator? generator) -> ()");
  // The device-independent mode: element idx takes the value of global element
  // element_offset + idx . element_strides (default: self's row-major strides; a shard passes
  // the global tensor's), from Philox (seed, key_offset) (include/fp8_dummy/cuda/stateless.h).
  m.def(
      "init_stateless_(Tensor(a!) self, float low=-0.001, float high=0.001, int seed=1234, "
      "*, int key_offset=0, int element_offset=0, int[]? element_strides=None) -> ()");
}

}  // namespace fp8_dummy
