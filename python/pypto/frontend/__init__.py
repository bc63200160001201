"""The front end: walks a kernel's Python AST and drives the C++ IR builder.

  source.py       reading and parsing the kernel's source; file/line mapping for errors
  tracer.py       the trace state: builder, inputs (explicit and implicit), guards, paths
  values.py       TensorValue (traced tensors); run-time scalars are _C.Expr
  tensor_ops.py   tensor operations while tracing (builder calls)
  expressions.py  expression evaluation;  calls.py: calls, builtins, math functions
  walker.py       statements;  control.py: loops and ifs
  trace.py        the tracing driver (restarts) and result description
  signals.py      the tracer's internal signals (restart, needs a concrete value)
  intrinsics.py   the tags of prange/static_range/matmul (set by the public API), public op names
"""
