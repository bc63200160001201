// ptoc's .npy reader/writer. The tool's sources are not part of the core library, so the
// implementation is compiled into this test directly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "../../tools/ptoc/npy.cpp"

namespace pypto::ptoc {
namespace {

std::string tmp_path(const std::string& name) {
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "pypto_npy_" + name +
         ".npy";
}

Array iota(DType t, std::vector<int64_t> shape) {
  Array f64;
  f64.dtype = DType::F64;
  f64.shape = shape;
  f64.data.resize(size_t(f64.numel()) * 8);
  for (int64_t i = 0; i < f64.numel(); ++i) store<double>(f64, i, double(i) * 0.75 - 3);
  return convert(f64, t);
}

TEST(PtocNpy, RoundTripEveryDtype) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::I32, DType::I64, DType::Bool}) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {5}, {3, 4}, {2, 3, 2}}) {
      Array a = iota(t, shape);
      std::string p = tmp_path(std::string(ir::dtype_name(t)));
      write_npy(p, a);
      Array b = read_npy(p);
      EXPECT_EQ(b.dtype, t);
      EXPECT_EQ(b.shape, shape);
      EXPECT_EQ(b.data, a.data);
      // Header padded so the data starts at a multiple of 64 bytes.
      std::ifstream in(p, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u);
      std::remove(p.c_str());
    }
  }
  // bf16 has no NumPy dtype: written as f32.
  Array bf = iota(DType::BF16, {4});
  write_npy(tmp_path("bf16"), bf);
  Array back = read_npy(tmp_path("bf16"));
  EXPECT_EQ(back.dtype, DType::F32);
  EXPECT_EQ(convert(back, DType::BF16).data, bf.data);
}

TEST(PtocNpy, HalfConversions) {
  struct Case {
    double v;
    uint16_t bits;
    bool exact;  // v is representable in f16
  } cases[] = {{1.0, 0x3c00, true},
               {-2.0, 0xc000, true},
               {65504.0, 0x7bff, true},
               {65520.0, 0x7c00, false},
               {0.1, 0x2e66, false},
               {1.0 / 3.0, 0x3555, false},
               {std::ldexp(1.0, -24), 0x0001, true},
               {std::ldexp(1.0, -14), 0x0400, true},
               {0.0, 0x0000, true},
               {-0.0, 0x8000, true},
               {1.0 + std::ldexp(1.0, -11), 0x3c00, false} /* a tie rounds to even */};
  for (const auto& c : cases) {
    EXPECT_EQ(float_to_half(c.v), c.bits) << c.v;
    if (c.exact) {
      EXPECT_EQ(double(half_to_float(c.bits)), c.v);
    }
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(float_to_half(half_to_float(uint16_t(h))), h);
  EXPECT_EQ(float_to_bf16(1.0), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
}

TEST(PtocNpy, ConvertAndPoison) {
  Array f = iota(DType::F64, {6});  // -3, -2.25, -1.5, -0.75, 0, 0.75
  Array i = convert(f, DType::I64);
  EXPECT_EQ(load<int64_t>(i, 1), -2);  // truncation toward zero
  EXPECT_EQ(load<int64_t>(i, 5), 0);
  Array b = convert(f, DType::Bool);
  EXPECT_EQ(load<uint8_t>(b, 4), 0);
  EXPECT_EQ(load<uint8_t>(b, 5), 1);
  Array p = poisoned(DType::F32, {2, 2});
  EXPECT_TRUE(std::isnan(load<float>(p, 3)));
  EXPECT_EQ(load<int32_t>(poisoned(DType::I32, {1}), 0), std::numeric_limits<int32_t>::min());
}

TEST(PtocNpy, Errors) {
  std::string p = tmp_path("bad");
  {
    std::ofstream out(p, std::ios::binary);
    out << "not numpy";
  }
  EXPECT_THROW(read_npy(p), ir::Error);
  EXPECT_THROW(read_npy(tmp_path("missing")), ir::Error);
  Array a = iota(DType::F32, {4});
  write_npy(p, a);
  {  // truncate the data
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(p, std::ios::binary);
    out << bytes.substr(0, bytes.size() - 3);
  }
  EXPECT_THROW(read_npy(p), ir::Error);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace pypto::ptoc
