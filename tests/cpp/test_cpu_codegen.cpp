// CPU backend end to end: hand-built tile-level programs -> generated C++ -> compiled -> run,
// compared with a C++ reference in double and with the reference interpreter on the same inputs.
#include <cstring>

#include "ir/verifier.h"
#include "test_cpu_codegen_util.h"

namespace cpu_test {
namespace {

// Elementwise with ragged edges on both axes, an outer parallel loop, tile-tile and tile-scalar
// forms: C = (A + B) * A - 0.5.
Program elementwise_program(int64_t M, int64_t N) {
  auto A = param("A", {M, N}), B = param("B", {M, N}), C = output("C", {M, N});
  auto ta = tile("ta", 16, 32), tb = tile("tb", 16, 32), tc = tile("tc", 16, 32);
  Expr i = V("i"), j = V("j");
  return program(
      "elementwise", {A, B, C},
      {pfor("i", I(0), I(M), I(16),
            {for_loop("j", I(0), I(N), I(32),
                      {alloc(ta), alloc(tb), alloc(tc), op(Opcode::TLOAD, {W(ta), clamped(A, i, j, 16, 32)}),
                       op(Opcode::TLOAD, {W(tb), clamped(B, i, j, 16, 32)}),
                       op(Opcode::TADD, {W(tc), W(ta), W(tb)}), op(Opcode::TMUL, {W(tc), W(tc), W(ta)}),
                       op(Opcode::TSUB, {W(tc), W(tc), F(0.5)}),
                       op(Opcode::TSTORE, {clamped(C, i, j, 16, 32), W(tc)})})})});
}

TEST(CpuCodegen, ElementwiseRaggedMatchesReferenceAndInterpreter) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 37, N = 70;
  Program p = elementwise_program(M, N);
  HostF A = random_f32({M, N}, 1), B = random_f32({M, N}, 2), C = nan_f32({M, N}), Ci = nan_f32({M, N});
  run_cpu(p, {{A.arg(), B.arg(), C.arg()}, {}});
  pypto::interp::interpret(p, {{A.arg(), B.arg(), Ci.arg()}, {}});
  std::vector<double> want(A.data.size());
  for (size_t k = 0; k < want.size(); ++k) want[k] = (double(A.data[k]) + B.data[k]) * A.data[k] - 0.5;
  EXPECT_LT(rel_err(C.data, want), 1e-6);
  EXPECT_EQ(rel_err(C.data, Ci.data), 0.0);  // same float operations in the same order
}

TEST(CpuCodegen, GeneratedSourceShape) {
  std::string src = pypto::cpu::generate_cpp(elementwise_program(37, 70));
  EXPECT_NE(src.find("#include <pto/pto.hpp>"), std::string::npos);
  EXPECT_NE(src.find("extern \"C\""), std::string::npos);
  EXPECT_NE(src.find("void pypto_kernel(const pto_kernel_args* args)"), std::string::npos);
  EXPECT_NE(src.find("pto::parallel_for(args->parallel_for"), std::string::npos);
  EXPECT_NE(src.find("pto::Tile<float, 16, 32> t_ta;"), std::string::npos);
  // the run is an elementwise chain (one call; chain_nest below has the instructions as written)
  EXPECT_NE(src.find("pto::fused::chain_rows<"), std::string::npos);
  EXPECT_NE(src.find("pto::fused::Binary<pto::detail::OpAdd, 2, 0, 1>"), std::string::npos);
  EXPECT_NE(src.find("pto::elem::cast<float>(0.5))"), std::string::npos);
  EXPECT_NE(src.find("pto::gview("), std::string::npos);
  EXPECT_EQ(src.find("std::"), std::string::npos) << "generated code should not need the standard library";
}

// C = A @ B with 16x16x16 tiles; the first k tile uses TMATMUL, the rest TMATMUL_ACC (an If).
Program matmul_program(int64_t M, int64_t K, int64_t N) {
  auto A = param("A", {M, K}), B = param("B", {K, N}), C = output("C", {M, N});
  auto acc = tile("acc", 16, 16, DType::F32, Space::Acc);
  auto ta = tile("ta", 16, 16, DType::F32, Space::Mat), tb = tile("tb", 16, 16, DType::F32, Space::Mat);
  Expr i = V("i"), j = V("j"), k = V("k");
  Stmt kloop = for_loop("k", I(0), I(K), I(16),
                        {alloc(ta), alloc(tb), op(Opcode::TLOAD, {W(ta), clamped(A, i, k, 16, 16)}),
                         op(Opcode::TLOAD, {W(tb), clamped(B, k, j, 16, 16)}),
                         if_then(cmp(ExprOp::Eq, k, I(0)), {op(Opcode::TMATMUL, {W(acc), W(ta), W(tb)})},
                                 {op(Opcode::TMATMUL_ACC, {W(acc), W(ta), W(tb)})})});
  return program(
      "matmul", {A, B, C},
      {pfor("i", I(0), I(M), I(16),
            {for_loop("j", I(0), I(N), I(16),
                      {alloc(acc), kloop, op(Opcode::TSTORE, {clamped(C, i, j, 16, 16), W(acc)})})})});
}

TEST(CpuCodegen, MatmulTilesWithRaggedEdges) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 50, K = 45, N = 33;
  Program p = matmul_program(M, K, N);
  HostF A = random_f32({M, K}, 3), B = random_f32({K, N}, 4), C = nan_f32({M, N}), Ci = nan_f32({M, N});
  run_cpu(p, {{A.arg(), B.arg(), C.arg()}, {}});
  pypto::interp::interpret(p, {{A.arg(), B.arg(), Ci.arg()}, {}});
  std::vector<double> want(size_t(M * N), 0.0);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c)
      for (int64_t q = 0; q < K; ++q) want[size_t(r * N + c)] += double(A.at(r, q)) * B.at(q, c);
  EXPECT_LT(rel_err(C.data, want), 1e-5);
  EXPECT_LT(rel_err(C.data, Ci.data), 1e-5);
}

