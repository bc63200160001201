// The NPU simulator: runs a tile-level program on the reference interpreter (the values are the
// interpreter's, exactly) and times the run on the simulated NPU of a target description: each
// instruction goes to a pipe (MTE2 global->local, MTE3 local->global, V vector, M matrix; the
// scalar unit issues them in program order), each pipe executes its instructions in order, a
// WAIT_FLAG holds its pipe until the matching SET_FLAG's pipe has finished everything before it,
// and two accesses of one buffer from different pipes (at least one a write) that no flag orders
// are a race, reported naming both instructions. Model and limits: docs/npu_sim.md.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/tensor_arg.h"
#include "ir/ir.h"
#include "target/npu_target.h"

namespace pypto::sim {

constexpr int kPipes = 5;  // ir::Pipe MTE2, MTE3, V, M, S
using ir::pipe_name;

// One instruction's span on a pipe of a core (cycles), for the timeline.
struct PipeSpan {
  int core = 0, pipe = 0;
  int64_t begin = 0, end = 0;  // the cycles it occupies its pipe
  int64_t arrive = 0;          // when its result is there (a DMA's data, after its latency)
  std::string what;            // opcode and the buffers it touched
};

struct SimReport {
  std::string target;
  uint64_t sequence = 0;  // increases with every simulated run in the process (which ran last)
  double clock_ghz = 1;
  int cores = 1;                       // cores of the target
  int cores_used = 1;                  // the most that ran at once (parallel loops spread their iterations)
  int64_t cycles = 0;                  // end to end
  std::array<int64_t, kPipes> busy{};  // busy cycles per pipe, summed over cores
  std::array<int64_t, kPipes> instructions{};  // instructions per pipe (S: every issued one)
  // Bytes moved per path between memory levels: "gm->ub", "gm->l1", "ub->gm", "l0c->gm",
  // "l1->l0" (matrix operands), ...
  std::map<std::string, int64_t> bytes;
  // Peak bytes placed in each local memory at once (tile placement), and its capacity.
  std::map<std::string, std::pair<int64_t, int64_t>> memory_use;
  std::vector<PipeSpan> spans;  // when asked for (at most kMaxSpans, then `spans_dropped`)
  int64_t spans_dropped = 0;
  // Busy share of a pipe over cycles x cores_used.
  double utilisation(int pipe) const;
};
constexpr size_t kMaxSpans = 200000;

// Places every local tile of `program` in the memory its space maps to (tiles allocated inside
// one top-level statement live together; top-level allocs for the whole program), aligned to the
// memory's alignment; a tile that does not fit is an error naming it, its memory and the bytes.
// Returns the peak use per memory.
std::map<std::string, std::pair<int64_t, int64_t>> place_tiles(const ir::Program& program,
                                                               const target::NpuTarget& t);

// Inserts SET_FLAG/WAIT_FLAG so that every cross-pipe dependence through a buffer (read after
// write, write after read or write, including across loop iterations) is ordered: per edge an
// event, set right after the producer's statement and waited right before the consumer's in
// their common block (loop-carried edges: prologue set, epilogue wait; sync_insert.cpp). A
// program that has sync instructions already (written by hand) is returned as it is: the
// simulator's race check judges its flags.
ir::Program insert_sync(const ir::Program& tile_program);

// Double buffering for the NPU: each loop that runs on one core and whose body moves tiles it
// allocates by DMA (loads into them, or stores them) runs two iterations per trip, the second
// (under `if var + step < hi`) on copies of those tiles named `<tile>_pong`. An outermost parallel
// loop with more iterations than `cores` becomes `parallel for v_core = 0 to cores` over each
// core's contiguous share, run as a serial loop and double-buffered. The instructions of each
// iteration are the same, so the values are unchanged.
ir::Program ping_pong(const ir::Program& tile_program, int cores);

// Runs `program` (a tile-level program with its sync instructions) on the interpreter and times
// it. `spans`: record the timeline.
SimReport simulate(const ir::Program& program, const runtime::RunArgs& args, const target::NpuTarget& t,
                   bool spans = false);

// The pipe an instruction issues on (ir::Pipe as int); -1 for instructions no pipe executes
// (TPREFETCH, a CPU cache hint; sync instructions, which the pipes of their operands execute).
int pipe_of(ir::Opcode code);

}  // namespace pypto::sim
