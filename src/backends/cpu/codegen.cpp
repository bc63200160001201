// CPU code generator: walks a tile-level program and prints one C++17 translation unit whose
// statements call the instruction templates of include/pto/cpu (namespace pto). Loops stay loops;
// a parallel loop becomes a pto::parallel_for over its trip count; local tiles are stack objects
// (heap for big ones); global scratch is a pto::ScratchBuffer. All IR names are renamed into a
// prefixed C++ namespace (v_ variables, t_ buffers) so they cannot hit keywords or our own names.
#include "backends/cpu/codegen.h"
#include "backends/cpu/cpp_expr.h"
#include "backends/cpu/cpp_text.h"
#include "backends/cpu/matmul_runs.h"
#include "backends/cpu/nests.h"
#include "backends/cpu/row_fusion.h"
#include "backends/cpu/stream_choice.h"
#include "ir/number_text.h"
#include "pto/elem.hpp"
#include "target/target.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <locale>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "ir/printer.h"
#include "ir/visitor.h"

namespace pypto::cpu {
namespace {

using namespace ir;

// Tiles bigger than this live on the heap, and so does any tile that would take the tiles in scope
// past the budget: a kernel may run on a host thread with a default 8 MiB stack (or less).
constexpr int64_t kMaxStackTileBytes = 64 << 10;
constexpr int64_t kStackBudgetBytes = 1 << 20;

const char* kPrelude = R"(#include <pto/pto.hpp>

#include <cstdint>

// Only compiler builtins below: standard headers such as <cmath> or <memory> would add tens of
// milliseconds to every kernel's compile time.
namespace {
// Scalar-expression semantics (floor division, x // 0 == 0, NaN-propagating min/max, saturating
// float -> int casts) come from pto/elem.hpp, as in the IR's folding and evaluation.
static inline int64_t pto_nonneg(int64_t a) { return a < 0 ? 0 : a; }
// Number of iterations of `for (v = lo; step > 0 ? v < hi : v > hi; v += step)`.
// In unsigned arithmetic: bounds near INT64_MAX/MIN must not overflow (a `v += step` that wraps
// would loop for ever); a count beyond INT64_MAX saturates.
static inline int64_t pto_trip(int64_t lo, int64_t hi, int64_t step) {
  unsigned long long d, s;
  if (step > 0 && hi > lo) d = (unsigned long long)hi - (unsigned long long)lo, s = (unsigned long long)step;
  else if (step < 0 && lo > hi) d = (unsigned long long)lo - (unsigned long long)hi, s = 0ull - (unsigned long long)step;
  else return 0;
  unsigned long long n = d / s + (d % s != 0);
  return n > 0x7fffffffffffffffull ? 0x7fffffffffffffffll : (int64_t)n;
}
// Owns a tile too big for a thread's stack; `new T` leaves the data uninitialised, as on the stack.
template <class T>
struct pto_heap_tile {
  T* p = new T;
  ~pto_heap_tile() { delete p; }
  pto_heap_tile() = default;
  pto_heap_tile(const pto_heap_tile&) = delete;
  pto_heap_tile& operator=(const pto_heap_tile&) = delete;
};
}  // namespace

)";

// Every loop iteration first polls the runtime's stop flag (Ctrl-C): one relaxed load per tile
// step. Returning (from the kernel, or from one parallel iteration) leaves tiles to their
// destructors; the runtime reports the run as interrupted.
constexpr const char* kStopCheck = "if (pto::stop_requested(args)) return;\n";

// Emits each statement from its visit method: one C++ scope per loop and branch body.
class Gen : private StmtVisitor {
 public:
  Gen(const Program& p, bool profile) : p_(p), profile_(profile) {}

  std::string run() {
    std::string pname;
    for (char ch : p_.name) pname += (ch == '\n' || ch == '\r') ? ' ' : ch;
    out_ << "// PyPTO kernel '" << pname << "': generated from its tile-level PTO program.\n";
    out_ << kPrelude;
    out_ << "extern \"C\" __attribute__((visibility(\"default\"))) void pypto_kernel(const pto_kernel_args* "
            "args) {\n";
    out_ << "  (void)args;\n";
    for (size_t i = 0; i < p_.params.size(); ++i) declare_param(i);
    for (size_t j = 0; j < p_.scalars.size(); ++j) declare_scalar(j);
    const size_t prologue_at = size_t(out_.tellp());
    find_wrapped_products(p_.body);
    if (profile_)
      profiled_body();
    else
      visit_block(p_.body);
    out_ << "}\n";
    std::string text = out_.str();
    if (!wide_rows_.empty()) text.insert(prologue_at, wide_rows_prologue());
    return text;
  }

