#!/usr/bin/env python3
"""torch_int_mm_bench.py - times PyTorch's int8 and fp8 matmuls, and scaledmm's
torch ops beside them, on the Llama-3.1 layers.

The baselines of `scaledmm bench --backend cuda` (doc/performance.md), on
the layer shapes `scaledmm bench --model` knows (tools/models.c): Llama-3.1-8B
and one rank of Llama-3.1-405B at tensor parallelism 4.

Ops (--ops, the `op` column):
  int_mm     torch._int_mm(A, B.t(), out=C): int8 x int8 -> int32 through
             cuBLASLt, with no epilogue (no scales, no conversion), so it
             does less work than smm_scaled_mm.
             A int8 M x K, row-major; B int8 N x K, row-major, passed as
             B.t() (K x N, column-major: the layout cuBLASLt's int8 kernels
             want and the one our weights have); C int32 M x N, preallocated.
             torch._int_mm needs M > 16 on CUDA; smaller M are run padded to
             17 rows (the m_run column says so; the time is then that of 17
             rows, the weights read are the same).
  fp8        torch._scaled_mm(A, B.t(), scale_a, scale_b, out_dtype=bf16):
             float8_e4m3fn x float8_e4m3fn, rowwise scales (scale_a float32
             M x 1, scale_b float32 1 x N), bf16 out: the fp8 counterpart of
             smm_scaled_mm with per-token x per-channel scales, on the same
             dense peak on Hopper (use_fast_accum=False).
  fp8_fast   the same with use_fast_accum=True (Hopper's faster fp8
             accumulation, less accurate).
  smm        scaledmm's torch op scaled_mm(A, B, scale_a [M], scale_b [N],
             bfloat16, out=C) (smm_scaled_mm, B int8 N x K as is): the
             int8 counterpart of fp8 (needs the scaledmm Python package
             with its cuda backend).
  smm_packed the same on B packed once per copy with scaledmm.torch.pack_b
             (scaled_mm_packed): what the vLLM plugin runs.
  smm_linear scaledmm.torch.linear_packed(X, B packed, scale_b, bfloat16):
             bf16 activations X quantized dynamically per token, then the
             GEMM (smm_linear): the whole layer.
  Each smm row is verified after its timing: the outputs are poisoned
  (NaN in the floats, 0x7f in the int8), the timed form runs once more
  (a launch from Python, or a replay of the timed CUDA graph) and its
  outputs (for smm_linear also the int8 activations and their scales)
  must equal bit for bit the same op on CPU tensors (the library's cpu
  backend). In eager mode smm_linear allocates its outputs per call, so a
  decoy launch on other activations first leaves wrong values in the
  memory the checked launch may be given. The `verify` column says ok or
  MISMATCH (empty for the torch ops); a mismatch makes the exit status 1.

Timing: CUDA events around L launches back to back, after a warm-up; one
sample = elapsed / L; the median of --repeats samples is reported. L is
chosen per point so that one sample covers about --target-ms. The weights
rotate over enough copies that they total more than --rotate-mib (default
256 MiB, several times the GPU's L2), so each launch reads its weights
from memory. Two modes (--mode): 'eager' launches from Python (includes
PyTorch's per-call host overhead when the kernels are shorter than it),
'graph' replays the L launches captured in one CUDA graph (GPU time only).

The device's copy bandwidth is measured in the same run: a device-to-device
copy of a large buffer (1 GiB), (bytes read + bytes written) / time, median
of 5 samples of 4 copies. pct_copy_bw = weight bytes (N*K) / time / copy
bandwidth * 100, given for M <= 32.

Output: CSV on stdout (one row per layer, op, M and mode: the columns
model, op, layer, M, N, K, m_run, mode, launches, ms, TOPS, weight_GBps,
pct_copy_bw, verify), metadata as '# key: value' lines and progress on
stderr. Exit status 0, 1 when a point failed or mismatched, 2 when it
cannot run (no torch, no CUDA device, the smm ops asked for but scaledmm
or its cuda backend missing).

Usage: python3 scripts/torch_int_mm_bench.py [--m 1,16,32,2048,4096,8192]
           [--model llama-3.1-8b|llama-3.1-405b-tp4|all]
           [--ops int_mm,fp8,fp8_fast,smm,smm_packed,smm_linear]
           [--repeats 10] [--target-ms 20] [--rotate-mib 256] [--mode both]
           [--device 0] [--seed 0] > torch_int_mm.csv
"""

