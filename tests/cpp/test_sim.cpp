// The NPU simulator (backends/sim): sync insertion, the race detector, the cycle model and
// double buffering with flags, on small hand-written tile programs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backends/interp/interpreter.h"
#include "backends/sim/simulator.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "target/npu_target.h"
#include "test_ir_builders.h"

namespace {
using namespace pypto;
using ir_build::HostF;

// 8 blocks of 16 x 256 f32 rows, each loaded, incremented in place and stored: DMA-bound.
const char* kSingle = R"(func @single(%x: f32[128, 256], %o: f32[128, 256] out) {
  for %i = 0 to 128 step 16 {
    alloc %t: f32[16, 256] vec
    TLOAD %t, %x[%i:16, 0:256]
    TADD %t, %t, 1.0f
    TSTORE %o[%i:16, 0:256], %t
  }
}
)";

// The same with two buffers in ping-pong and hand-placed flags (one event per buffer): the load
// of one buffer overlaps the add and store of the other.
const char* kDouble = R"(func @pingpong(%x: f32[128, 256], %o: f32[128, 256] out) {
  alloc %a: f32[16, 256] vec
  alloc %b: f32[16, 256] vec
  SET_FLAG 1, 0, 0
  SET_FLAG 1, 0, 1
  for %i = 0 to 128 step 32 {
    WAIT_FLAG 1, 0, 0
    TLOAD %a, %x[%i:16, 0:256]
    SET_FLAG 0, 2, 0
    WAIT_FLAG 1, 0, 1
    TLOAD %b, %x[(%i + 16):16, 0:256]
    SET_FLAG 0, 2, 1
    WAIT_FLAG 0, 2, 0
    TADD %a, %a, 1.0f
    SET_FLAG 2, 1, 0
    WAIT_FLAG 2, 1, 0
    TSTORE %o[%i:16, 0:256], %a
    SET_FLAG 1, 0, 0
    WAIT_FLAG 0, 2, 1
    TADD %b, %b, 1.0f
    SET_FLAG 2, 1, 1
    WAIT_FLAG 2, 1, 1
    TSTORE %o[(%i + 16):16, 0:256], %b
    SET_FLAG 1, 0, 1
  }
  WAIT_FLAG 1, 0, 0
  WAIT_FLAG 1, 0, 1
}
)";

struct SimRun {
  sim::SimReport report;
  HostF out{{128, 256}, ir::DType::F32, NAN};
};

SimRun simulate(const ir::Program& p, int cores = 1) {
  HostF x({128, 256}, ir::DType::F32, 0);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = 0.5f * float(int(i % 13) - 6) + 0.25f;
  SimRun r;
  target::NpuTarget t = target::parse_npu_target("[machine]\ncores = " + std::to_string(cores) + "\n");
  r.report = sim::simulate(p, runtime::RunArgs{{x.arg(), r.out.arg()}, {}}, t, true);
  for (size_t i = 0; i < x.data.size(); ++i) EXPECT_EQ(r.out.data[i], x.data[i] + 1.0f) << i;
  return r;
}

// Removes the n-th `code src, dst, ...` statement (a SET_FLAG or WAIT_FLAG) of the program.
bool remove_nth(std::vector<ir::Stmt>& body, ir::Opcode code, const std::string& pipes, int& n) {
  for (size_t k = 0; k < body.size(); ++k) {
    const ir::Stmt& s = body[k];
    if (s->kind == ir::StmtKind::OpStmt && s->op.code == code &&
        ir::print(s->op).find(std::string(ir::opcode_name(code)) + " " + pipes) == 0 && n-- == 0) {
      body.erase(body.begin() + long(k));
      return true;
    }
    if (s->kind == ir::StmtKind::For) {
      auto copy = std::make_shared<ir::StmtNode>(*s);
      if (remove_nth(copy->body, code, pipes, n)) {
        body[k] = copy;
        return true;
      }
    }
  }
  return false;
}

ir::Program without(const ir::Program& p, ir::Opcode code, const std::string& pipes, int n = 0) {
  ir::Program q = p;
  EXPECT_TRUE(remove_nth(q.body, code, pipes, n)) << pipes;
  return q;
}

