"""The NumPy API (scaledmm.scaled_mm, gemm_s8s8s32, quantize_i8, pack_b,
Context, info) against the reference backend, bit for bit.

Every problem is fresh random data from the session seed (see conftest.py);
every output is poisoned first and checked fully written; outputs written
through a view inside a larger poisoned buffer must leave the rest of the
buffer untouched.
"""
import numpy as np
import pytest

import scaledmm
from helpers import (BF16, EPILOGUES, OUT_DTYPES, SHAPES, assert_bits_equal, assert_no_poison,
                     bits, cast, embedded, epi_id, make_problem, numpy_gemm, outside_view_bytes,
                     parse_seed, poisoned, rand_floats, rand_i8, rand_scales, ref_gemm,
                     ref_scaled_mm, special_floats)


def call_scaled_mm(p, out_dtype, out=None, backend="cpu", ctx=None):
    fn = ctx.scaled_mm if ctx is not None else (
        lambda *a, **kw: scaledmm.scaled_mm(*a, backend=backend, **kw))
    return fn(p["a"], p["b"], p["scale_a"], p["scale_b"], out_dtype=out_dtype, bias=p["bias"],
              azp=p["azp"], out=out)


# ---------------------------------------------------------------------- #
# seed                                                                    #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("text,value", [("0", 0), ("12345", 12345), ("0x1F", 31), ("0Xff", 255),
                                        (" 7 ", 7), ("", None), (None, None)])
def test_seed_parsing(text, value):
    assert parse_seed(text) == value


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", "0x", "12a", "0x1g", "1e3", str(1 << 64)])
def test_seed_parsing_rejects(text):
    with pytest.raises(ValueError, match="SCALEDMM_TEST_SEED"):
        parse_seed(text)


# ---------------------------------------------------------------------- #
# info, contexts                                                          #
# ---------------------------------------------------------------------- #
def test_info():
    info = scaledmm.info()
    assert info["version"] == scaledmm.__version__
    assert info["contract_version"] == scaledmm.CONTRACT_VERSION == 1
    assert set(info["backends"]) == {"reference", "cpu", "rocm", "cuda"}
    assert info["backends"]["reference"]["available"] is True
    for v in info["backends"].values():
        assert isinstance(v["available"], bool) and v["reason"]
    assert info["auto"] in ("cpu", "reference")
    assert isinstance(info["cpu_features"], list)
    assert info["cpu_levels"][0] == "scalar"
    assert len(set(info["cpu_levels"])) == len(info["cpu_levels"])
    assert info["cpu_level_chosen"] in info["cpu_levels"] or info[
        "cpu_level_chosen"].endswith("_emulated")


@pytest.mark.parametrize("backend", ["reference", "cpu", "auto"])
def test_context(backend):
    ctx = scaledmm.Context(backend, num_threads=2)
    assert ctx.backend in ("cpu", "reference")
    if backend != "auto":
        assert ctx.backend == backend
    assert ctx.num_threads == 2
    ctx.num_threads = 1
    assert ctx.num_threads == 1
    assert repr(ctx).startswith("scaledmm.Context(")
    assert scaledmm.context(backend) is scaledmm.context(backend)


# ---------------------------------------------------------------------- #
# scaled_mm                                                               #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("epi", EPILOGUES, ids=epi_id)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_matches_reference(rng, out_dtype, epi):
    """Every epilogue x output dtype on every shape of SHAPES: the cpu
    backend (allocated output and poisoned out=) equals the reference."""
    for m, n, k in SHAPES:
        p = make_problem(rng, m, n, k, *epi)
        want = ref_scaled_mm(p, out_dtype)
        what = "scaled_mm %dx%dx%d %s %s" % (m, n, k, out_dtype, epi_id(epi))
        got = call_scaled_mm(p, out_dtype)
        assert_bits_equal(got, want, what)
        out = poisoned((m, n), out_dtype)
        assert call_scaled_mm(p, out_dtype, out=out) is out
        assert_bits_equal(out, want, what + " out=")


def test_scaled_mm_random_shapes(rng):
    """Random shapes in 0..70 with random epilogues and output dtypes."""
    for _ in range(40):
        m, n, k = (int(v) for v in rng.integers(0, 71, size=3))
        epi = EPILOGUES[rng.integers(len(EPILOGUES))]
        dt = OUT_DTYPES[rng.integers(3)]
        p = make_problem(rng, m, n, k, *epi)
        assert_bits_equal(call_scaled_mm(p, dt), ref_scaled_mm(p, dt),
                          "scaled_mm %dx%dx%d %s %s" % (m, n, k, dt, epi_id(epi)))


