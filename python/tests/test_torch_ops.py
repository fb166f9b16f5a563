"""torch.ops.scaledmm.* on CPU tensors: bit-identical to the NumPy
reference backend; bad input raises naming the argument and writes
nothing; torch.library.opcheck; torch.compile(fullgraph=True).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaledmm  # noqa: E402
import scaledmm.torch as smt  # noqa: E402
from helpers import (EPILOGUES, OUT_DTYPES, SHAPES, assert_bits_equal, cast, embedded,  # noqa: E402
                     epi_id, make_problem, outside_view_bytes, rand_floats,
                     rand_i8, ref_gemm, ref_scaled_mm, special_floats, to_numpy, to_torch,
                     torch_dtype, torch_poisoned)

ops = torch.ops.scaledmm


@pytest.fixture(params=["cpu", "reference"])
def cpu_backend(request):
    """Runs the test with the ops' CPU tensors on each library backend."""
    smt.set_cpu_backend(request.param)
    yield request.param
    smt.set_cpu_backend("cpu")


def tbits(t):
    """The bytes of tensor t (a contiguous uint8 view of a copy)."""
    return t.contiguous().view(torch.uint8)


def torch_problem(p, device="cpu"):
    return {k: to_torch(v, device) for k, v in p.items()}


def run_scaled_mm(t, out_dtype, how):
    """scaled_mm of tensor problem t through the op (how="op"), the out
    variant into a poisoned tensor ("out"), or the Python wrapper ("py")."""
    dt = torch_dtype(out_dtype)
    args = (t["a"], t["b"], t["scale_a"], t["scale_b"])
    if how == "op":
        return ops.scaled_mm(*args, dt, t["bias"], t["azp"])
    out = torch_poisoned((t["a"].shape[0], t["b"].shape[0]), dt, t["a"].device)
    if how == "out":
        ops.scaled_mm_out(*args, t["bias"], t["azp"], out)
        return out
    assert smt.scaled_mm(*args, out_dtype=dt, bias=t["bias"], azp=t["azp"], out=out) is out
    return out


# ---------------------------------------------------------------------- #
# bitwise equality with the reference                                     #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("epi", EPILOGUES, ids=epi_id)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_op(rng, out_dtype, epi):
    for m, n, k in SHAPES:
        p = make_problem(rng, m, n, k, *epi)
        want = ref_scaled_mm(p, out_dtype)
        t = torch_problem(p)
        for how in ("op", "out", "py"):
            got = run_scaled_mm(t, out_dtype, how)
            assert got.dtype == torch_dtype(out_dtype) and got.device.type == "cpu"
            assert_bits_equal(to_numpy(got), want, "%s %dx%dx%d %s %s" % (
                how, m, n, k, out_dtype, epi_id(epi)))


def test_scaled_mm_op_backends(rng, cpu_backend):
    """Random shapes on the cpu and reference backends of the ops."""
    for _ in range(12):
        m, n, k = (int(v) for v in rng.integers(0, 71, size=3))
        epi = EPILOGUES[rng.integers(len(EPILOGUES))]
        dt = OUT_DTYPES[rng.integers(3)]
        p = make_problem(rng, m, n, k, *epi)
        assert_bits_equal(to_numpy(run_scaled_mm(torch_problem(p), dt, "op")), ref_scaled_mm(p, dt),
                          "%s %dx%dx%d %s %s" % (cpu_backend, m, n, k, dt, epi_id(epi)))


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_num_threads(rng, threads):
    smt.set_num_threads(threads)
    try:
        p = make_problem(rng, 96, 80, 70, "token", "channel", True, "token")
        assert_bits_equal(to_numpy(run_scaled_mm(torch_problem(p), "bfloat16", "op")),
                          ref_scaled_mm(p, "bfloat16"), "%d threads" % threads)
    finally:
        smt.set_num_threads(0)