// Row sums over column tiles: TROWSUM into a partial, TADD into the accumulator.
TEST(CpuCodegen, RowReduction) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 21, N = 75;
  auto A = param("A", {M, N}), S = output("S", {M, 1});
  auto t = tile("t", 8, 32), acc = tile("acc", 8, 1), part = tile("part", 8, 1);
  Expr i = V("i"), j = V("j");
  Program p =
      program("rowsum", {A, S},
              {pfor("i", I(0), I(M), I(8),
                    {alloc(acc), alloc(part), alloc(t),
                     for_loop("j", I(0), I(N), I(32),
                              {op(Opcode::TLOAD, {W(t), clamped(A, i, j, 8, 32)}),
                               if_then(cmp(ExprOp::Eq, j, I(0)), {op(Opcode::TROWSUM, {W(acc), W(t)})},
                                       {op(Opcode::TROWSUM, {W(part), W(t)}),
                                        op(Opcode::TADD, {W(acc), W(acc), W(part)})})}),
                     op(Opcode::TSTORE, {clamped(S, i, I(0), 8, 1), W(acc)})})});
  HostF Ah = random_f32({M, N}, 5), Sh = nan_f32({M, 1}), Si = nan_f32({M, 1});
  run_cpu(p, {{Ah.arg(), Sh.arg()}, {}});
  pypto::interp::interpret(p, {{Ah.arg(), Si.arg()}, {}});
  std::vector<double> want(size_t(M), 0.0);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) want[size_t(r)] += Ah.at(r, c);
  EXPECT_LT(rel_err(Sh.data, want), 1e-5);
  EXPECT_LT(rel_err(Sh.data, Si.data), 1e-5);
}

// Runtime scalars: an f32 factor, an f64 offset and an i64 row count used in the loop bound.
TEST(CpuCodegen, ScalarParams) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 40, N = 19;
  auto A = param("A", {M, N}), C = output("C", {M, N});
  auto t = tile("t", 16, 16), u = tile("u", 16, 16);
  Expr i = V("i"), j = V("j");
  Program p =
      program("scalars", {A, C},
              {for_loop("i", I(0), V("n"), I(16),
                        {for_loop("j", I(0), I(N), I(16),
                                  {alloc(t), alloc(u), op(Opcode::TLOAD, {W(t), clamped(A, i, j, 16, 16)}),
                                   op(Opcode::TMUL, {W(u), W(t), var("alpha", DType::F32)}),
                                   op(Opcode::TADD, {W(u), var("beta", DType::F64), W(u)}),
                                   op(Opcode::TSTORE, {clamped(C, i, j, 16, 16), W(u)})})})},
              {{"alpha", DType::F32}, {"beta", DType::F64}, {"n", DType::I64}});
  HostF Ah = random_f32({M, N}, 6), Ch = nan_f32({M, N}), Ci = nan_f32({M, N});
  std::vector<ScalarValue> s = {{true, 0, 1.75}, {true, 0, -0.25}, {false, 17, 0}};
  run_cpu(p, {{Ah.arg(), Ch.arg()}, s});
  pypto::interp::interpret(p, {{Ah.arg(), Ci.arg()}, s});
  // Rows [0, 32) are written (two 16-row tiles start below n = 17); the rest stays NaN.
  std::vector<double> want(Ah.data.size(), NAN);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < N; ++c) want[size_t(r * N + c)] = -0.25 + 1.75 * double(Ah.at(r, c));
  EXPECT_LT(rel_err(Ch.data, want), 1e-6);
  EXPECT_EQ(rel_err(Ch.data, Ci.data), 0.0);
}