import argparse
import statistics
import sys

# The linear layers as scaledmm bench names them (tools/models.c):
# model -> ((layer, N, K), ...).
MODELS = {
    "llama-3.1-8b": (
        ("qkv", 6144, 4096),
        ("o", 4096, 4096),
        ("gate_up", 28672, 4096),
        ("down", 4096, 14336),
    ),
    "llama-3.1-405b-tp4": (
        ("qkv", 4608, 16384),
        ("o", 16384, 4096),
        ("gate_up", 26624, 16384),
        ("down", 16384, 13312),
    ),
}
OPS = ("int_mm", "fp8", "fp8_fast", "smm", "smm_packed", "smm_linear")
SMM_OPS = ("smm", "smm_packed", "smm_linear")
MIN_M_INT_MM = 17          # torch._int_mm on CUDA: M > 16
MIN_LAUNCHES = 3
MAX_LAUNCHES = 2000
SMALL_M = 32               # pct_copy_bw for M <= this


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def meta(key, value):
    print(f"# {key}: {value}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time torch._int_mm (int8 x int8 -> int32, cuBLASLt), "
                    "torch._scaled_mm (fp8 rowwise, bf16 out) and scaledmm's torch ops "
                    "(int8, verified bit for bit) on the Llama-3.1 layer shapes; CSV on "
                    "stdout.")
    p.add_argument("--m", default="1,16,32,2048,4096,8192",
                   help="comma-separated token counts (default %(default)s)")
    p.add_argument("--model", default="llama-3.1-8b",
                   choices=tuple(MODELS) + ("all",),
                   help="layer shapes (default %(default)s)")
    p.add_argument("--ops", default="int_mm",
                   help="comma-separated ops among " + ", ".join(OPS) +
                        " (default %(default)s)")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed samples per point, median reported (default %(default)s)")
    p.add_argument("--target-ms", type=float, default=20.0,
                   help="about how long one sample lasts (default %(default)s)")
    p.add_argument("--rotate-mib", type=int, default=256,
                   help="weight copies total more than this (default %(default)s)")
    p.add_argument("--mode", choices=("eager", "graph", "both"), default="both",
                   help="launch from Python, replay a CUDA graph, or both "
                        "(default %(default)s)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed")
    a = p.parse_args(argv)
    try:
        a.m_list = [int(x) for x in a.m.split(",") if x.strip()]
    except ValueError:
        p.error(f"--m: not a list of integers: {a.m!r}")
    if not a.m_list or min(a.m_list) < 1:
        p.error("--m: token counts must be >= 1")
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    if a.target_ms <= 0:
        p.error("--target-ms must be > 0")
    a.op_list = [x.strip() for x in a.ops.split(",") if x.strip()]
    if not a.op_list or any(x not in OPS for x in a.op_list):
        p.error(f"--ops: a list of {', '.join(OPS)}: {a.ops!r}")
    a.models = list(MODELS) if a.model == "all" else [a.model]
    return a


def copy_bandwidth(torch, dev):
    """(GB/s read + written, bytes per copy) of device-to-device copies."""
    nbytes = 1 << 30
    while True:
        try:
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            break
        except RuntimeError:
            nbytes //= 2
            if nbytes < (64 << 20):
                raise
    src.fill_(1)
    dst.copy_(src)
    torch.cuda.synchronize(dev)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    copies = 4
    samples = []
    for _ in range(5):
        start.record()
        for i in range(copies):
            if i % 2:
                src.copy_(dst)
            else:
                dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    seconds = statistics.median(samples)
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * nbytes * copies / seconds * 1e-9, nbytes


