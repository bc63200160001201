"""The documentation's examples run as written.

For every page in docs/*.md:
  * the ```python blocks run in order in one namespace per page (each example asserts its own
    results against NumPy); a block preceded by the HTML comment `<!-- no-test -->` is skipped;
  * the ```pto blocks (complete PTO ISA programs) parse, verify at the tile level, print back
    to the same program, and run on the reference interpreter with random inputs; where a C++
    compiler is available they also run on the CPU backend, which must agree with the
    interpreter.
"""
import pathlib
import re

import numpy as np
import pytest

import pypto
import pypto.isa
from pypto_testutil import requires_compiler

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
NO_TEST = "<!-- no-test -->"


def blocks(page, lang):
    """(first line number, source) of every ```lang block of a page not marked no-test."""
    out = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    prev = ""  # the last non-blank line before the current one
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)```(\w*)\s*$", line)
        if not m:
            if line.strip():
                prev = line.strip()
            i += 1
            continue
        indent, fence_lang = m.group(1), m.group(2)
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        if fence_lang == lang and prev != NO_TEST:
            out.append((start + 1, "\n".join(body) + "\n"))
        prev = "```"
    return out


def page_id(page):
    return page.name


PY_PAGES = [p for p in PAGES if blocks(p, "python")]


@pytest.mark.parametrize("page", PY_PAGES, ids=page_id)
def test_python_examples(page, tmp_path, monkeypatch):
    """All python blocks of a page, in order, sharing one namespace.

    @pypto.jit reads a kernel's source from its file, so each block is written to a file of its
    own, padded with blank lines so that its line numbers are those of the page."""
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    for name in ("PYPTO_INTERPRET", "PYPTO_LOG_LEVEL", "PYTO_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    ns = {"__name__": f"docs_{page.stem}"}
    for line, src in blocks(page, "python"):
        path = tmp_path / f"{page.stem}_md_line{line}.py"
        path.write_text("\n" * (line - 1) + src, encoding="utf-8")
        code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
        try:
            exec(code, ns)
        except Exception as e:  # name the block that failed
            raise AssertionError(f"example at {page.name} line {line} failed: {type(e).__name__}: {e}") from e


# --- PTO ISA programs ---------------------------------------------------------------------------

PTO_BLOCKS = [(p, line, src) for p in PAGES for line, src in blocks(p, "pto")]
NP_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
             "i64": np.int64, "bool": np.bool_}


def random_inputs(prog, seed):
    """Positive floats (so log/sqrt examples stay finite), small non-negative ints (so index
    examples stay in range), random bools; integer scalars 3, float scalars 0.75."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, dtype, shape, is_output in prog.params:
        if is_output:
            continue
        shape = tuple(shape)
        if dtype in ("f32", "f64", "f16"):
            inputs[name] = rng.uniform(0.25, 2.0, shape).astype(NP_DTYPES[dtype])
        elif dtype in ("i32", "i64"):
            inputs[name] = rng.integers(0, 4, shape).astype(NP_DTYPES[dtype])
        elif dtype == "bool":
            inputs[name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            raise AssertionError(f"no random input for dtype {dtype}: teach random_inputs this dtype")
    for name, dtype in prog.scalars:
        inputs[name] = 0.75 if dtype.startswith("f") else 3
    return inputs


@pytest.mark.parametrize("page,line,src", PTO_BLOCKS, ids=[f"{p.name}:{n}" for p, n, _ in PTO_BLOCKS])
def test_pto_examples(page, line, src):
    prog = pypto.isa.parse(src)
    pypto.isa.verify(prog, level="tile")
    assert pypto.isa.parse(pypto.isa.print(prog)) == prog
    out = pypto.isa.run(prog, random_inputs(prog, line), backend="interp")
    assert set(out) == {name for name, _, _, is_output in prog.params if is_output}


@requires_compiler
@pytest.mark.isolated
@pytest.mark.parametrize("page,line,src", PTO_BLOCKS, ids=[f"{p.name}:{n}" for p, n, _ in PTO_BLOCKS])
def test_pto_examples_cpu_matches_interp(page, line, src):
    prog = pypto.isa.parse(src)
    inputs = random_inputs(prog, line)
    ref = pypto.isa.run(prog, dict(inputs), backend="interp")
    got = pypto.isa.run(prog, dict(inputs), backend="cpu")
    for name, want in ref.items():
        want, have = np.asarray(want, dtype=np.float64), np.asarray(got[name], dtype=np.float64)
        # Outputs start NaN-filled and the inputs hold no NaN: a NaN left is an element the program
        # did not write, which must not count as agreement (equal_nan would let an output neither
        # backend writes pass). Only where the example itself leaves a region unwritten (its
        # valid region is smaller than the output) do both backends have to leave the same NaNs.
        np.testing.assert_array_equal(np.isnan(have), np.isnan(want), err_msg=f"output {name}: written elements")
        assert not np.isnan(want).all(), f"output {name}: the example writes none of it"
        np.testing.assert_allclose(have[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6,
                                   err_msg=f"output {name}")