def test_scaled_mm_no_bias_matches_numpy(rng):
    """Without bias and azp the contract is plain float32 arithmetic:
    (sa * (float(acc) * sb)), checked against NumPy's own float32."""
    for m, n, k in [(1, 9, 5), (17, 23, 70), (40, 3, 1)]:
        p = make_problem(rng, m, n, k, "token", "channel")
        acc = numpy_gemm(p["a"], p["b"]).astype(np.float32)
        want = p["scale_a"][:, None] * (acc * p["scale_b"][None, :])
        assert_bits_equal(call_scaled_mm(p, "float32"), want, "scaled_mm vs numpy")
        with np.errstate(over="ignore"):   # float16 overflow to Inf is part of the contract
            want16, want_bf16 = want.astype(np.float16), want.astype(BF16)
        assert_bits_equal(call_scaled_mm(p, "float16"), want16, "scaled_mm f16 vs numpy")
        assert_bits_equal(call_scaled_mm(p, "bfloat16"), want_bf16, "scaled_mm bf16 vs numpy")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_special_scales(rng, out_dtype):
    """Scales and bias with NaN, +-Inf, zeros, subnormals and huge values:
    NaNs canonical, infinities and zero signs as the reference."""
    m, n, k = 9, 11, 13
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -140, 3e38, -1.0], np.float32)
    for bias in (False, True):
        for azp in (None, "token"):
            p = make_problem(rng, m, n, k, "token", "channel", bias, azp)
            p["scale_a"][rng.integers(0, m, size=3)] = rng.choice(specials, 3)
            p["scale_b"][rng.integers(0, n, size=3)] = rng.choice(specials, 3)
            if bias:
                p["bias"][rng.integers(0, n, size=3)] = rng.choice(specials, 3)
            p["a"][0, :] = 0   # acc = 0 rows: signs of zero
            want = ref_scaled_mm(p, out_dtype)
            got = call_scaled_mm(p, out_dtype, out=poisoned((m, n), out_dtype))
            assert_bits_equal(got, want, "special scales bias=%s azp=%s" % (bias, azp))
            nan = np.isnan(got.astype(np.float32))
            canon = {"float32": 0x7FFFFFFF}.get(out_dtype, 0x7FFF)
            assert (got.view(np.uint32 if out_dtype == "float32" else np.uint16)[nan] == canon).all()


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_overflow_to_inf(rng, out_dtype):
    """Large scales: float16 / bfloat16 results overflow to +-Inf like the reference."""
    p = make_problem(rng, 8, 8, 64, "tensor", "channel")
    p["scale_a"][:] = 1.0
    p["scale_b"][:] = 2.0 ** rng.integers(-8, 128, size=8)
    assert_bits_equal(call_scaled_mm(p, out_dtype), ref_scaled_mm(p, out_dtype), "overflow")


@pytest.mark.parametrize("threads", [1, 2])
def test_scaled_mm_thread_counts(rng, threads):
    ctx = scaledmm.Context("cpu", num_threads=threads)
    for m, n, k in [(64, 70, 67), (128, 96, 160)]:
        p = make_problem(rng, m, n, k, "token", "channel", True, "token")
        for dt in OUT_DTYPES:
            assert_bits_equal(call_scaled_mm(p, dt, ctx=ctx), ref_scaled_mm(p, dt),
                              "%d threads %dx%dx%d %s" % (threads, m, n, k, dt))


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_strided_views(rng, out_dtype):
    """a, b and out as row-strided views (leading dimension > width) inside
    larger arrays; the bytes of out's buffer outside the view stay poisoned."""
    for m, n, k in [(1, 7, 9), (5, 1, 3), (13, 29, 37), (33, 18, 70), (4, 6, 0)]:
        p = make_problem(rng, m, n, k, "token", "channel", True, "tensor")
        want = ref_scaled_mm(p, out_dtype)
        wa = rand_i8(rng, (m + 2, k + int(rng.integers(2, 9))))
        wb = rand_i8(rng, (n + 1, k + int(rng.integers(1, 9))))
        wa[1:m + 1, 2:k + 2] = p["a"]
        wb[:n, 1:k + 1] = p["b"]
        q = dict(p, a=wa[1:m + 1, 2:k + 2], b=wb[:n, 1:k + 1])
        assert q["a"].strides[0] != k or m <= 1
        out, buf = embedded(rng, (m, n), out_dtype)
        before = outside_view_bytes(buf, out).copy()
        call_scaled_mm(q, out_dtype, out=out)
        assert_bits_equal(out, want, "strided %dx%dx%d" % (m, n, k))
        assert np.array_equal(outside_view_bytes(buf, out), before), "bytes outside out changed"
        # the scales, bias and azp may have any shape with the right element count
        r = dict(p, scale_a=p["scale_a"].reshape(m, 1), bias=p["bias"].reshape(1, n))
        assert_bits_equal(call_scaled_mm(r, out_dtype), want, "[M, 1] scales")