  // Rows wider than a dynamic row group's widest tile run unfused code that most calls never
  // reach and that takes much of the compile: compiled with PTO_LAZY_WIDE_ROWS, the kernel leaves
  // it out and, before touching any data, reports a call that would need it (see
  // cpu::kWideRowsMissing); the runtime then compiles the kernel in full and runs that.
  std::string wide_rows_prologue() const {
    std::string s = "#ifdef PTO_LAZY_WIDE_ROWS\n  if (";
    for (size_t i = 0; i < wide_rows_.size(); ++i) s += (i ? " || !(" : "!(") + wide_rows_[i] + ")";
    return s + ") {\n    args->report_error(args->error_ctx, \"" + kWideRowsMissing +
           "\");\n    return;\n  }\n#endif\n";
  }
  // A width test can move to the kernel's start when it reads dimension symbols only.
  bool on_symbols_only(const Expr& e) const {
    std::vector<std::string> vars;
    ir::collect_vars(e, vars);
    for (const auto& v : vars) {
      auto it = std::find_if(p_.scalars.begin(), p_.scalars.end(),
                             [&](const ScalarParam& s) { return s.name == v; });
      if (it == p_.scalars.end() || !it->is_dim_symbol()) return false;
    }
    return true;
  }

 private:
  struct BufInfo {
    std::string ptr;             // C++ name of the base pointer (global) or tile (local)
    std::vector<IExpr> strides;  // global buffers: element strides per dimension
    bool local = false;
    DType dtype = DType::F32;
  };

  // ---- names ------------------------------------------------------------------------------------
  static std::string sanitize(const std::string& name) {
    std::string s;
    for (char ch : name) {
      bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
      s += ok ? ch : '_';
    }
    // No double underscores (reserved in C++) and no trailing underscore that could meet a suffix.
    std::string t;
    for (char ch : s)
      if (!(ch == '_' && !t.empty() && t.back() == '_')) t += ch;
    while (!t.empty() && t.front() == '_') t.erase(t.begin());
    while (!t.empty() && t.back() == '_') t.pop_back();
    if (t.empty()) t = "x";
    return t;
  }

  // Maps an IR name to a unique C++ identifier with the given prefix; stable per (prefix, name).
  std::string ident(const std::string& prefix, const std::string& name) {
    auto key = prefix + '\0' + name;
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    std::string base = prefix + sanitize(name);
    std::string id = base;
    for (int k = 2; used_.count(id); ++k) id = base + "_" + std::to_string(k);
    used_.insert(id);
    names_[key] = id;
    return id;
  }
  std::string var_name(const std::string& n) { return ident("v_", n); }
  std::string buf_name(const std::string& n) { return ident("t_", n); }

  // ---- output -----------------------------------------------------------------------------------
  std::ostream& line() {
    for (int i = 0; i < indent_; ++i) out_ << "  ";
    return out_;
  }

  [[noreturn]] void fail_op(const Op& op, const std::string& what) {
    std::string text;
    try {
      text = print(op);
    } catch (const std::exception&) {
      text = std::string(opcode_name(op.code)) + " ...";
    }
    throw Error("cpu codegen: " + what + " in `" + text + "`");
  }

  // ---- declarations ----------------------------------------------------------------------------
  void declare_param(size_t i) {
    const BufferRef& b = p_.params[i];
    if (!b) throw Error("cpu codegen: program '" + p_.name + "' has a null parameter");
    BufInfo info;
    info.ptr = buf_name(b->name);
    info.dtype = b->dtype;
    const std::string T = ctype(b->dtype);
    line() << T << "* const " << info.ptr << " = static_cast<" << T << "*>(args->data[" << i << "]);\n";
    for (int d = 0; d < b->rank(); ++d) {
      std::string s = "st_" + info.ptr.substr(2) + "_" + std::to_string(d);
      line() << "const int64_t " << s << " = args->strides[" << i << "][" << d << "];\n";
      info.strides.push_back({s, std::nullopt});
    }
    bufs_[b->name] = std::move(info);
  }

  void declare_scalar(size_t j) {
    const ScalarParam& s = p_.scalars[j];
    std::string v = var_name(s.name);
    vars_[s.name] = s.dtype;
    if (s.dtype == DType::F32)  // f32 scalars are rounded once, as the interpreter does
      line() << "const double " << v << " = double(float(args->fscalars[" << j << "]));\n";
    else if (is_float(s.dtype))
      line() << "const double " << v << " = args->fscalars[" << j << "];\n";
    else if (s.dtype == DType::I32)
      line() << "const int64_t " << v << " = int64_t(int32_t(args->iscalars[" << j << "]));\n";
    else
      line() << "const int64_t " << v << " = args->iscalars[" << j << "];\n";
  }

