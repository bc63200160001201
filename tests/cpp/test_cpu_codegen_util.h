// Helpers for the CPU backend tests: tile-level programs built with the IR constructors, host
// tensors, and a runner that executes one program on the CPU backend (and on the interpreter).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "backends/interp/interpreter.h"
#include "ir/ir.h"
#include "test_ir_builders.h"

namespace cpu_test {
using namespace pypto::ir;
using namespace ir_build;
using pypto::runtime::RunArgs;
using pypto::runtime::TensorArg;

inline Expr V(const std::string& n) { return var(n); }

inline Stmt pfor(const std::string& v, Expr lo, Expr hi, Expr step, std::vector<Stmt> body) {
  return for_loop(v, lo, hi, step, std::move(body), LoopKind::Parallel);
}

inline HostF random_f32(std::vector<int64_t> s, unsigned seed) {
  HostF h(std::move(s), DType::F32, 0);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(0.25f, 1.0f);
  for (auto& x : h.data) x = (g() & 1) ? d(g) : -d(g);  // never zero
  return h;
}
inline HostF nan_f32(std::vector<int64_t> s) { return HostF(std::move(s), DType::F32, NAN); }

// Relative norm error ||got - want|| / ||want|| in double; NaN anywhere makes it infinite.
template <class G, class R>
double rel_err(const G& got, const R& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = double(got[i]), w = double(want[i]);
    if (std::isnan(g) != std::isnan(w)) return INFINITY;
    if (std::isnan(w)) continue;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// True when the PTO header library is present; CPU-backend tests skip without it.
inline bool have_headers() {
  return std::filesystem::exists(std::filesystem::path(pypto::cpu::include_dir()) / "pto" / "pto.hpp");
}
#define REQUIRE_PTO_HEADERS() \
  if (!cpu_test::have_headers()) GTEST_SKIP() << "include/pto/pto.hpp not written yet"

// Generates, compiles and runs `p` on the CPU backend.
inline void run_cpu(const Program& p, const RunArgs& a) {
  auto r = pypto::cpu::compile_cpp(pypto::cpu::generate_cpp(p));
  pypto::cpu::run(*r.kernel, a);
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) {
    const char* o = std::getenv(n.c_str());
    had = o != nullptr;
    if (had) old = o;
    setenv(n.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

}  // namespace cpu_test
