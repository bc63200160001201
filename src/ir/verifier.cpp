// The IR verifier: walks a program with a scope of declared names and throws Error naming the
// first violation and the statement it is in. What it checks is listed in verifier.h; the
// details that matter to pass authors:
//  * one namespace: buffers, scalar params, loop vars and lets all need distinct names;
//  * a view's buffer must be declared (param or alloc in scope) with the same fields;
//  * a view's valid region is checked against its buffer only where offsets and valid extents
//    are constants (a window may hang past the edge of its buffer; its valid region may not);
//  * tensor-level instructions may mix dtypes (they convert implicitly, as the builder emits
//    them); at tile level elementwise, reduce, expand and layout ops need view sources of the
//    destination's dtype (TCVT / TLOAD / TSTORE convert; TNOT / TAND / TOR / compares may write
//    bool; compares need equal source dtypes; matmul operands agree with each other, TDWCONV's
//    source and destination too);
//  * gather/scatter indices, TARGSORT's and TROWARGMAX / TROWARGMIN's results are i32 or i64.
#include "ir/verifier.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/printer.h"
#include "ir/visitor.h"

namespace pypto::ir {

namespace {

// Operand kinds per opcode: 'v' a view, 's' a scalar expression, 'e' either.
const char* operand_kinds(Opcode op) {
  switch (opcode_info(op).category) {
    case OpCategory::Memory:
      return op == Opcode::TPREFETCH                              ? "v"
             : op == Opcode::MMATMUL || op == Opcode::MMATMUL_ACC ? "vvv"
                                                                  : "vv";
    case OpCategory::Fill:
      return "vs";
    case OpCategory::Binary:
    case OpCategory::Compare:
      return "vee";
    case OpCategory::Select:
      return "vvee";
    case OpCategory::Sync:
      return "sss";
    default:
      break;
  }
  switch (op) {
    case Opcode::SOFTMAX:
    case Opcode::LOG_SOFTMAX:
      return "vvs";
    case Opcode::LAYER_NORM:
      return "vveess";
    case Opcode::RMS_NORM:
      return "vvess";
    case Opcode::CONV2D:
      return "vvvessssssss";
    case Opcode::TDWCONV:
      return "vvvssssssss";
    case Opcode::CONCAT:
      return "vs";  // then the tensors joined
    case Opcode::CLAMP:
      return "vvee";
    case Opcode::HARDTANH:
      return "vvss";
    case Opcode::TEXTRACT:
    case Opcode::TINSERT:
      return "vvss";
    case Opcode::TFILLPAD:
    case Opcode::TARGSORT:
    case Opcode::TSCAN:
      return "vvs";
    default:
      return "vvvv";  // remaining categories take views only (counts come from the table)
  }
}

bool is_local(const View& v) { return v.buf && v.buf->space != Space::Global; }

class Verifier : public StmtVisitor {
 public:
  explicit Verifier(Level level) : level_(level) {}

  void program(const Program& p) {
    where_ = "program @" + p.name;
    scopes_.emplace_back();
    for (const auto& b : p.params) {
      if (!b) fail("null parameter buffer");
      if (b->kind == BufferKind::Temp) fail("parameter %" + b->name + " has kind temp");
      if (b->space != Space::Global) fail("parameter %" + b->name + " is not in global memory");
      declare_buffer(b);
    }
    for (const auto& s : p.scalars) {
      if (s.dtype != DType::I64 && s.dtype != DType::I32 && s.dtype != DType::F32 && s.dtype != DType::F64)
        fail("scalar parameter %" + s.name + " has dtype " + std::string(dtype_name(s.dtype)) +
             " (i64, i32, f32 or f64 expected)");
      declare_var(s.name, s.dtype);
    }
    dim_symbols(p);
    for (const auto& b : p.params) dynamic_dims(*b);
    block(p.body);
  }

 private:
  struct Scope {
    std::map<std::string, DType> vars;
    std::map<std::string, BufferRef> buffers;
  };

