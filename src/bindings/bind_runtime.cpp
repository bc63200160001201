// Python bindings of the runtime: Kernel (lower + compile + run), the host target description and
// the thread pool. Kernel.run is the hot path of every cached kernel call, so it converts the
// arguments with as little Python machinery as possible and releases the GIL while it runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/compiler.h"
#include "backends/cpu/export.h"
#include "bindings/arrays.h"
#include "bindings/gil.h"
#include "exec/loop_cost.h"
#include "exec/openmp_bridge.h"
#include "exec/perf_counters.h"
#include "exec/thread_pool.h"
#include "ir/builder.h"
#include "ir/ir.h"
#include "passes/fuse.h"
#include "runtime/kernel.h"
#include "runtime/kernel_cost.h"
#include "runtime/nest_profile.h"
#include "target/target.h"

namespace pypto::bindings {
namespace nb = nanobind;
using namespace nb::literals;
using runtime::Kernel;

namespace {

runtime::Backend parse_backend(const std::string& s) {
  if (s == "interp") return runtime::Backend::Interp;
  if (s == "cpu") return runtime::Backend::Cpu;
  if (s == "sim") return runtime::Backend::Sim;
  throw ir::Error("unknown backend '" + s + "' (expected \"interp\", \"cpu\" or \"sim\")");
}

using Shapes = std::vector<std::vector<int64_t>>;

// A dynamic kernel's dimension symbols for a call with inputs of these shapes (the counts of
// `cost` and `nests` are then the call's); none for a static kernel or without shapes.
std::optional<ir::ScalarEnv> call_env(const Kernel& k, const std::optional<Shapes>& input_shapes) {
  const ir::Program& p = k.lowered().expanded;
  if (!input_shapes || !p.has_dynamic_dims()) return std::nullopt;
  return ir::dim_symbol_env(p, *input_shapes);
}

const char* kind_name(ir::BufferKind k) {
  switch (k) {
    case ir::BufferKind::Param:
      return "param";
    case ir::BufferKind::Output:
      return "output";
    default:
      return "temp";
  }
}

void run_kernel(Kernel& k, nb::handle tensors, nb::handle scalars, cpu::RunProfile* profile = nullptr) {
  runtime::RunArgs args;
  // The ndarray handles keep DLPack capsules (and so the memory) alive until the run ends.
  std::vector<AnyArray> keep;
  {
    nb::list ts = nb::borrow<nb::list>(tensors);
    size_t n = ts.size();
    keep.reserve(n);
    args.tensors.reserve(n);
    const auto& params = k.lowered().tensor.params;
    const std::vector<bool>& written = k.written();
    for (size_t i = 0; i < n; ++i) {
      nb::handle h = ts[i];
      // Fast form for tensors whose dtype and shape the caller already matched against the
      // kernel's signature: (data pointer, strides in elements). Saves a DLPack round trip.
      // Torch tensors come this way; they are always writable.
      // A third item, if any, only keeps memory alive (a resolved copy of a torch negative view).
      // A param with dynamic dims takes a fourth item, the shape (checked by Kernel::run).
      const Py_ssize_t tn = PyTuple_CheckExact(h.ptr()) ? PyTuple_GET_SIZE(h.ptr()) : 0;
      if ((tn == 2 || tn == 3 || tn == 4) && i < params.size()) {
        runtime::TensorArg t;
        t.data = reinterpret_cast<void*>(PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(h.ptr(), 0)));
        t.dtype = params[i]->dtype;
        if (tn == 4) {
          t.shape = nb::cast<std::vector<int64_t>>(nb::handle(PyTuple_GET_ITEM(h.ptr(), 3)));
        } else if (params[i]->is_dynamic()) {
          throw ir::Error("tensor argument " + std::to_string(i) +
                          ": a dynamic shape needs (pointer, strides, keep, shape)");
        } else {
          t.shape = params[i]->shape;
        }
        PyObject* st = PyTuple_GET_ITEM(h.ptr(), 1);
        if (!PyTuple_Check(st) || size_t(PyTuple_GET_SIZE(st)) != t.shape.size())
          throw ir::Error("tensor argument " + std::to_string(i) + ": bad (pointer, strides) form");
        t.strides.resize(t.shape.size());
        for (size_t d = 0; d < t.shape.size(); ++d) t.strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        if (PyErr_Occurred()) throw nb::python_error();
        args.tensors.push_back(std::move(t));
        continue;
      }
      AnyArray a;
      if (!nb::try_cast<AnyArray>(h, a, false))
        throw ir::Error("tensor argument " + std::to_string(i) +
                        ": expected an array (NumPy, PyTorch or DLPack), got " + py_type_name(h));
      args.tensors.push_back(to_tensor_arg(a));
      if (i < written.size() && written[i]) args.tensors.back().read_only = !is_writable(h);
      keep.push_back(std::move(a));
    }
  }
  {
    nb::list ss = nb::borrow<nb::list>(scalars);
    size_t n = ss.size();
    args.scalars.reserve(n);
    for (size_t i = 0; i < n; ++i) args.scalars.push_back(to_scalar(ss[i], i));
  }
  interruptible_without_gil([&] { k.run(args, profile); });
}

nb::list spans(const std::vector<cpu::ProfileSpan>& v) {
  nb::list out;
  for (const cpu::ProfileSpan& s : v) out.append(nb::make_tuple(s.nest, s.thread, s.begin_ns, s.end_ns));
  return out;
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def(
      "fusion_names", [] { return passes::fusion_names(); },
      "The names a fusion list may hold (kinds of op and composite ops), sorted (passes/fuse.h).");
  nb::class_<Kernel>(m, "Kernel", "A tensor-level program lowered for one backend, ready to compile and run.")
      .def(
          "__init__",
          [](Kernel* self, const ir::Program& prog, const std::string& backend, bool fusion,
             std::vector<std::string> fusion_ops, int64_t tile_rows, int64_t tile_cols, int64_t mm_tile_m,
             int64_t mm_tile_n, int64_t mm_tile_k, bool parallel, bool double_buffer, bool fusion_off,
             bool promote) {
            passes::PipelineOptions o;
            o.fusion = fusion;
            o.fusion_ops = std::move(fusion_ops);
            o.tile_rows = tile_rows;
            o.tile_cols = tile_cols;
            o.mm_tile_m = mm_tile_m;
            o.mm_tile_n = mm_tile_n;
            o.mm_tile_k = mm_tile_k;
            o.parallel = parallel;
            o.double_buffer = double_buffer;
            o.fusion_off = fusion_off;
            o.promote = promote;
            runtime::Backend be = parse_backend(backend);
            without_gil([&] { new (self) Kernel(prog, be, o); });
          },
          "program"_a, "backend"_a = "cpu", "fusion"_a = false, "fusion_ops"_a = std::vector<std::string>{},
          "tile_rows"_a = 0, "tile_cols"_a = 0, "mm_tile_m"_a = 0, "mm_tile_n"_a = 0, "mm_tile_k"_a = 0,
          "parallel"_a = true, "double_buffer"_a = true, "fusion_off"_a = false, "promote"_a = true)
      .def(
          "run", [](Kernel& k, nb::handle tensors, nb::handle scalars) { run_kernel(k, tensors, scalars); },
          "tensors"_a, "scalars"_a,
          "Run on a list of arrays (one per param: inputs then outputs) and a list of scalars. An entry\n"
          "may also be a tuple (data_pointer, strides) for an array already known to match the param.")
      .def(
          "run_profiled",
          [](Kernel& k, nb::handle tensors, nb::handle scalars) {
            cpu::RunProfile p;
            run_kernel(k, tensors, scalars, &p);
            nb::dict counters;
            for (int i = 0; i < exec::kNumCounters; ++i)
              if (p.counters.any && p.counters.ok[i])
                counters[exec::counter_name(exec::Counter(i))] = p.counters.value[i];
            return nb::make_tuple(spans(p.nests), spans(p.chunks), counters);
          },
          "tensors"_a, "scalars"_a,
          "Run the profiling variant (cpu): ([(nest, thread, begin_ns, end_ns)] per nest,\n"
          "[(nest, thread, begin_ns, end_ns)] per parallel chunk), on the perf_counter_ns clock,\n"
          "{counter name: count} of the event counters that could be read (perf_counter_status).")
      .def(
          "compile_profiling",
          [](Kernel& k) { return interruptible_without_gil([&] { return k.compile_profiling(); }); },
          "Compile the profiling variant now (cpu); seconds spent, 0 when it came from a cache.")
      .def(
          "nests",
          [](const Kernel& k, const ir::Builder* builder, std::optional<Shapes> input_shapes) {
            std::function<std::string(const ir::StmtNode*)> locate;
            if (builder) locate = [builder](const ir::StmtNode* s) { return builder->location(s); };
            const std::optional<ir::ScalarEnv> env = call_env(k, input_shapes);
            nb::list out;
            for (const runtime::NestInfo& n :
                 runtime::describe_nests(k.lowered(), locate, env ? &*env : nullptr))
              out.append(nb::make_tuple(n.lines, n.writes, n.flops, n.bytes, n.exact));
            return out;
          },
          "builder"_a = nb::none(), "input_shapes"_a = nb::none(),
          "Per loop nest (cpu/nests.h): (source lines, global buffers written, flops, bytes, exact); a\n"
          "dynamic kernel's counts for a call with inputs of these shapes.")
      .def(
          "export",
          [](const Kernel& k, const std::string& path, const std::string& emit) {
            cpu::ExportKind kind =
                emit.empty() ? cpu::export_kind_for_path(path) : cpu::parse_export_kind(emit);
            return interruptible_without_gil([&] { return cpu::export_kernel(k.lowered().isa, path, kind); });
          },
          "path"_a, "emit"_a = "",
          "Write the kernel ahead of time (backends/cpu/export.h): emit 'so' (+ a C header), 'exe', 'cpp',\n"
          "'exe.cpp' or 'ir'; '' picks by the path's suffix. Returns the files written.")
      .def("as_text", &Kernel::as_text, "level"_a, "levels: \"tensor\", \"tile\", \"isa\", \"source\" (cpu)")
      .def(
          "compile", [](Kernel& k) { return interruptible_without_gil([&] { return k.compile(); }); },
          "Compile now (cpu backend); returns the seconds spent, 0 when it came from a cache.")
      .def("compiled_from_cache", &Kernel::compiled_from_cache)
      .def_prop_ro("backend",
                   [](const Kernel& k) {
                     switch (k.backend()) {
                       case runtime::Backend::Cpu:
                         return "cpu";
                       case runtime::Backend::Sim:
                         return "sim";
                       default:
                         return "interp";
                     }
                   })
      .def_prop_ro("log", [](const Kernel& k) { return k.lowered().log; })
      .def(
          "params",
          [](const Kernel& k) {
            nb::list out;
            for (auto& b : k.lowered().tensor.params) {
              nb::list shape;
              for (int d = 0; d < b->rank(); ++d)
                shape.append(b->is_dynamic(d) ? nb::none() : nb::cast(b->shape[size_t(d)]));
              out.append(nb::make_tuple(b->name, std::string(ir::dtype_name(b->dtype)), nb::tuple(shape),
                                        kind_name(b->kind)));
            }
            return out;
          },
          "The program's tensor params in calling order: (name, dtype, shape, 'param'|'output'); a\n"
          "dynamic dim is None.")
      .def(
          "output_shapes",
          [](const Kernel& k, const std::vector<std::vector<int64_t>>& input_shapes) {
            return k.output_shapes(input_shapes);
          },
          "input_shapes"_a, "Shapes of the outputs for inputs of these shapes (dynamic dims evaluated).")
      .def(
          "param_shapes",
          [](const Kernel& k, const std::vector<std::optional<std::vector<int64_t>>>& input_shapes) {
            return ir::param_shapes(k.lowered().tensor, input_shapes);
          },
          "input_shapes"_a,
          "Shapes of every param (inputs, then outputs) where some inputs' shapes are None (those that\n"
          "bind a dimension symbol must be given).")
      .def(
          "cost",
          [](const Kernel& k, std::optional<Shapes> input_shapes) {
            const std::optional<ir::ScalarEnv> env = call_env(k, input_shapes);
            runtime::KernelCost c = runtime::count_cost(k.lowered().expanded, env ? &*env : nullptr);
            return nb::make_tuple(c.flops, c.bytes, c.exact);
          },
          "input_shapes"_a = nb::none(),
          "(flops, bytes, exact) counted from the tensor-level program (runtime/kernel_cost.h); a\n"
          "dynamic kernel's for a call with inputs of these shapes.")
      .def(
          "written", [](const Kernel& k) { return k.written(); },
          "Per tensor param, whether the kernel writes it.")
      .def("scalar_params", [](const Kernel& k) {
        nb::list out;
        for (auto& s : k.lowered().tensor.scalars)
          if (!s.is_dim_symbol()) out.append(nb::make_tuple(s.name, std::string(ir::dtype_name(s.dtype))));
        return out;
      });

  m.def(
      "target",
      [] {
        const auto& t = runtime::host_target();
        nb::dict d;
        d["arch"] = t.arch;
        d["cores"] = t.cores;
        nb::dict caches;
        caches["l1d"] = t.l1d_bytes;
        caches["l2"] = t.l2_bytes;
        caches["l3"] = t.l3_bytes;
        d["caches"] = caches;
        d["simd"] = nb::cast(t.simd);
        d["vector_bytes"] = t.vector_bytes;
        // Preferred input alignment: a cache line, or the vector width where that is wider.
        d["alignment"] = std::max<int64_t>(64, t.vector_bytes);
        d["num_threads"] = runtime::num_threads();
        return d;
      },
      "What the start-up analysis found about the host: arch, cores, caches, SIMD.");
  m.def(
      "set_num_threads",
      [](int64_t n) {
        if (n < 1) throw ir::Error("set_num_threads: need at least 1 thread, got " + std::to_string(n));
        runtime::set_num_threads(n);
      },
      "n"_a, "Size the thread pool; at most max_threads() (a few per core).");
  m.def("max_threads", &runtime::max_threads);
  m.def(
      "perf_counter_status",
      [] {
        nb::dict out;
        for (int i = 0; i < exec::kNumCounters; ++i)
          out[exec::counter_name(exec::Counter(i))] = exec::counter_unavailable_reason(exec::Counter(i));
        return out;
      },
      "{counter name: why it cannot be counted on this thread, or '' when it can} (perf_event_open).");
  m.def("cpu_key", &cpu::host_cpu_key, "A short hash of this CPU's model and feature flags.");
  m.def("cache_dir", &cpu::cache_dir, "The private kernel cache directory (created if missing).");
  m.def("prebuild_shared_gemm", &cpu::prebuild_shared_gemm,
        "Builds the shared GEMM library into the package's prebuilt/ directory; returns its path.");
  m.def("num_threads", &runtime::num_threads);
  m.def("share_threads_with_openmp", &runtime::openmp::attach,
        "Run parallel loops on an OpenMP runtime already loaded (torch's); its path, or '' when none is.");
  m.def("stop_sharing_threads", &runtime::openmp::detach, "Back to PyPTO's own thread pool.");
  m.def("reset_loop_costs", &runtime::reset_loop_costs, "Forget the cost model's loop measurements.");

  // (dtype name, shape, device) of any array nanobind can import, without copying it.
  m.def(
      "array_info",
      [](nb::handle obj) {
        AnyArray a;
        if (!nb::try_cast<AnyArray>(obj, a, false))
          throw ir::Error("expected an array, got " + py_type_name(obj));
        nb::list shape;
        for (size_t i = 0; i < a.ndim(); ++i) shape.append(int64_t(a.shape(i)));
        std::string dev =
            a.device_type() == nb::device::cpu::value ? "cpu" : "device" + std::to_string(a.device_type());
        return nb::make_tuple(std::string(ir::dtype_name(dtype_from_dlpack(a.dtype()))), nb::tuple(shape),
                              dev);
      },
      "array"_a);

  // A DLPack-capable view of an array's memory with another element type of the same size: how
  // pypto.Tensor exports bfloat16 data that it stores in a NumPy uint16 array.
  m.def(
      "dlpack_view",
      [](nb::handle obj, const std::string& dtype) {
        AnyArray a;
        if (!nb::try_cast<AnyArray>(obj, a, false))
          throw ir::Error("dlpack_view: expected an array, got " + py_type_name(obj));
        auto t = ir::parse_dtype(dtype);
        if (!t) throw ir::Error("dlpack_view: unknown dtype '" + dtype + "'");
        nb::dlpack::dtype dt = dlpack_from_dtype(*t);
        if (dt.bits != a.dtype().bits) throw ir::Error("dlpack_view: element sizes differ");
        std::vector<size_t> shape(a.ndim());
        std::vector<int64_t> strides(a.ndim());
        for (size_t i = 0; i < a.ndim(); ++i) {
          shape[i] = a.shape(i);
          strides[i] = a.stride(i);
        }
        return nb::ndarray<nb::array_api>(const_cast<void*>(a.data()), a.ndim(), shape.data(), obj,
                                          strides.data(), dt, a.device_type(), a.device_id());
      },
      "array"_a, "dtype"_a);
}

}  // namespace pypto::bindings
