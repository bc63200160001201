// Uses the installed PyPTO C++ API (find_package(pypto)): parses a tensor-level program, lowers it
// through the pass pipeline, compiles it with the CPU backend and runs it on its own data.
// Prints "ok <max abs error>" and exits 0 when the result matches a plain loop.
#include <cmath>
#include <cstdio>
#include <vector>

#include "ir/parser.h"
#include "runtime/kernel.h"

int main() {
  using namespace pypto;
  const char* text = R"(func @relu_matmul(%a: f32[32, 24], %b: f32[24, 16], %c: f32[32, 16] out) {
  alloc %t: f32[32, 16] gm
  TMATMUL %t, %a, %b
  TRELU %c, %t
}
)";
  ir::Program p = ir::parse_program(text);
  runtime::Kernel k(p, runtime::Backend::Cpu, passes::PipelineOptions{});
  std::vector<float> a(32 * 24), b(24 * 16), c(32 * 16, NAN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7) % 11) / 11.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 5) % 13) / 13.0f;
  runtime::RunArgs args;
  args.tensors = {{a.data(), ir::DType::F32, {32, 24}, {24, 1}},
                  {b.data(), ir::DType::F32, {24, 16}, {16, 1}},
                  {c.data(), ir::DType::F32, {32, 16}, {16, 1}}};
  k.run(args);
  double worst = 0;
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = 0;
      for (int q = 0; q < 24; ++q) want += double(a[i * 24 + q]) * b[q * 16 + j];
      worst = std::fmax(worst, std::fabs(std::fmax(want, 0.0) - c[i * 16 + j]));
    }
  std::printf("ok %g\n", worst);
  return worst < 1e-4 ? 0 : 1;
}
