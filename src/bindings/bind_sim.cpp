// Python bindings of the NPU simulator: a sim kernel's report, target and timeline switch, and
// the built-in target description (python/pypto/sim.py wraps them).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "backends/sim/simulator.h"
#include "runtime/kernel.h"
#include "target/npu_target.h"

namespace pypto::bindings {
namespace nb = nanobind;
using namespace nb::literals;

namespace {
nb::object report_dict(const runtime::Kernel& k) {
  auto r = k.last_sim_report();
  if (!r) return nb::none();
  nb::dict d;
  d["target"] = r->target;
  d["sequence"] = r->sequence;
  d["clock_ghz"] = r->clock_ghz;
  d["cores"] = r->cores;
  d["cores_used"] = r->cores_used;
  d["cycles"] = r->cycles;
  nb::dict busy, util, count, bytes, memory;
  for (int p = 0; p < sim::kPipes; ++p) {
    busy[sim::pipe_name(p)] = r->busy[size_t(p)];
    util[sim::pipe_name(p)] = r->utilisation(p);
    count[sim::pipe_name(p)] = r->instructions[size_t(p)];
  }
  for (const auto& [path, n] : r->bytes) bytes[path.c_str()] = n;
  for (const auto& [mem, u] : r->memory_use) memory[mem.c_str()] = nb::make_tuple(u.first, u.second);
  d["busy"] = busy;
  d["utilisation"] = util;
  d["instructions"] = count;
  d["bytes"] = bytes;
  d["memory"] = memory;
  nb::list spans, arrivals;
  for (const sim::PipeSpan& s : r->spans) {
    spans.append(nb::make_tuple(s.core, sim::pipe_name(s.pipe), s.begin, s.end, s.what));
    arrivals.append(s.arrive);
  }
  d["spans"] = spans;
  d["arrivals"] = arrivals;
  d["spans_dropped"] = r->spans_dropped;
  return d;
}
}  // namespace

void bind_sim(nb::module_& m) {
  m.def("sim_report", &report_dict, "kernel"_a,
        "The NPU simulator's report of the kernel's last run (a dict), or None before one.");
  m.def(
      "set_sim_target", [](runtime::Kernel& k, const std::string& text) { k.set_sim_target(text); },
      "kernel"_a, "description"_a,
      "Read an NPU target description (docs/npu_sim.md) on top of the built-in one.");
  m.def(
      "set_sim_timeline", [](runtime::Kernel& k, bool on) { k.set_sim_timeline(on); }, "kernel"_a, "on"_a,
      "Record each instruction's span on its pipe in the next runs.");
  m.def(
      "sim_pipe_names",
      []() {
        nb::list names;
        for (int p = 0; p < sim::kPipes; ++p) names.append(sim::pipe_name(p));
        return nb::tuple(names);
      },
      "The names of the simulator's pipes, in the order of their numbers (ir::Pipe).");
  m.def(
      "npu_target_text", []() { return target::default_npu_target_text(); },
      "The built-in NPU target description, in the file format.");
}

}  // namespace pypto::bindings
