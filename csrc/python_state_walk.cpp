// fp8_dummy._C._state_dict_shape: the loop of fp8_dummy.tensors.state_dict_shape over a model's
// modules (state_dict()'s walk: a module reached twice is walked twice), in C. SGLang's dummy
// fill walks its model in state_dict() order at every load, a kept plan too, where the Python
// loop's work per module and per tensor is paid each time. This reads the same
// dictionaries in the same order, asks the same questions of the same objects (each class
// once per walk), and builds the same two lists of the same objects; what it does not read as
// that loop does (a container that is not an exact dict, a dictionary that a class's own
// detach() changed while it is read: a value replaced as much as its size) it leaves to the
// Python loop.
#ifdef FP8_DUMMY_PYTHON_MODULE
#include <cstdint>
#include <utility>
#include <vector>

#include "python_api.h"
#include "python_functions.h"

namespace fp8_dummy::python {
namespace {

// What the walk returns: the walk made, None (state_dict() decides), False (the Python loop
// walks), or Python's error set.
enum class Step { kDone, kNone, kPython, kError };

// The names the walk reads, interned once (a lookup compares them by identity).
struct Names {
  PyObject *dict, *pre_hooks, *hooks, *parameters, *buffers, *modules, *non_persistent, *state_dict,
      *save, *extra_state, *torch_function, *detach, *empty;
};

// nullptr, Python's error set, where one cannot be made (tried again at the next call).
const Names* names(const Api& py) {
  static Names n{};
  const bool made = interned(py, {{&n.dict, "__dict__"},
                                  {&n.pre_hooks, "_state_dict_pre_hooks"},
                                  {&n.hooks, "_state_dict_hooks"},
                                  {&n.parameters, "_parameters"},
                                  {&n.buffers, "_buffers"},
                                  {&n.modules, "_modules"},
                                  {&n.non_persistent, "_non_persistent_buffers_set"},
                                  {&n.state_dict, "state_dict"},
                                  {&n.save, "_save_to_state_dict"},
                                  {&n.extra_state, "get_extra_state"},
                                  {&n.torch_function, "__torch_function__"},
                                  {&n.detach, "detach"},
                                  {&n.empty, ""}});  // the root's key: Python's one empty str
  return made ? &n : nullptr;
}

// What the walk does with a tensor of a class: add it, add its detach(), or decline the model.
enum class Take { kItself, kDetached, kNone };

// The classes one walk has met with what it decided (a model holds a few dozen module classes
// and one to three tensor classes): asked once per class, not per module or tensor. Each class
// held, so that its address names it for the whole walk.
template <typename Value>
class MetClasses {
 public:
  const Value* find(PyObject* kind) const {
    if (kind == last_) return &last_value_;
    for (const auto& [k, v] : met_) {
      if (k.get() == kind) return &v;
    }
    return nullptr;
  }
  void add(const Api& py, PyObject* kind, Value v) {
    met_.emplace_back(strong(py, kind), v);
    last_ = kind;
    last_value_ = v;
  }

 private:
  std::vector<std::pair<Ref, Value>> met_;
  PyObject* last_ = nullptr;
  Value last_value_{};
};

struct Pending {
  Py_ssize_t parent;
  Ref key, module;
  Ref from;  // the parent's children (nullptr: the root)
};

struct Walk {
  const Api& py;
  const Names& name;
  PyObject* plain_state;  // fp8_dummy.tensors._PLAIN_STATE: module classes already checked
  PyObject* module_type;  // torch.nn.Module
  PyObject* own;          // Module's (state_dict, _save_to_state_dict, get_extra_state)
  PyObject* plain;        // fp8_dummy.tensors._PLAIN_TENSORS: (Tensor, Parameter)
  PyObject* disabled;     // torch._C._disabled_torch_function_impl
  Py_ssize_t deepest;     // fp8_dummy.tensors._DEEPEST
  PyObject* shape;
  PyObject* tensors;
  MetClasses<bool> modules_met{};  // true: state_dict() is Module's own
  MetClasses<Take> tensors_met{};
  std::vector<std::pair<Ref, Ref>> pairs_{};  // one dictionary's items at a time

