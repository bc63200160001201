"""Misuse raises pypto.PyptoError naming the problem and the kernel's source line; nothing
crashes the process or touches the caller's data."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pypto
from pypto_testutil import jit, poisoned, rand

HERE = os.path.basename(__file__)


def add_kernel(a, b):
    return a + b


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(pypto.PyptoError) as e:
        jit(add_kernel, "interp")(rand(3, 4), rand(5))
    msg = str(e.value)
    assert "(3, 4)" in msg and "(5,)" in msg
    # The exact line: an off-by-one line number would point at the `def`.
    assert f"{HERE}:{add_kernel.__code__.co_firstlineno + 1}:" in msg and "return a + b" in msg


def matmul_kernel(a, b):
    return a @ b


def test_matmul_inner_mismatch():
    with pytest.raises(pypto.PyptoError, match=r"\(4, 5\).*\(6, 2\)"):
        jit(matmul_kernel, "interp")(rand(4, 5), rand(6, 2))


def test_unsupported_dtype():
    with pytest.raises(pypto.PyptoError, match="complex"):
        jit(add_kernel, "interp")(np.ones((2, 2), np.complex64), np.ones((2, 2), np.complex64))
    with pytest.raises(pypto.PyptoError, match="uint16|dtype"):
        jit(add_kernel, "interp")(np.ones((2, 2), np.uint16), np.ones((2, 2), np.uint16))


def test_op_rejecting_a_dtype():
    with pytest.raises(pypto.PyptoError, match="bool"):
        jit(matmul_kernel, "interp")(np.ones((2, 2), np.bool_), np.ones((2, 2), np.bool_))


def two_d(A, B, C):
    M, K = A.shape
    C[...] = A @ B


def test_wrong_rank_names_the_line():
    with pytest.raises(pypto.PyptoError) as e:
        jit(two_d, "interp")(rand(4), rand(4, 4), poisoned(4, 4))
    msg = str(e.value)
    assert "unpack" in msg and "M, K = A.shape" in msg and f"{HERE}:{two_d.__code__.co_firstlineno + 1}:" in msg


def with_while(x):
    i = 0
    while i < 3:
        i += 1
    return x


def with_try(x):
    try:
        y = x + 1.0
    except ValueError:
        y = x
    return y


def with_lambda(x):
    f = lambda v: v * 2.0  # noqa: E731
    return f(x)


def with_global(x):
    global W_GLOBAL_ERR
    return x


def with_nested_def(x):
    def g(v):
        return v
    return g(x)


def with_star_kwargs_of_a_tensor(x):
    return pypto.add(x, **x)


def with_comprehension_over_tensor(x):
    return [r * 2.0 for r in x]


def with_del_tensor(x):
    y = x + 1.0
    del y
    return x


@pytest.mark.parametrize("kernel,what", [
    (with_while, "while"), (with_try, "try"), (with_lambda, "lambda"), (with_global, "global"),
    (with_nested_def, "nested function"), (with_star_kwargs_of_a_tensor, "**kwargs"),
    (with_comprehension_over_tensor, "comprehension"), (with_del_tensor, "del"),
])
def test_unsupported_constructs(kernel, what):
    with pytest.raises(pypto.PyptoError) as e:
        jit(kernel, "interp")(rand(3, 3))
    msg = str(e.value)
    assert what in msg, msg
    assert f"{HERE}:" in msg


def test_error_line_number_is_the_files():
    with pytest.raises(pypto.PyptoError) as e:
        jit(with_while, "interp")(rand(2, 2))
    line = with_while.__code__.co_firstlineno + 2
    assert f"{HERE}:{line}:" in str(e.value)


def bad_slices(x, which):
    if which == 0:
        return x[::0]
    if which == 1:
        return x[::-1]
    if which == 2:
        return x[0, 0, 0]
    if which == 3:
        return x[1.5]
    if which == 4:
        return x[5]
    return x[2:2]


@pytest.mark.parametrize("which,pattern", [(0, "step"), (1, "positive"), (2, "too many indices"),
                                           (3, "integer"), (4, "out of range")])
def test_bad_slices(which, pattern):
    with pytest.raises(pypto.PyptoError, match=pattern) as e:
        jit(bad_slices, "interp")(rand(3, 4), which)
    assert f"{HERE}:" in str(e.value)


def test_empty_slice_is_an_empty_array():
    # x[2:2] selects nothing, as in NumPy: an empty array of the slice's shape, not an error
    for backend in ("interp", "cpu"):
        got = jit(bad_slices, backend)(rand(3, 4), 5)
        assert isinstance(got, np.ndarray) and got.shape == (0, 4) and got.dtype == np.float32


def test_wrong_number_of_arguments():
    f = jit(add_kernel, "interp")
    with pytest.raises(pypto.PyptoError, match="add_kernel") as e:
        f(rand(2))
    assert isinstance(e.value, TypeError)
    with pytest.raises(TypeError):
        f(rand(2), rand(2), rand(2))
    with pytest.raises(TypeError):
        f(rand(2), c=rand(2))


def undefined_name(x):
    return x + not_defined_anywhere  # noqa: F821


def test_undefined_name():
    with pytest.raises(pypto.PyptoError, match="not_defined_anywhere"):
        jit(undefined_name, "interp")(rand(2))


def tensor_condition(x):
    if x.sum() > 0:
        return x
    return -x


def test_tensor_as_condition():
    with pytest.raises(pypto.PyptoError, match="where"):
        jit(tensor_condition, "interp")(rand(3))


def writes_then_fails(x, out):
    out[...] = x
    return out + rand_shape_mismatch(x)


def rand_shape_mismatch(x):
    return pypto.zeros((7, 7))


def test_failed_trace_leaves_caller_data_alone():
    x, out = rand(3, 3), poisoned(3, 3)
    line = writes_then_fails.__code__.co_firstlineno + 2
    with pytest.raises(pypto.PyptoError, match=rf"{HERE}:{line}: shapes \(3, 3\) and \(7, 7\) cannot be broadcast"):
        jit(writes_then_fails, "interp")(x, out)
    assert np.isnan(out).all()


def user_raise(x):
    if x.shape[0] != 4:
        raise ValueError(f"expected 4 rows, got {x.shape[0]}")
    return x


def test_user_raise_and_assert():
    with pytest.raises(pypto.PyptoError, match="expected 4 rows, got 3"):
        jit(user_raise, "interp")(rand(3, 2))


def test_conv2d_same_needs_stride_one():
    def k(x, w):
        return pypto.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(pypto.PyptoError, match="stride 1"):
        jit(k, "interp")(rand(1, 2, 5, 5), rand(3, 2, 3, 3))


def test_lambda_kernel_errors_name_its_line():
    f = pypto.jit(lambda x: x @ x, backend="interp")  # a lambda kernel works; its errors name this line
    with pytest.raises(pypto.PyptoError, match=r"test_errors.py:\d+: .*inner dimensions"):
        f(rand(2, 3))


def test_unknown_backend_and_options():
    with pytest.raises(pypto.PyptoError, match="unknown backend 'tpu'"):
        pypto.jit(add_kernel, backend="tpu")
    with pytest.raises(pypto.PyptoError, match=r"unknown tile size 'q' \(known: m, n, k, rows, cols\)"):
        pypto.jit(add_kernel, tiles={"q": 4})


def test_missing_compiler_is_a_clear_error(tmp_path):
    code = textwrap.dedent("""
        import numpy as np, pypto
        @pypto.jit
        def k(x):
            return x * 3.0 + 1.0
        try:
            k(np.ones((5, 7), np.float32))
        except pypto.PyptoError as e:
            print("ERROR:", e)
        else:
            print("NO ERROR")
    """)
    src = tmp_path / "missing_cxx.py"
    src.write_text(code)
    env = dict(os.environ, PYPTO_CXX="/nonexistent/c++", PYPTO_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYPTO_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(pypto.__file__), ".."),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ERROR:" in r.stdout, r.stdout
    assert "interp" in r.stdout


def test_errors_do_not_crash_the_process():
    # a battery of misuses in one process: each raises, none aborts
    cases = [lambda: jit(add_kernel, "interp")(rand(2, 3), rand(4, 5)),
             lambda: jit(matmul_kernel, "cpu")(rand(2, 3), rand(4, 5)),
             lambda: jit(bad_slices, "cpu")(rand(3, 4), 4),
             lambda: jit(add_kernel, "interp")("a", rand(2)),
             lambda: jit(add_kernel, "interp")(rand(2), None)]
    for c in cases:
        with pytest.raises((pypto.PyptoError, TypeError)):
            c()
