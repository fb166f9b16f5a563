#!/usr/bin/env python3
"""Measures how far the baselines people compare scaledmm against are from
its outputs, bit for bit (doc/numerics.md, "scaledmm and the baselines
people compare against"):

    python3 scripts/baselines.py [--scaledmm build/tools/scaledmm] [--seed S]

It writes a one-layer compressed-tensors w8a8 checkpoint (random int8
weights N x K, per-channel float32 scales, a float32 bias; dynamic per-token
activations), runs `scaledmm run` on random activations in float32, float16
and bfloat16 (output dtype = activation dtype, bias rounded to it as vLLM
holds it), and computes in torch from the same int8 activations and scales:

  vllm-current   vLLM's test baseline_scaled_mm today: dequantize first,
                 torch.mm((scale_a * a), (scale_b * b)).to(out) (+ bias)
  vllm-older     vLLM's earlier baseline: (scale_a * (scale_b * mm(a, b))).to(out)
                 (+ bias)
  torch-dequant  torch's dequantize-first matmul, bias inside:
                 F.linear(a * scale_a, w * scale_b, bias).to(out)
  aiter-ref      AITER's gemm_a8w8 test reference (run_torch):
                 (mm(a, b) * (scale_a @ scale_b)) (+ bias in float32).to(out)
  --bias f32     scaledmm run --bias f32 (the bias kept in float32) against
                 the default, the bias rounded to the output dtype as vLLM holds it
  ct-quantizer   compressed-tensors' dynamic per-token activation quantizer
                 (scale = amax / 127.5, q = round(x / scale)) against the
                 contract's (scale = amax / 127, q = rne(x * (127 / amax))):
                 the int8 activations compared

Per baseline, output dtype and bias: the share of outputs with identical
bits, the largest difference in units in the last place of the output value
("max ulps"; int8 steps for ct-quantizer; near zero, where a bias cancels the
product, one ulp is tiny and this count large) and the largest difference
in ulps of the largest output magnitude ("max ulps of max|y|", the error on
the scale of the layer's output). Needs torch, numpy and safetensors
(compressed-tensors for the ct-quantizer row).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

M, N, K = 64, 384, 384
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def ordered(t):
    """Bits of a float tensor as integers ordered like the values."""
    if t.dtype == torch.float32:
        i = t.view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    i = t.view(torch.int16).to(torch.int64)
    return torch.where(i < 0, -(i & 0x7FFF), i)


def ulp_of(v, dt):
    """The unit in the last place of |v| in dtype dt (a float32 tensor)."""
    mant = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}[dt]
    e = torch.floor(torch.log2(v.abs().clamp(min=torch.finfo(dt).tiny)))
    return torch.pow(2.0, e - mant)


def compare(ref, got):
    """Share of identical bits, the largest difference in ulps of the output
    value, and the largest difference in ulps of the largest |output|."""
    same = (ref.view(torch.int16 if ref.dtype != torch.float32 else torch.int32) ==
            got.view(torch.int16 if got.dtype != torch.float32 else torch.int32))
    ulps = (ordered(ref) - ordered(got)).abs().max().item()
    g32, r32 = got.to(torch.float32), ref.to(torch.float32)
    scale = ulp_of(g32.abs().max().reshape(1), got.dtype)
    rel = ((r32 - g32).abs().max() / scale).item()
    return 100.0 * same.float().mean().item(), ulps, rel


def contract_quantize(x):
    """The contract's dynamic per-token symmetric quantizer, in float32."""
    x = x.to(torch.float32)
    amax = x.abs().amax(dim=1, keepdim=True)
    c127 = torch.full_like(amax, 127.0)
    # tensor / tensor: torch computes `127.0 / amax` (a Python number over a
    # tensor) as 127 * reciprocal(amax), two roundings
    scale = amax / c127
    inv = torch.where(amax == 0, torch.zeros_like(amax), c127 / amax)
    q = torch.clamp(torch.round(x * inv), -128, 127).to(torch.int8)
    return q, scale


