"""The torch ops on CUDA tensors (an NVIDIA GPU and scaledmm's cuda
backend): bit-identical to the NumPy reference backend, on torch's current
stream, recorded by CUDA-graph capture, and refusing tensors of mixed
devices. Skipped without a GPU; SCALEDMM_TEST_REQUIRE_GPU=1 turns that skip
into a failure (for machines that must run them).
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaledmm  # noqa: E402
from helpers import (EPILOGUES, OUT_DTYPES, SHAPES, assert_bits_equal, cast,  # noqa: E402
                     epi_id, make_problem, rand_floats, rand_i8, ref_gemm, ref_scaled_mm,
                     special_floats, to_numpy, to_torch, torch_dtype, torch_poisoned)


def _why_not() -> str:
    if getattr(torch.version, "hip", None):
        return "a ROCm build of torch (these tests are for NVIDIA GPUs)"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    cuda = scaledmm.info()["backends"]["cuda"]
    if not cuda["available"]:
        return "scaledmm's cuda backend cannot run: %s" % cuda["reason"]
    return ""


_WHY = _why_not()
if _WHY and os.environ.get("SCALEDMM_TEST_REQUIRE_GPU") == "1":
    raise RuntimeError("SCALEDMM_TEST_REQUIRE_GPU=1 but the GPU tests cannot run: " + _WHY)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_WHY), reason=_WHY or "GPU")]

if not _WHY:
    import scaledmm.torch as smt

    ops = torch.ops.scaledmm

DEV = "cuda"


def tbits(t):
    return t.detach().cpu().contiguous().view(torch.uint8)


def torch_problem(p, device=DEV):
    return {k: to_torch(v, device) for k, v in p.items()}


def call(t, dt, out=None):
    if out is None:
        return ops.scaled_mm(t["a"], t["b"], t["scale_a"], t["scale_b"], dt, t["bias"], t["azp"])
    ops.scaled_mm_out(t["a"], t["b"], t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    return out


# ---------------------------------------------------------------------- #
# bitwise equality with the reference                                     #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("epi", EPILOGUES, ids=epi_id)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scaled_mm_cuda(rng, out_dtype, epi):
    dt = torch_dtype(out_dtype)
    shapes = SHAPES + [(1, 4096, 512), (300, 257, 1000)]
    for m, n, k in shapes:
        p = make_problem(rng, m, n, k, *epi)
        want = ref_scaled_mm(p, out_dtype)
        t = torch_problem(p)
        got = call(t, dt)
        assert got.device.type == "cuda" and got.dtype == dt
        assert_bits_equal(to_numpy(got), want, "cuda %dx%dx%d %s %s" % (m, n, k, out_dtype, epi_id(epi)))
        out = torch_poisoned((m, n), dt, DEV)
        assert_bits_equal(to_numpy(call(t, dt, out)), want, "cuda out= %dx%dx%d" % (m, n, k))


def test_scaled_mm_cuda_strided(rng):
    """Row-strided a, b and out (a view inside a poisoned buffer whose other bytes stay)."""
    m, n, k = 37, 45, 70
    p = make_problem(rng, m, n, k, "token", "channel", True, "token")
    t = torch_problem(p)
    wa = to_torch(rand_i8(rng, (m, k + 9)), DEV)
    wa[:, 4:k + 4] = t["a"]
    wb = to_torch(rand_i8(rng, (n + 2, k + 3)), DEV)
    wb[1:n + 1, :k] = t["b"]
    t.update(a=wa[:, 4:k + 4], b=wb[1:n + 1, :k])
    for out_dtype in OUT_DTYPES:
        buf = torch_poisoned((m + 3, n + 6), torch_dtype(out_dtype), DEV)
        before = buf.clone()
        out = buf[2:m + 2, 5:n + 5]
        call(t, None, out)
        assert_bits_equal(to_numpy(out), ref_scaled_mm(p, out_dtype), "strided %s" % out_dtype)
        mask = torch.ones(buf.shape, dtype=torch.bool, device=DEV)
        mask[2:m + 2, 5:n + 5] = False
        assert torch.equal(tbits(buf[mask]), tbits(before[mask])), "bytes outside out changed"


def test_gemm_cuda(rng):
    for m, n, k in SHAPES + [(129, 300, 999)]:
        a, b = rand_i8(rng, (m, k)), rand_i8(rng, (n, k))
        got = ops.gemm_s8s8s32(to_torch(a, DEV), to_torch(b, DEV))
        assert_bits_equal(to_numpy(got), ref_gemm(a, b), "gemm cuda %dx%dx%d" % (m, n, k))


@pytest.mark.parametrize("mode", ["static_sym", "static_asym", "dynamic_sym", "dynamic_asym"])
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_quantize_cuda(rng, x_dtype, mode):
    for m, k in [(0, 4), (3, 0), (1, 1), (12, 70), (64, 4096)]:
        x = cast(special_floats(rng, (m, k)) if m >= 6 else rand_floats(rng, (m, k)), x_dtype)
        s = np.array([np.float32(2.0 ** rng.uniform(-8, 2))]) if mode.startswith("static") else None
        z = np.array([rng.integers(-90, 91)], np.int32) if mode == "static_asym" else None
        sym = mode in ("static_sym", "dynamic_sym")
        q_ref, s_ref, z_ref = scaledmm.quantize_i8(x, scale=s, azp=z, symmetric=sym,
                                                   backend="reference")
        q, s_t, z_t = ops.quantize_i8(to_torch(x, DEV), to_torch(s, DEV), to_torch(z, DEV), sym)
        what = "cuda quantize %s %s %dx%d" % (x_dtype, mode, m, k)
        assert q.device.type == "cuda"
        assert_bits_equal(to_numpy(q), q_ref, what + " q")
        assert_bits_equal(to_numpy(s_t), s_ref, what + " scale")
        if z_ref is not None:
            assert_bits_equal(to_numpy(z_t), z_ref, what + " azp")


# ---------------------------------------------------------------------- #
# streams, CUDA graphs                                                    #
# ---------------------------------------------------------------------- #
def test_current_stream():
    assert smt.current_stream_handle("cuda") == torch.cuda.current_stream().cuda_stream
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert smt.current_stream_handle("cuda") == s.cuda_stream
        assert smt.current_stream_handle(torch.device("cuda", torch.cuda.current_device())) \
            == s.cuda_stream
    assert smt.current_stream_handle("cuda") == torch.cuda.current_stream().cuda_stream


def test_ops_on_side_stream(rng):
    """Work queued on a side stream, ordered after the inputs' copies there."""
    p = make_problem(rng, 200, 300, 500, "token", "channel", True, "token")
    want = ref_scaled_mm(p, "bfloat16")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch_problem(p)
        got = call(t, torch.bfloat16)
    s.synchronize()
    assert_bits_equal(to_numpy(got), want, "side stream")


