"""torch.ops.scaledmm.linear_packed (smm_linear) on CPU tensors: the bits
of quantize_i8 followed by scaled_mm_packed (out, q, scale and azp) over
random shapes, activation and output dtypes, static and dynamic
quantization, symmetric and with zero points, with and without bias, on
each CPU backend; bad input raises naming the argument and writes nothing;
opcheck and torch.compile(fullgraph=True).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaledmm.torch as smt  # noqa: E402
from helpers import (OUT_DTYPES, SHAPES, cast, rand_floats, rand_i8, rand_scales,  # noqa: E402
                     special_floats, to_torch, torch_dtype)

ops = torch.ops.scaledmm

QMODES = ["static_sym", "static_asym", "dynamic_sym", "dynamic_asym"]


@pytest.fixture(params=["cpu", "reference"])
def cpu_backend(request):
    """Runs the test with the ops' CPU tensors on each library backend."""
    smt.set_cpu_backend(request.param)
    yield request.param
    smt.set_cpu_backend("cpu")


def tbits(t):
    """The bytes of tensor t (a contiguous uint8 view of a copy)."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def same_bits(got, want):
    """Same dtype, shape and bytes."""
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(tbits(got), tbits(want))


def quant_args(rng, mode):
    """(x_scale, x_azp, symmetric) of a quantization mode, as tensors."""
    if mode.startswith("static"):
        s = torch.tensor([np.float32(2.0 ** rng.uniform(-8, 2))])
        z = (torch.tensor([int(rng.integers(-90, 91))], dtype=torch.int32)
             if mode == "static_asym" else None)
        return s, z, mode == "static_sym"
    return None, None, mode == "dynamic_sym"


def weights(rng, n, k, per_channel, bias):
    """(weight int8 [N, K], scale_b float32 [N] or [1], bias float32 [N] or None)."""
    w = to_torch(rand_i8(rng, (n, k)))
    sb = to_torch(rand_scales(rng, n if per_channel else 1))
    return w, sb, (to_torch(rand_floats(rng, (n,))) if bias else None)


def two_calls(x, pb, sb, dt, bias, xs, xz, sym):
    """quantize_i8 then scaled_mm_packed: (out, q, scale, azp)."""
    q, s, z = ops.quantize_i8(x, xs, xz, sym)
    out = ops.scaled_mm_packed(q, pb, s, sb, dt, bias, z if z.numel() else None)
    return out, q, s, z


def check_linear(x, pb, sb, dt, bias, xs, xz, sym, what):
    """linear_packed (the op and the Python wrapper) against the two calls."""
    want = two_calls(x, pb, sb, dt, bias, xs, xz, sym)
    got = ops.linear_packed(x, pb, sb, dt, bias, xs, xz, sym)
    for name, g, w in zip(("out", "q", "scale", "azp"), got, want):
        assert same_bits(g, w), "%s: %s differs from quantize_i8 + scaled_mm_packed" % (what, name)
    py = smt.linear_packed(x, pb, sb, dt, bias=bias, x_scale=xs, x_azp=xz, symmetric=sym)
    for name, g, w in zip(("out", "q", "scale"), py[:3], want[:3]):
        assert same_bits(g, w), "%s: wrapper's %s differs" % (what, name)
    if xz is None and sym:
        assert py[3] is None, what
    else:
        assert same_bits(py[3], want[3]), "%s: wrapper's azp differs" % what


# ---------------------------------------------------------------------- #
# linear_packed == quantize_i8 + scaled_mm_packed, bit for bit            #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", QMODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_linear_equals_two_calls(rng, cpu_backend, x_dtype, mode):
    """Every shape of helpers.SHAPES (M = 0, N = 0, K = 0, M = 1, tails of
    the tiles), every output dtype, per-tensor and per-channel weight
    scales, with and without bias."""
    for m, n, k in SHAPES:
        base = special_floats(rng, (m, k)) if m >= 6 and k else rand_floats(rng, (m, k))
        x = to_torch(cast(base, x_dtype))
        for i, out_dtype in enumerate(OUT_DTYPES):
            for bias in (False, True):
                w, sb, b = weights(rng, n, k, (i + bias) % 2 == 0, bias)
                pb = smt.pack_b(w)
                xs, xz, sym = quant_args(rng, mode)
                what = "%s %s %s %dx%dx%d %s%s" % (cpu_backend, x_dtype, mode, m, n, k, out_dtype,
                                                   " bias" if bias else "")
                check_linear(x, pb, sb, torch_dtype(out_dtype), b, xs, xz, sym, what)


def test_linear_random_problems(rng, cpu_backend):
    """Random shapes (M past 16, odd N and K, K past the CPU driver's 1024
    block), modes and dtypes, x with strided rows, on each CPU backend."""
    for i in range(24):
        m = int(rng.integers(0, 80)) if i % 3 else int(rng.integers(1, 4))
        n = int(rng.integers(0, 70)) | (i % 2)
        k = int(rng.integers(0, 2300)) if i % 4 == 3 else int(rng.integers(0, 90)) | 1
        x_dtype = OUT_DTYPES[rng.integers(3)]
        out_dtype = OUT_DTYPES[rng.integers(3)]
        mode = QMODES[rng.integers(len(QMODES))]
        x = to_torch(cast(rand_floats(rng, (m, k)), x_dtype))
        if m > 1 and k > 0 and rng.integers(2):
            wide = torch.zeros(m, k + 7, dtype=x.dtype)
            wide[:, 3:k + 3] = x
            x = wide[:, 3:k + 3]
        w, sb, b = weights(rng, n, k, bool(rng.integers(2)), bool(rng.integers(2)))
        xs, xz, sym = quant_args(rng, mode)
        what = "%s %s %s %dx%dx%d %s" % (cpu_backend, x_dtype, mode, m, n, k, out_dtype)
        check_linear(x, smt.pack_b(w), sb, torch_dtype(out_dtype), b, xs, xz, sym, what)


def test_linear_static_azp_symmetric_flag(rng):
    """Static: x_azp decides, whatever symmetric says (as quantize_i8)."""
    x = to_torch(rand_floats(rng, (5, 19)))
    w, sb, b = weights(rng, 7, 19, True, True)
    pb = smt.pack_b(w)
    xs, xz = torch.tensor([0.03]), torch.tensor([-7], dtype=torch.int32)
    for sym in (True, False):
        check_linear(x, pb, sb, torch.bfloat16, b, xs, xz, sym, "static azp symmetric=%s" % sym)


def test_linear_outputs(rng):
    """Shapes, dtypes and devices of the results; the static scale and
    zero point are copies, not the inputs; the wrapper's default out_dtype
    is x's."""
    x = to_torch(rand_floats(rng, (4, 9))).half()
    w, sb, _ = weights(rng, 3, 9, True, False)
    pb = smt.pack_b(w)
    out, q, s, z = ops.linear_packed(x, pb, sb, torch.float32, None, None, None, False)
    assert (out.shape, out.dtype, q.shape, q.dtype) == ((4, 3), torch.float32, (4, 9), torch.int8)
    assert (s.shape, s.dtype, z.shape, z.dtype) == ((4,), torch.float32, (4,), torch.int32)
    out, q, s, z = ops.linear_packed(x, pb, sb, torch.float32, None, None, None, True)
    assert (s.shape, z.shape, z.dtype) == ((4,), (0,), torch.int32)
    xs, xz = torch.tensor([0.5]), torch.tensor([3], dtype=torch.int32)
    _, _, s, z = ops.linear_packed(x, pb, sb, torch.float32, None, xs, xz, False)
    assert torch.equal(s, xs) and torch.equal(z, xz)
    assert s.data_ptr() != xs.data_ptr() and z.data_ptr() != xz.data_ptr()
    assert smt.linear_packed(x, pb, sb)[0].dtype == torch.float16


