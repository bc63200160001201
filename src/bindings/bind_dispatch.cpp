// The C++ call path of @pypto.jit kernels. JitFunction.__call__ (jit.py) hands its positional
// arguments to the kernel's Dispatch first: it reads the arrays' layouts (torch tensors through
// their attributes, NumPy arrays through the NumPy C API: no DLPack capsule, no Python object per
// argument), matches them against the compiled variants the Python path registered (the same
// signature key: library, dtype, shape, dynamic dims by the classes of their extents, scalars by
// type, compile-time values by value), allocates the outputs in the caller's library, checks and
// runs — one call from Python. Everything else returns `dispatch_miss` and the Python path runs
// the call: a first call, autograd, profiling, pypto.Tensor / DLPack arguments, implicit inputs,
// torch tensors the kernel writes, and every failed check (the Python path raises the error, with
// its usual message, before anything runs).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings/arrays.h"
#include "bindings/gil.h"
#include "bindings/torch_glue.h"
#include "ir/ir.h"
#include "runtime/kernel.h"

namespace pypto::bindings {
namespace nb = nanobind;
using namespace nb::literals;

namespace {

// A run measured below this keeps the GIL and skips the Ctrl-C hook (four sigaction calls):
// releasing and retaking both would cost more than the kernel. Only a call with the same scalars
// (and, for a dynamic variant, shapes) as that short run does: a scalar such as a trip count can
// make the next run as long as it likes, and a run holding the GIL cannot be stopped by Ctrl-C.
constexpr int64_t kHoldGilNanos = 20000;
constexpr uint64_t kNoShortRun = 0;

// What decides a run's length besides the variant: its scalars and (dynamic) input shapes.
uint64_t run_length_key(const runtime::RunArgs& ra, size_t n_in, bool dynamic) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x100000001b3ull; };
  for (const ir::ScalarValue& s : ra.scalars) {
    uint64_t bits;
    std::memcpy(&bits, &s.f, sizeof bits);
    mix(s.is_float ? bits : uint64_t(s.i));
  }
  if (dynamic)
    for (size_t j = 0; j < n_in; ++j)
      for (int64_t d : ra.tensors[j].shape) mix(uint64_t(d));
  return h == kNoShortRun ? 1 : h;
}
constexpr int kMaxRank = 8;
constexpr Py_ssize_t kMaxArgs = 32;

// perf_counter_ns's clock, so fast and Python calls share one time line (pypto.get_last_profile).
int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- the last kernel call of each thread (pypto.get_last_profile) -------------------------------
// Either the record tuple of a Python-path call or the fields a fast call stores (no tuple is
// built per call). A slot lives on the heap and is never freed: a thread's exit must not drop
// Python references without the GIL; clear_last_calls() drops every slot's at interpreter exit.
struct LastCall {
  PyObject* record = nullptr;  // (entry, t0, t_run, t1, spans, thread, input shapes)
  PyObject* entry = nullptr;   // a fast call's CompiledKernel, with its clock readings
  int64_t t0 = 0, t_run = 0, t1 = 0;
  std::vector<std::vector<int64_t>> in_shapes;  // a dynamic kernel's input shapes (its profile counts)
  bool dynamic = false;
};
std::mutex g_slots_mu;
std::vector<LastCall*> g_slots;
thread_local LastCall* t_slot = nullptr;

LastCall& last_call() {
  if (!t_slot) {
    t_slot = new LastCall;
    std::lock_guard<std::mutex> l(g_slots_mu);
    g_slots.push_back(t_slot);
  }
  return *t_slot;
}

void record_fast_call(PyObject* entry, int64_t t0, int64_t t_run, int64_t t1,
                      const runtime::RunArgs* dynamic_inputs = nullptr, size_t n_in = 0) {
  LastCall& s = last_call();
  s.dynamic = dynamic_inputs != nullptr;
  if (dynamic_inputs) {
    s.in_shapes.resize(n_in);
    for (size_t j = 0; j < n_in; ++j) s.in_shapes[j] = dynamic_inputs->tensors[j].shape;
  }
  if (s.entry != entry) {
    Py_INCREF(entry);
    Py_XSETREF(s.entry, entry);
  }
  Py_CLEAR(s.record);
  s.t0 = t0;
  s.t_run = t_run;
  s.t1 = t1;
}

