"""ISA text round trip: hypothesis generates random tile-level programs as text, in the printer's
canonical spelling (loops, lets, ifs, allocs, instructions with random views and expressions).
For each: parse(text) prints back to the identical text, and re-parsing that text gives a
structurally equal program with the same structural hash."""
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_isa_util import _C, isa

OPS = _C.opcode_table()
DTYPES = ["f32", "f16", "bf16", "f64", "i32", "i64", "bool"]
PLAIN = re.compile(r"^[A-Za-z0-9_.]+$")


def tok(name):
    """A name as the printer spells it: plain, or quoted with \\ escapes."""
    if PLAIN.match(name):
        return "%" + name
    return '%"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shortest(v):
    """The printer's float spelling: the shortest %g that reads back, with '.0' if it has no '.'
    or exponent (all generated values are exact in f32, so f32 and f64 agree)."""
    for prec in range(1, 18):
        s = "%.*g" % (prec, v)
        if float(s) == v:
            break
    return s if ("." in s or "e" in s) else s + ".0"


class Gen:
    """Draws one program. Scopes track what each block may use: i64 vars, float vars (by dtype),
    global buffers and local tiles (name -> shape)."""

    def __init__(self, draw):
        self.draw = draw
        self.count = 0
        self.budget = 40  # statements in the whole program

    def pick(self, xs):
        return self.draw(st.sampled_from(xs))

    def chance(self, p):
        return self.draw(st.floats(0, 1)) < p

    def new_name(self, prefix):
        self.count += 1
        style = self.draw(st.integers(0, 9))
        if style == 0:
            return f"{prefix} {self.count}"  # needs quoting
        if style == 1:
            return f'{prefix}"q\\{self.count}'  # quotes and backslashes escaped
        if style == 2:
            return f"{prefix}.{self.count}_x"
        return f"{prefix}{self.count}"

    # ---- expressions ----------------------------------------------------------------------------

    def int_lit(self):
        return str(self.draw(st.integers(-100, 300)))

    def int_expr(self, sc, depth=2):
        leaves = [self.int_lit] + ([lambda: tok(self.pick(sc["int"]))] if sc["int"] else [])
        if depth == 0 or self.chance(0.4):
            return self.pick(leaves)()
        k = self.draw(st.integers(0, 4))
        a, b = self.int_expr(sc, depth - 1), self.int_expr(sc, depth - 1)
        if k == 0:
            return f"({a} {self.pick(['+', '-', '*', '//', '%'])} {b})"
        if k == 1:
            return f"{self.pick(['min', 'max'])}({a}, {b})"
        if k == 2:
            return f"select({self.cond(sc, depth - 1)}, {a}, {b})"
        if k == 3 and sc["float"]["f32"]:
            return f"cast<i64>({self.not_literal(self.fexpr(sc, 'f32', depth - 1))})"
        return f"({a} + {b})"

    def cond(self, sc, depth=1):
        k = self.draw(st.integers(0, 3))
        if k <= 1 or depth == 0:
            return f"({self.int_expr(sc, 1)} {self.pick(['<', '<=', '==', '!='])} {self.int_expr(sc, 1)})"
        if k == 2:
            return f"({self.cond(sc, depth - 1)} {self.pick(['&&', '||'])} {self.cond(sc, depth - 1)})"
        return "!" + self.cond(sc, depth - 1)

    def float_lit(self, dt):
        v = self.draw(st.integers(-800, 800)) / 8
        body = self.pick([shortest(v), shortest(v), "inf", "nan"] if dt == "f64" else [shortest(v)])
        return body + ("f" if dt == "f32" else "")

    @staticmethod
    def not_literal(e):
        """`cast<T>(literal)` spells a constant of type T (printed as such), so casts get an
        operand that is not a bare literal."""
        return e if e.startswith(("(", "%", "min", "max", "select", "cast", "sqrt", "exp", "log", "!")) \
            else f"({e} + {e})"

    def fexpr(self, sc, dt, depth=2):
        leaves = [lambda: self.float_lit(dt)] + ([lambda: tok(self.pick(sc["float"][dt]))]
                                                  if sc["float"][dt] else [])
        if depth == 0 or self.chance(0.4):
            return self.pick(leaves)()
        k = self.draw(st.integers(0, 3))
        a, b = self.fexpr(sc, dt, depth - 1), self.fexpr(sc, dt, depth - 1)
        if k == 0:
            return f"({a} {self.pick(['+', '-', '*', '/'])} {b})"
        if k == 1:
            return f"{self.pick(['min', 'max'])}({a}, {b})"
        if k == 2:
            return f"cast<{dt}>({self.not_literal(self.int_expr(sc, depth - 1))})"
        return f"{self.pick(['sqrt', 'exp', 'log'])}({a})"

    def scalar(self, sc):
        if self.chance(0.5):
            return self.int_expr(sc, 1)
        return self.fexpr(sc, self.pick(["f32", "f64"]), 1)

    # ---- views ----------------------------------------------------------------------------------

    def gview(self, sc):
        name = self.pick(sorted(sc["global"]))
        shape = sc["global"][name]
        if self.chance(0.2):
            return tok(name)
        specs, window = [], []
        for d, n in enumerate(shape):
            off = self.int_expr(sc, 1) if self.chance(0.5) else str(self.draw(st.integers(0, n - 1)))
            if len(shape) > 1 and self.chance(0.2):
                specs.append(off)  # an indexed, dropped dim
                continue
            size = self.draw(st.integers(1, 64))
            s = f"{off}:{size}"
            step = self.draw(st.integers(1, 3)) if self.chance(0.2) else 1
            if step != 1:
                s += f" step {step}"
            if self.chance(0.5):
                s += f" valid min({size}, ({n} - {self.int_expr(sc, 1)}))"
            specs.append(s)
            window.append(d)
        text = f"{tok(name)}[{', '.join(specs)}]"
        if len(window) > 1 and self.chance(0.3):
            perm = list(reversed(window))
            text += f" perm({', '.join(map(str, perm))})"
        if text == f"{tok(name)}[{', '.join(f'0:{n}' for n in shape)}]":
            return tok(name)  # the whole buffer prints as its bare name
        return text

    def tile(self, sc):
        return tok(self.pick(sorted(sc["tile"])))

    def tile_or_scalar(self, sc):
        return self.tile(sc) if self.chance(0.6) else self.scalar(sc)

    def operands(self, sc, name, cat, n):
        t = lambda: self.tile(sc)  # noqa: E731
        if cat == "memory":
            return {"TLOAD": lambda: [t(), self.gview(sc)], "TSTORE": lambda: [self.gview(sc), t()],
                    "TPREFETCH": lambda: [self.gview(sc)], "MGATHER": lambda: [t(), self.gview(sc), t()],
                    "MSCATTER": lambda: [self.gview(sc), t(), t()],
                    "MSCATTER_ADD": lambda: [self.gview(sc), t(), t()],
                    "MMATMUL": lambda: [self.gview(sc) for _ in range(3)],
                    "MMATMUL_ACC": lambda: [self.gview(sc) for _ in range(3)]}[name]()
        if cat == "fill":
            return [t(), self.scalar(sc)]
        if cat in ("binary", "compare"):
            return [t(), self.tile_or_scalar(sc), self.tile_or_scalar(sc)]
        if cat == "select":
            return [t(), t(), self.tile_or_scalar(sc), self.tile_or_scalar(sc)]
        if cat == "sync":
            return [str(self.draw(st.integers(0, 5))) for _ in range(n)]
        if name in ("TEXTRACT", "TINSERT"):
            return [t(), t(), self.int_expr(sc, 1), self.int_expr(sc, 1)]
        if name == "TFILLPAD":
            return [t(), t(), self.scalar(sc)]
        return [t() for _ in range(n)]

    # ---- statements -----------------------------------------------------------------------------

    def block(self, sc, indent, depth):
        sc = {"int": list(sc["int"]), "float": {k: list(v) for k, v in sc["float"].items()},
              "global": dict(sc["global"]), "tile": dict(sc["tile"])}
        lines = []
        for _ in range(self.draw(st.integers(1, 5))):
            if self.budget <= 0:
                break
            self.budget -= 1
            lines += self.stmt(sc, indent, depth)
        return lines

    def stmt(self, sc, indent, depth):
        pad = "  " * indent
        kinds = ["op", "op", "op", "alloc", "let"] + (["for", "if", "seq"] if depth > 0 else [])
        if not sc["tile"]:
            kinds = ["alloc"]
        k = self.pick(kinds)
        if k == "alloc":
            name = self.new_name("t")
            if self.chance(0.2):
                shape = [self.draw(st.integers(1, 40)) for _ in range(self.draw(st.integers(1, 3)))]
                sc["global"][name] = shape
                return [f"{pad}alloc {tok(name)}: {self.pick(DTYPES)}[{', '.join(map(str, shape))}] gm"]
            r, c = self.draw(st.integers(1, 64)), self.draw(st.integers(1, 64))
            sc["tile"][name] = (r, c)
            kind = self.pick(["", "", "", " out", " in"])
            return [f"{pad}alloc {tok(name)}: {self.pick(DTYPES)}[{r}, {c}] {self.pick(['vec', 'mat', 'acc'])}{kind}"]
        if k == "let":
            name = self.new_name("v")
            if self.chance(0.6):
                line = f"{pad}let {tok(name)} = {self.int_expr(sc)}"
                sc["int"].append(name)
            else:
                dt = self.pick(["f32", "f64"])
                line = f"{pad}let {tok(name)} = {self.fexpr(sc, dt)}"
                sc["float"][dt].append(name)
            return [line]
        if k == "for":
            var = self.new_name("i")
            head = "parallel for" if self.chance(0.3) else "for"
            step = self.draw(st.integers(1, 64))
            line = f"{pad}{head} {tok(var)} = {self.int_expr(sc, 1)} to {self.int_expr(sc, 1)}"
            line += f" step {step} {{" if step != 1 else " {"
            inner = dict(sc, int=sc["int"] + [var])
            return [line] + self.block(inner, indent + 1, depth - 1) + [pad + "}"]
        if k == "if":
            out = [f"{pad}if {self.cond(sc)} {{"] + self.block(sc, indent + 1, depth - 1)
            orelse = self.block(sc, indent + 1, depth - 1) if self.chance(0.5) else []
            if orelse:  # an empty else block is not printed
                out += [pad + "} else {"] + orelse
            return out + [pad + "}"]
        if k == "seq":
            return [pad + "seq {"] + self.block(sc, indent + 1, depth - 1) + [pad + "}"]
        name, cat, n = self.pick(OPS)
        return [pad + name + " " + ", ".join(self.operands(sc, name, cat, n))]

    def program(self):
        sc = {"int": [], "float": {"f32": [], "f64": []}, "global": {}, "tile": {}}
        params = []
        for _ in range(self.draw(st.integers(1, 3))):
            name = self.new_name("x")
            shape = [self.draw(st.integers(1, 80)) for _ in range(self.draw(st.integers(1, 3)))]
            sc["global"][name] = shape
            kind = self.pick(["", " out"])
            params.append(f"{tok(name)}: {self.pick(DTYPES)}[{', '.join(map(str, shape))}]{kind}")
        for _ in range(self.draw(st.integers(0, 2))):
            name = self.new_name("s")
            dt = self.pick(["i64", "f32", "f64"])
            (sc["int"] if dt == "i64" else sc["float"][dt]).append(name)
            params.append(f"{tok(name)}: {dt}")
        body = self.block(sc, 1, 3)
        return "func @k(" + ", ".join(params) + ") {\n" + "".join(b + "\n" for b in body) + "}\n"


