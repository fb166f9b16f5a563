"""torch.ops.scaledmm.pack_b and scaled_mm_packed on CPU tensors: the
packed weight gives the bits of scaled_mm with the unpacked one (and of the
NumPy reference backend) over random shapes, output dtypes, scale modes,
bias and zero points; bad input raises naming the argument and writes
nothing; torch.compile(fullgraph=True) traces a module holding a PackedB.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaledmm  # noqa: E402
import scaledmm.torch as smt  # noqa: E402
from helpers import (EPILOGUES, OUT_DTYPES, SHAPES, assert_bits_equal, epi_id,  # noqa: E402
                     make_problem, rand_floats, rand_i8, ref_scaled_mm, to_numpy, to_torch,
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
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def torch_problem(p, device="cpu"):
    """The NumPy problem p (helpers.make_problem) as tensors on device."""
    return {k: to_torch(v, device) for k, v in p.items()}


def same_bits(got, want):
    """Same dtype, shape and bytes (torch.equal on the bytes)."""
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(tbits(got), tbits(want))


def unpacked(t, dt):
    """scaled_mm of tensor problem t with the int8 weight t["b"], out dtype dt."""
    return ops.scaled_mm(t["a"], t["b"], t["scale_a"], t["scale_b"], dt, t["bias"], t["azp"])


def packed_three_ways(t, pb, dt):
    """scaled_mm_packed through the op, the out variant into a poisoned
    tensor, and the Python wrapper (into a fresh tensor)."""
    args = (t["a"], pb, t["scale_a"], t["scale_b"])
    r_op = ops.scaled_mm_packed(*args, dt, t["bias"], t["azp"])
    out = torch_poisoned((t["a"].shape[0], pb.n()), dt)
    ops.scaled_mm_packed_out(*args, t["bias"], t["azp"], out)
    r_py = smt.scaled_mm_packed(*args, out_dtype=dt, bias=t["bias"], azp=t["azp"])
    return {"op": r_op, "out": out, "py": r_py}


# ---------------------------------------------------------------------- #
# packed == unpacked, bit for bit                                         #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("epi", EPILOGUES, ids=epi_id)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_packed_equals_unpacked(rng, out_dtype, epi):
    dt = torch_dtype(out_dtype)
    for m, n, k in SHAPES:
        p = make_problem(rng, m, n, k, *epi)
        t = torch_problem(p)
        pb = smt.pack_b(t["b"])
        assert (pb.n(), pb.k()) == (n, k)
        want = unpacked(t, dt)
        assert_bits_equal(to_numpy(want), ref_scaled_mm(p, out_dtype), "unpacked vs reference")
        for how, got in packed_three_ways(t, pb, dt).items():
            assert same_bits(got, want), "%s %dx%dx%d %s %s: packed differs from unpacked" % (
                how, m, n, k, out_dtype, epi_id(epi))


def test_packed_random_problems(rng, cpu_backend):
    """Random shapes (K past the CPU driver's 1024 block and its tails),
    epilogues and output dtypes, strided a and weight, on each CPU backend."""
    for i in range(16):
        m, n = (int(v) for v in rng.integers(0, 80, size=2))
        k = int(rng.integers(0, 2300)) if i % 2 else int(rng.integers(0, 90))
        epi = EPILOGUES[rng.integers(len(EPILOGUES))]
        out_dtype = OUT_DTYPES[rng.integers(3)]
        dt = torch_dtype(out_dtype)
        p = make_problem(rng, m, n, k, *epi)
        t = torch_problem(p)
        if m > 1 and k > 0 and rng.integers(2):
            wide = to_torch(rand_i8(rng, (m, k + 3)))
            wide[:, 2:k + 2] = t["a"]
            t["a"] = wide[:, 2:k + 2]
        w = t["b"]
        if n > 1 and k > 0 and rng.integers(2):
            wide = to_torch(rand_i8(rng, (n, k + 5)))
            wide[:, :k] = w
            w = wide[:, :k]
        pb = smt.pack_b(w)
        assert pb.backend() == cpu_backend and pb.device() == "cpu"
        want = unpacked(t, dt)
        what = "%s %dx%dx%d %s %s" % (cpu_backend, m, n, k, out_dtype, epi_id(epi))
        assert_bits_equal(to_numpy(want), ref_scaled_mm(p, out_dtype), what + " unpacked")
        for how, got in packed_three_ways(t, pb, dt).items():
            assert same_bits(got, want), "%s %s: packed differs from unpacked" % (how, what)


# ---------------------------------------------------------------------- #
# call_packed: the wrappers' way around torch's per-call probe            #
# ---------------------------------------------------------------------- #
class _Overrides(torch.Tensor):
    """A tensor subclass that overrides __torch_function__ and records the
    functions it sees."""
    seen = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def _record_disable(monkeypatch):
    """Counts the wrappers' entries into DisableTorchFunctionSubclass."""
    used = []
    real = torch._C.DisableTorchFunctionSubclass

    class Counting:
        def __enter__(self):
            used.append(1)
            self.inner = real()
            return self.inner.__enter__()

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    monkeypatch.setattr(torch._C, "DisableTorchFunctionSubclass", Counting)
    return used


def _linear_problem(rng):
    t = torch_problem(make_problem(rng, 3, 24, 40, "token", "channel", True, None))
    x = torch.from_numpy(rand_floats(rng, (3, 40))).to(torch.bfloat16)
    return t, x, smt.pack_b(t["b"])


def test_call_packed_fast_path(rng, monkeypatch):
    """Plain tensors and Parameters (which disable __torch_function__): the
    wrappers call the ops with subclass overrides off, with the op's bits."""
    t, x, pb = _linear_problem(rng)
    want = ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], torch.float16,
                                t["bias"], None)
    want_l = ops.linear_packed(x, pb, t["scale_b"], torch.bfloat16, t["bias"], None, None, True)
    used = _record_disable(monkeypatch)
    sb = torch.nn.Parameter(t["scale_b"], requires_grad=False)
    got = smt.scaled_mm_packed(t["a"], pb, t["scale_a"], sb, torch.float16, t["bias"])
    got_l = smt.linear_packed(x, pb, sb, bias=t["bias"])
    assert len(used) == 2
    assert same_bits(got, want)
    for g, w in zip(got_l[:3], want_l[:3]):
        assert same_bits(g, w)
    assert got_l[3] is None


