// The Python module fp8_dummy._C, where setup.py builds one (FP8_DUMMY_PYTHON_MODULE; CMake
// builds the library without Python): importing it loads this library, which registers the
// operators (ops.cpp, internal_ops.cpp), and it routes the proof's refusal warnings to
// Python's `warnings`.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <string>

#include "common/proof.h"

namespace {

// Python's C API, looked up in the process when fp8_dummy._C installs the hook: the library
// names no Python symbol but PyModule_Create2 (bound lazily), so that C++ programs dlopen it
// without Python (tests/test_packaging_cmake.py, tests/test_packaging_wheel.py).
struct PythonApi {
  int (*is_initialized)();
  PyGILState_STATE (*gil_ensure)();
  void (*gil_release)(PyGILState_STATE);
  PyObject* (*call)(PyObject*, const char*, ...);
  void (*fetch)(PyObject**, PyObject**, PyObject**);
  PyObject* (*str)(PyObject*);
  PyObject* (*utf8)(PyObject*);
  char* (*bytes)(PyObject*);
  void (*incref)(PyObject*);
  void (*decref)(PyObject*);
};
PythonApi py{};

template <typename F>
bool find(F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return f != nullptr;
}

PyObject* python_warn = nullptr;  // fp8_dummy._proof._warn

// A refusal as a Python RuntimeWarning (torch.ops calls do not forward TORCH_WARN); a filter
// that makes it an error raises.
void warn_in_python(const std::string& message) {
  if (!py.is_initialized()) {
    TORCH_WARN(message);
    return;
  }
  const PyGILState_STATE gil = py.gil_ensure();
  PyObject* result = py.call(python_warn, "s", message.c_str());
  std::string error;
  if (result == nullptr) {
    PyObject *type, *value, *trace;
    py.fetch(&type, &value, &trace);
    PyObject* text = value ? py.str(value) : nullptr;
    PyObject* bytes = text ? py.utf8(text) : nullptr;
    error = bytes ? py.bytes(bytes) : message;
    for (PyObject* o : {type, value, trace, text, bytes})
      if (o) py.decref(o);
  }
  if (result) py.decref(result);
  py.gil_release(gil);
  TORCH_CHECK(error.empty(), error);
}

// Returns the hook (a new reference); without Python's API in the process, refusals stay
// TORCH_WARNs.
PyObject* set_warning_hook(PyObject* /*module*/, PyObject* hook) {
  PythonApi api{};
  const bool found =
      find(api.incref, "Py_IncRef") && find(api.decref, "Py_DecRef") &&
      find(api.is_initialized, "Py_IsInitialized") && find(api.gil_ensure, "PyGILState_Ensure") &&
      find(api.gil_release, "PyGILState_Release") && find(api.call, "PyObject_CallFunction") &&
      find(api.fetch, "PyErr_Fetch") && find(api.str, "PyObject_Str") &&
      find(api.utf8, "PyUnicode_AsUTF8String") && find(api.bytes, "PyBytes_AsString");
  if (found) {
    py = api;
    py.incref(hook);  // kept for the process
    python_warn = hook;
    fp8_dummy::proof::set_warning_sink(&warn_in_python);
  }
  if (api.incref) api.incref(hook);
  return hook;
}

PyMethodDef methods[] = {{"_set_warning_hook", set_warning_hook, METH_O, nullptr},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing fp8_dummy._C loads the library, whose operators register (stable ABI only: abi3).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
#endif  // FP8_DUMMY_PYTHON_MODULE