// ---- what the fast path may do ------------------------------------------------------------------
// PYPTO_FAST_DISPATCH=0 turns it off (A/B measurements); profiled calls and pypto.mark_dynamic
// (whose marks belong to array objects, not to signatures) take the Python path.
bool g_enabled = true;
bool g_profiling = false;
bool g_dynamic_marks = false;
// NumPy results of at least g_pool_bytes come from pypto.out_pool.empty(shape, dtype) (kept slabs:
// no page faults and zero-fill per call); null: PyArray_Empty always.
PyObject* g_pool_empty = nullptr;
int64_t g_pool_bytes = 0;

struct Names {
  PyObject *requires_grad, *is_cpu, *is_neg, *dtype, *shape, *stride, *data_ptr, *dtype_kwnames;
};
const Names& names() {
  static const Names n = [] {
    Names x;
    x.requires_grad = PyUnicode_InternFromString("requires_grad");
    x.is_cpu = PyUnicode_InternFromString("is_cpu");
    x.is_neg = PyUnicode_InternFromString("is_neg");
    x.dtype = PyUnicode_InternFromString("dtype");
    x.shape = PyUnicode_InternFromString("shape");
    x.stride = PyUnicode_InternFromString("stride");
    x.data_ptr = PyUnicode_InternFromString("data_ptr");
    x.dtype_kwnames = Py_BuildValue("(s)", "dtype");
    return x;
  }();
  return n;
}

// torch is optional: jit.py binds its types once it is imported (references kept for the process),
// with pypto._torch_glue's functions where that module was built for this torch.
struct TorchBinding {
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* empty = nullptr;
  PyObject* is_grad_enabled = nullptr;
  const TorchGlue* glue = nullptr;
};
TorchBinding g_torch;

bool numpy_api_ready() {
  static const bool ok = [] {
    if (PyArray_ImportNumPyAPI() < 0) {
      PyErr_Clear();
      return false;
    }
    return true;
  }();
  return ok;
}

// ---- one call's arguments -----------------------------------------------------------------------
enum class Kind : uint8_t { Torch, Numpy, Int, Float, Value, Other };

struct ArgView {
  Kind kind = Kind::Other;
  PyObject* dtype = nullptr;  // borrowed: a torch.dtype (torch keeps them) or the array's descr
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];  // in elements
  void* data = nullptr;
  bool writable = true;
};