def test_linear_threads(rng):
    """The same bits at every CPU thread count."""
    x = to_torch(rand_floats(rng, (96, 1100)))
    w, sb, b = weights(rng, 80, 1100, True, True)
    pb = smt.pack_b(w)
    want = two_calls(x, pb, sb, torch.bfloat16, b, None, None, False)
    try:
        for threads in (1, 2, 0):
            smt.set_num_threads(threads)
            got = ops.linear_packed(x, pb, sb, torch.bfloat16, b, None, None, False)
            assert all(same_bits(g, w) for g, w in zip(got, want)), "%d threads" % threads
    finally:
        smt.set_num_threads(0)


# ---------------------------------------------------------------------- #
# errors                                                                  #
# ---------------------------------------------------------------------- #
M, N, K = 5, 6, 7


def valid(rng):
    """The arguments of a valid linear_packed call (static asymmetric
    quantization, so every optional tensor is given), weight packed."""
    w, sb, b = weights(rng, N, K, True, True)
    return dict(x=to_torch(rand_floats(rng, (M, K))), pb=smt.pack_b(w), w=w, scale_b=sb,
                out_dtype=torch.float32, bias=b, x_scale=torch.tensor([0.02]),
                x_azp=torch.tensor([4], dtype=torch.int32), symmetric=False)


def ttransposed(x):
    """x's values in a column-major (transposed) layout."""
    return x.t().contiguous().t()


def call(t):
    """linear_packed with the arguments of dict t."""
    return ops.linear_packed(t["x"], t["pb"], t["scale_b"], t["out_dtype"], t["bias"],
                             t["x_scale"], t["x_azp"], t["symmetric"])