// f16 in, f16 and f32 out: TLOAD/TSTORE convert between the tensor's and the tile's dtype.
uint16_t to_half(float f) {  // exact for the values used here (normal, few mantissa bits)
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) == 0) return uint16_t(x >> 16);
  uint32_t sign = (x >> 16) & 0x8000, exp = ((x >> 23) & 0xff) - 127 + 15, man = (x >> 13) & 0x3ff;
  return uint16_t(sign | (exp << 10) | man);
}
float from_half(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0 && man == 0) {
    float z;
    std::memcpy(&z, &sign, 4);
    return z;
  }
  if (exp == 31) return man ? NAN : (sign ? -INFINITY : INFINITY);
  uint32_t x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

TEST(CpuCodegen, Float16LoadsAndStores) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 20, N = 36;
  auto A = param("A", {M, N}, DType::F16), C = output("C", {M, N}, DType::F16), D = output("D", {M, N});
  auto t = tile("t", 8, 16);
  Expr i = V("i"), j = V("j");
  Program p = program("f16", {A, C, D},
                      {pfor("i", I(0), I(M), I(8),
                            {for_loop("j", I(0), I(N), I(16),
                                      {alloc(t), op(Opcode::TLOAD, {W(t), clamped(A, i, j, 8, 16)}),
                                       op(Opcode::TADD, {W(t), W(t), F(1.0)}),
                                       op(Opcode::TSTORE, {clamped(C, i, j, 8, 16), W(t)}),
                                       op(Opcode::TSTORE, {clamped(D, i, j, 8, 16), W(t)})})})});
  Host<uint16_t> Ah({M, N}, DType::F16, 0), Ch({M, N}, DType::F16, 0x7e00), Ci({M, N}, DType::F16, 0x7e00);
  std::mt19937 g(7);
  for (auto& x : Ah.data) x = to_half(float(int(g() % 127) - 63 + 0.5) / 64.0f);  // never zero
  HostF Dh = nan_f32({M, N}), Di = nan_f32({M, N});
  run_cpu(p, {{Ah.arg(), Ch.arg(), Dh.arg()}, {}});
  pypto::interp::interpret(p, {{Ah.arg(), Ci.arg(), Di.arg()}, {}});
  std::vector<double> want(Ah.data.size()), gotc(Ah.data.size());
  for (size_t k = 0; k < want.size(); ++k) {
    want[k] = double(from_half(Ah.data[k])) + 1.0;
    gotc[k] = from_half(Ch.data[k]);
  }
  EXPECT_EQ(rel_err(gotc, want), 0.0);
  EXPECT_EQ(rel_err(Dh.data, want), 0.0);
  EXPECT_EQ(Ch.data, Ci.data);
}

// A transposed (column-major) input: the kernel reads strides at run time.
TEST(CpuCodegen, StridedTransposedParam) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 27, N = 41;
  auto A = param("A", {M, N}), C = output("C", {M, N});
  auto t = tile("t", 16, 16);
  Expr i = V("i"), j = V("j");
  Program p = program("strided", {A, C},
                      {pfor("i", I(0), I(M), I(16),
                            {for_loop("j", I(0), I(N), I(16),
                                      {alloc(t), op(Opcode::TLOAD, {W(t), clamped(A, i, j, 16, 16)}),
                                       op(Opcode::TMUL, {W(t), W(t), F(2.0)}),
                                       op(Opcode::TSTORE, {clamped(C, i, j, 16, 16), W(t)})})})});
  HostF storage = random_f32({N, M}, 8);  // A[r][c] lives at r + c*M
  TensorArg a{storage.data.data(), DType::F32, {M, N}, {1, M}};
  HostF Ch = nan_f32({M, N}), Ci = nan_f32({M, N});
  run_cpu(p, {{a, Ch.arg()}, {}});
  pypto::interp::interpret(p, {{a, Ci.arg()}, {}});
  std::vector<double> want(size_t(M * N));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) want[size_t(r * N + c)] = 2.0 * storage.data[size_t(r + c * M)];
  EXPECT_EQ(rel_err(Ch.data, want), 0.0);
  EXPECT_EQ(rel_err(Ch.data, Ci.data), 0.0);
}

