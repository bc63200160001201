// The PTO ISA opcode table: every instruction is declared exactly once, here.
//
// The same opcodes serve both IR levels:
//  * tensor level: operands are views of n-d tensors of any size (global or temporary);
//    an op means "apply this instruction elementwise / per row / per matrix over the whole view".
//  * tile level (the ISA proper): compute operands are local tiles (rank <= 2, static shape,
//    runtime valid region); only the Memory instructions (TLOAD / TSTORE / TPREFETCH and the
//    indexed-row MGATHER / MSCATTER / MSCATTER_ADD, and MMATMUL / MMATMUL_ACC, a whole matrix
//    product in global memory) touch global memory.
// The lowering pass (src/passes/tile_ops.cpp) turns the first into the second.
// Semantics are written in docs/isa.md and defined executably by src/backends/interp.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace pypto::ir {

enum class OpCategory : uint8_t {
  Memory,
  Fill,
  Unary,
  Binary,
  Compare,
  Select,
  Convert,
  Reduce,
  Expand,
  Matrix,
  Layout,
  Gather,
  Sync,
  Composite  // tensor level only: see PYPTO_COMPOSITES
};

// X(name, category, number of operands including the destination; -1 = variadic)
// Operand 0 is always the destination (for TSTORE: the global view written).
#define PYPTO_OPCODES(X)     \
  X(TLOAD, Memory, 2)        \
  X(TSTORE, Memory, 2)       \
  X(TPREFETCH, Memory, 1)    \
  X(MGATHER, Memory, 3)      \
  X(MSCATTER, Memory, 3)     \
  X(MSCATTER_ADD, Memory, 3) \
  X(MMATMUL, Memory, 3)      \
  X(MMATMUL_ACC, Memory, 3)  \
  X(TEXPANDS, Fill, 2)       \
  X(TCI, Fill, 2)            \
  X(TMOV, Unary, 2)          \
  X(TNEG, Unary, 2)          \
  X(TABS, Unary, 2)          \
  X(TEXP, Unary, 2)          \
  X(TLOG, Unary, 2)          \
  X(TSQRT, Unary, 2)         \
  X(TRSQRT, Unary, 2)        \
  X(TRECIP, Unary, 2)        \
  X(TRELU, Unary, 2)         \
  X(TTANH, Unary, 2)         \
  X(TSIGMOID, Unary, 2)      \
  X(TERF, Unary, 2)          \
  X(TGELU, Unary, 2)         \
  X(TGELU_TANH, Unary, 2)    \
  X(TSILU, Unary, 2)         \
  X(TFLOOR, Unary, 2)        \
  X(TNOT, Unary, 2)          \
  X(TSIN, Unary, 2)          \
  X(TCOS, Unary, 2)          \
  X(TTAN, Unary, 2)          \
  X(TEXP2, Unary, 2)         \
  X(TEXPM1, Unary, 2)        \
  X(TLOG2, Unary, 2)         \
  X(TLOG10, Unary, 2)        \
  X(TLOG1P, Unary, 2)        \
  X(TCBRT, Unary, 2)         \
  X(TCEIL, Unary, 2)         \
  X(TROUND, Unary, 2)        \
  X(TTRUNC, Unary, 2)        \
  X(TSIGN, Unary, 2)         \
  X(TBNOT, Unary, 2)         \
  X(TERFC, Unary, 2)         \
  X(TERFINV, Unary, 2)       \
  X(TLGAMMA, Unary, 2)       \
  X(TDIGAMMA, Unary, 2)      \
  X(TTRIGAMMA, Unary, 2)     \
  X(TADD, Binary, 3)         \
  X(TSUB, Binary, 3)         \
  X(TMUL, Binary, 3)         \
  X(TDIV, Binary, 3)         \
  X(TMAX, Binary, 3)         \
  X(TMIN, Binary, 3)         \
  X(TPOW, Binary, 3)         \
  X(TAND, Binary, 3)         \
  X(TOR, Binary, 3)          \
  X(TATAN2, Binary, 3)       \
  X(THYPOT, Binary, 3)       \
  X(TCOPYSIGN, Binary, 3)    \
  X(TFMOD, Binary, 3)        \
  X(TREM, Binary, 3)         \
  X(TFLOORDIV, Binary, 3)    \
  X(TGCD, Binary, 3)         \
  X(TBAND, Binary, 3)        \
  X(TBOR, Binary, 3)         \
  X(TBXOR, Binary, 3)        \
  X(TSHL, Binary, 3)         \
  X(TSHR, Binary, 3)         \
  X(TCMP_LT, Compare, 3)     \
  X(TCMP_LE, Compare, 3)     \
  X(TCMP_GT, Compare, 3)     \
  X(TCMP_GE, Compare, 3)     \
  X(TCMP_EQ, Compare, 3)     \
  X(TCMP_NE, Compare, 3)     \
  X(TSEL, Select, 4)         \
  X(TCVT, Convert, 2)        \
  X(TROWSUM, Reduce, 2)      \
  X(TROWMAX, Reduce, 2)      \
  X(TROWMIN, Reduce, 2)      \
  X(TROWARGMAX, Reduce, 2)   \
  X(TROWARGMIN, Reduce, 2)   \
  X(TCOLSUM, Reduce, 2)      \
  X(TCOLMAX, Reduce, 2)      \
  X(TCOLMIN, Reduce, 2)      \
  X(TROWEXPAND, Expand, 2)   \
  X(TCOLEXPAND, Expand, 2)   \
  X(TMATMUL, Matrix, 3)      \
  X(TMATMUL_ACC, Matrix, 3)  \
  X(TMATMUL_BIAS, Matrix, 4) \
  X(TDWCONV, Matrix, 11)     \
  X(TTRANS, Layout, 2)       \
  X(TRESHAPE, Layout, 2)     \
  X(TEXTRACT, Layout, 4)     \
  X(TINSERT, Layout, 4)      \
  X(TFILLPAD, Layout, 3)     \
  X(TGATHER, Gather, 3)      \
  X(TSCATTER, Gather, 3)     \
  X(TSCATTER_ADD, Gather, 3) \
  X(TARGSORT, Gather, 3)     \
  X(TSCAN, Gather, 3)        \
  X(SET_FLAG, Sync, 3)       \
  X(WAIT_FLAG, Sync, 3)      \
  X(PIPE_BARRIER, Sync, 1)

