// .npy reading and writing (see npy.h). Format: magic "\x93NUMPY", version, header length, a
// Python-dict header {'descr', 'fortran_order', 'shape'} padded to 64 bytes, then the raw data.
#include "npy.h"
#include "ir/number_text.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace pypto::ptoc {

using ir::DType;
using ir::Error;

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// ---- half precision ------------------------------------------------------------------------------

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(float(man | 0x400), int(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint16_t float_to_half(double x) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (std::isnan(x)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0, -14)) {          // subnormal: multiples of 2^-24, ties to even
    return sign | uint16_t(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  double m = std::frexp(a, &e);                       // a = m * 2^e, m in [0.5, 1)
  double scaled = std::nearbyint(std::ldexp(m, 11));  // 11 significant bits, ties to even
  if (scaled >= 2048) {
    scaled /= 2;
    ++e;
  }
  int biased = e - 1 + 15;
  if (biased >= 31) return sign | 0x7c00;
  return sign | uint16_t(biased << 10) | uint16_t(uint32_t(scaled) & 0x3ff);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint16_t float_to_bf16(double x) {
  float f = float(x);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return uint16_t(bits >> 16);
}

// ---- element access ------------------------------------------------------------------------------

template <class T>
T load(const Array& a, int64_t i) {
  T v;
  std::memcpy(&v, a.data.data() + size_t(i) * sizeof(T), sizeof(T));
  return v;
}

double get_f(const Array& a, int64_t i) {
  switch (a.dtype) {
    case DType::F32:
      return load<float>(a, i);
    case DType::F64:
      return load<double>(a, i);
    case DType::F16:
      return half_to_float(load<uint16_t>(a, i));
    case DType::BF16:
      return bf16_to_float(load<uint16_t>(a, i));
    case DType::I32:
      return load<int32_t>(a, i);
    case DType::I64:
      return double(load<int64_t>(a, i));
    case DType::Bool:
      return load<uint8_t>(a, i) != 0;
    case DType::I8:
      return load<int8_t>(a, i);
    case DType::U8:
      return load<uint8_t>(a, i);
    case DType::I16:
      return load<int16_t>(a, i);
  }
  return 0;
}

int64_t get_i(const Array& a, int64_t i) {
  switch (a.dtype) {
    case DType::I32:
      return load<int32_t>(a, i);
    case DType::I64:
      return load<int64_t>(a, i);
    case DType::Bool:
      return load<uint8_t>(a, i) != 0;
    case DType::I8:
      return load<int8_t>(a, i);
    case DType::U8:
      return load<uint8_t>(a, i);
    case DType::I16:
      return load<int16_t>(a, i);
    default: {
      double f = std::trunc(get_f(a, i));
      if (!(f >= -9.2233720368547758e18 && f < 9.2233720368547758e18))
        throw Error("cannot convert " + ir::format_g(f) + " to an integer");
      return int64_t(f);
    }
  }
}

template <class T>
void store(Array& a, int64_t i, T v) {
  std::memcpy(a.data.data() + size_t(i) * sizeof(T), &v, sizeof(T));
}

// ---- header --------------------------------------------------------------------------------------

std::string header_value(const std::string& h, const std::string& key, const std::string& path) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) throw Error(path + ": .npy header has no '" + key + "'");
  size_t c = h.find(':', k);
  if (c == std::string::npos) throw Error(path + ": malformed .npy header");
  size_t s = h.find_first_not_of(' ', c + 1);
  if (s == std::string::npos) throw Error(path + ": malformed .npy header");
  if (h[s] == '\'') return h.substr(s + 1, h.find('\'', s + 1) - s - 1);
  if (h[s] == '(') return h.substr(s + 1, h.find(')', s) - s - 1);
  size_t e = h.find_first_of(",}", s);
  return h.substr(s, e - s);
}

}  // namespace