def test_cuda_graph_capture(rng):
    """A model of ScaledMMLinear layers captured with torch.cuda.graph
    replays with the eager bits, for new inputs copied into the static one."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 32))
    smt.replace_linear(model, "0")
    smt.replace_linear(model, "2", symmetric=False)
    model = model.to(DEV)
    static_x = to_torch(rand_floats(rng, (16, 64)), DEV).to(torch.bfloat16)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        for i in range(3):
            x = to_torch(rand_floats(rng, (16, 64)), DEV).to(torch.bfloat16)
            static_x.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            eager = model(x)
            assert torch.equal(tbits(static_y), tbits(eager)), "replay %d differs from eager" % i


def test_opcheck_cuda(rng):
    from test_torch_ops import opcheck_samples

    for op, args in opcheck_samples(rng, DEV):
        torch.library.opcheck(op, args)


def test_module_cuda_matches_cpu(rng):
    """The same ScaledMMLinear on CPU and CUDA tensors: the same bits."""
    lin = torch.nn.Linear(80, 72)
    mod = smt.ScaledMMLinear.from_linear(lin, symmetric=False)
    x = to_torch(rand_floats(rng, (33, 80)))
    with torch.no_grad():
        assert torch.equal(tbits(mod(x)), tbits(mod.to(DEV)(x.to(DEV))))


def test_from_linear_on_cuda_matches_cpu(rng):
    """from_linear of a Linear that lives on the GPU quantizes its weights to
    the same bits as from the CPU copy (weight scales included), and the
    layers then agree bit for bit; replace_linear on a CUDA model too."""
    lin = torch.nn.Linear(96, 40).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(to_torch(rand_floats(rng, (40, 96))).to(torch.bfloat16))
    cpu = smt.ScaledMMLinear.from_linear(lin)
    gpu = smt.ScaledMMLinear.from_linear(lin.to(DEV))
    assert torch.equal(cpu.weight, gpu.weight.cpu())
    assert torch.equal(tbits(cpu.weight_scale), tbits(gpu.weight_scale.cpu()))
    x = to_torch(rand_floats(rng, (17, 96))).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(tbits(cpu(x)), tbits(gpu(x.to(DEV)).cpu()))


def test_compile_cuda(rng):
    from torch._dynamo.testing import CompileCounterWithBackend

    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16))
    smt.replace_linear(model)
    model = model.to(DEV)
    x = to_torch(rand_floats(rng, (7, 32)), DEV)
    with torch.no_grad():
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("inductor")
        got = torch.compile(model, fullgraph=True, backend=counter, dynamic=False)(x)
        eager = model(x)
    assert counter.frame_count == 1
    assert torch.equal(tbits(got), tbits(eager))


# ---------------------------------------------------------------------- #
# weights packed once (pack_b, scaled_mm_packed)                          #
# ---------------------------------------------------------------------- #
def call_packed(t, pb, dt, out=None):
    """scaled_mm_packed of tensor problem t with PackedB pb (out dtype dt),
    or scaled_mm_packed_out into out."""
    if out is None:
        return ops.scaled_mm_packed(t["a"], pb, t["scale_a"], t["scale_b"], dt, t["bias"], t["azp"])
    ops.scaled_mm_packed_out(t["a"], pb, t["scale_a"], t["scale_b"], t["bias"], t["azp"], out)
    return out


def test_scaled_epilogue_cuda(rng):
    """scaled_epilogue on CUDA accumulators (summed over two slices of K)
    gives the bits of scaled_mm on the whole K, with bias and azp."""
    g = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
    m, n, k = 9, 40, 300
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g).to(DEV)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g).to(DEV)
    sa = (torch.rand(m, generator=g) * 0.02 + 1e-3).to(DEV)
    sb = (torch.rand(n, generator=g) * 0.02 + 1e-3).to(DEV)
    bias = torch.randn(n, generator=g).to(DEV)
    azp = torch.randint(-128, 128, (m,), dtype=torch.int32, generator=g).to(DEV)
    colsum = b.cpu().sum(dim=1, dtype=torch.int64).to(torch.int32).to(DEV)
    acc = (smt.ops.gemm_s8s8s32(a[:, :100].contiguous(), b[:, :100].contiguous()) +
           smt.ops.gemm_s8s8s32(a[:, 100:].contiguous(), b[:, 100:].contiguous()))
    for dt in (torch.float32, torch.bfloat16):
        for z in (None, azp):
            want = smt.ops.scaled_mm(a, b, sa, sb, dt, bias, z)
            got = smt.scaled_epilogue(acc, sa, sb, dt, bias, z, colsum)
            assert torch.equal(got.cpu().view(torch.uint8), want.cpu().view(torch.uint8))


def test_packed_cuda(rng):
    """A weight packed on the GPU: the bits of scaled_mm with the unpacked
    weight and of the reference, over shapes, epilogues and dtypes."""
    dev = "cuda:%d" % torch.cuda.current_device()
    for i, (m, n, k) in enumerate(SHAPES + [(1, 4096, 512), (300, 257, 1000), (33, 64, 2100)]):
        epi = EPILOGUES[i % len(EPILOGUES)]
        out_dtype = OUT_DTYPES[i % 3]
        dt = torch_dtype(out_dtype)
        p = make_problem(rng, m, n, k, *epi)
        t = torch_problem(p)
        pb = smt.pack_b(t["b"])
        assert (pb.n(), pb.k(), pb.device()) == (n, k, dev) and pb.format().startswith("cuda")
        want = call(t, dt)
        what = "cuda packed %dx%dx%d %s %s" % (m, n, k, out_dtype, epi_id(epi))
        assert_bits_equal(to_numpy(want), ref_scaled_mm(p, out_dtype), what + " unpacked")
        assert_bits_equal(to_numpy(call_packed(t, pb, dt)), to_numpy(want), what)
        out = torch_poisoned((m, n), dt, DEV)
        assert_bits_equal(to_numpy(call_packed(t, pb, None, out)), to_numpy(want), what + " out=")


def test_packed_device_mismatch(rng):
    """a on the GPU with a B packed on the CPU, and the reverse: a
    ValueError naming both devices, out untouched."""
    dev = "cuda:%d" % torch.cuda.current_device()
    t = torch_problem(make_problem(rng, 5, 6, 7, "token", "channel", True, "token"))
    pb_cpu = smt.pack_b(t["b"].cpu())
    out = torch_poisoned((5, 6), torch.float32, DEV)
    before = out.clone()
    with pytest.raises(ValueError, match="b was packed for cpu but a is on %s" % dev):
        call_packed(t, pb_cpu, None, out)
    assert torch.equal(tbits(out), tbits(before))
    pb_gpu = smt.pack_b(t["b"])
    c = {k: (v.cpu() if v is not None else None) for k, v in t.items()}
    with pytest.raises(ValueError, match="b was packed for %s but a is on cpu" % dev):
        call_packed(c, pb_gpu, torch.float32)


def test_packed_cuda_graph(rng):
    """scaled_mm_packed captured in a CUDA graph (the weight packed before
    the capture) replays with the eager bits."""
    p = make_problem(rng, 16, 96, 64, "token", "channel", True, "token")
    t = torch_problem(p)
    pb = smt.pack_b(t["b"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call_packed(t, pb, torch.bfloat16)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = call_packed(t, pb, torch.bfloat16)
    for i in range(3):
        t["a"].copy_(to_torch(rand_i8(rng, (16, 64)), DEV))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(tbits(static_y), tbits(call(t, torch.bfloat16))), "replay %d" % i


def test_module_packed_on_cuda(rng):
    """ScaledMMLinear.to("cuda") packs its weight there; back on the CPU it
    packs it again; the outputs stay the same bits."""
    mod = smt.ScaledMMLinear.from_linear(torch.nn.Linear(48, 40))
    x = to_torch(rand_floats(rng, (9, 48)))
    with torch.no_grad():
        want = mod(x)
        assert mod._packed.device() == "cpu"
        mod.to(DEV)
        assert mod._packed.device().startswith("cuda")
        assert torch.equal(tbits(mod(x.to(DEV))), tbits(want))
        mod.cpu()
        assert mod._packed.device() == "cpu"
        assert torch.equal(tbits(mod(x)), tbits(want))


# ---------------------------------------------------------------------- #
# the linear layer in one call (linear_packed)                            #
# ---------------------------------------------------------------------- #
LINEAR_QMODES = ["static_sym", "static_asym", "dynamic_sym", "dynamic_asym"]


def linear_quant_args(rng, mode, device=DEV):
    """(x_scale, x_azp, symmetric) of a quantization mode on device."""
    if mode.startswith("static"):
        s = torch.tensor([np.float32(2.0 ** rng.uniform(-8, 2))], device=device)
        z = (torch.tensor([int(rng.integers(-90, 91))], dtype=torch.int32, device=device)
             if mode == "static_asym" else None)
        return s, z, mode == "static_sym"
    return None, None, mode == "dynamic_sym"


def linear_two_calls(x, pb, sb, dt, bias, xs, xz, sym):
    """quantize_i8 then scaled_mm_packed: (out, q, scale, azp)."""
    q, s, z = ops.quantize_i8(x, xs, xz, sym)
    return ops.scaled_mm_packed(q, pb, s, sb, dt, bias, z if z.numel() else None), q, s, z


@pytest.mark.parametrize("mode", LINEAR_QMODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_linear_packed_cuda(rng, x_dtype, mode):
    """linear_packed on the GPU: the bits of quantize_i8 + scaled_mm_packed
    there (out, q, scale, azp) and of linear_packed on the CPU."""
    for i, (m, n, k) in enumerate(SHAPES + [(1, 4096, 512), (300, 257, 1000), (33, 64, 2100)]):
        base = special_floats(rng, (m, k)) if m >= 6 and k else rand_floats(rng, (m, k))
        x = to_torch(cast(base, x_dtype), DEV)
        w = to_torch(rand_i8(rng, (n, k)), DEV)
        sb = to_torch(rng.uniform(0.001, 0.01, n if i % 2 else 1).astype(np.float32), DEV)
        bias = to_torch(rand_floats(rng, (n,)), DEV) if i % 3 else None
        xs, xz, sym = linear_quant_args(rng, mode)
        dt = torch_dtype(OUT_DTYPES[i % 3])
        pb = smt.pack_b(w)
        got = ops.linear_packed(x, pb, sb, dt, bias, xs, xz, sym)
        want = linear_two_calls(x, pb, sb, dt, bias, xs, xz, sym)
        cpu = [v.cpu() if v is not None else None for v in (x, sb, bias, xs, xz)]
        on_cpu = ops.linear_packed(cpu[0], smt.pack_b(w.cpu()), cpu[1], dt, cpu[2], cpu[3],
                                   cpu[4], sym)
        what = "cuda linear %s %s %dx%dx%d" % (x_dtype, mode, m, n, k)
        for name, g, w_, c in zip(("out", "q", "scale", "azp"), got, want, on_cpu):
            assert g.device.type == "cuda", what + " " + name
            assert_bits_equal(to_numpy(g), to_numpy(w_), what + " " + name + " vs two calls")
            assert_bits_equal(to_numpy(g), to_numpy(c), what + " " + name + " vs cpu")


def test_linear_packed_device_mismatch(rng):
    """x on the GPU with a B packed on the CPU and the reverse, and one
    tensor on the CPU among GPU tensors: a ValueError naming it."""
    dev = "cuda:%d" % torch.cuda.current_device()
    x = to_torch(rand_floats(rng, (5, 7)), DEV)
    w = to_torch(rand_i8(rng, (6, 7)), DEV)
    sb, bias = torch.ones(6, device=DEV), torch.zeros(6, device=DEV)
    xs, xz = torch.ones(1, device=DEV), torch.zeros(1, dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="b was packed for cpu but x is on %s" % dev):
        ops.linear_packed(x, smt.pack_b(w.cpu()), sb, torch.float32, bias, xs, xz, False)
    pb = smt.pack_b(w)
    with pytest.raises(ValueError, match="b was packed for %s but x is on cpu" % dev):
        ops.linear_packed(x.cpu(), pb, sb.cpu(), torch.float32, None, None, None, True)
    args = dict(scale_b=sb, bias=bias, x_scale=xs, x_azp=xz)
    for target in args:
        u = dict(args, **{target: args[target].cpu()})
        with pytest.raises(ValueError, match="linear_packed: %s is on cpu" % target):
            ops.linear_packed(x, pb, u["scale_b"], torch.float32, u["bias"], u["x_scale"],
                              u["x_azp"], False)


def test_linear_packed_cuda_graph(rng):
    """linear_packed captured in a CUDA graph (its q and scales allocated by
    torch in the graph's pool) replays with the eager bits."""
    x = to_torch(rand_floats(rng, (16, 64)), DEV)
    pb = smt.pack_b(to_torch(rand_i8(rng, (96, 64)), DEV))
    sb = to_torch(rng.uniform(0.001, 0.01, 96).astype(np.float32), DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops.linear_packed(x, pb, sb, torch.bfloat16, None, None, None, False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = ops.linear_packed(x, pb, sb, torch.bfloat16, None, None, None, False)
    for i in range(3):
        x.copy_(to_torch(rand_floats(rng, (16, 64)), DEV))
        graph.replay()
        torch.cuda.synchronize()
        want = linear_two_calls(x, pb, sb, torch.bfloat16, None, None, None, False)
        for g, w in zip(static, want):
            assert torch.equal(tbits(g), tbits(w)), "replay %d" % i


def test_linear_packed_side_stream(rng):
    """linear_packed on a side stream runs there and gives the bits."""
    x = to_torch(rand_floats(rng, (33, 70)), DEV)
    pb = smt.pack_b(to_torch(rand_i8(rng, (40, 70)), DEV))
    sb = torch.full((1,), 0.01, device=DEV)
    want = linear_two_calls(x, pb, sb, torch.float16, None, None, None, True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = ops.linear_packed(x, pb, sb, torch.float16, None, None, None, True)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        assert torch.equal(tbits(g), tbits(w))


def test_opcheck_linear_packed_cuda(rng):
    """opcheck's fake-kernel and autograd-registration checks on the GPU."""
    x = to_torch(rand_floats(rng, (7, 33)), DEV)
    pb = smt.pack_b(to_torch(rand_i8(rng, (9, 33)), DEV))
    sb = torch.full((9,), 0.01, device=DEV)
    torch.library.opcheck(ops.linear_packed.default,
                          (x, pb, sb, torch.bfloat16, None, None, None, False),
                          test_utils=("test_autograd_registration", "test_faketensor"))


# ---------------------------------------------------------------------- #
# devices                                                                 #
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("target", ["b", "scale_a", "scale_b", "bias", "azp", "out"])
def test_mixed_devices(rng, target):
    """One tensor on the CPU, the others on the GPU: an error naming it, and
    the (GPU) out untouched."""
    t = torch_problem(make_problem(rng, 5, 6, 7, "token", "channel", True, "token"))
    out = torch_poisoned((5, 6), torch.float32, DEV)
    if target == "out":
        out = out.cpu()
    else:
        t[target] = t[target].cpu()
    before = out.clone()
    with pytest.raises((ValueError, RuntimeError), match=target):
        call(t, None, out)
    assert torch.equal(tbits(out), tbits(before))
    if target != "out":
        with pytest.raises((ValueError, RuntimeError), match=target):
            call(t, torch.float16)


def test_mixed_devices_cpu_a(rng):
    t = torch_problem(make_problem(rng, 5, 6, 7))
    t["a"] = t["a"].cpu()
    with pytest.raises((ValueError, RuntimeError), match="device"):
        call(t, torch.float32)
    with pytest.raises((ValueError, RuntimeError), match="device"):
        ops.gemm_s8s8s32(t["a"], t["b"])
    x = to_torch(rand_floats(rng, (4, 7)), DEV)
    with pytest.raises((ValueError, RuntimeError), match="scale"):
        ops.quantize_i8(x, torch.ones(1), None, True)


@pytest.mark.skipif(torch.cuda.device_count() < 2 if not _WHY else True,
                    reason="needs two GPUs")
def test_second_gpu(rng):
    """All tensors on cuda:1 run there with the reference's bits; one
    tensor on cuda:0 among cuda:1 tensors is an error naming it, never a crash."""
    p = make_problem(rng, 33, 40, 50, "token", "channel", True, "token")
    t = torch_problem(p, "cuda:1")
    got = call(t, torch.bfloat16)
    assert got.device == torch.device("cuda:1")
    assert_bits_equal(to_numpy(got), ref_scaled_mm(p, "bfloat16"), "cuda:1")
    with torch.cuda.device(1):
        assert smt.current_stream_handle("cuda:1") == torch.cuda.current_stream(1).cuda_stream
    out = torch_poisoned((33, 40), torch.float32, "cuda:1")
    before = out.clone()
    for target in ("b", "scale_b", "bias"):
        u = dict(t, **{target: t[target].to("cuda:0")})
        with pytest.raises((ValueError, RuntimeError), match=target):
            call(u, None, out)
        assert torch.equal(tbits(out), tbits(before))
    with pytest.raises((ValueError, RuntimeError), match="out"):
        call(t, None, torch_poisoned((33, 40), torch.float32, "cuda:0"))
