"""ScaledMMLinear (from_linear, from_compressed_tensors), replace_linear and
torch.compile of a model using them, on CPU tensors: every output is
bit-identical to quantize_i8 + scaled_mm done by hand with the NumPy API's
reference backend, and a row's output does not depend on its batch.
"""
from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaledmm  # noqa: E402
import scaledmm.torch as smt  # noqa: E402
from helpers import (OUT_DTYPES, assert_bits_equal, cast, rand_floats, rand_i8,  # noqa: E402
                     rand_scales, to_numpy, to_torch, torch_dtype)

ACT_MODES = ["dynamic_sym", "dynamic_asym", "static_sym", "static_asym"]


def numpy_quantize_weight(w: np.ndarray):
    """Per-channel symmetric weights (compressed-tensors' formula) in NumPy
    float32: scale = max(|min(w, 0)|, max(w, 0)) / 127.5 (eps when 0),
    q = round_half_even(clamp(w / scale, -128, 127))."""
    w = w.astype(np.float32)
    amax = np.maximum(np.abs(np.minimum(w, 0).min(axis=1)), np.maximum(w, 0).max(axis=1))
    scale = amax / np.float32(127.5)
    scale[scale == 0] = np.finfo(np.float32).eps
    q = np.rint(np.clip(w / scale[:, None], -128, 127)).astype(np.int8)
    return q, scale


def ref_linear(x: np.ndarray, wq, ws, bias=None, input_scale=None, input_zp=None, symmetric=True):
    """The module's forward by hand on the reference backend: x [..., K]
    (float32 / float16 / bfloat16 NumPy) -> [..., N] of x's dtype."""
    k = wq.shape[1]
    x2 = np.ascontiguousarray(x.reshape(-1, k))
    if input_scale is not None:
        q, s, z = scaledmm.quantize_i8(x2, scale=input_scale, azp=input_zp,
                                       symmetric=input_zp is None, backend="reference")
    else:
        q, s, z = scaledmm.quantize_i8(x2, symmetric=symmetric, backend="reference")
    y = scaledmm.scaled_mm(q, wq, s, ws, out_dtype=x.dtype, bias=bias, azp=z, backend="reference")
    return y.reshape(x.shape[:-1] + (wq.shape[0],))


def act_kwargs(rng, mode):
    """from_linear keyword arguments for an activation mode."""
    if mode.startswith("dynamic"):
        return dict(symmetric=mode == "dynamic_sym")
    kw = dict(input_scale=torch.tensor([np.float32(2.0 ** rng.uniform(-7, -3))]))
    if mode == "static_asym":
        kw["input_zero_point"] = torch.tensor([int(rng.integers(-20, 21))], dtype=torch.int32)
    return kw


def ref_from_kwargs(x, wq, ws, bias, kw):
    s = kw.get("input_scale")
    z = kw.get("input_zero_point")
    return ref_linear(x, wq, ws, bias, None if s is None else s.numpy(),
                      None if z is None else z.numpy(), kw.get("symmetric", True))


def linear(rng, k, n, bias=True):
    lin = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(to_torch(rand_floats(rng, (n, k), 0.1)))
        lin.weight[0] = 0.0                          # an all-zero row: scale eps
        if bias:
            lin.bias.copy_(to_torch(rand_floats(rng, (n,), 0.1)))
    return lin


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mode", ACT_MODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_from_linear(rng, x_dtype, mode, bias):
    k, n = 37, 29
    lin = linear(rng, k, n, bias)
    kw = act_kwargs(rng, mode)
    mod = smt.ScaledMMLinear.from_linear(lin, **kw)
    wq, ws = numpy_quantize_weight(lin.weight.detach().numpy())
    assert_bits_equal(to_numpy(mod.weight), wq, "quantized weight")
    assert_bits_equal(to_numpy(mod.weight_scale), ws, "weight scale")
    b = lin.bias.detach().numpy() if bias else None
    for shape in [(1, k), (5, k), (2, 3, k), (0, k)]:
        x = cast(rand_floats(rng, shape), x_dtype)
        y = mod(to_torch(x))
        assert y.dtype == torch_dtype(x_dtype) and tuple(y.shape) == shape[:-1] + (n,)
        assert_bits_equal(to_numpy(y), ref_from_kwargs(x, wq, ws, b, kw),
                          "from_linear %s %s %s" % (x_dtype, mode, shape))


