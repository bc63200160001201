// Zero-copy conversion of nanobind ndarrays to TensorArg (see arrays.h).
#include "bindings/arrays.h"

#include <nanobind/stl/string.h>

#include <string>

namespace pypto::bindings {
namespace nb = nanobind;
using Code = nb::dlpack::dtype_code;

namespace {
std::string describe(nb::dlpack::dtype t) {
  const char* kind = "code";
  switch (Code(t.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      kind = "bool";
      break;
    default:
      break;
  }
  std::string s = std::string(kind) + std::to_string(t.bits);
  if (Code(t.code) != Code::Int && Code(t.code) != Code::UInt && Code(t.code) != Code::Float &&
      Code(t.code) != Code::Bfloat && Code(t.code) != Code::Complex && Code(t.code) != Code::Bool)
    s += " (dlpack code " + std::to_string(int(t.code)) + ")";
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

const char* device_name(int dev) {
  switch (dev) {
    case 1:
      return "cpu";
    case 2:
      return "cuda";
    case 3:
      return "cuda_host";
    case 4:
      return "opencl";
    case 7:
      return "vulkan";
    case 8:
      return "metal";
    case 10:
      return "rocm";
    case 13:
      return "cuda_managed";
    case 14:
      return "oneapi";
    default:
      return "unknown";
  }
}
}  // namespace

ir::DType dtype_from_dlpack(nb::dlpack::dtype t) {
  if (t.lanes == 1) {
    switch (Code(t.code)) {
      case Code::Float:
        if (t.bits == 32) return ir::DType::F32;
        if (t.bits == 64) return ir::DType::F64;
        if (t.bits == 16) return ir::DType::F16;
        break;
      case Code::Bfloat:
        if (t.bits == 16) return ir::DType::BF16;
        break;
      case Code::Int:
        if (t.bits == 32) return ir::DType::I32;
        if (t.bits == 64) return ir::DType::I64;
        if (t.bits == 16) return ir::DType::I16;
        if (t.bits == 8) return ir::DType::I8;
        break;
      case Code::UInt:
        if (t.bits == 8) return ir::DType::U8;
        break;
      case Code::Bool:
        if (t.bits == 8) return ir::DType::Bool;
        break;
      default:
        break;
    }
  }
  throw ir::Error(
      "unsupported array dtype " + describe(t) +
      " (supported: float32, float16, bfloat16, float64, int32, int64, int16, int8, uint8, bool)");
}

nb::dlpack::dtype dlpack_from_dtype(ir::DType t) {
  nb::dlpack::dtype d;
  d.lanes = 1;
  switch (t) {
    case ir::DType::F32:
      d.code = uint8_t(Code::Float);
      d.bits = 32;
      break;
    case ir::DType::F64:
      d.code = uint8_t(Code::Float);
      d.bits = 64;
      break;
    case ir::DType::F16:
      d.code = uint8_t(Code::Float);
      d.bits = 16;
      break;
    case ir::DType::BF16:
      d.code = uint8_t(Code::Bfloat);
      d.bits = 16;
      break;
    case ir::DType::I32:
      d.code = uint8_t(Code::Int);
      d.bits = 32;
      break;
    case ir::DType::I64:
      d.code = uint8_t(Code::Int);
      d.bits = 64;
      break;
    case ir::DType::Bool:
      d.code = uint8_t(Code::Bool);
      d.bits = 8;
      break;
    case ir::DType::I8:
      d.code = uint8_t(Code::Int);
      d.bits = 8;
      break;
    case ir::DType::U8:
      d.code = uint8_t(Code::UInt);
      d.bits = 8;
      break;
    case ir::DType::I16:
      d.code = uint8_t(Code::Int);
      d.bits = 16;
      break;
  }
  return d;
}

bool is_writable(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyObject_CheckBuffer(o)) {
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_RECORDS) == 0) {
      PyBuffer_Release(&v);
      return true;
    }
    PyErr_Clear();  // read-only, or a layout the buffer protocol cannot describe: ask DLPack
  }
  nb::ndarray<> w;
  return nb::try_cast<nb::ndarray<>>(h, w, false);
}

std::string py_type_name(nb::handle h) {
  return nb::cast<std::string>(nb::handle((PyObject*)Py_TYPE(h.ptr())).attr("__qualname__"));
}

ir::ScalarValue to_scalar(nb::handle h, size_t i) {
  ir::ScalarValue v;
  if (PyFloat_Check(h.ptr())) {
    v.is_float = true;
    v.f = PyFloat_AS_DOUBLE(h.ptr());
  } else if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    v.i = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow) throw ir::Error("scalar argument " + std::to_string(i) + " does not fit in 64 bits");
  } else if (PyObject_HasAttrString(h.ptr(), "__index__")) {
    v.i = nb::cast<int64_t>(nb::int_(h));
  } else if (PyObject_HasAttrString(h.ptr(), "__float__")) {
    v.is_float = true;
    v.f = nb::cast<double>(nb::float_(h));
  } else {
    throw ir::Error("scalar argument " + std::to_string(i) + ": expected an int or a float, got " +
                    py_type_name(h));
  }
  return v;
}

runtime::TensorArg to_tensor_arg(const AnyArray& a) {
  if (a.device_type() != nb::device::cpu::value)
    throw ir::Error(std::string("unsupported array device '") + device_name(a.device_type()) +
                    "': only CPU arrays can be passed (move the tensor with .cpu())");
  runtime::TensorArg t;
  t.dtype = dtype_from_dlpack(a.dtype());
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));  // data() adds byte_offset
  const size_t nd = a.ndim();
  t.shape.resize(nd);
  t.strides.resize(nd);
  for (size_t i = 0; i < nd; ++i) t.shape[i] = int64_t(a.shape(i));
  if (a.stride_ptr()) {
    for (size_t i = 0; i < nd; ++i) t.strides[i] = a.stride(i);
  } else {  // DLPack allows null strides for a compact row-major tensor
    int64_t s = 1;
    for (size_t i = nd; i-- > 0;) {
      t.strides[i] = s;
      s *= t.shape[i];
    }
  }
  return t;
}

}  // namespace pypto::bindings