// Scalar index math follows Python: floor division and modulo, min/max, select, float lets.
TEST(CpuCodegen, ScalarExpressionSemantics) {
  REQUIRE_PTO_HEADERS();
  const int64_t n = 16;
  auto O = output("O", {n, 4});
  auto t0 = tile("t0", 1, 1), t1 = tile("t1", 1, 1), t2 = tile("t2", 1, 1), t3 = tile("t3", 1, 1);
  Expr i = V("i");
  Expr q = div(i - I(7), I(3)), r = mod(i - I(7), I(-3));
  Expr s = select(cmp(ExprOp::Lt, i, I(5)), min(i, I(3)), max(i, I(12)));
  auto at = [&](int64_t c) {
    View v = clamped(O, i, I(c), 1, 1);
    return v;
  };
  Program p = program(
      "scalar_math", {O},
      {for_loop("i", I(0), I(n), I(1),
                {alloc(t0), alloc(t1), alloc(t2), alloc(t3), let("q", q),
                 let("f", cast(V("q"), DType::F64) * float_imm(0.5, DType::F64)),
                 op(Opcode::TEXPANDS, {W(t0), V("q")}), op(Opcode::TEXPANDS, {W(t1), r}),
                 op(Opcode::TEXPANDS, {W(t2), s}), op(Opcode::TEXPANDS, {W(t3), var("f", DType::F64)}),
                 op(Opcode::TSTORE, {at(0), W(t0)}), op(Opcode::TSTORE, {at(1), W(t1)}),
                 op(Opcode::TSTORE, {at(2), W(t2)}), op(Opcode::TSTORE, {at(3), W(t3)})})});
  HostF Oh = nan_f32({n, 4}), Oi = nan_f32({n, 4});
  run_cpu(p, {{Oh.arg()}, {}});
  pypto::interp::interpret(p, {{Oi.arg()}, {}});
  auto fdiv = [](int64_t a, int64_t b) { return (a / b) - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); };
  auto fmod_ = [](int64_t a, int64_t b) {
    int64_t m = a % b;
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
  };
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_EQ(Oh.at(k, 0), float(fdiv(k - 7, 3))) << k;
    EXPECT_EQ(Oh.at(k, 1), float(fmod_(k - 7, -3))) << k;
    EXPECT_EQ(Oh.at(k, 2), float(k < 5 ? std::min<int64_t>(k, 3) : std::max<int64_t>(k, 12))) << k;
    EXPECT_EQ(Oh.at(k, 3), float(double(fdiv(k - 7, 3)) * 0.5)) << k;
  }
  EXPECT_EQ(rel_err(Oh.data, Oi.data), 0.0);
}

// A global scratch temp between two parallel loops, and a tile too big for the stack (heap).
TEST(CpuCodegen, ScratchBufferAndHeapTile) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 300, N = 130;
  auto A = param("A", {M, N}), C = output("C", {M, N});
  auto T = scratch("T", {M, N});
  auto big = tile("big", 256, 128), t = tile("t", 32, 32);
  Expr i = V("i"), j = V("j"), i2 = V("i2"), j2 = V("j2");
  Program p = program("scratch", {A, C},
                      {alloc(T),
                       pfor("i", I(0), I(M), I(256),
                            {for_loop("j", I(0), I(N), I(128),
                                      {alloc(big), op(Opcode::TLOAD, {W(big), clamped(A, i, j, 256, 128)}),
                                       op(Opcode::TMUL, {W(big), W(big), W(big)}),
                                       op(Opcode::TSTORE, {clamped(T, i, j, 256, 128), W(big)})})}),
                       pfor("i2", I(0), I(M), I(32),
                            {for_loop("j2", I(0), I(N), I(32),
                                      {alloc(t), op(Opcode::TLOAD, {W(t), clamped(T, i2, j2, 32, 32)}),
                                       op(Opcode::TADD, {W(t), W(t), F(1.0)}),
                                       op(Opcode::TSTORE, {clamped(C, i2, j2, 32, 32), W(t)})})})});
  std::string src = pypto::cpu::generate_cpp(p);
  EXPECT_NE(src.find("pto_heap_tile<pto::Tile<float, 256, 128>"), std::string::npos);
  EXPECT_NE(src.find("pto::ScratchBuffer<float> sb_T(39000);"), std::string::npos);
  HostF Ah = random_f32({M, N}, 9), Ch = nan_f32({M, N}), Ci = nan_f32({M, N});
  run_cpu(p, {{Ah.arg(), Ch.arg()}, {}});
  pypto::interp::interpret(p, {{Ah.arg(), Ci.arg()}, {}});
  std::vector<double> want(Ah.data.size());
  for (size_t k = 0; k < want.size(); ++k) want[k] = double(Ah.data[k]) * Ah.data[k] + 1.0;
  EXPECT_LT(rel_err(Ch.data, want), 1e-6);
  EXPECT_EQ(rel_err(Ch.data, Ci.data), 0.0);
}