  // Dimension symbols follow the caller's scalars; each names a dynamic dim of a param whose
  // extent is exactly the symbol. Symbols range over [0, kDynamicBound] for bounds analysis.
  void dim_symbols(const Program& p) {
    for (size_t j = p.caller_scalars(); j < p.scalars.size(); ++j) {
      const ScalarParam& s = p.scalars[j];
      if (s.dtype != DType::I64) fail("dimension symbol %" + s.name + " must be i64");
      if (size_t(s.param) >= p.params.size() || s.dim < 0 || s.dim >= p.params[size_t(s.param)]->rank())
        fail("dimension symbol %" + s.name + " names no parameter dimension");
      const Buffer& b = *p.params[size_t(s.param)];
      if (!b.is_dynamic(s.dim) || !expr_equal(b.dyn[size_t(s.dim)], var(s.name)))
        fail("dimension symbol %" + s.name + " is not the extent of dim " + std::to_string(s.dim) + " of %" +
             b.name);
      loop_bounds_[s.name] = Interval{0, kDynamicBound};
      dim_symbols_.insert(s.name);
    }
  }
  void dynamic_dims(const Buffer& b) {
    if (!b.is_dynamic()) return;
    if (b.dyn.size() != b.shape.size()) fail("buffer %" + b.name + " needs a dynamic extent slot per dim");
    for (int d = 0; d < b.rank(); ++d) {
      if (!b.is_dynamic(d)) continue;
      index_expr(b.dyn[size_t(d)], "dynamic extent");
      // An extent is a function of the dimension symbols alone: the runtime binds nothing else
      // before it sizes the buffers, and one of constants only is a static dim written oddly
      // (unchecked, it once let the CPU backend read past the caller's array).
      std::vector<std::string> vars;
      collect_vars(b.dyn[size_t(d)], vars);
      const std::string dim_text =
          "dynamic dim " + std::to_string(d) + " of %" + b.name + " (`" + to_string(b.dyn[size_t(d)]) + "`)";
      if (vars.empty()) fail(dim_text + " names no dimension symbol; write a constant extent as an integer");
      for (const auto& v : vars)
        if (!dim_symbols_.count(v))
          fail(dim_text + " names %" + v +
               ", which is not a dimension symbol (the extent of a dim of a "
               "parameter, bound from the argument's shape)");
      if (b.shape[size_t(d)] != kDynamicBound)
        fail("dynamic dim " + std::to_string(d) + " of %" + b.name + " must have the static bound " +
             std::to_string(kDynamicBound));
      if (b.space != Space::Global) fail("local tile %" + b.name + " has a dynamic dim");
    }
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("verify: " + msg + " (in " + where_ + ")");
  }

  void claim_name(const std::string& n) {
    if (n.empty()) fail("empty name");
    if (!names_.insert(n).second) fail("name %" + n + " is defined twice");
  }
  void declare_var(const std::string& n, DType t) {
    claim_name(n);
    scopes_.back().vars[n] = t;
  }
  void declare_buffer(const BufferRef& b) {
    claim_name(b->name);
    for (int64_t d : b->shape)
      if (d < 0) fail("buffer %" + b->name + " has a negative dimension");
    scopes_.back().buffers[b->name] = b;
  }
  // A local tile holds 1 to 2^30 elements (what the CPU backend allocates; the interpreter would
  // otherwise run a 0-row tile that the CPU backend refuses).
  void local_tile_size(const Buffer& b) {
    int64_t n = 1;
    for (int64_t d : b.shape) {
      if (d == 0) fail("local tile %" + b.name + " has an empty dimension (tiles hold 1 to 2^30 elements)");
      n = d > (int64_t(1) << 30) ? d : n * d;
      if (n > (int64_t(1) << 30)) fail("local tile %" + b.name + " has more than 2^30 elements");
    }
  }
  const DType* find_var(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->vars.find(n); f != it->vars.end()) return &f->second;
    return nullptr;
  }
  BufferRef find_buffer(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->buffers.find(n); f != it->buffers.end()) return f->second;
    return nullptr;
  }

  // ---- expressions ------------------------------------------------------------------------------
  void expr(const Expr& e, const char* what) {
    if (!e) fail(std::string("missing expression (") + what + ")");
    if (e->op == ExprOp::Var) {
      const DType* t = find_var(e->name);
      if (!t)
        fail("variable %" + e->name + " used outside its scope or before its definition (" + what + ")");
      if (*t != e->dtype)
        fail("variable %" + e->name + " is used as " + std::string(dtype_name(e->dtype)) + " but declared " +
             std::string(dtype_name(*t)));
    }
    for (const auto& a : e->args) expr(a, what);
  }
  void index_expr(const Expr& e, const char* what) {
    expr(e, what);
    if (is_float(e->dtype)) fail(std::string(what) + " `" + to_string(e) + "` is not an integer");
  }

