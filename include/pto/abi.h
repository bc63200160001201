/* The C ABI between the runtime and a compiled kernel. Plain C so any compiler can produce it. */
#ifndef PTO_ABI_H
#define PTO_ABI_H
#include <stdint.h>

#define PTO_HEADERS_VERSION 4

#ifdef __cplusplus
extern "C" {
#endif

/* Runs body(ctx, begin, end) over [0, n) split in contiguous chunks across the worker threads. */
typedef void (*pto_loop_body)(void* ctx, int64_t begin, int64_t end);
typedef void (*pto_parallel_for_fn)(int64_t n, pto_loop_body body, void* ctx);
/* Reports a run-time error found by a kernel (an index out of range). The kernel carries on
   safely (no out-of-bounds access) and the runtime raises the first report once it returns.
   May be called from any worker thread. */
typedef void (*pto_report_error_fn)(void* ctx, const char* message);
/* Called by the profiling variant of a kernel only (pypto.profile): phase 0 as loop nest `nest`
   (a top-level group of statements ending in a store to global memory) starts, 1 as it ends. */
typedef void (*pto_nest_hook_fn)(void* ctx, int32_t nest, int32_t phase);

typedef struct pto_kernel_args {
  void* const* data;             /* one pointer per tensor param, in Program.params order */
  const int64_t* const* strides; /* per tensor param: element strides, one per dimension */
  const int64_t* iscalars;       /* per scalar param (integer value; unused for float params) */
  const double* fscalars;        /* per scalar param (float value; unused for integer params) */
  pto_parallel_for_fn parallel_for;
  /* Non-zero (read atomically) asks the kernel to stop: it is polled at every loop iteration and
     the kernel returns early; the runtime then reports the run as interrupted. May be NULL. */
  const int32_t* stop;
  pto_report_error_fn report_error; /* may be null: errors are then not reported */
  void* error_ctx;
  pto_nest_hook_fn nest_hook; /* may be null; read only by profiling variants */
  void* nest_ctx;
} pto_kernel_args;

typedef void (*pto_kernel_fn)(const pto_kernel_args* args);

#ifdef __cplusplus
}
#endif
#endif
