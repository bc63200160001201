// Ahead-of-time export of a tile-level program (pypto's Lowered.export, ptoc -o): a shared library
// with a C header and a stable C entry point, a standalone executable that runs the kernel on
// .npy files and reports its time, the C++ source of either, or the IR text.
//
// The library's C ABI, for a kernel named NAME (the program's name, made a C identifier):
//   int pypto_NAME_run(void* const* data, const int64_t* const* strides, const int64_t* iscalars,
//                      const double* fscalars, int num_threads);
//     data: one pointer per tensor param in the program's order (inputs, then outputs); strides:
//     per param, element strides per dimension; iscalars/fscalars: per scalar param, its value
//     (integer or float); num_threads <= 1 runs on the caller. Returns 0, or 1 after a run-time
//     error (an index out of range), whose message pypto_NAME_error() returns.
//   const char* pypto_NAME_signature(void): the params, one "name dtype[shape] in|out" per line.
// It needs no PyPTO library at run time: the kernel headers are compiled in, and parallel loops
// run on std::threads.
#pragma once
#include <string>

#include "ir/ir.h"

namespace pypto::cpu {

enum class ExportKind { SharedLibrary, Executable, Source, ExecutableSource, IrText };

// "so", "exe", "cpp", "exe.cpp", "ir"; throws ir::Error for another word.
ExportKind parse_export_kind(const std::string& word);
// The kind a path's suffix asks for: .so, .cpp, .pto/.ir, anything else an executable.
ExportKind export_kind_for_path(const std::string& path);

std::string export_symbol(const ir::Program& tile_program);  // NAME above
std::string export_header(const ir::Program& tile_program);
std::string export_source(const ir::Program& tile_program, ExportKind kind);

// Writes `path` (compiling with the CPU backend's compiler and flags where needed); a shared
// library gets its C header beside it (path with .h for its suffix). Returns the files written.
std::vector<std::string> export_kernel(const ir::Program& tile_program, const std::string& path,
                                       ExportKind kind);

}  // namespace pypto::cpu
