// The public operators (torch.ops.fp8_dummy; docs/api.md), and the Python module fp8_dummy._C
// where setup.py builds one (CMake builds the library without Python).
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#endif
#include <torch/library.h>

#include <string>

#include "common/proof.h"

#ifdef FP8_DUMMY_PYTHON_MODULE
namespace {

PyObject* python_warn = nullptr;  // fp8_dummy._proof._warn

// A refusal as a Python RuntimeWarning (torch.ops calls do not forward TORCH_WARN); a filter
// that makes it an error raises.
void warn_in_python(const std::string& message) {
  if (!Py_IsInitialized()) {
    TORCH_WARN(message);
    return;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_CallFunction(python_warn, "s", message.c_str());
  std::string error;
  if (result == nullptr) {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    PyObject* bytes = text ? PyUnicode_AsUTF8String(text) : nullptr;
    error = bytes ? PyBytes_AsString(bytes) : message;
    for (PyObject* o : {type, value, trace, text, bytes}) Py_XDECREF(o);
  }
  Py_XDECREF(result);
  PyGILState_Release(gil);
  TORCH_CHECK(error.empty(), error);
}

PyObject* set_warning_hook(PyObject* /*module*/, PyObject* hook) {
  Py_INCREF(hook);
  python_warn = hook;
  fp8_dummy::proof::set_warning_sink(&warn_in_python);
  Py_INCREF(Py_None);
  return Py_None;
}

PyMethodDef methods[] = {{"_set_warning_hook", set_warning_hook, METH_O, nullptr},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing fp8_dummy._C registers the operators below (stable ABI only: abi3).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
#endif  // FP8_DUMMY_PYTHON_MODULE

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
