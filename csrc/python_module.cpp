// The Python module fp8_dummy._C, where setup.py builds one (FP8_DUMMY_PYTHON_MODULE; CMake
// builds the library without Python): importing it loads this library, which registers the
// operators (ops.cpp, internal_ops.cpp), and it routes the proof's refusal warnings to
// Python's `warnings`; it has the module walks of fp8_dummy.tensors (python_walk.cpp,
// python_state_walk.cpp) and the numbering of the engines' plan's kinds (python_kinds.cpp).
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <string>

#include "common/proof.h"
#include "python_api.h"
#include "python_functions.h"

namespace {

using fp8_dummy::python::Api;
const Api* py = nullptr;  // set with the hook

PyObject* python_warn = nullptr;  // fp8_dummy._proof._warn

// A refusal as a Python RuntimeWarning (torch.ops calls do not forward TORCH_WARN); a filter
// that makes it an error raises.
void warn_in_python(const std::string& message) {
  if (!py->is_initialized()) {
    TORCH_WARN(message);
    return;
  }
  const PyGILState_STATE gil = py->gil_ensure();
  PyObject* result = py->call(python_warn, "s", message.c_str());
  std::string error;
  if (result == nullptr) {
    PyObject *type, *value, *trace;
    py->fetch(&type, &value, &trace);
    PyObject* text = value ? py->str(value) : nullptr;
    PyObject* bytes = text ? py->utf8(text) : nullptr;
    error = bytes ? py->bytes(bytes) : message;
    for (PyObject* o : {type, value, trace, text, bytes})
      if (o) py->decref(o);
  }
  if (result) py->decref(result);
  py->gil_release(gil);
  TORCH_CHECK(error.empty(), error);
}

// Returns the hook (a new reference); without Python's API in the process, refusals stay
// TORCH_WARNs.
PyObject* set_warning_hook(PyObject* /*module*/, PyObject* hook) {
  py = fp8_dummy::python::api();
  if (py != nullptr) {
    py->incref(hook);  // kept for the process
    python_warn = hook;
    fp8_dummy::proof::set_warning_sink(&warn_in_python);
  }
  using IncRef = void (*)(PyObject*);
  if (const auto incref = reinterpret_cast<IncRef>(dlsym(RTLD_DEFAULT, "Py_IncRef"))) incref(hook);
  return hook;
}

PyMethodDef methods[] = {
    {"_set_warning_hook", set_warning_hook, METH_O, nullptr},
    {"_walk_shape", fp8_dummy::python::walk_shape, METH_VARARGS, nullptr},
    {"_state_dict_shape", fp8_dummy::python::state_dict_shape, METH_VARARGS, nullptr},
    {"_kinds", fp8_dummy::python::kinds, METH_VARARGS, nullptr},
    {"_classes", fp8_dummy::python::classes, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr}};
PyMethodDef hook_only[] = {methods[0], {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing fp8_dummy._C loads the library, whose operators register (stable ABI only: abi3).
// The module walk only where the process has all of Python's API it reads.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  if (fp8_dummy::python::api() == nullptr) module_def.m_methods = hook_only;
  return PyModule_Create(&module_def);
}
#endif  // FP8_DUMMY_PYTHON_MODULE