def test_scaled_mm_python_scalars(rng):
    """Per-tensor scales and zero point as Python numbers (a float rounds to float32)."""
    p = make_problem(rng, 6, 7, 8, "tensor", "tensor", False, "tensor")
    sa, sb, z = float(p["scale_a"][0]), float(p["scale_b"][0]), int(p["azp"][0])
    got = scaledmm.scaled_mm(p["a"], p["b"], sa, sb, azp=z, backend="cpu")
    assert_bits_equal(got, ref_scaled_mm(p, "float32"), "python scalars")
    got = scaledmm.scaled_mm(p["a"], p["b"], 0.1, sb, backend="cpu")
    want = scaledmm.scaled_mm(p["a"], p["b"], np.float32(0.1), sb, backend="reference")
    assert_bits_equal(got, want, "python float scale")


@pytest.mark.parametrize("dtype_arg", ["float16", np.float16, "f16", np.dtype(np.float16)])
def test_out_dtype_spellings(rng, dtype_arg):
    p = make_problem(rng, 3, 4, 5)
    assert_bits_equal(call_scaled_mm(p, dtype_arg), ref_scaled_mm(p, "float16"), "out_dtype")


def test_out_dtype_follows_out(rng):
    """With out= the output type is out's dtype (out_dtype is ignored)."""
    p = make_problem(rng, 3, 4, 5)
    out = poisoned((3, 4), BF16)
    scaledmm.scaled_mm(p["a"], p["b"], p["scale_a"], p["scale_b"], out=out, backend="cpu")
    assert_bits_equal(out, ref_scaled_mm(p, "bfloat16"), "out bf16")


# ---------------------------------------------------------------------- #
# gemm_s8s8s32                                                            #
# ---------------------------------------------------------------------- #
def test_gemm_matches_reference_and_numpy(rng):
    for m, n, k in SHAPES + [tuple(int(v) for v in rng.integers(0, 71, 3)) for _ in range(10)]:
        a, b = rand_i8(rng, (m, k)), rand_i8(rng, (n, k))
        want = ref_gemm(a, b)
        assert_bits_equal(want, numpy_gemm(a, b), "reference gemm vs numpy %dx%dx%d" % (m, n, k))
        assert_bits_equal(scaledmm.gemm_s8s8s32(a, b, backend="cpu"), want, "gemm %dx%dx%d" % (m, n, k))
        out = poisoned((m, n), np.int32)
        assert scaledmm.gemm_s8s8s32(a, b, out=out, backend="cpu") is out
        assert_bits_equal(out, want, "gemm out= %dx%dx%d" % (m, n, k))


def test_gemm_wraps_modulo_2_32():
    """K = 131073 rows of -128 * -128: 2^31 + 2^14 wraps to a negative int32."""
    k = 131073
    a = np.full((1, k), -128, np.int8)
    b = np.full((2, k), -128, np.int8)
    b[1, 0] = 127
    want = numpy_gemm(a, b)
    assert want[0, 0] < 0
    for backend in ("reference", "cpu"):
        assert_bits_equal(scaledmm.gemm_s8s8s32(a, b, backend=backend), want, backend)


def test_gemm_strided_out(rng):
    m, n, k = 21, 34, 45
    wa = rand_i8(rng, (m, k + 3))
    a, b = wa[:, 3:], rand_i8(rng, (n, k))
    out, buf = embedded(rng, (m, n), np.int32)
    before = outside_view_bytes(buf, out).copy()
    scaledmm.gemm_s8s8s32(a, b, out=out, backend="cpu")
    assert_bits_equal(out, numpy_gemm(a, b), "gemm strided")
    assert np.array_equal(outside_view_bytes(buf, out), before)


