// Python's C API as fp8_dummy._C uses it (setup.py's build only): looked up in the process
// at run time, so that the library names no Python symbol but PyModule_Create2 (bound
// lazily) and C++ programs dlopen it without Python (tests/test_packaging_cmake.py,
// tests/test_packaging_wheel.py).
#pragma once
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks

namespace fp8_dummy::python {

struct Api {
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
  PyObject* (*get_attr)(PyObject*, PyObject*);
  PyObject* (*intern)(const char*);
  PyObject* (*dict_get)(PyObject*, PyObject*);  // borrowed, no error
  int (*dict_next)(PyObject*, Py_ssize_t*, PyObject**, PyObject**);
  int (*dict_contains)(PyObject*, PyObject*);
  Py_ssize_t (*dict_size)(PyObject*);
  PyTypeObject* dict_type;  // PyDict_Type: the walk reads exact dictionaries only
  PyObject* (*list_new)(Py_ssize_t);
  int (*list_append)(PyObject*, PyObject*);
  PyObject* (*long_from)(Py_ssize_t);
  int (*set_contains)(PyObject*, PyObject*);
  int (*set_add)(PyObject*, PyObject*);
  PyObject* (*set_new)(PyObject*);
  PyObject* (*tuple_item)(PyObject*, Py_ssize_t);  // borrowed
  PyObject* (*tuple_pack)(Py_ssize_t, ...);
  PyObject* none;    // Py_None
  PyObject* false_;  // Py_False
};

// The API, or nullptr where the process does not have all of it (no Python).
const Api* api();

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
