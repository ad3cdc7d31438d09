// See python_api.h.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include "python_api.h"

#include <dlfcn.h>

#include <cstring>

namespace fp8_dummy::python {
namespace {

// One row a symbol: the table's field and the name the process exports it under.
struct Slot {
  void* field;
  const char* name;
};

Api look_up(bool& found) {
  Api a{};
  const Slot slots[] = {
      {&a.is_initialized, "Py_IsInitialized"},
      {&a.gil_ensure, "PyGILState_Ensure"},
      {&a.gil_release, "PyGILState_Release"},
      {&a.call, "PyObject_CallFunction"},
      {&a.fetch, "PyErr_Fetch"},
      {&a.str, "PyObject_Str"},
      {&a.utf8, "PyUnicode_AsUTF8String"},
      {&a.bytes, "PyBytes_AsString"},
      {&a.incref, "Py_IncRef"},
      {&a.decref, "Py_DecRef"},
      {&a.get_attr, "PyObject_GetAttr"},
      {&a.intern, "PyUnicode_InternFromString"},
      {&a.dict_get, "PyDict_GetItem"},
      {&a.dict_next, "PyDict_Next"},
      {&a.dict_contains, "PyDict_Contains"},
      {&a.dict_size, "PyDict_Size"},
      {&a.dict_type, "PyDict_Type"},
      {&a.list_new, "PyList_New"},
      {&a.list_append, "PyList_Append"},
      {&a.long_from, "PyLong_FromSsize_t"},
      {&a.set_contains, "PySet_Contains"},
      {&a.set_add, "PySet_Add"},
      {&a.set_new, "PySet_New"},
      {&a.tuple_item, "PyTuple_GetItem"},
      {&a.tuple_pack, "PyTuple_Pack"},
      {&a.dict_new, "PyDict_New"},
      {&a.dict_set, "PyDict_SetItem"},
      {&a.list_size, "PyList_Size"},
      {&a.list_item, "PyList_GetItem"},
      {&a.error_matches, "PyErr_ExceptionMatches"},
      {&a.error_clear, "PyErr_Clear"},
      {&a.error_set, "PyErr_SetString"},
      {&a.none, "_Py_NoneStruct"},
      {&a.false_, "_Py_FalseStruct"},
      {&a.attribute_error, "PyExc_AttributeError"},
      {&a.value_error, "PyExc_ValueError"},
      {&a.long_type, "PyLong_Type"},
      {&a.type_slot, "PyType_GetSlot"},
      {&a.object_type, "PyBaseObject_Type"},
      {&a.is_true, "PyObject_IsTrue"},
      {&a.contains, "PySequence_Contains"},
      {&a.is_instance, "PyObject_IsInstance"},
      {&a.call_method, "PyObject_CallMethodObjArgs"},
      {&a.long_as, "PyLong_AsSsize_t"},
  };
  // Every field is one pointer, so the table covers the struct exactly when the counts agree.
  static_assert(sizeof(slots) / sizeof(Slot) == sizeof(Api) / sizeof(void*));
  found = true;
  for (const Slot& s : slots) {
    void* p = dlsym(RTLD_DEFAULT, s.name);
    found = found && p != nullptr;
    std::memcpy(s.field, &p, sizeof p);  // a function or data pointer: POSIX dlsym's contract
  }
  return a;
}

}  // namespace

const Api* api() {
  static bool found = false;
  static const Api table = look_up(found);
  return found ? &table : nullptr;
}

LookUpAttr look_up_attr() {
  static const LookUpAttr found = [] {
    void* p = dlsym(RTLD_DEFAULT, "PyObject_GetOptionalAttr");
    p = p != nullptr ? p : dlsym(RTLD_DEFAULT, "_PyObject_LookupAttr");
    LookUpAttr f = nullptr;
    std::memcpy(&f, &p, sizeof p);
    return f;
  }();
  return found;
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
