// Runs a shell command and captures its output: for the C++ tests that compile and run a
// self-checking program (test_cpu_isa_native.cpp, test_cpu_isa_dot.cpp).
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/compiler.h"
#include "gtest/gtest.h"

// stdout and stderr of `cmd`; *status is pclose's status (-1 when the command could not start).
inline std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

// The head of a self-checking program on the PTO headers that compares results bit for bit:
// CHECK(cond, printf-args) counts (and prints the first 20 of) the failures in `fails`; same(a, b):
// the same bits, or both NaN. PTO_EXPECT_VF16 (compile_and_run_check_avx2_fma) makes it fail to
// compile where the 16-lane paths are not taken.
inline const char* kBitCheckHead = R"PTO(
#include "pto/pto.hpp"
#include <cstdio>
#include <random>
#include <vector>
using namespace pto;
#if defined(PTO_EXPECT_VF16) && !defined(PTO_VF16)
#error "the 16-lane paths are not compiled under these flags"
#endif
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { if (++fails < 20) { std::printf(__VA_ARGS__); std::printf("\n"); } } } while (0)
static bool same(float a, float b) { return bit_cast<uint32_t>(a) == bit_cast<uint32_t>(b) || (a != a && b != b); }
)PTO";

// Compiles the self-checking C++ `program` against the PTO headers with `flags` (after -std=c++17
// and -I), runs it, and expects exit status 0 and "OK" in its output; skips without a compiler.
inline void compile_and_run_check(const char* program, const std::string& flags) {
  const char* env = std::getenv("PYPTO_CXX");
  std::string cxx = env && *env ? env : "c++";
  int st = 0;
  run_capture("command -v " + cxx, &st);
  if (st != 0) GTEST_SKIP() << "no C++ compiler (" << cxx << ")";
  char dir[] = "/tmp/pto_check_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string src = std::string(dir) + "/check.cpp", exe = std::string(dir) + "/check";
  std::ofstream(src) << program;
  std::string out = run_capture(
      cxx + " -std=c++17 " + flags + " -I" + pypto::cpu::include_dir() + " " + src + " -o " + exe, &st);
  EXPECT_EQ(st, 0) << "compile failed:\n" << out;
  if (st == 0) {
    out = run_capture(exe, &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("OK"), std::string::npos) << out;
  }
  std::remove(src.c_str());
  std::remove(exe.c_str());
  rmdir(dir);
}

// The program compiled for AVX2 + FMA without AVX-512 (the 16-lane paths as two 256-bit halves:
// Zen 3 and the like; PTO_EXPECT_VF16 makes the program fail to compile if they are not taken),
// on any x86-64 machine that runs AVX2 + FMA.
inline void compile_and_run_check_avx2_fma(const char* program) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA";
  compile_and_run_check(program, "-O2 -mavx2 -mfma -fno-math-errno -DPTO_EXPECT_VF16");
#else
  GTEST_SKIP() << "x86-64 GCC only";
#endif
}