// Many mid-sized tiles in one scope: past a 1 MiB stack budget the rest go to the heap.
TEST(CpuCodegen, StackBudgetMovesTilesToHeap) {
  auto A = param("A", {64, 256});
  std::vector<Stmt> body;
  for (int k = 0; k < 20; ++k) {
    auto t = tile("t" + std::to_string(k), 64, 256);  // exactly 64 KiB: small enough for the stack
    body.push_back(alloc(t));
    body.push_back(op(Opcode::TLOAD, {W(t), W(A)}));
  }
  std::string src = pypto::cpu::generate_cpp(program("budget", {A}, body));
  size_t heap = 0;
  for (size_t pos = src.find("pto_heap_tile<pto::"); pos != std::string::npos;
       pos = src.find("pto_heap_tile<pto::", pos + 1))
    ++heap;
  EXPECT_EQ(heap, 4u) << src;  // 16 x 64 KiB fill the budget
}

// TLOAD/TSTORE between two whole local tiles are tile copies.
// Code generation never rewrites an instruction: a TLOAD/TSTORE between local tiles is refused
// (as the verifier refuses it), not silently turned into a TMOV.
TEST(CpuCodegen, LoadAndStoreBetweenLocalTilesAreRefused) {
  auto A = param("A", {8, 8});
  auto t = tile("t", 8, 8), x = tile("x", 8, 8);
  for (Opcode code : {Opcode::TLOAD, Opcode::TSTORE}) {
    Program p = program("local_copy", {A},
                        {alloc(t), alloc(x), op(Opcode::TLOAD, {W(t), W(A)}), op(code, {W(x), W(t)}),
                         op(Opcode::TSTORE, {W(A), W(x)})});
    try {
      pypto::cpu::generate_cpp(p);
      ADD_FAILURE() << "expected an error";
    } catch (const pypto::ir::Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be a global view; a copy between local tiles is TMOV"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(pypto::ir::verify(p, pypto::ir::Level::Tile), pypto::ir::Error);
  }
}

// IR names that are not C++ identifiers, or are keywords, or collide after sanitising.
TEST(CpuCodegen, NamesAreSanitised) {
  REQUIRE_PTO_HEADERS();
  auto A = param("in.put", {4, 8}), C = output("class", {4, 8});
  auto t = tile("2x", 4, 8), u = tile("2_x", 4, 8);
  Program p = program(
      "names; */ weird\nname", {A, C},
      {for_loop("for", I(0), I(1), I(1),
                {alloc(t), alloc(u), let("a b", V("for") + var("int")), op(Opcode::TLOAD, {W(t), W(A)}),
                 op(Opcode::TADD, {W(u), W(t), V("a b")}), op(Opcode::TSTORE, {W(C), W(u)})})},
      {{"int", DType::I64}});
  HostF Ah = random_f32({4, 8}, 10), Ch = nan_f32({4, 8});
  run_cpu(p, {{Ah.arg(), Ch.arg()}, {{false, 3, 0}}});
  std::vector<double> want(Ah.data.size());
  for (size_t k = 0; k < want.size(); ++k) want[k] = double(Ah.data[k]) + 3.0;
  EXPECT_LT(rel_err(Ch.data, want), 1e-6);
}

// Nested parallel loops: only the outermost one is distributed; rank-1 and rank-0 views work.
TEST(CpuCodegen, NestedParallelAndLowRankViews) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 9, N = 10;
  auto X = param("x", {N}), S = param("s", {}), O = output("O", {M, N});
  auto tx = tile("tx", 1, 16), ts = tile("ts", 1, 1), tsum = tile("tsum", 1, 16);
  View row = View::whole(O);  // O[i, :] as a rank-1 view
  row.offset = {V("i"), I(0)};
  row.size = {1, N};
  row.valid = {I(1), I(N)};
  row.dims = {1};
  Program p = program(
      "nested", {X, S, O},
      {pfor("i", I(0), I(M), I(1),
            {pfor("jj", I(0), I(1), I(1),
                  {alloc(tx), alloc(ts), alloc(tsum), op(Opcode::TLOAD, {W(tx), W(X)}),
                   op(Opcode::TLOAD, {W(ts), W(S)}), op(Opcode::TEXPANDS, {W(tsum), V("i")}),
                   op(Opcode::TADD, {W(tsum), W(tsum), W(tx)}), op(Opcode::TMUL, {W(tsum), W(tsum), W(ts)}),
                   op(Opcode::TSTORE, {row, W(tsum)})})})});
  std::string src = pypto::cpu::generate_cpp(p);
  size_t first = src.find("pto::parallel_for");
  EXPECT_NE(first, std::string::npos);
  EXPECT_EQ(src.find("pto::parallel_for", first + 1), std::string::npos) << src;
  HostF Xh = random_f32({N}, 11), Sh = random_f32({}, 12), Oh = nan_f32({M, N}), Oi = nan_f32({M, N});
  run_cpu(p, {{Xh.arg(), Sh.arg(), Oh.arg()}, {}});
  pypto::interp::interpret(p, {{Xh.arg(), Sh.arg(), Oi.arg()}, {}});
  std::vector<double> want(size_t(M * N));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) want[size_t(r * N + c)] = (float(r) + Xh.data[size_t(c)]) * Sh.data[0];
  EXPECT_LT(rel_err(Oh.data, want), 1e-6);
  EXPECT_EQ(rel_err(Oh.data, Oi.data), 0.0);
}