def test_call_packed_keeps_overrides(rng, monkeypatch):
    """A tensor subclass overriding __torch_function__ still sees the op,
    and so does a torch function mode (the wrappers then call the op as it
    is); the bits are the op's."""
    t, x, pb = _linear_problem(rng)
    want = ops.linear_packed(x, pb, t["scale_b"], torch.bfloat16, None, None, None, True)
    _Overrides.seen = []
    got = smt.linear_packed(x, pb, t["scale_b"].as_subclass(_Overrides))
    assert ops.linear_packed in _Overrides.seen
    assert same_bits(got[0].as_subclass(torch.Tensor), want[0])

    class Mode(torch.overrides.TorchFunctionMode):
        seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Mode.seen.append(func)
            return func(*args, **(kwargs or {}))

    used = _record_disable(monkeypatch)
    with Mode():
        got = smt.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], torch.float32)
    assert used == [] and ops.scaled_mm_packed in Mode.seen   # called as it is
    assert same_bits(got, ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"],
                                               torch.float32, None, None))


def test_call_packed_fx_trace(rng):
    """torch.fx.symbolic_trace through the wrappers (its proxies override
    __torch_function__): the traced module gives the op's bits."""
    t, x, pb = _linear_problem(rng)

    class M(torch.nn.Module):
        def forward(self, xx, sb):
            return smt.linear_packed(xx, pb, sb)[0]

    gm = torch.fx.symbolic_trace(M())
    want = ops.linear_packed(x, pb, t["scale_b"], torch.bfloat16, None, None, None, True)[0]
    assert same_bits(gm(x, t["scale_b"]), want)


