// What a profile says about each loop nest of a kernel (cpu/nests.h): the kernel source lines it
// comes from, and its FLOPs and bytes counted from the tile-level IR.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "passes/pipeline.h"

namespace pypto::runtime {

struct NestInfo {
  std::vector<std::string> lines;   // "file:line: source text" of the tensor-level statements it covers
  std::vector<std::string> writes;  // the global buffers it writes
  double flops = 0, bytes = 0;
  bool exact = true;  // false: some trip count or extent was not constant (an estimate)
};

// Source lines: the tensor-level statements are matched to the nests in program order, each nest
// taking every statement up to the last one that writes a buffer the nest writes (statements
// fused into a nest come before the one whose result it stores). `locate` gives a statement's
// line ("" when unknown; then no lines). `env`: a dynamic kernel's dimension symbols for one call
// (runtime/kernel_cost.h), so that the counts are the call's; without it, the bound's windows.
std::vector<NestInfo> describe_nests(const passes::Lowered& lowered,
                                     const std::function<std::string(const ir::StmtNode*)>& locate,
                                     const ir::ScalarEnv* env = nullptr);

}  // namespace pypto::runtime
