// Python access to the element semantics of include/pto/elem.hpp, so that the front end folds
// constants (pypto.gelu(1.5), pypto.exp(2.0), ...) with the very functions the backends run.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <map>
#include <string>

#include "ir/types.h"
#include "pto/elem.hpp"

namespace nb = nanobind;

namespace pypto::bindings {

void bind_elem(nb::module_& m) {
  namespace e = pto::elem;
  using U = double (*)(double);
  using B = double (*)(double, double);
  static const std::map<std::string, U> unary = {
      {"exp", &e::exp<double>},         {"log", &e::log<double>},
      {"sqrt", &e::sqrt<double>},       {"rsqrt", &e::rsqrt<double>},
      {"recip", &e::recip<double>},     {"tanh", &e::tanh<double>},
      {"sigmoid", &e::sigmoid<double>}, {"erf", &e::erf<double>},
      {"gelu", &e::gelu<double>},       {"gelu_tanh", &e::gelu_tanh<double>},
      {"silu", &e::silu<double>},       {"floor", &e::floor<double>},
      {"relu", &e::relu<double>},       {"abs", &e::abs<double>},
      {"neg", &e::neg<double>},         {"sign", &e::sign<double>},
      {"sin", &e::sin<double>},         {"cos", &e::cos<double>},
      {"tan", &e::tan<double>},         {"exp2", &e::exp2<double>},
      {"expm1", &e::expm1<double>},     {"log2", &e::log2<double>},
      {"log10", &e::log10<double>},     {"log1p", &e::log1p<double>},
      {"cbrt", &e::cbrt<double>},       {"ceil", &e::ceil<double>},
      {"trunc", &e::trunc<double>},     {"erfc", &e::erfc<double>},
      {"erfinv", &e::erfinv<double>},   {"lgamma", &e::lgamma<double>},
      {"digamma", &e::digamma<double>}, {"trigamma", &e::trigamma<double>},
  };
  static const std::map<std::string, B> binary = {
      {"max", &e::max<double>},     {"min", &e::min<double>},           {"pow", &e::pow<double>},
      {"div", &e::div<double>},     {"floormod", &e::floormod<double>}, {"atan2", &e::atan2<double>},
      {"hypot", &e::hypot<double>}, {"copysign", &e::copysign<double>}, {"fmod", &e::fmod<double>},
  };
  m.def(
      "elem_unary",
      [](const std::string& name, double x) {
        auto it = unary.find(name);
        if (it == unary.end()) throw ir::Error("elem_unary: no element function '" + name + "'");
        return it->second(x);
      },
      "The element function `name` of pto/elem.hpp on a float (computed in double).");
  m.def(
      "elem_binary",
      [](const std::string& name, double a, double b) {
        auto it = binary.find(name);
        if (it == binary.end()) throw ir::Error("elem_binary: no element function '" + name + "'");
        return it->second(a, b);
      },
      "The element function `name` of pto/elem.hpp on two floats (computed in double).");
  m.def(
      "elem_int_binary",
      [](const std::string& name, int64_t a, int64_t b) {
        if (name == "div") return e::div(a, b);
        if (name == "floordiv") return e::floordiv(a, b);
        if (name == "floormod") return e::floormod(a, b);
        throw ir::Error("elem_int_binary: no element function '" + name + "'");
      },
      "Integer division of pto/elem.hpp (x // 0 == 0), in int64.");
  m.def(
      "elem_cast",
      [](const std::string& dtype, double x) -> int64_t {
        if (dtype == "int32") return e::cast<int32_t>(x);
        if (dtype == "int64") return e::cast<int64_t>(x);
        throw ir::Error("elem_cast: dtype must be int32 or int64, got '" + dtype + "'");
      },
      "float -> integer conversion of pto/elem.hpp (truncates, saturates, NaN -> 0).");
}

}  // namespace pypto::bindings