def test_packed_k_wraps(rng):
    """K > 2^17: the int32 sums wrap, the packed column sums with them."""
    p = make_problem(rng, 2, 3, (1 << 17) + 37, "token", "channel", True, "token")
    p["a"][:] = -128
    p["b"][:] = -128
    t = torch_problem(p)
    pb = smt.pack_b(t["b"])
    for dt in (torch.float32, torch.bfloat16):
        want = unpacked(t, dt)
        assert_bits_equal(to_numpy(want), ref_scaled_mm(p, {torch.float32: "float32",
                                                              torch.bfloat16: "bfloat16"}[dt]), "ref")
        assert same_bits(ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], dt,
                                              t["bias"], t["azp"]), want)


def test_packed_b_properties(rng, cpu_backend):
    """n, k, device, backend, and the format of the NumPy API's pack_b on
    the same backend; the packed copy does not depend on the weight after."""
    w = to_torch(rand_i8(rng, (9, 70)))
    pb = smt.pack_b(w)
    assert (pb.n(), pb.k(), pb.device(), pb.backend()) == (9, 70, "cpu", cpu_backend)
    assert pb.format() == scaledmm.pack_b(w.numpy(), backend=cpu_backend).format
    assert pb.format().startswith(cpu_backend + " ")
    assert isinstance(pb, smt.PackedB)
    assert dict(pb.__obj_flatten__()) == {"n": 9, "k": 70, "format": pb.format(), "device": "cpu",
                                          "backend": cpu_backend}
    t = torch_problem(make_problem(rng, 5, 9, 70, "token", "channel", True, "token"))
    t["b"] = w.clone()
    want = unpacked(t, torch.float16)
    w.fill_(7)                                       # the packed copy is independent
    del w
    got = ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], torch.float16, t["bias"], t["azp"])
    assert same_bits(got, want)


def test_packed_threads(rng):
    """One PackedB used by calls with several CPU thread counts."""
    p = make_problem(rng, 96, 80, 1100, "token", "channel", True, "token")
    t = torch_problem(p)
    pb = smt.pack_b(t["b"])
    want = unpacked(t, torch.bfloat16)
    try:
        for threads in (1, 2, 0):
            smt.set_num_threads(threads)
            got = ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], torch.bfloat16,
                                       t["bias"], t["azp"])
            assert same_bits(got, want), "%d threads" % threads
    finally:
        smt.set_num_threads(0)


# ---------------------------------------------------------------------- #
# errors                                                                  #
# ---------------------------------------------------------------------- #
M, N, K = 5, 6, 7


def valid(rng):
    """A valid [M, K] x [N, K] tensor problem, its weight packed as t["pb"]."""
    t = torch_problem(make_problem(rng, M, N, K, "token", "channel", True, "token"))
    t["pb"] = smt.pack_b(t["b"])
    return t


def ttransposed(x):
    """x's values in a column-major (transposed) layout."""
    return x.t().contiguous().t()