  // Local tiles are rank 2; rank 0/1 (and leading unit dims) are padded to rows x cols.
  std::pair<int64_t, int64_t> tile_shape(const Buffer& b) {
    int64_t lead = 1;
    for (int d = 0; d + 2 < b.rank(); ++d) lead *= b.shape[size_t(d)];
    if (lead != 1)
      throw Error("cpu codegen: local tile '" + b.name + "' has rank " + std::to_string(b.rank()) +
                  " (tiles are rank 2); the program is not tile level");
    std::pair<int64_t, int64_t> rc{1, 1};
    if (b.rank() == 1) rc = {1, b.shape[0]};
    if (b.rank() >= 2) rc = {b.shape[size_t(b.rank() - 2)], b.shape[size_t(b.rank() - 1)]};
    if (rc.first <= 0 || rc.second <= 0 || rc.first * rc.second > (int64_t(1) << 30))
      throw Error("cpu codegen: local tile '" + b.name + "' has shape " + std::to_string(rc.first) + " x " +
                  std::to_string(rc.second) + "; tiles need 1 <= rows*cols <= 2^30");
    return rc;
  }

  void alloc(const BufferRef& b) {
    if (!b) throw Error("cpu codegen: alloc of a null buffer");
    BufInfo info;
    info.ptr = buf_name(b->name);
    info.dtype = b->dtype;
    const std::string T = ctype(b->dtype);
    if (b->space != Space::Global) {
      auto [r, c] = tile_shape(*b);
      info.local = true;
      std::string tt = "pto::Tile<" + T + ", " + std::to_string(r) + ", " + std::to_string(c) + ">";
      const int64_t bytes = r * c * dtype_bytes(b->dtype);
      if (bytes > kMaxStackTileBytes || stack_bytes_ + bytes > kStackBudgetBytes) {
        std::string h = "hp_" + info.ptr.substr(2);
        line() << "const pto_heap_tile<" << tt << " > " << h << ";\n";
        line() << tt << "& " << info.ptr << " = *" << h << ".p;\n";
      } else {
        stack_bytes_ += bytes;
        line() << tt << " " << info.ptr << ";\n";
      }
    } else {
      if (b->kind != BufferKind::Temp)
        throw Error("cpu codegen: alloc of global buffer '" + b->name + "', which is a parameter");
      // Row-major; a dynamic dim's extent (over dimension symbols) is evaluated here, at run time.
      std::string h = "sb_" + info.ptr.substr(2);
      info.strides.resize(b->shape.size());
      IExpr st = ic(1);
      for (int d = b->rank() - 1; d >= 0; --d) {
        info.strides[size_t(d)] = st;
        st = imul(st, b->is_dynamic(d) ? iexpr(b->dyn[size_t(d)]) : ic(b->shape[size_t(d)]));
        if (!st.c) {  // named once, not re-evaluated at every access
          std::string n = "dn_" + info.ptr.substr(2) + "_" + std::to_string(d);
          line() << "const int64_t " << n << " = " << st.s << ";\n";
          st = IExpr{n, std::nullopt};
        }
      }
      if (unused_scratch_.count(b.get())) {  // the wide result of wrapped products: never touched
        line() << T << "* const " << info.ptr << " = nullptr;\n";
      } else {
        line() << "pto::ScratchBuffer<" << T << "> " << h << "(" << (st.c ? int_literal(*st.c) : st.s)
               << ");\n";
        line() << T << "* const " << info.ptr << " = " << h << ".data();\n";
      }
    }
    bufs_[b->name] = std::move(info);
  }

  // ---- expressions (cpp_expr.h) ----------------------------------------------------------------
  std::string expr(const Expr& e) { return ex_.expr(e); }
  std::string as_f(const Expr& e) { return ex_.as_f(e); }
  std::string as_i(const Expr& e) { return ex_.as_i(e); }
  std::string condition(const Expr& c) { return ex_.condition(c); }
  IExpr iexpr(const Expr& e) { return ex_.iexpr(e); }

  // ---- operands ---------------------------------------------------------------------------------
  const BufInfo& info_of(const Op& op, const View& v) {
    if (!v.buf) fail_op(op, "a view of no buffer");
    auto it = bufs_.find(v.buf->name);
    if (it == bufs_.end()) fail_op(op, "buffer '" + v.buf->name + "' is used before its alloc");
    return it->second;
  }

  // A whole local tile, by name.
  std::string tile(const Op& op, size_t i) {
    const View* v = std::get_if<View>(&op.args[i]);
    if (!v) fail_op(op, "operand " + std::to_string(i) + " must be a tile, not a scalar");
    const BufInfo& info = info_of(op, *v);
    if (!info.local)
      fail_op(op, "operand " + std::to_string(i) + " of " + std::string(opcode_name(op.code)) +
                      " is the global buffer '" + v->buf->name +
                      "' (compute instructions take local tiles); the program is not tile level");
    if (v->rank() > 2)
      fail_op(op, "operand " + std::to_string(i) + " has rank " + std::to_string(v->rank()) +
                      " (tiles are rank 2)");
    if (!v->is_whole())
      fail_op(op,
              "operand " + std::to_string(i) + " must be a whole tile, got a view of '" + v->buf->name + "'");
    return info.ptr;
  }

