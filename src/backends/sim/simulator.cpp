// The simulator's clock: an interpreter observer that assigns each executed instruction to a pipe
// of a core, charges it from the target description, honours the sync flags, and checks with
// vector clocks that every cross-pipe access pair of a buffer is ordered by a flag.
#include "backends/sim/simulator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <stdexcept>

#include "backends/interp/interpreter.h"
#include "ir/printer.h"

namespace pypto::sim {
using namespace ir;

double SimReport::utilisation(int pipe) const {
  const double span = double(cycles) * std::max(cores_used, 1);
  return span > 0 ? double(busy[size_t(pipe)]) / span : 0;
}

int pipe_of(Opcode code) {
  switch (code) {
    case Opcode::TLOAD:
    case Opcode::MGATHER:
      return int(Pipe::MTE2);
    case Opcode::TSTORE:
    case Opcode::MSCATTER:
    case Opcode::MSCATTER_ADD:
      return int(Pipe::MTE3);
    case Opcode::TPREFETCH:
    case Opcode::SET_FLAG:
    case Opcode::WAIT_FLAG:
    case Opcode::PIPE_BARRIER:
      return -1;
    default:
      return opcode_info(code).category == OpCategory::Matrix ? int(Pipe::M) : int(Pipe::V);
  }
}

namespace {

using Clock = std::array<int64_t, kPipes>;  // a vector clock over the pipes of one core

bool transcendental(Opcode c) {
  switch (c) {
    case Opcode::TEXP:
    case Opcode::TLOG:
    case Opcode::TSQRT:
    case Opcode::TRSQRT:
    case Opcode::TRECIP:
    case Opcode::TTANH:
    case Opcode::TSIGMOID:
    case Opcode::TERF:
    case Opcode::TGELU:
    case Opcode::TGELU_TANH:
    case Opcode::TSILU:
    case Opcode::TSIN:
    case Opcode::TCOS:
    case Opcode::TTAN:
    case Opcode::TEXP2:
    case Opcode::TEXPM1:
    case Opcode::TLOG2:
    case Opcode::TLOG10:
    case Opcode::TLOG1P:
    case Opcode::TCBRT:
    case Opcode::TERFC:
    case Opcode::TERFINV:
    case Opcode::TLGAMMA:
    case Opcode::TDIGAMMA:
    case Opcode::TTRIGAMMA:
    case Opcode::TDIV:
    case Opcode::TPOW:
    case Opcode::TATAN2:
    case Opcode::THYPOT:
      return true;
    default:
      return false;
  }
}

std::string op_text(const Op& op) {
  try {
    return print(op);
  } catch (const std::exception&) {
    return std::string(opcode_name(op.code));
  }
}

// One access of a buffer by a pipe: the pipe's clock at that moment and the instruction.
struct Access {
  int64_t clock = 0;
  const Op* op = nullptr;
};

// Accesses of one buffer on one core since its last write (FastTrack-style history).
struct History {
  int write_pipe = -1;
  Access write;
  std::array<Access, kPipes> reads{};  // clock 0: none
};

// An access of part of a global buffer not yet known to be ordered before every pipe.
struct GlobalAccess {
  int pipe = 0;
  bool write = false;
  Access at;
  std::vector<int64_t> lo, hi;  // bounding box
  bool overlaps(const interp::OperandUse& u) const {
    for (size_t d = 0; d < lo.size() && d < u.lo.size(); ++d)
      if (u.hi[d] < lo[d] || hi[d] < u.lo[d]) return false;
    return true;
  }
};

struct Core {
  int64_t issue = 0;                   // when the scalar unit issues the next instruction
  std::array<int64_t, kPipes> free{};  // when each pipe can start its next instruction
  // When each pipe's instructions so far have all completed: a DMA engine keeps transfers in
  // flight (it is free again after bytes / bandwidth, the data arrives `latency` later).
  std::array<int64_t, kPipes> done{};
  std::array<Clock, kPipes> clock{};
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<std::pair<int64_t, Clock>>> flags;
  std::map<const Buffer*, History> history;
  std::map<const Buffer*, std::vector<GlobalAccess>> global_history;
  int64_t end() const { return std::max(issue, *std::max_element(done.begin(), done.end())); }
  void reset(int64_t t) {
    issue = t;
    free.fill(t);
    done.fill(t);
    history.clear();  // a barrier orders everything before it
    global_history.clear();
  }
};

// What an instruction costs its pipe: the cycles it occupies it, and the cycles after that until
// its result is there (a DMA's latency; 0 for the compute units).
struct Cost {
  int64_t occupy = 0, latency = 0;
};

class Timer : public interp::ExecObserver {
 public:
  Timer(const target::NpuTarget& t, SimReport& r, bool spans) : t_(t), r_(r), spans_(spans) {
    cores_.resize(size_t(std::max(t.cores, 1)));
  }

