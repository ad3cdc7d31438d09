// fp8_dummy._C._classes (python_functions.h). The engines' plan asks which classes a model's
// tensors have before its facts call (a class that dispatches operators itself keeps the list
// out of it): set(map(type, tensors)) at 100,000 tensors is a hash and a set lookup per tensor,
// where a model holds one to three classes. This compares each item's class with those met.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <algorithm>
#include <unordered_set>
#include <vector>

#include "python_api.h"
#include "python_functions.h"

namespace fp8_dummy::python {

PyObject* classes(PyObject* /*module*/, PyObject* items) {
  const Api* api = python::api();
  if (api == nullptr) return nullptr;  // not reached: the module checks before it exposes this
  const Api& py = *api;
  const Py_ssize_t n = py.list_size(items);  // raises SystemError on anything but a list
  if (n < 0) return nullptr;
  Ref out(py, py.list_new(0));
  if (out.get() == nullptr) return nullptr;
  std::vector<PyObject*> met;
  std::unordered_set<PyObject*> many;  // past a few classes: a lookup, not a scan
  PyObject* last = nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = py.list_item(items, i);
    if (item == nullptr) return nullptr;
    auto* kind = reinterpret_cast<PyObject*>(Py_TYPE(item));
    if (kind == last) continue;
    last = kind;
    const bool seen =
        many.empty() ? std::find(met.begin(), met.end(), kind) != met.end() : many.count(kind) > 0;
    if (seen) continue;
    met.push_back(kind);
    if (!many.empty()) {
      many.insert(kind);
    } else if (met.size() > 8) {
      many.insert(met.begin(), met.end());
    }
    if (py.list_append(out.get(), kind) < 0) return nullptr;
  }
  return out.release();
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
