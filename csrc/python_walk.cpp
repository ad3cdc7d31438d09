// fp8_dummy._C._walk_shape: the loop of fp8_dummy.tensors.walk_shape over a model's modules,
// in C. At 100,000 tensors the Python loop costs about a microsecond per tensor, most of a
// kept fill's host cost; this one reads the same dictionaries in the same order and builds
// the same two lists of the same objects. What it does not read as that loop does (a
// container that is not an exact dict, a dictionary missing) it leaves to the Python loop.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <utility>
#include <vector>

#include "common/open_table.h"
#include "python_api.h"
#include "python_functions.h"

namespace fp8_dummy::python {
namespace {

struct Pending {
  Py_ssize_t parent;
  Ref key, module;
};

enum class Step { kDone, kNone, kPython, kError };

// The names the walk reads, interned once (a lookup compares them by identity).
struct Names {
  PyObject *dict, *parameters, *buffers, *modules, *non_persistent, *named_modules;
};

// nullptr, Python's error set, where one cannot be made (tried again at the next call).
const Names* names(const Api& py) {
  static Names n{};
  const bool made = interned(py, {{&n.dict, "__dict__"},
                                  {&n.parameters, "_parameters"},
                                  {&n.buffers, "_buffers"},
                                  {&n.modules, "_modules"},
                                  {&n.non_persistent, "_non_persistent_buffers_set"},
                                  {&n.named_modules, "named_modules"}});
  return made ? &n : nullptr;
}

// The module classes one walk has checked (a model holds a few dozen): asked once per class, not
// per module.
class CheckedClasses {
 public:
  bool has(PyObject* kind) {
    if (kind == last_) return true;
    for (PyObject* k : classes_) {
      if (k == kind) {
        last_ = kind;
        return true;
      }
    }
    return false;
  }
  void add(PyObject* kind) {
    classes_.push_back(kind);
    last_ = kind;
  }

 private:
  std::vector<PyObject*> classes_;
  PyObject* last_ = nullptr;
};

struct Walk {
  const Api& py;
  const Names& name;
  PyObject* own_order;      // fp8_dummy.tensors._OWN_ORDER
  PyObject* named_modules;  // torch.nn.Module.named_modules
  PyObject* shape;
  PyObject* tensors;

  bool exact_dict(PyObject* o) const { return o != nullptr && Py_TYPE(o) == py.dict_type; }

  // put(k); add(t) where t is not None and k not in skip (skip: nullptr, none).
  Step put_tensor(PyObject* k, PyObject* t, PyObject* skip) const {
    if (t == py.none) return Step::kDone;
    if (skip != nullptr) {
      const int in = py.set_contains(skip, k);
      if (in < 0) return Step::kError;
      if (in == 1) return Step::kDone;
    }
    if (py.list_append(shape, k) < 0 || py.list_append(tensors, t) < 0) return Step::kError;
    return Step::kDone;
  }

  // A module class's first meeting in this walk: whether the walk may read its modules (torch's
  // named_modules, kept in own_order), and whether they are met by identity (object's hash and
  // equality; else the Python loop walks: its set asks the class).
  Step check_class(PyTypeObject* type) const {
    auto* kind = reinterpret_cast<PyObject*>(type);
    const int known = py.set_contains(own_order, kind);
    if (known < 0) return Step::kError;
    if (known == 0) {
      Ref own(py, py.get_attr(kind, name.named_modules));
      if (own.get() == nullptr) return Step::kError;
      if (own.get() != named_modules) return Step::kNone;
      if (py.set_add(own_order, kind) < 0) return Step::kError;
    }
    const bool identity =
        py.type_slot(type, Py_tp_hash) == py.type_slot(py.object_type, Py_tp_hash) &&
        py.type_slot(type, Py_tp_richcompare) == py.type_slot(py.object_type, Py_tp_richcompare);
    return identity ? Step::kDone : Step::kPython;
  }