class Point:
    """One op on one layer at one M: the operands and the launch."""

    def __init__(self, torch, dev, op, n, k, m_run, rotate_bytes):
        self.torch = torch
        self.op = op
        self.copies = rotate_bytes // (n * k) + 1
        w0 = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev)
        a = torch.randint(-128, 128, (m_run, k), dtype=torch.int8, device=dev)
        if op in SMM_OPS:
            self.smt = smm_torch()
            self.w0 = w0                   # the CPU reference's weight
            self.scale_a = torch.rand(m_run, dtype=torch.float32, device=dev) + 0.5
            self.scale_b = (torch.rand(n, dtype=torch.float32, device=dev) + 0.5) / 64
            self.x = torch.randn((m_run, k), dtype=torch.bfloat16, device=dev)
        elif op != "int_mm":
            # values of int8 range, exact in e4m3 up to 16, scaled to a
            # normal spread; the timing does not depend on the values
            w0 = (w0.to(torch.float32) / 16).to(torch.float8_e4m3fn)
            a = (a.to(torch.float32) / 16).to(torch.float8_e4m3fn)
            self.scale_a = torch.rand((m_run, 1), dtype=torch.float32, device=dev) + 0.5
            self.scale_b = torch.rand((1, n), dtype=torch.float32, device=dev) + 0.5
        self.w = [w0] + [w0.clone() for _ in range(self.copies - 1)]
        if op in ("smm_packed", "smm_linear"):
            self.w = [self.smt.pack_b(w) for w in self.w]
        self.a = a
        self.c = torch.empty((m_run, n), device=dev,
                             dtype=torch.bfloat16 if op in SMM_OPS else torch.int32)
        self.next = 0
        self.ref = None
        self.last = None
        self.use_out = False
        if op == "int_mm":
            # The out= form saves an allocation per call; fall back to the
            # plain call on a build without it.
            try:
                torch._int_mm(self.a, self.w[0].t(), out=self.c)
                self.use_out = True
            except (TypeError, RuntimeError):
                torch._int_mm(self.a, self.w[0].t())
        else:
            self.launch(1)

    def launch(self, count):
        torch = self.torch
        for _ in range(count):
            w = self.w[self.next]
            if self.op == "smm":
                self.smt.scaled_mm(self.a, w, self.scale_a, self.scale_b, torch.bfloat16,
                                   out=self.c)
            elif self.op == "smm_packed":
                self.smt.scaled_mm_packed(self.a, w, self.scale_a, self.scale_b,
                                          torch.bfloat16, out=self.c)
            elif self.op == "smm_linear":
                self.last = self.smt.linear_packed(self.x, w, self.scale_b, torch.bfloat16)[:3]
            elif self.op == "int_mm":
                if self.use_out:
                    torch._int_mm(self.a, w.t(), out=self.c)
                else:
                    torch._int_mm(self.a, w.t())
            else:
                torch._scaled_mm(self.a, w.t(), self.scale_a, self.scale_b,
                                 out_dtype=torch.bfloat16,
                                 use_fast_accum=self.op == "fp8_fast")
            self.next = (self.next + 1) % self.copies

    def reference(self):
        """The same op on CPU tensors (scaledmm's cpu backend): (out,) or, for
        smm_linear, (out, q, scale); every weight copy is a clone of the
        first, so one reference serves every launch."""
        if self.ref is None:
            torch, smt = self.torch, self.smt
            if self.op == "smm_linear":
                self.ref = smt.linear_packed(self.x.cpu(), smt.pack_b(self.w0.cpu()),
                                             self.scale_b.cpu(), torch.bfloat16)[:3]
            else:
                self.ref = (smt.scaled_mm(self.a.cpu(), self.w0.cpu(), self.scale_a.cpu(),
                                          self.scale_b.cpu(), torch.bfloat16),)
        return self.ref

    def outputs(self):
        """The outputs of the latest launch."""
        return self.last if self.op == "smm_linear" else (self.c,)

    def poison(self):
        """Fills the latest launch's outputs with values no correct launch
        leaves there (NaN in the floats, 0x7f bytes in the int8)."""
        for t in self.outputs():
            if t.is_floating_point():
                t.fill_(float("nan"))
            else:
                t.fill_(0x7F)

    def check(self, relaunch):
        """'ok' when the outputs that relaunch() writes (the timed form: a
        launch from Python, or a replay of the timed CUDA graph) equal the
        CPU reference bit for bit, 'MISMATCH' otherwise, '' for the torch
        ops. The outputs are poisoned first; in eager mode smm_linear
        allocates its outputs per call, so a decoy launch on other
        activations first leaves wrong values in the blocks the checked
        launch may be given."""
        if self.op not in SMM_OPS:
            return ""
        torch = self.torch
        want = self.reference()
        self.poison()
        if self.op == "smm_linear" and relaunch is None:
            x = self.x
            self.x = -x
            self.last = None
            self.launch(1)
            self.last = None
            self.x = x
        (relaunch or (lambda: self.launch(1)))()
        torch.cuda.synchronize()
        return "ok" if all(same_bits(torch, g.cpu(), w)
                           for g, w in zip(self.outputs(), want)) else "MISMATCH"

    def free(self):
        del self.w, self.a, self.c


