// CPU PTO headers: storage types, tiles, views, scratch buffers, TLOAD/TSTORE/TPREFETCH, fills,
// sync no-ops and parallel_for. Reference: plain double-precision loops.
#include <atomic>
#include <cstring>
#include <thread>

#include "test_cpu_isa_util.hpp"

namespace {
using namespace pto_test;

// ---- f16 / bf16 ------------------------------------------------------------------------------------
double half_ref_decode(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? kNaN : (s ? -INFINITY : INFINITY);
  if (e == 0)
    v = std::ldexp(double(m), -24);
  else
    v = std::ldexp(double(1024 + m), e - 25);
  return s ? -v : v;
}

// Nearest representable value with `mant` explicit mantissa bits, ties to even, min normal
// exponent emin, overflow to inf at `max_plus_half_ulp`.
double round_ref(double f, int mant, int emin, double overflow_at) {
  if (std::isnan(f) || std::isinf(f)) return f;
  double a = std::fabs(f);
  if (a >= overflow_at) return std::copysign(INFINITY, f);
  if (a == 0) return f;
  int e = std::max(int(std::floor(std::log2(a))), emin);
  double q = std::nearbyint(std::ldexp(a, mant - e));  // default rounding: to nearest even
  return std::copysign(std::ldexp(q, e - mant), f);
}

TEST(CpuIsaTypes, HalfDecodeExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = to_float(half_t{uint16_t(h)});
    double ref = half_ref_decode(uint16_t(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(to_float(half_from_float(f)))) << h;
    } else {
      ASSERT_EQ(double(f), ref) << h;
      ASSERT_EQ(half_from_float(f).bits, h) << "round trip " << h;
    }
  }
}

TEST(CpuIsaTypes, HalfEncodeRoundsToNearestEven) {
  std::vector<float> xs = {0.0f,          -0.0f,          65504.0f,       65519.99f, 65520.0f,
                           -65520.0f,     1e9f,           1e-8f,          -1e-8f,    5.96e-8f,
                           2.98e-8f,      2.9802322e-8f,  8.9406967e-8f,  6.1e-5f,   6.10351562e-05f,
                           1.0009765625f, 1.00048828125f, 1.00146484375f, INFINITY,  -INFINITY,
                           3.0e-5f};
  for (int i = 0; i < 200000; ++i) {
    float f = float(urand(-1, 1) * std::ldexp(1.0, int(irand(-30, 17))));
    xs.push_back(f);
  }
  for (float f : xs) {
    double ref = round_ref(f, 10, -14, 65520.0);
    float got = to_float(half_from_float(f));
    ASSERT_EQ(double(got), ref) << "f=" << f;
    ASSERT_EQ(std::signbit(got), std::signbit(f)) << "f=" << f;
  }
  EXPECT_TRUE(std::isnan(to_float(half_from_float(NAN))));
}

TEST(CpuIsaTypes, Bf16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = to_float(bf16_t{uint16_t(h)});
    if (std::isnan(f))
      ASSERT_TRUE(std::isnan(to_float(bf16_from_float(f))));
    else
      ASSERT_EQ(bf16_from_float(f).bits, h);
  }
  for (int i = 0; i < 200000; ++i) {
    float f = float(urand(-1, 1) * std::ldexp(1.0, int(irand(-120, 120))));
    double ref = round_ref(f, 7, -126, std::ldexp(2.0 - std::ldexp(1.0, -8), 127));
    ASSERT_EQ(double(to_float(bf16_from_float(f))), ref) << "f=" << f;
  }
  // Ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(to_float(bf16_from_float(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(to_float(bf16_from_float(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(to_float(bf16_from_float(NAN))));
  EXPECT_EQ(to_float(from_float<bf16_t>(2.5f)), 2.5f);
  EXPECT_EQ(to_float(from_float<half_t>(2.5f)), 2.5f);
}

TEST(CpuIsaTypes, Convert) {
  EXPECT_EQ(convert<int32_t>(-2.7f), -2);  // truncation toward zero
  EXPECT_EQ(convert<int64_t>(2.7), 2);
  EXPECT_EQ(convert<bool>(0.5f), 1);  // -> bool is != 0
  EXPECT_EQ(convert<bool>(0.0f), 0);
  EXPECT_EQ(convert<bool>(int32_t(-3)), 1);
  EXPECT_EQ(convert<float>(true), 1.0f);
  EXPECT_EQ(convert<uint8_t>(0.5f), 0);  // u8 is an integer: truncates, saturates
  EXPECT_EQ(convert<uint8_t>(-3.0f), 0);
  EXPECT_EQ(convert<uint8_t>(int32_t(-3)), 253);  // integers wrap
  EXPECT_EQ(convert<int8_t>(300.0f), 127);
  EXPECT_EQ(convert<int16_t>(int32_t(40000)), -25536);
  EXPECT_EQ(convert<float>(half_from_float(1.5f)), 1.5f);
  EXPECT_EQ(to_float(convert<half_t>(3.25)), 3.25f);
  EXPECT_EQ(convert<double>(bf16_from_float(-2.0f)), -2.0);
}