  void on_op(const Op& op, const std::vector<interp::OperandUse>& uses,
             const std::vector<ScalarValue>& scalars) override {
    Core& c = cores_[size_t(core_)];
    if (op.code == Opcode::TPREFETCH) return;  // a CPU cache hint: nothing to move on an NPU
    c.issue += t_.issue_cycles;
    r_.busy[size_t(Pipe::S)] += t_.issue_cycles;
    ++r_.instructions[size_t(Pipe::S)];
    switch (op.code) {
      case Opcode::SET_FLAG:
        return set_flag(c, scalars);
      case Opcode::WAIT_FLAG:
        return wait_flag(c, scalars);
      case Opcode::PIPE_BARRIER:
        return barrier(c, scalars);
      default:
        break;
    }
    const int p = pipe_of(op.code);
    const Cost cost = charge(op, uses, p);
    const int64_t begin = std::max(c.issue, c.free[size_t(p)]);
    c.free[size_t(p)] = begin + cost.occupy;
    c.done[size_t(p)] = std::max(c.done[size_t(p)], begin + cost.occupy + cost.latency);
    r_.busy[size_t(p)] += cost.occupy;
    ++r_.instructions[size_t(p)];
    ++c.clock[size_t(p)][size_t(p)];
    check_races(c, op, uses, p);
    if (spans_) record(p, begin, begin + cost.occupy, begin + cost.occupy + cost.latency, op, uses);
  }

  void on_parallel_enter(size_t depth, int64_t iterations) override {
    if (depth != 0) return;  // inner parallel loops run on the core of their outer iteration
    iterations_ = std::max<int64_t>(iterations, 1);
    used_ = int(std::min<int64_t>(iterations_, int64_t(cores_.size())));
    r_.cores_used = std::max(r_.cores_used, used_);
    const int64_t t0 = cores_[0].end();
    for (int k = 0; k < used_; ++k) {
      cores_[size_t(k)].reset(t0);
      // Flags set before the loop (a prologue's) are there for each core's first iteration.
      if (k > 0) cores_[size_t(k)].flags = cores_[0].flags;
    }
  }
  void on_parallel_iteration(size_t depth, int64_t k) override {
    if (depth == 0) core_ = int(k * used_ / iterations_);  // contiguous blocks of iterations per core
  }
  void on_parallel_leave(size_t depth) override {
    if (depth != 0) return;
    int64_t t1 = 0;
    for (int k = 0; k < used_; ++k) t1 = std::max(t1, cores_[size_t(k)].end());
    core_ = 0;
    // What the last core's last iteration set is what the code after the loop (an epilogue) waits for.
    if (used_ > 1) cores_[0].flags = cores_[size_t(used_ - 1)].flags;
    cores_[0].reset(t1);
  }

  int64_t end() const { return cores_[0].end(); }

 private:
  // The interpreter has checked the pipes and events (integers in range).
  static std::array<int64_t, 3> sync_operands(const std::vector<ScalarValue>& s) {
    std::array<int64_t, 3> v{};
    for (size_t i = 0; i < s.size() && i < 3; ++i) v[i] = s[i].is_float ? int64_t(s[i].f) : s[i].i;
    return v;
  }

  void set_flag(Core& c, const std::vector<ScalarValue>& s) {
    const auto [src, dst, ev] = sync_operands(s);
    // Issued to pipe src: signals once everything src ran before it has completed (its DMA
    // transfers arrived); the pipe itself goes on with its next instructions.
    const int64_t at = std::max(c.issue, c.done[size_t(src)]);
    c.flags[{src, dst, ev}].push_back({at, c.clock[size_t(src)]});
  }