PyObject* call_method(PyObject* self, PyObject* name) {
  PyObject* argv[1] = {self};
  return PyObject_VectorcallMethod(name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

// The ints of a tuple (torch.Size, stride()) into out; false when too long or not ints.
bool read_ints(PyObject* tuple, int64_t* out, int& rank) {
  if (!tuple || !PyTuple_Check(tuple)) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  if (n > kMaxRank) return false;
  rank = int(n);
  for (Py_ssize_t d = 0; d < n; ++d) out[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, d));
  return !PyErr_Occurred();
}

// A torch tensor through its Python attributes (torch's C++ API is not linked). false: not for
// the fast path (autograd records the call, not on the CPU, a lazily negated view, an error).
bool read_torch(PyObject* o, ArgView& v) {
  static_assert(kTorchGlueMaxRank == kMaxRank, "one rank limit");
  if (g_torch.glue) {
    TorchTensorView t;
    if (!g_torch.glue->read(o, &t)) return false;
    v.kind = Kind::Torch;
    v.rank = t.rank;
    v.dtype = t.dtype;
    v.data = t.data;
    v.writable = true;
    std::memcpy(v.shape, t.shape, sizeof(int64_t) * size_t(t.rank));
    std::memcpy(v.strides, t.strides, sizeof(int64_t) * size_t(t.rank));
    return true;
  }
  const Names& s = names();
  nb::object r = nb::steal(PyObject_GetAttr(o, s.requires_grad));
  if (!r.is_valid()) return false;
  if (r.ptr() == Py_True) {
    nb::object on = nb::steal(PyObject_CallNoArgs(g_torch.is_grad_enabled));
    if (!on.is_valid() || on.ptr() != Py_False) return false;
  }
  r = nb::steal(PyObject_GetAttr(o, s.is_cpu));
  if (!r.is_valid() || r.ptr() != Py_True) return false;
  r = nb::steal(call_method(o, s.is_neg));  // its memory holds the un-negated values
  if (!r.is_valid() || r.ptr() != Py_False) return false;
  r = nb::steal(PyObject_GetAttr(o, s.dtype));
  if (!r.is_valid()) return false;
  v.dtype = r.ptr();
  int rank = 0, srank = 0;
  r = nb::steal(PyObject_GetAttr(o, s.shape));
  if (!read_ints(r.ptr(), v.shape, rank)) return false;
  r = nb::steal(call_method(o, s.stride));
  if (!read_ints(r.ptr(), v.strides, srank) || srank != rank) return false;
  r = nb::steal(call_method(o, s.data_ptr));
  if (!r.is_valid()) return false;
  v.data = PyLong_AsVoidPtr(r.ptr());
  if (PyErr_Occurred()) return false;
  v.kind = Kind::Torch;
  v.rank = rank;
  v.writable = true;  // as Kernel.run's tuple form: torch memory is writable
  return true;
}

bool read_numpy(PyObject* o, ArgView& v) {
  auto* a = reinterpret_cast<PyArrayObject*>(o);
  const int nd = PyArray_NDIM(a);
  const npy_intp es = PyArray_ITEMSIZE(a);
  if (nd > kMaxRank || es <= 0) return false;
  const npy_intp* dims = PyArray_DIMS(a);
  const npy_intp* st = PyArray_STRIDES(a);
  for (int d = 0; d < nd; ++d) {
    if (st[d] % es) return false;  // not a whole number of elements: the Python path explains
    v.shape[d] = dims[d];
    v.strides[d] = st[d] / es;
  }
  v.kind = Kind::Numpy;
  v.rank = nd;
  v.dtype = reinterpret_cast<PyObject*>(PyArray_DESCR(a));
  v.data = PyArray_DATA(a);
  v.writable = PyArray_ISWRITEABLE(a);
  return true;
}

// ---- compiled variants --------------------------------------------------------------------------
struct ArgSpec {
  Kind kind = Kind::Other;
  nb::object value;            // Torch / Numpy: the dtype; Value: the value
  std::vector<int64_t> shape;  // a dynamic dim: -1 - its class (dims of one class share an extent)
};

struct OutSpec {
  nb::object dtype;                 // torch.dtype or NumPy dtype
  std::vector<int64_t> shape;       // empty with `dynamic`
  std::vector<nb::object> py_dims;  // torch.empty's size arguments (static shapes)
};

enum class Result : uint8_t { None, Single, Tuple, List };

struct Variant {
  nb::object entry;   // the Python CompiledKernel: profile records, run-time errors
  nb::object holder;  // the _C.Kernel (keeps `kernel` alive)
  runtime::Kernel* kernel = nullptr;
  std::vector<ArgSpec> args;
  bool dynamic = false;
  int classes = 0;
  std::vector<int> inputs;   // per input param, its argument
  std::vector<int> scalars;  // per scalar param, its argument
  std::vector<ir::DType> param_dtypes;
  Kind out_kind = Kind::Torch;
  std::vector<OutSpec> outs;
  Result result = Result::None;
  std::vector<int> result_items;                     // >= 0: an output; < 0: input -1 - item
  std::atomic<uint64_t> short_run_key{kNoShortRun};  // run_length_key of the last run, if short
};

bool same_dtype(PyObject* got, PyObject* want) {
  if (got == want) return true;
  int eq = PyObject_RichCompareBool(got, want, Py_EQ);  // a NumPy dtype equal to the key's
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

bool matches(const Variant& v, PyObject* args, const ArgView* views) {
  int64_t extent[kMaxArgs * kMaxRank];
  for (int c = 0; c < v.classes; ++c) extent[c] = -1;
  for (size_t i = 0; i < v.args.size(); ++i) {
    const ArgSpec& s = v.args[i];
    const ArgView& a = views[i];
    PyObject* obj = PyTuple_GET_ITEM(args, Py_ssize_t(i));
    switch (s.kind) {
      case Kind::Int:
        if (!PyLong_CheckExact(obj)) return false;
        continue;
      case Kind::Float:
        if (!PyFloat_CheckExact(obj)) return false;
        continue;
      case Kind::Value: {
        if (Py_TYPE(obj) != Py_TYPE(s.value.ptr())) return false;
        if (obj == s.value.ptr()) continue;
        int eq = PyObject_RichCompareBool(obj, s.value.ptr(), Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq != 1) return false;
        continue;
      }
      default:
        break;
    }
    if (a.kind != s.kind || a.rank != int(s.shape.size()) || !same_dtype(a.dtype, s.value.ptr()))
      return false;
    for (int d = 0; d < a.rank; ++d) {
      const int64_t want = s.shape[size_t(d)], got = a.shape[d];
      if (want >= 0) {
        if (got != want) return false;
        continue;
      }
      // A dynamic dim: extents 0 and 1 are never dynamic; one class, one extent; two classes,
      // two extents (the signature key numbers extents in order of appearance).
      const int c = int(-1 - want);
      if (got <= 1) return false;
      if (extent[c] == got) continue;
      if (extent[c] != -1) return false;
      for (int o = 0; o < v.classes; ++o)
        if (extent[o] == got) return false;
      extent[c] = got;
    }
  }
  return true;
}

// Run arguments reused across calls on a thread (their vectors keep their capacity); a nested
// call (an output allocation running Python that calls a kernel) gets fresh ones.
struct ScratchArgs {
  runtime::RunArgs args;
  bool busy = false;
};
thread_local ScratchArgs t_scratch;

void set_tensor(runtime::TensorArg& t, void* data, ir::DType dtype, int rank, const int64_t* shape,
                const int64_t* strides, bool read_only) {
  t.data = data;
  t.dtype = dtype;
  t.shape.assign(shape, shape + rank);
  t.strides.assign(strides, strides + rank);
  t.read_only = read_only;
}

// A fresh contiguous output in the caller's library: (object, data pointer), or a null object
// with a Python error set.
std::pair<nb::object, void*> allocate(const Variant& v, const OutSpec& o, const std::vector<int64_t>& shape) {
  const int rank = int(shape.size());
  if (v.out_kind == Kind::Numpy) {
    npy_intp dims[kMaxRank];
    int64_t elems = 1;
    for (int d = 0; d < rank; ++d) dims[d] = npy_intp(shape[size_t(d)]), elems *= shape[size_t(d)];
    // (No element is wider than 16 bytes: the attribute is read only for results that may be large.)
    if (g_pool_empty && elems * 16 >= g_pool_bytes &&
        elems * nb::cast<int64_t>(o.dtype.attr("itemsize")) >= g_pool_bytes) {
      nb::object dims_tuple = nb::steal(PyArray_IntTupleFromIntp(rank, dims));
      if (!dims_tuple.is_valid()) return {nb::object(), nullptr};
      nb::object a =
          nb::steal(PyObject_CallFunctionObjArgs(g_pool_empty, dims_tuple.ptr(), o.dtype.ptr(), nullptr));
      if (!a.is_valid()) return {nb::object(), nullptr};
      return {a, PyArray_DATA(reinterpret_cast<PyArrayObject*>(a.ptr()))};
    }
    Py_INCREF(o.dtype.ptr());  // PyArray_Empty steals the descr
    nb::object a = nb::steal(PyArray_Empty(rank, dims, reinterpret_cast<PyArray_Descr*>(o.dtype.ptr()), 0));
    if (!a.is_valid()) return {nb::object(), nullptr};
    return {a, PyArray_DATA(reinterpret_cast<PyArrayObject*>(a.ptr()))};
  }
  if (g_torch.glue) {
    void* data = nullptr;
    nb::object t = nb::steal(g_torch.glue->empty(shape.data(), rank, o.dtype.ptr(), &data));
    if (t.is_valid()) return {t, data};
  }
  // torch.empty(*shape, dtype=...), as the Python path allocates (the default device, no grad).
  PyObject* argv[kMaxRank + 2];
  nb::object size_tuple, dims[kMaxRank];
  size_t n = 0;
  argv[n++] = nullptr;  // PY_VECTORCALL_ARGUMENTS_OFFSET's slot
  if (rank == 0) {
    size_tuple = nb::steal(PyTuple_New(0));
    argv[n++] = size_tuple.ptr();
  } else if (!o.py_dims.empty()) {
    for (int d = 0; d < rank; ++d) argv[n++] = o.py_dims[size_t(d)].ptr();
  } else {
    for (int d = 0; d < rank; ++d) {
      dims[d] = nb::steal(PyLong_FromLongLong(shape[size_t(d)]));
      argv[n++] = dims[d].ptr();
    }
  }
  argv[n] = o.dtype.ptr();
  nb::object t = nb::steal(PyObject_Vectorcall(
      g_torch.empty, argv + 1, (n - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, names().dtype_kwnames));
  if (!t.is_valid()) return {nb::object(), nullptr};
  nb::object p = nb::steal(call_method(t.ptr(), names().data_ptr));
  if (!p.is_valid()) return {nb::object(), nullptr};
  void* data = PyLong_AsVoidPtr(p.ptr());
  if (PyErr_Occurred()) return {nb::object(), nullptr};
  return {t, data};
}

nb::object g_miss;  // what a call the fast path does not take returns (jit.py: _C.dispatch_miss)

class Dispatch {
 public:
  explicit Dispatch(size_t nargs) : nargs_(nargs) {}

  nb::object call(nb::handle args_h);

  void add(nb::handle entry, nb::handle kernel, nb::handle arg_specs, nb::handle inputs, nb::handle scalars,
           bool torch_outputs, nb::handle outputs, int result, nb::handle result_items);
  void clear() { variants_.clear(); }
  size_t size() const { return variants_.size(); }

  int64_t fast_calls = 0;

 private:
  size_t nargs_;
  std::vector<std::shared_ptr<Variant>> variants_;  // static ones first, as the Python path looks up
};

nb::object Dispatch::call(nb::handle args_h) {
  PyObject* args = args_h.ptr();
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (variants_.empty() || !g_enabled || g_profiling || size_t(n) != nargs_ || n > kMaxArgs) return g_miss;
  const int64_t t0 = now_ns();
  ArgView views[kMaxArgs];
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyTypeObject* t = Py_TYPE(a);
    bool ok = true;
    if (t == &PyArray_Type)
      ok = read_numpy(a, views[i]);
    else if (t == g_torch.tensor || t == g_torch.parameter)
      ok = read_torch(a, views[i]);
    if (!ok) {
      PyErr_Clear();
      return g_miss;
    }
  }
  std::shared_ptr<Variant> v;
  for (const auto& c : variants_) {
    if (c->dynamic && g_dynamic_marks) continue;
    if (matches(*c, args, views)) {
      v = c;
      break;
    }
  }
  if (!v) return g_miss;

  ScratchArgs local;
  ScratchArgs& scratch = t_scratch.busy ? local : t_scratch;
  scratch.busy = true;
  struct Release {
    ScratchArgs& s;
    ~Release() { s.busy = false; }
  } release{scratch};
  runtime::RunArgs& ra = scratch.args;
  const size_t n_in = v->inputs.size(), n_out = v->outs.size();
  ra.tensors.resize(n_in + n_out);
  for (size_t j = 0; j < n_in; ++j) {
    const ArgView& a = views[v->inputs[j]];
    set_tensor(ra.tensors[j], a.data, v->param_dtypes[j], a.rank, a.shape, a.strides, !a.writable);
  }
  ra.scalars.clear();
  try {
    for (size_t j = 0; j < v->scalars.size(); ++j)
      ra.scalars.push_back(to_scalar(PyTuple_GET_ITEM(args, v->scalars[j]), j));
  } catch (const ir::Error&) {
    return g_miss;  // (an int beyond 64 bits) the Python path raises it
  }

  const int64_t t_run = now_ns();
  std::vector<std::vector<int64_t>> dyn_shapes;
  if (v->dynamic && n_out) {
    std::vector<std::vector<int64_t>> in_shapes(n_in);
    for (size_t j = 0; j < n_in; ++j) in_shapes[j] = ra.tensors[j].shape;
    dyn_shapes = v->kernel->output_shapes(in_shapes);
  }
  nb::object outs[kMaxArgs];
  if (n_out > size_t(kMaxArgs)) return g_miss;
  for (size_t j = 0; j < n_out; ++j) {
    const OutSpec& o = v->outs[j];
    const std::vector<int64_t>& shape = v->dynamic ? dyn_shapes[j] : o.shape;
    auto [obj, data] = allocate(*v, o, shape);
    if (!obj.is_valid()) throw nb::python_error();
    outs[j] = std::move(obj);
    int64_t strides[kMaxRank];
    int64_t s = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = s;
      s *= shape[d];
    }
    set_tensor(ra.tensors[n_in + j], data, v->param_dtypes[n_in + j], int(shape.size()), shape.data(),
               strides, false);
  }

  runtime::RunArgs storage;
  const runtime::RunArgs* checked = nullptr;
  try {
    checked = &v->kernel->checked(ra, storage);
  } catch (const ir::Error&) {
    return g_miss;  // the Python path makes the same check and raises its message
  }
  const uint64_t key = run_length_key(ra, n_in, v->dynamic);
  const bool hold_gil = v->short_run_key.load(std::memory_order_relaxed) == key;
  const int64_t t_exec = now_ns();
  try {
    if (hold_gil)
      v->kernel->run_checked(*checked);
    else
      interruptible_without_gil([&] { v->kernel->run_checked(*checked); });
  } catch (const ir::Error& e) {
    v->entry.attr("_run_failed")(std::string(e.what()));  // raises the Python path's PyptoError
    throw;
  }
  const int64_t t1 = now_ns();
  v->short_run_key.store(t1 - t_exec < kHoldGilNanos ? key : kNoShortRun, std::memory_order_relaxed);
  record_fast_call(v->entry.ptr(), t0, t_run, t1, v->dynamic ? &ra : nullptr, n_in);
  ++fast_calls;

  auto item = [&](int k) -> nb::object {
    if (k >= 0) return outs[k];
    return nb::borrow(PyTuple_GET_ITEM(args, v->inputs[size_t(-1 - k)]));
  };
  switch (v->result) {
    case Result::None:
      return nb::none();
    case Result::Single:
      return item(v->result_items[0]);
    case Result::Tuple: {
      nb::object t = nb::steal(PyTuple_New(Py_ssize_t(v->result_items.size())));
      for (size_t j = 0; j < v->result_items.size(); ++j)
        PyTuple_SET_ITEM(t.ptr(), Py_ssize_t(j), item(v->result_items[j]).release().ptr());
      return t;
    }
    case Result::List: {
      nb::list l;
      for (int k : v->result_items) l.append(item(k));
      return l;
    }
  }
  return nb::none();
}

std::vector<int> int_list(nb::handle h) {
  std::vector<int> out;
  for (nb::handle x : h) out.push_back(nb::cast<int>(x));
  return out;
}

std::vector<int64_t> shape_of(nb::handle h) {
  std::vector<int64_t> out;
  for (nb::handle x : h) out.push_back(nb::cast<int64_t>(x));
  return out;
}

void Dispatch::add(nb::handle entry, nb::handle kernel, nb::handle arg_specs, nb::handle inputs,
                   nb::handle scalars, bool torch_outputs, nb::handle outputs, int result,
                   nb::handle result_items) {
  for (const auto& v : variants_)
    if (v->entry.ptr() == entry.ptr()) return;
  if (!numpy_api_ready()) return;
  auto v = std::make_shared<Variant>();
  v->entry = nb::borrow(entry);
  v->holder = nb::borrow(kernel);
  v->kernel = nb::cast<runtime::Kernel*>(kernel);
  if (nb::len(arg_specs) != nargs_) throw ir::Error("Dispatch.add: one spec per argument expected");
  for (nb::handle s : arg_specs) {
    ArgSpec a;
    a.kind = Kind(nb::cast<int>(s[0]));
    a.value = nb::borrow(s[1]);
    if (!s[2].is_none()) a.shape = shape_of(s[2]);
    if (a.shape.size() > size_t(kMaxRank)) return;
    for (int64_t e : a.shape)
      if (e < 0) {
        v->dynamic = true;
        v->classes = std::max(v->classes, int(-e));
      }
    v->args.push_back(std::move(a));
  }
  v->inputs = int_list(inputs);
  v->scalars = int_list(scalars);
  for (const auto& b : v->kernel->lowered().isa.params) v->param_dtypes.push_back(b->dtype);
  v->out_kind = torch_outputs ? Kind::Torch : Kind::Numpy;
  if (torch_outputs && !g_torch.empty) return;
  for (nb::handle o : outputs) {
    OutSpec out;
    out.dtype = nb::borrow(o[0]);
    if (!o[1].is_none()) {
      out.shape = shape_of(o[1]);
      if (out.shape.size() > size_t(kMaxRank)) return;
      for (int64_t e : out.shape) out.py_dims.push_back(nb::int_(e));
    } else if (!v->dynamic) {
      return;
    }
    v->outs.push_back(std::move(out));
  }
  if (v->param_dtypes.size() != v->inputs.size() + v->outs.size() || v->outs.size() > size_t(kMaxArgs))
    return;
  v->result = Result(result);
  v->result_items = int_list(result_items);
  if (v->dynamic)
    variants_.push_back(std::move(v));
  else
    variants_.insert(std::find_if(variants_.begin(), variants_.end(), [](auto& x) { return x->dynamic; }),
                     std::move(v));
}

// ---- JitFunction's call slot -------------------------------------------------------------------
// kernel(a, b, c) reaches Dispatch::call without a Python frame (a third of an 8x8 call's time):
// the class's tp_call is jit_call, while its Python __call__ stays in the class dict for the rest.
// Calls with keywords, a module's hooks, or a miss go to that __call__; torch.compile's dynamo
// reads and traces the Python __call__ (it never runs a type's C slot), and tensors under a
// tracing or functional mode are never read here (read_torch), so those calls go there too.
PyObject* g_call_name = nullptr;
PyObject* g_dispatch_name = nullptr;
PyObject* g_hooks_name = nullptr;

PyObject* python_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyObject* fn = _PyType_Lookup(Py_TYPE(self), g_call_name);  // borrowed
  if (!fn) {
    PyErr_SetString(PyExc_TypeError, "pypto kernel: its class lost __call__");
    return nullptr;
  }
  PyObject* bound = PyMethod_New(fn, self);
  if (!bound) return nullptr;
  PyObject* out = PyObject_Call(bound, args, kwargs);
  Py_DECREF(bound);
  return out;
}