  // pto::gview(base + offset, rs, cs, vr, vc) for a global view.
  std::string gview(const Op& op, size_t i) {
    const View* v = std::get_if<View>(&op.args[i]);
    if (!v) fail_op(op, "operand " + std::to_string(i) + " must be a global view, not a scalar");
    const BufInfo& info = info_of(op, *v);
    if (info.local)
      fail_op(op, "operand " + std::to_string(i) + " must be a global view, got local tile '" + v->buf->name +
                      "'");
    const size_t n = v->buf->shape.size();
    if (v->offset.size() != n || v->size.size() != n || v->step.size() != n || v->valid.size() != n)
      fail_op(op, "malformed view of '" + v->buf->name + "': per-dimension lists do not match its rank");
    IExpr off = ic(0);
    for (size_t d = 0; d < n; ++d) off = iadd(off, imul(iexpr(v->offset[d]), info.strides[d]));
    // The last two view dims are rows and columns; any other dim (indexed, or a leading view dim
    // of size 1) contributes only its offset, and an empty valid extent there empties the view.
    const int rank = v->rank();
    for (int k = 0; k + 2 < rank; ++k)
      if (v->size[size_t(v->dims[size_t(k)])] != 1)
        fail_op(op, "operand " + std::to_string(i) + " is a rank-" + std::to_string(rank) +
                        " view; TLOAD/TSTORE take 2-d windows (the program is not tile level)");
    const int dr = rank >= 2 ? v->dims[size_t(rank - 2)] : -1;
    const int dc = rank >= 1 ? v->dims[size_t(rank - 1)] : -1;
    auto stride = [&](int d) { return imul(info.strides[size_t(d)], ic(v->step[size_t(d)])); };
    auto valid = [&](int d) -> IExpr {
      IExpr e = iexpr(v->valid[size_t(d)]);
      if (e.c) return ic(*e.c < 0 ? 0 : *e.c);
      return {"pto_nonneg(" + e.s + ")", std::nullopt};
    };
    IExpr rs = dr >= 0 ? stride(dr) : ic(0), cs = dc >= 0 ? stride(dc) : ic(1);
    IExpr vr = dr >= 0 ? valid(dr) : ic(1), vc = dc >= 0 ? valid(dc) : ic(1);
    for (size_t d = 0; d < n; ++d) {
      if (int(d) == dr || int(d) == dc) continue;
      IExpr e = iexpr(v->valid[d]);
      if (e.c && *e.c >= 1) continue;
      vr = e.c ? ic(0) : IExpr{"((" + e.s + ") > 0 ? " + vr.s + " : 0)", std::nullopt};
    }
    std::string ptr = off.c && *off.c == 0 ? info.ptr : "(" + info.ptr + " + " + off.s + ")";
    return "pto::gview(" + ptr + ", " + i64(rs) + ", " + i64(cs) + ", " + i64(vr) + ", " + i64(vc) + ")";
  }
  static std::string i64(const IExpr& e) { return e.c ? "int64_t(" + std::to_string(*e.c) + ")" : e.s; }

  // A scalar operand converted to the element type `t` of the tile it combines with.
  std::string scalar(const Op& op, size_t i, DType t) {
    const Expr& e = std::get<Expr>(op.args[i]);
    if (!e) fail_op(op, "operand " + std::to_string(i) + " is an empty expression");
    if (t == DType::Bool) return "(" + expr(e) + " != 0)";
    // By the conversion rules of pto/elem.hpp (float -> int saturates, NaN -> 0), as in the
    // interpreter; small integers meet a scalar in i32, the type they compute in.
    DType c = is_small_int(t) ? DType::I32 : compute_dtype(t);
    return "pto::elem::cast<" + std::string(ctype(c)) + ">(" + (is_float(c) ? as_f(e) : expr(e)) + ")";
  }

  bool is_local_view(const Op& op, size_t i) {
    const View* v = std::get_if<View>(&op.args[i]);
    return v && v->buf && v->buf->space != Space::Global;
  }
  bool is_view(const Op& op, size_t i) { return std::holds_alternative<View>(op.args[i]); }
  DType tile_dtype(const Op& op, size_t i) {
    const View& v = std::get<View>(op.args[i]);
    return info_of(op, v).dtype;
  }

