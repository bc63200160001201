#include "backends/cpu/export.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "backends/cpu/codegen.h"
#include "backends/cpu/compiler.h"
#include "ir/printer.h"

namespace pypto::cpu {
namespace {

using ir::Error;

// The .npy descr of a dtype; "" where NumPy has none we can name (bfloat16) or it is not listed.
std::string npy_descr(ir::DType t) {
  switch (t) {
    case ir::DType::F32:
      return "<f4";
    case ir::DType::F64:
      return "<f8";
    case ir::DType::I32:
      return "<i4";
    case ir::DType::I64:
      return "<i8";
    case ir::DType::F16:
      return "<f2";
    case ir::DType::Bool:
      return "|b1";
    default:
      return "";
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r;
}

// A C string literal of `s`.
std::string c_string(const std::string& s) {
  std::string r = "\"";
  for (char ch : s) {
    if (ch == '\n')
      r += "\\n";
    else if (ch == '"' || ch == '\\')
      r += std::string("\\") + ch;
    else
      r += ch;
  }
  return r + "\"";
}

// A dynamic extent as C++ over the scalars array `iscal` (extents are integer expressions of
// dimension symbols: +, -, *, floor division and modulo, min, max).
std::string extent_cpp(const ir::Program& p, const ir::Expr& e) {
  using ir::ExprOp;
  auto a = [&](size_t i) { return extent_cpp(p, e->args.at(i)); };
  auto infix = [&](const char* o) { return "(" + a(0) + o + a(1) + ")"; };
  auto call = [&](const char* fn) {
    return std::string("pto::elem::") + fn + "<int64_t>(" + a(0) + ", " + a(1) + ")";
  };
  switch (e->op) {
    case ExprOp::Int:
      return "int64_t(" + std::to_string(e->ival) + ")";
    case ExprOp::Var:
      for (size_t j = 0; j < p.scalars.size(); ++j)
        if (p.scalars[j].name == e->name) return "iscal[" + std::to_string(j) + "]";
      break;
    case ExprOp::Add:
      return infix(" + ");
    case ExprOp::Sub:
      return infix(" - ");
    case ExprOp::Mul:
      return infix(" * ");
    case ExprOp::Div:
      return call("floordiv");
    case ExprOp::Mod:
      return call("floormod");
    case ExprOp::Min:
      return call("min");
    case ExprOp::Max:
      return call("max");
    default:
      break;
  }
  throw Error("export: a dynamic extent the executable cannot evaluate: " + ir::to_string(e));
}

// A shape with its dynamic dims written as their extents over dimension symbols (`S`, `S - 1`).
std::string shape_text(const ir::Buffer& b) {
  std::string r;
  for (int d = 0; d < b.rank(); ++d) {
    std::string dim = b.is_dynamic(d) ? ir::to_string(b.dyn[size_t(d)]) : std::to_string(b.shape[size_t(d)]);
    dim.erase(std::remove(dim.begin(), dim.end(), '%'), dim.end());
    r += (d ? ", " : "") + dim;
  }
  return r;
}

std::string signature_text(const ir::Program& p) {
  std::string s;
  for (const ir::BufferRef& b : p.params)
    s += b->name + " " + std::string(ir::dtype_name(b->dtype)) + "[" + shape_text(*b) + "] " +
         (b->kind == ir::BufferKind::Output ? "out" : "in") + "\n";
  for (const ir::ScalarParam& sp : p.scalars) {
    s += sp.name + " " + std::string(ir::dtype_name(sp.dtype)) + " scalar";
    if (sp.is_dim_symbol())
      s += ": dim " + std::to_string(sp.dim) + " of " + p.params[size_t(sp.param)]->name + " (dynamic)";
    s += "\n";
  }
  return s;
}

// The dimension symbols' table: the runner checks their values, the driver binds them from the
// inputs' shapes.
std::string dim_symbol_table(const ir::Program& p) {
  std::string t = "const pto_dim_symbol pto_dim_symbols[] = {\n";
  for (size_t j = 0; j < p.scalars.size(); ++j)
    if (p.scalars[j].is_dim_symbol())
      t += "  {" + std::to_string(j) + ", " + c_string(p.scalars[j].name) + ", " +
           std::to_string(p.scalars[j].param) + ", " + std::to_string(p.scalars[j].dim) + "},\n";
  return t + "  {-1, nullptr, -1, -1}};\n";
}

// The kernel's entry made private: the export's own C functions are its interface.
std::string private_kernel(const ir::Program& p) {
  std::string src = generate_cpp(p);
  const std::string entry = "extern \"C\" __attribute__((visibility(\"default\"))) void pypto_kernel(";
  size_t at = src.find(entry);
  if (at == std::string::npos) throw Error("export: the generated kernel has no pypto_kernel entry");
  return src.replace(at, entry.size(), "static void pypto_kernel(");
}

const char* kRunner = R"(
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {
struct pto_dim_symbol {
  int scalar;  // its index in iscalars
  const char* name;
  int param, dim;  // the tensor param and dim whose extent it is
};
PTO_DIM_SYMBOLS
thread_local int pto_export_threads = 1;
// Parallel loops of an exported kernel: contiguous chunks on std::threads (the caller takes one).
void pto_export_parallel_for(int64_t n, pto_loop_body body, void* ctx) {
  const int64_t k = n < pto_export_threads ? n : pto_export_threads;
  if (k <= 1) {
    if (n > 0) body(ctx, 0, n);
    return;
  }
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < k; ++i) workers.emplace_back(body, ctx, n * i / k, n * (i + 1) / k);
  body(ctx, 0, n / k);
  for (std::thread& w : workers) w.join();
}
struct pto_export_errors {
  std::mutex mu;
  std::string first;
};
void pto_export_report(void* ctx, const char* message) {
  auto* e = static_cast<pto_export_errors*>(ctx);
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->first.empty()) e->first = message ? message : "kernel error";
}
thread_local std::string pto_export_last_error;
}  // namespace

#define PTO_EXPORT extern "C" __attribute__((visibility("default")))
PTO_EXPORT int PTO_RUN(void* const* data, const int64_t* const* strides, const int64_t* iscalars,
                       const double* fscalars, int num_threads) {
  pto_kernel_args a;
  std::memset(&a, 0, sizeof a);
  a.data = data;
  a.strides = strides;
  a.iscalars = iscalars;
  a.fscalars = fscalars;
  a.parallel_for = &pto_export_parallel_for;
  pto_export_errors errors;
  a.report_error = &pto_export_report;
  a.error_ctx = &errors;
  pto_export_threads = num_threads < 1 ? 1 : num_threads;
  for (const pto_dim_symbol* d = pto_dim_symbols; d->name; ++d) {
    const int64_t v = iscalars[d->scalar];
    if (v < 0 || v > PTO_DYNAMIC_BOUND) {  // the kernel's index arithmetic assumes this range
      pto_export_last_error = std::string("dynamic dimension ") + d->name + " = " + std::to_string(v) +
                              " is out of range [0, " + std::to_string(PTO_DYNAMIC_BOUND) + "]";
      return 1;
    }
  }
  pypto_kernel(&a);
  pto_export_last_error = errors.first;
  return errors.first.empty() ? 0 : 1;
}
PTO_EXPORT const char* PTO_ERROR(void) { return pto_export_last_error.c_str(); }
PTO_EXPORT const char* PTO_SIGNATURE(void) { return PTO_SIGNATURE_TEXT; }
)";

