#!/usr/bin/env python3
"""torch_int_mm_bench.py - times torch._int_mm on the Llama-3.1-8B layer shapes.

The baseline of `scaledmm bench --backend cuda` (doc/performance.md):
torch._int_mm is int8 x int8 -> int32 through cuBLASLt, with no epilogue
(no scales, no conversion), so it does less work than smm_scaled_mm.

For each layer (N x K weights) and each M:
  A        int8 M x K, row-major
  B        int8 N x K, row-major, passed as B.t() (K x N, column-major: the
           layout cuBLASLt's int8 kernels want and the one our weights have)
  C        int32 M x N, preallocated (out=)
torch._int_mm needs M > 16 on CUDA; smaller M are run padded to 17 rows (the
m_run column says so; the time is then that of 17 rows, the weights read are
the same).

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

Output: CSV on stdout (one row per layer, M and mode), metadata as
'# key: value' lines and progress on stderr.

Usage: python3 scripts/torch_int_mm_bench.py [--m 1,16,32,2048,4096,8192]
           [--repeats 10] [--target-ms 20] [--rotate-mib 256] [--mode both]
           [--device 0] [--seed 0] > torch_int_mm.csv
"""

import argparse
import statistics
import sys

# Llama-3.1-8B linear layers as scaledmm bench names them (tools/models.c):
# (layer, N, K).
LAYERS = (
    ("qkv", 6144, 4096),
    ("o", 4096, 4096),
    ("gate_up", 28672, 4096),
    ("down", 4096, 14336),
)
MODEL = "llama-3.1-8b"
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
        description="Time torch._int_mm (int8 x int8 -> int32, cuBLASLt) on the "
                    "Llama-3.1-8B layer shapes; CSV on stdout.")
    p.add_argument("--m", default="1,16,32,2048,4096,8192",
                   help="comma-separated token counts (default %(default)s)")
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
    """One layer at one M: the operands and the two ways of launching."""

    def __init__(self, torch, dev, n, k, m_run, rotate_bytes):
        self.torch = torch
        self.copies = rotate_bytes // (n * k) + 1
        w0 = torch.randint(-127, 128, (n, k), dtype=torch.int8, device=dev)
        self.w = [w0] + [w0.clone() for _ in range(self.copies - 1)]
        self.a = torch.randint(-127, 128, (m_run, k), dtype=torch.int8, device=dev)
        self.c = torch.empty((m_run, n), dtype=torch.int32, device=dev)
        self.next = 0
        # The out= form saves an allocation per call; fall back to the plain
        # call on a build without it.
        try:
            torch._int_mm(self.a, self.w[0].t(), out=self.c)
            self.use_out = True
        except (TypeError, RuntimeError):
            self.use_out = False
            torch._int_mm(self.a, self.w[0].t())

    def launch(self, count):
        torch = self.torch
        for _ in range(count):
            if self.use_out:
                torch._int_mm(self.a, self.w[self.next].t(), out=self.c)
            else:
                torch._int_mm(self.a, self.w[self.next].t())
            self.next = (self.next + 1) % self.copies

    def free(self):
        del self.w, self.a, self.c


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
    del graph
    return statistics.median(samples)


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
    meta("timed", "torch._int_mm(A, B.t(), out=C): int8 M x K by int8 N x K -> int32 "
         "M x N, cuBLASLt, no epilogue; CUDA events around L launches, one sample = "
         "elapsed / L, median of the samples")
    meta("runs", f"{args.repeats} samples per point, each of about {args.target_ms} ms")
    meta("rotation", f"weights rotate over copies totalling > {args.rotate_mib} MiB")
    meta("modes", "eager: launched from Python; graph: the L launches replayed "
         "from one CUDA graph")
    meta("seed", args.seed)

    note("measuring the device's copy bandwidth ...")
    copy_gbps, copy_bytes = copy_bandwidth(torch, dev)
    meta("device_copy", f"{copy_gbps:.1f} GB/s; device-to-device copy of "
         f"{copy_bytes >> 20} MiB, bytes read + written, median of 5 samples of 4 copies")

    print("model,layer,M,N,K,m_run,mode,launches,ms,TOPS,weight_GBps,pct_copy_bw",
          flush=True)
    rotate_bytes = args.rotate_mib << 20
    total = len(LAYERS) * len(args.m_list)
    index = 0
    status = 0
    for layer, n, k in LAYERS:
        for m in args.m_list:
            index += 1
            m_run = max(m, MIN_M_INT_MM)
            note(f"[{index}/{total}] {layer} M={m} (N={n}, K={k}) ...")
            pt = None
            try:
                pt = Point(torch, dev, n, k, m_run, rotate_bytes)
                launches = calibrate(torch, pt, args.target_ms)
                for mode in modes:
                    try:
                        if mode == "eager":
                            ms = time_eager(torch, pt, launches, args.repeats)
                        else:
                            ms = time_graph(torch, pt, launches, args.repeats)
                    except RuntimeError as e:
                        note(f"torch_int_mm_bench.py: {layer} M={m} {mode}: {e}")
                        status = 1
                        continue
                    sec = ms * 1e-3
                    tops = 2.0 * m * n * k / sec * 1e-12
                    gbps = n * k / sec * 1e-9
                    pct = f"{gbps / copy_gbps * 100.0:.1f}" if m <= SMALL_M else ""
                    print(f"{MODEL},{layer},{m},{n},{k},{m_run},{mode},{launches},"
                          f"{ms:.5f},{tops:.2f},{gbps:.1f},{pct}", flush=True)
            except RuntimeError as e:
                note(f"torch_int_mm_bench.py: {layer} M={m}: {e}")
                status = 1
            finally:
                if pt is not None:
                    pt.free()
                    del pt
                torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