# (id, exception, argument named, changes to the valid call)
LINEAR_CASES = [
    ("x_int8", TypeError, "x", lambda t: dict(x=t["x"].to(torch.int8))),
    ("x_f64", TypeError, "x", lambda t: dict(x=t["x"].double())),
    ("x_1d", ValueError, "x", lambda t: dict(x=t["x"].reshape(-1))),
    ("x_3d", ValueError, "x", lambda t: dict(x=t["x"].reshape(1, M, K))),
    ("x_transposed", ValueError, "x", lambda t: dict(x=ttransposed(t["x"]))),
    ("x_column_stride", ValueError, "x", lambda t: dict(x=t["x"].repeat(1, 2)[:, ::2])),
    ("b_k", ValueError, "b", lambda t: dict(pb=smt.pack_b(t["w"][:, :K - 1]))),
    ("b_k_more", ValueError, "b",
     lambda t: dict(pb=smt.pack_b(torch.zeros(N, K + 1, dtype=torch.int8)))),
    ("scale_b_len", ValueError, "scale_b", lambda t: dict(scale_b=torch.ones(N + 1))),
    ("scale_b_len_of_other_n", ValueError, "scale_b",
     lambda t: dict(pb=smt.pack_b(t["w"][:N - 2]), bias=None)),
    ("scale_b_f16", TypeError, "scale_b", lambda t: dict(scale_b=t["scale_b"].half())),
    ("scale_b_strided", ValueError, "scale_b", lambda t: dict(scale_b=torch.ones(2 * N)[::2])),
    ("bias_len", ValueError, "bias", lambda t: dict(bias=torch.ones(N - 1))),
    ("bias_bf16", TypeError, "bias", lambda t: dict(bias=t["bias"].bfloat16())),
    ("bias_strided", ValueError, "bias", lambda t: dict(bias=torch.ones(2 * N)[::2])),
    ("x_scale_len", ValueError, "x_scale", lambda t: dict(x_scale=torch.ones(M))),
    ("x_scale_f64", TypeError, "x_scale", lambda t: dict(x_scale=t["x_scale"].double())),
    ("x_azp_len", ValueError, "x_azp", lambda t: dict(x_azp=torch.ones(2, dtype=torch.int32))),
    ("x_azp_int64", TypeError, "x_azp", lambda t: dict(x_azp=t["x_azp"].long())),
    ("x_azp_float", TypeError, "x_azp", lambda t: dict(x_azp=t["x_azp"].float())),
    ("x_azp_missing", ValueError, "x_azp", lambda t: dict(x_azp=None)),
    ("x_azp_dynamic", ValueError, "x_azp", lambda t: dict(x_scale=None)),
    ("out_dtype_int32", TypeError, "out_dtype", lambda t: dict(out_dtype=torch.int32)),
    ("out_dtype_f64", TypeError, "out_dtype", lambda t: dict(out_dtype=torch.float64)),
]


@pytest.mark.parametrize("case,exc,name,change", LINEAR_CASES, ids=[c[0] for c in LINEAR_CASES])
def test_linear_bad_argument(rng, case, exc, name, change):
    """The exception type, the message naming the op and the argument, and
    every input left as it was (through the op and the wrapper)."""
    t = valid(rng)
    t.update(change(t))
    inputs = {k: t[k].clone() for k in ("x", "scale_b", "bias", "x_scale", "x_azp", "w")
              if t[k] is not None}
    with pytest.raises(exc) as info:
        call(t)
    msg = str(info.value)
    assert "scaledmm.linear_packed: " in msg and name in msg, msg
    with pytest.raises(exc, match=r"scaledmm\.linear_packed: "):
        smt.linear_packed(t["x"], t["pb"], t["scale_b"], t["out_dtype"], t["bias"], t["x_scale"],
                          t["x_azp"], t["symmetric"])
    for k, before in inputs.items():
        assert same_bits(t[k], before), "%s was written" % k


def test_linear_k_message(rng):
    """A K mismatch names both shapes."""
    t = valid(rng)
    t["pb"] = smt.pack_b(t["w"][:, :K - 2])
    with pytest.raises(ValueError, match=r"b was packed from a weight of shape \[6, 5\]; "
                                         r"expected \[N, 7\] \(K of x\)"):
        call(t)


def test_linear_backend_changed(rng):
    """A B packed on the cpu backend, used after set_cpu_backend("reference"):
    a ValueError naming both backends; usable again once the backend is back."""
    t = valid(rng)
    want = call(t)
    smt.set_cpu_backend("reference")
    try:
        with pytest.raises(ValueError, match="scaledmm.linear_packed: b was packed on backend "
                                             "'cpu' but cpu tensors now run on backend 'reference'"):
            call(t)
    finally:
        smt.set_cpu_backend("cpu")
    assert all(same_bits(g, w) for g, w in zip(call(t), want))