const char* kDriver = R"(
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {
struct pto_param_desc {
  const char* name;
  const char* descr;
  int64_t elem;
  int rank;
  int64_t shape[8];
  int output;
};
struct pto_scalar_desc {
  const char* name;
  int is_float;
  int is_dim;  // a dimension symbol: bound from an input's shape, not given on the command line
};

bool pto_read_npy(const char* path, const pto_param_desc& p, std::vector<unsigned char>& buf, std::string& err,
                  std::vector<int64_t>* shape_only = nullptr) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return err = std::string("cannot open ") + path, false;
  unsigned char head[10];
  bool ok = std::fread(head, 1, 10, f) == 10 && std::memcmp(head, "\x93NUMPY", 6) == 0;
  size_t hlen = ok ? size_t(head[8]) | size_t(head[9]) << 8 : 0;
  if (ok && head[6] >= 2) {
    unsigned char more[2];
    ok = std::fread(more, 1, 2, f) == 2;
    hlen |= size_t(more[0]) << 16 | size_t(more[1]) << 24;
  }
  std::string h(hlen, '\0');
  ok = ok && std::fread(&h[0], 1, hlen, f) == hlen;
  if (!ok) return std::fclose(f), err = std::string(path) + ": not a .npy file", false;
  if (!shape_only && (h.find(std::string("'descr': '") + p.descr + "'") == std::string::npos ||
                      h.find("'fortran_order': False") == std::string::npos)) {
    std::fclose(f);
    return err = std::string(path) + ": expected a C-ordered array of dtype " + p.descr + " for " + p.name, false;
  }
  size_t at = h.find("'shape': (");
  std::vector<int64_t> shape;
  if (at != std::string::npos) {
    const char* s = h.c_str() + at + 10;
    while (*s && *s != ')') {
      if (*s >= '0' && *s <= '9') {
        char* end;
        shape.push_back(std::strtoll(s, &end, 10));
        s = end;
      } else {
        ++s;
      }
    }
  }
  if (shape_only) {
    std::fclose(f);
    *shape_only = shape;
    return true;
  }
  bool same = int(shape.size()) == p.rank;
  int64_t n = 1;
  for (int d = 0; d < p.rank; ++d) {
    same = same && shape[d] == p.shape[d];
    n *= p.shape[d];
  }
  if (!same) return std::fclose(f), err = std::string(path) + ": wrong shape for " + p.name, false;
  buf.resize(size_t(n * p.elem));
  ok = std::fread(buf.data(), 1, buf.size(), f) == buf.size();
  std::fclose(f);
  if (!ok) err = std::string(path) + ": truncated";
  return ok;
}