// A parallel loop that uses a tile allocated outside it would race on that tile: it runs serially.
TEST(CpuCodegen, ParallelLoopSharingAnOuterTileRunsSerially) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 64, N = 16;
  auto A = param("A", {M, N}), S = output("S", {1, N});
  auto acc = tile("acc", 1, 16), t = tile("t", 1, 16);
  Program p = program("shared_tile", {A, S},
                      {alloc(acc), op(Opcode::TEXPANDS, {W(acc), F(0.0)}),
                       pfor("i", I(0), I(M), I(1),
                            {alloc(t), op(Opcode::TLOAD, {W(t), clamped(A, V("i"), I(0), 1, 16)}),
                             op(Opcode::TADD, {W(acc), W(acc), W(t)})}),
                       op(Opcode::TSTORE, {W(S), W(acc)})});
  std::string src = pypto::cpu::generate_cpp(p);
  EXPECT_EQ(src.find("pto::parallel_for"), std::string::npos) << src;
  HostF Ah = random_f32({M, N}, 13), Sh = nan_f32({1, N});
  run_cpu(p, {{Ah.arg(), Sh.arg()}, {}});
  std::vector<double> want(size_t(N), 0.0);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) want[size_t(c)] += Ah.at(r, c);
  EXPECT_LT(rel_err(Sh.data, want), 1e-5);
}

// A 2-D elementwise nest as tile_ops makes it: the tiles allocated in the row loop's body, outside
// the column loop. The column loop's body is then one fused call (binary_rows: rows read and
// written in place), since the tiles are the loop's own (loop_local_tiles); not when the sum's
// tile is read after the loop (`keep`: D gets the last column block's sum).
Program column_nest(bool keep) {
  const int64_t M = 10, N = 70;
  auto A = param("A", {M, N}), B = param("B", {M, N}), C = output("C", {M, N}), D = output("D", {M, 32});
  auto ta = tile("ta", 4, 32), tb = tile("tb", 4, 32), tc = tile("tc", 4, 32);
  Expr i = V("i"), j = V("j");
  std::vector<Stmt> row = {
      alloc(ta), alloc(tb), alloc(tc),
      for_loop("j", I(0), I(N), I(32),
               {op(Opcode::TLOAD, {W(ta), clamped(A, i, j, 4, 32)}),
                op(Opcode::TLOAD, {W(tb), clamped(B, i, j, 4, 32)}), op(Opcode::TADD, {W(tc), W(ta), W(tb)}),
                op(Opcode::TSTORE, {clamped(C, i, j, 4, 32), W(tc)})})};
  if (keep) row.push_back(op(Opcode::TSTORE, {clamped(D, i, I(0), 4, 32), W(tc)}));
  return program("column_nest", {A, B, C, D}, {pfor("i", I(0), I(M), I(4), row)});
}

