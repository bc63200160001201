// Fusion pass (see fuse.h): decides the groups; tile_ops (tile_fused.cpp) emits their nests.
#include "passes/fuse.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "ir/mutator.h"
#include "passes/fusion_group.h"
#include "passes/nest.h"
#include "passes/pass_util.h"

namespace pypto::passes {
using namespace ir;
using namespace fusion;

namespace {

// A matmul whose right operand has more elements than this forms its own nest (with an
// epilogue) instead of joining a row group, where the operand would be reloaded per row tile.
constexpr int64_t kSmallRightOperand = 256 * 1024;
// A product that tiling would make one MMATMUL, with a right operand of more elements than this,
// stays alone (its epilogue in a pass of its own): a row group repacks the operand for every row
// tile, the packed GEMM once (fused_linear 512^3 on Zen 3: 6.1 ms as a row group, 2.8 alone).
constexpr int64_t kPackedOnceRightOperand = 64 * 1024;

std::string lower_case(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The fusion-list name of an instruction: the name of the pypto op that makes it.
std::string op_name(Opcode c) {
  switch (c) {
    case Opcode::TMAX:
      return "maximum";
    case Opcode::TMIN:
      return "minimum";
    case Opcode::TRECIP:
      return "reciprocal";
    case Opcode::TSEL:
      return "where";
    case Opcode::TCVT:
      return "cast";
    case Opcode::TMOV:
      return "copy";
    case Opcode::TEXPANDS:
      return "full";
    case Opcode::TROWSUM:
      return "sum";
    case Opcode::TROWMAX:
      return "max";
    case Opcode::TROWMIN:
      return "min";
    case Opcode::TGELU_TANH:
      return "gelu";
    case Opcode::TREM:
      return "mod";
    default:
      break;
  }
  std::string n = lower_case(opcode_name(c).substr(1));  // TADD -> add, TCMP_LT -> cmp_lt
  return n.rfind("cmp_", 0) == 0 ? n.substr(4) : n;
}

std::string upper_case(const std::string& s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// lower_composites labels each expansion with its op's name ("softmax" for SOFTMAX).
bool is_composite_label(const std::string& label) {
  auto code = parse_opcode(upper_case(label));
  return code && opcode_info(*code).category == OpCategory::Composite && label == lower_case(label);
}

// Tiles compute in f32, so a conversion to a 16-bit float would not round inside a group: it
// stays unfused, and its store rounds the value as the program says.
bool narrowing(const Op& op) {
  if (op.code != Opcode::TCVT) return false;
  DType t = std::get<View>(op.args[0]).buf->dtype;
  return t == DType::F16 || t == DType::BF16;
}

bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  if (s.size() > d.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t a = s[s.size() - 1 - i], b = d[d.size() - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

// Where a statement of a block came from: the expansion of a composite op or a public op call
// (`call`: a label of Builder::begin_group that is no composite op's name), with its instance and name; or
// the program itself (instance -1).
struct Origin {
  int instance = -1;
  std::string name;
  bool call = false;
};

class Fuser : public StmtMutator {
 public:
  Fuser(const FusionOptions& o, const TileSizes& sizes) : o_(o), sizes_(sizes) {}

  // Opens up composite expansions, then groups runs of consecutive tensor-level instructions;
  // loops and branches are rebuilt around their own blocks.
  std::vector<Stmt> mutate_block(const std::vector<Stmt>& body) override {
    std::vector<Stmt> in;
    std::vector<Origin> origin;
    calls_.clear();
    for (const Stmt& s : body) open(s, Origin{}, in, origin);
    const std::vector<Call> calls = std::move(calls_);
    if (o_.mode == FusionOptions::Listed) list_calls(in, origin);
    const std::set<size_t> attention = o_.mode == FusionOptions::Listed && !o_.kinds.count("matmul")
                                           ? attention_chains(in, origin)
                                           : std::set<size_t>{};
    std::vector<Stmt> out;
    std::vector<size_t> from;  // out[k] holds in[from[k] .. from[k + 1])
    std::set<const Buffer*> allocs;
    for (size_t i = 0; i < in.size(); ++i) {
      const Stmt& s = in[i];
      from.push_back(i);
      if (s->kind == StmtKind::Alloc) {
        allocs.insert(s->buffer.get());
      } else if (s->kind == StmtKind::OpStmt && is_tensor_level(s->op)) {
        Group g;
        size_t end = 0;
        if (grow(in, origin, attention, i, allocs, g, end) && g.ops.size() >= 2) {
          auto group = seq(std::vector<Stmt>(in.begin() + long(i), in.begin() + long(end)));
          group->var = g.epilogue ? kFusedEpilogue : kFusedRows;
          out.push_back(group);
          i = end - 1;
          continue;
        }
      }
      out.push_back(mutate(s));
    }
    from.push_back(in.size());
    return label_calls(std::move(out), from, calls);
  }

 private:
  FusionOptions o_;
  TileSizes sizes_;
  int instances_ = 0;

  std::set<int> listed_calls_;  // Listed: the calls every fusible instruction of which is listed

  // An outermost public op call opened into a block: its label and its statements in[first, end).
  struct Call {
    std::string name;
    size_t first, end;
  };
  std::vector<Call> calls_;  // those of the block being opened

  // The call labels put back: the statements of `out` that hold exactly one call's statements
  // (fused among themselves, or not at all) become `seq NAME { ... }` again, so the tile-level
  // text says which op each nest came from. A call whose statements fused with others' stays open.
  static std::vector<Stmt> label_calls(std::vector<Stmt> out, const std::vector<size_t>& from,
                                       const std::vector<Call>& calls) {
    if (calls.empty()) return out;
    std::vector<Stmt> labelled;
    size_t next = 0;  // the first call that may start at or after out[k]
    for (size_t k = 0; k < out.size();) {
      while (next < calls.size() && calls[next].first < from[k]) ++next;
      if (next < calls.size() && calls[next].first == from[k]) {
        size_t j = k;
        while (j < out.size() && from[j + 1] <= calls[next].end) ++j;
        if (j > k && from[j] == calls[next].end) {
          Stmt s = seq(std::vector<Stmt>(out.begin() + long(k), out.begin() + long(j)));
          s->var = calls[next].name;
          labelled.push_back(std::move(s));
          k = j;
          continue;
        }
      }
      labelled.push_back(std::move(out[k++]));
    }
    return labelled;
  }

  Stmt mutate_op(const Stmt& s) override { return s; }

  // Appends s to `in`, a labelled group (composite expansion or public op call) opened up, its
  // statements taking the outermost group's origin. A matmul in a call keeps no origin: it fuses
  // as it would outside (a call does not make a matmul take its neighbours as an epilogue).
  void open(const Stmt& s, const Origin& outer, std::vector<Stmt>& in, std::vector<Origin>& origin) {
    if (s->kind == StmtKind::Seq && !s->var.empty() && !is_group(s)) {
      Origin o = outer;
      if (o.instance < 0) o = Origin{++instances_, s->var, !is_composite_label(s->var)};
      const size_t first = in.size();
      for (const Stmt& t : s->body) open(t, o, in, origin);
      if (outer.instance < 0 && o.call) calls_.push_back(Call{s->var, first, in.size()});
      return;
    }
    const bool call_matmul = outer.call && s->kind == StmtKind::OpStmt && kind_of(s->op.code) == Kind::Matmul;
    in.push_back(s);
    origin.push_back(call_matmul ? Origin{} : outer);
  }

  // A public op call joins its neighbours under a fusion list when every instruction of it that
  // can fuse at all is of a listed kind; otherwise it fuses only within itself, like a composite.
  void list_calls(const std::vector<Stmt>& in, const std::vector<Origin>& origin) {
    std::set<int> unlisted;
    for (size_t j = 0; j < in.size(); ++j) {
      if (!origin[j].call) continue;
      listed_calls_.insert(origin[j].instance);
      if (in[j]->kind == StmtKind::OpStmt && kind_of(in[j]->op.code) != Kind::Other &&
          !o_.kinds.count(op_name(in[j]->op.code)))
        unlisted.insert(origin[j].instance);
    }
    for (int i : unlisted) listed_calls_.erase(i);
  }

  // Under a list without "matmul" (the default), the two products of an attention chain still
  // fuse with it: scores = A B with a small B, listed instructions including a softmax, then the
  // chain's result times a small right operand. Fused, the scores never reach memory (a Llama
  // block's 12 x 512 x 512 scores: three passes over 12 MiB); the rows then need both right
  // operands in tiles, which is why only small ones qualify (fits() checks the same bound).
  std::set<size_t> attention_chains(const std::vector<Stmt>& in, const std::vector<Origin>& origin) const {
    std::set<size_t> found;
    auto small_product = [&](const Stmt& s) {
      return s->kind == StmtKind::OpStmt && is_tensor_level(s->op) && kind_of(s->op.code) == Kind::Matmul &&
             !packed_once(s->op) && right_operand_elems(std::get<View>(s->op.args[2])) <= kSmallRightOperand;
    };
    for (size_t i = 0; i < in.size(); ++i) {
      if (!small_product(in[i])) continue;
      const Buffer* last = dst(in[i]->op).buf.get();  // the value the chain carries
      bool softmax = false;
      for (size_t j = i + 1; j < in.size(); ++j) {
        const Stmt& s = in[j];
        if (s->kind == StmtKind::Alloc) continue;
        if (s->kind != StmtKind::OpStmt || !is_tensor_level(s->op)) break;
        if (small_product(s)) {
          if (softmax && std::get<View>(s->op.args[1]).buf.get() == last) found.insert({i, j});
          break;
        }
        if (group_key(in, origin, {}, j) != 0) break;
        softmax = softmax || (origin[j].instance >= 0 && origin[j].name == "softmax");
        last = dst(s->op).buf.get();
      }
    }
    return found;
  }

  // Which instructions may share a group: those with equal keys. `attention`: the products of the
  // block's attention chains, which count as listed.
  int64_t group_key(const std::vector<Stmt>& in, const std::vector<Origin>& origin,
                    const std::set<size_t>& attention, size_t j) const {
    const Origin& o = origin[j];
    if (o_.mode == FusionOptions::Off) return -1 - int64_t(j);
    if (o_.mode == FusionOptions::Full) return 0;
    if (o.call)
      return o_.mode == FusionOptions::Listed && listed_calls_.count(o.instance) ? 0 : 1 + o.instance;
    std::string name = o.instance >= 0 ? o.name : op_name(in[j]->op.code);
    if (o_.mode == FusionOptions::Listed && (o_.kinds.count(name) || attention.count(j))) return 0;
    return o.instance >= 0 ? 1 + o.instance : -1 - int64_t(j);
  }

  // A row group holds whole rows in one tile. Over a dynamic row width (ir.h) that tile has a
  // fixed width, run under a guard on the width with the unfused nests as the fallback
  // (tile_fused.cpp): every dynamic width of the group must be the same extent. Static widths
  // may join it through a matmul (scores over a dynamic key length, times V: attention).
  static bool dynamic_row_ok(const Op& op, Expr& w) {
    bool static_wide = false;
    return row_widths(op, w, static_wide);
  }

  // A matmul's right operand as a guarded row group holds it: a dynamic dim is the guard's width.
  int64_t right_operand_elems(const View& b) const {
    auto bs = b.shape();
    auto capped = [&](int64_t n) { return n == kDynamicBound ? sizes_.dyn_row_cols() : n; };
    return capped(bs[bs.size() - 1]) * capped(bs[bs.size() - 2]);
  }

  bool packed_once(const Op& mm) const {
    return memory_matmul(mm, sizes_) &&
           right_operand_elems(std::get<View>(mm.args[2])) > kPackedOnceRightOperand;
  }

  static bool dynamic_row(const Op& op) {
    for (auto& a : op.args)
      if (auto v = std::get_if<View>(&a))
        if (v->rank() > 0 && v->shape().back() == kDynamicBound) return true;
    return false;
  }

  bool grow(const std::vector<Stmt>& in, const std::vector<Origin>& origin, const std::set<size_t>& attention,
            size_t i, const std::set<const Buffer*>& allocs, Group& g, size_t& end) {
    const Op& first = in[i]->op;
    if (kind_of(first.code) == Kind::Other || narrowing(first) || column_reduction(first)) return false;
    Expr w;
    if (!dynamic_row_ok(first, w)) return false;
    auto rs = row_space(dst(first));
    if (!rs) return false;
    if (kind_of(first.code) == Kind::Matmul) {
      if (rs->rank < 2) return false;
      g.epilogue = right_operand_elems(std::get<View>(first.args[2])) > kSmallRightOperand;
      if (g.epilogue && w) return false;  // an epilogue nest has no guard for a dynamic width
      // A product that tiling makes one MMATMUL, with a large right operand (every epilogue
      // product's is), stays alone: the packed whole-matrix GEMM and a separate pass of its
      // epilogue over the result beat a tiled matmul with the epilogue fused.
      if (packed_once(first)) return false;
    }
    int64_t k = group_key(in, origin, attention, i);
    g.rs = *rs;
    end = i + 1;
    DeclaredTemps declared{allocs, {}};
    add(g, first, declared);
    for (size_t j = i + 1; j < in.size(); ++j) {
      const Stmt& s = in[j];
      if (s->kind == StmtKind::Alloc && s->buffer->space == Space::Global) {
        declared.inside.insert(s->buffer.get());
        continue;
      }
      if (s->kind != StmtKind::OpStmt || !is_tensor_level(s->op) ||
          group_key(in, origin, attention, j) != k || !fits(g, s->op))
        break;
      add(g, s->op, declared);
      end = j + 1;
    }
    return true;
  }

  // A column sum of the group's rows (the weight gradients of a norm's backward) joins the group
  // at its end: the nest accumulates it from the row tiles it has in hand instead of a second
  // pass over memory. Its source is a row-space value of the group (a whole temporary the group
  // makes, or a whole external tensor); nothing but other column sums may follow it.
  static bool column_sum_fits(const Group& g, const Op& op, const ColumnReduction& cr) {
    if (op.code != Opcode::TROWSUM || !is_float(dst(op).buf->dtype) || !is_float(cr.src.buf->dtype) ||
        g.epilogue || g.width || g.rs.rank != 2 || cr.axis != 0 || cr.src.rank() != 2)
      return false;
    if (cr.src.shape()[0] != g.rs.rows || !expr_equal(cr.src.valid_shape()[0], g.rs.rows_valid)) return false;
    const Buffer* b = cr.src.buf.get();
    for (int d = 0; d < b->rank(); ++d) {
      auto o = as_int(cr.src.offset[size_t(d)]);
      if (!o || *o != 0 || cr.src.size[size_t(d)] != b->shape[size_t(d)] || cr.src.step[size_t(d)] != 1)
        return false;
    }
    if (!g.produced.count(b) && g.written.count(b)) return false;
    const Buffer* out = dst(op).buf.get();
    return !g.produced.count(out) && !g.read.count(out) && !g.written.count(out);
  }

  bool fits(const Group& g, const Op& op) const {
    Kind k = kind_of(op.code);
    if (auto cr = column_reduction(op)) return column_sum_fits(g, op, *cr);
    if (k == Kind::Other || narrowing(op) || g.column_sums) return false;
    // A second whole-matrix product does not join a row group that has one: the nest would reload
    // both right operands for every row tile (a Linear's backward, dx = dy W^T beside dW = x^T dy,
    // at 512^3: 19 ms on Zen 3), where two packed GEMMs read each operand once.
    if (k == Kind::Matmul && packed_once(op)) return false;
    if (k == Kind::Matmul && memory_matmul(op, sizes_))
      for (const Op* o : g.ops)
        if (kind_of(o->code) == Kind::Matmul) return false;
    if (g.epilogue && (dynamic_row(op) || dynamic_row(*g.ops[0])) &&
        (k != Kind::Elementwise || dst(op).shape() != dst(*g.ops[0]).shape()))
      return false;  // an epilogue over a dynamic width: only while every instruction covers the same shape
    if (!g.epilogue) {
      Expr w = g.width;
      if (!dynamic_row_ok(op, w)) return false;
      if (w && !g.width)  // the group becomes one over a dynamic width: so far every view was 1 wide
        for (const Op* o : g.ops)
          if (!dynamic_row_ok(*o, w)) return false;
    }
    const View& d = dst(op);
    auto ds = d.shape();
    if (g.epilogue) {
      const View& d0 = dst(*g.ops[0]);
      if (k != Kind::Elementwise || ds != d0.shape()) return false;
      auto a = d.valid_shape(), b = d0.valid_shape();
      for (size_t i = 0; i < a.size(); ++i)
        if (!expr_equal(a[i], b[i])) return false;
    } else {
      auto rs = row_space(d);
      if (!rs || !same(*rs, g.rs)) return false;
    }
    auto external_ok = [&](const View& v, bool writing) {
      auto w = g.written.find(v.buf.get());
      if (w != g.written.end() && w->second != key(v)) return false;
      if (writing) {
        auto r = g.read.find(v.buf.get());
        if (r != g.read.end() && (r->second.size() > 1 || !r->second.count(key(v)))) return false;
      }
      return true;
    };
    if (g.produced.count(d.buf.get()) ? !covers_buffer(d) : !external_ok(d, true)) return false;
    for (size_t i = 1; i < op.args.size(); ++i) {
      auto v = std::get_if<View>(&op.args[i]);
      if (!v) continue;
      bool mine = g.produced.count(v->buf.get()) > 0;
      if (mine && !covers_buffer(*v)) return false;
      if (!mine && !external_ok(*v, false)) return false;
      auto vs = v->shape();
      if (k == Kind::Elementwise && !broadcasts_to(vs, ds)) return false;
      if (k == Kind::Reduce &&
          std::vector<int64_t>(vs.begin(), vs.end() - 1) != std::vector<int64_t>(ds.begin(), ds.end() - 1))
        return false;
      if (k == Kind::Matmul) {
        if (vs.size() < 2) return false;
        if (i == 1 && vs[vs.size() - 2] != ds[ds.size() - 2]) return false;
        if (i == 2 && (mine || right_operand_elems(*v) > kSmallRightOperand)) return false;
      }
    }
    return true;
  }
};

}  // namespace

const std::vector<std::string>& fusion_names() {
  static const std::vector<std::string> names = [] {
    std::set<std::string> s;
#define PYPTO_X(name, cat, n) \
  if (kind_of(Opcode::name) != Kind::Other) s.insert(op_name(Opcode::name));
    PYPTO_OPCODES(PYPTO_X)
#undef PYPTO_X
#define PYPTO_X(name, cat, n) s.insert(lower_case(#name));
    PYPTO_COMPOSITES(PYPTO_X)
#undef PYPTO_X
    return std::vector<std::string>(s.begin(), s.end());
  }();
  return names;
}

Program fuse(const Program& p, const FusionOptions& options, const TileSizes& sizes) {
  for (const std::string& k : options.kinds)
    if (!std::binary_search(fusion_names().begin(), fusion_names().end(), k)) {
      std::string known;
      for (const std::string& n : fusion_names()) known += (known.empty() ? "" : ", ") + n;
      throw Error("fusion: unknown kind of op '" + k + "' (known: " + known + ")");
    }
  return Fuser(options, sizes).mutate_program(p);
}

}  // namespace pypto::passes