bool pto_param_shape(int i, const int64_t* iscal, int64_t* shape);

// The shape in a .npy file's header.
bool pto_npy_shape(const char* path, std::vector<int64_t>& shape, std::string& err) {
  const pto_param_desc any = {"", "", 1, 0, {}, 0};
  std::vector<unsigned char> none;
  return pto_read_npy(path, any, none, err, &shape);
}

bool pto_write_npy(const char* path, const pto_param_desc& p, const std::vector<unsigned char>& buf) {
  std::string h = std::string("{'descr': '") + p.descr + "', 'fortran_order': False, 'shape': (";
  for (int d = 0; d < p.rank; ++d) h += std::to_string(p.shape[d]) + (p.rank == 1 || d + 1 < p.rank ? "," : "");
  h += "), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  FILE* f = std::fopen(path, "wb");
  if (!f) return false;
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(h.size() & 255),
                            (unsigned char)(h.size() >> 8)};
  bool ok = std::fwrite(head, 1, 10, f) == 10 && std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
            std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  return std::fclose(f) == 0 && ok;
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files, values;
  int threads = int(std::thread::hardware_concurrency()), repeat = 10;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--threads" || a == "--repeat") && i + 1 < argc)
      (a == "--threads" ? threads : repeat) = std::atoi(argv[++i]);
    else if (a.find('=') != std::string::npos)
      values.push_back(a);
    else
      files.push_back(a);
  }
  if (int(files.size()) != PTO_NPARAMS || int(values.size()) != PTO_NCALLER_SCALARS) {
    std::fprintf(stderr, "usage: %s FILE.npy per tensor param (inputs are read, outputs written) "
                 "NAME=VALUE per scalar [--threads N] [--repeat N]\nparams:\n%s", argv[0], PTO_SIGNATURE_TEXT);
    return 2;
  }
  std::vector<std::vector<unsigned char>> bufs(PTO_NPARAMS);
  std::vector<void*> data(PTO_NPARAMS + 1);
  std::vector<std::vector<int64_t>> strides(PTO_NPARAMS);
  std::vector<const int64_t*> stride_ptrs(PTO_NPARAMS + 1);
  std::vector<int64_t> iscal(PTO_NSCALARS + 1);
  std::vector<double> fscal(PTO_NSCALARS + 1);
  // Dynamic dims: each symbol is bound from its input's .npy shape; every shape then follows.
  for (const pto_dim_symbol* s = pto_dim_symbols; s->name; ++s) {
    std::vector<int64_t> shape;
    std::string err;
    if (!pto_npy_shape(files[s->param].c_str(), shape, err)) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 1;
    }
    if (int(shape.size()) != pto_params[s->param].rank) {
      std::fprintf(stderr, "error: %s: wrong rank for %s\n", files[s->param].c_str(), pto_params[s->param].name);
      return 1;
    }
    iscal[s->scalar] = shape[s->dim];
  }
  for (int i = 0; i < PTO_NPARAMS; ++i) {
    pto_param_desc& p = pto_params[i];
    pto_param_shape(i, iscal.data(), p.shape);
    std::string err;
    if (p.output) {
      int64_t n = 1;
      for (int d = 0; d < p.rank; ++d) n *= p.shape[d];
      bufs[i].assign(size_t(n * p.elem), 0xFF);  // NaN for floats: an element never written shows
    } else if (!pto_read_npy(files[i].c_str(), p, bufs[i], err)) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 1;
    }
    strides[i].assign(size_t(p.rank), 1);
    for (int d = p.rank - 1; d > 0; --d) strides[i][d - 1] = strides[i][d] * p.shape[d];
    data[i] = bufs[i].data();
    stride_ptrs[i] = strides[i].data();
  }
  for (int j = 0; j < PTO_NSCALARS; ++j) {
    if (pto_scalars[j].is_dim) continue;
    std::string want = std::string(pto_scalars[j].name) + "=";
    auto it = std::find_if(values.begin(), values.end(), [&](const std::string& v) { return v.rfind(want, 0) == 0; });
    if (it == values.end()) {
      std::fprintf(stderr, "error: no value for scalar %s (give %sVALUE)\n", pto_scalars[j].name, want.c_str());
      return 2;
    }
    fscal[j] = std::strtod(it->c_str() + want.size(), nullptr);
    iscal[j] = pto_scalars[j].is_float ? int64_t(fscal[j]) : std::strtoll(it->c_str() + want.size(), nullptr, 10);
  }
  std::vector<double> ms;
  for (int r = 0; r <= std::max(1, repeat); ++r) {  // the first run warms up and is not counted
    auto t0 = std::chrono::steady_clock::now();
    if (PTO_RUN(data.data(), stride_ptrs.data(), iscal.data(), fscal.data(), threads) != 0) {
      std::fprintf(stderr, "error: %s\n", PTO_ERROR());
      return 1;
    }
    if (r) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s: %.4f ms (median of %zu runs, %d threads)\n", PTO_NAME, ms[ms.size() / 2], ms.size(), threads);
  for (int i = 0; i < PTO_NPARAMS; ++i)
    if (pto_params[i].output && !pto_write_npy(files[i].c_str(), pto_params[i], bufs[i])) {
      std::fprintf(stderr, "error: cannot write %s\n", files[i].c_str());
      return 1;
    }
  return 0;
}
)";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw Error("export: cannot write " + path);
}

}  // namespace

