"""The crash-isolated side of the fuzz suite (see fuzz_isa.py): a process that reads one JSON
request per line on stdin and answers one JSON line per request on stdout. If an input kills it
(a segfault, an abort) or hangs it, only this process dies; the parent records the input and
starts a new worker.

Requests:
  {"isa": TEXT, "seed": N, "compile": BOOL}   parse -> print -> parse (round trip) -> verify ->
      interpret on random extreme inputs -> (compile) CPU backend, compared with the interpreter
  {"kernel": SPEC, "seed": N}                 a random front-end kernel (kernel_chain below) on
      the interpreter and the CPU backend, against NumPy
Before each phase the worker writes {"phase": NAME}, so a hang is attributed to its phase.
Answers: {"outcome": "ok" | "rejected" | "bug", "detail": ...}; "rejected" is a PyptoError (or
MemoryError) with its message: the documented way to refuse an input."""
import json
import os
import re
import resource
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import pypto  # noqa: E402
from isa_edge_util import FLOATS, INTS, NP, edge_array, mismatch, wrap  # noqa: E402

MAX_RUN_ELEMENTS = 1 << 20  # programs touching more are parsed, printed and verified only
EXPECTED = (pypto.PyptoError, MemoryError)


def phase(name):
    sys.stdout.write(json.dumps({"phase": name}) + "\n")
    sys.stdout.flush()


def alloc_elements(text):
    total = 0
    for dims in re.findall(r":\s*\w+\[([0-9, ]*)\]", text):
        n = 1
        for d in dims.split(","):
            if d.strip():
                n *= int(d)
        total += n
    return total


def make_inputs(prog, rng):
    """Random extreme inputs; a dynamic dim (reported as DYNAMIC_BOUND) gets one small extent for
    the whole program, so dims sharing a symbol agree (other extent rules may refuse it)."""
    args = {}
    dyn = int(rng.integers(1, 40))
    for name, dtype, shape, is_output in prog.params:
        if is_output:
            continue
        shape = [dyn if n == pypto._C.DYNAMIC_BOUND else n for n in shape]
        dt = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}.get(str(dtype), str(dtype))
        if dt in NP and dt != "bool":
            args[name] = edge_array(rng, dt, tuple(shape), frac=0.2)
        elif dt in ("bool", "uint8"):
            args[name] = (rng.random(tuple(shape)) < 0.5).astype(np.uint8)
        elif dt in ("f16", "float16"):
            args[name] = rng.standard_normal(tuple(shape)).astype(np.float16)
        else:
            return None  # bf16 has no NumPy type: not run
    for name, dtype in prog.scalars:
        dt = str(dtype)
        if "f" in dt:
            args[name] = float(rng.choice([0.5, -2.0, 1e30, float("inf"), float("nan"), 3.0]))
        else:
            args[name] = int(rng.choice([0, 1, 3, 7, -1, 64]))
    return args


SUMMING = re.compile(r"SUM|MATMUL|SCAN|CONV|NORM|SOFTMAX")


def summed_buffers(text):
    """Buffers holding (or computed from) a sum of products: an instruction whose opcode sums
    writes one, and any instruction reading one writes one (flow-insensitive, to a fixed point)."""
    instrs = []
    for line in text.splitlines():
        m = re.match(r"\s*([A-Z][A-Z0-9_]*)\s+%([\w.]+)(.*)", line)
        if m:
            instrs.append((m.group(1), m.group(2), set(re.findall(r"%([\w.]+)", m.group(3)))))
    out = {dst for op, dst, _ in instrs if SUMMING.search(op)}
    grown = True
    while grown:
        grown = False
        for _op, dst, srcs in instrs:
            if dst not in out and srcs & out:
                out.add(dst)
                grown = True
    return out


def sum_bound(prog, args):
    """Each output element's bound on its summands' magnitudes: the program interpreted on the
    inputs' absolute values (a float sum's rounding error is relative to that, not to the sum)."""
    absolute = {k: (np.abs(v) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else
                    (v.copy() if isinstance(v, np.ndarray) else v)) for k, v in args.items()}
    try:
        return pypto.isa.run(prog, absolute, backend="interp")
    except EXPECTED:
        return {}