# ---------------------------------------------------------------------- #
# packed B                                                                #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_packed_b(rng, backend):
    """scaled_mm and gemm with a packed B equal the unpacked reference; the
    packed copy is independent of b."""
    for m, n, k in [(1, 1, 1), (5, 70, 33), (64, 17, 70), (3, 8, 0), (0, 4, 4)]:
        p = make_problem(rng, m, n, k, "token", "channel", True, "token")
        wb = rand_i8(rng, (n, k + 5))
        wb[:, :k] = p["b"]
        packed = scaledmm.pack_b(wb[:, :k], backend=backend)
        assert (packed.n, packed.k) == (n, k) and isinstance(packed.format, str)
        wb[...] = rand_i8(rng, wb.shape)   # the packed copy does not depend on b
        for dt in OUT_DTYPES:
            got = call_scaled_mm(dict(p, b=packed), dt, out=poisoned((m, n), dt), backend=backend)
            assert_bits_equal(got, ref_scaled_mm(p, dt), "packed %s %dx%dx%d %s" % (backend, m, n, k, dt))
        got = scaledmm.gemm_s8s8s32(p["a"], packed, out=poisoned((m, n), np.int32), backend=backend)
        assert_bits_equal(got, ref_gemm(p["a"], p["b"]), "packed gemm %dx%dx%d" % (m, n, k))


# ---------------------------------------------------------------------- #
# quantize_i8                                                             #
# ---------------------------------------------------------------------- #
QMODES = ["static_sym", "static_asym", "dynamic_sym", "dynamic_asym"]
QSHAPES = [(0, 5), (3, 0), (1, 1), (1, 70), (6, 1), (7, 64), (9, 65), (33, 17), (70, 70)]


def quant_args(rng, mode, x):
    """keyword arguments of quantize_i8 for `mode`, static scales from the data."""
    if mode.startswith("static"):
        amax = float(np.nanmax(np.abs(x.astype(np.float32)), initial=1.0))
        s = np.float32(max(amax, 1e-30) / 127 * rng.uniform(0.25, 2))
        if mode == "static_asym":
            return dict(scale=np.array([s]), azp=np.array([rng.integers(-100, 101)], np.int32),
                        symmetric=False)
        return dict(scale=np.array([s]))
    return dict(symmetric=mode == "dynamic_sym")


def check_quantize(x, kw, what, out=None, backend="cpu"):
    m, k = x.shape
    q_ref, s_ref, z_ref = scaledmm.quantize_i8(x, out=poisoned((m, k), np.int8, ref=True),
                                               backend="reference", **kw)
    q, s, z = scaledmm.quantize_i8(x, out=out if out is not None else poisoned((m, k), np.int8),
                                   backend=backend, **kw)
    assert_bits_equal(q, q_ref, what + " q")
    assert_bits_equal(s, s_ref, what + " scale")
    if z_ref is None:
        assert z is None, what + " azp"
    else:
        assert_bits_equal(z, z_ref, what + " azp")
    return q, s, z


