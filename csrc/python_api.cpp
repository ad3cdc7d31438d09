// See python_api.h.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include "python_api.h"

#include <dlfcn.h>

namespace fp8_dummy::python {
namespace {

template <typename T>
bool find(T& f, const char* name) {
  f = reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
  return f != nullptr;
}

Api look_up(bool& found) {
  Api a{};
  found = find(a.incref, "Py_IncRef") && find(a.decref, "Py_DecRef") &&
          find(a.is_initialized, "Py_IsInitialized") && find(a.gil_ensure, "PyGILState_Ensure") &&
          find(a.gil_release, "PyGILState_Release") && find(a.call, "PyObject_CallFunction") &&
          find(a.fetch, "PyErr_Fetch") && find(a.str, "PyObject_Str") &&
          find(a.utf8, "PyUnicode_AsUTF8String") && find(a.bytes, "PyBytes_AsString") &&
          find(a.get_attr, "PyObject_GetAttr") && find(a.intern, "PyUnicode_InternFromString") &&
          find(a.dict_get, "PyDict_GetItem") && find(a.dict_next, "PyDict_Next") &&
          find(a.dict_contains, "PyDict_Contains") && find(a.dict_size, "PyDict_Size") &&
          find(a.dict_type, "PyDict_Type") && find(a.list_new, "PyList_New") &&
          find(a.list_append, "PyList_Append") && find(a.long_from, "PyLong_FromSsize_t") &&
          find(a.set_contains, "PySet_Contains") && find(a.set_add, "PySet_Add") &&
          find(a.set_new, "PySet_New") && find(a.tuple_item, "PyTuple_GetItem") &&
          find(a.tuple_pack, "PyTuple_Pack") && find(a.none, "_Py_NoneStruct") &&
          find(a.false_, "_Py_FalseStruct");
  return a;
}

}  // namespace

const Api* api() {
  static bool found = false;
  static const Api table = look_up(found);
  return found ? &table : nullptr;
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