  void wait_flag(Core& c, const std::vector<ScalarValue>& s) {
    const auto [src, dst, ev] = sync_operands(s);
    auto& q = c.flags[{src, dst, ev}];
    if (q.empty()) return;  // the interpreter has refused an unpaired wait already
    const auto [at, clock] = q.front();
    q.pop_front();
    // Pipe dst holds here until the flag is set: later instructions of dst start after it.
    c.free[size_t(dst)] = std::max({c.issue, c.free[size_t(dst)], at});
    for (int p = 0; p < kPipes; ++p)
      c.clock[size_t(dst)][size_t(p)] = std::max(c.clock[size_t(dst)][size_t(p)], clock[size_t(p)]);
  }

  void barrier(Core& c, const std::vector<ScalarValue>& s) {
    const int64_t p = sync_operands(s)[0];
    if (p != int64_t(Pipe::ALL)) return;  // one pipe is in order already
    const int64_t t = c.end();
    Clock joined{};
    for (const Clock& k : c.clock)
      for (int q = 0; q < kPipes; ++q) joined[size_t(q)] = std::max(joined[size_t(q)], k[size_t(q)]);
    c.clock.fill(joined);
    c.issue = t;
    c.free.fill(t);
    c.done.fill(t);
  }

  std::string memory_of(const Buffer& b) const {
    if (b.space == Space::Global) return "gm";
    auto it = t_.space_memory.find(std::string(space_name(b.space)));
    return it == t_.space_memory.end() ? std::string(space_name(b.space)) : it->second;
  }

  Cost charge(const Op& op, const std::vector<interp::OperandUse>& uses, int p) {
    auto bytes_of = [](const interp::OperandUse& u) {
      return u.rows * u.cols * int64_t(dtype_bytes(u.buf->dtype));
    };
    if (p == int(Pipe::MTE2) || p == int(Pipe::MTE3)) {
      // The local tile moved: the destination (load, gather) or the source (store, scatter).
      const interp::OperandUse* local = nullptr;
      for (const auto& u : uses)
        if (u.buf->space != Space::Global && (p == int(Pipe::MTE2) ? u.write : !u.write)) {
          local = &u;
          break;
        }
      const int64_t bytes = local ? bytes_of(*local) : 0;
      const std::string mem = local ? memory_of(*local->buf) : "?";
      r_.bytes[p == int(Pipe::MTE2) ? "gm->" + mem : mem + "->gm"] += bytes;
      const target::DmaPipe& d = p == int(Pipe::MTE2) ? t_.gm_in : t_.gm_out;
      return {int64_t(std::ceil(double(bytes) / d.bytes_per_cycle)), d.latency_cycles};
    }
    if (p == int(Pipe::M)) {
      // dst M x N, a M x K, b K x N (TMATMUL_BIAS: a bias operand after them).
      if (uses.size() < 3) return {t_.matrix_startup_cycles, 0};
      const int64_t M = uses[1].rows, K = uses[1].cols, N = uses[2].cols;
      const std::string dt(dtype_name(uses[1].buf->dtype));
      auto rate = t_.fractals_per_cycle.find(dt);
      if (rate == t_.fractals_per_cycle.end())
        throw Error("the simulated matrix unit of '" + t_.name + "' has no " + dt + " rate ([matrix] " + dt +
                    " = fractals per cycle) for `" + op_text(op) + "`");
      auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
      const double fractals =
          double(ceil_div(M, t_.fractal_m) * ceil_div(K, t_.fractal_k) * ceil_div(N, t_.fractal_n));
      const int64_t operand_bytes = bytes_of(uses[1]) + bytes_of(uses[2]);
      r_.bytes[memory_of(*uses[1].buf) + "->l0"] += operand_bytes;
      // Operands stream from L1 into L0A/L0B while the cube works on the previous fractals.
      const double cycles =
          std::max(fractals / rate->second, double(operand_bytes) / t_.l1_to_l0_bytes_per_cycle);
      return {t_.matrix_startup_cycles + int64_t(std::ceil(cycles)), 0};
    }
    int64_t widest = 0;
    for (const auto& u : uses) widest = std::max(widest, bytes_of(u));
    double cycles = std::ceil(double(widest) / t_.vector_bytes_per_cycle);
    if (transcendental(op.code)) cycles *= t_.transcendental_factor;
    if (op.code == Opcode::TARGSORT && !uses.empty())
      cycles *= std::max(1.0, std::ceil(std::log2(double(std::max<int64_t>(uses[0].cols, 2)))));
    return {t_.vector_startup_cycles + int64_t(cycles), 0};
  }