# (id, argument named, changes to the valid problem)
PACKED_CASES = [
    ("a_dtype", "a", lambda t: dict(a=t["a"].to(torch.int16))),
    ("a_uint8", "a", lambda t: dict(a=t["a"].view(torch.uint8))),
    ("a_1d", "a", lambda t: dict(a=t["a"].reshape(-1))),
    ("a_3d", "a", lambda t: dict(a=t["a"].reshape(1, M, K))),
    ("a_transposed", "a", lambda t: dict(a=ttransposed(t["a"]))),
    ("a_column_stride", "a", lambda t: dict(a=t["a"].repeat(1, 2)[:, ::2])),
    ("b_k", "b", lambda t: dict(pb=smt.pack_b(t["b"][:, :K - 1]))),
    ("b_k_more", "b", lambda t: dict(pb=smt.pack_b(torch.zeros(N, K + 1, dtype=torch.int8)))),
    ("scale_a_len", "scale_a", lambda t: dict(scale_a=torch.ones(2))),
    ("scale_a_f64", "scale_a", lambda t: dict(scale_a=t["scale_a"].double())),
    ("scale_a_strided", "scale_a", lambda t: dict(scale_a=torch.ones(2 * M)[::2])),
    ("scale_b_len", "scale_b", lambda t: dict(scale_b=torch.ones(N + 1))),
    ("scale_b_len_of_other_n", "scale_b",
     lambda t: dict(pb=smt.pack_b(t["b"][:N - 2]), bias=None)),
    ("scale_b_f16", "scale_b", lambda t: dict(scale_b=t["scale_b"].half())),
    ("bias_len", "bias", lambda t: dict(bias=torch.ones(N - 1))),
    ("bias_bf16", "bias", lambda t: dict(bias=t["bias"].bfloat16())),
    ("azp_len", "azp", lambda t: dict(azp=torch.ones(3, dtype=torch.int32))),
    ("azp_int64", "azp", lambda t: dict(azp=t["azp"].long())),
]