  // ---- views ------------------------------------------------------------------------------------
  void view(const View& v, int k) {
    std::string which = "operand " + std::to_string(k);
    if (!v.buf) fail(which + ": view without a buffer");
    BufferRef decl = find_buffer(v.buf->name);
    if (!decl) fail(which + ": buffer %" + v.buf->name + " used outside its scope or before its allocation");
    if (decl != v.buf && (decl->dtype != v.buf->dtype || decl->shape != v.buf->shape ||
                          decl->space != v.buf->space || decl->kind != v.buf->kind))
      fail(which + ": view of %" + v.buf->name + " does not match the buffer's declaration");
    const Buffer& b = *v.buf;
    size_t r = b.shape.size();
    if (v.offset.size() != r || v.size.size() != r || v.step.size() != r || v.valid.size() != r)
      fail(which + ": view of %" + b.name + " needs offset/size/step/valid for each of its " +
           std::to_string(r) + " dims");
    std::vector<bool> seen(r, false);
    for (int d : v.dims) {
      if (d < 0 || size_t(d) >= r)
        fail(which + ": view dim " + std::to_string(d) + " out of range for %" + b.name);
      if (seen[size_t(d)]) fail(which + ": view dim " + std::to_string(d) + " listed twice");
      seen[size_t(d)] = true;
    }
    for (size_t d = 0; d < r; ++d) {
      index_expr(v.offset[d], "view offset");
      index_expr(v.valid[d], "view valid extent");
      if (v.size[d] < 0) fail(which + ": negative view size");
      if (v.step[d] < 1) fail(which + ": view step must be >= 1");
      if (!seen[d] && v.size[d] != 1)
        fail(which + ": indexed dim " + std::to_string(d) + " must have size 1");
      auto off = as_int(v.offset[d]);
      auto val = as_int(v.valid[d]);
      if (val && (*val < 0 || *val > v.size[d]))
        fail(which + ": valid extent " + std::to_string(*val) + " outside 0.." + std::to_string(v.size[d]));
      // A valid extent is at most the view's size (docs/isa.md §4): one that exceeds it for some
      // value of the enclosing loop variables is an error, not something to clamp silently.
      if (!val)
        if (auto vb = bounds(v.valid[d], loop_bounds_); vb && vb->hi > v.size[d])
          fail(which + ": valid extent `" + to_string(v.valid[d]) + "` can reach " + std::to_string(vb->hi) +
               ", more than the view's size " + std::to_string(v.size[d]) + " in dim " + std::to_string(d));
      if (off && *off < 0) fail(which + ": negative offset in dim " + std::to_string(d) + " of %" + b.name);
      if (off && val && *val > 0 && __int128(*off) + __int128(*val - 1) * v.step[d] >= b.shape[d])
        fail(which + ": valid region [" + std::to_string(*off) + ", " +
             std::to_string(
                 int64_t(std::min<__int128>(__int128(*off) + __int128(*val - 1) * v.step[d], INT64_MAX))) +
             "] outside dim " + std::to_string(d) + " of %" + b.name + " (size " +
             std::to_string(b.shape[d]) + ")");
    }
  }

  // ---- instructions -----------------------------------------------------------------------------
  void op(const Op& o) {
    const OpcodeInfo& info = opcode_info(o.code);
    if (info.num_operands >= 0 && int(o.args.size()) != info.num_operands)
      fail(std::string(info.name) + " takes " + std::to_string(info.num_operands) + " operands, got " +
           std::to_string(o.args.size()));
    const char* kinds = operand_kinds(o.code);
    for (size_t k = 0; k < o.args.size(); ++k) {
      char want = k < std::char_traits<char>::length(kinds) ? kinds[k] : o.code == Opcode::CONCAT ? 'v' : 'e';
      if (const View* v = std::get_if<View>(&o.args[k])) {
        if (want == 's') fail("operand " + std::to_string(k) + " must be a scalar");
        view(*v, int(k));
      } else {
        if (want == 'v') fail("operand " + std::to_string(k) + " must be a view");
        expr(std::get<Expr>(o.args[k]), "scalar operand");
        if (info.category == OpCategory::Sync && is_float(std::get<Expr>(o.args[k])->dtype))
          fail("sync operands are integers");
      }
    }
    if (info.category == OpCategory::Gather || o.code == Opcode::MGATHER || o.code == Opcode::MSCATTER ||
        o.code == Opcode::MSCATTER_ADD)
      if (const View* idx = as_view(o, 2);
          idx && idx->buf->dtype != DType::I32 && idx->buf->dtype != DType::I64)
        fail("gather/scatter index must be i32 or i64");
    if (level_ == Level::Tile) {
      dtypes(o);
      tile_rules(o);
    }
  }