  // ---- statements -------------------------------------------------------------------------------
  void op_stmt(const Op& op) {
    const OpcodeInfo& oi = opcode_info(op.code);
    if (oi.num_operands >= 0 && int(op.args.size()) != oi.num_operands)
      fail_op(op, std::string(oi.name) + " takes " + std::to_string(oi.num_operands) + " operands, got " +
                      std::to_string(op.args.size()));
    std::vector<std::string> a(op.args.size());
    switch (op.code) {
      case Opcode::TLOAD:
      case Opcode::TSTORE: {
        // Code generation never rewrites an instruction: a copy between local tiles is TMOV, and
        // a TLOAD/TSTORE whose global operand is a local tile is refused, as the verifier does.
        const size_t g = op.code == Opcode::TLOAD ? 1 : 0;
        if (is_local_view(op, g))
          fail_op(op, "operand " + std::to_string(g) + " of " + std::string(oi.name) +
                          " must be a global view; a copy between local tiles is TMOV");
        a[g] = gview(op, g);
        a[1 - g] = tile(op, 1 - g);
        if (op.code == Opcode::TSTORE) {
          const std::string stream = stream_choice(std::get<View>(op.args[0]), {}, ex_);
          if (stream == "true") a.push_back("pto::kStream");
          if (stream != "true" && stream != "false") a.push_back("pto::StreamHint{" + stream + "}");
        }
        break;
      }
      case Opcode::TPREFETCH:
        a[0] = gview(op, 0);
        break;
      case Opcode::MMATMUL:
      case Opcode::MMATMUL_ACC:
        // The product splits itself across the pool, unless it already runs inside a parallel loop.
        a = {parallel_depth_ == 0 ? "args->parallel_for" : "nullptr", gview(op, 0), gview(op, 1),
             gview(op, 2)};
        break;
      case Opcode::MGATHER:
      case Opcode::MSCATTER:
      case Opcode::MSCATTER_ADD: {
        // Indexed rows: the kernel's argument block receives any out-of-range index (gather.hpp).
        const size_t g = op.code == Opcode::MGATHER ? 1 : 0;
        a[g] = gview(op, g);
        if (std::get<View>(op.args[g]).rank() == 1) a[g] = "pto::as_column(" + a[g] + ")";
        a[1 - g] = tile(op, 1 - g);
        a[2] = tile(op, 2);
        a.push_back("args");
        break;
      }
      default:
        if (oi.category == OpCategory::Sync) {
          for (size_t i = 0; i < a.size(); ++i) {
            if (is_view(op, i)) fail_op(op, "operand " + std::to_string(i) + " must be a scalar");
            a[i] = "int(" + as_i(std::get<Expr>(op.args[i])) + ")";
          }
          break;
        }
        if (a.empty() || !is_view(op, 0)) fail_op(op, "the destination must be a tile");
        a[0] = tile(op, 0);
        for (size_t i = 1; i < a.size(); ++i) {
          if (is_view(op, i)) {
            a[i] = tile(op, i);
            continue;
          }
          a[i] = scalar(op, i, scalar_type(op, i));
        }
    }
    std::string call = "pto::" + std::string(oi.name) + "(";
    for (size_t i = 0; i < a.size(); ++i) call += (i ? ", " : "") + a[i];
    line() << call << ");\n";
  }

  // The type a scalar operand is converted to: the element type of the tile it meets.
  DType scalar_type(const Op& op, size_t i) {
    if ((op.code == Opcode::TEXTRACT || op.code == Opcode::TINSERT) && i >= 2) return DType::I64;
    if ((op.code == Opcode::TARGSORT || op.code == Opcode::TSCAN) && i == 2) return DType::I64;
    if (op.code == Opcode::TDWCONV && i >= 3) return DType::I64;  // strides and dilations
    const OpcodeInfo& oi = opcode_info(op.code);
    auto other = [&](size_t j) { return j < op.args.size() && is_view(op, j); };
    if (oi.category == OpCategory::Binary || oi.category == OpCategory::Compare) {
      size_t j = i == 1 ? 2 : 1;
      if (other(j)) return tile_dtype(op, j);
    }
    if (oi.category == OpCategory::Select && (i == 2 || i == 3)) {
      size_t j = i == 2 ? 3 : 2;
      if (other(j)) return tile_dtype(op, j);
    }
    return tile_dtype(op, 0);
  }