  bool exact_dict(PyObject* o) const { return o != nullptr && Py_TYPE(o) == py.dict_type; }

  // `kind not in _PLAIN_STATE` and then Python's checks of it, in their order: isinstance,
  // then state_dict, _save_to_state_dict and get_extra_state each Module's own.
  Step check_module(PyObject* m) {
    auto* kind = reinterpret_cast<PyObject*>(Py_TYPE(m));
    if (const bool* known = modules_met.find(kind)) return *known ? Step::kDone : Step::kNone;
    const int in = py.set_contains(plain_state, kind);
    if (in < 0) return Step::kError;
    if (in == 0) {
      const int module = py.is_instance(m, module_type);
      if (module < 0) return Step::kError;
      bool same = module == 1;
      PyObject* const asked[] = {name.state_dict, name.save};
      for (Py_ssize_t i = 0; same && i < 2; ++i) {
        Ref found(py, py.get_attr(kind, asked[i]));
        if (found.get() == nullptr) return Step::kError;
        same = found.get() == py.tuple_item(own, i);
      }
      if (same) {  // getattr(kind, "get_extra_state", None)
        Ref found(py, attribute_or_none(kind, name.extra_state));
        if (found.get() == nullptr) return Step::kError;
        same = found.get() == py.tuple_item(own, 2);
      }
      if (!same) {
        modules_met.add(py, kind, false);
        return Step::kNone;
      }
      if (py.set_add(plain_state, kind) < 0) return Step::kError;
    }
    modules_met.add(py, kind, true);
    return Step::kDone;
  }

  // getattr(o, attr, None): a new reference, or nullptr (Python's error set).
  PyObject* attribute_or_none(PyObject* o, PyObject* attr) const {
    PyObject* value = py.get_attr(o, attr);
    if (value != nullptr || !py.error_matches(*py.attribute_error)) return value;
    py.error_clear();
    return strong(py, py.none).release();
  }

  // `type(t) in plain`, else whether the class's __torch_function__ is Parameter's (disabled:
  // state_dict's detach then runs torch's own), else the model is declined.
  Step take_of(PyObject* t, Take& take) {
    auto* kind = reinterpret_cast<PyObject*>(Py_TYPE(t));
    if (const Take* known = tensors_met.find(kind)) {
      take = *known;
      return Step::kDone;
    }
    const int in = py.contains(plain, kind);
    if (in < 0) return Step::kError;
    if (in == 1) {
      take = Take::kItself;
    } else {
      Ref own_function(py, py.get_attr(kind, name.torch_function));
      if (own_function.get() == nullptr) return Step::kError;
      take = own_function.get() == disabled ? Take::kDetached : Take::kNone;
    }
    tensors_met.add(py, kind, take);
    return Step::kDone;
  }

  // put(k); add(t, or its detach()) where t is not None; `ran` set where a detach() ran (a
  // class's own may run Python code that changes any dictionary). For a buffer (`params`: its
  // module's parameters), also where k is not in skip, and the model declined where a
  // parameter is under the same name.
  Step put_tensor(PyObject* k, PyObject* t, bool& ran, PyObject* skip = nullptr,
                  PyObject* params = nullptr) {
    if (t == py.none) return Step::kDone;
    if (skip != nullptr) {
      const int in = py.contains(skip, k);
      if (in < 0) return Step::kError;
      if (in == 1) return Step::kDone;
    }
    if (params != nullptr) {  // state_dict() keeps one entry, the buffer in the parameter's place
      PyObject* param = py.dict_get(params, k);
      if (param != nullptr && param != py.none) return Step::kNone;
    }
    Take take = Take::kItself;
    if (const Step s = take_of(t, take); s != Step::kDone) return s;
    if (take == Take::kNone) return Step::kNone;
    if (py.list_append(shape, k) < 0) return Step::kError;
    if (take == Take::kItself) return py.list_append(tensors, t) < 0 ? Step::kError : Step::kDone;
    ran = true;
    Ref detached(py, py.call_method(t, name.detach, nullptr));
    if (detached.get() == nullptr || py.list_append(tensors, detached.get()) < 0) {
      return Step::kError;
    }
    return Step::kDone;
  }