ExportKind parse_export_kind(const std::string& w) {
  if (w == "so") return ExportKind::SharedLibrary;
  if (w == "exe") return ExportKind::Executable;
  if (w == "cpp") return ExportKind::Source;
  if (w == "exe.cpp") return ExportKind::ExecutableSource;
  if (w == "ir") return ExportKind::IrText;
  throw Error("unknown export kind '" + w + "' (expected so, exe, cpp, exe.cpp or ir)");
}

ExportKind export_kind_for_path(const std::string& path) {
  if (ends_with(path, ".so")) return ExportKind::SharedLibrary;
  if (ends_with(path, ".cpp") || ends_with(path, ".cc")) return ExportKind::Source;
  if (ends_with(path, ".pto") || ends_with(path, ".ir")) return ExportKind::IrText;
  return ExportKind::Executable;
}

std::string export_symbol(const ir::Program& p) {
  std::string s;
  for (char ch : p.name) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    s += ok ? ch : '_';
  }
  return s.empty() ? "kernel" : s;
}

std::string export_header(const ir::Program& p) {
  const std::string n = export_symbol(p);
  std::ostringstream h;
  h << "/* PyPTO kernel '" << n << "', exported ahead of time. Params, in calling order:\n";
  std::istringstream sig(signature_text(p));
  for (std::string line; std::getline(sig, line);) h << " *   " << line << "\n";
  h << " * data: one pointer per tensor param; strides: per tensor param, element strides per\n"
       " * dimension; iscalars/fscalars: per scalar param; num_threads <= 1 runs on the caller.\n"
       " * Returns 0, or 1 after a run-time error (pypto_"
    << n << "_error() says which). */\n";
  h << "#ifndef PYPTO_EXPORT_" << n << "_H\n#define PYPTO_EXPORT_" << n << "_H\n#include <stdint.h>\n";
  h << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n";
  h << "int pypto_" << n
    << "_run(void* const* data, const int64_t* const* strides, const int64_t* iscalars, const double* "
       "fscalars, "
       "int num_threads);\n";
  h << "const char* pypto_" << n << "_error(void);\nconst char* pypto_" << n << "_signature(void);\n";
  h << "#ifdef __cplusplus\n}\n#endif\n#endif\n";
  return h.str();
}

