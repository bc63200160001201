"""Numbers are written and read independently of the C locale: under a decimal-comma locale
(de_DE, built here with localedef so the test can fail) the literal 2.5 stays `2.5` in the
generated C++ and in the ISA text, and kernels compute the same values."""
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent('''
    import locale, sys
    import numpy as np
    import pypto

    locale.setlocale(locale.LC_ALL, "de_DE.UTF-8")
    assert locale.localeconv()["decimal_point"] == ",", "the decimal-comma locale is not active"
    assert "%s" % locale.format_string("%.1f", 2.5) == "2,5"

    @pypto.jit
    def scale(x):
        return x * 2.5 + 0.125

    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(scale(x), x * np.float32(2.5) + np.float32(0.125), rtol=1e-6)
    text = scale.lower(x).as_text("isa")
    assert "2.5" in text and "2,5" not in text, text
    prog = pypto.isa.parse(text)
    assert pypto.isa.print(prog) == text
    assert pypto.isa.parse(pypto.isa.print(prog)) == prog

    isa = """func @f(%x: f32[2, 3], %y: f32[2, 3] out) {
      alloc %t: f32[2, 3] vec
      TLOAD %t, %x
      TMUL %t, %t, 2.5f
      TADD %t, %t, 1e-3f
      TSTORE %y, %t
    }"""
    p = pypto.isa.parse(isa)
    assert "2.5f" in pypto.isa.print(p) and "0.001f" in pypto.isa.print(p)
    ones = np.ones((2, 3), np.float32)
    for backend in ("interp", "cpu"):
        y = pypto.isa.run(p, {"x": ones}, backend=backend)["y"]
        np.testing.assert_allclose(y, 2.501, rtol=1e-6)
    print("ok")
''')


@pytest.fixture(scope="module")
def locale_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("locale")
    r = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(d / "de_DE.UTF-8")],
                       capture_output=True, text=True)
    if not (d / "de_DE.UTF-8").exists():
        pytest.fail(f"localedef could not build de_DE.UTF-8 (needed for this test): {r.stderr}")
    return d


def test_decimal_comma_locale(locale_dir, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, LOCPATH=str(locale_dir), PYPTO_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
