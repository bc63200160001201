"""The fuzz suite's driver: a corpus of valid ISA programs, text mutations chosen by a caller-given
`choose(n)` (hypothesis draws it in tests/python/test_fuzz.py), and a crash-isolated worker
process (fuzz_worker.py) that runs each input through parse, print, verify, the interpreter and,
for some inputs, the CPU backend. A worker that dies or hangs is recorded and replaced.

`make fuzz` runs test_fuzz.py with PYPTO_FUZZ_INPUTS (default 10,000 there) new inputs; the
summary of the last long run is in docs/testing.md."""
import json
import os
import re
import select
import subprocess
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# ---- corpus -----------------------------------------------------------------------------------
def corpus():
    """Valid programs: every ```pto example of docs/isa.md and the all-instructions edge programs."""
    from isa_edge_util import program_text
    with open(os.path.join(ROOT, "docs", "isa.md"), encoding="utf-8") as f:
        docs = f.read()
    progs = re.findall(r"```pto\n(.*?)```", docs, flags=re.S)
    progs += [program_text(dt)[0] for dt in ("f32", "f64", "i32", "i64")]
    progs.append(LOOP_PROGRAM)
    return progs


LOOP_PROGRAM = """func @loops(%x: f32[37, 70], %n: i64, %y: f32[37, 70] out, %s: f32[37, 1] out) {
  parallel for %i = 0 to 37 step 16 {
    alloc %t: f32[16, 32] vec
    alloc %r: f32[16, 1] vec
    alloc %acc: f32[16, 1] vec
    TEXPANDS %acc, 0.0f
    for %j = 0 to 70 step 32 {
      let %cols = min(32, (70 - %j))
      TLOAD %t, %x[%i:16 valid min(16, (37 - %i)), %j:32 valid %cols]
      if (%n < 3) {
        TGELU %t, %t
      } else {
        TMUL %t, %t, cast<f32>(%n)
      }
      TROWSUM %r, %t
      TADD %acc, %acc, %r
      TSTORE %y[%i:16 valid min(16, (37 - %i)), %j:32 valid %cols], %t
    }
    TSTORE %s[%i:16 valid min(16, (37 - %i)), 0:1], %acc
  }
}
"""

# ---- mutations --------------------------------------------------------------------------------
TOKENS = ["0", "1", "-1", "7", "64", "2147483647", "-2147483648", "2147483648", "9223372036854775807",
          "-9223372036854775808", "4611686018427387904", "1e308", "1e-320", "nan", "inf", "-inf", "nanf",
          "inff", "2.5", "-0.0f", "%x", "%t", "%i", "%y", "%nope", "f32", "f64", "i32", "i64", "f16", "bf16",
          "bool", "vec", "mat", "acc", "gm", "in", "out", "temp", "{", "}", "(", ")", "[", "]", ",", ":", "valid",
          "step", "perm(1, 0)", "perm(0)", "min(", "max(", "select(", "cast<i32>(", "sqrt(", "//", "%", "/",
          "&&", "||", "!", "<", "<=", "==", "for", "parallel", "if", "else", "let", "alloc", "seq", "TLOAD",
          "TSTORE", "TADD", "TDIV", "TCVT", "TMATMUL", "TROWSUM", "TGATHER", "TSCATTER", "TEXTRACT", "TRESHAPE",
          "TTRANS", "TFILLPAD", "TSEL", "WAIT_FLAG", "SET_FLAG", "PIPE_BARRIER", "#", "\"", "\\", "@", "é",
          "\x00", "\t", "\n"]
TOKEN_RE = re.compile(r"%[\w.]+|@[\w.]+|[A-Za-z_][\w]*|-?\d+(?:\.\d*)?(?:e-?\d+)?f?|//|<=|>=|==|!=|&&|\|\||\S")


OPCODES = ["TADD", "TSUB", "TMUL", "TDIV", "TMAX", "TMIN", "TPOW", "TAND", "TOR", "TCMP_LT", "TCMP_EQ", "TCMP_NE",
           "TNEG", "TABS", "TEXP", "TLOG", "TSQRT", "TRSQRT", "TRECIP", "TRELU", "TTANH", "TSIGMOID", "TERF",
           "TGELU", "TGELU_TANH", "TSILU", "TFLOOR", "TNOT", "TMOV", "TCVT", "TROWSUM", "TROWMAX", "TCOLMIN",
           "TROWEXPAND", "TCOLEXPAND", "TTRANS", "TRESHAPE", "TFILLPAD", "TEXPANDS", "TCI", "TMATMUL",
           "TMATMUL_ACC", "TSEL", "TGATHER", "TSCATTER", "TEXTRACT", "TINSERT", "TLOAD", "TSTORE", "TPREFETCH"]