  // Vector-clock race check: an earlier access of the buffer from another pipe must be ordered
  // before this one (through SET_FLAG/WAIT_FLAG) when either of them writes.
  void check_races(Core& c, const Op& op, const std::vector<interp::OperandUse>& uses, int p) {
    const Clock& now = c.clock[size_t(p)];
    for (const auto& u : uses) {
      if (u.buf->space == Space::Global) {
        check_global(c, op, u, p);
        continue;
      }
      History& h = c.history[u.buf];
      auto race = [&](int other, const Access& a, const char* kind) {
        throw Error("race on '" + u.buf->name + "' (core " + std::to_string(core_) + "): `" + op_text(op) +
                    "` on " + pipe_name(p) + " " + (u.write ? "writes" : "reads") + " it while `" +
                    op_text(*a.op) + "` on " + pipe_name(other) + " " + kind +
                    " it, and no SET_FLAG/WAIT_FLAG from " + pipe_name(other) + " to " + pipe_name(p) +
                    " orders them");
      };
      if (h.write_pipe >= 0 && h.write_pipe != p && h.write.clock > now[size_t(h.write_pipe)])
        race(h.write_pipe, h.write, "writes");
      if (u.write) {
        for (int q = 0; q < kPipes; ++q)
          if (q != p && h.reads[size_t(q)].clock > now[size_t(q)]) race(q, h.reads[size_t(q)], "reads");
        h.write_pipe = p;
        h.write = {now[size_t(p)], &op};
        h.reads = {};
      } else {
        h.reads[size_t(p)] = {now[size_t(p)], &op};
      }
    }
  }

  // Parts of a global buffer: only overlapping accesses must be ordered.
  void check_global(Core& c, const Op& op, const interp::OperandUse& u, int p) {
    if (u.rows <= 0 || u.cols <= 0) return;
    const Clock& now = c.clock[size_t(p)];
    auto& list = c.global_history[u.buf];
    for (const GlobalAccess& a : list)
      if (a.pipe != p && (u.write || a.write) && a.at.clock > now[size_t(a.pipe)] && a.overlaps(u))
        throw Error("race on '" + u.buf->name + "' (core " + std::to_string(core_) + "): `" + op_text(op) +
                    "` on " + pipe_name(p) + " " + (u.write ? "writes" : "reads") + " it while `" +
                    op_text(*a.at.op) + "` on " + pipe_name(a.pipe) + " " + (a.write ? "writes" : "reads") +
                    " it, and no SET_FLAG/WAIT_FLAG from " + pipe_name(a.pipe) + " to " + pipe_name(p) +
                    " orders them");
    // Forget the accesses every pipe is ordered after already.
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const GlobalAccess& a) {
                                for (int q = 0; q < kPipes; ++q)
                                  if (c.clock[size_t(q)][size_t(a.pipe)] < a.at.clock) return false;
                                return true;
                              }),
               list.end());
    list.push_back(GlobalAccess{p, u.write, {now[size_t(p)], &op}, u.lo, u.hi});
  }

  void record(int p, int64_t begin, int64_t end, int64_t arrive, const Op& op,
              const std::vector<interp::OperandUse>& uses) {
    if (r_.spans.size() >= kMaxSpans) {
      ++r_.spans_dropped;
      return;
    }
    std::string what(opcode_name(op.code));
    for (size_t i = 0; i < uses.size(); ++i) what += (i ? ", " : " ") + uses[i].buf->name;
    r_.spans.push_back({core_, p, begin, end, arrive, std::move(what)});
  }

  const target::NpuTarget& t_;
  SimReport& r_;
  bool spans_;
  std::vector<Core> cores_;
  int core_ = 0, used_ = 1;
  int64_t iterations_ = 1;
};

}  // namespace

SimReport simulate(const Program& program, const runtime::RunArgs& args, const target::NpuTarget& t,
                   bool spans) {
  static std::atomic<uint64_t> runs{0};
  SimReport r;
  r.sequence = ++runs;
  r.target = t.name;
  r.clock_ghz = t.clock_ghz;
  r.cores = t.cores;
  r.memory_use = place_tiles(program, t);
  Timer timer(t, r, spans);
  interp::interpret(program, args, &timer);
  r.cycles = timer.end();
  return r;
}

}  // namespace pypto::sim