TEST(CpuCodegen, ColumnLoopOwnsTheTilesAllocatedOutsideIt) {
  REQUIRE_PTO_HEADERS();
  for (bool keep : {false, true}) {
    Program p = column_nest(keep);
    std::string src = pypto::cpu::generate_cpp(p);
    EXPECT_EQ(src.find("binary_rows") != std::string::npos, !keep) << src;
    HostF A = random_f32({10, 70}, 3), B = random_f32({10, 70}, 4);
    HostF C = nan_f32({10, 70}), D = nan_f32({10, 32}), Ci = nan_f32({10, 70}), Di = nan_f32({10, 32});
    run_cpu(p, {{A.arg(), B.arg(), C.arg(), D.arg()}, {}});
    pypto::interp::interpret(p, {{A.arg(), B.arg(), Ci.arg(), Di.arg()}, {}});
    EXPECT_EQ(rel_err(C.data, Ci.data), 0.0);
    if (keep) {
      EXPECT_EQ(rel_err(D.data, Di.data), 0.0);
      EXPECT_FALSE(std::isnan(D.data[0]));
    }
  }
}

// An elementwise chain (row_fusion_chain.cpp): TLOAD ta, tb; tc = tb - ta; tc = 1 - tc; td = tc * ta;
// TSTORE td. One chain_rows call, with the operands each way round. Variants: 1, a tile of the run
// read after it (D gets tc): not fused; 2, the last step reads te, filled before the column loop
// and only read by the run: fused, te a kFilled source; 3, the last step writes te (te = tc * te,
// TSTORE te): a tile filled before the run and written by it, not fused.
Program chain_nest(int variant) {
  const int64_t M = 10, N = 70;
  auto A = param("A", {M, N}), B = param("B", {M, N}), C = output("C", {M, N}), D = output("D", {M, 32});
  auto ta = tile("ta", 4, 32), tb = tile("tb", 4, 32), tc = tile("tc", 4, 32), td = tile("td", 4, 32),
       te = tile("te", 4, 32);
  Expr i = V("i"), j = V("j");
  const auto& last = variant == 3 ? te : td;
  std::vector<Stmt> row = {
      alloc(ta),
      alloc(tb),
      alloc(tc),
      alloc(td),
      alloc(te),
      op(Opcode::TLOAD, {W(te), clamped(B, i, I(0), 4, 32)}),
      for_loop("j", I(0), I(N), I(32),
               {op(Opcode::TLOAD, {W(ta), clamped(A, i, j, 4, 32)}),
                op(Opcode::TLOAD, {W(tb), clamped(B, i, j, 4, 32)}), op(Opcode::TSUB, {W(tc), W(tb), W(ta)}),
                op(Opcode::TSUB, {W(tc), F(1.0), W(tc)}),
                op(Opcode::TMUL, {W(last), W(tc), W(variant >= 2 ? te : ta)}),
                op(Opcode::TSTORE, {clamped(C, i, j, 4, 32), W(last)})})};
  if (variant == 1) row.push_back(op(Opcode::TSTORE, {clamped(D, i, I(0), 4, 32), W(tc)}));
  return program("chain_nest", {A, B, C, D}, {pfor("i", I(0), I(M), I(4), row)});
}

TEST(CpuCodegen, ElementwiseChainIsOneCallWhereItsTilesAreItsOwn) {
  REQUIRE_PTO_HEADERS();
  for (int variant = 0; variant < 4; ++variant) {
    Program p = chain_nest(variant);
    std::string src = pypto::cpu::generate_cpp(p);
    const bool fused = variant == 0 || variant == 2;
    EXPECT_EQ(src.find("chain_rows") != std::string::npos, fused) << variant << src;
    if (!fused) {  // the instructions as written
      EXPECT_NE(src.find("pto::TSUB(t_tc, t_tb, t_ta);"), std::string::npos) << src;
      EXPECT_NE(src.find("pto::TSUB(t_tc, pto::elem::cast<float>(1.0), t_tc);"), std::string::npos) << src;
    } else if (variant == 0) {
      EXPECT_NE(src.find("pto::fused::Chain<2, 2, 1, 3, pto::fused::Binary<pto::detail::OpSub, 2, 1, 0>, "
                         "pto::fused::Scalar<pto::detail::OpSub, 2, 2, 0, true>, "
                         "pto::fused::Binary<pto::detail::OpMul, 3, 2, 0>>{}"),
                std::string::npos)
          << src;
    } else {  // te, the third source, read where it lies
      EXPECT_NE(src.find("pto::fused::Binary<pto::detail::OpMul, 4, 3, 2>>{}"), std::string::npos) << src;
      EXPECT_NE(src.find("pto::fused::kFilled, t_te"), std::string::npos) << src;
    }
    HostF A = random_f32({10, 70}, 5), B = random_f32({10, 70}, 6);
    HostF C = nan_f32({10, 70}), D = nan_f32({10, 32}), Ci = nan_f32({10, 70}), Di = nan_f32({10, 32});
    run_cpu(p, {{A.arg(), B.arg(), C.arg(), D.arg()}, {}});
    pypto::interp::interpret(p, {{A.arg(), B.arg(), Ci.arg(), Di.arg()}, {}});
    EXPECT_EQ(rel_err(C.data, Ci.data), 0.0) << variant;
    if (variant == 1) {
      EXPECT_EQ(rel_err(D.data, Di.data), 0.0);
    }
  }
}

