// Internal to the reference interpreter: the machine state (scalars, tiles, global buffers, sync
// flags) and the helpers the instruction files share. Not part of any public contract.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backends/interp/interpreter.h"
#include "backends/interp/parallel.h"
#include "exec/tensor_arg.h"
#include "ir/ir.h"
#include "ir/visitor.h"

namespace pypto::interp {

// --- numerics (numerics.cpp) --------------------------------------------------------------------
// One element value, exact for every dtype: integers (i32, i64, bool) as int64, floats as double.
using Num = ir::ScalarValue;
inline Num inum(int64_t v) { return Num{false, v, 0}; }
inline Num fnum(double v) { return Num{true, 0, v}; }
// A computed element (an integer or floating C++ value) as a Num.
template <class T>
Num num(T x) {
  if constexpr (std::is_integral_v<T>)
    return inum(int64_t(x));
  else
    return fnum(double(x));
}
// a + b before rounding to the destination (floats in double, integers wrapping): the
// accumulation of TSCATTER_ADD / MSCATTER_ADD.
inline Num add_num(const Num& a, const Num& b) {
  if (a.is_float || b.is_float) return fnum(a.as_double() + b.as_double());
  return inum(int64_t(uint64_t(a.i) + uint64_t(b.i)));
}
// Converts v to what an element of type t holds, by the rules of pto/elem.hpp (elem::cast):
// floats round to nearest even, float -> int truncates and saturates (NaN -> 0), ints wrap to
// their width, bool is != 0.
Num round_to(ir::DType t, const Num& v);
Num load_scalar(ir::DType t, const void* p);            // decode one element in caller memory
void store_scalar(ir::DType t, void* p, const Num& v);  // v already rounded to t
// The dtype arithmetic happens in for operands of these dtypes (pto::promote_t): bool counts as
// i32, f16/bf16 as f32; i32 < i64 < f32 < f64. The interpreter computes f32 in double.
ir::DType promote_compute(std::initializer_list<ir::DType> ts);
// The dtype a fill scalar (TEXPANDS, TCI, TFILLPAD) is converted to (docs/isa.md §2): dst's
// compute dtype, i32 for a narrow int tile (put() then narrows by wrapping); a bool tile's is x != 0.
inline ir::DType fill_dtype(ir::DType dst) { return dst == ir::DType::Bool ? dst : promote_compute({dst}); }

// --- storage -----------------------------------------------------------------------------------
// A local tile (Vec/Mat/Acc): static R x C, runtime valid region, a written bit per element.
struct Tile {
  std::string name;
  ir::DType dtype;
  int64_t R = 1, C = 1, vr = 0, vc = 0;
  std::vector<Num> val;
  std::vector<uint8_t> written;
  size_t parallel_depth = 0;  // parallel loops enclosing its alloc (see RaceChecker)
};

// A buffer in global memory: either the caller's tensor (external: data + strides, elements in
// their native type) or program scratch (owned: row-major values with written bits, so reading
// scratch that nothing wrote is caught just like for tiles).
struct GlobalBuf {
  std::string name;
  ir::DType dtype;
  std::vector<int64_t> shape;
  bool external = false;
  char* data = nullptr;
  std::vector<int64_t> strides;  // external: elements
  std::vector<Num> val;          // owned
  std::vector<uint8_t> written;  // owned
  size_t parallel_depth = 0;     // parallel loops enclosing its alloc (see RaceChecker)
};

// A global view resolved at run time: a 2-D window of valid extent rows x cols. Element (i, j)
// sits at base index base[d] + i*rstep (d == rdim) + j*cstep (d == cdim) in every base dim d.
struct GView {
  GlobalBuf* buf = nullptr;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> base;
  int rdim = -1, cdim = -1;
  int64_t rstep = 0, cstep = 0;
};

// Runs the program by walking it: each statement kind's visit executes it.
class Machine : private ir::StmtVisitor {
 public:
  Machine(const ir::Program& p, const runtime::RunArgs& args, ExecObserver* observer = nullptr);
  void run();