  // A block's statements, a run that pto/cpu/rows.hpp computes in one call (row_fusion.h) as
  // that call.
  void visit_block(const std::vector<Stmt>& body) override {
    std::optional<BlockTiles> tiles;  // built at the block's first loop
    for (size_t i = 0; i < body.size(); ++i) {
      if (auto f = match_row_fusion(body, i)) {
        fused_rows(body, i, *f);
        i += f->count - 1;
        continue;
      }
      if (row_operand_in_place(body, i)) {
        row_in_place(body[i]->op);
        continue;
      }
      if (const WrappedRun* w = wrapped_at(body, i)) {
        wrapped_matmul_sum(body, i, *w);  // the products, and the nest copying their rows out
        i += w->products;
        continue;
      }
      if (const size_t n = memory_matmul_run(body, i); n > 1) {
        matmul_sum(body, i, n);
        i += n - 1;
        continue;
      }
      if (auto e = memory_matmul_scale_epilogue(body, i)) {  // an int8 product and its scales
        const Op& mm = body[i++]->op;
        Op call{Opcode::MMATMUL, {e->out, mm.args[1], mm.args[2]}};
        for (const ScaleStep& st : e->steps)
          if (!st.imm) call.args.push_back(st.operand);
        std::string steps;
        size_t k = 3;
        for (const ScaleStep& st : e->steps) {
          const std::string op = st.add ? "1, " : "0, ";
          steps += steps.empty() ? "" : ", ";
          if (st.imm)
            steps += "pto::epi_imm(" + op + "pto::elem::cast<float>(" + float_literal(*st.imm) + "))";
          else
            steps += std::string(st.axis == 0   ? "pto::epi_rows("
                                 : st.axis == 1 ? "pto::epi_cols("
                                                : "pto::epi_scalar(") +
                     op + gview(call, k++) + ")";
        }
        line() << "pto::mmatmul_epilogue(" << (parallel_depth_ == 0 ? "args->parallel_for" : "nullptr")
               << ", " << gview(call, 0) << ", " << gview(call, 1) << ", " << gview(call, 2) << ", {" << steps
               << "});\n";
        continue;
      }
      if (auto e = memory_matmul_epilogue(body, i)) {  // the product and its epilogue nest
        const Op& mm = body[i++]->op;
        const Op call{Opcode::MMATMUL, {e->out, mm.args[1], mm.args[2], e->bias}};
        line() << "pto::mmatmul_bias(" << (parallel_depth_ == 0 ? "args->parallel_for" : "nullptr") << ", "
               << gview(call, 0) << ", " << gview(call, 1) << ", " << gview(call, 2) << ", " << gview(call, 3)
               << (e->relu ? ", true);\n" : ", false);\n");
        continue;
      }
      if (body[i]->kind == StmtKind::For) {
        if (!tiles) tiles.emplace(body);
        LoopLocalScope local(&body[i]->body, loop_local_tiles(body, i, *tiles));
        visit(body[i]);
        continue;
      }
      visit(body[i]);
    }
  }

  // A run of whole-matrix products into one window (matmul_runs.h): calls of the sum GEMM.
  void matmul_sum(const std::vector<Stmt>& body, size_t i, size_t n) {
    const char* pool = parallel_depth_ == 0 ? "args->parallel_for" : "nullptr";
    for (const auto& call :
         memory_matmul_sum_calls(body, i, n, pool, [&](const Op& op, size_t k) { return gview(op, k); }))
      line() << call << ";\n";
  }

  // The runs of products stored through a wrapped destination (matmul_runs.h) in every block, found
  // once before code generation: their scratch matrices, which the fused calls neither write nor
  // read, are allocated as null pointers (their allocations come before the products).
  struct WrappedRun {
    size_t products;
    WrappedStore store;
  };
  void find_wrapped_products(const std::vector<Stmt>& body) {
    for (size_t i = 0; i < body.size(); ++i) {
      const size_t n = memory_matmul_run(body, i);
      if (auto w = memory_matmul_wrapped_store(body, i, n)) {
        unused_scratch_.insert(std::get<View>(body[i]->op.args[0]).buf.get());
        wrapped_[{&body, i}] = WrappedRun{n, *w};
      }
      if (body[i] && body[i]->kind != StmtKind::OpStmt) {  // a loop's or branch's blocks
        find_wrapped_products(body[i]->body);
        find_wrapped_products(body[i]->orelse);
      }
    }
  }
  // The wrapped run starting at statement i of the block, or null.
  const WrappedRun* wrapped_at(const std::vector<Stmt>& body, size_t i) const {
    auto it = wrapped_.find({&body, i});
    return it == wrapped_.end() ? nullptr : &it->second;
  }

  // A sum of products stored through a wrapped destination (matmul_runs.h): one call.
  void wrapped_matmul_sum(const std::vector<Stmt>& body, size_t i, const WrappedRun& run) {
    const size_t n = run.products;
    const WrappedStore& w = run.store;
    const Op dst{Opcode::MMATMUL, {w.out}};
    const BufInfo& info = info_of(dst, w.out);
    std::string call = std::string("pto::mmatmul_sum_wrapped(") +
                       (parallel_depth_ == 0 ? "args->parallel_for" : "nullptr") + ", " + gview(dst, 0) +
                       ", " + i64(info.strides[size_t(w.image_row_dim)]) + ", int64_t(" +
                       std::to_string(w.wrap) + "), int64_t(" + std::to_string(w.columns) + ")";
    for (size_t t = 0; t < n; ++t)
      call += ", " + gview(body[i + t]->op, 1) + ", " + gview(body[i + t]->op, 2);
    line() << call << ");\n";
  }

  // A row operand's TLOAD that only a fused call reads (row_fusion.h): a pointer to the row, in
  // place where the view allows it.
  void row_in_place(const Op& load) {
    const std::string name = "row_" + std::to_string(row_ptrs_.size());
    line() << "const float* const " << name << " = pto::fused::row_data(" << gview(load, 1) << ", "
           << tile(load, 0) << ");\n";
    row_ptrs_[std::get<View>(load.args[0]).buf.get()] = name;
  }