def check_isa(req):
    text, rng = req["isa"], np.random.default_rng(req["seed"])
    phase("parse")
    try:
        prog = pypto.isa.parse(text)
    except EXPECTED as e:
        return {"outcome": "rejected", "detail": f"parse: {e}"[:200]}
    phase("print")
    printed = pypto.isa.print(prog)
    again = pypto.isa.parse(printed)
    if again != prog or pypto.isa.print(again) != printed:
        return {"outcome": "bug", "detail": "print/parse round trip changed the program"}
    phase("verify")
    try:
        pypto.isa.verify(prog, level="tile")
    except EXPECTED as e:
        return {"outcome": "rejected", "detail": f"verify: {e}"[:200]}
    if alloc_elements(printed) > MAX_RUN_ELEMENTS:
        return {"outcome": "ok", "detail": "verified (too large to run)"}
    args = make_inputs(prog, rng)
    if args is None:
        return {"outcome": "ok", "detail": "verified (bf16: not run)"}
    phase("interpret")
    try:
        ref = pypto.isa.run(prog, {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()},
                            backend="interp")
    except EXPECTED as e:
        return {"outcome": "rejected", "detail": f"interpret: {e}"[:200]}
    if not req.get("compile"):
        return {"outcome": "ok", "detail": "interpreted"}
    phase("compile")
    try:
        got = pypto.isa.run(prog, args, backend="cpu")
    except EXPECTED as e:  # the interpreter accepted it: the CPU backend must too
        return {"outcome": "bug", "detail": f"cpu refused what the interpreter ran: {e}"[:300]}
    summed, bound = summed_buffers(printed), None
    for name, want in ref.items():
        # f16 compares as f32 does (its values are exact in f32; NaN where neither wrote is equal).
        dt = {np.float16: "f32", np.float32: "f32", np.float64: "f64", np.int32: "i32",
              np.int64: "i64"}.get(want.dtype.type, "x")
        bad = mismatch(got[name], want, dt, 1e-3)
        if dt in FLOATS and len(bad):  # tolerance: the CPU computes f32 in f32, sums in its own order
            w = np.abs(want[np.isfinite(want)].astype(np.float64))
            scale = float(w.max()) if w.size else 0.0
            g, r = got[name][tuple(bad.T)].astype(np.float64), want[tuple(bad.T)].astype(np.float64)
            with np.errstate(all="ignore"):
                allowed = (np.abs(g - r) <= 1e-4 * scale) | (np.isnan(g) & np.isnan(r))
                if dt == "f32":
                    # Where the interpreter's double-precision sum is infinite, an f32 partial sum
                    # (or product) may overflow to the other infinity first, and inf - inf is NaN:
                    # 3.4e38 * 1.0026 + (-inf) is -inf in double, NaN in f32 (docs/isa.md §2).
                    allowed |= np.isinf(r) & ~np.isfinite(g)
                if name in summed and not allowed.all():
                    # An f32 sum in another order may lose or keep any term below its partial
                    # sums' magnitude: 1e30 beside -3.4e38 and 3.4e38 gives 0 in f32 (docs/isa.md
                    # §2); its error bound is relative to the sum of the terms' magnitudes.
                    bound = sum_bound(prog, args) if bound is None else bound
                    if name in bound:
                        b = bound[name][tuple(bad.T)].astype(np.float64)
                        allowed |= ~np.isfinite(b) | (np.abs(g - r) <= 1e-4 * b)
            bad = bad[~allowed]
        if len(bad):
            i = tuple(bad[0])
            return {"outcome": "bug", "detail": f"interp/cpu disagree on {name}{list(i)}: cpu {got[name][i]!r}, "
                                                f"interp {want[i]!r}"}
    return {"outcome": "ok", "detail": "compiled and compared"}


# ---- random front-end kernels ----------------------------------------------------------------
INT_OPS = ("add", "sub", "mul", "maximum", "minimum", "neg", "abs", "where", "rowsum", "scale")
FLOAT_OPS = INT_OPS + ("tanh", "sigmoid", "relu", "softmax", "exp_small", "gelu")


