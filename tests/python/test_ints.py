"""The narrow integer dtypes (int8, uint8, int16) and the bitwise ops, end to end: wrapping
arithmetic, saturating conversions, NumPy/torch promotion, int64 sums, & | ^ ~ << >> on every
integer width with extreme values, on the interpreter and the CPU backend, against torch."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import jit

INT_DTYPES = (np.int8, np.uint8, np.int16, np.int32, np.int64)


def extreme_ints(rng, dt, shape):
    ii = np.iinfo(dt)
    a = rng.integers(ii.min, ii.max, shape, dtype=dt, endpoint=True)
    a.flat[:4] = [ii.min, ii.max, 0, -1 if ii.min < 0 else 1]
    return a


def shift_amounts(rng, dt, shape):
    ii = np.iinfo(dt)
    s = rng.integers(0 if ii.min == 0 else -3, min(ii.bits + 4, ii.max), shape)
    s.flat[:3] = [0, ii.bits - 1, min(ii.bits, ii.max)]
    return s.astype(dt)


def bitwise_kernel(a, b, s):
    return a & b, a | b, a ^ b, ~a, a << s, a >> s, pypto.bitwise_and(a, 3), pypto.right_shift(a, 1)


def test_bitwise_ops_match_torch_on_every_int_width(backend):
    rng = np.random.default_rng(7)
    f = jit(bitwise_kernel, backend)
    for dt in INT_DTYPES:
        a, b = extreme_ints(rng, dt, (5, 9)), extreme_ints(rng, dt, (5, 9))
        s = shift_amounts(rng, dt, (5, 9))
        ta, tb, ts = map(torch.from_numpy, (a, b, s))
        refs = [ta & tb, ta | tb, ta ^ tb, ~ta, ta << ts, ta >> ts, ta & 3, ta >> 1]
        for k, (got, ref) in enumerate(zip(f(a, b, s), refs)):
            got = np.asarray(got)
            assert got.dtype == ref.numpy().dtype, (dt, k)
            np.testing.assert_array_equal(got, ref.numpy(), err_msg=f"{dt.__name__} output {k}")


def bool_kernel(a, b):
    return a & b, a | b, a ^ b, ~a, pypto.bitwise_not(b)


def test_bool_bitwise_is_logical(backend):
    rng = np.random.default_rng(3)
    f = jit(bool_kernel, backend)
    a, b = rng.random((4, 7)) > 0.5, rng.random((4, 7)) > 0.5
    for got, ref in zip(f(a, b), [a & b, a | b, a ^ b, ~a, ~b]):
        assert np.asarray(got).dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(got), ref)


def narrow_kernel(a8, u8, h16, x):
    return ((a8 + a8) * a8 - 7, a8 + u8, u8 * u8, h16 * h16 + a8, a8.sum(), h16.sum(1),
            x.to(pypto.int8), x.to(pypto.uint8), x.to(pypto.int16), a8 // 3, -a8, abs(a8), a8 < u8,
            (a8 + a8) > 0, pypto.maximum(u8, 200), a8.float() * 0.5)


def test_narrow_ints_wrap_promote_and_convert_as_torch(backend):
    rng = np.random.default_rng(11)
    a8 = extreme_ints(rng, np.int8, (6, 10))
    u8 = extreme_ints(rng, np.uint8, (6, 10))
    h16 = extreme_ints(rng, np.int16, (6, 10))
    x = (rng.standard_normal((6, 10)) * 300).astype(np.float32)
    x.flat[:6] = [np.nan, np.inf, -np.inf, 127.9, -128.9, 255.5]
    t8, tu, th, tx = map(torch.from_numpy, (a8, u8, h16, x))

    def sat(v, dt):  # the documented float -> int conversion: truncate, saturate, NaN -> 0
        ii = np.iinfo(dt)
        v = np.nan_to_num(v.astype(np.float64), nan=0.0, posinf=ii.max, neginf=ii.min)
        return np.clip(np.trunc(v), ii.min, ii.max).astype(dt)

    refs = [((t8 + t8) * t8 - 7).numpy(), (t8 + tu).numpy(), (tu * tu).numpy(), (th * th + t8).numpy(),
            t8.sum().numpy(), th.sum(1).numpy(), sat(x, np.int8), sat(x, np.uint8), sat(x, np.int16),
            torch.div(t8, 3, rounding_mode="floor").numpy(), (-t8).numpy(), t8.abs().numpy(), (t8 < tu).numpy(),
            ((t8 + t8) > 0).numpy(), torch.maximum(tu, torch.tensor(200, dtype=torch.uint8)).numpy(),
            (t8.float() * 0.5).numpy()]
    got = jit(narrow_kernel, backend)(a8, u8, h16, x)
    for k, (g, r) in enumerate(zip(got, refs)):
        g = np.asarray(g)
        assert g.dtype == r.dtype, (k, g.dtype, r.dtype)
        np.testing.assert_array_equal(g, r, err_msg=f"output {k}")


def test_dtypes_map_from_numpy_and_torch():
    for name in ("int8", "uint8", "int16"):
        d = pypto.to_dtype(getattr(torch, name))
        assert d is getattr(pypto, name) and d == getattr(np, name) and d.torch is getattr(torch, name)
    t = pypto.Tensor(np.arange(-3, 3, dtype=np.int8))
    assert t.dtype is pypto.int8 and t.numpy().dtype == np.int8
    with pytest.raises(pypto.PyptoError, match="uint16"):
        pypto.to_dtype(torch.uint16) if hasattr(torch, "uint16") else pypto.to_dtype(np.uint16)


def and_kernel(a):
    return a & a


def shl_kernel(a):
    return a << a


def not_kernel(a):
    return ~a


def test_bitwise_errors_name_the_op():
    with pytest.raises(pypto.PyptoError, match="bitwise_and.*float32"):
        jit(and_kernel, "interp")(np.ones((2, 2), np.float32))
    with pytest.raises(pypto.PyptoError, match="left_shift.*bool"):
        jit(shl_kernel, "interp")(np.ones((2, 2), np.bool_))
    with pytest.raises(pypto.PyptoError, match="bitwise_not.*float64"):
        jit(not_kernel, "interp")(np.ones((2, 2), np.float64))


def test_eager_bitwise_on_torch_int8():
    a = torch.tensor([[-128, 127, 5, -1]], dtype=torch.int8)
    got = pypto.bitwise_xor(a, pypto.right_shift(a, 1))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int8
    np.testing.assert_array_equal(got.numpy(), (a ^ (a >> 1)).numpy())


def scaled_mm_kernel(a, b, sa, sb, fa, fb):
    return pypto.scaled_mm(a, b, sa, sb), pypto.scaled_mm(fa, fb, 0.5, sb, out_dtype=pypto.float64)


def test_scaled_mm_int8_rowwise_scales(backend):
    rng = np.random.default_rng(5)
    m, k, n = 37, 70, 21
    a = extreme_ints(rng, np.int8, (m, k))
    b = extreme_ints(rng, np.int8, (k, n))
    sa = rng.uniform(0.5, 2.0, m).astype(np.float32)
    sb = rng.uniform(0.5, 2.0, (1, n)).astype(np.float32)
    fa = rng.standard_normal((m, k)).astype(np.float16)
    fb = rng.standard_normal((k, n)).astype(np.float16)
    got, gotf = jit(scaled_mm_kernel, backend)(a, b, sa, sb, fa, fb)
    acc = a.astype(np.int64) @ b.astype(np.int64)  # |acc| <= 70 * 128 * 128: exact in int32
    ref = acc * sa.astype(np.float64)[:, None] * sb.astype(np.float64)
    assert np.asarray(got).dtype == np.float32 and np.asarray(gotf).dtype == np.float64
    assert np.linalg.norm(np.asarray(got, np.float64) - ref) <= 1e-6 * np.linalg.norm(ref)
    reff = (fa.astype(np.float64) @ fb.astype(np.float64)) * 0.5 * sb.astype(np.float64)
    assert np.linalg.norm(np.asarray(gotf) - reff) <= 1e-5 * np.linalg.norm(reff)


def test_scaled_mm_rejects_bad_scales():
    with pytest.raises(pypto.PyptoError, match="scale_b"):
        jit(scaled_mm_kernel, "interp")(np.ones((3, 4), np.int8), np.ones((4, 5), np.int8), np.ones(3, np.float32),
                                        np.ones(4, np.float32), np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))


def masked_kernel(x, m, rows):
    y = x * 1.0
    y[m] = -5.0
    z = x * 2.0
    z[rows] = 0.0  # a mask over the leading dimension: whole rows
    vals, count = pypto.masked_select(x, m)
    filled, _ = pypto.masked_select(x, rows, fill=7.0)
    return y, z, vals, count, filled


def test_boolean_mask_writes_and_masked_select(backend):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    x.flat[:3] = [np.nan, np.inf, -np.inf]
    m = rng.random((5, 6)) > 0.4
    rows = np.array([True, False, True, True, False])
    y, z, vals, count, filled = jit(masked_kernel, backend)(x, m, rows)
    tx, tm, tr = map(torch.from_numpy, (x, m, rows))
    ty, tz = tx.clone(), tx * 2
    ty[tm] = -5.0
    tz[tr] = 0.0
    np.testing.assert_array_equal(np.asarray(y), ty.numpy())
    np.testing.assert_array_equal(np.asarray(z), tz.numpy())
    sel = torch.masked_select(tx, tm).numpy()
    assert int(np.asarray(count)) == sel.size and np.asarray(vals).shape == (30,)
    np.testing.assert_array_equal(np.asarray(vals)[:sel.size], sel)
    np.testing.assert_array_equal(np.asarray(vals)[sel.size:], 0)
    selr = tx[tr].reshape(-1).numpy()
    np.testing.assert_array_equal(np.asarray(filled), np.concatenate([selr, np.full(30 - selr.size, 7.0, np.float32)]))


def read_mask_kernel(x, m):
    return x[m]


def test_reading_by_mask_names_the_alternatives():
    with pytest.raises(pypto.PyptoError, match="masked_select"):
        jit(read_mask_kernel, "interp")(np.ones((2, 2), np.float32), np.ones((2, 2), np.bool_))


def cumsum_then_scale(x):
    return pypto.cumsum(x, 1) * 2.0


def test_a_scan_feeds_an_elementwise_consumer(backend):
    # Regression: the scan's last pass writes its buffer in pieces; fusion used to treat the last
    # piece as the whole buffer and the consumer read it at the wrong offset.
    x = np.random.default_rng(2).standard_normal((3, 30))
    got = np.asarray(jit(cumsum_then_scale, backend)(x))
    np.testing.assert_allclose(got, np.cumsum(x, 1) * 2.0, rtol=1e-12, atol=1e-12)


def scalar_bitwise_kernel(a, s, t):
    # s, t: run-time integer arguments (one compiled kernel for every value)
    return (a & s, s | a, a ^ s, a << t, a >> t, a * 0 + ((s << t) ^ (s >> t) | ~s),
            a * 0 + (s & 6), a * 0 + ((s & t) | (t ^ 5)))


def test_bitwise_ops_on_run_time_scalars(backend):
    # once `s & 6` on a run-time scalar meant `s and 6` (1 for s = 3), and ^ << >> ~ were refused
    rng = np.random.default_rng(11)
    f = jit(scalar_bitwise_kernel, backend)
    for dt in (np.int8, np.int32, np.int64):
        a = extreme_ints(rng, dt, (3, 5))
        for s, t in ((3, 2), (-(2 ** 63), 63), (2 ** 62 + 5, 64), (-7, -1), (127, 7)):
            if dt != np.int64 and not np.iinfo(dt).min <= s <= np.iinfo(dt).max:
                continue
            ta, ts, tt = torch.from_numpy(a), torch.tensor(s), torch.tensor(t)
            z = ta * 0
            refs = [ta & s, s | ta, ta ^ s, ta << tt.to(ta.dtype), ta >> tt.to(ta.dtype),
                    z + ((ts << tt) ^ (ts >> tt) | ~ts), z + (ts & 6), z + ((ts & tt) | (tt ^ 5))]
            for k, (got, ref) in enumerate(zip(f(a, s, t), refs)):
                np.testing.assert_array_equal(np.asarray(got), ref.numpy(), err_msg=f"{dt.__name__} {s} {t} output {k}")
    assert f.cache_size == 3  # one kernel per dtype, not per scalar value


def test_bitwise_ops_on_run_time_float_scalars_are_an_error():
    def f(x, s):
        return x * (s & 1)

    with pytest.raises(pypto.PyptoError, match="bitwise operators need integer scalars"):
        pypto.jit(f, backend="interp")(np.ones(3, np.float32), 2.5)
