// The functions fp8_dummy._C exposes beside its warning hook (setup.py's build only), each
// defined in its own file.
#pragma once
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks

namespace fp8_dummy::python {

// fp8_dummy._C._walk_shape((model, own_order, named_modules, root_key)), python_walk.cpp:
// the module walk of fp8_dummy.tensors.walk_shape (its shape and tensors, a tuple of two
// lists), None where that walk returns None, False where the Python loop is to walk (a
// container that is not an exact dict).
PyObject* walk_shape(PyObject* module, PyObject* args);

// fp8_dummy._C._state_dict_shape((model, plain_state, module_type, own, plain, disabled,
// deepest)), python_state_walk.cpp: the state_dict() walk of fp8_dummy.tensors.state_dict_shape
// (its shape and tensors, a tuple of two lists), None where that walk returns None, False where
// the Python loop is to walk (a container that is not an exact dict). Run with torch's
// subclass functions disabled (the detach of a Parameter's subclass gives a plain tensor).
PyObject* state_dict_shape(PyObject* module, PyObject* args);

// fp8_dummy._C._kinds((items, from_shape, tensors, fact_kinds, attr)), python_kinds.cpp: the
// numbering of fp8_dummy.engines.core.kinds.kinds_of in C. A tensor's key is (its local name, its
// class, its facts' kind, and where `attr` is a str, its value of that attribute or None), numbered
// in order of first appearance in a dict, as the Python loop numbers them. `items`: the walk's
// shape (from_shape true: the local names are its strings that are not a module's key) or
// the local names. Returns (kind_of, firsts, attrs: a list, or None without attr); raises
// what the dict raises (TypeError: a key that does not hash).
PyObject* kinds(PyObject* module, PyObject* args);

// fp8_dummy._C._classes(tensors), python_classes.cpp: the distinct classes of a list's items, in
// order of first appearance (a list; raises SystemError for anything but a list).
PyObject* classes(PyObject* module, PyObject* items);

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