def ct_quantize(x):
    """compressed-tensors' dynamic per-token activation quantizer."""
    try:
        from compressed_tensors.quantization import QuantizationArgs
        from compressed_tensors.quantization.lifecycle.forward import quantize
        from compressed_tensors.quantization.utils import calculate_qparams
    except ImportError:
        return None
    args = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                            dynamic=True)
    scale, zp = calculate_qparams(torch.amin(x, dim=1, keepdim=True),
                                  torch.amax(x, dim=1, keepdim=True), args)
    return quantize(x=x, scale=scale, zero_point=zp, args=args, dtype=torch.int8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scaledmm", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "tools",
        "scaledmm"))
    ap.add_argument("--seed", type=int, default=None)
    o = ap.parse_args()
    seed = o.seed if o.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (replay with --seed {seed}); M {M}, N {N}, K {K}; torch "
          f"{torch.__version__}")
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-127, 128, (N, K), generator=g, dtype=torch.int8)
    ws = (torch.rand(N, 1, generator=g) * 1e-3 + 1e-3).to(torch.float32)
    bias = torch.randn(N, generator=g).to(torch.float32)
    x32 = torch.randn(M, K, generator=g) * (1 + 9 * torch.rand(M, 1, generator=g))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ckpt")
        os.makedirs(ck)
        save_file({"b.weight": w, "b.weight_scale": ws, "b.bias": bias,
                   "n.weight": w.clone(), "n.weight_scale": ws.clone()},
                  os.path.join(ck, "model.safetensors"), metadata={"format": "pt"})
        args = {"num_bits": 8, "type": "int", "symmetric": True}
        cfg = {"quantization_config": {
            "quant_method": "compressed-tensors", "format": "int-quantized",
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": dict(args, strategy="channel", dynamic=False),
                "input_activations": dict(args, strategy="token", dynamic=True)}},
            "ignore": []}}
        with open(os.path.join(ck, "config.json"), "w") as f:
            json.dump(cfg, f)
        for name, dt in DTYPES.items():
            x = x32.to(dt)
            xin = os.path.join(d, f"x-{name}.safetensors")
            save_file({"x": x.contiguous()}, xin)
            a, sa = contract_quantize(x)
            af, wf = a.to(torch.float32), w.to(torch.float32)
            sb = ws.reshape(1, N)
            bias_out = bias.to(dt)            # the bias as vLLM holds it
            for layer, with_bias in (("n", False), ("b", True)):
                yout = os.path.join(d, f"y-{name}-{layer}.safetensors")
                r = subprocess.run([o.scaledmm, "run", ck, "--layer", layer, "--input", xin,
                                    "--output", yout], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"scaledmm run failed: {r.stderr}")
                got = next(iter(load_file(yout).values()))
                acc = torch.mm(af, wf.t())    # exact: |acc| < 2^24 for K = 384
                base = {
                    "vllm-current": torch.mm(sa * af, sb * wf.t()).to(dt),
                    "vllm-older": (sa * (sb * acc)).to(dt),
                    "torch-dequant": F.linear(af * sa, wf * ws,
                                              bias if with_bias else None).to(dt),
                    "aiter-ref": acc * torch.matmul(sa, sb),
                }
                if with_bias:
                    base["vllm-current"] = base["vllm-current"] + bias_out
                    base["vllm-older"] = base["vllm-older"] + bias_out
                    base["aiter-ref"] = base["aiter-ref"] + bias
                base["aiter-ref"] = base["aiter-ref"].to(dt)
                for k, v in base.items():
                    share, ulps, rel = compare(v, got)
                    rows.append((k, name, "yes" if with_bias else "no", share, ulps, rel))
                if with_bias:
                    # scaledmm's own float32-bias option against its default,
                    # which is vLLM's epilogue on the bias vLLM holds
                    yf = os.path.join(d, f"y-{name}-f32bias.safetensors")
                    r = subprocess.run([o.scaledmm, "run", ck, "--layer", layer, "--input",
                                        xin, "--output", yf, "--bias", "f32"],
                                       capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.exit(f"scaledmm run --bias f32 failed: {r.stderr}")
                    share, ulps, rel = compare(got, next(iter(load_file(yf).values())))
                    rows.append(("--bias f32", name, "yes", share, ulps, rel))
            q = ct_quantize(x)
            if q is not None:
                same = 100.0 * (q == a).float().mean().item()
                diff = (q.to(torch.int32) - a.to(torch.int32)).abs().max().item()
                rows.append(("ct-quantizer", name, "-", same, diff, float("nan")))
    print(f"{'baseline':<14} {'dtype':<9} {'bias':<4} {'identical %':>11} {'max ulps':>10} "
          f"{'max ulps of max|y|':>18}")
    for k, name, b, share, ulps, rel in rows:
        print(f"{k:<14} {name:<9} {b:<4} {share:11.2f} {ulps:10d} {rel:18.3g}")


if __name__ == "__main__":
    main()
