// The lowering pipeline, one pass after another (see pipeline.h).
#include "passes/pipeline.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <locale>
#include <sstream>

#include "ir/debug_log.h"
#include "ir/mutator.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/dead_code.h"
#include "passes/double_buffer.h"
#include "passes/fuse.h"
#include "passes/interchange.h"
#include "passes/parallelize.h"
#include "passes/promote.h"
#include "passes/raise_tile_matmul.h"
#include "passes/reuse_temporaries.h"
#include "passes/tile_ops.h"
#include "target/target.h"

namespace pypto::passes {
using namespace ir;

namespace {

// The program with every labelled Seq (a public op call, passes/fuse.cpp) replaced by its body.
Program open_labels(const Program& p) {
  struct Open : StmtMutator {
    void mutate_into(const Stmt& s, std::vector<Stmt>& out) override {
      if (s->kind != StmtKind::Seq || s->var.empty()) return StmtMutator::mutate_into(s, out);
      for (Stmt& t : mutate_block(s->body)) out.push_back(std::move(t));
    }
  };
  return Open().mutate_program(p);
}

bool verify_each_pass() {
#ifdef PYPTO_DEBUG_VERIFY
  return true;
#else
  const char* v = std::getenv("PYPTO_VERIFY");
  return v && std::strcmp(v, "0") != 0;
#endif
}

// Runs one pass, timing it, verifying its output and logging it.
class PassRunner {
 public:
  explicit PassRunner(std::string& log)
      : log_(log), debug_(ir::debug_logging()), verify_(verify_each_pass()) {}

  template <class F>
  Program run(const char* name, Level level, F&& pass) {
    auto t0 = std::chrono::steady_clock::now();
    Program out = pass();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (verify_) verify(out, level);
    std::ostringstream os;
    os.imbue(std::locale::classic());
    os << "[pypto] pass " << name << ": " << ms << " ms\n";
    if (debug_) os << print(out) << "\n";
    log_ += os.str();
    if (debug_) std::cerr << os.str();
    return out;
  }

 private:
  std::string& log_;
  bool debug_, verify_;
};

// Tile sizes from the target description: a matmul's three tiles (a: m x k, b: k x n and the
// accumulator m x n) are sized to share half of one core's L2, so the packed operands stay
// resident while the micro-kernel streams over them; elementwise tiles stay within L1.
TileSizes target_tile_sizes(const runtime::Target& t) {
  TileSizes s;
  s.mm_k = 256;
  s.mm_n = t.l2_bytes >= (2 << 20) ? 512 : 256;
  int64_t budget = t.l2_bytes / 2 / 4;  // floats
  int64_t m = (budget - s.mm_k * s.mm_n) / (s.mm_k + s.mm_n);
  s.mm_m = 64;
  while (s.mm_m * 2 <= m && s.mm_m < 256) s.mm_m *= 2;
  s.cores = t.cores;
  return s;
}

TileSizes tile_sizes(const PipelineOptions& o) {
  TileSizes t = target_tile_sizes(runtime::host_target());
  if (o.tile_rows > 0) t.elem_rows = t.ew_rows = o.tile_rows;
  if (o.tile_cols > 0) t.elem_cols = t.ew_cols = o.tile_cols;
  if (o.mm_tile_m > 0) t.mm_m = o.mm_tile_m;
  if (o.mm_tile_n > 0) t.mm_n = o.mm_tile_n;
  if (o.mm_tile_k > 0) t.mm_k = o.mm_tile_k;
  // Matmul tile sizes asked for (tuning experiments) keep matmuls tiled, so that they apply.
  t.memory_matmul = o.memory_matmul && o.mm_tile_m <= 0 && o.mm_tile_n <= 0 && o.mm_tile_k <= 0;
  t.narrow_operand_tiles = o.mm_tile_m <= 0 && o.mm_tile_n <= 0 && o.mm_tile_k <= 0;
  return t;
}

FusionOptions fusion_options(const PipelineOptions& o) {
  FusionOptions f;
  if (o.fusion_off)
    f.mode = FusionOptions::Off;
  else if (!o.fusion_ops.empty())
    f.mode = FusionOptions::Listed;
  else if (o.fusion)
    f.mode = FusionOptions::Full;
  f.kinds.insert(o.fusion_ops.begin(), o.fusion_ops.end());
  return f;
}

}  // namespace

Lowered lower(const Program& tensor_level, const PipelineOptions& options) {
  Lowered l;
  PassRunner run(l.log);
  l.tensor = run.run("verify", Level::Tensor, [&] {
    verify(tensor_level, Level::Tensor);
    return tensor_level;
  });
  TileSizes sizes = tile_sizes(options);
  Program live = run.run("eliminate_dead_code", Level::Tensor, [&] { return eliminate_dead_code(l.tensor); });
  l.expanded = run.run("lower_composites", Level::Tensor,
                       [&] { return lower_composites(live, options.composite_lowerings); });
  Program raised =
      run.run("raise_tile_matmul", Level::Tensor, [&] { return raise_tile_matmul(l.expanded, sizes); });
  Program fused =
      run.run("fuse", Level::Tensor, [&] { return fuse(raised, fusion_options(options), sizes); });
  Program planned = run.run("promote_small_temps", Level::Tensor,
                            [&] { return options.promote ? promote_small_temps(fused, sizes) : fused; });
  Program tiled = run.run("tile_ops", Level::Tile, [&] { return tile_ops(planned, sizes); });
  l.tile = run.run("reuse_temporaries", Level::Tile, [&] { return reuse_temporaries(tiled); });
  // The call labels of the tile-level text are for its reader: the ISA program opens them, so
  // what runs (double buffering, parallel loops, codegen's runs of instructions) never sees them.
  Program opened = run.run("open_labels", Level::Tile, [&] { return open_labels(l.tile); });
  Program buffered = run.run("double_buffer", Level::Tile,
                             [&] { return options.double_buffer ? double_buffer(opened) : opened; });
  Program parallel = run.run("parallelize", Level::Tile,
                             [&] { return options.parallel ? parallelize(buffered) : buffered; });
  l.isa = run.run("interchange_for_reuse", Level::Tile, [&] { return interchange_for_reuse(parallel); });
  return l;
}

}  // namespace pypto::passes