  // The call into pto/cpu/rows.hpp that replaces body[i .. i + f.count) (row_fusion.h).
  void fused_rows(const std::vector<Stmt>& body, size_t i, const RowFusion& f) {
    for (size_t h : f.hoisted)
      std::find(f.in_place.begin(), f.in_place.end(), h) != f.in_place.end() ? row_in_place(body[i + h]->op)
                                                                             : visit(body[i + h]);
    std::string stream;  // the <stream> template argument, or a condition (stream_choice)
    if (f.global) {
      const View& out = std::get<View>(body[i + f.args[0].stmt]->op.args[0]);
      std::vector<const View*> alongside;  // the other global views the call reads, each buffer once
      if (f.reads_output_size) alongside.push_back(&out);
      std::vector<const Buffer*> seen{out.buf.get()};
      for (size_t k = 1; f.stream_by_traffic && k < f.args.size(); ++k) {
        if (f.args[k].kind != RowFusion::Kind::Global) continue;
        const View& v = std::get<View>(body[i + f.args[k].stmt]->op.args[f.args[k].arg]);
        if (!v.buf || std::find(seen.begin(), seen.end(), v.buf.get()) != seen.end()) continue;
        seen.push_back(v.buf.get());
        alongside.push_back(&v);
      }
      stream = stream_choice(out, alongside, ex_);
    }
    std::string args = "(";
    for (size_t k = 0; k < f.args.size(); ++k) {
      const RowFusion::Arg& a = f.args[k];
      std::string s = "nullptr";
      if (a.kind != RowFusion::Kind::Null) {
        const Op& op = body[i + a.stmt]->op;
        if (a.kind == RowFusion::Kind::Global) s = gview(op, a.arg);
        if (a.kind == RowFusion::Kind::Tile) s = tile(op, a.arg);
        if (a.kind == RowFusion::Kind::TileAddr) s = "&" + tile(op, a.arg);
        if (a.kind == RowFusion::Kind::RowData) {
          auto it = row_ptrs_.find(std::get<View>(op.args[a.arg]).buf.get());
          s = it != row_ptrs_.end() ? it->second : tile(op, a.arg) + ".data";
        }
        if (a.kind == RowFusion::Kind::Scalar) s = scalar(op, a.arg, DType::F32);
        if (a.kind == RowFusion::Kind::Text) s = a.text;
      }
      args += (k ? ", " : "") + s;
    }
    const std::string fn = "pto::fused::" + f.fn;
    if (!f.global)
      line() << fn << args << ");\n";
    else if (stream == "true" || stream == "false")
      line() << fn << "<" << stream << ">" << args << ");\n";
    else  // the output's size is dynamic: the kernel picks
      line() << "if (" << stream << ") " << fn << "<true>" << args << "); else " << fn << "<false>" << args
             << ");\n";
  }

  // The top-level statements with a hook call before and after each nest; the hooks are plain
  // statements (no new scope), so the tiles a nest declares stay visible to the next.
  void profiled_body() {
    // A sum of whole-matrix products (one nest per product) runs fused, as unprofiled, and so does
    // one stored through a wrapped destination with its copy nest: the time goes to the first
    // product's nest, the others report none.
    std::vector<Nest> nests = top_level_nests(p_);
    size_t done = 0;  // statements before this index already ran (in a fused sum)
    for (size_t n = 0; n < nests.size(); ++n) {
      line() << "if (args->nest_hook) args->nest_hook(args->nest_ctx, " << n << ", 0);\n";
      for (size_t i = std::max(nests[n].begin, done); i < nests[n].end; i = done) {
        if (const WrappedRun* w = wrapped_at(p_.body, i)) {
          wrapped_matmul_sum(p_.body, i, *w);
          done = i + w->products + 1;
          continue;
        }
        const size_t run = memory_matmul_run(p_.body, i);
        run > 1 ? matmul_sum(p_.body, i, run) : visit(p_.body[i]);
        done = i + run;
      }
      line() << "if (args->nest_hook) args->nest_hook(args->nest_ctx, " << n << ", 1);\n";
    }
  }

  void visit(const Stmt& s) override {
    if (!s) throw Error("cpu codegen: null statement");
    StmtVisitor::visit(s);
  }
  // (Seq: the base visits its body without braces: a Seq groups statements, it does not scope them)
  void visit_if(const StmtNode& s) override {
    const std::string cond = condition(s.cond);
    line() << "if (" << cond << ") {\n";
    scoped(s.body);
    const bool lazy = s.var == kWideRowsElse && on_symbols_only(s.cond);
    if (lazy && std::find(wide_rows_.begin(), wide_rows_.end(), cond) == wide_rows_.end())
      wide_rows_.push_back(cond);
    if (!s.orelse.empty()) {
      line() << "} else {\n";
      if (lazy) out_ << "#ifndef PTO_LAZY_WIDE_ROWS\n";
      scoped(s.orelse);
      if (lazy) out_ << "#endif\n";
    }
    line() << "}\n";
  }
  void visit_let(const StmtNode& s) override {
    if (!s.value) throw Error("cpu codegen: let '" + s.var + "' without a value");
    std::string rhs = expr(s.value);
    DType t = is_float(s.value->dtype) ? DType::F64 : DType::I64;
    vars_[s.var] = t;
    line() << "const " << (t == DType::F64 ? "double " : "int64_t ") << var_name(s.var) << " = " << rhs
           << ";\n";
  }
  void visit_alloc(const StmtNode& s) override { alloc(s.buffer); }
  void visit_op(const StmtNode& s) override { op_stmt(s.op); }

