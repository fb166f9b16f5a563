"""Every error path of the NumPy API raises scaledmm.Error carrying the
library's status, status name and message, names the bad argument, and
writes nothing: the poisoned output stays poisoned byte for byte.
"""
import numpy as np
import pytest

import scaledmm
from scaledmm import _core
from helpers import BF16, bits, make_problem, poisoned, rand_floats, rand_i8

INVALID = _core.SMM_ERR_INVALID_ARG
OVERLAP = _core.SMM_ERR_OVERLAP


def expect_error(fn, status, *names):
    """Runs fn; it must raise scaledmm.Error with `status` whose message
    names each of `names`. Returns the exception."""
    with pytest.raises(scaledmm.Error) as info:
        fn()
    e = info.value
    assert isinstance(e, RuntimeError)
    assert e.status == status, "status %r (%s), want %d: %s" % (e.status, e.status_name, status, e)
    assert e.status_name == _core.strerror(status)
    assert isinstance(e.message, str) and e.message
    assert str(e).startswith(e.status_name)
    for name in names:
        assert name in e.message, "%r not named in %r" % (name, e.message)
    return e


def transposed(x):
    """x's values as a transposed view (its last axis not contiguous)."""
    return np.ascontiguousarray(x.T).T


def readonly(x):
    x.flags.writeable = False
    return x


# ---------------------------------------------------------------------- #
# scaled_mm                                                               #
# ---------------------------------------------------------------------- #
M, N, K = 5, 6, 7

# (case id, argument named, function of the valid problem returning its changes)
SCALED_MM_CASES = [
    ("a_dtype", "a", lambda p, r: dict(a=p["a"].astype(np.int16))),
    ("a_uint8", "a", lambda p, r: dict(a=p["a"].view(np.uint8))),
    ("a_1d", "a", lambda p, r: dict(a=p["a"].reshape(-1))),
    ("a_3d", "a", lambda p, r: dict(a=p["a"].reshape(1, M, K))),
    ("a_list", "a", lambda p, r: dict(a=p["a"].tolist())),
    ("a_transposed", "a", lambda p, r: dict(a=transposed(p["a"]))),
    ("a_column_stride", "a", lambda p, r: dict(a=rand_i8(r, (M, 2 * K))[:, ::2])),
    ("a_reversed_rows", "a", lambda p, r: dict(a=p["a"][::-1])),
    ("a_broadcast_rows", "a", lambda p, r: dict(a=np.broadcast_to(p["a"][:1], (M, K)))),
    ("b_dtype", "b", lambda p, r: dict(b=p["b"].astype(np.int32))),
    ("b_k", "b", lambda p, r: dict(b=rand_i8(r, (N, K + 1)))),
    ("b_1d", "b", lambda p, r: dict(b=p["b"].reshape(-1))),
    ("b_transposed", "b", lambda p, r: dict(b=transposed(p["b"]))),
    ("scale_a_len", "scale_a", lambda p, r: dict(scale_a=np.ones(2, np.float32))),
    ("scale_a_empty", "scale_a", lambda p, r: dict(scale_a=np.ones(0, np.float32))),
    ("scale_a_f64", "scale_a", lambda p, r: dict(scale_a=np.ones(M, np.float64))),
    ("scale_a_list", "scale_a", lambda p, r: dict(scale_a=[1.0] * M)),
    ("scale_b_len", "scale_b", lambda p, r: dict(scale_b=np.ones(N + 1, np.float32))),
    ("scale_b_f16", "scale_b", lambda p, r: dict(scale_b=np.ones(N, np.float16))),
    ("bias_len", "bias", lambda p, r: dict(bias=np.ones(N - 1, np.float32))),
    ("bias_one", "bias", lambda p, r: dict(bias=np.ones(1, np.float32))),
    ("bias_f64", "bias", lambda p, r: dict(bias=np.ones(N, np.float64))),
    ("azp_len", "azp", lambda p, r: dict(azp=np.ones(2, np.int32))),
    ("azp_int64", "azp", lambda p, r: dict(azp=np.ones(M, np.int64))),
    ("azp_float", "azp", lambda p, r: dict(azp=1.5)),
    ("azp_range", "azp", lambda p, r: dict(azp=1 << 31)),
    ("out_dtype_int", "out_dtype", lambda p, r: dict(out_dtype="int32")),
    ("out_dtype_name", "out_dtype", lambda p, r: dict(out_dtype="float64")),
]


