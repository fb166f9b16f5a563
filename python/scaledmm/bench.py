"""python -m scaledmm.bench: the host overhead of the PyTorch ops, beside torch's own.

Host overhead is what a call costs above its kernel's own time. It is
measured on problems so small that the kernels themselves take well under
a microsecond, at M = 1 (decode) and M = 32 (torch._int_mm on CUDA needs
M > 16): each op is called back to back in eager mode, and the median time
per call over several rounds is reported, beside torch._int_mm (int8 x int8
-> int32, no epilogue) and, on CUDA, torch._scaled_mm (fp8 e4m3, rowwise
scales, bf16 out), in the same run. On CUDA the ops' device time is taken
from a CUDA graph of the same calls (replay has no host work), so
overhead = eager - graph per call, and eager time is the host's when it
exceeds the graph's.

    python -m scaledmm.bench [--device cpu|cuda] [--rounds 7] [--calls 2000] [--json]

The table goes to stdout (JSON with --json); progress to stderr.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from . import torch as smm_torch  # noqa: F401  (registers torch.ops.scaledmm)


def _timed(fn, calls: int, rounds: int, sync) -> float:
    """Median microseconds per call of `calls` back-to-back calls of fn."""
    for _ in range(max(50, calls // 10)):
        fn()
    sync()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def _graph_time(fn, calls: int, rounds: int) -> float:
    """Median microseconds per call of `calls` calls captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(per)


def cases(device: str):
    """(name, m, n, k, callable) for each op and shape measured."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    out = []
    for m, n, k in ((1, 64, 64), (32, 64, 64)):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen).to(device)
        b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen).to(device)
        sa = torch.rand(m, generator=gen).to(device)
        sb = torch.rand(n, generator=gen).to(device)
        x = torch.randn(m, k, generator=gen).to(device, torch.bfloat16)
        bt = b.t()
        ops = torch.ops.scaledmm
        out.append(("scaledmm.scaled_mm bf16", m, n, k,
                    lambda a=a, b=b, sa=sa, sb=sb: ops.scaled_mm(a, b, sa, sb, torch.bfloat16, None, None)))
        out.append(("scaledmm.gemm_s8s8s32", m, n, k, lambda a=a, b=b: ops.gemm_s8s8s32(a, b)))
        out.append(("scaledmm.quantize_i8 dynamic", m, n, k,
                    lambda x=x: ops.quantize_i8(x, None, None, True)))
        if device == "cpu" or m > 16:
            out.append(("torch._int_mm", m, n, k, lambda a=a, bt=bt: torch._int_mm(a, bt)))
        if device == "cuda" and m > 16 and hasattr(torch, "float8_e4m3fn"):
            a8 = torch.randn(m, k, generator=gen).to(device, torch.float8_e4m3fn)
            b8 = torch.randn(n, k, generator=gen).to(device, torch.float8_e4m3fn).t()
            sa8 = torch.rand(m, 1, generator=gen).to(device)
            sb8 = torch.rand(1, n, generator=gen).to(device)
            out.append(("torch._scaled_mm fp8 rowwise bf16", m, n, k,
                        lambda: torch._scaled_mm(a8, b8, sa8, sb8, out_dtype=torch.bfloat16)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m scaledmm.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"),
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds (median taken)")
    p.add_argument("--calls", type=int, default=2000, help="calls per round")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for scaledmm and torch (0: each library's default)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of a table")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        p.error("--rounds and --calls must be positive")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
        smm_torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rows = []
    todo = cases(args.device)
    for i, (name, m, n, k, fn) in enumerate(todo):
        print("bench: %d/%d %s M=%d" % (i + 1, len(todo), name, m), file=sys.stderr, flush=True)
        row = {"op": name, "m": m, "n": n, "k": k,
               "eager_us": round(_timed(fn, args.calls, args.rounds, sync), 3)}
        if args.device == "cuda":
            row["graph_us"] = round(_graph_time(fn, args.calls, args.rounds), 3)
            row["overhead_us"] = round(max(row["eager_us"] - row["graph_us"], 0.0), 3)
        rows.append(row)
    # Ratios against torch._int_mm at the same M (M = 32 on CUDA for M = 1 rows).
    key = "overhead_us" if args.device == "cuda" else "eager_us"
    ref = {r["m"]: r[key] for r in rows if r["op"] == "torch._int_mm"}
    for r in rows:
        base = ref.get(r["m"]) or ref.get(32)
        r["vs_int_mm"] = round(r[key] / base, 2) if base else None
    meta = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
            "torch": torch.__version__, "threads": args.threads,
            "rounds": args.rounds, "calls": args.calls}
    if args.json:
        json.dump({"meta": meta, "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print("# host overhead per call on %s, torch %s (median of %d rounds x %d calls)"
          % (meta["device"], meta["torch"], args.rounds, args.calls))
    cols = ["op", "m", "n", "k", "eager_us"] + (["graph_us", "overhead_us"] if args.device == "cuda" else []) + ["vs_int_mm"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