  static const View* as_view(const Op& o, size_t k) {
    return k < o.args.size() ? std::get_if<View>(&o.args[k]) : nullptr;
  }

  // Tile level: the lowering has converted every operand to the type the instruction computes in
  // (tensor-level instructions convert implicitly, NumPy style, so no such rule applies there).
  void dtypes(const Op& o) {
    const View* dst = as_view(o, 0);
    if (!dst) return;
    DType t = dst->buf->dtype;
    auto src = [&](size_t k) -> const View* { return as_view(o, k); };
    auto same = [&](size_t k, DType want, const char* what) {
      if (const View* v = src(k); v && v->buf->dtype != want)
        fail("operand " + std::to_string(k) + " is " + std::string(dtype_name(v->buf->dtype)) + ", " + what +
             " is " + std::string(dtype_name(want)));
    };
    switch (opcode_info(o.code).category) {
      case OpCategory::Unary:
        if (o.code != Opcode::TNOT) same(1, t, "the destination");  // TNOT may write a bool mask
        break;
      case OpCategory::Binary:
        if (o.code == Opcode::TAND || o.code == Opcode::TOR) break;  // logic on 0/1 of any type
        [[fallthrough]];
      case OpCategory::Reduce:
        if (is_arg_reduction(o.code)) {  // indices of a source of any dtype
          if (t != DType::I32 && t != DType::I64)
            fail(std::string(opcode_name(o.code)) + " writes i32 or i64 indices, not " +
                 std::string(dtype_name(t)));
          break;
        }
        [[fallthrough]];
      case OpCategory::Expand:
        for (size_t k = 1; k < o.args.size(); ++k) same(k, t, "the destination");
        break;
      case OpCategory::Compare:
        if (src(1) && src(2)) same(2, src(1)->buf->dtype, "operand 1");
        break;
      case OpCategory::Select:
        for (size_t k = 2; k < o.args.size(); ++k) same(k, t, "the destination");
        break;
      case OpCategory::Matrix:
        if (src(1) && src(2)) same(2, src(1)->buf->dtype, "operand 1");
        if (o.code == Opcode::TMATMUL_BIAS) same(3, t, "the destination");
        if (o.code == Opcode::TDWCONV) same(1, t, "the destination");
        break;
      case OpCategory::Layout:
        same(1, t, "the destination");
        break;
      case OpCategory::Gather:
        if (o.code == Opcode::TARGSORT) {  // indices (i32/i64) of a source of any dtype
          if (t != DType::I32 && t != DType::I64)
            fail("TARGSORT writes i32 or i64 indices, not " + std::string(dtype_name(t)));
          break;
        }
        same(1, t, "the destination");
        break;
      default:
        break;
    }
  }