// A chain whose broadcast row is a row of its own output: A[i:i+4, :] = A[i:i+4, :] * A[0, :] + 1,
// rows of 4 in order. The first block's row 0 is written while rows 1-3 still need the old row 0:
// the call must take its tile path there (the instructions load the row before storing anything).
TEST(CpuCodegen, ChainWithItsBroadcastRowInItsOutput) {
  REQUIRE_PTO_HEADERS();
  const int64_t M = 12, N = 70;
  auto A = output("A", {M, N});
  auto ta = tile("ta", 4, 32), tr = tile("tr", 1, 32), tc = tile("tc", 4, 32);
  Expr i = V("i"), j = V("j");
  Program p = program(
      "chain_own_row", {A},
      {for_loop("i", I(0), I(M), I(4),
                {alloc(ta), alloc(tr), alloc(tc),
                 for_loop("j", I(0), I(N), I(32),
                          {op(Opcode::TLOAD, {W(ta), clamped(A, i, j, 4, 32)}),
                           op(Opcode::TLOAD, {W(tr), clamped(A, I(0), j, 1, 32)}),
                           op(Opcode::TMUL, {W(tc), W(ta), W(tr)}), op(Opcode::TADD, {W(tc), W(tc), F(1.0)}),
                           op(Opcode::TSTORE, {clamped(A, i, j, 4, 32), W(tc)})})})});
  std::string src = pypto::cpu::generate_cpp(p);
  EXPECT_NE(src.find("chain_rows"), std::string::npos) << src;
  HostF Ac = random_f32({M, N}, 7);
  HostF Ai = Ac;
  run_cpu(p, {{Ac.arg()}, {}});
  pypto::interp::interpret(p, {{Ai.arg()}, {}});
  EXPECT_EQ(rel_err(Ac.data, Ai.data), 0.0);
}

// ---- errors --------------------------------------------------------------------------------------

void expect_codegen_error(const Program& p, std::vector<std::string> fragments) {
  try {
    pypto::cpu::generate_cpp(p);
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const Error& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(CpuCodegenErrors, TensorLevelProgramIsRejected) {
  auto A = param("A", {8, 8}), B = param("B", {8, 8}), C = output("C", {8, 8});
  expect_codegen_error(program("tensor_level", {A, B, C}, {op(Opcode::TADD, {W(C), W(A), W(B)})}),
                       {"TADD", "global buffer 'C'", "not tile level"});
}

TEST(CpuCodegenErrors, RankThreeTileIsRejected) {
  auto A = param("A", {2, 8, 8});
  auto t = buffer("t3", DType::F32, {2, 8, 8}, Space::Vec, BufferKind::Temp);
  expect_codegen_error(program("rank3", {A}, {alloc(t)}), {"t3", "rank 3"});
}

TEST(CpuCodegenErrors, SubViewOfTileIsRejected) {
  auto A = param("A", {8, 8});
  auto t = tile("t", 8, 8);
  View part = clamped(t, I(0), I(0), 4, 4);
  expect_codegen_error(program("subview", {A}, {alloc(t), op(Opcode::TLOAD, {part, W(A)})}),
                       {"TLOAD", "whole tile"});
}

TEST(CpuCodegenErrors, VariableOutOfScope) {
  auto A = param("A", {8, 8});
  auto t = tile("t", 8, 8);
  expect_codegen_error(program("scope", {A}, {alloc(t), op(Opcode::TEXPANDS, {W(t), V("nowhere")})}),
                       {"nowhere"});
}

TEST(CpuCodegenErrors, UseBeforeAlloc) {
  auto A = param("A", {8, 8});
  auto t = tile("t", 8, 8);
  expect_codegen_error(program("noalloc", {A}, {op(Opcode::TLOAD, {W(t), W(A)})}),
                       {"'t'", "before its alloc"});
}

}  // namespace
}  // namespace cpu_test