@pytest.mark.parametrize("mode", ACT_MODES)
def test_from_compressed_tensors(rng, mode):
    """A compressed-tensors int8 layer: weight [N, K], weight_scale [N, 1]
    (bfloat16 or float32, widened exactly), float16 bias, static or dynamic
    activations."""
    k, n = 45, 19
    w = rand_i8(rng, (n, k))
    for ws_dtype in (torch.float32, torch.bfloat16):
        ws = to_torch(rand_scales(rng, n)).to(ws_dtype).reshape(n, 1)
        bias = to_torch(rand_floats(rng, (n,))).half()
        kw = act_kwargs(rng, mode)
        mod = smt.ScaledMMLinear.from_compressed_tensors(to_torch(w), ws, bias, **kw)
        x = cast(rand_floats(rng, (7, k)), "bfloat16")
        ws_np = to_numpy(ws.float()).reshape(-1)
        want = ref_from_kwargs(x, w, ws_np, to_numpy(bias.float()), kw)
        assert_bits_equal(to_numpy(mod(to_torch(x))), want, "compressed-tensors %s" % mode)
    per_tensor = smt.ScaledMMLinear.from_compressed_tensors(to_torch(w), torch.tensor([0.01]))
    x = rand_floats(rng, (4, k))
    want = ref_linear(x, w, np.array([0.01], np.float32))
    assert_bits_equal(to_numpy(per_tensor(to_torch(x))), want, "per-tensor weight scale")


class Block(torch.nn.Module):
    def __init__(self, rng):
        super().__init__()
        self.q_proj = linear(rng, 16, 24)
        self.up = linear(rng, 24, 32, bias=False)
        self.head = linear(rng, 32, 8)

    def forward(self, x):
        return self.head(torch.relu(self.up(torch.relu(self.q_proj(x)))))


def make_model(rng):
    return torch.nn.Sequential(OrderedDict(enc=Block(rng), dec=torch.nn.Sequential(
        torch.nn.Linear(8, 16), Block(rng))))


def manual_forward(model, replaced, x):
    """The model's forward with each replaced Linear done by hand on the
    reference backend (the others as torch does them)."""
    def lin(name, layer, h):
        if name not in replaced:
            return layer(h)
        wq, ws = numpy_quantize_weight(layer.weight.detach().numpy())
        b = None if layer.bias is None else layer.bias.detach().numpy()
        return to_torch(ref_linear(to_numpy(h), wq, ws, b))

    def block(prefix, blk, h):
        h = torch.relu(lin(prefix + "q_proj", blk.q_proj, h))
        h = torch.relu(lin(prefix + "up", blk.up, h))
        return lin(prefix + "head", blk.head, h)

    h = block("enc.", model.enc, x)
    h = lin("dec.0", model.dec[0], h)
    return block("dec.1.", model.dec[1], h)


@pytest.mark.parametrize("filt,expected", [
    (None, ["enc.q_proj", "enc.up", "enc.head", "dec.0", "dec.1.q_proj", "dec.1.up", "dec.1.head"]),
    ("proj|up", ["enc.q_proj", "enc.up", "dec.1.q_proj", "dec.1.up"]),
    (r"^dec\.", ["dec.0", "dec.1.q_proj", "dec.1.up", "dec.1.head"]),
    (lambda name, mod: mod.out_features == 8, ["enc.head", "dec.1.head"]),
    ("no_such_layer", []),
], ids=["all", "regex", "regex_anchored", "callable", "none"])
def test_replace_linear(rng, filt, expected):
    model = make_model(rng)
    reference = make_model(np.random.default_rng(0))
    reference.load_state_dict(model.state_dict())
    replaced = smt.replace_linear(model, filt)
    assert replaced == expected
    for name, mod in model.named_modules():
        if name in expected:
            assert isinstance(mod, smt.ScaledMMLinear), name
        elif name.endswith(("proj", "up", "head")) or name == "dec.0":
            assert type(mod) is torch.nn.Linear, name
    x = to_torch(rand_floats(rng, (6, 16)))
    with torch.no_grad():
        want = manual_forward(reference, set(expected), x)
        got = model(x)
    assert_bits_equal(to_numpy(got), to_numpy(want), "replace_linear %s" % (expected,))


@pytest.mark.parametrize("mode", ["dynamic_sym", "dynamic_asym", "static_asym"])
@pytest.mark.parametrize("x_dtype", ["float32", "bfloat16"])
def test_batch_invariance(rng, x_dtype, mode):
    """Each row's output is the same bits alone, in the full batch, and in
    random batches of 1 to 17 rows."""
    k, n, rows = 64, 48, 40
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n), **act_kwargs(rng, mode))
    x = to_torch(cast(rand_floats(rng, (rows, k)), x_dtype))
    with torch.no_grad():
        full = to_numpy(mod(x))
        for i in range(rows):
            assert_bits_equal(to_numpy(mod(x[i:i + 1])), full[i:i + 1], "row %d alone" % i)
        start = 0
        while start < rows:
            size = int(rng.integers(1, 18))
            assert_bits_equal(to_numpy(mod(x[start:start + size])), full[start:start + size],
                              "rows %d..%d" % (start, start + size))
            start += size
        assert_bits_equal(to_numpy(mod(x.reshape(4, 10, k))).reshape(rows, n), full, "3-D batch")


