// Reads the IR text form written by printer.cpp.
//
// Grammar (whitespace and newlines are insignificant; `#` starts a comment to end of line):
//
//   program  := 'func' '@'NAME '(' [param (',' param)*] ')' block
//   param    := '%'NAME ':' DTYPE                                   # scalar argument (i64, f32, f64)
//             | '%'NAME ':' DTYPE shape [SPACE] [KIND]              # tensor; SPACE defaults to gm,
//                                                                   # KIND to `in`
//   shape    := '[' [dim (',' dim)*] ']'
//   dim      := INT | expr                          # an expression: a dynamic dim (its extent);
//                                                   # in a param, an undeclared `%S` declares the
//                                                   # dimension symbol S bound to that dim
//   block    := '{' stmt* '}'
//   stmt     := 'seq' block
//             | ['parallel'] 'for' '%'NAME '=' expr 'to' expr ['step' expr] block   # hi exclusive
//             | 'if' expr block ['else' block]
//             | 'let' '%'NAME '=' expr
//             | 'alloc' '%'NAME ':' DTYPE shape SPACE [KIND]        # KIND defaults to `temp`
//             | OPCODE [operand (',' operand)*]                     # operand 0 is the destination
//   SPACE    := 'gm' | 'vec' | 'mat' | 'acc'        KIND := 'in' | 'out' | 'temp'
//   operand  := view | expr                         # `%x` is a view when x names a buffer in scope
//   view     := '%'BUF                              # the whole buffer
//             | '%'BUF '[' [spec (',' spec)*] ']' ['perm' '(' [INT (',' INT)*] ')']
//   spec     := expr                                # an indexed base dim (size 1, dropped)
//             | expr ':' INT ['step' INT] ['valid' expr]    # a window: offset, size, step, valid
//                                                   # extent (default: the size)
//   One spec per base dimension. Without `perm` the view's dims are the window dims in ascending
//   order; `perm(...)` lists them explicitly (a transposed view, or a kept dim of size 1 ...).
//
//   expr     := INT | '-' INT | FLOAT | '-' FLOAT | '%'NAME
//             | '(' expr ')' | '(' expr BINOP expr ')' | '!' expr | '~' expr
//             | 'min' '(' expr ',' expr ')' | 'max' '(' expr ',' expr ')'
//             | 'select' '(' expr ',' expr ',' expr ')'
//             | 'cast' '<' DTYPE '>' '(' expr ')'   # of a bare literal: a constant of that
//                                                   # dtype (`cast<i32>(5)`); a cast of a
//                                                   # constant is `cast<i64>((nanf))`
//             | ('sqrt' | 'exp' | 'log') '(' expr ')'
//   BINOP    := '+' | '-' | '*' | '//' | '/' | '%' | '<' | '<=' | '>' | '>=' | '==' | '!=' | '&&' | '||'
//             | '&' | '|' | '^' | '<<' | '>>'   (integers; shifts as pto/elem.hpp)
//               (`//` and `/` are both Div: floor for integers, true division for floats;
//                `a > b` reads as `b < a`; the remainder `%` needs a space after it, since
//                `%x` is a name)
//   FLOAT    := digits with '.' or an exponent, suffix 'f' for f32 (none: f64);
//               'inf' 'nan' (f64), 'inff' 'nanf' (f32)
//   NAME     := [A-Za-z0-9_.]+ | '"' chars with \" and \\ escapes '"'
//
// Variables are typed by their declarations (scalar params, loop vars (i64), lets (the value's
// dtype)); names and buffers must be declared before use, in scope: a loop var in its body, a let
// or alloc from its statement to the end of its block. parse_expr reads a lone expression, taking
// every variable as i64. Expressions are rebuilt exactly as written (no simplification), so text
// the printer wrote reads back to the identical tree. Errors: ir::Error("line L, col C: ...").
#include "ir/parser.h"
#include "ir/number_text.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "ir/expr_impl.h"

namespace pypto::ir {

namespace {

enum class Tok { End, Name /*%x*/, Global /*@x*/, Ident, Int, Float, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // Name/Global: the name; Ident/Punct: the spelling; Int/Float: the literal
  int line = 1, col = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(src) {}

