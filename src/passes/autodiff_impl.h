// Private state of passes::autodiff, shared by autodiff.cpp (replay, sweep, clean-up) and
// autodiff_rules.cpp (one derivative rule per opcode).
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "passes/autodiff.h"

namespace pypto::passes::ad {

inline const ir::View* view_of(const ir::Operand& o) { return std::get_if<ir::View>(&o); }
// A pointer into a temporary would dangle at the end of the statement (ASan found one).
const ir::View* view_of(const ir::Operand&& o) = delete;
// `dst += x`, `dst -= x` and `dst += a @ b`: the old value of dst passes through unchanged.
bool in_place_linear(const ir::Op& op);
// The composite ops differentiated whole, by a dedicated formula (autodiff_composites.cpp).
const std::vector<ir::Opcode>& composites_with_rules();

// Forward names -> backward objects in one scope of the backward program.
struct Env {
  std::map<const ir::Buffer*, ir::BufferRef> bufs;
  std::map<std::string, ir::Expr> vars;
};

class Differentiator {
 public:
  Differentiator(const ir::Program& forward, const Locate& locate, const std::vector<bool>& wanted,
                 const IsDetached& detached, bool save_products);
  Backward run();

 private:
  // Forward analysis: statement positions (pre-order), enclosing loops, writes per buffer.
  struct StmtInfo {
    int pos = 0;
    std::vector<const ir::StmtNode*> loops;
  };
  struct BufInfo {
    std::vector<const ir::StmtNode*> loops_at_alloc;
    std::vector<const ir::StmtNode*> writes;
    std::vector<const ir::StmtNode*> reads;
  };
  class Analysis;  // fills stmts_ and bufs_ (a visitor over the forward program)
  bool stale(const ir::Buffer* b, const ir::StmtNode* s, bool before_write) const;
  bool overwritten(const ir::Buffer* b) const;  // written more than once (an earlier value dies)
  bool needs_reversal(const ir::StmtNode* loop) const;
  const std::set<const ir::Buffer*>& carried(const ir::StmtNode* loop) const;
  ir::BufferRef new_tape(const ir::StmtNode* loop, const ir::Buffer& b, const Env& env);
  ir::View tape_slot(const ir::BufferRef& tape, const ir::Expr& iteration);
  [[noreturn]] void refuse(const ir::StmtNode* s, const std::string& why) const;

  // Building the backward.
  class Replay;  // visitors over the forward program: replay() and sweep()
  class Sweep;
  void replay(const std::vector<ir::Stmt>& body, Env& env, std::set<const ir::Buffer*>& local);
  void sweep(const std::vector<ir::Stmt>& body, Env& env);
  void rule(const ir::StmtNode* s, const Env& env);  // autodiff_rules.cpp
  void indexed_rows_rule(const ir::StmtNode* s, const Env& env);
  void dwconv_rule(const ir::StmtNode* s, const Env& env, const ir::View& g);     // TDWCONV
  void composite_rule(const ir::StmtNode* s, const Env& env, const ir::View& g);  // autodiff_composites.cpp
  ir::BufferRef new_adjoint(const ir::Buffer& like);  // a zero-filled adjoint buffer
  // Dynamic dims: a backward param like forward param `p`, its symbol dims binding (or sharing) the
  // backward's symbols; and a copy of a forward buffer with its extents in the backward's symbols.
  ir::View add_param_like(const ir::Buffer& p, const std::string& name = "");
  ir::BufferRef buffer_like(const ir::Buffer& like);
  ir::Expr extent_in_backward(const ir::Expr& forward_extent) const;

  // Helpers for the rules.
  ir::View mapped(const ir::View& v, const Env& env) const;
  ir::Operand mapped(const ir::Operand& o, const Env& env) const;
  bool has_adjoint(const ir::Operand& o) const;
  ir::View adjoint(const ir::View& v, const Env& env) const;  // v's window of its adjoint buffer
  // The forward value of operand `o` of statement `s` (checked: still what it was at `s`).
  ir::Operand value(const ir::Operand& o, const ir::StmtNode* s, const Env& env,
                    bool is_result = false) const;
  // adjoint(src) += contribution (or -=), summing over the dims `src` was broadcast along.
  void accumulate(const ir::Operand& src, ir::View contribution, const Env& env, bool subtract = false);
  // A contribution summed over the dims it broadcasts src along (src's shape).
  ir::View summed_to(const ir::Operand& src, ir::View contribution);
  ir::Expr constant(double v, const ir::View& like) const;

  const ir::Program& fwd_;
  Locate locate_;
  std::vector<bool> wanted_;
  IsDetached detached_;
  bool save_products_;
  std::map<const ir::Buffer*, ir::BufferRef> saved_products_;  // forward temp -> its backward param
  std::vector<const ir::Buffer*> products_to_save() const;
  ir::Program forward_with_saves(const std::vector<const ir::Buffer*>& saves) const;
  ir::Builder b_;
  std::map<const ir::StmtNode*, StmtInfo> stmts_;
  std::map<const ir::Buffer*, BufInfo> bufs_;
  std::map<const ir::Buffer*, ir::BufferRef> adj_;               // forward buffer -> its adjoint now
  std::map<const ir::StmtNode*, const ir::StmtNode*> replayed_;  // backward op -> forward op
  // The ops of the whole-program replay (not of a loop scope's replay in the sweep): they run in
  // forward order, so what they read of a buffer that replay writes is its value at that point.
  std::set<const ir::StmtNode*> replayed_in_order_;
  bool replaying_in_order_ = false;
  std::set<const ir::Buffer*> adjoint_buffers_;
  std::map<std::string, ir::Expr> symbols_;  // forward dimension symbol -> the backward's
  mutable std::map<const ir::StmtNode*, std::set<const ir::Buffer*>> carried_;
  std::map<const ir::StmtNode*, std::map<const ir::Buffer*, ir::BufferRef>> tapes_;  // the latest replay's
};

// The clean-up after the sweep (autodiff_cleanup.cpp).
// `fill 0; a += c` -> `a = c` where the first contribution covers all of an adjoint.
void write_first_contributions(std::vector<ir::Stmt>& body, const std::set<const ir::Buffer*>& adjoints,
                               std::map<const ir::Buffer*, int>& reads);
// `t = a @ b; g += t` -> `g += a @ b` (TMATMUL_ACC) for an adjoint g and a temporary t.
void accumulate_products(std::vector<ir::Stmt>& body, const std::set<const ir::Buffer*>& adjoints,
                         std::map<const ir::Buffer*, int>& reads);
void forward_copies(ir::Program& p);  // `a = c` of settled buffers: a's readers read c
void used_buffers(const std::vector<ir::Stmt>& body, std::set<const ir::Buffer*>& used);
// K where e is the loop variable v itself (1) or v * K, K a constant; else nothing.
std::optional<int64_t> var_multiple(const ir::Expr& e, const std::string& v);

}  // namespace pypto::passes::ad