// ---- tiles, views, scratch ---------------------------------------------------------------------------
TEST(CpuIsaTypes, TileLayout) {
  Tile<float, 3, 5> t;
  static_assert(Tile<float, 3, 5>::rows == 3 && Tile<float, 3, 5>::cols == 5);
  static_assert(std::is_same_v<Tile<float, 3, 5>::value_type, float>);
  static_assert(is_tile_v<Tile<int32_t, 2, 2>> && !is_tile_v<float>);
  EXPECT_EQ(t.vr, 3);
  EXPECT_EQ(t.vc, 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
  EXPECT_EQ(&t.at(2, 1), t.data + 11);
  EXPECT_EQ(t.row(2), t.data + 10);
}

TEST(CpuIsaTypes, GlobalViewAndScratch) {
  float x[12];
  auto v = gview(x + 1, 4, 1, 2, 3);
  EXPECT_EQ(v.ptr, x + 1);
  EXPECT_EQ(v.rs, 4);
  EXPECT_EQ(v.cs, 1);
  EXPECT_EQ(v.vr, 2);
  EXPECT_EQ(v.vc, 3);
  ScratchBuffer<double> s(1000);
  EXPECT_EQ(s.size(), 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
  for (int i = 0; i < 1000; ++i) s[i] = i;
  ScratchBuffer<double> m(std::move(s));
  EXPECT_EQ(m[999], 999.0);
  EXPECT_EQ(s.data(), nullptr);
  ScratchBuffer<double> e(0);
  EXPECT_EQ(e.size(), 0);
}

// Large scratch blocks are kept when freed and handed out again for the same rounded size (no
// fresh pages per kernel call); other sizes get their own; the cache holds at most its limit.
TEST(CpuIsaTypes, LargeScratchBlocksAreReused) {
  const int64_t n = int64_t(ScratchCache::kMinBytes / sizeof(float)) + 5;
  const float* first;
  {
    ScratchBuffer<float> a(n);
    first = a.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    a[n - 1] = 1.0f;
  }
  {
    ScratchBuffer<float> b(n + 3);  // the same 4 KiB-rounded size
    EXPECT_EQ(b.data(), first);
    ScratchBuffer<float> c(n + 3);  // the block is taken: a new one
    EXPECT_NE(c.data(), first);
    ScratchBuffer<float> d(4 * n);
    EXPECT_NE(d.data(), first);
    EXPECT_NE(d.data(), c.data());
  }
  {
    // A block beyond the limit is not kept, and does not push the others out.
    ScratchBuffer<char> huge(int64_t(ScratchCache::kLimitBytes) + 1);
  }
  ScratchBuffer<float> again(n);
  EXPECT_EQ(again.data(), first);
  ScratchBuffer<double> small(1000), small2(0);  // below kMinBytes: plain aligned allocations
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
}

// ---- TLOAD / TSTORE ----------------------------------------------------------------------------------
struct Global {
  int64_t rows, cols;
  std::vector<float> v;
  Global(int64_t r, int64_t c) : rows(r), cols(c), v(size_t(r * c)) {
    for (auto& x : v) x = float(rand_nz());
  }
  float* p() { return v.data(); }
};

TEST(CpuIsaMemory, LoadContiguousRaggedAndClamped) {
  Global g(50, 70);
  for (auto [r0, c0, vr, vc] :
       {std::array<int, 4>{0, 0, 16, 32}, {3, 5, 11, 29}, {40, 60, 10, 10}, {0, 0, 50, 70}, {7, 1, 0, 5}}) {
    Tile<float, 16, 32> t;
    poison(t);
    TLOAD(t, gview(g.p() + r0 * 70 + c0, 70, 1, vr, vc));
    expect_tile(
        t, std::min(vr, 16), std::min(vc, 32), [&](int r, int c) { return g.v[(r0 + r) * 70 + c0 + c]; }, 0);
  }
}

TEST(CpuIsaMemory, LoadTransposedStridedBroadcast) {
  Global g(64, 64);
  Tile<float, 24, 40> t;
  poison(t);
  TLOAD(t, gview(g.p() + 2, 1, 64, 21, 37));  // column-major window: (r,c) at c*64 + r
  expect_tile(t, 21, 37, [&](int r, int c) { return g.v[2 + r + c * 64]; }, 0, 0, "transposed");
  poison(t);
  TLOAD(t, gview(g.p() + 1, 128, 3, 20, 21));  // arbitrary strides
  expect_tile(t, 20, 21, [&](int r, int c) { return g.v[1 + r * 128 + c * 3]; }, 0, 0, "strided");
  poison(t);
  TLOAD(t, gview(g.p() + 5, 64, 0, 24, 40));  // cs == 0: every column the same element
  expect_tile(t, 24, 40, [&](int r, int) { return g.v[5 + r * 64]; }, 0, 0, "broadcast");
  poison(t);
  TLOAD(t, gview(g.p() + 63 * 64, -64, 1, 24, 40));  // negative row stride
  expect_tile(t, 24, 40, [&](int r, int c) { return g.v[(63 - r) * 64 + c]; }, 0, 0, "negative stride");
}

TEST(CpuIsaMemory, LoadConvertsDtype) {
  std::vector<half_t> h(40 * 40);
  std::vector<bf16_t> b(40 * 40);
  std::vector<int32_t> iv(40 * 40);
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = half_from_float(float(rand_nz()));
    b[i] = bf16_from_float(float(rand_nz()));
    iv[i] = int32_t(irand(-1000, 1000));
  }
  Tile<float, 32, 32> t;
  poison(t);
  TLOAD(t, gview(h.data(), 40, 1, 30, 31));
  expect_tile(t, 30, 31, [&](int r, int c) { return to_float(h[r * 40 + c]); }, 0, 0, "f16");
  poison(t);
  TLOAD(t, gview(b.data(), 1, 40, 32, 32));  // transposed bf16
  expect_tile(t, 32, 32, [&](int r, int c) { return to_float(b[c * 40 + r]); }, 0, 0, "bf16^T");
  Tile<double, 8, 8> d;
  poison(d);
  TLOAD(d, gview(iv.data(), 40, 1, 8, 8));
  expect_tile(d, 8, 8, [&](int r, int c) { return iv[r * 40 + c]; }, 0, 0, "i32->f64");
  const std::vector<int32_t>& civ = iv;
  Tile<int32_t, 4, 4> it;
  TLOAD(it, gview(civ.data(), 40, 1, 4, 4));  // a view of const data
  expect_tile(it, 4, 4, [&](int r, int c) { return iv[r * 40 + c]; }, 0);
}

TEST(CpuIsaMemory, StoreWritesOnlyTheRegion) {
  for (auto [vvr, vvc, tvr, tvc] :
       {std::array<int, 4>{16, 16, 16, 16}, {10, 16, 16, 7}, {16, 5, 3, 16}, {0, 5, 3, 3}}) {
    Tile<float, 16, 16> t;
    fill_random(t, tvr, tvc);
    std::vector<float> g(40 * 40, -777.0f);
    TSTORE(gview(g.data() + 41, 40, 1, vvr, vvc), t);
    int er = std::min(vvr, tvr), ec = std::min(vvc, tvc);
    for (int r = 0; r < 40; ++r)
      for (int c = 0; c < 40; ++c) {
        bool in = r >= 1 && r < 1 + er && c >= 1 && c < 1 + ec;
        float want = in ? t.data[(r - 1) * 16 + c - 1] : -777.0f;
        ASSERT_EQ(g[r * 40 + c], want) << r << "," << c;
      }
  }
}

TEST(CpuIsaMemory, StoreTransposedAndConverted) {
  Tile<float, 8, 12> t;
  fill_random(t, 7, 11);
  std::vector<float> g(20 * 20, -1.0f);
  TSTORE(gview(g.data(), 1, 20, 8, 12), t);  // g[c*20 + r] = t[r,c]
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 11; ++c) ASSERT_EQ(g[c * 20 + r], t.at(r, c));
  EXPECT_EQ(g[7], -1.0f);  // row 7 is outside src.valid
  std::vector<half_t> h(8 * 12, half_t{0x7777});
  TSTORE(gview(h.data(), 12, 1, 8, 12), t);
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 11; ++c) ASSERT_EQ(h[r * 12 + c].bits, half_from_float(t.at(r, c)).bits);
  EXPECT_EQ(h[11].bits, 0x7777);
  std::vector<bf16_t> b(8 * 12);
  TSTORE(gview(b.data(), 12, 1, 8, 12), t);
  EXPECT_EQ(b[13].bits, bf16_from_float(t.at(1, 1)).bits);
  TPREFETCH(gview(b.data(), 12, 1, 8, 12));  // a hint: nothing to observe but no crash
  TPREFETCH(gview(g.data(), 1, 20, 8, 12));
}