def kernel_chain(x, y, ops):
    z = x
    for op in ops:
        if op == "add":
            z = z + y
        elif op == "sub":
            z = y - z
        elif op == "mul":
            z = z * y
        elif op == "maximum":
            z = pypto.maximum(z, y)
        elif op == "minimum":
            z = pypto.minimum(z, y)
        elif op == "neg":
            z = -z
        elif op == "abs":
            z = pypto.abs(z)
        elif op == "where":
            z = pypto.where(z > y, z, y)
        elif op == "rowsum":
            z = z.sum(-1, keepdim=True) + y
        elif op == "scale":
            z = z * 3 + 1
        elif op == "tanh":
            z = pypto.tanh(z)
        elif op == "sigmoid":
            z = pypto.sigmoid(z)
        elif op == "relu":
            z = pypto.relu(z)
        elif op == "softmax":
            z = pypto.softmax(z, dim=-1)
        elif op == "exp_small":
            z = pypto.exp(pypto.tanh(z))
        elif op == "gelu":
            z = pypto.gelu(z)
    return z


def chain_reference(x, y, ops, dt):
    """NumPy: integers exactly (wrapped to the result's width), floats in float64."""
    from math import erf
    integer = dt in INTS
    z = x.astype(object) if integer else x.astype(np.float64)
    y = y.astype(object) if integer else y.astype(np.float64)
    width = dt

    def w(a):
        return np.vectorize(lambda v: wrap(int(v), width), otypes=[object])(a) if integer else a
    for op in ops:
        if op == "add":
            z = w(z + y)
        elif op == "sub":
            z = w(y - z)
        elif op == "mul":
            z = w(z * y)
        elif op == "maximum":
            z = np.maximum(z, y)
        elif op == "minimum":
            z = np.minimum(z, y)
        elif op == "neg":
            z = w(-z)
        elif op == "abs":
            z = w(np.abs(z))
        elif op == "where":
            z = np.where(z > y, z, y)
        elif op == "rowsum":
            if integer:  # an integer sum is int64 (as NumPy's): wrapped at 64 bits, then the add
                width = "i64"
            z = w(w(z.sum(-1, keepdims=True)) + y)
        elif op == "scale":
            z = w(z * 3 + 1)
        elif op == "tanh":
            z = np.tanh(z)
        elif op == "sigmoid":
            z = 1 / (1 + np.exp(-z))
        elif op == "relu":
            z = np.maximum(z, 0)
        elif op == "softmax":
            e = np.exp(z - z.max(-1, keepdims=True))
            z = e / e.sum(-1, keepdims=True)
        elif op == "exp_small":
            z = np.exp(np.tanh(z))
        elif op == "gelu":
            z = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(z)
    return z, width


_kernels = {}


def check_kernel(req):
    spec, rng = req["kernel"], np.random.default_rng(req["seed"])
    dt, ops, rows, cols, opts = spec["dtype"], tuple(spec["ops"]), spec["rows"], spec["cols"], spec["options"]
    if dt in INTS:
        x = edge_array(rng, dt, (rows, cols), frac=0.3)
        y = edge_array(rng, dt, (rows, cols), frac=0.3)
    else:
        x = rng.standard_normal((rows, cols)).astype(NP[dt])
        y = rng.uniform(0.5, 1.5, (rows, cols)).astype(NP[dt])
    want, wdt = chain_reference(x, y, ops, dt)
    outs = {}
    for backend in ("interp", "cpu"):
        key = (backend, json.dumps(opts, sort_keys=True))
        if key not in _kernels:
            _kernels[key] = pypto.jit(kernel_chain, backend=backend, **opts)
        phase(f"kernel-{backend}")
        try:
            outs[backend] = np.asarray(_kernels[key](x, y, ops))
        except EXPECTED as e:
            return {"outcome": "bug", "detail": f"{backend} refused a valid kernel {spec}: {e}"[:300]}
    for backend, got in outs.items():
        if dt in INTS:
            exp = np.array(want, dtype=NP[wdt]) if np.ndim(want) else want
            if got.shape != exp.shape or not (got == exp).all():
                return {"outcome": "bug", "detail": f"{backend} != exact integer reference for {spec}"}
        else:
            err = float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30))
            if not err < (1e-4 if dt == "f32" else 1e-10):
                return {"outcome": "bug", "detail": f"{backend} relative error {err:.3g} for {spec}"}
    return {"outcome": "ok", "detail": "kernel"}


def main():
    limit = 6 << 30  # an input that asks for huge memory gets MemoryError here, not the OOM killer
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = check_isa(req) if "isa" in req else check_kernel(req)
        except Exception as e:  # anything but the documented errors is a finding
            res = {"outcome": "bug", "detail": f"{type(e).__name__}: {e}"[:300]}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