def test_linear_meta_shapes():
    """Meta tensors run the fake kernel: the results' shapes and dtypes."""
    pb = smt.pack_b(torch.zeros(N, K, dtype=torch.int8))
    x = torch.empty(M, K, device="meta", dtype=torch.bfloat16)
    got = ops.linear_packed(x, pb, torch.ones(N, device="meta"), torch.float16, None, None, None,
                            False)
    assert [(tuple(t.shape), t.dtype, t.device.type) for t in got] == [
        ((M, N), torch.float16, "meta"), ((M, K), torch.int8, "meta"),
        ((M,), torch.float32, "meta"), ((M,), torch.int32, "meta")]


def test_linear_device_mismatch_fake(rng):
    """The fake kernel refuses x on another device than the packed B's
    (the C++ check is tested on a GPU in test_gpu.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    t = valid(rng)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(M, K, device="cuda:0")
        with pytest.raises(Exception, match="b was packed for cpu but x is on cuda:0"):
            ops.linear_packed(x, t["pb"], t["scale_b"], torch.float32, None, None, None, True)


# ---------------------------------------------------------------------- #
# opcheck                                                                 #
# ---------------------------------------------------------------------- #
def test_opcheck_linear(rng):
    """torch.library.opcheck's fake-kernel and autograd-registration checks
    (test_schema and test_aot_dispatch_dynamic cannot take the PackedB, as
    for scaled_mm_packed), over every quantization mode and x dtype."""
    utils = ("test_autograd_registration", "test_faketensor")
    for i, (x_dtype, mode) in enumerate([(d, q) for d in OUT_DTYPES for q in QMODES]):
        x = to_torch(rand_floats(rng, (7, 33))).to(torch_dtype(x_dtype))
        w, sb, b = weights(rng, 9, 33, i % 2 == 0, i % 3 != 0)
        xs, xz, sym = quant_args(rng, mode)
        dt = torch_dtype(OUT_DTYPES[i % 3])
        torch.library.opcheck(ops.linear_packed.default,
                              (x, smt.pack_b(w), sb, dt, b, xs, xz, sym), test_utils=utils)


# ---------------------------------------------------------------------- #
# torch.compile                                                           #
# ---------------------------------------------------------------------- #
class LinearModule(torch.nn.Module):
    """linear_packed on a PackedB held as an attribute."""

    def __init__(self, w, ws, bias):
        """w int8 [N, K] (packed here), ws float32 [N], bias float32 [N]."""
        super().__init__()
        self.register_buffer("ws", ws)
        self.register_buffer("bias", bias)
        self.register_buffer("xs", torch.tensor([0.04]))
        self.pb = smt.pack_b(w)

    def forward(self, x):
        """x float32 [M, K] -> (bfloat16 [M, N], dynamic with zero points,
        and its int8 activations; float16 [M, N], static symmetric)."""
        y, q, _, _ = ops.linear_packed(x, self.pb, self.ws, torch.bfloat16, self.bias, None, None,
                                       False)
        y2, _, _, _ = ops.linear_packed(x, self.pb, self.ws, torch.float16, None, self.xs, None,
                                        True)
        return y, q, y2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_linear(rng, backend):
    """torch.compile(fullgraph=True) of a module calling linear_packed: one
    graph holding the op, the eager bits; a second module of the same
    shapes reuses the graph with its own PackedB."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def make():
        """A LinearModule of random weights."""
        w = to_torch(rand_i8(rng, (13, 40)))
        ws = to_torch(rng.uniform(0.001, 0.01, 13).astype(np.float32))
        return LinearModule(w, ws, to_torch(rand_floats(rng, (13,))))

    mod, mod2 = make(), make()
    x = to_torch(rand_floats(rng, (11, 40)))
    eager, eager2 = mod(x), mod2(x)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    graphs = []

    def recording(gm, example_inputs):
        """The counting backend, keeping each graph."""
        graphs.append(gm)
        return counter(gm, example_inputs)

    got = torch.compile(mod, fullgraph=True, backend=recording, dynamic=False)(x)
    assert counter.frame_count == 1
    assert any("linear_packed" in str(node.target) for node in graphs[0].graph.nodes)
    for g, e in zip(got, eager):
        assert same_bits(g, e)
    got2 = torch.compile(mod2, fullgraph=True, backend=recording, dynamic=False)(x)
    assert counter.frame_count == 1, "a second PackedB of the same shape recompiled"
    for g, e in zip(got2, eager2):
        assert same_bits(g, e)
    assert not same_bits(got2[0], eager[0]), "the second module's weight"