@pytest.mark.parametrize("case,name,change", PACKED_CASES, ids=[c[0] for c in PACKED_CASES])
def test_packed_bad_argument(rng, case, name, change):
    t = valid(rng)
    t.update(change(t))
    n = t["pb"].n()
    out = torch_poisoned((M, n), torch.float32)
    before = out.clone()
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        ops.scaled_mm_packed_out(t["a"], t["pb"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    msg = str(info.value)
    assert "scaledmm.scaled_mm_packed_out: " in msg and name in msg, msg
    assert torch.equal(tbits(out), tbits(before)), "out was written"
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        ops.scaled_mm_packed(t["a"], t["pb"], t["scale_a"], t["scale_b"], torch.float16, t["bias"],
                             t["azp"])
    assert "scaledmm.scaled_mm_packed: " in str(info.value) and name in str(info.value), str(info.value)


def test_packed_k_message(rng):
    """A K mismatch names both shapes."""
    t = valid(rng)
    pb = smt.pack_b(t["b"][:, :K - 2])
    with pytest.raises(ValueError, match=r"b was packed from a weight of shape \[6, 5\]; "
                                         r"expected \[N, 7\] \(K of a\)"):
        smt.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"])


OUT_CASES = [
    ("dtype", lambda: torch_poisoned((M, N), torch.int32)),
    ("float64", lambda: torch.zeros(M, N, dtype=torch.float64)),
    ("shape", lambda: torch_poisoned((M, N + 1), torch.float32)),
    ("transposed", lambda: torch_poisoned((N, M), torch.float32).t()),
    ("column_stride", lambda: torch_poisoned((M, 2 * N), torch.float16)[:, ::2]),
    ("1d", lambda: torch_poisoned((M * N,), torch.float32)),
]


@pytest.mark.parametrize("case,make", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_packed_bad_out(rng, case, make):
    t = valid(rng)
    out = make()
    before = out.clone()
    with pytest.raises((TypeError, ValueError, RuntimeError), match="out"):
        ops.scaled_mm_packed_out(t["a"], t["pb"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    assert torch.equal(tbits(out), tbits(before)), "out was written"


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.float64, torch.int8])
def test_packed_bad_out_dtype(rng, out_dtype):
    t = valid(rng)
    with pytest.raises(TypeError, match="out_dtype"):
        ops.scaled_mm_packed(t["a"], t["pb"], t["scale_a"], t["scale_b"], out_dtype, None, None)


@pytest.mark.parametrize("target", ["a", "scale_a", "bias", "azp"])
def test_packed_out_overlaps_input(rng, target):
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
        ops.scaled_mm_packed_out(t["a"], t["pb"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    assert torch.equal(buf, before)


PACK_CASES = [
    ("float", TypeError, lambda w: w.float()),
    ("uint8", TypeError, lambda w: w.view(torch.uint8)),
    ("1d", ValueError, lambda w: w.reshape(-1)),
    ("3d", ValueError, lambda w: w.reshape(1, N, K)),
    ("transposed", ValueError, lambda w: ttransposed(w)),
    ("column_stride", ValueError, lambda w: w.repeat(1, 2)[:, ::2]),
]


@pytest.mark.parametrize("case,exc,change", PACK_CASES, ids=[c[0] for c in PACK_CASES])
def test_pack_b_bad_weight(rng, case, exc, change):
    w = change(to_torch(rand_i8(rng, (N, K))))
    with pytest.raises(exc, match=r"scaledmm\.pack_b: weight"):
        smt.pack_b(w)


def test_pack_b_meta_device():
    """A weight on a device the ops do not run on: no kernel for it."""
    with pytest.raises(NotImplementedError, match="pack_b"):
        smt.pack_b(torch.empty(N, K, dtype=torch.int8, device="meta"))


def test_packed_backend_changed(rng):
    """A B packed on the cpu backend, used after set_cpu_backend("reference"):
    a ValueError naming both backends, nothing written; usable again once
    the backend is back."""
    t = valid(rng)
    want = unpacked(t, torch.float32)
    out = torch_poisoned((M, N), torch.float32)
    before = out.clone()
    smt.set_cpu_backend("reference")
    try:
        with pytest.raises(ValueError, match="b was packed on backend 'cpu' but cpu tensors now "
                                             "run on backend 'reference'"):
            smt.scaled_mm_packed(t["a"], t["pb"], t["scale_a"], t["scale_b"], bias=t["bias"],
                                 azp=t["azp"], out=out)
        assert torch.equal(tbits(out), tbits(before)), "out was written"
    finally:
        smt.set_cpu_backend("cpu")
    got = smt.scaled_mm_packed(t["a"], t["pb"], t["scale_a"], t["scale_b"], bias=t["bias"],
                               azp=t["azp"], out=out)
    assert same_bits(got, want)


def test_packed_device_mismatch_fake(rng):
    """The fake kernel refuses a tensor of another device than the packed
    B's (the C++ check is tested on a GPU in test_gpu.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    t = valid(rng)
    with FakeTensorMode(allow_non_fake_inputs=True):
        a = torch.empty(M, K, dtype=torch.int8, device="cuda:0")
        with pytest.raises(Exception, match="b was packed for cpu but a is on cuda:0"):
            ops.scaled_mm_packed(a, t["pb"], t["scale_a"], t["scale_b"], torch.float32, None, None)


def test_packed_not_picklable(rng):
    import copy
    import pickle

    pb = valid(rng)["pb"]
    with pytest.raises(TypeError, match="cannot be pickled or copied"):
        pickle.dumps(pb)
    with pytest.raises(TypeError, match="cannot be pickled or copied"):
        copy.deepcopy(pb)


# ---------------------------------------------------------------------- #
# opcheck                                                                 #
# ---------------------------------------------------------------------- #
def test_opcheck_packed(rng):
    """torch.library.opcheck's fake-kernel and autograd-registration checks
    on the packed ops. Its test_schema and test_aot_dispatch_dynamic cannot
    take a TorchScript object argument (they call len() and == on it), so
    they are left out; torch.compile is tested below."""
    utils = ("test_autograd_registration", "test_faketensor")
    for epi, dt in [(("tensor", "tensor", False, None), torch.float32),
                    (("token", "channel", True, "token"), torch.bfloat16),
                    (("tensor", "channel", False, "tensor"), torch.float16)]:
        t = torch_problem(make_problem(rng, 7, 9, 33, *epi))
        pb = smt.pack_b(t["b"])
        args = (t["a"], pb, t["scale_a"], t["scale_b"])
        torch.library.opcheck(ops.scaled_mm_packed.default, args + (dt, t["bias"], t["azp"]),
                              test_utils=utils)
        out = torch.empty(7, 9, dtype=dt)
        torch.library.opcheck(ops.scaled_mm_packed_out.default,
                              args + (t["bias"], t["azp"], out), test_utils=utils)


# ---------------------------------------------------------------------- #
# torch.compile                                                           #
# ---------------------------------------------------------------------- #
class PackedModule(torch.nn.Module):
    """quantize_i8 + scaled_mm_packed on a PackedB held as an attribute."""

    def __init__(self, w, ws, bias):
        """w int8 [N, K] (packed here), ws float32 [N], bias float32 [N]."""
        super().__init__()
        self.register_buffer("ws", ws)
        self.register_buffer("bias", bias)
        self.pb = smt.pack_b(w)

    def forward(self, x):
        """x float32 [M, K] -> (bfloat16 [M, N] with bias and zero points,
        float16 [M, N] through the out variant)."""
        q, s, z = ops.quantize_i8(x, None, None, False)
        y = ops.scaled_mm_packed(q, self.pb, s, self.ws, torch.bfloat16, self.bias, z)
        out = torch.empty(x.shape[0], self.pb.n(), dtype=torch.float16)
        ops.scaled_mm_packed_out(q, self.pb, s, self.ws, None, None, out)
        return y, out


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_packed(rng, backend):
    """torch.compile(fullgraph=True) of a module calling scaled_mm_packed:
    one graph holding the op, the eager bits; a second module of the same
    shapes reuses the graph with its own PackedB."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def make():
        """A PackedModule of random weights."""
        w = to_torch(rand_i8(rng, (13, 40)))
        ws = to_torch(rng.uniform(0.001, 0.01, 13).astype(np.float32))
        return PackedModule(w, ws, to_torch(rand_floats(rng, (13,))))

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
    assert any("scaled_mm_packed" in str(node.target) for node in graphs[0].graph.nodes)
    for g, e in zip(got, eager):
        assert same_bits(g, e)
    got2 = torch.compile(mod2, fullgraph=True, backend=recording, dynamic=False)(x)
    assert counter.frame_count == 1, "a second PackedB of the same shape recompiled"
    for g, e in zip(got2, eager2):
        assert same_bits(g, e)
    assert not all(same_bits(g, e) for g, e in zip(got2, eager)), "the second module's weight"


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_out_dtype_with_out(rng, packed):
    """out_dtype None with out= takes out's dtype; an out_dtype naming
    another dtype than out's raises TypeError, out untouched."""
    t = valid(rng)
    b = t["pb"] if packed else t["b"]
    call = smt.scaled_mm_packed if packed else smt.scaled_mm
    want = call(t["a"], b, t["scale_a"], t["scale_b"], torch.float16, t["bias"], t["azp"])
    out = torch_poisoned((M, N), torch.float16)
    assert call(t["a"], b, t["scale_a"], t["scale_b"], bias=t["bias"], azp=t["azp"], out=out) is out
    assert torch.equal(tbits(out), tbits(want))
    out = torch_poisoned((M, N), torch.float16)
    before = out.clone()
    with pytest.raises(TypeError, match="out_dtype"):
        call(t["a"], b, t["scale_a"], t["scale_b"], torch.float32, t["bias"], t["azp"], out=out)
    assert torch.equal(tbits(out), tbits(before)), "out was written"


def test_linear_packed_bad_x_dtype_named(rng):
    """linear_packed on float64 activations names x (out_dtype defaults to
    x's dtype, so naming out_dtype would point at an argument not given)."""
    t = valid(rng)
    x = torch.zeros(M, K, dtype=torch.float64)
    with pytest.raises(TypeError, match="x has dtype"):
        smt.linear_packed(x, t["pb"], t["scale_b"])