  // One module's place and tensors; its children onto `stack`, the first on top.
  Step visit(Py_ssize_t parent, PyObject* key, PyObject* m, Py_ssize_t place,
             std::vector<Pending>& stack) const {
    Ref d(py, py.get_attr(m, name.dict));
    if (d.get() == nullptr) return Step::kError;
    if (!exact_dict(d.get())) return Step::kPython;
    PyObject* params = py.dict_get(d.get(), name.parameters);
    PyObject* buffers = py.dict_get(d.get(), name.buffers);
    PyObject* children = py.dict_get(d.get(), name.modules);
    if (params == nullptr || buffers == nullptr || children == nullptr) return Step::kNone;
    if (!exact_dict(params) || !exact_dict(buffers) || !exact_dict(children)) {
      return Step::kPython;
    }
    // Held while read: nothing here runs Python code but a key's hash and equality.
    const Ref hold_params = strong(py, params), hold_buffers = strong(py, buffers),
              hold_children = strong(py, children);
    Ref where(py, py.long_from(parent));
    if (where.get() == nullptr || py.list_append(shape, where.get()) < 0 ||
        py.list_append(shape, key) < 0) {
      return Step::kError;
    }
    PyObject *k = nullptr, *t = nullptr;
    Py_ssize_t pos = 0;
    if (py.dict_size(buffers) > 0) {  // {**params, **buffers}, the non-persistent left out
      PyObject* skip = py.dict_get(d.get(), name.non_persistent);
      if (skip == nullptr) return Step::kPython;  // Python's KeyError
      const Ref hold_skip = strong(py, skip);
      while (py.dict_next(params, &pos, &k, &t)) {
        const Ref key_ref = strong(py, k), tensor_ref = strong(py, t);
        PyObject* value = py.dict_get(buffers, k);  // a buffer of the same name wins
        if (const Step s = put_tensor(k, value != nullptr ? value : t, skip); s != Step::kDone) {
          return s;
        }
      }
      pos = 0;
      while (py.dict_next(buffers, &pos, &k, &t)) {
        const Ref key_ref = strong(py, k), tensor_ref = strong(py, t);
        const int dup = py.dict_contains(params, k);
        if (dup < 0) return Step::kError;
        if (dup == 1) continue;  // in the parameters' place
        if (const Step s = put_tensor(k, t, skip); s != Step::kDone) return s;
      }
    } else {
      while (py.dict_next(params, &pos, &k, &t)) {  // exact dict, str keys: no Python code
        if (const Step s = put_tensor(k, t, nullptr); s != Step::kDone) return s;
      }
    }
    // named_modules visits the children in order: the first on top of the stack. Reading
    // the dictionary runs no Python code; the pairs are held once on the stack.
    std::vector<std::pair<PyObject*, PyObject*>> kids;
    pos = 0;
    while (py.dict_next(children, &pos, &k, &t)) {
      if (t != py.none) kids.emplace_back(k, t);
    }
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      stack.push_back({place, strong(py, it->first), strong(py, it->second)});
    }
    return Step::kDone;
  }
};

}  // namespace

namespace {

PyObject* walk_shape_walked(const Api& py, PyObject* args) {
  PyObject *model, *own_order, *named_modules, *root_key;
  if (!arguments(py, args, {&model, &own_order, &named_modules, &root_key})) return nullptr;
  const Names* name = names(py);
  if (name == nullptr) return nullptr;  // Python's MemoryError
  Ref shape(py, py.list_new(0)), tensors(py, py.list_new(0));
  if (shape.get() == nullptr || tensors.get() == nullptr) return nullptr;
  const Walk w{py, *name, own_order, named_modules, shape.get(), tensors.get()};
  std::vector<Pending> stack;
  stack.push_back({-1, strong(py, root_key), strong(py, model)});
  // The modules met, by identity: Python's set for modules whose class keeps object's hash and
  // equality (a module is then equal to itself alone). Each is held by its parent's dictionary
  // (or the stack) for the walk.
  OpenTable<NonzeroSet<PyObject*>> seen;
  seen.reserve(512);  // where memory is short, the first insert says so
  CheckedClasses checked;
  Py_ssize_t place = 0;
  while (!stack.empty()) {
    Pending next = std::move(stack.back());
    stack.pop_back();
    PyTypeObject* type = Py_TYPE(next.module.get());
    Step step = Step::kDone;
    if (!checked.has(reinterpret_cast<PyObject*>(type))) {
      step = w.check_class(type);
      if (step == Step::kDone) checked.add(reinterpret_cast<PyObject*>(type));
    }
    if (step == Step::kDone) {
      const auto [met, added] = seen.insert(next.module.get());
      if (met == nullptr) step = Step::kPython;  // no memory for the table: Python's set
      if (met != nullptr && !added) continue;
    }
    if (step == Step::kDone)
      step = w.visit(next.parent, next.key.get(), next.module.get(), place, stack);
    switch (step) {
      case Step::kDone:
        break;
      case Step::kNone:
        return strong(py, py.none).release();
      case Step::kPython:
        return strong(py, py.false_).release();
      case Step::kError:
        return nullptr;
    }
    ++place;
  }
  return py.tuple_pack(2, shape.get(), tensors.get());
}

}  // namespace

// args: (model, own_order, named_modules, root_key); see python_functions.h.
PyObject* walk_shape(PyObject* /*module*/, PyObject* args) {
  return walk_entry(args, walk_shape_walked);
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