@pytest.mark.parametrize("mode", QMODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_quantize_matches_reference(rng, x_dtype, mode):
    for m, k in QSHAPES:
        x = cast(rand_floats(rng, (m, k)), x_dtype)
        kw = quant_args(rng, mode, x)
        q, s, z = check_quantize(x, kw, "quantize %s %s %dx%d" % (x_dtype, mode, m, k))
        assert s.dtype == np.float32 and s.shape == ((1,) if mode.startswith("static") else (m,))
        if mode == "dynamic_asym":
            assert z.dtype == np.int32 and z.shape == (m,)
        # allocated output equals out=
        q2, _, _ = scaledmm.quantize_i8(x, backend="cpu", **kw)
        assert_bits_equal(q2, q, "allocated q")


@pytest.mark.parametrize("mode", QMODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_quantize_special_values(rng, x_dtype, mode):
    """NaN, +-Inf, subnormals, signed zeros, constant / zero / all-NaN /
    subnormal-only rows (the degenerate asymmetric rows fall back to symmetric)."""
    for m, k in [(6, 1), (8, 9), (12, 70)]:
        x = cast(special_floats(rng, (m, k)), x_dtype)
        kw = quant_args(rng, mode, x)
        q, s, z = check_quantize(x, kw, "special %s %s %dx%d" % (x_dtype, mode, m, k))
        if mode == "dynamic_asym":
            assert (z[[0, 1, 2, 5]] == 0).all(), "degenerate rows take azp 0"
    # static scales that are subnormal, huge, or give 1/s = Inf
    x = cast(special_floats(rng, (8, 16)), x_dtype)
    for s in (2.0 ** -140, 2.0 ** -127, 3e38, 1e-38):
        check_quantize(x, dict(scale=np.array([s], np.float32)), "scale %g" % s)
        check_quantize(x, dict(scale=np.array([s], np.float32), azp=np.array([7], np.int32),
                               symmetric=False), "asym scale %g" % s)


def test_quantize_known_values():
    """A few values worked by hand from the contract's formulas."""
    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, np.nan]], np.float32)
    q, s, z = scaledmm.quantize_i8(x, scale=1.0, backend="cpu")
    assert q.tolist() == [[0, 2, 2, 0, -2, 127, -128, 0]]     # ties to even, saturation, NaN -> 0
    assert z is None and s.tolist() == [1.0]
    x = np.array([[-1.0, 0.0, 0.5, 1.0], [2.0, 2.0, 2.0, 2.0]], np.float32)
    q, s, z = scaledmm.quantize_i8(x, backend="cpu")
    assert s.tolist() == [np.float32(1.0) / np.float32(127), np.float32(2.0) / np.float32(127)]
    assert q.tolist() == [[-127, 0, 64, 127], [127, 127, 127, 127]]
    q, s, z = scaledmm.quantize_i8(x, symmetric=False, backend="cpu")
    assert z[1] == 0 and q[1].tolist() == [127] * 4          # constant row: symmetric fallback
    assert q[0, 0] == -128 and s[0] == np.float32(2.0) / np.float32(255)


@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_quantize_strided(rng, x_dtype):
    """x and out as row-strided views; the bytes around out stay untouched."""
    for m, k in [(1, 9), (9, 33), (40, 70)]:
        wide = cast(rand_floats(rng, (m + 1, k + 7)), x_dtype)
        x = wide[1:, 3:k + 3]
        for mode in QMODES:
            out, buf = embedded(rng, (m, k), np.int8)
            before = outside_view_bytes(buf, out).copy()
            q, _, _ = check_quantize(x, quant_args(rng, mode, x), "strided %s %s" % (x_dtype, mode),
                                     out=out)
            assert q is out
            assert np.array_equal(outside_view_bytes(buf, out), before), "bytes outside out changed"
            check_quantize(np.ascontiguousarray(x), quant_args(rng, mode, x), "contiguous copy")


def test_quantize_then_scaled_mm_pipeline(rng):
    """dynamic asymmetric quantization feeding scaled_mm with per-token azp."""
    x = rand_floats(rng, (17, 40))
    w = rand_i8(rng, (23, 40))
    ws = rand_scales(rng, 23)
    for backend in ("cpu", "reference"):
        q, s, z = scaledmm.quantize_i8(x, symmetric=False, backend=backend)
        y = scaledmm.scaled_mm(q, w, s, ws, azp=z, out=poisoned((17, 23), np.float32), backend=backend)
        assert_no_poison(y)
        if backend == "cpu":
            first = y
    assert_bits_equal(first, y, "pipeline cpu vs reference")
    assert bits(first).shape == (17, 23, 4)


# ---------------------------------------------------------------------- #
# the checks themselves can fail                                          #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bitwise_checks_catch_one_bit(rng, dtype):
    """assert_bits_equal sees a one-bit change, -0 vs +0 and a NaN payload;
    assert_no_poison sees one unwritten element."""
    x = cast(rand_floats(rng, (4, 5)), dtype)
    y = x.copy()
    y.view(np.uint8).reshape(-1)[int(rng.integers(y.nbytes))] ^= 1 << int(rng.integers(8))
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_bits_equal(y, x, "one bit")
    zeros = cast(np.array([0.0], np.float32), dtype)
    with pytest.raises(AssertionError):
        assert_bits_equal(-zeros, zeros, "signed zero")
    u = np.uint32 if dtype == "float32" else np.uint16
    nan1 = np.array([0x7FFFFFFF if dtype == "float32" else 0x7FFF], u).view(x.dtype)
    nan2 = np.array([0x7FC00000 if dtype == "float32" else 0x7FC0], u).view(x.dtype)
    with pytest.raises(AssertionError):
        assert_bits_equal(nan1, nan2, "NaN payload")
    out = poisoned((3, 3), dtype)
    out[:2] = 0
    with pytest.raises(AssertionError, match="not written"):
        assert_no_poison(out)