// Composite operators: tensor-level ops whose meaning is a sequence of the instructions above.
// The builder emits them with their result's shape and dtype inferred; passes/lower_composites
// expands them (a target may substitute its own expansion) at the start of the pipeline, so no
// later pass, backend or ISA program sees one. Operands after the destination, in order (an
// absent optional tensor is the scalar 0; dims and sizes are integer constants):
//   SOFTMAX, LOG_SOFTMAX   dst, x, dim
//   LAYER_NORM             dst, x, weight | 0, bias | 0, normalized dims (the last n), eps
//   RMS_NORM               dst, x, weight | 0, normalized dims, eps
//   CONV2D                 dst, x (NCHW or CHW), w (OIHW), bias | 0, stride h, stride w,
//                          pad top, pad bottom, pad left, pad right, dilation h, dilation w
//   CONCAT                 dst, dim, x0, x1, ...
//   CLAMP                  dst, x, lo, hi (tensors or scalars): min(max(x, lo), hi)
//   HARDTANH               dst, x, lo, hi (scalars): min(max(x, lo), hi) as torch's hardtanh and
//                          relu6, whose gradient is 0 at the bounds (a clamp's passes there)
#define PYPTO_COMPOSITES(X)    \
  X(SOFTMAX, Composite, 3)     \
  X(LOG_SOFTMAX, Composite, 3) \
  X(LAYER_NORM, Composite, 6)  \
  X(RMS_NORM, Composite, 5)    \
  X(CONV2D, Composite, 12)     \
  X(CONCAT, Composite, -1)     \
  X(CLAMP, Composite, 4)       \
  X(HARDTANH, Composite, 4)

enum class Opcode : uint8_t {
#define PYPTO_X(name, cat, n) name,
  PYPTO_OPCODES(PYPTO_X) PYPTO_COMPOSITES(PYPTO_X)
#undef PYPTO_X
};

struct OpcodeInfo {
  std::string_view name;
  OpCategory category;
  int num_operands;
};

const OpcodeInfo& opcode_info(Opcode op);
std::optional<Opcode> parse_opcode(std::string_view name);
inline std::string_view opcode_name(Opcode op) { return opcode_info(op).name; }
// TROWARGMAX / TROWARGMIN: reductions whose result is an index, not a value of the source.
inline bool is_arg_reduction(Opcode op) { return op == Opcode::TROWARGMAX || op == Opcode::TROWARGMIN; }

// Pipes of the abstract machine, used by the sync instructions and by the simulator.
enum class Pipe : uint8_t {
  MTE2 /*global->local*/,
  MTE3 /*local->global*/,
  V /*vector*/,
  M /*matrix*/,
  S /*scalar*/,
  ALL
};
// "MTE2", "MTE3", "V", "M", "S", "ALL"; "?" for a number that is no pipe. The one table of pipe
// names: the interpreter's sync checks and the simulator's reports and race messages use it.
const char* pipe_name(int64_t pipe);

}  // namespace pypto::ir