_SMT = None


def same_bits(torch, got, want):
    """Equal dtypes, shapes and bits (floats compared as integers of their
    width, so that -0.0 differs from +0.0 and NaNs are compared exactly)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    view = {torch.bfloat16: torch.int16, torch.float16: torch.int16,
            torch.float32: torch.int32}.get(got.dtype)
    if view is not None:
        got, want = got.contiguous().view(view), want.contiguous().view(view)
    return torch.equal(got, want)


def smm_torch():
    """scaledmm.torch (imported on first use: it builds the torch ops)."""
    global _SMT
    if _SMT is None:
        try:
            import scaledmm
        except ImportError as e:
            raise RuntimeError("the smm ops need the scaledmm Python package: %s" % e) from e
        cuda = scaledmm.info()["backends"]["cuda"]
        if not cuda["available"]:
            raise RuntimeError("scaledmm's cuda backend cannot run: %s" % cuda["reason"])
        try:
            import scaledmm.torch as smt
        except Exception as e:          # noqa: BLE001 (building or loading the ops)
            raise RuntimeError("scaledmm's torch ops cannot be loaded: %s: %s"
                               % (type(e).__name__, e)) from e
        _SMT = smt
    return _SMT


def time_eager(torch, pt, launches, repeats):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        pt.launch(launches)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / launches)
    return statistics.median(samples)


def time_graph(torch, pt, launches, repeats):
    """(ms per launch, the check of one more replay's outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        pt.launch(3)                       # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pt.launch(launches)
    graph.replay()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / launches)
    verdict = pt.check(graph.replay)
    del graph
    return statistics.median(samples), verdict