Array read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw Error(path + ": not a .npy file");
  int major = uint8_t(bytes[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(path + ": truncated .npy header");
    hlen = 0;
    for (int b = 0; b < 4; ++b) hlen |= size_t(uint8_t(bytes[size_t(8 + b)])) << (8 * b);
    hstart = 12;
  } else {
    throw Error(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (bytes.size() < hstart + hlen) throw Error(path + ": truncated .npy header");
  std::string h = bytes.substr(hstart, hlen);
  std::string descr = header_value(h, "descr", path);
  std::string fortran = header_value(h, "fortran_order", path);
  std::string shape_s = header_value(h, "shape", path);
  if (fortran.find("True") != std::string::npos)
    throw Error(path + ": Fortran-order arrays are not supported");
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
    throw Error(path + ": unsupported dtype '" + descr + "' (little-endian numeric arrays only)");
  char kind = descr[1];
  int width = std::atoi(descr.c_str() + 2);

  Array raw;
  std::stringstream ss(shape_s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    raw.shape.push_back(std::stoll(item));
  }
  int64_t n = raw.numel();
  size_t data_off = hstart + hlen;
  if (bytes.size() < data_off + size_t(n) * size_t(width)) throw Error(path + ": truncated .npy data");
  const uint8_t* src = reinterpret_cast<const uint8_t*>(bytes.data()) + data_off;

  auto copy_as = [&](DType t) {
    raw.dtype = t;
    raw.data.assign(src, src + size_t(n) * size_t(width));
    return raw;
  };
  if (kind == 'f' && width == 4) return copy_as(DType::F32);
  if (kind == 'f' && width == 8) return copy_as(DType::F64);
  if (kind == 'f' && width == 2) return copy_as(DType::F16);
  if (kind == 'i' && width == 4) return copy_as(DType::I32);
  if (kind == 'i' && width == 8) return copy_as(DType::I64);
  if (kind == 'b' && width == 1) return copy_as(DType::Bool);
  if (kind == 'i' && width == 1) return copy_as(DType::I8);
  if (kind == 'u' && width == 1) return copy_as(DType::U8);
  if (kind == 'i' && width == 2) return copy_as(DType::I16);
  if ((kind == 'i' || kind == 'u') && (width == 1 || width == 2 || width == 4 || width == 8)) {
    raw.dtype = DType::I64;
    raw.data.resize(size_t(n) * 8);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = src + size_t(i) * size_t(width);
      uint64_t u = 0;
      std::memcpy(&u, p, size_t(width));
      int64_t v;
      if (kind == 'u') {
        if (width == 8 && u > uint64_t(std::numeric_limits<int64_t>::max()))
          throw Error(path + ": u8 value too large for i64");
        v = int64_t(u);
      } else {
        int shift = 64 - 8 * width;
        v = int64_t(u << shift) >> shift;  // sign-extend
      }
      store<int64_t>(raw, i, v);
    }
    return raw;
  }
  throw Error(path + ": unsupported dtype '" + descr + "'");
}

void write_npy(const std::string& path, const Array& a0) {
  Array a = a0.dtype == DType::BF16 ? convert(a0, DType::F32) : a0;
  const char* descr = "";
  switch (a.dtype) {
    case DType::F32:
      descr = "<f4";
      break;
    case DType::F64:
      descr = "<f8";
      break;
    case DType::F16:
      descr = "<f2";
      break;
    case DType::I32:
      descr = "<i4";
      break;
    case DType::I64:
      descr = "<i8";
      break;
    case DType::Bool:
      descr = "|b1";
      break;
    case DType::I8:
      descr = "|i1";
      break;
    case DType::U8:
      descr = "|u1";
      break;
    case DType::I16:
      descr = "<i2";
      break;
    case DType::BF16:
      break;
  }
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : i + 1 < a.shape.size() ? ", " : "");
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot write " + path);
  out.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {char(h.size() & 0xff), char(h.size() >> 8)};
  out.write(len, 2);
  out.write(h.data(), std::streamsize(h.size()));
  out.write(reinterpret_cast<const char*>(a.data.data()), std::streamsize(a.data.size()));
  if (!out) throw Error("error writing " + path);
}

Array convert(const Array& a, DType t) {
  if (a.dtype == t) return a;
  Array r;
  r.dtype = t;
  r.shape = a.shape;
  int64_t n = a.numel();
  r.data.resize(size_t(n) * size_t(ir::dtype_bytes(t)));
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::F32:
        store<float>(r, i, float(get_f(a, i)));
        break;
      case DType::F64:
        store<double>(r, i, get_f(a, i));
        break;
      case DType::F16:
        store<uint16_t>(r, i, float_to_half(get_f(a, i)));
        break;
      case DType::BF16:
        store<uint16_t>(r, i, float_to_bf16(get_f(a, i)));
        break;
      case DType::I32:
        store<int32_t>(r, i, int32_t(get_i(a, i)));
        break;
      case DType::I64:
        store<int64_t>(r, i, get_i(a, i));
        break;
      case DType::Bool:
        store<uint8_t>(r, i, get_f(a, i) != 0);
        break;
      case DType::I8:
        store<int8_t>(r, i, int8_t(get_i(a, i)));
        break;
      case DType::U8:
        store<uint8_t>(r, i, uint8_t(get_i(a, i)));
        break;
      case DType::I16:
        store<int16_t>(r, i, int16_t(get_i(a, i)));
        break;
    }
  }
  return r;
}

Array poisoned(DType t, const std::vector<int64_t>& shape) {
  Array r;
  r.dtype = t;
  r.shape = shape;
  int64_t n = r.numel();
  r.data.resize(size_t(n) * size_t(ir::dtype_bytes(t)));
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::F32:
        store<float>(r, i, std::numeric_limits<float>::quiet_NaN());
        break;
      case DType::F64:
        store<double>(r, i, std::numeric_limits<double>::quiet_NaN());
        break;
      case DType::F16:
        store<uint16_t>(r, i, 0x7e00);
        break;
      case DType::BF16:
        store<uint16_t>(r, i, 0x7fc0);
        break;
      case DType::I32:
        store<int32_t>(r, i, std::numeric_limits<int32_t>::min());
        break;
      case DType::I64:
        store<int64_t>(r, i, std::numeric_limits<int64_t>::min());
        break;
      case DType::Bool:
      case DType::U8:
        store<uint8_t>(r, i, 0);
        break;
      case DType::I8:
        store<int8_t>(r, i, std::numeric_limits<int8_t>::min());
        break;
      case DType::I16:
        store<int16_t>(r, i, std::numeric_limits<int16_t>::min());
        break;
    }
  }
  return r;
}

}  // namespace pypto::ptoc