@st.composite
def programs(draw):
    return Gen(draw).program()


@settings(max_examples=int(os.environ.get('PYPTO_HYPOTHESIS_EXAMPLES', 300)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_text_roundtrip(text):
    p = isa.parse(text)
    printed = isa.print(p)
    assert printed == text
    q = isa.parse(printed)
    assert isa.print(q) == printed
    assert _C.structural_equal(p, q)
    assert _C.structural_hash(p) == _C.structural_hash(q)


def test_roundtrip_detects_differences():
    a = isa.parse("func @k(%x: f32[4, 4]) {\n  alloc %t: f32[4, 4] vec\n  TLOAD %t, %x[0:4, 0:4 valid 3]\n}\n")
    b = isa.parse("func @k(%x: f32[4, 4]) {\n  alloc %t: f32[4, 4] vec\n  TLOAD %t, %x[0:4, 0:4 valid 2]\n}\n")
    assert not _C.structural_equal(a, b)
    assert a == isa.parse(isa.print(a)) and a != b


@pytest.mark.parametrize("bad", [
    "func @k(%x: f32[4, 4]) {\n  TLOAD %t, %x\n}\n",            # undeclared tile
    "func @k(%x: f32[4, 4]) {\n  TFOO %x\n}\n",                 # unknown opcode
    "func @k(%x: q32[4, 4]) {\n}\n",                            # unknown dtype
    "func @k(%x: f32[4, 4]) {\n  for %i = 0 to 4 {\n}\n",       # unbalanced
])
def test_parse_errors_name_the_line(bad):
    with pytest.raises(_C.PyptoError, match=r"line \d+"):
        isa.parse(bad)