def calibrate(torch, pt, target_ms):
    """Launches per sample so that one lasts about target_ms."""
    pt.launch(3)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    pt.launch(MIN_LAUNCHES)
    end.record()
    end.synchronize()
    per = start.elapsed_time(end) / MIN_LAUNCHES
    launches = int(target_ms / per) + 1 if per > 0 else MAX_LAUNCHES
    return max(MIN_LAUNCHES, min(MAX_LAUNCHES, launches))


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        note("torch_int_mm_bench.py: PyTorch is not installed")
        return 2
    if not torch.cuda.is_available():
        note("torch_int_mm_bench.py: no CUDA device")
        return 2
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(dev)
    modes = ("eager", "graph") if args.mode == "both" else (args.mode,)

    meta("device", f"{props.name}, {props.total_memory >> 20} MiB, "
         f"{props.multi_processor_count} SMs")
    meta("torch", f"{torch.__version__} (CUDA {torch.version.cuda})")
    meta("timed", "int_mm: torch._int_mm(A, B.t(), out=C): int8 M x K by int8 N x K -> "
         "int32 M x N, cuBLASLt, no epilogue; fp8 / fp8_fast: torch._scaled_mm(A, B.t(), "
         "scale_a [M,1], scale_b [1,N], out_dtype=bfloat16, use_fast_accum=False / True), "
         "e4m3 x e4m3; smm / smm_packed: scaledmm scaled_mm(A, B or pack_b(B), scale_a [M], "
         "scale_b [N], bfloat16, out=C), int8 x int8; smm_linear: scaledmm linear_packed(X "
         "bf16, pack_b(B), scale_b, bfloat16), dynamic per-token quantization + GEMM; CUDA "
         "events around L launches, one sample = elapsed / L, median of the samples")
    meta("runs", f"{args.repeats} samples per point, each of about {args.target_ms} ms")
    meta("rotation", f"weights rotate over copies totalling > {args.rotate_mib} MiB")
    meta("modes", "eager: launched from Python; graph: the L launches replayed "
         "from one CUDA graph")
    meta("seed", args.seed)

    if any(op in SMM_OPS for op in args.op_list):
        try:
            smm_torch()
        except Exception as e:          # noqa: BLE001 (an import can fail many ways)
            note(f"torch_int_mm_bench.py: {e}")
            return 2
    note("measuring the device's copy bandwidth ...")
    copy_gbps, copy_bytes = copy_bandwidth(torch, dev)
    meta("device_copy", f"{copy_gbps:.1f} GB/s; device-to-device copy of "
         f"{copy_bytes >> 20} MiB, bytes read + written, median of 5 samples of 4 copies")

    print("model,op,layer,M,N,K,m_run,mode,launches,ms,TOPS,weight_GBps,pct_copy_bw,verify",
          flush=True)
    rotate_bytes = args.rotate_mib << 20
    points = [(model, op, layer, n, k, m) for model in args.models
              for layer, n, k in MODELS[model] for m in args.m_list for op in args.op_list]
    status = 0
    for index, (model, op, layer, n, k, m) in enumerate(points, 1):
        m_run = max(m, MIN_M_INT_MM) if op == "int_mm" else m
        note(f"[{index}/{len(points)}] {model} {op} {layer} M={m} (N={n}, K={k}) ...")
        pt = None
        try:
            pt = Point(torch, dev, op, n, k, m_run, rotate_bytes)
            launches = calibrate(torch, pt, args.target_ms)
            for mode in modes:
                try:
                    if mode == "eager":
                        ms = time_eager(torch, pt, launches, args.repeats)
                        verdict = pt.check(None)
                    else:
                        ms, verdict = time_graph(torch, pt, launches, args.repeats)
                except RuntimeError as e:
                    note(f"torch_int_mm_bench.py: {model} {op} {layer} M={m} {mode}: {e}")
                    status = 1
                    continue
                if verdict == "MISMATCH":
                    note(f"torch_int_mm_bench.py: {model} {op} {layer} M={m} {mode}: the GPU "
                         "result differs from the CPU backend's")
                    status = 1
                sec = ms * 1e-3
                tops = 2.0 * m * n * k / sec * 1e-12
                gbps = n * k / sec * 1e-9
                pct = f"{gbps / copy_gbps * 100.0:.1f}" if m <= SMALL_M else ""
                print(f"{model},{op},{layer},{m},{n},{k},{m_run},{mode},{launches},"
                      f"{ms:.5f},{tops:.2f},{gbps:.1f},{pct},{verdict}", flush=True)
        except RuntimeError as e:
            note(f"torch_int_mm_bench.py: {model} {op} {layer} M={m}: {e}")
            status = 1
        finally:
            if pt is not None:
                pt.free()
                del pt
            torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
