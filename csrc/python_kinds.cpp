// fp8_dummy._C._kinds (python_functions.h). A new plan of 100,000 tensors spends about a
// microsecond per tensor in the Python loops that read the local names from the walk's shape and
// number the keys; this reads the same objects and numbers them in the same dict, without a frame
// per tensor.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <cstdint>
#include <initializer_list>

#include "common/open_table.h"
#include "python_api.h"
#include "python_functions.h"

namespace fp8_dummy::python {
namespace {

// The kind numbers of keys seen before, by the identity of their items (local name, class,
// fact kind, attribute): the same objects are the same dict key (a dict compares by identity
// first), so the tuple and the dict's hashing are made once per distinct set of objects, not
// once per tensor. A miss goes to the dict, which decides equality as the Python loop does.
struct SeenKey {
  PyObject *local, *kind, *facts, *value;
  bool operator==(const SeenKey& o) const {
    return local == o.local && kind == o.kind && facts == o.facts && value == o.value;
  }
};
struct SeenKeys {
  struct Slot {
    SeenKey key{};
    PyObject* number = nullptr;  // borrowed from the dict, which holds it for the call
  };
  using Key = SeenKey;
  static Key key(const Slot& s) { return s.key; }
  static bool vacant(const Slot& s) { return s.number == nullptr; }
  static uint64_t word(const Key& k) {
    uint64_t h = reinterpret_cast<uintptr_t>(k.local);
    for (PyObject* p : {k.kind, k.facts}) {
      h = (h ^ reinterpret_cast<uintptr_t>(p)) * 0x9E3779B97F4A7C15ull;
    }
    return h ^ reinterpret_cast<uintptr_t>(k.value);
  }
};

// getattr(t, attr, None): a new reference, or nullptr on an error other than AttributeError.
// Where the process has Python's lookup that makes no AttributeError, that one: a missing
// attribute (the common case) then costs no exception made and cleared.
PyObject* attribute_or_none(const Api& py, PyObject* t, PyObject* attr) {
  if (const LookUpAttr look_up = look_up_attr()) {
    PyObject* value = nullptr;
    const int found = look_up(t, attr, &value);
    if (found < 0) return nullptr;
    return found == 1 ? value : strong(py, py.none).release();
  }
  PyObject* value = py.get_attr(t, attr);
  if (value != nullptr) return value;
  if (!py.error_matches(*py.attribute_error)) return nullptr;
  py.error_clear();
  return strong(py, py.none).release();
}

}  // namespace

PyObject* kinds(PyObject* /*module*/, PyObject* args) {
  const Api* api = python::api();
  if (api == nullptr) return nullptr;  // not reached: the module checks before it exposes this
  const Api& py = *api;
  PyObject *items, *from_shape, *tensors, *fact_kinds, *attr;
  if (!arguments(py, args, {&items, &from_shape, &tensors, &fact_kinds, &attr})) return nullptr;
  const bool shaped = from_shape != py.false_ && from_shape != py.none;
  const bool reads = attr != py.none;
  const Py_ssize_t n = py.list_size(tensors);
  const Py_ssize_t count = py.list_size(items);
  if (n < 0 || count < 0) return nullptr;
  if (py.list_size(fact_kinds) != n) {
    py.error_set(*py.value_error, "_kinds: one fact kind per tensor");
    return nullptr;
  }
  Ref index(py, py.dict_new()), kind_of(py, py.list_new(0)), firsts(py, py.list_new(0));
  Ref attrs(py, reads ? py.list_new(0) : strong(py, py.none).release());
  if (!index.get() || !kind_of.get() || !firsts.get() || !attrs.get()) return nullptr;
  OpenTable<SeenKeys> seen;
  seen.reserve(32);  // where memory is short, no key is kept: each asks the dict
  Py_ssize_t i = 0;
  bool module_key = false;  // the shape's next item is a module's key
  for (Py_ssize_t at = 0; at < count && i < n; ++at) {
    PyObject* local = py.list_item(items, at);
    if (local == nullptr) return nullptr;
    if (shaped) {
      if (module_key) {
        module_key = false;
        continue;
      }
      if (Py_TYPE(local) == py.long_type) {  // type(item) is int: a module's place
        module_key = true;
        continue;
      }
    }
    PyObject* t = py.list_item(tensors, i);
    PyObject* facts = py.list_item(fact_kinds, i);
    if (t == nullptr || facts == nullptr) return nullptr;
    PyObject* kind = reinterpret_cast<PyObject*>(Py_TYPE(t));
    PyObject* value = nullptr;  // a new reference where the rule reads an attribute
    if (reads) {
      value = attribute_or_none(py, t, attr);
      if (value == nullptr) return nullptr;
    }
    const Ref hold_value(py, value);
    if (reads && py.list_append(attrs.get(), value) < 0) return nullptr;
    // The attribute is held by `attrs` for the call, the other items by the argument lists.
    const SeenKey seen_key{local, kind, facts, value};
    if (const SeenKeys::Slot* met = seen.find(seen_key)) {
      if (py.list_append(kind_of.get(), met->number) < 0) return nullptr;
      ++i;
      continue;
    }
    const Ref key(py, reads ? py.tuple_pack(4, local, kind, facts, value)
                            : py.tuple_pack(3, local, kind, facts));
    if (key.get() == nullptr) return nullptr;
    PyObject* number = py.dict_get(index.get(), key.get());  // borrowed
    if (number == nullptr) {  // a new key (or one that does not hash: the set raises)
      Ref made(py, py.long_from(py.dict_size(index.get())));
      if (made.get() == nullptr || py.dict_set(index.get(), key.get(), made.get()) < 0) {
        return nullptr;
      }
      Ref place(py, py.long_from(i));
      if (place.get() == nullptr || py.list_append(firsts.get(), place.get()) < 0) return nullptr;
      number = made.get();
      if (py.list_append(kind_of.get(), number) < 0) return nullptr;
    } else if (py.list_append(kind_of.get(), number) < 0) {
      return nullptr;
    }
    seen.insert({seen_key, number});  // where memory is short, not kept: the dict is asked again
    ++i;
  }
  if (i != n) {
    py.error_set(*py.value_error, "_kinds: fewer local names than tensors");
    return nullptr;
  }
  return py.tuple_pack(3, kind_of.get(), firsts.get(), attrs.get());
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
