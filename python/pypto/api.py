"""pypto.jit, the decorator that makes kernels: a JitFunction (jit.py), or with autotune=True one
wrapped in Autotuned (autotune.py, which sits above jit.py)."""
from __future__ import annotations

from .autotune import Autotuned
from .jit import JitFunction


def jit(fn=None, *, fusion=None, backend=None, tiles=None, parallel=True, double_buffer=True, promote=True,
        alignment=None, profile=False, autotune=False, sim_target=None, dynamic=None):
    """Compile a Python function into a PyPTO kernel.

        @pypto.jit
        def f(x, w): ...
        @pypto.jit(fusion=True, backend="interp", tiles={"m": 64, "n": 64, "k": 64})
        def g(...): ...
        @pypto.jit(alignment=64)   # array arguments whose address is not a multiple of 64 raise
        def h(...): ...
        @pypto.jit(profile=True)   # every call runs the profiling variant: per-nest times
        def p(...): ...
        @pypto.jit(autotune=True)  # matmul tile sizes tuned per shape, the choice kept in the cache
        def t(...): ...
        @pypto.jit(backend="sim", sim_target={"machine.cores": 8})  # the simulated NPU
        def s(...): ...            # s.last_sim_report(): cycles, pipes, bytes, timeline
        compute = pypto.jit(self._compute)   # bound methods work: self.* arrays are implicit inputs
        @pypto.jit(dynamic=True)   # every dim a symbol: one kernel for all shapes (of this rank)
        @pypto.jit(dynamic={"x": [0]})   # dim 0 of x is dynamic; dynamic=False: one kernel per shape
    By default a dim seen with a second extent is recompiled once as dynamic (automatic dynamic).
    fusion: None (the default) fuses chains of elementwise, reduction and row-wise ops but not
    matmul or conv2d; True fuses everything the rules allow; a list fuses exactly the named kinds;
    False only within one composite op; "off" nothing.
    """
    def wrap(f):
        k = JitFunction(f, fusion=fusion, backend=backend, tiles=tiles, parallel=parallel,
                        double_buffer=double_buffer, promote=promote, alignment=alignment, profile=profile,
                        sim_target=sim_target, dynamic=dynamic)
        if autotune:
            return Autotuned(k, configs=None)
        return k
    if fn is None:
        return wrap
    return wrap(fn)