  // The character at pos_ for a message: printable ASCII quoted, a control byte in hex, anything
  // else as its whole UTF-8 sequence (half a sequence would make the message invalid UTF-8).
  std::string char_text() const {
    const auto c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) return "'" + std::string(1, char(c)) + "'";
    if (c < 0x80) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", unsigned(c));
      return buf;
    }
    size_t n = 1;
    while (pos_ + n < s_.size() && (static_cast<unsigned char>(s_[pos_ + n]) & 0xC0) == 0x80) ++n;
    return "'" + std::string(s_.substr(pos_, n)) + "'";
  }

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skip_space();
      Token t;
      t.line = line_;
      t.col = col_;
      if (pos_ >= s_.size()) {
        out.push_back(t);
        return out;
      }
      char c = s_[pos_];
      if ((c == '%' || c == '@') && pos_ + 1 < s_.size() &&
          (is_name_char(s_[pos_ + 1]) || s_[pos_ + 1] == '"')) {
        t.kind = c == '%' ? Tok::Name : Tok::Global;
        advance();
        t.text = read_name(t);
      } else if (is_alpha(c)) {
        t.kind = Tok::Ident;
        while (pos_ < s_.size() && (is_alpha(s_[pos_]) || is_digit(s_[pos_]))) t.text += advance();
      } else if (is_digit(c)) {
        read_number(t);
      } else {
        t.kind = Tok::Punct;
        static const char* two[] = {"//", "<=", ">=", "==", "!=", "&&", "||", "<<", ">>"};
        for (const char* p : two)
          if (s_.compare(pos_, 2, p) == 0) t.text = p;
        if (t.text.empty()) {
          if (std::string_view("()[]{},:<>!+-*/%=&|^~").find(c) == std::string_view::npos)
            fail(t, "unexpected character " + char_text());
          t.text = std::string(1, c);
        }
        for (size_t i = 0; i < t.text.size(); ++i) advance();
      }
      out.push_back(t);
    }
  }

 private:
  static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_char(char c) { return is_alpha(c) || is_digit(c) || c == '.'; }

  [[noreturn]] static void fail(const Token& t, const std::string& msg) {
    throw Error("line " + std::to_string(t.line) + ", col " + std::to_string(t.col) + ": " + msg);
  }

  char advance() {
    char c = s_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  void skip_space() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else {
        break;
      }
    }
  }

  std::string read_name(const Token& t) {
    std::string name;
    if (s_[pos_] != '"') {
      while (pos_ < s_.size() && is_name_char(s_[pos_])) name += advance();
      return name;
    }
    advance();
    for (;;) {
      if (pos_ >= s_.size()) fail(t, "unterminated quoted name");
      char c = advance();
      if (c == '"') return name;
      if (c == '\\') {
        if (pos_ >= s_.size()) fail(t, "unterminated quoted name");
        c = advance();
      }
      name += c;
    }
  }

  void read_number(Token& t) {
    t.kind = Tok::Int;
    while (pos_ < s_.size() && is_digit(s_[pos_])) t.text += advance();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      t.kind = Tok::Float;
      t.text += advance();
      while (pos_ < s_.size() && is_digit(s_[pos_])) t.text += advance();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        t.kind = Tok::Float;
        while (pos_ < p) t.text += advance();
        while (pos_ < s_.size() && is_digit(s_[pos_])) t.text += advance();
      }
    }
    if (t.kind == Tok::Float && pos_ < s_.size() && s_[pos_] == 'f') t.text += advance();
    if (pos_ < s_.size() && (is_alpha(s_[pos_]) || s_[pos_] == '.')) fail(t, "malformed number");
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

// Text must be UTF-8 (names in quotes and comments may hold any character); anything else is
// rejected with its position rather than passed on to become a name nothing can print.
void check_utf8(std::string_view text) {
  int line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (ok && n == 2) ok = c >= 0xC2;  // no overlong forms
    if (ok && n == 3) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && n == 4) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90) && c <= 0xF4;
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", unsigned(c));
      throw Error("line " + std::to_string(line) + ", col " + std::to_string(col) +
                  ": the text is not valid UTF-8 (byte " + hex + ")");
    }
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
}