  // --- used by the instruction files --------------------------------------------------------
  [[noreturn]] void fail(const ir::Op& op, const std::string& what) const;
  // Operand i of op as a whole local tile (errors name the instruction).
  Tile& tile(const ir::Op& op, size_t i);
  bool is_scalar(const ir::Op& op, size_t i) const;
  Num scalar(const ir::Op& op, size_t i) const;
  int64_t int_scalar(const ir::Op& op, size_t i) const;
  GView global_view(const ir::Op& op, size_t i);

  // Tile element access. get() checks the element is inside the valid region and was written.
  Num get(const ir::Op& op, const Tile& t, int64_t r, int64_t c) const;
  // Sets the valid region of dst (error if it does not fit the tile's static shape).
  void set_valid(const ir::Op& op, Tile& t, int64_t vr, int64_t vc) const;
  // Writes one element (rounded to the tile's dtype); r, c must be inside R x C.
  void put(const ir::Op& op, Tile& t, int64_t r, int64_t c, const Num& v) const;

  Num gread(const ir::Op& op, const GView& v, int64_t i, int64_t j) const;
  void gwrite(const ir::Op& op, const GView& v, int64_t i, int64_t j, const Num& x) const;
  // Bounds-checked element offset of (i, j): in elements via strides (external) or row-major.
  int64_t global_address(const ir::Op& op, const GView& v, int64_t i, int64_t j) const;

  // Sync state: outstanding SET_FLAGs per (src pipe, dst pipe, event).
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> flags;

 private:
  void visit_for(const ir::StmtNode& s) override;
  void visit_if(const ir::StmtNode& s) override;
  void visit_let(const ir::StmtNode& s) override;
  void visit_alloc(const ir::StmtNode& s) override { allocate(s.buffer); }
  void visit_op(const ir::StmtNode& s) override { exec_op(s.op); }
  void exec_op(const ir::Op& op);
  void allocate(const ir::BufferRef& b);
  const ir::View& view_operand(const ir::Op& op, size_t i) const;
  int64_t eval_int(const ir::Expr& e, const char* what) const;
  std::vector<OperandUse> operand_uses(const ir::Op& op);

  const ir::Program& prog_;
  ir::ScalarEnv env_;
  std::unordered_map<std::string, std::unique_ptr<Tile>> tiles_;
  std::unordered_map<std::string, std::unique_ptr<GlobalBuf>> globals_;
  ParallelSettings parallel_ = parallel_settings_from_env();
  mutable RaceChecker races_;
  ExecObserver* observer_ = nullptr;
};

// Computes every result f(r, c) over vr x vc first, then sets dst's valid region to it and writes
// the results: dst may alias a source.
template <class F>
void commit(Machine& m, const ir::Op& op, Tile& dst, int64_t vr, int64_t vc, F&& f) {
  std::vector<Num> out(size_t(std::max<int64_t>(vr, 0) * std::max<int64_t>(vc, 0)));
  for (int64_t r = 0; r < vr; ++r)
    for (int64_t c = 0; c < vc; ++c) out[size_t(r * vc + c)] = f(r, c);
  m.set_valid(op, dst, vr, vc);  // checks the region fits the tile
  for (int64_t r = 0; r < vr; ++r)
    for (int64_t c = 0; c < vc; ++c) m.put(op, dst, r, c, out[size_t(r * vc + c)]);
}

// Instruction semantics, grouped by file; each handles the opcodes of its categories.
void exec_memory(Machine& m, const ir::Op& op);         // memory.cpp: TLOAD TSTORE TPREFETCH
void exec_elementwise(Machine& m, const ir::Op& op);    // elementwise.cpp: Fill Unary Binary
                                                        //   Compare Select Convert
void exec_reduce_expand(Machine& m, const ir::Op& op);  // reduce.cpp: Reduce Expand
void exec_matrix(Machine& m, const ir::Op& op);         // matrix.cpp: Matrix
void exec_layout(Machine& m, const ir::Op& op);         // layout.cpp: Layout Gather
void exec_sync(Machine& m, const ir::Op& op);           // sync.cpp: Sync

}  // namespace pypto::interp