def test_compile_fullgraph_model(rng):
    """torch.compile(fullgraph=True) (inductor) of a model of ScaledMMLinear
    layers: one graph, no break, the eager bits."""
    from torch._dynamo.testing import CompileCounterWithBackend

    model = make_model(rng)
    smt.replace_linear(model, "proj|head|dec.0")
    smt.replace_linear(model, "up", symmetric=False)
    x = to_torch(cast(rand_floats(rng, (9, 16)), "float32"))
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("inductor")
        compiled = torch.compile(model, fullgraph=True, backend=counter, dynamic=False)
        got = compiled(x)
        x2 = to_torch(rand_floats(rng, (9, 16)))
        got2, eager2 = compiled(x2), model(x2)
    assert counter.frame_count == 1, "graph breaks or recompiles: %d frames" % counter.frame_count
    assert_bits_equal(to_numpy(got), to_numpy(eager), "compiled vs eager")
    assert_bits_equal(to_numpy(got2), to_numpy(eager2), "compiled vs eager, second input")


def test_module_bad_arguments():
    w = torch.zeros(4, 3, dtype=torch.int8)
    with pytest.raises(TypeError, match="weight"):
        smt.ScaledMMLinear(w.float(), torch.ones(4))
    with pytest.raises(TypeError, match="weight"):
        smt.ScaledMMLinear(w.reshape(-1), torch.ones(4))
    with pytest.raises(ValueError, match="weight_scale"):
        smt.ScaledMMLinear(w, torch.ones(3))
    with pytest.raises(ValueError, match="bias"):
        smt.ScaledMMLinear(w, torch.ones(4), bias=torch.ones(5))
    with pytest.raises(ValueError, match="input_scale"):
        smt.ScaledMMLinear(w, torch.ones(4), input_scale=torch.ones(2))
    with pytest.raises(ValueError, match="input_zero_point"):
        smt.ScaledMMLinear(w, torch.ones(4), input_zero_point=torch.zeros(1, dtype=torch.int32))
    mod = smt.ScaledMMLinear(w, torch.ones(4))
    with pytest.raises((RuntimeError, ValueError)):
        mod(torch.ones(2, 5))                        # wrong in_features
    with pytest.raises(TypeError, match="x"):
        mod(torch.ones(2, 3, dtype=torch.float64))
    assert "in_features=3, out_features=4" in repr(mod)


# ---------------------------------------------------------------------- #
# the packed weight                                                       #
# ---------------------------------------------------------------------- #
def unpacked_forward(mod, x):
    """ScaledMMLinear's forward as it was before the weight was packed:
    quantize_i8 and scaled_mm on the int8 weight."""
    ops = torch.ops.scaledmm
    x2 = x.reshape(-1, mod.in_features)
    q, s, z = ops.quantize_i8(x2, mod.input_scale, mod.input_zero_point, mod.symmetric)
    y = ops.scaled_mm(q, mod.weight, s, mod.weight_scale, x.dtype, mod.bias,
                      None if mod.symmetric else z)
    return y.reshape(*x.shape[:-1], mod.out_features)


def same_bits(got, want):
    """Same dtype, shape and bytes."""
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(
        to_numpy(got).reshape(-1).view(np.uint8), to_numpy(want).reshape(-1).view(np.uint8))


STATE_KEYS = {"dynamic_sym": ["weight", "weight_scale", "bias"],
              "dynamic_asym": ["weight", "weight_scale", "bias"],
              "static_sym": ["weight", "weight_scale", "bias", "input_scale"],
              "static_asym": ["weight", "weight_scale", "bias", "input_scale", "input_zero_point"]}