  // The items of an exact dict, held: a detach() may run Python code that changes it.
  void items(PyObject* d, std::vector<std::pair<Ref, Ref>>& out) const {
    out.clear();
    PyObject *k = nullptr, *v = nullptr;
    Py_ssize_t pos = 0;
    while (py.dict_next(d, &pos, &k, &v)) out.emplace_back(strong(py, k), strong(py, v));
  }

  // Whether the exact dict d holds `pairs` and nothing else, in their order: the same key and
  // value objects.
  bool holds(PyObject* d, const std::vector<std::pair<Ref, Ref>>& pairs) const {
    if (py.dict_size(d) != static_cast<Py_ssize_t>(pairs.size())) return false;
    PyObject *k = nullptr, *v = nullptr;
    Py_ssize_t pos = 0;
    size_t i = 0;
    while (py.dict_next(d, &pos, &k, &v)) {
      if (i == pairs.size() || pairs[i].first.get() != k || pairs[i].second.get() != v) {
        return false;
      }
      ++i;
    }
    return i == pairs.size();
  }

  // put(k, t, ran) for each item of the exact dict d, in order, read as Python's loop over
  // d.items() reads them, or the model left to that loop: from the items held, each still d's
  // (d's size kept, the same value under its key) where a detach() ran before it, and d holding
  // them all and nothing else after them. A detach() that replaced a value (which Python's loop
  // would read where it comes after), or added or removed a key (Python's iteration raises
  // where d's size changed, and may where its keys did), leaves the model to the Python loop
  // before another detach() runs; the same value put back is the same read.
  template <typename Put>
  Step put_items(PyObject* d, Put&& put) {
    items(d, pairs_);
    const auto size = static_cast<Py_ssize_t>(pairs_.size());
    bool ran = false;
    for (const auto& [k, t] : pairs_) {
      if (ran && (py.dict_size(d) != size || py.dict_get(d, k.get()) != t.get())) {
        return Step::kPython;
      }
      if (const Step s = put(k.get(), t.get(), ran); s != Step::kDone) return s;
    }
    return !ran || holds(d, pairs_) ? Step::kDone : Step::kPython;
  }