std::string export_source(const ir::Program& p, ExportKind kind) {
  if (kind == ExportKind::IrText) return ir::print(p);
  const std::string n = export_symbol(p);
  std::ostringstream s;
  s << private_kernel(p);
  s << "\n#define PTO_RUN pypto_" << n << "_run\n#define PTO_ERROR pypto_" << n
    << "_error\n#define PTO_SIGNATURE pypto_" << n << "_signature\n#define PTO_SIGNATURE_TEXT "
    << c_string(signature_text(p)) << "\n#define PTO_DYNAMIC_BOUND int64_t(" << ir::kDynamicBound << ")\n";
  std::string runner = kRunner;
  const std::string table_at = "PTO_DIM_SYMBOLS\n";
  runner.replace(runner.find(table_at), table_at.size(), dim_symbol_table(p));
  s << runner;
  if (kind == ExportKind::Executable || kind == ExportKind::ExecutableSource) {
    s << "\n#define PTO_NAME " << c_string(n) << "\n#define PTO_NPARAMS " << p.params.size()
      << "\n#define PTO_NSCALARS " << p.scalars.size() << "\n";
    size_t caller_scalars = 0;
    for (const ir::ScalarParam& sp : p.scalars) caller_scalars += sp.is_dim_symbol() ? 0 : 1;
    s << "#define PTO_NCALLER_SCALARS " << caller_scalars << "\n";
    std::ostringstream params, scalars, shapes;
    shapes << "bool pto_param_shape(int i, const int64_t* iscal, int64_t* shape) {\n  switch (i) {\n";
    for (const ir::BufferRef& b : p.params) {
      std::string descr = npy_descr(b->dtype);
      if (descr.empty())
        throw Error("export: the executable reads and writes .npy files, which have no dtype for param %" +
                    b->name + " (" + std::string(ir::dtype_name(b->dtype)) +
                    "); export a shared library instead");
      if (b->shape.size() > 8) throw Error("export: param %" + b->name + " has more than 8 dimensions");
      params << "  {" << c_string(b->name) << ", " << c_string(descr) << ", " << ir::dtype_bytes(b->dtype)
             << ", " << b->shape.size() << ", {" << shape_text(b->shape) << "}, "
             << (b->kind == ir::BufferKind::Output ? 1 : 0) << "},\n";
      shapes << "    case " << (&b - p.params.data()) << ":\n";
      for (int d = 0; d < b->rank(); ++d)
        if (b->is_dynamic(d))
          shapes << "      shape[" << d << "] = " << extent_cpp(p, b->dyn[size_t(d)]) << ";\n";
      shapes << "      return true;\n";
    }
    shapes << "  }\n  return false;\n}\n";
    for (const ir::ScalarParam& sp : p.scalars)
      scalars << "  {" << c_string(sp.name) << ", " << (ir::is_float(sp.dtype) ? 1 : 0) << ", "
              << (sp.is_dim_symbol() ? 1 : 0) << "},\n";
    std::string driver = kDriver;
    // The tables go after the driver's type definitions, before main.
    const std::string tables = "pto_param_desc pto_params[] = {\n" + params.str() + "  {}};\n" +
                               "const pto_scalar_desc pto_scalars[] = {\n" + scalars.str() + "  {}};\n" +
                               shapes.str();
    const std::string marker = "}  // namespace\n\nint main(";
    size_t at = driver.find(marker);
    driver.insert(at, tables);
    s << driver;
  }
  return s.str();
}

std::vector<std::string> export_kernel(const ir::Program& p, const std::string& path, ExportKind kind) {
  if (kind == ExportKind::IrText || kind == ExportKind::Source || kind == ExportKind::ExecutableSource) {
    write_text(path, export_source(p, kind));
    return {path};
  }
  const std::string src = path + ".cpp";
  write_text(src, export_source(p, kind));
  compile_file(src, path, kind == ExportKind::SharedLibrary);
  std::vector<std::string> files = {path, src};
  if (kind == ExportKind::SharedLibrary) {
    std::string header = ends_with(path, ".so") ? path.substr(0, path.size() - 3) + ".h" : path + ".h";
    write_text(header, export_header(p));
    files.push_back(header);
  }
  return files;
}

}  // namespace pypto::cpu