@pytest.mark.parametrize("mode", ACT_MODES)
@pytest.mark.parametrize("x_dtype", OUT_DTYPES)
def test_packed_once_same_bits(rng, x_dtype, mode):
    """The first forward packs the weight, later ones reuse it; outputs are
    the bits of the unpacked forward; state_dict is unchanged (the int8
    weight, no packed copy)."""
    k, n = 70, 33
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n), **act_kwargs(rng, mode))
    before = {name: t.clone() for name, t in mod.state_dict().items()}
    assert list(before) == STATE_KEYS[mode]
    assert mod._packed is None
    packed = None
    with torch.no_grad():
        for shape in [(1, k), (9, k), (2, 3, k), (0, k)]:
            x = to_torch(cast(rand_floats(rng, shape), x_dtype))
            got = mod(x)
            if packed is None:
                packed = mod._packed
                assert isinstance(packed, smt.PackedB) and (packed.n(), packed.k()) == (n, k)
            assert mod._packed is packed, "packed again without a change"
            assert same_bits(got, unpacked_forward(mod, x)), "%s %s %s" % (x_dtype, mode, shape)
    after = mod.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[name], t) and after[name].dtype == t.dtype for name, t in before.items())
    fresh = smt.ScaledMMLinear.from_linear(linear(rng, k, n), **act_kwargs(rng, mode))
    fresh.load_state_dict(after)
    x = to_torch(cast(rand_floats(rng, (5, k)), x_dtype))
    with torch.no_grad():
        assert same_bits(fresh(x), mod(x)), "a module loaded from the state_dict"


def test_packed_follows_weight_changes(rng):
    """In-place writes, load_state_dict, a new weight tensor and
    set_cpu_backend each pack the weight again; outputs stay those of the
    unpacked forward."""
    k, n = 40, 24
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n), symmetric=False)
    x = to_torch(rand_floats(rng, (6, k)))
    with torch.no_grad():
        first = mod(x)
        p0 = mod._packed
        mod.weight.copy_(to_torch(rand_i8(rng, (n, k))))            # in place
        y = mod(x)
        assert mod._packed is not p0 and same_bits(y, unpacked_forward(mod, x))
        assert not same_bits(y, first)
        other = smt.ScaledMMLinear.from_linear(linear(rng, k, n), symmetric=False)
        mod.load_state_dict(other.state_dict())                     # load_state_dict
        assert same_bits(mod(x), other(x)) and same_bits(mod(x), unpacked_forward(other, x))
        mod.weight = to_torch(rand_i8(rng, (n, k)))                 # a new tensor
        assert same_bits(mod(x), unpacked_forward(mod, x))
        try:
            smt.set_cpu_backend("reference")
            assert same_bits(mod(x), unpacked_forward(mod, x))
            assert mod._packed.backend() == "reference"
        finally:
            smt.set_cpu_backend("cpu")
        assert same_bits(mod(x), unpacked_forward(mod, x)) and mod._packed.backend() == "cpu"


def test_packed_by_to(rng):
    """.to(device) packs the weight (before any forward); a conversion that
    leaves the weight as it is keeps the packed copy; pack() packs by hand;
    a weight on the meta device is left unpacked."""
    k, n = 24, 16
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    assert mod._packed is None
    mod.to("cpu")
    p0 = mod._packed
    assert p0 is not None and p0.device() == "cpu"
    mod.float()
    mod.to(torch.device("cpu"))
    assert mod._packed is p0
    assert mod.pack() is mod._packed and mod._packed is not p0
    meta = smt.ScaledMMLinear.from_linear(linear(rng, k, n)).to("meta")
    assert meta._packed is None and meta.pack() is None
    assert meta(torch.empty(3, k, device="meta")).shape == (3, n)


def test_packed_copy_and_pickle(rng):
    """copy.deepcopy and pickling of a packed module: the copy packs its own
    weight and gives the same bits."""
    import copy
    import io

    k, n = 32, 20
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    x = to_torch(rand_floats(rng, (4, k)))
    with torch.no_grad():
        want = mod(x)
        dup = copy.deepcopy(mod)
        assert dup._packed is None and same_bits(dup(x), want) and dup._packed is not mod._packed
        buf = io.BytesIO()
        torch.save(mod, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert loaded._packed is None and same_bits(loaded(x), want)


@pytest.mark.parametrize("packed_first", [True, False], ids=["packed", "unpacked"])
def test_compile_packed_module(rng, packed_first):
    """torch.compile(fullgraph=True) of ScaledMMLinear: one graph, the eager
    bits; the graph calls linear_packed when the weight was packed
    before compiling, quantize_i8 and scaled_mm (same bits) when it was
    not."""
    k, n = 36, 28
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n), symmetric=False)
    x = to_torch(rand_floats(rng, (7, k)))
    with torch.no_grad():
        want = unpacked_forward(mod, x)
        if packed_first:
            mod.pack()
        graphs = []

        def backend(gm, example_inputs):
            """Keeps the graph, runs it as traced."""
            graphs.append(gm)
            return gm.forward

        torch._dynamo.reset()
        got = torch.compile(mod, fullgraph=True, backend=backend, dynamic=False)(x)
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("linear_packed" in t for t in targets) == packed_first, targets
    assert ("scaledmm.scaled_mm" in targets) != packed_first, targets
    assert same_bits(got, want)