  // Tile level: the ISA proper.
  void tile_rules(const Op& o) {
    const OpcodeInfo& info = opcode_info(o.code);
    auto global_view = [&](size_t k) {
      const View* v = as_view(o, k);
      if (!v || is_local(*v))
        fail("operand " + std::to_string(k) + " of " + std::string(info.name) +
             " must be a global view (a copy between local tiles is TMOV)");
      if (v->rank() > 2)
        fail("operand " + std::to_string(k) + ": global views of a tile instruction have rank <= 2");
    };
    auto tile = [&](size_t k) {
      const View* v = as_view(o, k);
      if (!v) return;
      if (!is_local(*v))
        fail("operand " + std::to_string(k) + " of " + std::string(info.name) +
             " must be a local tile (vec/mat/acc), not %" + v->buf->name + " in gm");
      if (v->buf->rank() != 2) fail("operand " + std::to_string(k) + ": tiles have rank 2");
      if (!v->is_whole())
        fail("operand " + std::to_string(k) + ": compute instructions take whole tiles, not " + print(*v));
    };
    if (info.category == OpCategory::Sync) return;
    if (info.category == OpCategory::Composite)
      fail(std::string(info.name) + " is a composite op of the tensor level (lower_composites expands it)");
    if (o.code == Opcode::TPREFETCH) return global_view(0);
    if (o.code == Opcode::TLOAD) {
      tile(0);
      global_view(1);
      return;
    }
    if (o.code == Opcode::TSTORE) {
      global_view(0);
      tile(1);
      return;
    }
    if (o.code == Opcode::MMATMUL || o.code == Opcode::MMATMUL_ACC) {
      for (size_t k = 0; k < 3; ++k) global_view(k);
      // f32 x f32 -> f32, bf16 x bf16 -> f32 / bf16, or i8 x i8 -> i32 (docs/isa.md).
      const DType dt = as_view(o, 0)->buf->dtype, at = as_view(o, 1)->buf->dtype,
                  bt = as_view(o, 2)->buf->dtype;
      const bool bf16 = at == DType::BF16 && bt == DType::BF16 && (dt == DType::F32 || dt == DType::BF16);
      const bool i8 = at == DType::I8 && bt == DType::I8 && dt == DType::I32;
      if (!bf16 && !i8)
        for (size_t k = 0; k < 3; ++k)
          if (as_view(o, k)->buf->dtype != DType::F32)
            fail(std::string(info.name) + ": operand " + std::to_string(k) +
                 " must be f32 (or the operands bf16 and the destination f32 or bf16, or the operands i8 and "
                 "the destination i32), got " +
                 std::string(dtype_name(as_view(o, k)->buf->dtype)));
      auto d = as_view(o, 0)->shape(), a = as_view(o, 1)->shape(), b = as_view(o, 2)->shape();
      auto mat = [](const std::vector<int64_t>& s) {
        return s.size() >= 2 ? std::make_pair(s[s.size() - 2], s.back())
                             : std::make_pair(int64_t(1), s.back());
      };
      auto [dm, dn] = mat(d);
      auto [am, ak] = mat(a);
      auto [bk, bn] = mat(b);
      if (ak != bk || dm != am || dn != bn)
        fail(std::string(info.name) + ": shapes must be dst MxN, a MxK, b KxN; got dst " +
             std::to_string(dm) + "x" + std::to_string(dn) + ", a " + std::to_string(am) + "x" +
             std::to_string(ak) + ", b " + std::to_string(bk) + "x" + std::to_string(bn));
      return;
    }
    if (o.code == Opcode::MGATHER || o.code == Opcode::MSCATTER || o.code == Opcode::MSCATTER_ADD) {
      const size_t g = o.code == Opcode::MGATHER ? 1 : 0;
      global_view(g);
      tile(1 - g);
      tile(2);
      auto idx = as_view(o, 2)->buf->shape;
      if (idx[0] != 1 && idx[1] != 1)
        fail(std::string(info.name) + ": the index tile must be 1xN or Nx1, got " + std::to_string(idx[0]) +
             "x" + std::to_string(idx[1]));
      return;
    }
    for (size_t k = 0; k < o.args.size(); ++k) tile(k);
    auto shape = [&](size_t k) { return as_view(o, k)->buf->shape; };
    auto sh = [](const std::vector<int64_t>& s) { return std::to_string(s[0]) + "x" + std::to_string(s[1]); };
    auto want = [&](bool ok, const std::string& msg) {
      if (!ok) fail(std::string(info.name) + ": " + msg);
    };
    switch (info.category) {
      case OpCategory::Matrix: {
        if (o.code == Opcode::TDWCONV) {  // its result's extent is the sources' (run time)
          for (size_t k = 3; k < o.args.size(); ++k)
            if (auto c = as_int(std::get<Expr>(o.args[k])); c && *c < (k < 7 ? 1 : 0))
              fail(std::string(info.name) + ": " +
                   (k < 7 ? "strides and dilations must be at least 1" : "paddings must not be negative") +
                   ", got " + std::to_string(*c));
          break;
        }
        auto d = shape(0), a = shape(1), b = shape(2);
        want(a[1] == b[0] && d[0] == a[0] && d[1] == b[1],
             "shapes must be dst MxN, a MxK, b KxN; got dst " + sh(d) + ", a " + sh(a) + ", b " + sh(b));
        if (o.code == Opcode::TMATMUL_BIAS) {
          auto bias = shape(3);
          want(bias[0] == 1 && bias[1] == d[1],
               "bias must be 1x" + std::to_string(d[1]) + ", got " + sh(bias));
        }
        break;
      }
      case OpCategory::Reduce: {
        auto d = shape(0), s = shape(1);
        bool row = o.code == Opcode::TROWSUM || o.code == Opcode::TROWMAX || o.code == Opcode::TROWMIN ||
                   is_arg_reduction(o.code);
        if (row)
          want(d[0] == s[0] && d[1] == 1,
               "dst must be " + std::to_string(s[0]) + "x1 for src " + sh(s) + ", got " + sh(d));
        else
          want(d[0] == 1 && d[1] == s[1],
               "dst must be 1x" + std::to_string(s[1]) + " for src " + sh(s) + ", got " + sh(d));
        break;
      }
      case OpCategory::Expand: {
        auto d = shape(0), s = shape(1);
        if (o.code == Opcode::TROWEXPAND)
          want(s[1] == 1 && s[0] == d[0], "src must be " + std::to_string(d[0]) + "x1, got " + sh(s));
        else
          want(s[0] == 1 && s[1] == d[1], "src must be 1x" + std::to_string(d[1]) + ", got " + sh(s));
        break;
      }
      default:
        break;
    }
    if (o.code == Opcode::TTRANS) {
      auto d = shape(0), s = shape(1);
      want(d[0] == s[1] && d[1] == s[0], "dst must be the transpose of src " + sh(s) + ", got " + sh(d));
    }
    if (o.code == Opcode::TRESHAPE) {
      auto d = shape(0), s = shape(1);
      want(d[0] * d[1] == s[0] * s[1], "element counts differ: " + sh(d) + " vs " + sh(s));
    }
    if (o.code == Opcode::TSCAN) {
      auto d = shape(0), s = shape(1);
      want(d == s, "dst must have src's shape " + sh(s) + ", got " + sh(d));
    }
    if (o.code == Opcode::TARGSORT) {
      auto d = shape(0), s = shape(1);
      want(d[0] == s[0] && d[1] >= 1 && d[1] <= s[1],
           "dst must have src's rows and at most its columns " + sh(s) + ", got " + sh(d));
    }
    if (o.code == Opcode::TGATHER) {
      auto idx = shape(2);
      want(idx[1] == 1, "index tile must be Rx1, got " + sh(idx));
    }
  }