// Removes the first SET_FLAG/WAIT_FLAG pair between two pipes ("0, 2": MTE2 -> V).
ir::Program without_pair(const ir::Program& p, const std::string& pipes) {
  return without(without(p, ir::Opcode::SET_FLAG, pipes), ir::Opcode::WAIT_FLAG, pipes);
}

void expect_race(const ir::Program& p, const std::vector<std::string>& fragments) {
  try {
    simulate(p);
    ADD_FAILURE() << "expected a race";
  } catch (const ir::Error& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(Sim, InsertedFlagsOrderEveryCrossPipeDependence) {
  ir::Program p = sim::insert_sync(ir::parse_program(kSingle));
  const std::string text = ir::print(p);
  EXPECT_NE(text.find("SET_FLAG 0, 2, 0"), std::string::npos) << text;  // load -> add
  EXPECT_NE(text.find("SET_FLAG 2, 1, 0"), std::string::npos) << text;  // add -> store
  EXPECT_NE(text.find("SET_FLAG 1, 0, 0"), std::string::npos) << text;  // store -> next load (WAR)
  SimRun r = simulate(p);
  EXPECT_EQ(r.report.bytes["gm->ub"], 128 * 256 * 4);
  EXPECT_EQ(r.report.bytes["ub->gm"], 128 * 256 * 4);
  EXPECT_EQ(r.report.instructions[int(ir::Pipe::MTE2)], 8);
  // Serial by its dependences: every block's load, add and store one after the other.
  const target::NpuTarget t = target::parse_npu_target("");
  const int64_t dma = t.gm_in.latency_cycles + 16 * 256 * 4 / int64_t(t.gm_in.bytes_per_cycle);
  const int64_t add = t.vector_startup_cycles + 16 * 256 * 4 / int64_t(t.vector_bytes_per_cycle);
  EXPECT_GE(r.report.cycles, 8 * (2 * dma + add));
  EXPECT_LE(r.report.cycles, 8 * (2 * dma + add) + 100);
}

TEST(Sim, RemovingAnInsertedFlagIsARace) {
  ir::Program p = sim::insert_sync(ir::parse_program(kSingle));
  // The load -> add pair: the add reads %t while the load may still write it.
  expect_race(without_pair(p, "0, 2"),
              {"race on 't'", "TADD %t, %t", "on V", "TLOAD %t, %x", "on MTE2", "from MTE2 to V"});
  // The store -> next load pair (write after read across iterations).
  expect_race(without_pair(p, "1, 0"), {"race on 't'", "TLOAD %t", "TSTORE %o", "from MTE3 to MTE2"});
  // The add -> store pair.
  expect_race(without_pair(p, "2, 1"), {"race on 't'", "TSTORE %o", "TADD %t", "from V to MTE3"});
}

TEST(Sim, DoubleBufferingHidesTheDma) {
  SimRun single = simulate(sim::insert_sync(ir::parse_program(kSingle)));
  ir::Program pp = ir::parse_program(kDouble);
  EXPECT_EQ(ir::print(sim::insert_sync(pp)), ir::print(pp));  // a program with flags is kept
  SimRun twice = simulate(pp);
  const double gain = double(single.report.cycles) / double(twice.report.cycles);
  EXPECT_GE(gain, 1.6) << single.report.cycles << " vs " << twice.report.cycles;
  // The ping-pong run's DMA pipes are busy most of the time.
  EXPECT_GT(twice.report.utilisation(int(ir::Pipe::MTE2)), 0.45);
  // Removing the wait that keeps %a from being reloaded while the add and store still use it:
  expect_race(without(pp, ir::Opcode::WAIT_FLAG, "1, 0"), {"race on 'a'", "TLOAD %a", "on MTE2", "TADD %a"});
}

TEST(Sim, ParallelIterationsSpreadOverCores) {
  std::string text = kSingle;
  text.replace(text.find("  for"), 5, "  parallel for");
  ir::Program p = sim::insert_sync(ir::parse_program(text));
  SimRun one = simulate(p, 1), eight = simulate(p, 8);
  EXPECT_EQ(eight.report.cores_used, 8);
  EXPECT_GE(double(one.report.cycles) / double(eight.report.cycles), 7.0);
}

TEST(Sim, TargetDescriptionErrorsNameTheLine) {
  EXPECT_THROW(target::parse_npu_target("[vector]\nbytes_per_cycle = -1\n"), std::invalid_argument);
  try {
    target::parse_npu_target("[machine]\ncores = 4\n[dma.gm_in]\nlatency = 3\n");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line 4"), std::string::npos) << e.what();
  }
  const target::NpuTarget t = target::parse_npu_target("[matrix]\nfractal = [32, 16, 8]\nf16 = 2\n");
  EXPECT_EQ(t.fractal_m, 32);
  EXPECT_EQ(t.fractal_n, 8);
  EXPECT_EQ(t.fractals_per_cycle.at("f16"), 2.0);
  EXPECT_EQ(t.cores, 32);  // the rest from the built-in description
}

TEST(Sim, TileThatDoesNotFitIsNamed) {
  const target::NpuTarget t = target::parse_npu_target("[memory.ub]\nbytes = 20000\n");
  try {
    sim::place_tiles(ir::parse_program(kDouble), t);
    ADD_FAILURE();
  } catch (const ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tile 'b'"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {
// Each block is stored to %o and then read back from %o by the next instruction, either the
// same rows (a real dependence through global memory) or the rows of the next block.
std::string store_then_load(const std::string& reload_rows) {
  return R"(func @rows(%x: f32[128, 256], %o: f32[128, 256] out) {
  for %i = 0 to 96 step 16 {
    alloc %t: f32[16, 256] vec
    alloc %u: f32[16, 256] vec
    TLOAD %t, %x[%i:16, 0:256]
    TADD %t, %t, 1.0f
    TSTORE %o[%i:16, 0:256], %t
    TLOAD %u, %o[)" +
         reload_rows + R"(:16, 0:256]
    TSTORE %o[(%i + 16):16, 0:256], %t
  }
  alloc %v: f32[16, 256] vec
  TLOAD %v, %x[96:16, 0:256]
  TADD %v, %v, 1.0f
  TSTORE %o[96:16, 0:256], %v
  TLOAD %v, %x[112:16, 0:256]
  TADD %v, %v, 1.0f
  TSTORE %o[112:16, 0:256], %v
}
)";
}
}  // namespace

TEST(Sim, GlobalBuffersAreOrderedByPart) {
  // Reading back the rows just stored needs MTE3 -> MTE2 right after the store; reading rows
  // that store did not touch does not.
  const ir::Program same = sim::insert_sync(ir::parse_program(store_then_load("%i")));
  const ir::Program next = sim::insert_sync(ir::parse_program(store_then_load("(%i + 32)")));
  auto flag_after_store = [](const ir::Program& p) {
    const std::string text = ir::print(p), store = "TSTORE %o[%i:16, 0:256], %t\n";
    const size_t at = text.find(store);
    return text.find_first_not_of(' ', at + store.size()) == text.find("SET_FLAG 1, 0", at);
  };
  EXPECT_TRUE(flag_after_store(same)) << ir::print(same);
  EXPECT_FALSE(flag_after_store(next)) << ir::print(next);
  simulate(next);  // no race: the flags it has suffice
  // The race check agrees: without the wait before it, the overlapping read back is a race.
  ir::Program cut = same;
  size_t at = 0;
  while (cut.body[at]->kind != ir::StmtKind::For) ++at;
  auto loop = std::make_shared<ir::StmtNode>(*cut.body[at]);
  for (size_t k = 1; k < loop->body.size(); ++k)
    if (ir::print(loop->body[k]->op).rfind("TLOAD %u", 0) == 0) {
      // the waits for this iteration's store and (carried) the previous iteration's
      while (k > 0 && ir::print(loop->body[k - 1]->op).rfind("WAIT_FLAG 1, 0", 0) == 0)
        loop->body.erase(loop->body.begin() + long(--k));
      break;
    }
  cut.body[at] = loop;
  expect_race(cut, {"race on 'o'", "TLOAD %u", "TSTORE %o"});
}