class Parser {
 public:
  Parser(std::string_view text, bool program_mode)
      : toks_((check_utf8(text), Lexer(text).run())), program_mode_(program_mode) {
    scopes_.emplace_back();
  }

  // Nesting of blocks and expressions is bounded, so that deep input gets a clear error instead
  // of exhausting the stack here or in any recursive walk of the program later.
  static constexpr int kMaxNesting = 200;
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        p.fail("nesting deeper than " + std::to_string(kMaxNesting) + " levels (blocks and expressions)");
    }
    ~Nest() { --p.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };

  Program program() {
    Program p;
    std::vector<ScalarParam> symbols;  // dimension symbols, after the caller's scalars
    expect_ident("func");
    if (peek().kind != Tok::Global) fail("expected '@name' after 'func'");
    p.name = next().text;
    expect("(");
    if (!accept(")")) {
      do {
        std::string name = expect_name("parameter");
        expect(":");
        DType t = dtype();
        if (is_punct("[")) {
          auto b = std::make_shared<Buffer>();
          b->name = name;
          b->dtype = t;
          shape(*b, int(p.params.size()), &symbols);
          b->kind = BufferKind::Param;
          b->space = Space::Global;
          if (auto s = peek_space()) {
            b->space = *s;
            next();
          }
          if (auto k = peek_kind()) {
            b->kind = *k;
            next();
          }
          declare_buffer(b);
          p.params.push_back(b);
        } else {
          declare_var(name, t);
          p.scalars.push_back(ScalarParam{name, t});
        }
      } while (accept(","));
      expect(")");
    }
    p.scalars.insert(p.scalars.end(), symbols.begin(), symbols.end());
    p.body = block();
    if (peek().kind != Tok::End) fail("unexpected text after the program");
    return p;
  }

  Expr lone_expr() {
    Expr e = expr();
    if (peek().kind != Tok::End) fail("unexpected text after the expression");
    return e;
  }

 private:
  // ---- tokens -----------------------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_punct(const char* p, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Punct && peek(ahead).text == p;
  }
  bool is_ident(const char* p, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Ident && peek(ahead).text == p;
  }
  bool accept(const char* p) {
    if (!is_punct(p)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::End:
        return "end of input";
      case Tok::Name:
        return "'" + detail::var_token(t.text) + "'";
      case Tok::Global:
        return "'@" + t.text + "'";
      default:
        return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg, const Token* at = nullptr) const {
    const Token& t = at ? *at : peek();
    throw Error("line " + std::to_string(t.line) + ", col " + std::to_string(t.col) + ": " + msg);
  }
  void expect(const char* p) {
    if (!accept(p)) fail(std::string("expected '") + p + "', found " + describe(peek()));
  }
  void expect_ident(const char* w) {
    if (!is_ident(w)) fail(std::string("expected '") + w + "', found " + describe(peek()));
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Tok::Name)
      fail(std::string("expected a %name (") + what + "), found " + describe(peek()));
    return next().text;
  }
  int64_t int_literal(bool negative = false) {
    if (peek().kind != Tok::Int) fail("expected an integer, found " + describe(peek()));
    const Token& t = next();
    errno = 0;
    unsigned long long v = std::strtoull(t.text.c_str(), nullptr, 10);
    const unsigned long long lim = negative ? 9223372036854775808ULL : 9223372036854775807ULL;
    if (errno == ERANGE || v > lim) fail("integer literal out of range", &t);
    return negative ? int64_t(0 - uint64_t(v)) : int64_t(v);
  }
  DType dtype() {
    const Token& t = peek();
    if (t.kind == Tok::Ident)
      if (auto d = parse_dtype(t.text)) {
        next();
        return *d;
      }
    fail("expected a dtype (f32, f16, bf16, f64, i32, i64, bool), found " + describe(t));
  }
  std::optional<Space> peek_space() const {
    return peek().kind == Tok::Ident ? parse_space(peek().text) : std::nullopt;
  }
  std::optional<BufferKind> peek_kind() const {
    if (is_ident("in")) return BufferKind::Param;
    if (is_ident("out")) return BufferKind::Output;
    if (is_ident("temp")) return BufferKind::Temp;
    return std::nullopt;
  }
  // Element counts are checked here: an extent product that overflows (or exceeds 2^62) would
  // wrap every size and address computed from it later.
  // Dynamic dims count as 1 here (their extent is checked at run time against kDynamicBound).
  // For a param (`symbols` set), an undeclared bare `%S` declares the dimension symbol S.
  void shape(Buffer& b, int param = -1, std::vector<ScalarParam>* symbols = nullptr) {
    const Token& at = peek();
    expect("[");
    int64_t n = 1;
    std::vector<Expr> dyn;
    if (!accept("]")) {
      do {
        const Token& t = peek();
        if (t.kind == Tok::Int) {
          b.shape.push_back(int_literal());
          dyn.push_back(nullptr);
          if (__builtin_mul_overflow(n, b.shape.back(), &n) || n > (int64_t(1) << 62))
            fail("shape has more than 2^62 elements", &at);
          continue;
        }
        b.shape.push_back(kDynamicBound);
        if (symbols && t.kind == Tok::Name && !find_var(t.text) && !find_buffer(t.text)) {
          std::string sym = next().text;
          declare_var(sym, DType::I64);
          symbols->push_back(ScalarParam{sym, DType::I64, param, int(b.shape.size()) - 1});
          dyn.push_back(var(sym));
        } else {
          dyn.push_back(expr());  // an expression of declared symbols
        }
      } while (accept(","));
      expect("]");
    }
    for (auto& e : dyn)
      if (e) {
        b.dyn = dyn;
        break;
      }
  }

  // ---- scopes -----------------------------------------------------------------------------------
  struct Scope {
    std::map<std::string, BufferRef> buffers;
    std::map<std::string, DType> vars;
  };
  void declare_buffer(const BufferRef& b) { scopes_.back().buffers[b->name] = b; }
  void declare_var(const std::string& n, DType t) { scopes_.back().vars[n] = t; }
  BufferRef find_buffer(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->buffers.find(n); f != it->buffers.end()) return f->second;
    return nullptr;
  }
  std::optional<DType> find_var(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->vars.find(n); f != it->vars.end()) return f->second;
    return std::nullopt;
  }

  // ---- statements -------------------------------------------------------------------------------
  // scoped = false: a `seq` block, a group whose names stay visible after it.
  std::vector<Stmt> block(const std::string& loop_var = "", bool scoped = true) {
    const Nest nest(*this);
    expect("{");
    if (scoped) scopes_.emplace_back();
    if (!loop_var.empty()) declare_var(loop_var, DType::I64);
    std::vector<Stmt> body;
    while (!accept("}")) {
      if (peek().kind == Tok::End) fail("expected '}' before end of input");
      body.push_back(stmt());
    }
    if (scoped) scopes_.pop_back();
    return body;
  }

  Stmt stmt() {
    const Token& t = peek();
    if (t.kind != Tok::Ident) fail("expected a statement, found " + describe(t));
    if (t.text == "seq") {  // seq [label] { ... }
      next();
      std::string label;
      if (peek().kind == Tok::Ident) label = next().text;
      Stmt s = seq(block("", false));
      s->var = label;
      return s;
    }
    if (t.text == "for" || t.text == "parallel") {
      LoopKind kind = LoopKind::Serial;
      if (t.text == "parallel") {
        next();
        kind = LoopKind::Parallel;
      }
      expect_ident("for");
      std::string v = expect_name("loop variable");
      expect("=");
      Expr lo = expr();
      expect_ident("to");
      Expr hi = expr();
      Expr step = int_imm(1);
      if (is_ident("step")) {
        next();
        step = expr();
      }
      return for_loop(v, lo, hi, step, block(v), kind);
    }
    if (t.text == "if") {
      next();
      Expr c = expr();
      auto then_body = block();
      std::vector<Stmt> else_body;
      if (is_ident("else")) {
        next();
        else_body = block();
      }
      return if_then(c, std::move(then_body), std::move(else_body));
    }
    if (t.text == "let") {
      next();
      std::string v = expect_name("let variable");
      expect("=");
      Expr e = expr();
      declare_var(v, e->dtype);
      return let(v, e);
    }
    if (t.text == "alloc") {
      next();
      auto b = std::make_shared<Buffer>();
      b->name = expect_name("buffer");
      expect(":");
      b->dtype = dtype();
      shape(*b);
      auto sp = peek_space();
      if (!sp) fail("expected a memory space (gm, vec, mat, acc), found " + describe(peek()));
      next();
      b->space = *sp;
      b->kind = BufferKind::Temp;
      if (auto k = peek_kind()) {
        b->kind = *k;
        next();
      }
      declare_buffer(b);
      return alloc(b);
    }
    auto code = parse_opcode(t.text);
    if (!code) fail("unknown statement or opcode '" + t.text + "'");
    next();
    Op op;
    op.code = *code;
    if (starts_operand()) {
      do op.args.push_back(operand());
      while (accept(","));
    }
    return op_stmt(std::move(op));
  }

  bool starts_operand() const {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::Name:
      case Tok::Int:
      case Tok::Float:
        return true;
      case Tok::Punct:
        return t.text == "(" || t.text == "!" || t.text == "-";
      case Tok::Ident:
        return t.text == "min" || t.text == "max" || t.text == "select" || t.text == "cast" ||
               t.text == "sqrt" || t.text == "exp" || t.text == "log" || t.text == "inf" ||
               t.text == "inff" || t.text == "nan" || t.text == "nanf";
      default:
        return false;
    }
  }

  Operand operand() {
    if (peek().kind == Tok::Name)
      if (BufferRef b = find_buffer(peek().text)) {
        next();
        return view(b);
      }
    return expr();
  }

  View view(const BufferRef& b) {
    if (!is_punct("[")) return View::whole(b);
    next();
    View v;
    v.buf = b;
    std::vector<int> slice_dims;
    if (!is_punct("]")) {
      do {
        v.offset.push_back(expr());
        int64_t size = 1, step = 1;
        Expr valid = int_imm(1);
        if (accept(":")) {
          slice_dims.push_back(int(v.offset.size() - 1));
          size = int_literal();
          valid = int_imm(size);
          if (is_ident("step")) {
            next();
            step = int_literal();
          }
          if (is_ident("valid")) {
            next();
            valid = expr();
          }
        }
        v.size.push_back(size);
        v.step.push_back(step);
        v.valid.push_back(valid);
      } while (accept(","));
    }
    expect("]");
    v.dims = slice_dims;
    if (is_ident("perm")) {
      next();
      expect("(");
      v.dims.clear();
      if (!accept(")")) {
        do {
          bool neg = accept("-");
          v.dims.push_back(int(int_literal(neg)));
        } while (accept(","));
        expect(")");
      }
    }
    return v;
  }

  // ---- expressions ------------------------------------------------------------------------------
  Expr float_literal(const std::string& text, bool negative, const Token& at) {
    // `inf` ends in 'f' but is the f64 word; `inff` is its f32 form.
    bool f32 = text == "inff" || text == "nanf" || (text != "inf" && !text.empty() && text.back() == 'f');
    std::string body = f32 ? text.substr(0, text.size() - 1) : text;
    double v;
    if (body == "inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (body == "nan") {
      v = std::numeric_limits<double>::quiet_NaN();
    } else {
      // Locale-independent (ir/number_text.h); underflow reads as 0, overflow is an error.
      const std::optional<double> p = parse_double(body);
      if (p) {
        v = *p;
      } else {
        const bool tiny = body.find_first_of("eE") != std::string::npos &&
                          body.find('-', body.find_first_of("eE")) != std::string::npos;
        if (!tiny) fail("bad or out-of-range float literal: " + body, &at);
        v = 0;
      }
    }
    if (negative) v = -v;
    return f32 ? float_imm(v, DType::F32) : detail::make_float_raw(v, DType::F64);
  }

  static bool is_float_word(const Token& t) {
    return t.kind == Tok::Ident &&
           (t.text == "inf" || t.text == "inff" || t.text == "nan" || t.text == "nanf");
  }

  // A literal, optionally negative, or nullptr (consuming nothing) when none is next.
  Expr literal() {
    size_t k = is_punct("-") ? 1 : 0;
    const Token& t = peek(k);
    if (t.kind != Tok::Int && t.kind != Tok::Float && !is_float_word(t)) return nullptr;
    if (k) next();
    if (t.kind == Tok::Int) return int_imm(int_literal(k == 1));
    next();
    return float_literal(t.text, k == 1, t);
  }

  std::vector<Expr> call_args(size_t n) {
    expect("(");
    std::vector<Expr> a;
    for (size_t i = 0; i < n; ++i) {
      if (i) expect(",");
      a.push_back(expr());
    }
    expect(")");
    return a;
  }

  Expr expr() {
    const Nest nest(*this);
    const Token& t = peek();
    if (Expr lit = literal()) return lit;
    switch (t.kind) {
      case Tok::Name: {
        next();
        if (program_mode_) {
          if (auto d = find_var(t.text)) return var(t.text, *d);
          if (find_buffer(t.text)) fail("buffer " + describe(t) + " used as a scalar", &t);
          fail("undefined variable " + describe(t), &t);
        }
        return var(t.text, DType::I64);
      }
      case Tok::Punct:
        if (t.text == "!" || t.text == "~") {
          next();
          return detail::make_raw(t.text == "!" ? ExprOp::Not : ExprOp::BitNot, DType::I64, {expr()});
        }
        if (t.text == "(") {
          next();
          Expr a = expr();
          if (accept(")")) return a;
          const Token& op = next();
          Expr b = expr();
          expect(")");
          return binary(op, a, b);
        }
        break;
      case Tok::Ident: {
        const std::string& w = t.text;
        if (w == "min" || w == "max") {
          next();
          return detail::make_raw(w == "min" ? ExprOp::Min : ExprOp::Max, DType::I64, call_args(2));
        }
        if (w == "select") {
          next();
          return detail::make_raw(ExprOp::Select, DType::I64, call_args(3));
        }
        if (w == "sqrt" || w == "exp" || w == "log") {
          next();
          ExprOp op = w == "sqrt" ? ExprOp::Sqrt : w == "exp" ? ExprOp::Exp : ExprOp::Log;
          return detail::make_raw(op, DType::F32, call_args(1));
        }
        if (w == "cast") {
          next();
          expect("<");
          DType d = dtype();
          expect(">");
          // cast<T>(literal) is how the printer spells a constant of type T.
          size_t k = is_punct("-", 1) ? 2 : 1;
          if (is_punct("(") && is_punct(")", k + 1) &&
              (peek(k).kind == Tok::Int || peek(k).kind == Tok::Float || is_float_word(peek(k)))) {
            next();
            Expr lit = literal();
            expect(")");
            if (lit->op == ExprOp::Int) return detail::make_int(lit->ival, d);
            return detail::make_float_raw(lit->fval, d);
          }
          return detail::make_raw(ExprOp::Cast, d, call_args(1));
        }
        break;
      }
      default:
        break;
    }
    fail("expected an expression, found " + describe(t));
  }

  Expr binary(const Token& op, const Expr& a, const Expr& b) {
    static const std::map<std::string, ExprOp> ops = {
        {"+", ExprOp::Add},    {"-", ExprOp::Sub},   {"*", ExprOp::Mul},    {"//", ExprOp::Div},
        {"/", ExprOp::Div},    {"%", ExprOp::Mod},   {"<", ExprOp::Lt},     {"<=", ExprOp::Le},
        {"==", ExprOp::Eq},    {"!=", ExprOp::Ne},   {"&&", ExprOp::And},   {"||", ExprOp::Or},
        {"&", ExprOp::BitAnd}, {"|", ExprOp::BitOr}, {"^", ExprOp::BitXor}, {"<<", ExprOp::Shl},
        {">>", ExprOp::Shr}};
    if (op.kind == Tok::Punct) {
      if (op.text == ">") return detail::make_raw(ExprOp::Lt, DType::I64, {b, a});
      if (op.text == ">=") return detail::make_raw(ExprOp::Le, DType::I64, {b, a});
      if (auto it = ops.find(op.text); it != ops.end())
        return detail::make_raw(it->second, DType::I64, {a, b});
    }
    fail("expected a binary operator or ')', found " + describe(op), &op);
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  bool program_mode_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
};

}  // namespace

Program parse_program(std::string_view text) { return Parser(text, true).program(); }
Expr parse_expr(std::string_view text) { return Parser(text, false).lone_expr(); }

}  // namespace pypto::ir