CLASSES = [
    (re.compile(r"-?\d+"), ["0", "1", "2", "3", "-1", "4", "16", "33", "64", "65", "1000", "2147483647",
                            "2147483648", "-2147483648", "9223372036854775807", "4611686018427387904"]),
    (re.compile(r"-?\d+\.\d*(e-?\d+)?f?|-?\d+e-?\d+f?|nanf?|inff?"),
     ["0.0", "-0.0f", "2.5f", "1e300", "-1e-320", "nan", "nanf", "inf", "-inf", "inff", "3e9f", "0.5"]),
    (re.compile(r"T[A-Z_]+"), OPCODES),
    (re.compile(r"f32|f64|f16|bf16|i32|i64|bool"), ["f32", "f64", "f16", "bf16", "i32", "i64", "bool"]),
    (re.compile(r"vec|mat|acc|gm"), ["vec", "mat", "acc", "gm"]),
    (re.compile(r"min|max"), ["min", "max"]),
    (re.compile(r"//|<=|>=|==|!=|&&|\|\||[-+*/%<>]"), ["+", "-", "*", "//", "%", "<", "<=", "==", "!=", "&&"]),
]


def mutate(text, choose, rounds=None):
    """Applies 1 or 2 random edits to `text`; choose(n) picks an integer in [0, n). Most edits keep
    the text parseable (a token replaced by another of its kind, lines moved), so most inputs go
    on to the verifier and the interpreter; some break the syntax or the encoding on purpose."""
    n_edits = 1 + choose(2) if rounds is None else rounds
    for _ in range(n_edits):
        toks = [(m.start(), m.end()) for m in TOKEN_RE.finditer(text)]
        lines = text.split("\n")
        kind = choose(16)
        if kind <= 8 and toks:  # a token replaced by another of its kind (names: another name in the text)
            s, e = toks[choose(len(toks))]
            tok = text[s:e]
            if tok[0] == "%":
                names = sorted(set(re.findall(r"%[\w.]+", text)))
                text = text[:s] + names[choose(len(names))] + text[e:]
            else:
                for pattern, options in CLASSES:
                    if pattern.fullmatch(tok):
                        text = text[:s] + options[choose(len(options))] + text[e:]
                        break
        elif kind <= 10 and len(lines) > 2:  # delete / duplicate / swap lines
            i, j = choose(len(lines)), choose(len(lines))
            op = choose(3)
            if op == 0:
                del lines[i]
            elif op == 1:
                lines.insert(j, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == 11 and toks:  # any token for any other
            s, e = toks[choose(len(toks))]
            text = text[:s] + TOKENS[choose(len(TOKENS))] + text[e:]
        elif kind == 12 and toks:  # delete or insert a token
            s, e = toks[choose(len(toks))]
            text = text[:s] + text[e:] if choose(2) else text[:s] + TOKENS[choose(len(TOKENS))] + " " + text[s:]
        elif kind == 13 and len(lines) > 2:  # wrap a line in (deep) nesting
            i, depth = 1 + choose(len(lines) - 2), [2, 20, 199, 201, 5000][choose(5)]
            lines[i] = "seq { " * depth + lines[i] + " }" * depth
            text = "\n".join(lines)
        elif kind == 14:  # truncate
            text = text[:choose(len(text) + 1)]
        else:  # splice in a character that is not ASCII
            pos = choose(len(text) + 1)
            text = text[:pos] + chr(0x80 + choose(0x780)) + text[pos:]
    return text


# ---- the crash-isolated worker ----------------------------------------------------------------
class Worker:
    """One fuzz_worker.py process; run() sends a request and returns its answer, or a crash/hang
    record when the process dies or does not answer within `timeout` seconds."""

    def __init__(self, timeout=60.0, env=None):
        self.timeout, self.env, self.proc = timeout, env, None
        self.restarts = 0

    def _start(self):
        env = dict(os.environ, **(self.env or {}))
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE, env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fuzz_worker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.buf = b""  # our own line buffer: select() cannot see lines already read into Python's

    def close(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, req):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: the read below reports it
        phase, deadline = "start", time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while True:
            if b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if not select.select([fd], [], [], max(left, 0))[0]:
                    self.close()
                    self.restarts += 1
                    # A long interpretation (a loop to 10^18) is slow, not stuck; elsewhere a hang.
                    slow = phase in ("interpret", "compile") or phase.startswith("kernel")
                    return {"outcome": "slow" if slow else "hang", "detail": f"no answer in phase {phase}"}
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    rc = self.proc.wait()
                    self.proc = None
                    self.restarts += 1
                    return {"outcome": "crash", "detail": f"worker died (exit {rc}) in phase {phase}"}
                self.buf += chunk
                continue
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line)
            if "phase" in msg:
                phase = msg["phase"]
                continue
            return msg


class Tally:
    """Outcome counts and the inputs behind every finding."""

    def __init__(self):
        self.counts, self.findings, self.phases = Counter(), [], Counter()

    def add(self, req, res):
        self.counts[res["outcome"]] += 1
        if res["outcome"] in ("ok", "rejected"):  # how far inputs got: the stage that refused them
            self.phases[res["outcome"] + " at " + res.get("detail", "").split(":")[0].split(" (")[0]] += 1
        if res["outcome"] in ("bug", "crash", "hang"):
            self.findings.append((res, req))

    def summary(self):
        return (", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items())) + " (" +
                ", ".join(f"{k}: {v}" for k, v in sorted(self.phases.items())) + ")")