  // One module's checks, place and tensors; its children onto `stack`, the first on top.
  // `depths`: each visited module's nesting, by its place.
  Step visit(const Pending& next, std::vector<Py_ssize_t>& depths, std::vector<Pending>& stack) {
    PyObject* m = next.module.get();
    // Still its parent's child under its key: state_dict() reads a parent's children as it comes
    // to each, and a detach() in a module walked since this one was pushed may have replaced it.
    if (next.from.get() != nullptr && py.dict_get(next.from.get(), next.key.get()) != m) {
      return Step::kPython;
    }
    if (const Step s = check_module(m); s != Step::kDone) return s;
    Ref d(py, py.get_attr(m, name.dict));
    if (d.get() == nullptr) return Step::kError;
    if (!exact_dict(d.get())) return Step::kPython;
    for (PyObject* hooks : {name.pre_hooks, name.hooks}) {  // d[...] or d[...]: None
      PyObject* found = py.dict_get(d.get(), hooks);
      if (found == nullptr) return Step::kNone;  // Python's KeyError
      const Ref hold = strong(py, found);
      const int any = py.is_true(found);
      if (any < 0) return Step::kError;
      if (any == 1) return Step::kNone;
    }
    PyObject* params = py.dict_get(d.get(), name.parameters);
    PyObject* buffers = py.dict_get(d.get(), name.buffers);
    PyObject* children = py.dict_get(d.get(), name.modules);
    PyObject* skip = py.dict_get(d.get(), name.non_persistent);
    if (params == nullptr || buffers == nullptr || children == nullptr || skip == nullptr) {
      return Step::kNone;  // Python's KeyError
    }
    if (!exact_dict(params) || !exact_dict(buffers) || !exact_dict(children)) {
      return Step::kPython;
    }
    const Ref hold_params = strong(py, params), hold_buffers = strong(py, buffers),
              hold_children = strong(py, children), hold_skip = strong(py, skip);
    const Py_ssize_t depth = next.parent >= 0 ? depths[next.parent] + 1 : 0;
    if (depth > deepest) return Step::kNone;
    const auto place = static_cast<Py_ssize_t>(depths.size());
    depths.push_back(depth);
    Ref where(py, py.long_from(next.parent));
    if (where.get() == nullptr || py.list_append(shape, where.get()) < 0 ||
        py.list_append(shape, next.key.get()) < 0) {
      return Step::kError;
    }
    const Step put_params = put_items(
        params, [&](PyObject* k, PyObject* t, bool& ran) { return put_tensor(k, t, ran); });
    if (put_params != Step::kDone) return put_params;
    if (py.dict_size(buffers) > 0) {
      const Step put_buffers = put_items(buffers, [&](PyObject* k, PyObject* t, bool& ran) {
        return put_tensor(k, t, ran, skip, params);
      });
      if (put_buffers != Step::kDone) return put_buffers;
    }
    // Python pushes reversed(children.items()): the first child on top of the stack.
    std::vector<std::pair<Ref, Ref>>& pairs = pairs_;
    items(children, pairs);
    for (auto it = pairs.rbegin(); it != pairs.rend(); ++it) {
      if (it->second.get() == py.none) continue;
      stack.push_back({place, std::move(it->first), std::move(it->second), strong(py, children)});
    }
    return Step::kDone;
  }
};

}  // namespace

namespace {

PyObject* state_dict_shape_walked(const Api& py, PyObject* args) {
  PyObject *model, *plain_state, *module_type, *own, *plain, *disabled, *deepest_arg;
  if (!arguments(py, args,
                 {&model, &plain_state, &module_type, &own, &plain, &disabled, &deepest_arg})) {
    return nullptr;
  }
  const Py_ssize_t deepest = py.long_as(deepest_arg);
  if (deepest < 0) {
    py.error_set(*py.value_error, "_state_dict_shape: the deepest nesting, an int >= 0");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < 3; ++i) {
    if (py.tuple_item(own, i) == nullptr) return nullptr;  // Python's IndexError or TypeError
  }
  const Names* name = names(py);
  if (name == nullptr) return nullptr;  // Python's MemoryError
  Ref shape(py, py.list_new(0)), tensors(py, py.list_new(0));
  if (shape.get() == nullptr || tensors.get() == nullptr) return nullptr;
  Walk w{py,    *name,    plain_state, module_type, own,
         plain, disabled, deepest,     shape.get(), tensors.get()};
  std::vector<Pending> stack;
  stack.push_back({-1, strong(py, name->empty), strong(py, model), Ref(py, nullptr)});
  std::vector<Py_ssize_t> depths;
  while (!stack.empty()) {
    Pending next = std::move(stack.back());
    stack.pop_back();
    switch (w.visit(next, depths, stack)) {
      case Step::kDone:
        break;
      case Step::kNone:
        return strong(py, py.none).release();
      case Step::kPython:
        return strong(py, py.false_).release();
      case Step::kError:
        return nullptr;
    }
  }
  return py.tuple_pack(2, shape.get(), tensors.get());
}

}  // namespace

// args: (model, plain_state, module_type, own, plain, disabled, deepest); see
// python_functions.h.
PyObject* state_dict_shape(PyObject* /*module*/, PyObject* args) {
  return walk_entry(args, state_dict_shape_walked);
}

}  // namespace fp8_dummy::python
#endif  // FP8_DUMMY_PYTHON_MODULE
