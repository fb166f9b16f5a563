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