def valid_scaled_mm(rng):
    p = make_problem(rng, M, N, K, "token", "channel", True, "token")
    return dict(a=p["a"], b=p["b"], scale_a=p["scale_a"], scale_b=p["scale_b"], bias=p["bias"],
                azp=p["azp"], out_dtype="float32")


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case,name,change", SCALED_MM_CASES, ids=[c[0] for c in SCALED_MM_CASES])
def test_scaled_mm_bad_argument(rng, case, name, change, out_dtype):
    kw = valid_scaled_mm(rng)
    kw["out_dtype"] = out_dtype
    kw.update(change(kw, rng))
    if case.startswith("out_dtype"):
        expect_error(lambda: scaledmm.scaled_mm(backend="cpu", **kw), INVALID, name)
        return
    out = poisoned((M, N), out_dtype)
    before = bits(out).copy()
    expect_error(lambda: scaledmm.scaled_mm(out=out, backend="cpu", **kw), INVALID, name)
    assert np.array_equal(bits(out), before), "out was written"
    expect_error(lambda: scaledmm.scaled_mm(backend="reference", **kw), INVALID, name)


OUT_CASES = [
    ("dtype", lambda r: poisoned((M, N), np.float64)),
    ("int32", lambda r: poisoned((M, N), np.int32)),
    ("shape", lambda r: poisoned((M, N + 1), np.float32)),
    ("shape_t", lambda r: poisoned((N, M), np.float32)),
    ("1d", lambda r: poisoned((M * N,), np.float32)),
    ("transposed", lambda r: poisoned((N, M), np.float32).T),
    ("column_stride", lambda r: poisoned((M, 2 * N), np.float32)[:, ::2]),
    ("readonly", lambda r: readonly(poisoned((M, N), np.float32))),
    ("not_array", lambda r: [[0.0] * N] * M),
]


