// The IR's text form (grammar: the comment at the top of parser.cpp). Everything that makes a
// program is printed, so parse(print(p)) is structurally equal to p.
#include "ir/printer.h"

#include <algorithm>

#include "ir/expr_impl.h"
#include "ir/visitor.h"

namespace pypto::ir {

namespace {

std::string name_token(char sigil, const std::string& name) {
  std::string s = detail::var_token(name);
  s[0] = sigil;
  return s;
}

std::string expr_text(const Expr& e) { return to_string(e); }

bool is_int_value(const Expr& e, int64_t v) {
  return e && e->op == ExprOp::Int && e->dtype == DType::I64 && e->ival == v;
}

// A dynamic dim prints as its extent expression (a param's bare `%S` declares the symbol).
std::string shape_text(const Buffer& b) {
  std::string s = "[";
  for (int i = 0; i < b.rank(); ++i) {
    if (i) s += ", ";
    s += b.is_dynamic(i) ? expr_text(b.dyn[size_t(i)]) : std::to_string(b.shape[size_t(i)]);
  }
  return s + "]";
}

// The kind word is printed only where it differs from the default of its place (params are
// inputs, allocations are temps), so ordinary programs read cleanly and odd ones still round-trip.
std::string kind_suffix(BufferKind k, BufferKind dflt) {
  if (k == dflt) return "";
  switch (k) {
    case BufferKind::Param:
      return " in";
    case BufferKind::Output:
      return " out";
    case BufferKind::Temp:
      return " temp";
  }
  return "";
}

std::string buffer_decl(const Buffer& b, bool is_param) {
  std::string s = name_token('%', b.name) + ": " + std::string(dtype_name(b.dtype)) + shape_text(b);
  if (!is_param || b.space != Space::Global) s += " " + std::string(space_name(b.space));
  return s + kind_suffix(b.kind, is_param ? BufferKind::Param : BufferKind::Temp);
}

std::string operand_text(const Operand& o) {
  if (const View* v = std::get_if<View>(&o)) return print(*v);
  return expr_text(std::get<Expr>(o));
}

}  // namespace

std::string print(const View& v) {
  if (!v.buf) return "<null view>";
  std::string s = name_token('%', v.buf->name);
  if (v.is_whole()) return s;
  size_t rank = v.offset.size();
  auto in_dims = [&](size_t d) { return std::find(v.dims.begin(), v.dims.end(), int(d)) != v.dims.end(); };
  std::vector<int> slice_dims;  // dims written in `off:size` form, ascending
  std::string specs;
  for (size_t d = 0; d < rank; ++d) {
    int64_t size = d < v.size.size() ? v.size[d] : 1;
    int64_t step = d < v.step.size() ? v.step[d] : 1;
    Expr valid = d < v.valid.size() ? v.valid[d] : nullptr;
    if (d) specs += ", ";
    specs += expr_text(v.offset[d]);
    // An indexed (dropped) dim is just its offset when its window is the usual 1 x 1.
    if (!in_dims(d) && size == 1 && step == 1 && is_int_value(valid, 1)) continue;
    slice_dims.push_back(int(d));
    specs += ":" + std::to_string(size);
    if (step != 1) specs += " step " + std::to_string(step);
    if (!is_int_value(valid, size)) specs += " valid " + expr_text(valid);
  }
  s += "[" + specs + "]";
  if (v.dims != slice_dims) {
    s += " perm(";
    for (size_t i = 0; i < v.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(v.dims[i]);
    s += ")";
  }
  return s;
}

std::string print(const Op& op) {
  std::string s(opcode_name(op.code));
  for (size_t i = 0; i < op.args.size(); ++i) s += (i ? ", " : " ") + operand_text(op.args[i]);
  return s;
}

namespace {
// Statements append to one string: time stays linear in the text's length however deep the
// nesting (returning a string per level copied every body once per enclosing level).
class StmtPrinter : public StmtVisitor {
 public:
  StmtPrinter(int indent, std::string& out) : indent_(indent), out_(out) {}
  void visit(const Stmt& st) override {
    if (!st) {
      out_ += pad() + "<null stmt>\n";
      return;
    }
    StmtVisitor::visit(st);
  }

 private:
  std::string pad() const { return std::string(size_t(indent_) * 2, ' '); }
  // a body one level deeper
  void nested(const std::vector<Stmt>& body) {
    ++indent_;
    visit_block(body);
    --indent_;
  }
  void visit_seq(const StmtNode& st) override {
    out_ += pad() + (st.var.empty() ? "seq {\n" : "seq " + st.var + " {\n");
    nested(st.body);
    out_ += pad() + "}\n";
  }
  void visit_for(const StmtNode& st) override {
    out_ += pad() + (st.loop_kind == LoopKind::Parallel ? "parallel for " : "for ") +
            name_token('%', st.var) + " = " + expr_text(st.lo) + " to " + expr_text(st.hi);
    if (!is_int_value(st.step, 1)) out_ += " step " + expr_text(st.step);
    out_ += " {\n";
    nested(st.body);
    out_ += pad() + "}\n";
  }
  void visit_if(const StmtNode& st) override {
    out_ += pad() + "if " + expr_text(st.cond) + " {\n";
    nested(st.body);
    if (!st.orelse.empty()) {
      out_ += pad() + "} else {\n";
      nested(st.orelse);
    }
    out_ += pad() + "}\n";
  }
  void visit_let(const StmtNode& st) override {
    out_ += pad() + "let " + name_token('%', st.var) + " = " + expr_text(st.value) + "\n";
  }
  void visit_alloc(const StmtNode& st) override {
    out_ += pad() + "alloc " + (st.buffer ? buffer_decl(*st.buffer, false) : "<null buffer>") + "\n";
  }
  void visit_op(const StmtNode& st) override { out_ += pad() + print(st.op) + "\n"; }

  int indent_;
  std::string& out_;
};
}  // namespace

std::string print(const Stmt& st, int indent) {
  std::string out;
  StmtPrinter(indent, out).visit(st);
  return out;
}

std::string print(const Program& p) {
  std::string out = "func " + name_token('@', p.name) + "(";
  bool first = true;
  for (const auto& b : p.params) {
    out += (first ? "" : ", ") + (b ? buffer_decl(*b, true) : std::string("<null buffer>"));
    first = false;
  }
  for (const auto& s : p.scalars) {
    if (s.is_dim_symbol()) continue;  // declared by the param dim that binds it
    out += (first ? "" : ", ") + name_token('%', s.name) + ": " + std::string(dtype_name(s.dtype));
    first = false;
  }
  out += ") {\n";
  StmtPrinter(1, out).visit_block(p.body);
  out += "}\n";
  return out;
}

}  // namespace pypto::ir