TEST(CpuIsaMemory, LoadStoreRoundTripF64AndInt) {
  std::vector<double> g(30 * 30);
  for (auto& x : g) x = rand_nz();
  Tile<double, 16, 16> t;
  TLOAD(t, gview(g.data(), 30, 1, 13, 9));
  std::vector<double> out(30 * 30, 0.0);
  TSTORE(gview(out.data(), 30, 1, 16, 16), t);
  for (int r = 0; r < 30; ++r)
    for (int c = 0; c < 30; ++c) ASSERT_EQ(out[r * 30 + c], (r < 13 && c < 9) ? g[r * 30 + c] : 0.0);
}

// ---- fills ---------------------------------------------------------------------------------------------
TEST(CpuIsaFill, ExpandsAndCi) {
  Tile<float, 5, 7> t;
  t.vr = 2;
  t.vc = 3;
  TEXPANDS(t, 2.5);
  expect_tile(t, 5, 7, [](int, int) { return 2.5; }, 0);
  Tile<int32_t, 3, 9> ci;
  TCI(ci, int64_t(-4));
  expect_tile(ci, 3, 9, [](int, int c) { return -4.0 + c; }, 0);
  Tile<float, 2, 6> cf;
  TCI(cf, 0.5f);
  expect_tile(cf, 2, 6, [](int, int c) { return 0.5 + c; }, 0);
  Tile<bool, 2, 2> b;
  TEXPANDS(b, 3);  // bool: nonzero -> 1
  expect_tile(b, 2, 2, [](int, int) { return 1.0; }, 0);
}

