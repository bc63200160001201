"""The PTO ISA text form, as a Python API: parse, print, verify and run tile-level programs.

    prog = pypto.isa.parse(text)          # a Program (raises pypto.PyptoError on bad text)
    pypto.isa.print(prog)                 # its text form (== text for printer-made text)
    pypto.isa.verify(prog, level="tile")
    outs = pypto.isa.run(prog, {"x": x_np, "n": 5}, backend="interp")   # {"out": ndarray}

Thin by design: all semantics live in the C++ core (src/backends/interp is the reference).
"""
import builtins as _builtins

import numpy as _np

from . import _C

Program = _C.Program

__all__ = ["Program", "parse", "print", "to_text", "verify", "run", "opcode_names"]


def parse(text):
    """Parse the ISA/IR text form (a str, or UTF-8 bytes) into a Program."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _C.PyptoError(f"the ISA text is not valid UTF-8 (byte 0x{e.object[e.start]:02X} at offset "
                                f"{e.start})") from None
    elif not isinstance(text, str):
        raise TypeError(f"pypto.isa.parse takes a str or bytes, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates, e.g. from errors="surrogateescape"
        raise _C.PyptoError(f"the ISA text is not valid UTF-8 (character {text[e.start]!r} at offset "
                            f"{e.start})") from None
    return _C.parse_program(text)


def to_text(program):
    """The text form of a Program (parse(to_text(p)) is structurally equal to p)."""
    return program.text()


def print(program, file=None):  # noqa: A001 - mirrors the C++ ir::print
    """Return the text form of a program; with file=..., also write it there."""
    text = program.text()
    if file is not None:
        _builtins.print(text, end="", file=file)
    return text


def verify(program, level="tile"):
    """Check the program's invariants at level "tensor" or "tile"; raises PyptoError."""
    _C.verify(program, level)


def opcode_names():
    """Every opcode of the PTO ISA, in table order."""
    return list(_C.opcode_names())


_NP_DTYPES = {"f32": _np.float32, "f64": _np.float64, "f16": _np.float16,
              "i32": _np.int32, "i64": _np.int64, "bool": _np.bool_,
              "i8": _np.int8, "u8": _np.uint8, "i16": _np.int16}


def _poisoned(dtype, shape):
    """An output buffer whose unwritten elements show: NaN for floats, a sentinel for ints."""
    if dtype == "bf16":
        import torch  # NumPy has no bfloat16

        return torch.full(tuple(shape), float("nan"), dtype=torch.bfloat16)
    npt = _NP_DTYPES[dtype]
    if dtype in ("f32", "f64", "f16"):
        return _np.full(shape, _np.nan, dtype=npt)
    if dtype == "bool":
        return _np.zeros(shape, dtype=npt)
    return _np.full(shape, _np.iinfo(npt).min, dtype=npt)


def _to_numpy(a):
    if isinstance(a, _np.ndarray):
        return a
    import torch

    if a.dtype == torch.bfloat16:
        a = a.float()
    return a.detach().cpu().numpy()


def run(program, inputs=None, backend="interp"):
    """Run a tile-level program; returns {output param name: numpy array}.

    inputs maps each input param's name to an array (NumPy, or torch on the CPU), passed without
    copying, and each scalar param's name to an int or float. Output params are allocated here,
    NaN-filled (floats) so any element the program does not write stays visible.
    """
    inputs = dict(inputs or {})
    tensors, outputs = [], {}
    params = program.params
    out_shapes = None
    if any(n == _C.DYNAMIC_BOUND for p in params for n in p[2]):  # dynamic dims: from the inputs
        given = [inputs.get(p[0]) for p in params if not p[3]]
        if all(g is not None for g in given):
            out_shapes = iter(program.output_shapes([list(g.shape) for g in given]))
    for name, dtype, shape, is_output in params:
        if is_output and out_shapes is not None:
            shape = next(out_shapes)
        if name in inputs:
            tensors.append(inputs.pop(name))
            if is_output:
                outputs[name] = tensors[-1]
        elif is_output:
            outputs[name] = _poisoned(dtype, shape)
            tensors.append(outputs[name])
        else:
            raise _C.PyptoError(f"run: no array given for param '{name}' of '{program.name}'")
    scalars = []
    for name, _dtype in program.scalars:
        if name not in inputs:
            raise _C.PyptoError(f"run: no value given for scalar param '{name}' of '{program.name}'")
        scalars.append(inputs.pop(name))
    if inputs:
        raise _C.PyptoError(f"run: '{program.name}' has no param named {sorted(inputs)}")
    if backend == "interp":
        _C.interpret(program, tensors, scalars)
    elif backend == "cpu":
        _C.cpu_run(program, tensors, scalars)
    else:
        raise _C.PyptoError(f"unknown backend '{backend}' (expected 'interp' or 'cpu')")
    return {name: _to_numpy(a) for name, a in outputs.items()}