  // ---- statements -------------------------------------------------------------------------------
  void block(const std::vector<Stmt>& body, const std::string& loop_var = "") {
    scopes_.emplace_back();
    if (!loop_var.empty()) declare_var(loop_var, DType::I64);
    visit_block(body);
    scopes_.pop_back();
  }

  void visit(const Stmt& s) override {
    if (!s) fail("null statement");
    std::string saved = where_;
    StmtVisitor::visit(s);
    where_ = saved;
  }
  void visit_seq(const StmtNode& s) override { visit_block(s.body); }  // a group, not a scope (ir.h)
  void visit_for(const StmtNode& s) override {
    where_ = "for %" + s.var;
    if (s.var.empty()) fail("loop without a variable");
    index_expr(s.lo, "loop start");
    index_expr(s.hi, "loop end");
    index_expr(s.step, "loop step");
    if (auto st = as_int(s.step); st && *st <= 0) fail("loop step must be positive");
    // The loop variable's range, where its bounds are known: a view's valid extent that must
    // exceed its size for some iteration is rejected (see view()).
    const auto lo = bounds(s.lo, loop_bounds_), hi = bounds(s.hi, loop_bounds_);
    const bool known = lo && hi && lo->lo < hi->hi;
    if (known) loop_bounds_[s.var] = Interval{lo->lo, hi->hi - 1};
    block(s.body, s.var);
    if (known) loop_bounds_.erase(s.var);
  }
  void visit_if(const StmtNode& s) override {
    where_ = "if " + to_string(s.cond);
    expr(s.cond, "condition");
    block(s.body);
    block(s.orelse);
  }
  void visit_let(const StmtNode& s) override {
    where_ = "let %" + s.var;
    expr(s.value, "let value");
    declare_var(s.var, s.value->dtype);
  }
  void visit_alloc(const StmtNode& s) override {
    if (!s.buffer) fail("alloc without a buffer");
    where_ = "alloc %" + s.buffer->name;
    if (s.buffer->kind != BufferKind::Temp)
      fail("allocated buffer %" + s.buffer->name + " must have kind temp");
    dynamic_dims(*s.buffer);
    declare_buffer(s.buffer);
    if (level_ == Level::Tile && s.buffer->space != Space::Global && !s.buffer->is_dynamic())
      local_tile_size(*s.buffer);
  }
  void visit_op(const StmtNode& s) override {
    where_ = "`" + print(s.op) + "`";
    op(s.op);
  }

  Level level_;
  std::vector<Scope> scopes_;
  VarBounds loop_bounds_;  // loop variables with known ranges
  std::set<std::string> dim_symbols_;
  std::set<std::string> names_;
  std::string where_;
};

}  // namespace

void verify(const Program& p, Level level) { Verifier(level).program(p); }

}  // namespace pypto::ir