def test_packed_weight_writes_and_loads(rng):
    """What the packed weight follows besides test_packed_follows_weight_changes:
    another tensor object at the packed one's address; load_state_dict
    under torch.inference_mode (inference tensors have no version counter)
    and into a compiled module (both pack at the load); a write through
    weight.data, which the version counter does not see, after pack()."""
    k, n = 40, 24
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    x = to_torch(rand_floats(rng, (5, k)))
    with torch.no_grad():
        mod(x)
        p0 = mod._packed
        mod.weight = mod.weight.view(n, k)        # same address and version, another tensor
        assert same_bits(mod(x), unpacked_forward(mod, x)) and mod._packed is not p0
        mod.weight.data.copy_(to_torch(rand_i8(rng, (n, k))))
        mod.pack()                                # the documented step after such a write
        assert same_bits(mod(x), unpacked_forward(mod, x))
    other = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    with torch.inference_mode():
        inf = smt.ScaledMMLinear.from_linear(linear(rng, k, n)).to("cpu")
        inf(x)
        inf.load_state_dict(other.state_dict())
        assert same_bits(inf(x), unpacked_forward(other, x))
    with torch.no_grad():
        comp = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
        comp(x)
        torch._dynamo.reset()
        compiled = torch.compile(comp, fullgraph=True, dynamic=False)
        compiled(x)
        comp.load_state_dict(other.state_dict())
        assert same_bits(compiled(x), unpacked_forward(other, x)), "compiled after a load"


@pytest.mark.parametrize("cast", ["bfloat16", "half", "double", "to_bf16"])
def test_dtype_cast_keeps_float32_buffers(rng, cast):
    """A whole-model dtype cast leaves weight_scale, bias and input_scale
    float32 (only a cast would change the epilogue's results): the module
    takes activations of the new dtype, with the bits of an uncast one."""
    k, n = 32, 20
    kw = dict(input_scale=torch.tensor([np.float32(2.0 ** -5)]))
    mod = torch.nn.Sequential(smt.ScaledMMLinear.from_linear(linear(rng, k, n), **kw))
    want_mod = torch.nn.Sequential(smt.ScaledMMLinear.from_linear(linear(rng, k, n), **kw))
    want_mod.load_state_dict(mod.state_dict())
    if cast == "to_bf16":
        mod.to(torch.bfloat16)
    else:
        getattr(mod, cast)()
    lin = mod[0]
    for name in ("weight_scale", "bias", "input_scale"):
        assert getattr(lin, name).dtype == torch.float32, name
    assert lin.weight.dtype == torch.int8
    dt = {"bfloat16": torch.bfloat16, "to_bf16": torch.bfloat16, "half": torch.float16,
          "double": torch.float32}[cast]
    x = to_torch(rand_floats(rng, (3, k))).to(dt)
    with torch.no_grad():
        assert same_bits(mod(x), want_mod(x))


def test_backward_raises(rng):
    """The ops have no derivative: backward through a ScaledMMLinear output
    (or an op's) raises instead of leaving the inputs' gradients unset."""
    k, n = 16, 8
    up = torch.nn.Linear(k, k)
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    y = mod(up(to_torch(rand_floats(rng, (3, k)))))
    with pytest.raises(RuntimeError, match="not implemented"):
        y.sum().backward()
    x = to_torch(rand_floats(rng, (3, k))).requires_grad_()
    q, s, _ = smt.quantize_i8(x)
    with pytest.raises(RuntimeError, match="not implemented"):
        s.sum().backward()
    with torch.no_grad():   # no graph, no error, the same bits
        assert same_bits(mod(x), unpacked_forward(mod, x.detach()))


def test_strided_input_and_fx_trace(rng):
    """A transposed activation tensor gives the contiguous one's bits (as
    nn.Linear takes it); torch.fx.symbolic_trace of the module gives a
    graph module with the same bits."""
    k, n = 24, 12
    mod = smt.ScaledMMLinear.from_linear(linear(rng, k, n))
    x = to_torch(rand_floats(rng, (k, 5))).t()
    assert x.stride(-1) != 1
    with torch.no_grad():
        want = mod(x.contiguous())
        assert same_bits(mod(x), want)
        traced = torch.fx.symbolic_trace(mod)
        x3 = to_torch(rand_floats(rng, (2, 3, k)))
        assert same_bits(traced(x3), mod(x3)) and traced(x3).shape == (2, 3, n)
