// Every opcode through the CPU code generator: one program applies each instruction to small
// tiles (some with ragged valid regions) and stores each result into its own block of the output.
// The compiled kernel must agree with the reference interpreter on the same inputs.
#include <algorithm>
#include <set>

#include "test_cpu_codegen_util.h"

namespace cpu_test {
namespace {

constexpr int64_t kR = 8, kC = 8;  // every result gets a kR x 16 block of the output
constexpr int kBlocks = 160;

struct OpsProgram {
  std::vector<BufferRef> params;
  std::vector<Stmt> body;
  BufferRef out;
  int block = 0;
  std::set<Opcode> covered;
  int tiles = 0;

  BufferRef T(int64_t r = kR, int64_t c = kC, DType t = DType::F32, Space s = Space::Vec) {
    auto b = tile("r" + std::to_string(tiles++), r, c, t, s);
    body.push_back(alloc(b));
    return b;
  }
  void emit(Opcode code, std::vector<Operand> args) {
    covered.insert(code);
    body.push_back(op(code, std::move(args)));
  }
  // Stores tile t (converted to f32 if needed) into the next output block.
  void keep(const BufferRef& t) {
    BufferRef src = t;
    if (t->dtype != DType::F32) {
      src = T(t->shape[0], t->shape[1]);
      emit(Opcode::TCVT, {W(src), W(t)});
    }
    View v = clamped(out, I(block * kR), I(0), t->shape[0], t->shape[1]);
    body.push_back(op(Opcode::TSTORE, {v, W(src)}));
    ++block;
  }
};

TEST(CpuCodegenOps, EveryOpcodeMatchesTheInterpreter) {
  REQUIRE_PTO_HEADERS();
  OpsProgram P;
  auto A = param("A", {kR, kC}), B = param("B", {kR, kC}), Idx = param("idx", {kR, 1}, DType::I32);
  auto Rag = param("rag", {5, 6});
  P.out = output("O", {kBlocks * kR, 16});
  P.params = {A, B, Idx, Rag, P.out};

  auto a = P.T(), b = P.T(), rag = P.T(), idx = P.T(kR, 1, DType::I32);
  P.emit(Opcode::TPREFETCH, {W(A)});
  P.emit(Opcode::TLOAD, {W(a), W(A)});  // a in [0.25, 1.25]: fine for log, sqrt, pow
  P.emit(Opcode::TLOAD, {W(b), W(B)});  // b signed
  P.emit(Opcode::TLOAD, {W(rag), W(Rag)});
  P.emit(Opcode::TLOAD, {W(idx), W(Idx)});

  for (Opcode u : {Opcode::TMOV,     Opcode::TNEG,    Opcode::TABS,     Opcode::TEXP,       Opcode::TLOG,
                   Opcode::TSQRT,    Opcode::TRSQRT,  Opcode::TRECIP,   Opcode::TRELU,      Opcode::TTANH,
                   Opcode::TSIGMOID, Opcode::TERF,    Opcode::TGELU,    Opcode::TGELU_TANH, Opcode::TSILU,
                   Opcode::TFLOOR,   Opcode::TSIN,    Opcode::TCOS,     Opcode::TTAN,       Opcode::TEXP2,
                   Opcode::TEXPM1,   Opcode::TLOG2,   Opcode::TLOG10,   Opcode::TLOG1P,     Opcode::TCBRT,
                   Opcode::TCEIL,    Opcode::TROUND,  Opcode::TTRUNC,   Opcode::TSIGN,      Opcode::TERFC,
                   Opcode::TERFINV,  Opcode::TLGAMMA, Opcode::TDIGAMMA, Opcode::TTRIGAMMA}) {
    auto d = P.T();
    const bool positive = u == Opcode::TLOG || u == Opcode::TSQRT || u == Opcode::TRSQRT ||
                          u == Opcode::TLOG2 || u == Opcode::TLOG10 || u == Opcode::TLOG1P;
    P.emit(u, {W(d), W(positive ? a : b)});
    P.keep(d);
  }
  for (Opcode o :
       {Opcode::TADD, Opcode::TSUB, Opcode::TMUL, Opcode::TDIV, Opcode::TMAX, Opcode::TMIN, Opcode::TATAN2,
        Opcode::THYPOT, Opcode::TCOPYSIGN, Opcode::TFMOD, Opcode::TREM, Opcode::TFLOORDIV}) {
    auto d = P.T(), e = P.T(), f = P.T();
    P.emit(o, {W(d), W(a), W(b)});
    P.emit(o, {W(e), W(b), F(0.75)});    // tile, scalar
    P.emit(o, {W(f), F(-1.5), W(rag)});  // scalar, ragged tile
    P.keep(d);
    P.keep(e);
    P.keep(f);
  }
  {
    auto d = P.T();
    P.emit(Opcode::TPOW, {W(d), W(a), W(b)});
    P.keep(d);
  }
  std::vector<BufferRef> masks;
  for (Opcode c : {Opcode::TCMP_LT, Opcode::TCMP_LE, Opcode::TCMP_GT, Opcode::TCMP_GE, Opcode::TCMP_EQ,
                   Opcode::TCMP_NE}) {
    auto m = P.T(kR, kC, DType::Bool);
    P.emit(c, {W(m), W(b), c == Opcode::TCMP_EQ || c == Opcode::TCMP_NE ? Operand(W(b)) : Operand(F(0.1))});
    P.keep(m);
    masks.push_back(m);
  }
  {
    auto n = P.T(kR, kC, DType::Bool), x = P.T(kR, kC, DType::Bool), y = P.T(kR, kC, DType::Bool);
    P.emit(Opcode::TNOT, {W(n), W(masks[0])});
    P.emit(Opcode::TAND, {W(x), W(masks[0]), W(masks[3])});
    P.emit(Opcode::TOR, {W(y), W(masks[1]), W(masks[2])});
    P.keep(n);
    P.keep(x);
    P.keep(y);
    auto s1 = P.T(), s2 = P.T();
    P.emit(Opcode::TSEL, {W(s1), W(masks[0]), W(a), W(b)});
    P.emit(Opcode::TSEL, {W(s2), W(masks[2]), W(b), F(2.5)});
    P.keep(s1);
    P.keep(s2);
  }
  {
    auto i = P.T(kR, kC, DType::I32), i64 = P.T(kR, kC, DType::I64), f64 = P.T(kR, kC, DType::F64);
    auto scaled = P.T();
    P.emit(Opcode::TMUL, {W(scaled), W(b), F(10.0)});
    P.emit(Opcode::TCVT, {W(i), W(scaled)});
    P.emit(Opcode::TCVT, {W(i64), W(i)});
    P.emit(Opcode::TCVT, {W(f64), W(scaled)});
    P.keep(i64);
    P.keep(f64);
  }
  for (Opcode r : {Opcode::TROWSUM, Opcode::TROWMAX, Opcode::TROWMIN}) {
    auto d = P.T(kR, 1), e = P.T(kR, kC);
    P.emit(r, {W(d), W(rag)});
    P.emit(Opcode::TROWEXPAND, {W(e), W(d)});
    P.keep(d);
    P.keep(e);
  }
  for (Opcode r : {Opcode::TROWARGMAX, Opcode::TROWARGMIN}) {  // on the ragged tile and on i32 values
    auto d = P.T(kR, 1, DType::I64), di = P.T(kR, 1, DType::I32), iv = P.T(kR, kC, DType::I32);
    P.emit(r, {W(d), W(rag)});
    P.keep(d);
    P.emit(Opcode::TCVT, {W(iv), W(b)});  // ties between the truncated values
    P.emit(r, {W(di), W(iv)});
    P.keep(di);
  }
  for (Opcode c : {Opcode::TCOLSUM, Opcode::TCOLMAX, Opcode::TCOLMIN}) {
    auto d = P.T(1, kC), e = P.T(kR, kC);
    P.emit(c, {W(d), W(rag)});
    P.emit(Opcode::TCOLEXPAND, {W(e), W(d)});
    P.keep(d);
    P.keep(e);
  }
  {
    auto ma = P.T(kR, kC, DType::F32, Space::Mat), mb = P.T(kR, kC, DType::F32, Space::Mat);
    auto acc = P.T(kR, kC, DType::F32, Space::Acc), acc2 = P.T(kR, kC, DType::F32, Space::Acc);
    auto bias = P.T(1, kC);
    P.emit(Opcode::TMOV, {W(ma), W(a)});
    P.emit(Opcode::TMOV, {W(mb), W(b)});
    P.emit(Opcode::TMATMUL, {W(acc), W(ma), W(mb)});
    P.keep(acc);
    P.emit(Opcode::TMATMUL_ACC, {W(acc), W(mb), W(ma)});
    P.keep(acc);
    P.emit(Opcode::TCOLSUM, {W(bias), W(b)});
    P.emit(Opcode::TMATMUL_BIAS, {W(acc2), W(ma), W(mb), W(bias)});
    P.keep(acc2);
    // A 3 x 3 filter (a window of b) over a: all 6 x 6 windows; then strided, dilated and padded
    // (2 rows above, 1 below, 1 column left: 4 x 4).
    auto filt = P.T(3, 3), dwo = P.T(kR - 2, kC - 2), dws = P.T(4, 4);
    P.emit(Opcode::TEXTRACT, {W(filt), W(b), I(1), I(2)});
    P.emit(Opcode::TDWCONV, {W(dwo), W(a), W(filt), I(1), I(1), I(1), I(1), I(0), I(0), I(0), I(0)});
    P.keep(dwo);
    P.emit(Opcode::TDWCONV, {W(dws), W(b), W(filt), I(2), I(2), I(2), I(1), I(2), I(1), I(1), I(0)});
    P.keep(dws);
  }
  {
    auto t = P.T(kC, kR), re = P.T(4, 16), back = P.T(), ex = P.T(4, 4), ins = P.T(), fp = P.T();
    P.emit(Opcode::TTRANS, {W(t), W(rag)});
    P.keep(t);
    P.emit(Opcode::TRESHAPE, {W(re), W(b)});
    P.keep(re);
    P.emit(Opcode::TRESHAPE, {W(back), W(re)});
    P.keep(back);
    P.emit(Opcode::TEXTRACT, {W(ex), W(rag), I(2), I(3)});  // clamped: 3 x 3 valid
    P.keep(ex);
    P.emit(Opcode::TMOV, {W(ins), W(a)});
    P.emit(Opcode::TINSERT, {W(ins), W(ex), I(5), I(6)});  // clamped to the 8 x 8 destination
    P.keep(ins);
    P.emit(Opcode::TFILLPAD, {W(fp), W(rag), F(-7.0)});
    P.keep(fp);
  }
  {
    auto g = P.T(), sc = P.T();
    P.emit(Opcode::TGATHER, {W(g), W(b), W(idx)});
    P.keep(g);
    P.emit(Opcode::TEXPANDS, {W(sc), F(0.5)});
    P.emit(Opcode::TSCATTER, {W(sc), W(a), W(idx)});  // idx is a permutation: every row written
    P.keep(sc);
    auto sa = P.T(), mg = P.T();
    P.emit(Opcode::TMOV, {W(sa), W(a)});
    P.emit(Opcode::TSCATTER_ADD, {W(sa), W(b), W(idx)});
    P.keep(sa);
    P.emit(Opcode::MGATHER, {W(mg), W(B), W(idx)});  // rows of the global B in idx order
    P.keep(mg);
    View ms = clamped(P.out, I(P.block * kR), I(0), kR, kC);
    P.emit(Opcode::MSCATTER, {ms, W(b), W(idx)});  // rows of b into the output block, permuted
    ++P.block;
    View ma = clamped(P.out, I(P.block * kR), I(0), kR, kC);
    P.body.push_back(op(Opcode::TSTORE, {ma, W(a)}));
    P.emit(Opcode::MSCATTER_ADD, {ma, W(b), W(idx)});
    ++P.block;
    // Whole-matrix products between global views: A * B, then += B * A.
    View mm = clamped(P.out, I(P.block * kR), I(0), kR, kC);
    P.emit(Opcode::MMATMUL, {mm, W(A), W(B)});
    P.emit(Opcode::MMATMUL_ACC, {mm, W(B), W(A)});
    ++P.block;
    auto order = P.T(kR, kC, DType::I64);
    P.emit(Opcode::TARGSORT, {W(order), W(b), I(1)});
    P.keep(order);
    auto first = P.T(kR, 1, DType::I64);  // a narrow destination: the CPU's selection path (topk)
    P.emit(Opcode::TARGSORT, {W(first), W(b), I(0)});
    P.keep(first);
    auto sums = P.T(), prods = P.T();
    P.emit(Opcode::TSCAN, {W(sums), W(b), I(0)});  // running sums
    P.keep(sums);
    P.emit(Opcode::TSCAN, {W(prods), W(a), I(3)});  // running products from the end
    P.keep(prods);
    auto gi = P.T(kR, 1, DType::I32);
    P.emit(Opcode::TGCD, {W(gi), W(idx), I(6)});  // an integer-only instruction
    P.keep(gi);
    // The bitwise instructions, on i32 and on an i8 tile (computed in i32, narrowed by wrapping).
    auto i8 = P.T(kR, 1, DType::I8);
    P.emit(Opcode::TCVT, {W(i8), W(idx)});
    P.emit(Opcode::TSHL, {W(i8), W(i8), I(5)});  // bits past 8 are lost
    P.keep(i8);
    for (Opcode bop : {Opcode::TBAND, Opcode::TBOR, Opcode::TBXOR, Opcode::TSHL, Opcode::TSHR}) {
      auto bi = P.T(kR, 1, DType::I32);
      P.emit(bop, {W(bi), W(idx), bop == Opcode::TSHR ? I(-1) : I(29)});  // a shift by -1: sign fill
      P.keep(bi);
    }
    auto bn = P.T(kR, 1, DType::I32);
    P.emit(Opcode::TBNOT, {W(bn), W(idx)});
    P.keep(bn);
    auto ci = P.T(kR, kC, DType::I32);
    P.emit(Opcode::TCI, {W(ci), I(-3)});
    P.keep(ci);
  }
  P.emit(Opcode::SET_FLAG, {I(2), I(1), I(0)});
  P.emit(Opcode::WAIT_FLAG, {I(2), I(1), I(0)});
  P.emit(Opcode::PIPE_BARRIER, {I(4)});
  ASSERT_LE(P.block, kBlocks);

  // Every opcode of the table is exercised.
  std::string missing;
#define PYPTO_X(name, cat, n) \
  if (!P.covered.count(Opcode::name) && Opcode::name != Opcode::TSTORE) missing += " " #name;
  PYPTO_OPCODES(PYPTO_X)
#undef PYPTO_X
  EXPECT_EQ(missing, "");

  Program p = program("every_op", P.params, P.body);
  HostF Ah({kR, kC}, DType::F32, 0), Bh = random_f32({kR, kC}, 41), Rh = random_f32({5, 6}, 42);
  std::mt19937 gen(43);
  for (auto& x : Ah.data) x = 0.25f + float(gen() % 1000) / 1000.0f;
  Host<int32_t> Ih({kR, 1}, DType::I32, 0);
  for (int64_t r = 0; r < kR; ++r) Ih.data[size_t(r)] = int32_t((r * 3 + 1) % kR);  // a permutation
  HostF Oh = nan_f32({kBlocks * kR, 16}), Oi = nan_f32({kBlocks * kR, 16});
  run_cpu(p, {{Ah.arg(), Bh.arg(), Ih.arg(), Rh.arg(), Oh.arg()}, {}});
  pypto::interp::interpret(p, {{Ah.arg(), Bh.arg(), Ih.arg(), Rh.arg(), Oi.arg()}, {}});
  for (int blk = 0; blk < P.block; ++blk) {
    std::vector<double> g, w;
    for (int64_t r = 0; r < kR; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        g.push_back(Oh.at(blk * kR + r, c));
        w.push_back(Oi.at(blk * kR + r, c));
      }
    EXPECT_LT(rel_err(g, w), 2e-6) << "output block " << blk;
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](double x) { return !std::isnan(x); }))
        << "output block " << blk << " was never written";
  }
}

}  // namespace
}  // namespace cpu_test
