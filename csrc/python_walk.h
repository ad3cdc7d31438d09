// fp8_dummy._C._walk_shape((model, own_order, named_modules, root_key)): the module walk of
// fp8_dummy.tensors.walk_shape (its shape and tensors, a tuple of two lists), None where
// that walk returns None, False where the Python loop is to walk (a container that is not
// an exact dict). setup.py's build only.
#pragma once
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <Python.h>  // first, as Python asks

namespace fp8_dummy::python {

PyObject* walk_shape(PyObject* module, PyObject* args);

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
