// Python's C API as fp8_dummy._C uses it (setup.py's build only): looked up in the process
// at run time, so that the library names no Python symbol but PyModule_Create2 (bound
// lazily) and C++ programs dlopen it without Python (tests/test_packaging_cmake.py,
// tests/test_packaging_wheel.py).
#pragma once
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks

#include <initializer_list>
#include <new>
#include <utility>

#include "common/made_once.h"

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
  PyObject* (*dict_new)();
  int (*dict_set)(PyObject*, PyObject*, PyObject*);
  Py_ssize_t (*list_size)(PyObject*);
  PyObject* (*list_item)(PyObject*, Py_ssize_t);  // borrowed
  int (*error_matches)(PyObject*);
  void (*error_clear)();
  void (*error_set)(PyObject*, const char*);
  PyObject* none;                          // Py_None
  PyObject* false_;                        // Py_False
  PyObject** attribute_error;              // PyExc_AttributeError
  PyObject** value_error;                  // PyExc_ValueError
  PyTypeObject* long_type;                 // PyLong_Type: a shape's module places
  void* (*type_slot)(PyTypeObject*, int);  // PyType_GetSlot: a class's hash and comparison
  PyTypeObject* object_type;               // PyBaseObject_Type
  int (*is_true)(PyObject*);               // PyObject_IsTrue: Python's `if o`
  int (*contains)(PyObject*, PyObject*);   // PySequence_Contains: Python's `in`
  // PyObject_IsInstance
  int (*is_instance)(PyObject*, PyObject*);
  // PyObject_CallMethodObjArgs: o.name(*args), the arguments ending with nullptr
  PyObject* (*call_method)(PyObject*, PyObject*, ...);
  Py_ssize_t (*long_as)(PyObject*);  // PyLong_AsSsize_t
};

// The API, or nullptr where the process does not have all of it (no Python).
const Api* api();

// getattr(o, name, default) without an AttributeError made and cleared (PyObject_GetOptionalAttr,
// _PyObject_LookupAttr before Python 3.13): 1 found (*out a new reference), 0 not, -1 an
// error; nullptr where the process has neither.
using LookUpAttr = int (*)(PyObject*, PyObject*, PyObject**);
LookUpAttr look_up_attr();

// A strong reference, released when it goes.
class Ref {
 public:
  Ref(const Api& py, PyObject* o) : py_(&py), o_(o) {}  // takes a new reference (or nullptr)
  Ref(Ref&& r) noexcept : py_(r.py_), o_(std::exchange(r.o_, nullptr)) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref& operator=(Ref&&) = delete;
  ~Ref() {
    if (o_ != nullptr) py_->decref(o_);
  }
  PyObject* get() const { return o_; }
  PyObject* release() { return std::exchange(o_, nullptr); }

 private:
  const Api* py_;
  PyObject* o_;
};

inline Ref strong(const Api& py, PyObject* borrowed) {
  py.incref(borrowed);
  return Ref(py, borrowed);
}

// The positional arguments of a METH_VARARGS call, borrowed, one a pointer; false (Python's
// error set) where there are fewer.
inline bool arguments(const Api& py, PyObject* args, std::initializer_list<PyObject**> out) {
  Py_ssize_t i = 0;
  for (PyObject** o : out) {
    *o = py.tuple_item(args, i++);
    if (*o == nullptr) return false;
  }
  return true;
}

// Each empty slot given its text interned (a lookup by an interned str compares by identity),
// kept for the process; false, Python's error set, where one fails: that slot stays empty, so
// the next call interns it again (not a nullptr read with no error set ever after).
inline bool interned(const Api& py,
                     std::initializer_list<std::pair<PyObject**, const char*>> slots) {
  return made_once(slots, py.intern);
}

// The entry of a module walk (python_walk.cpp, python_state_walk.cpp): walked(py, args) with
// Python's API. Where a vector cannot grow, the Python loop walks (False), as where a walk's
// table cannot: no C++ exception crosses into the interpreter.
template <typename Walked>
PyObject* walk_entry(PyObject* args, Walked&& walked) {
  const Api* api = python::api();
  if (api == nullptr) return nullptr;  // not reached: the module checks before it exposes a walk
  try {
    return walked(*api, args);
  } catch (const std::bad_alloc&) {
    return strong(*api, api->false_).release();
  }
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