PyObject* jit_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (kwargs && PyDict_GET_SIZE(kwargs) != 0) return python_call(self, args, kwargs);
  PyObject** dict = _PyObject_GetDictPtr(self);
  if (!dict || !*dict) return python_call(self, args, kwargs);
  PyObject* hooks = PyDict_GetItem(*dict, g_hooks_name);  // borrowed (no error is raised)
  PyObject* disp = PyDict_GetItem(*dict, g_dispatch_name);
  if (hooks != Py_None || !disp || !nb::inst_check(disp) || !nb::isinstance<Dispatch>(disp))
    return python_call(self, args, kwargs);
  // Through the bound __call__, so that a C++ exception becomes the Python one nanobind's
  // translators make (std::bad_alloc a MemoryError, ir::Error a PyptoError), as on the Python path.
  PyObject* out = PyObject_CallOneArg(disp, args);
  if (out != g_miss.ptr()) return out;  // (a result, or nullptr with the error set)
  Py_DECREF(out);
  return python_call(self, args, kwargs);
}

}  // namespace

void bind_dispatch(nb::module_& m) {
  {
    const char* e = std::getenv("PYPTO_FAST_DISPATCH");
    g_enabled = !(e && std::string(e) == "0");
  }
  g_miss = nb::steal(PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type)));
  m.attr("dispatch_miss") = g_miss;
  nb::class_<Dispatch>(m, "Dispatch",
                       "The C++ call path of one @pypto.jit kernel: its compiled variants, matched on the "
                       "arguments of each call (bindings/bind_dispatch.cpp).")
      .def(nb::init<size_t>(), "nargs"_a)
      .def("__call__", &Dispatch::call, "args"_a,
           "Run the call (a tuple of positional arguments) on a matching variant; dispatch_miss when the "
           "Python path must take it.")
      .def("add", &Dispatch::add, "entry"_a, "kernel"_a, "arg_specs"_a, "inputs"_a, "scalars"_a,
           "torch_outputs"_a, "outputs"_a, "result"_a, "result_items"_a,
           "Register a compiled variant (jit.py builds the specs); a second add of one entry is ignored.")
      .def("clear", &Dispatch::clear)
      .def_prop_ro("size", &Dispatch::size)
      .def_ro("fast_calls", &Dispatch::fast_calls, "Calls this path ran.");

  m.def(
      "bind_torch",
      [](nb::handle tensor, nb::handle parameter, nb::handle empty, nb::handle is_grad_enabled,
         nb::handle glue) {
        g_torch.tensor = reinterpret_cast<PyTypeObject*>(nb::borrow(tensor).release().ptr());
        g_torch.parameter = reinterpret_cast<PyTypeObject*>(nb::borrow(parameter).release().ptr());
        g_torch.empty = nb::borrow(empty).release().ptr();
        g_torch.is_grad_enabled = nb::borrow(is_grad_enabled).release().ptr();
        g_torch.glue = nullptr;
        if (!glue.is_none()) {
          auto* g = static_cast<const TorchGlue*>(PyCapsule_GetPointer(glue.ptr(), kTorchGlueCapsule));
          if (!g) throw nb::python_error();
          if (g->version == kTorchGlueVersion) g_torch.glue = g;
        }
        return g_torch.glue != nullptr;
      },
      "tensor"_a, "parameter"_a, "empty"_a, "is_grad_enabled"_a, "glue"_a.none() = nb::none(),
      "torch.Tensor, torch.nn.Parameter, torch.empty and torch.is_grad_enabled, for the fast call path,\n"
      "and pypto._torch_glue.api (or None); whether the glue is used.");
  m.def("torch_glue_in_use", [] { return g_torch.glue != nullptr; });
  m.def(
      "install_call_slot",
      [](nb::handle cls) {
        if (!PyType_Check(cls.ptr())) throw nb::type_error("install_call_slot: a class");
        g_call_name = PyUnicode_InternFromString("__call__");
        g_dispatch_name = PyUnicode_InternFromString("_dispatch");
        g_hooks_name = PyUnicode_InternFromString("_hooks_of");
        auto* t = reinterpret_cast<PyTypeObject*>(cls.ptr());
        t->tp_call = jit_call;
        PyType_Modified(t);
      },
      "cls"_a,
      "JitFunction's calls go straight to its instance's Dispatch (its _dispatch), falling back to the "
      "class's Python __call__ (keywords, module hooks, a miss).");
  m.def(
      "set_fast_dispatch", [](bool on) { g_enabled = on; }, "on"_a,
      "Whether kernel calls may take the C++ call path (PYPTO_FAST_DISPATCH=0 starts with it off).");
  m.def("fast_dispatch", [] { return g_enabled; });
  m.def("set_dispatch_profiling", [](bool on) { g_profiling = on; }, "on"_a);
  m.def("set_dynamic_marks", [](bool any) { g_dynamic_marks = any; }, "any"_a);
  m.def(
      "set_output_pool",
      [](nb::handle empty, int64_t min_bytes) {
        Py_XSETREF(g_pool_empty, empty.is_none() ? nullptr : nb::borrow(empty).release().ptr());
        g_pool_bytes = min_bytes;
      },
      "empty"_a.none(), "min_bytes"_a,
      "NumPy results of at least min_bytes come from empty(shape, dtype) (pypto.out_pool.empty); None: "
      "np.empty.");

  m.def(
      "set_last_call",
      [](nb::handle record) {
        LastCall& s = last_call();
        PyObject* r = record.is_none() ? nullptr : nb::borrow(record).release().ptr();
        Py_XSETREF(s.record, r);
        Py_CLEAR(s.entry);
      },
      "record"_a.none(), "The last kernel call of this thread: a profile record tuple, or None.");
  m.def("last_call", []() -> nb::object {
    LastCall& s = last_call();
    if (s.record) return nb::borrow(s.record);
    if (s.entry)
      return nb::make_tuple(nb::borrow(s.entry), s.t0, s.t_run, s.t1, nb::none(), nb::none(),
                            s.dynamic ? nb::cast(s.in_shapes) : nb::none());
    return nb::none();
  });
  m.def("clear_last_calls", [] {
    std::lock_guard<std::mutex> l(g_slots_mu);
    for (LastCall* s : g_slots) {
      Py_CLEAR(s->record);
      Py_CLEAR(s->entry);
    }
  });
}

}  // namespace pypto::bindings