  void scoped(const std::vector<Stmt>& body) {
    ++indent_;
    const int64_t saved = stack_bytes_;
    visit_block(body);
    stack_bytes_ = saved;
    --indent_;
  }

  static bool uses_outer_tile(const std::vector<Stmt>& body) {
    std::set<std::string> allocated, used;
    for_each_stmt(body, [&](const Stmt& st) {
      if (st->kind == StmtKind::Alloc && st->buffer && st->buffer->space != Space::Global)
        allocated.insert(st->buffer->name);
      if (st->kind == StmtKind::OpStmt)
        for (const Operand& a : st->op.args)
          if (const View* v = std::get_if<View>(&a); v && v->buf && v->buf->space != Space::Global)
            used.insert(v->buf->name);
    });
    for (const auto& n : used)
      if (!allocated.count(n)) return true;
    return false;
  }

  void visit_for(const StmtNode& s) override {
    if (!s.lo || !s.hi) throw Error("cpu codegen: loop '" + s.var + "' without bounds");
    IExpr lo = iexpr(s.lo), hi = iexpr(s.hi), st = s.step ? iexpr(s.step) : ic(1);
    if (st.c && *st.c == 0) throw Error("cpu codegen: loop '" + s.var + "' has step 0");
    const std::string v = var_name(s.var);
    const std::string sfx = v.substr(2);
    // A local tile allocated outside the loop would be shared by all threads: run such a loop
    // serially (correct, if slower) rather than racing on it.
    const bool parallel =
        s.loop_kind == LoopKind::Parallel && parallel_depth_ == 0 && !uses_outer_tile(s.body);
    vars_[s.var] = DType::I64;
    const int64_t saved_stack = stack_bytes_;  // the body's tiles go out of scope with the loop
    if (parallel) {
      line() << "{\n";
      ++indent_;
      line() << "const int64_t lo_" << sfx << " = " << lo.s << ", sp_" << sfx << " = " << st.s << ";\n";
      line() << "pto::parallel_for(args->parallel_for, pto_trip(lo_" << sfx << ", " << hi.s << ", sp_" << sfx
             << "), [&](int64_t it_) {\n";
      ++indent_;
      line() << "const int64_t " << v << " = lo_" << sfx << " + it_ * sp_" << sfx << ";\n";
      line() << kStopCheck;
      ++parallel_depth_;
      visit_block(s.body);
      --parallel_depth_;
      --indent_;
      line() << "});\n";
      --indent_;
      line() << "}\n";
    } else {
      // Count iterations (the trip count is well defined for any step, and `v += step` near
      // INT64_MAX would wrap); `v = lo + it * step` stays in range on every iteration that runs.
      line() << "for (int64_t lo_" << sfx << " = " << lo.s << ", sp_" << sfx << " = " << st.s << ", it_"
             << sfx << " = 0, n_" << sfx << " = pto_trip(lo_" << sfx << ", " << hi.s << ", sp_" << sfx
             << "); it_" << sfx << " < n_" << sfx << "; ++it_" << sfx << ") {\n";
      ++indent_;
      line() << "const int64_t " << v << " = lo_" << sfx << " + it_" << sfx << " * sp_" << sfx << ";\n";
      line() << kStopCheck;
      visit_block(s.body);
      --indent_;
      line() << "}\n";
    }
    stack_bytes_ = saved_stack;
  }

  const Program& p_;
  bool profile_ = false;
  std::set<const Buffer*> unused_scratch_;  // find_wrapped_products
  // find_wrapped_products: by block and first product
  std::map<std::pair<const std::vector<Stmt>*, size_t>, WrappedRun> wrapped_;
  std::ostringstream out_ = classic_stream();
  std::vector<std::string> wide_rows_;  // conditions of the width tests whose else is left out lazily
  int indent_ = 1;
  int parallel_depth_ = 0;
  std::map<const Buffer*, std::string> row_ptrs_;  // tiles of in-place row operands -> their pointer
  int64_t stack_bytes_ = 0;                        // bytes of stack tiles in scope at the current point
  std::map<std::string, std::string> names_;
  std::set<std::string> used_;
  std::map<std::string, BufInfo> bufs_;
  std::map<std::string, DType> vars_;  // IR variable -> its C++ type (I64 or F64)
  ExprText ex_{vars_, [this](const std::string& n) { return var_name(n); }};
};

}  // namespace

std::string generate_cpp(const ir::Program& tile_program, bool profile) {
  return Gen(tile_program, profile).run();
}

}  // namespace pypto::cpu