@pytest.mark.parametrize("case,make", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_scaled_mm_bad_out(rng, case, make):
    kw = valid_scaled_mm(rng)
    out = make(rng)
    before = bits(np.asarray(out)).copy()
    expect_error(lambda: scaledmm.scaled_mm(out=out, backend="cpu", **kw), INVALID, "out")
    assert np.array_equal(bits(np.asarray(out)), before), "out was written"


@pytest.mark.parametrize("target", ["a", "b", "scale_a", "scale_b", "bias", "azp"])
def test_scaled_mm_out_overlaps_input(rng, target):
    """out's footprint intersects an input's: SMM_ERR_OVERLAP from the
    library, and neither out nor the input is touched."""
    kw = valid_scaled_mm(rng)
    buf = np.zeros(4096, np.uint8)
    out = buf[64:64 + M * N * 4].view(np.float32).reshape(M, N)
    src = np.asarray(kw[target])
    inside = buf[96:96 + src.nbytes].view(src.dtype).reshape(src.shape)   # within out's bytes
    inside[...] = src
    kw[target] = inside
    before = buf.copy()
    expect_error(lambda: scaledmm.scaled_mm(out=out, backend="cpu", **kw), OVERLAP)
    assert np.array_equal(buf, before), "memory was written"


def test_scaled_mm_out_in_gaps_of_a(rng):
    """out's elements lie in the gaps between the rows of a strided a, yet
    inside a's footprint (first element to last): SMM_ERR_OVERLAP."""
    buf = rand_i8(rng, (M, 64))
    a = buf[:, :K]
    out = buf[:, 16:24].view(np.float32)   # [M, 2], leading dimension 16
    before = buf.copy()
    expect_error(lambda: scaledmm.scaled_mm(a, rand_i8(rng, (2, K)), 1.0, 1.0, out=out,
                                            backend="cpu"), OVERLAP)
    assert np.array_equal(buf, before)


@pytest.mark.parametrize("backend,status", [("cuda", None), ("rocm", None),
                                            ("tpu", INVALID), ("", INVALID), ("cpu ", INVALID)])
def test_bad_backend(rng, backend, status):
    """GPU backends take device memory, not NumPy arrays; unknown names are
    invalid. Neither writes anything."""
    kw = valid_scaled_mm(rng)
    out = poisoned((M, N), np.float32)
    before = bits(out).copy()
    if status is None:   # not built here (NOT_AVAILABLE), or built but refused for host arrays
        with pytest.raises(scaledmm.Error) as info:
            scaledmm.scaled_mm(out=out, backend=backend, **kw)
        assert info.value.status in (_core.SMM_ERR_NOT_AVAILABLE, INVALID)
        assert backend in info.value.message
    else:
        expect_error(lambda: scaledmm.scaled_mm(out=out, backend=backend, **kw), status,
                     repr(backend) if backend else "backend")
    assert np.array_equal(bits(out), before)
    with pytest.raises(scaledmm.Error):
        scaledmm.Context(backend)


def test_backend_not_a_name():
    expect_error(lambda: scaledmm.Context(2.5), INVALID, "backend")
    expect_error(lambda: scaledmm.Context(99), INVALID)


def test_packed_b_mismatch(rng):
    packed = scaledmm.pack_b(rand_i8(rng, (N, K + 1)), backend="cpu")
    out = poisoned((M, N), np.float32)
    before = bits(out).copy()
    expect_error(lambda: scaledmm.scaled_mm(rand_i8(rng, (M, K)), packed, 1.0, 1.0, out=out,
                                            backend="cpu"), INVALID, "b", "packed")
    iout = poisoned((M, N), np.int32)
    ibefore = bits(iout).copy()
    expect_error(lambda: scaledmm.gemm_s8s8s32(rand_i8(rng, (M, K)), packed, out=iout,
                                               backend="cpu"), INVALID, "b")
    assert np.array_equal(bits(out), before) and np.array_equal(bits(iout), ibefore)
    expect_error(lambda: scaledmm.pack_b(rand_i8(rng, (N, K)).astype(np.int16)), INVALID, "b")
    expect_error(lambda: scaledmm.pack_b(transposed(rand_i8(rng, (N, K)))), INVALID, "b")


# ---------------------------------------------------------------------- #
# gemm_s8s8s32                                                            #
# ---------------------------------------------------------------------- #
GEMM_CASES = [
    ("a_dtype", "a", lambda a, b, r: (a.astype(np.float32), b, None)),
    ("a_1d", "a", lambda a, b, r: (a.reshape(-1), b, None)),
    ("a_transposed", "a", lambda a, b, r: (transposed(a), b, None)),
    ("b_dtype", "b", lambda a, b, r: (a, b.view(np.uint8), None)),
    ("b_k", "b", lambda a, b, r: (a, rand_i8(r, (N, K - 1)), None)),
    ("b_3d", "b", lambda a, b, r: (a, b.reshape(1, N, K), None)),
    ("out_dtype", "out", lambda a, b, r: (a, b, poisoned((M, N), np.float32))),
    ("out_int64", "out", lambda a, b, r: (a, b, poisoned((M, N), np.int64))),
    ("out_shape", "out", lambda a, b, r: (a, b, poisoned((N, M), np.int32))),
    ("out_transposed", "out", lambda a, b, r: (a, b, poisoned((N, M), np.int32).T)),
    ("out_readonly", "out", lambda a, b, r: (a, b, readonly(poisoned((M, N), np.int32)))),
]


@pytest.mark.parametrize("case,name,change", GEMM_CASES, ids=[c[0] for c in GEMM_CASES])
def test_gemm_bad_argument(rng, case, name, change):
    a, b, out = change(rand_i8(rng, (M, K)), rand_i8(rng, (N, K)), rng)
    if out is None:
        out = poisoned((M, N), np.int32)
    before = bits(out).copy()
    expect_error(lambda: scaledmm.gemm_s8s8s32(a, b, out=out, backend="cpu"), INVALID, name)
    assert np.array_equal(bits(out), before), "out was written"


@pytest.mark.parametrize("target", ["a", "b"])
def test_gemm_out_overlaps_input(rng, target):
    buf = rand_i8(rng, (4096,))
    out = buf[128:128 + M * N * 4].view(np.int32).reshape(M, N)
    x = buf[140:140 + (M if target == "a" else N) * K].reshape(-1, K)
    other = rand_i8(rng, (N if target == "a" else M, K))
    a, b = (x, other) if target == "a" else (other, x)
    before = buf.copy()
    expect_error(lambda: scaledmm.gemm_s8s8s32(a, b, out=out, backend="cpu"), OVERLAP)
    assert np.array_equal(buf, before)


# ---------------------------------------------------------------------- #
# quantize_i8                                                             #
# ---------------------------------------------------------------------- #
def f32(*v):
    return np.array(v, np.float32)


QUANT_CASES = [
    ("x_int8", "x", lambda x, r: dict(x=rand_i8(r, x.shape))),
    ("x_f64", "x", lambda x, r: dict(x=x.astype(np.float64))),
    ("x_1d", "x", lambda x, r: dict(x=x.reshape(-1))),
    ("x_3d", "x", lambda x, r: dict(x=x.reshape(1, M, K))),
    ("x_transposed", "x", lambda x, r: dict(x=transposed(x))),
    ("x_column_stride", "x", lambda x, r: dict(x=rand_floats(r, (M, 2 * K))[:, ::2])),
    ("x_list", "x", lambda x, r: dict(x=x.tolist())),
    ("scale_len", "scale", lambda x, r: dict(scale=f32(1, 2))),
    ("scale_per_row", "scale", lambda x, r: dict(scale=np.ones(M, np.float32))),
    ("scale_f64", "scale", lambda x, r: dict(scale=np.ones(1, np.float64))),
    ("azp_dynamic", "azp", lambda x, r: dict(azp=np.zeros(1, np.int32))),
    ("azp_static_missing", "azp", lambda x, r: dict(scale=f32(1), symmetric=False)),
    ("azp_len", "azp", lambda x, r: dict(scale=f32(1), azp=np.zeros(2, np.int32), symmetric=False)),
    ("azp_float", "azp", lambda x, r: dict(scale=f32(1), azp=np.zeros(1, np.float32), symmetric=False)),
    ("azp_range", "azp", lambda x, r: dict(scale=f32(1), azp=-(1 << 40), symmetric=False)),
]


@pytest.mark.parametrize("case,name,change", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quantize_bad_argument(rng, case, name, change):
    kw = dict(x=rand_floats(rng, (M, K)))
    kw.update(change(kw["x"], rng))
    out = poisoned((M, K), np.int8)
    before = bits(out).copy()
    expect_error(lambda: scaledmm.quantize_i8(out=out, backend="cpu", **kw), INVALID, name)
    assert np.array_equal(bits(out), before), "out was written"


@pytest.mark.parametrize("out", [
    poisoned((M, K + 1), np.int8), poisoned((M, K), np.uint8), poisoned((M, K), np.int32),
    poisoned((K, M), np.int8).T, readonly(poisoned((M, K), np.int8))],
    ids=["shape", "uint8", "int32", "transposed", "readonly"])
def test_quantize_bad_out(rng, out):
    before = bits(out).copy()
    x = rand_floats(rng, (M, K))
    expect_error(lambda: scaledmm.quantize_i8(x, out=out, backend="cpu"), INVALID, "out")
    assert np.array_equal(bits(out), before), "out was written"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_quantize_out_overlaps_x(rng, dtype):
    """q written over x's own bytes: SMM_ERR_OVERLAP, x untouched."""
    x = rand_floats(rng, (M, K)).astype(dtype)
    out = x.view(np.int8)[:, :K]
    before = bits(x).copy()
    expect_error(lambda: scaledmm.quantize_i8(x, out=out, backend="cpu"), OVERLAP)
    assert np.array_equal(bits(x), before)


def test_out_dtype_and_out(rng):
    """out_dtype None takes out's dtype; an out_dtype naming another dtype
    than out's is an error naming out_dtype, nothing written; numpy dtype
    strings ("f4", "<f2") name the same dtypes."""
    kw = valid_scaled_mm(rng)
    del kw["out_dtype"]
    want = scaledmm.scaled_mm(out_dtype="float16", backend="reference", **kw)
    out = poisoned((M, N), np.float16)
    assert scaledmm.scaled_mm(out=out, backend="cpu", **kw) is out
    assert np.array_equal(bits(out), bits(want))
    out = poisoned((M, N), np.float16)
    before = bits(out).copy()
    expect_error(lambda: scaledmm.scaled_mm(out_dtype="float32", out=out, backend="cpu", **kw),
                 INVALID, "out_dtype")
    assert np.array_equal(bits(out), before)
    for name in ("f2", "<f2", np.float16):
        got = scaledmm.scaled_mm(out_dtype=name, backend="cpu", **kw)
        assert got.dtype == np.float16 and np.array_equal(bits(got), bits(want))


def test_unaligned_vectors_copied(rng):
    """A float32 vector at an address that is not a multiple of 4 (a view
    of bytes at an odd offset) is copied, with the aligned one's bits."""
    kw = valid_scaled_mm(rng)
    want = scaledmm.scaled_mm(backend="reference", **kw)
    raw = np.zeros(4 * N + 1, dtype=np.uint8)
    sb = raw[1:].view(np.float32)
    sb[:] = kw["scale_b"].reshape(-1)
    assert sb.ctypes.data % 4 != 0
    kw["scale_b"] = sb
    assert np.array_equal(bits(scaledmm.scaled_mm(backend="cpu", **kw)), bits(want))


def test_backend_and_threads_out_of_range():
    """A bool is not a backend; integers past int32 and thread counts past
    int are refused, not cut."""
    expect_error(lambda: scaledmm.Context(True), INVALID, "backend")
    expect_error(lambda: scaledmm.Context(2 ** 40), INVALID, "backend")
    ctx = scaledmm.Context("cpu")
    for n in (2 ** 31, 2 ** 32 + 1, -2 ** 40):
        with pytest.raises(OverflowError, match="num_threads"):
            ctx.num_threads = n
    assert ctx.num_threads == 0
