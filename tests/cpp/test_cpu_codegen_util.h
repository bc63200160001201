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

// b[r0 : r0+rows, c0 : c0+cols] clamped to the buffer, as a front end slices it.
inline View window(const BufferRef& b, Expr r0, Expr c0, int64_t rows, int64_t cols) {
  View v = View::whole(b);
  v.offset = {r0, c0};
  v.size = {rows, cols};
  v.valid = {min(I(rows), I(b->shape[0]) - r0), min(I(cols), I(b->shape[1]) - c0)};
  return v;
}

inline Stmt pfor(const std::string& v, Expr lo, Expr hi, Expr step, std::vector<Stmt> body) {
  return for_loop(v, lo, hi, step, std::move(body), LoopKind::Parallel);
}

inline Program program(std::string name, std::vector<BufferRef> params, std::vector<Stmt> body,
                       std::vector<ScalarParam> scalars = {}) {
  Program p;
  p.name = std::move(name);
  p.params = std::move(params);
  p.scalars = std::move(scalars);
  p.body = std::move(body);
  return p;
}

// A host tensor of any element type, row-major unless strides are given.
template <class T>
struct Host {
  std::vector<T> data;
  std::vector<int64_t> shape, strides;
  DType dtype;
  Host(std::vector<int64_t> s, DType t, T fill) : shape(std::move(s)), dtype(t) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(size_t(n), fill);
    strides.assign(shape.size(), 1);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  }
  T& at(int64_t r, int64_t c) { return data[size_t(r * strides[0] + c * strides[1])]; }
  TensorArg arg() { return TensorArg{data.data(), dtype, shape, strides}; }
};
using HostF = Host<float>;

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