// ---- sync / parallel -------------------------------------------------------------------------------------
// One CPU thread runs the instructions in order, so the sync instructions are no-ops: between a
// load, a compute and a store, for any pipe and event numbers, they change no value.
TEST(CpuIsaSync, NoOpsLeaveTheDataFlowAlone) {
  std::vector<float> in(4 * 8), out(4 * 8, kNaN);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5f * float(i) - 3.0f;
  Tile<float, 4, 8> t;
  TLOAD(t, gview(in.data(), 8, 1, 4, 8));
  SET_FLAG(0, 2, 1);
  WAIT_FLAG(0, 2, 1);
  TMUL(t, t, 2.0f);
  for (int pipe = 0; pipe < 4; ++pipe) PIPE_BARRIER(pipe);
  SET_FLAG(2, 1, 7);
  WAIT_FLAG(2, 1, 7);
  TSTORE(gview(out.data(), 8, 1, 4, 8), t);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], 2.0f * in[i]) << i;
  EXPECT_EQ(t.vr, 4);
  EXPECT_EQ(t.vc, 8);
}

// A stand-in for the runtime's pool: splits [0, n) into chunks run on fresh threads.
void fake_pool(int64_t n, pto_loop_body body, void* ctx) {
  std::vector<std::thread> th;
  const int64_t parts = 3, step = (n + parts - 1) / parts;
  for (int64_t b = 0; b < n; b += step) th.emplace_back([=] { body(ctx, b, std::min(n, b + step)); });
  for (auto& t : th) t.join();
}

TEST(CpuIsaParallel, ParallelForRunsEveryIterationOnce) {
  for (pto_parallel_for_fn pf : {pto_parallel_for_fn(nullptr), pto_parallel_for_fn(&fake_pool)}) {
    std::vector<std::atomic<int>> hits(100);
    for (auto& h : hits) h = 0;
    parallel_for(pf, 100, [&](int64_t i) { hits[size_t(i)]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    int calls = 0;
    parallel_for(pf, 0, [&](int64_t) { ++calls; });
    EXPECT_EQ(calls, 0);
    // Tiles declared inside the body are per-iteration (per-thread) storage.
    std::vector<float> out(8 * 64);
    const auto body = [&](int64_t i) {
      Tile<float, 8, 8> t;
      TEXPANDS(t, float(i));
      TSTORE(gview(out.data() + i * 8, 64, 1, 8, 8), t);
    };
    parallel_for(pf, 8, body);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 64; ++c) ASSERT_EQ(out[r * 64 + c], float(c / 8));
  }
}

}  // namespace