def test_gemm_op(rng, cpu_backend):
    for m, n, k in SHAPES:
        a, b = rand_i8(rng, (m, k)), rand_i8(rng, (n, k))
        got = ops.gemm_s8s8s32(to_torch(a), to_torch(b))
        assert got.dtype == torch.int32
        assert_bits_equal(to_numpy(got), ref_gemm(a, b), "gemm %dx%dx%d" % (m, n, k))
        assert_bits_equal(to_numpy(smt.gemm_s8s8s32(to_torch(a), to_torch(b))), ref_gemm(a, b), "py")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_strided_views(rng, out_dtype):
    """Row-strided a and b; out as a view inside a larger poisoned tensor,
    whose bytes outside the view stay untouched."""
    for m, n, k in [(1, 5, 9), (13, 29, 37), (40, 17, 70)]:
        p = make_problem(rng, m, n, k, "token", "channel", True, "token")
        want = ref_scaled_mm(p, out_dtype)
        t = torch_problem(p)
        wa = to_torch(rand_i8(rng, (m + 1, k + 5)))
        wa[1:, 3:k + 3] = t["a"]
        wb = to_torch(rand_i8(rng, (n, k + 2)))
        wb[:, :k] = t["b"]
        t.update(a=wa[1:, 3:k + 3], b=wb[:, :k])
        out_np, buf_np = embedded(rng, (m, n), out_dtype)
        buf = to_torch(buf_np)
        off_r = (out_np.__array_interface__["data"][0] - buf_np.__array_interface__["data"][0]) \
            // buf_np.strides[0]
        off_c = ((out_np.__array_interface__["data"][0] - buf_np.__array_interface__["data"][0])
                 % buf_np.strides[0]) // buf_np.itemsize
        out = buf[off_r:off_r + m, off_c:off_c + n]
        ops.scaled_mm_out(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
        assert_bits_equal(to_numpy(out), want, "strided %dx%dx%d" % (m, n, k))
        after = to_numpy(buf)
        assert np.array_equal(outside_view_bytes(after, after[off_r:off_r + m, off_c:off_c + n]),
                              outside_view_bytes(buf_np, out_np)), "bytes outside out changed"


# ---------------------------------------------------------------------- #
# quantize_i8                                                             #
# ---------------------------------------------------------------------- #
QMODES = ["static_sym", "static_asym", "dynamic_sym", "dynamic_asym"]


def quant_kw(rng, mode, x):
    if mode.startswith("static"):
        s = np.array([np.float32(2.0 ** rng.uniform(-8, 2))])
        z = np.array([rng.integers(-90, 91)], np.int32) if mode == "static_asym" else None
        return s, z, mode == "static_sym"
    return None, None, mode == "dynamic_sym"


@pytest.mark.parametrize("mode", QMODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_quantize_op(rng, cpu_backend, x_dtype, mode):
    for m, k in [(0, 3), (2, 0), (1, 1), (9, 70), (33, 17), (12, 40)]:
        base = special_floats(rng, (m, k)) if m >= 6 else rand_floats(rng, (m, k))
        x = cast(base, x_dtype)
        s, z, sym = quant_kw(rng, mode, x)
        q_ref, s_ref, z_ref = scaledmm.quantize_i8(x, scale=s, azp=z, symmetric=sym,
                                                   backend="reference")
        q, s_t, z_t = ops.quantize_i8(to_torch(x), to_torch(s), to_torch(z), sym)
        what = "quantize %s %s %dx%d" % (x_dtype, mode, m, k)
        assert_bits_equal(to_numpy(q), q_ref, what + " q")
        assert_bits_equal(to_numpy(s_t), s_ref, what + " scale")
        if z_ref is None:
            assert z_t.dtype == torch.int32 and z_t.numel() == 0
        else:
            assert_bits_equal(to_numpy(z_t), z_ref, what + " azp")
        q2, s2, z2 = smt.quantize_i8(to_torch(x), to_torch(s), to_torch(z), sym)
        assert torch.equal(q2, q) and (z2 is None) == (z_ref is None)


def test_quantize_strided_x(rng):
    wide = rand_floats(rng, (20, 50))
    x = wide[2:, 5:37]
    q_ref, s_ref, _ = scaledmm.quantize_i8(x, backend="reference")
    q, s, _ = ops.quantize_i8(torch.from_numpy(wide)[2:, 5:37])
    assert_bits_equal(to_numpy(q), q_ref, "q")
    assert_bits_equal(to_numpy(s), s_ref, "scale")


# ---------------------------------------------------------------------- #
# errors                                                                  #
# ---------------------------------------------------------------------- #
M, N, K = 5, 6, 7


def valid(rng):
    return torch_problem(make_problem(rng, M, N, K, "token", "channel", True, "token"))


def ttransposed(x):
    return x.t().contiguous().t()


# (id, argument named, changes to the valid problem)
MM_CASES = [
    ("a_dtype", "a", lambda t: dict(a=t["a"].to(torch.int16))),
    ("a_uint8", "a", lambda t: dict(a=t["a"].view(torch.uint8))),
    ("a_1d", "a", lambda t: dict(a=t["a"].reshape(-1))),
    ("a_3d", "a", lambda t: dict(a=t["a"].reshape(1, M, K))),
    ("a_transposed", "a", lambda t: dict(a=ttransposed(t["a"]))),
    ("a_column_stride", "a", lambda t: dict(a=t["a"].repeat(1, 2)[:, ::2])),
    ("b_dtype", "b", lambda t: dict(b=t["b"].to(torch.float32))),
    ("b_k", "b", lambda t: dict(b=t["b"][:, :K - 1])),
    ("b_transposed", "b", lambda t: dict(b=ttransposed(t["b"]))),
    ("scale_a_len", "scale_a", lambda t: dict(scale_a=torch.ones(2))),
    ("scale_a_f64", "scale_a", lambda t: dict(scale_a=t["scale_a"].double())),
    ("scale_a_strided", "scale_a", lambda t: dict(scale_a=torch.ones(2 * M)[::2])),
    ("scale_b_len", "scale_b", lambda t: dict(scale_b=torch.ones(N + 1))),
    ("scale_b_f16", "scale_b", lambda t: dict(scale_b=t["scale_b"].half())),
    ("bias_len", "bias", lambda t: dict(bias=torch.ones(N - 1))),
    ("bias_bf16", "bias", lambda t: dict(bias=t["bias"].bfloat16())),
    ("azp_len", "azp", lambda t: dict(azp=torch.ones(3, dtype=torch.int32))),
    ("azp_int64", "azp", lambda t: dict(azp=t["azp"].long())),
]


@pytest.mark.parametrize("case,name,change", MM_CASES, ids=[c[0] for c in MM_CASES])
def test_scaled_mm_bad_argument(rng, case, name, change):
    t = valid(rng)
    t.update(change(t))
    out = torch_poisoned((M, N), torch.float32)
    before = out.clone()
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        ops.scaled_mm_out(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    msg = str(info.value)
    assert "scaledmm." in msg and name in msg, msg
    assert torch.equal(tbits(out), tbits(before)), "out was written"
    with pytest.raises((TypeError, ValueError, RuntimeError), match=name):
        ops.scaled_mm(t["a"], t["b"], t["scale_a"], t["scale_b"], torch.float16, t["bias"], t["azp"])


OUT_CASES = [
    ("dtype", lambda: torch_poisoned((M, N), torch.int32)),
    ("float64", lambda: torch.zeros(M, N, dtype=torch.float64)),
    ("shape", lambda: torch_poisoned((M, N + 1), torch.float32)),
    ("transposed", lambda: torch_poisoned((N, M), torch.float32).t()),
    ("column_stride", lambda: torch_poisoned((M, 2 * N), torch.float16)[:, ::2]),
    ("1d", lambda: torch_poisoned((M * N,), torch.float32)),
]


@pytest.mark.parametrize("case,make", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_scaled_mm_bad_out(rng, case, make):
    t = valid(rng)
    out = make()
    before = out.clone()
    with pytest.raises((TypeError, ValueError, RuntimeError), match="out"):
        ops.scaled_mm_out(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    assert torch.equal(tbits(out), tbits(before)), "out was written"


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.float64, torch.int8])
def test_scaled_mm_bad_out_dtype(rng, out_dtype):
    t = valid(rng)
    with pytest.raises(TypeError, match="out_dtype"):
        ops.scaled_mm(t["a"], t["b"], t["scale_a"], t["scale_b"], out_dtype, None, None)


@pytest.mark.parametrize("target", ["a", "b", "scale_a", "bias", "azp"])
def test_scaled_mm_out_overlaps_input(rng, target):
    """out sharing bytes with an input: the library's SMM_ERR_OVERLAP, nothing written."""
    t = valid(rng)
    buf = torch.zeros(4096, dtype=torch.uint8)
    out = buf[64:64 + M * N * 4].view(torch.float32).view(M, N)
    src = t[target]
    inside = buf[96:96 + src.numel() * src.element_size()].view(src.dtype).view(src.shape)
    inside.copy_(src)
    t[target] = inside
    before = buf.clone()
    with pytest.raises(RuntimeError, match="overlap"):
        ops.scaled_mm_out(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    assert torch.equal(buf, before)


def test_gemm_bad_arguments(rng):
    a, b = to_torch(rand_i8(rng, (M, K))), to_torch(rand_i8(rng, (N, K)))
    for args, name in [((a.float(), b), "a"), ((a, b.short()), "b"), ((a.reshape(-1), b), "a"),
                       ((ttransposed(a), b), "a"), ((a, b[:, :3]), "b"), ((a, ttransposed(b)), "b")]:
        with pytest.raises((TypeError, ValueError), match=name):
            ops.gemm_s8s8s32(*args)


QUANT_CASES = [
    ("x_int8", "x", lambda x: dict(x=x.to(torch.int8))),
    ("x_f64", "x", lambda x: dict(x=x.double())),
    ("x_1d", "x", lambda x: dict(x=x.reshape(-1))),
    ("x_transposed", "x", lambda x: dict(x=ttransposed(x))),
    ("scale_len", "scale", lambda x: dict(scale=torch.ones(2))),
    ("scale_f16", "scale", lambda x: dict(scale=torch.ones(1, dtype=torch.float16))),
    ("azp_dynamic", "azp", lambda x: dict(azp=torch.zeros(1, dtype=torch.int32))),
    ("azp_missing", "azp", lambda x: dict(scale=torch.ones(1), symmetric=False)),
    ("azp_len", "azp", lambda x: dict(scale=torch.ones(1), azp=torch.zeros(2, dtype=torch.int32))),
    ("azp_float", "azp", lambda x: dict(scale=torch.ones(1), azp=torch.zeros(1))),
]


@pytest.mark.parametrize("case,name,change", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quantize_bad_argument(rng, case, name, change):
    kw = dict(x=to_torch(rand_floats(rng, (M, K))), scale=None, azp=None, symmetric=True)
    kw.update(change(kw["x"]))
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        ops.quantize_i8(kw["x"], kw["scale"], kw["azp"], kw["symmetric"])
    assert "scaledmm." in str(info.value) and name in str(info.value), str(info.value)


# ---------------------------------------------------------------------- #
# opcheck, torch.compile                                                  #
# ---------------------------------------------------------------------- #
def opcheck_samples(rng, device="cpu"):
    """(op, args) pairs covering every op and its optional arguments."""
    samples = []
    for epi, dt in [(("tensor", "tensor", False, None), torch.float32),
                    (("token", "channel", True, None), torch.float16),
                    (("token", "channel", True, "token"), torch.bfloat16),
                    (("tensor", "channel", False, "tensor"), torch.float32)]:
        t = torch_problem(make_problem(rng, 7, 9, 33, *epi), device)
        samples.append((ops.scaled_mm.default,
                        (t["a"], t["b"], t["scale_a"], t["scale_b"], dt, t["bias"], t["azp"])))
        out = torch.empty(7, 9, dtype=dt, device=device)
        samples.append((ops.scaled_mm_out.default,
                        (t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)))
    samples.append((ops.gemm_s8s8s32.default, (to_torch(rand_i8(rng, (5, 12)), device),
                                               to_torch(rand_i8(rng, (3, 12)), device))))
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = to_torch(rand_floats(rng, (6, 20)), device).to(dt)
        samples.append((ops.quantize_i8.default, (x, None, None, True)))
        samples.append((ops.quantize_i8.default, (x, None, None, False)))
        s = torch.tensor([0.05], device=device)
        samples.append((ops.quantize_i8.default, (x, s, None, True)))
        samples.append((ops.quantize_i8.default, (x, s, torch.tensor([3], dtype=torch.int32,
                                                                   device=device), False)))
    return samples


def test_opcheck(rng):
    for op, args in opcheck_samples(rng):
        torch.library.opcheck(op, args)


def test_compile_fullgraph_function(rng):
    """A function calling every op compiles to one graph (no break) and
    returns the eager bits, under aot_eager and inductor's tracing."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x, w, ws, bias):
        q, s, z = ops.quantize_i8(x, None, None, False)
        y = ops.scaled_mm(q, w, s, ws, torch.bfloat16, bias, z)
        acc = ops.gemm_s8s8s32(q, w)
        q2, s2, _ = ops.quantize_i8(x, s[:1].contiguous(), None, True)
        out = torch.empty(x.shape[0], w.shape[0], dtype=torch.float16)
        ops.scaled_mm_out(q2, w, s2, ws, None, None, out)
        return y, acc, out

    x = to_torch(rand_floats(rng, (11, 24)))
    w = to_torch(rand_i8(rng, (13, 24)))
    ws = to_torch(rng.uniform(0.001, 0.01, 13).astype(np.float32))
    bias = to_torch(rand_floats(rng, (13,)))
    eager = fn(x, w, ws, bias)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter, dynamic=False)
    got = compiled(x, w, ws, bias)
    assert counter.frame_count == 1
    for g, e in zip(got, eager):
        assert g.dtype == e.dtype and torch.equal(tbits(g), tbits(e))
    # a new input of the same shape reuses the graph and still matches eager
    x2 = to_torch(rand_floats(rng, (11, 24)))
    got2, eager2 = compiled(x2, w, ws, bias), fn(x2, w, ws, bias)
    assert counter.frame_count == 1
    assert all(torch.equal(tbits(a), tbits(b)) for a, b in zip(got2, eager2))
