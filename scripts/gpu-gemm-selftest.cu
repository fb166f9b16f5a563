/*
 * gpu-gemm-selftest.cu - a standalone NVIDIA test and benchmark of the GPU
 * GEMM kernels (lib/rocm/gemm.hip), without the library, autotools or
 * Check: it includes gemm.hip and compares every output bit with a host
 * copy of the reference (lib/reference.c's reference_mm, using
 * lib/convert.c for the conversions).
 *
 * Build and run from the repository root (one nvcc command, nothing else):
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a \
 *        -gencode arch=compute_90,code=[sm_90,compute_90] \
 *        -Xcompiler -ffp-contract=off -Iinclude -Ilib -Ilib/rocm \
 *        scripts/gpu-gemm-selftest.cu -o /tmp/gpu-gemm-selftest
 *   /tmp/gpu-gemm-selftest                 # tests, then the benchmark
 *   /tmp/gpu-gemm-selftest --no-bench      # tests only
 *   /tmp/gpu-gemm-selftest --bench-only    # benchmark only
 *   /tmp/gpu-gemm-selftest --decode-sweep  # every decode kernel variant
 *                                          # at M = 1, 16, 32, and the
 *                                          # cost of its parts
 *   /tmp/gpu-gemm-selftest --launch-cost [raw] [quick]
 *                                          # host queueing cost against
 *                                          # time per decode launch, and
 *                                          # each decode kernel forced
 *                                          # (raw: B not static; quick:
 *                                          # the launcher's choice only,
 *                                          # not M = 2, 4)
 *   /tmp/gpu-gemm-selftest --ring-sweep    # the ring decode kernel's
 *                                          # splits and slot counts
 *   (built with -DSMM_RING_TRACE as well)
 *   /tmp/gpu-gemm-selftest --trace M N K S R [L] | scripts/ring-trace-summary.py
 *                                          # where the time of L (60)
 *                                          # stream launches of the ring
 *                                          # kernel (S blocks per cluster,
 *                                          # R slots) goes, per block
 *   ncu /tmp/gpu-gemm-selftest --decode-one 16 4096 4096 [KIND]
 *                                          # 20 plain launches of one
 *                                          # problem, for a profiler
 *   SMM_TEST_SEED=1234 /tmp/gpu-gemm-selftest --no-bench   # replay a seed
 *   SMM_GPU_GEMM_KERNEL=generic /tmp/gpu-gemm-selftest --no-bench
 *                                          # the generic kernel everywhere
 *   SMM_GPU_GEMM_KERNEL=mma /tmp/gpu-gemm-selftest
 *                                          # mma.sync instead of wgmma
 *   SMM_GPU_GEMM_KERNEL=wgmma /tmp/gpu-gemm-selftest
 *                                          # cp.async wgmma instead of TMA
 *
 * The sm_90a code object carries the TMA and wgmma kernels (large M on
 * H100/H200), the tensor-copy decode kernel and the ring decode kernel
 * (M >= 4 with B static, else larger layers); without it the mma.sync
 * kernels run everywhere.
 *
 * -ffp-contract=off matters: the host reference must not fuse t = f * sb
 * into the following multiply.
 *
 * Tests (progress on stderr, summary on stdout, exit 1 on any mismatch):
 *   - random problems: M 1..33 and larger, N with tails, K 0..130 and a
 *     few large, random lda / ldb / ldc padding and 0..15-byte base
 *     offsets (unaligned rows take the guarded paths), every output type,
 *     per-tensor / per-token scale_a, per-tensor / per-channel scale_b,
 *     optional bias, optional per-tensor / per-token azp, special scale and
 *     bias values (NaN, Inf, subnormals, -0, huge values that overflow
 *     float16 / bfloat16), azp values that wrap;
 *   - a K = 140000 problem of -128 values whose sums wrap modulo 2^32;
 *   - 4096 x 4096 x 4096 (every element of some rows and columns plus
 *     random samples are compared);
 *   - C is poisoned around and inside its strided view: the bytes outside
 *     the view must be unchanged and every element inside written;
 *   - A and B written by slow kernels queued just before the GEMM on the
 *     same stream, the last of which lets the GEMM launch early (the
 *     decode kernels, launched with programmatic dependent launch on
 *     sm_90+, must wait for it);
 *   - on the decode path (M <= 33, 16-byte aligned rows), each decode
 *     kernel with random forced row groups, clusters and stage counts;
 *   - B static (as a packed B is: the decode kernel then reads it before
 *     its wait, into registers or, in its shared-memory forms, chosen or
 *     forced at random, into shared memory, and lets the next launch
 *     start at once) in random cases, A alone written late in some of those,
 *     and two decode GEMMs chained on one stream, the second reading the
 *     first's output;
 *   - first of all, each launcher path used for the first time inside a
 *     stream capture (the strictest mode) and the CUDA graph replayed
 *     twice, with late inputs in some (the writers and the GEMM joined by
 *     programmatic edges in the graph);
 *   - the kernels' float -> bfloat16 conversion (an instruction on sm_90)
 *     against epilogue.h's integer form on all 2^32 binary32 patterns.
 * Benchmark (stdout, one line per point): the Llama-3.1-8B layer shapes
 * (N, K) = (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336) at
 * M = 1, 16, 32, 2048, 4096, 8192 with bf16 output (per-token scale_a,
 * per-channel scale_b) and with raw int32 output. Each point replays a
 * CUDA graph of back-to-back launches whose weights rotate over copies
 * filling at least 256 MiB (so B comes from device memory, not L2), and
 * reports the median time per launch, TOPS (2 M N K / t), effective GB/s
 * ((M K + N K + M N size) / t) and weight GB/s (N K / t), plus the
 * device's device-to-device copy bandwidth (read + write).
 */
#include "gemm.hip"

extern "C" {
#include "../lib/convert.c"
}

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#define CK(call)                                                                           \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(err_));                                             \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------------ */
/* Random numbers (xorshift64*)                                        */
/* ------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

static int64_t rnd(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd64() % (uint64_t)(hi - lo + 1));
}

/* Blocks per cluster that the ring kernel's cases force (0: the
 * launcher's split); index with rnd(0, 3). */
static const int ring_splits[] = {0, 1, 2, 4};

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A scale / bias value: mostly ordinary, sometimes special. */
static float rnd_float(int special_pct, float mag)
{
    if (rnd(0, 99) < special_pct) {
        switch (rnd(0, 9)) {
        case 0: return NAN;
        case 1: return INFINITY;
        case 2: return -INFINITY;
        case 3: return 0.0f;
        case 4: return -0.0f;
        case 5: return f32_of_bits((uint32_t)rnd(1, 0x007FFFFF));            /* subnormal */
        case 6: return -f32_of_bits((uint32_t)rnd(1, 0x007FFFFF));
        case 7: return 1e30f;                                                 /* overflows */
        case 8: return f32_of_bits(0x7FC00000u | (uint32_t)rnd(1, 0x3FFFFF)); /* NaN payload */
        default: return 70000.0f;                                            /* > f16 max */
        }
    }
    {
        const float u = (float)rnd(1, 1 << 20) / (float)(1 << 20);
        return (rnd(0, 1) ? -1.0f : 1.0f) * u * mag;
    }
}

/* ------------------------------------------------------------------ */
/* Host reference (lib/reference.c's reference_mm, per element)        */
/* ------------------------------------------------------------------ */

struct host_problem {
    int64_t m, n, k, lda, ldb, ldc;
    std::vector<int8_t> a, b;  /* footprints (from the view's first element) */
    std::vector<float> sa, sb, bias;
    std::vector<int32_t> azp;
    int has_bias, has_azp;
    smm_dtype dtype;
};

static int dtype_size(smm_dtype t)
{
    return (t == SMM_DTYPE_F16 || t == SMM_DTYPE_BF16) ? 2 : 4;
}

static const char *dtype_name(smm_dtype t)
{
    switch (t) {
    case SMM_DTYPE_I32: return "i32";
    case SMM_DTYPE_F32: return "f32";
    case SMM_DTYPE_F16: return "f16";
    default: return "bf16";
    }
}

/* The bits of C[i][j] (in the low 16 bits for the 16-bit types). */
static uint32_t ref_element(const host_problem &p, int64_t i, int64_t j, uint32_t colsum_in,
                            int have_colsum)
{
    const int8_t *arow = p.a.data() + i * p.lda;
    const int8_t *brow = p.b.data() + j * p.ldb;
    uint32_t acc = 0, colsum = 0;
    float sa, sb, f, t, y;
    int64_t kk;

    for (kk = 0; kk < p.k; kk++) {
        acc += (uint32_t)((int32_t)arow[kk] * (int32_t)brow[kk]);
        if (!have_colsum)
            colsum += (uint32_t)(int32_t)brow[kk];
    }
    if (have_colsum)
        colsum = colsum_in;
    if (p.dtype == SMM_DTYPE_I32)
        return acc;
    if (p.has_azp) {
        int32_t z = p.azp.size() == 1 ? p.azp[0] : p.azp[i];
        acc -= (uint32_t)z * colsum;
    }
    sa = p.sa.size() == 1 ? p.sa[0] : p.sa[i];
    sb = p.sb.size() == 1 ? p.sb[0] : p.sb[j];
    {
        int32_t v;
        memcpy(&v, &acc, 4);
        f = (float)v;
    }
    t = f * sb;
    if (p.has_bias)
        y = fmaf(sa, t, p.bias[j]);
    else if (p.has_azp)
        y = fmaf(sa, t, 0.0f);
    else
        y = sa * t;
    if (p.dtype == SMM_DTYPE_F32) {
        uint32_t bits;
        if (std::isnan(y))
            return 0x7FFFFFFFu;
        memcpy(&bits, &y, 4);
        return bits;
    }
    if (p.dtype == SMM_DTYPE_F16)
        return smm_f32_to_f16(y);
    return smm_f32_to_bf16(y);
}

/* ------------------------------------------------------------------ */
/* One test problem on the device                                      */
/* ------------------------------------------------------------------ */

static long g_failures, g_cases;

struct case_opts {
    int64_t m, n, k;
    int a_off, b_off;        /* byte offset of the view from a 256-byte boundary */
    int64_t lda, ldb, ldc;
    int c_off;               /* elements of C's view past a 16-byte boundary */
    smm_dtype dtype;
    int sa_per_row, sb_per_col, has_bias, has_azp, azp_per_row;
    int special_pct;
    int extreme;             /* 1: every A and B value is -128 */
    int full_check;          /* 0: sampled (large problems) */
    int late_inputs;         /* 1: A and B are written by slow kernels queued just
                                before the GEMM on the same stream */
    int b_static;            /* 1: B passed as a packed B's rows would be
                                (smm_gpu_launch_mm's b_static): with
                                late_inputs, only A is written late */
    int capture;             /* 1: the launch (and the late writers) captured
                                into a CUDA graph, which is replayed twice,
                                the output (and late inputs) poisoned again
                                before the second replay */
};

/* Waits about `ns` nanoseconds, then copies n bytes from src to dst: the
 * late_inputs cases' writer of A and B. On sm_90+ it first lets the
 * kernel after it in the stream launch (griddepcontrol.launch_dependents),
 * as a fused producer might: a programmatically launched GEMM can then
 * start while this one still waits, and must itself wait for the copy. */
__global__ void slow_copy_kernel(int8_t *dst, const int8_t *src, int64_t n, long long ns)
{
    unsigned long long t0, t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < (unsigned long long)ns);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* Every binary32 bit pattern through the kernels' float -> bfloat16
 * conversion (smm_epi_f32_to_bf16: one instruction on sm_90) and through
 * epilogue.h's integer form (which tests/check_gpu_convert.c keeps equal
 * to lib/convert.c's): the count of differences, the smallest pattern
 * that differs. */
__global__ void bf16_every_pattern_kernel(unsigned long long *bad, unsigned *first)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
         i += (uint64_t)gridDim.x * blockDim.x) {
        const float x = __uint_as_float((uint32_t)i);
        if (smm_epi_f32_to_bf16(x) != smm_epi_f32_to_bf16_int(x)) {
            atomicAdd(bad, 1ull);
            atomicMin(first, (unsigned)i);
        }
    }
}

static void run_bf16_check(void)
{
    unsigned long long *bad = NULL, nbad = 0;
    unsigned *first = NULL, first_h = 0xFFFFFFFFu;

    CK(cudaMalloc(&bad, sizeof *bad));
    CK(cudaMalloc(&first, sizeof *first));
    CK(cudaMemcpy(bad, &nbad, sizeof nbad, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(first, &first_h, sizeof first_h, cudaMemcpyHostToDevice));
    bf16_every_pattern_kernel<<<1024, 256>>>(bad, first);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&first_h, first, sizeof first_h, cudaMemcpyDeviceToHost));
    CK(cudaFree(bad));
    CK(cudaFree(first));
    g_cases++;
    if (nbad != 0) {
        g_failures++;
        fprintf(stderr, "FAIL: the device's bf16 conversion differs from the integer form "
                        "on %llu binary32 patterns (first 0x%08X)\n", nbad, first_h);
    }
}

/* Whether this device runs the tensor-copy decode kernel (compute
 * capability 9.0, as the launcher asks). */
static bool dtma_capable(void)
{
    int cc = 0, sms = 0;
    smm_device_info(&cc, &sms);
    return cc == 90;
}

static void run_case(const case_opts &o)
{
    host_problem p;
    const int64_t m = o.m, n = o.n, k = o.k;
    const int es = dtype_size(o.dtype);
    const int64_t afoot = (m - 1) * o.lda + k, bfoot = (n - 1) * o.ldb + k;
    const int64_t celems = (m - 1) * o.ldc + n;
    /* Bytes poisoned before and after C's footprint (C's view starts
     * c_off elements past a 16-byte boundary). */
    const int64_t guard = 64 + (int64_t)o.c_off * es;
    const int64_t cbytes = celems * es + 2 * guard;
    int8_t *da = NULL, *db = NULL;
    unsigned char *dc = NULL;
    float *dsa = NULL, *dsb = NULL, *dbias = NULL;
    int32_t *dazp = NULL;
    /* first: a captured case's output after the graph's first replay. */
    std::vector<unsigned char> got((size_t)cbytes), first;
    long bad = 0;
    int64_t i, j;

    g_cases++;
    p.m = m; p.n = n; p.k = k; p.lda = o.lda; p.ldb = o.ldb; p.ldc = o.ldc;
    p.dtype = o.dtype;
    p.a.resize((size_t)std::max<int64_t>(afoot, 1));
    p.b.resize((size_t)std::max<int64_t>(bfoot, 1));
    for (auto &v : p.a)
        v = o.extreme ? (int8_t)-128 : (int8_t)rnd(-128, 127);
    for (auto &v : p.b)
        v = o.extreme ? (int8_t)-128 : (int8_t)rnd(-128, 127);
    p.has_bias = o.has_bias;
    p.has_azp = o.has_azp;
    if (o.dtype != SMM_DTYPE_I32) {
        p.sa.resize(o.sa_per_row ? (size_t)m : 1);
        p.sb.resize(o.sb_per_col ? (size_t)n : 1);
        for (auto &v : p.sa)
            v = rnd_float(o.special_pct, 0.05f);
        for (auto &v : p.sb)
            v = rnd_float(o.special_pct, 0.05f);
        if (o.has_bias) {
            p.bias.resize((size_t)n);
            for (auto &v : p.bias)
                v = rnd_float(o.special_pct, 1000.0f);
        }
        if (o.has_azp) {
            p.azp.resize(o.azp_per_row ? (size_t)m : 1);
            for (auto &v : p.azp)
                v = rnd(0, 9) == 0 ? (int32_t)(uint32_t)rnd64() : (int32_t)rnd(-128, 127);
        }
    }

    /* Device copies at the requested misalignment. */
    CK(cudaMalloc((void **)&da, (size_t)(afoot + 512)));
    CK(cudaMalloc((void **)&db, (size_t)(bfoot + 512)));
    CK(cudaMalloc((void **)&dc, (size_t)cbytes + 512));
    const int64_t fa = std::max<int64_t>(afoot, 0), fb = std::max<int64_t>(bfoot, 0);
    int8_t *stage = NULL;
    cudaStream_t st = 0;
    if (!o.late_inputs) {
        /* Bytes around the copies hold values a kernel must not read:
         * rows past M or N, bytes past K. */
        CK(cudaMemset(da, 0x5a, (size_t)(afoot + 512)));
        CK(cudaMemset(db, 0xa3, (size_t)(bfoot + 512)));
        CK(cudaMemcpy(da + o.a_off, p.a.data(), (size_t)fa, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db + o.b_off, p.b.data(), (size_t)fb, cudaMemcpyHostToDevice));
    } else {
        /* A (and B, unless it is static) hold other values until kernels
         * queued just before the GEMM, on the GEMM's stream, write them
         * (after ~100 us each; see below). */
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&stage, (size_t)(fa + fb + 1)));
        CK(cudaMemcpy(stage, p.a.data(), (size_t)fa, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(stage + fa, p.b.data(), (size_t)fb, cudaMemcpyHostToDevice));
        CK(cudaMemset(da, 0x7f, (size_t)(afoot + 512)));
        CK(cudaMemset(db, 0x81, (size_t)(bfoot + 512)));
        if (o.b_static)
            CK(cudaMemcpy(db + o.b_off, p.b.data(), (size_t)fb, cudaMemcpyHostToDevice));
    }
    CK(cudaMemset(dc, 0xA5, (size_t)cbytes + 512));
    if (!p.sa.empty()) {
        CK(cudaMalloc((void **)&dsa, p.sa.size() * 4));
        CK(cudaMemcpy(dsa, p.sa.data(), p.sa.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc((void **)&dsb, p.sb.size() * 4));
        CK(cudaMemcpy(dsb, p.sb.data(), p.sb.size() * 4, cudaMemcpyHostToDevice));
    }
    if (!p.bias.empty()) {
        CK(cudaMalloc((void **)&dbias, p.bias.size() * 4));
        CK(cudaMemcpy(dbias, p.bias.data(), p.bias.size() * 4, cudaMemcpyHostToDevice));
    }
    if (!p.azp.empty()) {
        CK(cudaMalloc((void **)&dazp, p.azp.size() * 4));
        CK(cudaMemcpy(dazp, p.azp.data(), p.azp.size() * 4, cudaMemcpyHostToDevice));
    }

    {
        smm_mm_problem q;
        memset(&q, 0, sizeof q);
        q.m = m; q.n = n; q.k = k;
        q.a = da + o.a_off; q.lda = o.lda;
        q.b = db + o.b_off; q.ldb = o.ldb;
        q.scale_a = dsa; q.scale_a_len = (int64_t)p.sa.size();
        q.scale_b = dsb; q.scale_b_len = (int64_t)p.sb.size();
        q.bias = dbias;
        q.azp = dazp; q.azp_len = (int64_t)p.azp.size();
        q.c = dc + guard;
        q.ldc = o.ldc;
        q.c_dtype = o.dtype;
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if (o.capture && !o.late_inputs)
            CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        if (o.late_inputs || o.capture)
            CK(cudaDeviceSynchronize()); /* everything above has landed */
        if (o.capture) /* the strictest mode: no unsafe call from any thread */
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        if (o.late_inputs) {
            /* The writers go just before the GEMM. */
            slow_copy_kernel<<<64, 256, 0, st>>>(da + o.a_off, stage, fa, 100000);
            if (!o.b_static)
                slow_copy_kernel<<<64, 256, 0, st>>>(db + o.b_off, stage + fa, fb, 100000);
            CK(cudaGetLastError());
        }
        const unsigned long tma0 = smm_decode_tma_launches, ring0 = smm_decode_ring_launches;
        CK(smm_gpu_launch_mm(&q, o.b_static != 0, st));
        if (o.capture) {
            CK(cudaStreamEndCapture(st, &graph));
            CK(cudaGraphInstantiate(&exec, graph, 0));
            CK(cudaGraphLaunch(exec, st));
            CK(cudaStreamSynchronize(st));
            first.resize((size_t)cbytes);
            CK(cudaMemcpy(first.data(), dc, (size_t)cbytes, cudaMemcpyDeviceToHost));
            CK(cudaMemsetAsync(dc, 0xA5, (size_t)cbytes + 512, st));
            if (o.late_inputs)
                CK(cudaMemsetAsync(da, 0x7f, (size_t)(afoot + 512), st));
            if (o.late_inputs && !o.b_static)
                CK(cudaMemsetAsync(db, 0x81, (size_t)(bfoot + 512), st));
            CK(cudaGraphLaunch(exec, st));
            CK(cudaStreamSynchronize(st));
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
        }
        CK(cudaDeviceSynchronize());
        /* A forced tensor-copy (kind 2) or ring (kind 3) decode launch
         * must have run that kernel when it can (sm_90a code, aligned
         * rows, K > 0): not the fallback. */
        const int kind = smm_decode_force_kind;
        const bool wgmma_kind = (kind == 2 && smm_have_dtma()) || (kind == 3 && smm_have_ring());
        const bool ran = kind == 2 ? smm_decode_tma_launches != tma0
                                   : smm_decode_ring_launches != ring0;
        if (wgmma_kind && !smm_force_generic() && dtma_capable() && k > 0 && m <= 32 &&
            o.a_off == 0 && o.b_off == 0 && (m == 1 || o.lda % 16 == 0) &&
            (n == 1 || o.ldb % 16 == 0) && !ran) {
            g_failures++;
            fprintf(stderr, "FAIL m=%lld n=%lld k=%lld: the %s decode kernel was forced but "
                            "did not run\n",
                    (long long)m, (long long)n, (long long)k,
                    kind == 2 ? "tensor-copy" : "ring");
        }
    }
    if (o.late_inputs || o.capture)
        CK(cudaStreamDestroy(st));
    if (o.late_inputs)
        CK(cudaFree(stage));
    CK(cudaMemcpy(got.data(), dc, (size_t)cbytes, cudaMemcpyDeviceToHost));
    if (o.capture && memcmp(first.data(), got.data(), (size_t)cbytes) != 0) {
        g_failures++;
        fprintf(stderr, "FAIL m=%lld n=%lld k=%lld: the graph's two replays wrote different "
                        "bytes\n", (long long)m, (long long)n, (long long)k);
    }

    /* Column sums once (the sampled check reuses them). */
    std::vector<uint32_t> colsum((size_t)n, 0);
    for (j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++)
            colsum[(size_t)j] += (uint32_t)(int32_t)p.b[(size_t)(j * o.ldb + kk)];

    auto elem_at = [&](int64_t off_elems) -> uint32_t {
        const unsigned char *q = got.data() + guard + off_elems * es;
        if (es == 2)
            return (uint32_t)q[0] | ((uint32_t)q[1] << 8);
        return (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
               ((uint32_t)q[3] << 24);
    };
    auto check = [&](int64_t ii, int64_t jj) {
        const uint32_t want = ref_element(p, ii, jj, colsum[(size_t)jj], 1);
        const uint32_t have = elem_at(ii * o.ldc + jj);
        if (want != have) {
            if (bad < 5)
                fprintf(stderr,
                        "  MISMATCH m=%lld n=%lld k=%lld C[%lld][%lld]: got 0x%08x want 0x%08x\n",
                        (long long)m, (long long)n, (long long)k, (long long)ii, (long long)jj,
                        have, want);
            bad++;
        }
    };

    /* Bytes outside the view: the guards and each row's padding. */
    for (i = 0; i < guard; i++)
        if (got[(size_t)i] != 0xA5 || got[(size_t)(cbytes - 1 - i)] != 0xA5) {
            if (bad < 5)
                fprintf(stderr, "  a byte outside C's footprint was written\n");
            bad++;
            break;
        }
    for (i = 0; i + 1 < m; i++)
        for (j = n; j < o.ldc; j++)
            for (int b = 0; b < es; b++)
                if (got[(size_t)(guard + (i * o.ldc + j) * es + b)] != 0xA5) {
                    if (bad < 5)
                        fprintf(stderr, "  padding of row %lld written\n", (long long)i);
                    bad++;
                }

    if (o.full_check) {
        for (i = 0; i < m; i++)
            for (j = 0; j < n; j++)
                check(i, j);
    } else {
        for (j = 0; j < n; j++) {
            check(0, j);
            check(m - 1, j);
        }
        for (i = 0; i < m; i++) {
            check(i, 0);
            check(i, n - 1);
        }
        for (int s = 0; s < 20000; s++)
            check(rnd(0, m - 1), rnd(0, n - 1));
    }

    if (bad) {
        g_failures++;
        fprintf(stderr,
                "FAIL m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld a_off=%d b_off=%d %s "
                "sa=%s sb=%s bias=%d azp=%d%s extreme=%d late=%d bstatic=%d decode kind=%d "
                "g=%d s=%d stages=%d pre=%d capture=%d: %ld bad\n",
                (long long)m, (long long)n, (long long)k, (long long)o.lda, (long long)o.ldb,
                (long long)o.ldc, o.a_off, o.b_off, dtype_name(o.dtype),
                o.sa_per_row ? "row" : "tensor", o.sb_per_col ? "col" : "tensor", o.has_bias,
                o.has_azp, o.azp_per_row ? "(row)" : "", o.extreme, o.late_inputs, o.b_static,
                smm_decode_force_kind, smm_decode_force_g, smm_decode_force_s,
                smm_decode_force_stages, smm_decode_force_pre, o.capture, bad);
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    cudaFree(dsa);
    cudaFree(dsb);
    cudaFree(dbias);
    cudaFree(dazp);
}

/* Random options for an m x n x k problem. */
static case_opts random_opts(int64_t m, int64_t n, int64_t k)
{
    case_opts o;
    const int64_t pads[] = {0, 0, 0, 16, 64, 1, 3, 5, 17};
    memset(&o, 0, sizeof o);
    o.m = m; o.n = n; o.k = k;
    o.a_off = rnd(0, 2) == 0 ? (int)rnd(1, 15) : 0;
    o.b_off = rnd(0, 2) == 0 ? (int)rnd(1, 15) : 0;
    o.lda = k + pads[rnd(0, 8)];
    o.ldb = k + pads[rnd(0, 8)];
    o.ldc = n + pads[rnd(0, 8)];
    if (m == 1 && rnd(0, 1))
        o.lda = rnd(0, 5);   /* one row: not read */
    if (n == 1 && rnd(0, 1))
        o.ldb = rnd(0, 5);
    if (m == 1 && rnd(0, 1))
        o.ldc = rnd(0, 5);
    if (o.ldc < n && m > 1)
        o.ldc = n;
    switch (rnd(0, 3)) {
    case 0: o.dtype = SMM_DTYPE_I32; break;
    case 1: o.dtype = SMM_DTYPE_F32; break;
    case 2: o.dtype = SMM_DTYPE_F16; break;
    default: o.dtype = SMM_DTYPE_BF16; break;
    }
    if (o.dtype != SMM_DTYPE_I32) {
        o.sa_per_row = (int)rnd(0, 1);
        o.sb_per_col = (int)rnd(0, 1);
        o.has_bias = (int)rnd(0, 1);
        o.has_azp = (int)rnd(0, 1);
        o.azp_per_row = (int)rnd(0, 1);
        o.special_pct = rnd(0, 3) == 0 ? 10 : 0;
    }
    o.full_check = m * n * std::max<int64_t>(k, 1) <= (int64_t)1 << 31;
    o.b_static = (int)rnd(0, 1);
    return o;
}

/* random_opts with the views at 256-byte boundaries and rows padded to
 * 16-byte multiples: what the decode kernels need. */
static case_opts aligned_opts(int64_t m, int64_t n, int64_t k)
{
    case_opts o = random_opts(m, n, k);
    o.a_off = o.b_off = 0;
    o.lda = (k + 15) / 16 * 16;
    o.ldb = (k + 15) / 16 * 16;
    return o;
}

/* Whether a launch of M tokens forced into the decode kernel's
 * shared-memory form with g row groups runs it: sm_90+ code, programmatic
 * launches on, no SMM_GPU_GEMM_KERNEL override, and the form's shared
 * memory fits. */
static bool forced_form_runs(int64_t m, int g)
{
    int cc = 0, sms = 0;
    smm_device_info(&cc, &sms);
    return smm_decode_have_cluster(cc) && smm_decode_pdl_allowed() && !smm_force_generic() &&
           smm_decode_pre_fit_tg((int)((m + 7) / 8), g) >= 1;
}

static void run_chain_case(int pre_first);

static void run_tests(void)
{
    int it;

    /* First, before anything else in the process has launched: each of
     * the launcher's paths used for the first time inside a stream
     * capture in the strictest mode, as an application capturing its
     * decode step into a CUDA graph would (the launcher's per-device
     * set-up: device queries, kernel attributes, occupancy, tensor maps),
     * then replayed. Rows 16-byte aligned but in the last case. */
    fprintf(stderr, "captured into CUDA graphs and replayed (each launcher path first used "
                    "inside a capture)\n");
    {
        /* M, N, K, B static, late A (and B), forced decode kernel: the
         * decode kernel's shared-memory form with one and with two row
         * groups (the mma.sync kernel forced at M = 16, where the launcher
         * takes the ring kernel on sm_90a), its register form (M = 1, too
         * many blocks for the shared-memory form, too few weights for the
         * ring kernel), the plain decode kernel with a late B, the
         * tensor-copy decode kernel (raw B, N >= 3 x 64 x 132), the ring
         * decode kernel with B static and with a late B, the large-M
         * kernels (TMA tiles, 128 x 128 tiles) and, rows unaligned, the
         * fallback. */
        const int64_t cs[][6] = {{1, 4096, 1024, 1, 1, 0},   {16, 6144, 1024, 1, 1, 1},
                                 {1, 8000, 3000, 1, 0, 0},   {9, 3000, 700, 0, 1, 1},
                                 {24, 26000, 256, 0, 0, 0},  {32, 4096, 1024, 1, 1, 0},
                                 {28, 6144, 4096, 0, 1, 0},  {1024, 4352, 128, 0, 1, 0},
                                 {300, 1000, 200, 0, 0, 0},  {40, 300, 77, 0, 0, 0}};
        const unsigned long pre0 = smm_decode_pre_launches, tma0 = smm_decode_tma_launches;
        const unsigned long ring0 = smm_decode_ring_launches;
        for (const auto &c : cs) {
            case_opts o = aligned_opts(c[0], c[1], c[2]);
            if (&c == &cs[sizeof cs / sizeof cs[0] - 1])
                o.lda = o.ldb = c[2];
            o.b_static = (int)c[3];
            o.late_inputs = (int)c[4];
            o.capture = 1;
            smm_decode_force_kind = (int)c[5];
            run_case(o);
        }
        smm_decode_force_kind = 0;
        /* On a GPU of this size (an H100 or H200 SXM: 132 SMs) the launcher
         * takes the forms and kernels named above for these shapes. */
        int cc = 0, sms = 0;
        smm_device_info(&cc, &sms);
        const bool sized = cc == 90 && sms >= 128 && sms <= 135 && !smm_force_generic();
        if (sized && smm_decode_pdl_allowed() && smm_decode_pre_fit_tg(1, 1) >= 3 &&
            smm_decode_pre_fit_tg(2, 2) >= 2 && smm_decode_pre_launches - pre0 != 2) {
            g_failures++;
            fprintf(stderr, "FAIL: %lu of 2 captured launches ran the decode kernel's "
                            "shared-memory form\n", smm_decode_pre_launches - pre0);
        }
        if (sized && smm_wgmma_allowed() && smm_tma_allowed() && smm_have_dtma() &&
            dtma_capable() && smm_decode_tma_launches - tma0 != 1) {
            g_failures++;
            fprintf(stderr, "FAIL: the captured M = 24, N = 26000 launch did not run the "
                            "tensor-copy decode kernel\n");
        }
        const bool ring_auto = dtma_capable() && !smm_force_generic() && smm_have_ring() &&
                               smm_wgmma_allowed() && smm_tma_allowed();
        if (ring_auto && smm_decode_ring_launches - ring0 != 2) {
            g_failures++;
            fprintf(stderr, "FAIL: %lu of the 2 captured launches at M = 32 and 28 ran the "
                            "ring decode kernel\n", smm_decode_ring_launches - ring0);
        }
        /* The ring decode kernel forced, captured: B static, then late A
         * (M = 20). */
        for (int late = 0; late < 2; late++) {
            case_opts o = aligned_opts(late ? 20 : 32, 4096, 4096);
            o.b_static = 1;
            o.late_inputs = late;
            o.capture = 1;
            smm_decode_force_kind = 3;
            run_case(o);
            smm_decode_force_kind = 0;
        }
        if (dtma_capable() && !smm_force_generic() && smm_have_ring() &&
            smm_decode_ring_launches - ring0 != (ring_auto ? 4u : 2u)) {
            g_failures++;
            fprintf(stderr, "FAIL: %lu of %u captured launches ran the ring decode kernel\n",
                    smm_decode_ring_launches - ring0, ring_auto ? 4u : 2u);
        }
    }

    fprintf(stderr, "bf16 conversion, every binary32 bit pattern\n");
    run_bf16_check();

    fprintf(stderr, "small M (1..33), K 0..130, N tails\n");
    for (it = 0; it < 400; it++)
        run_case(random_opts(rnd(1, 33), rnd(1, 300), rnd(0, 130)));

    fprintf(stderr, "decode path (M 1..33, 16-byte aligned rows, every row-group and "
                    "cluster choice)\n");
    {
        const int gs[] = {0, 1, 2, 4}, stg[] = {0, 2, 3, 16};
        for (it = 0; it < 240; it++) {
            const int64_t m = rnd(1, 33);
            const int64_t n = rnd(0, 3) == 0 ? rnd(300, 3000) : rnd(1, 300);
            const int64_t k = rnd(0, 5) == 0 ? rnd(2000, 20000) : rnd(0, 2) == 0 ? rnd(0, 130)
                                                                           : rnd(0, 2200);
            case_opts o = random_opts(m, n, k);
            o.a_off = o.b_off = 0;
            if (m > 1 || rnd(0, 1))
                o.lda = (k + 15) / 16 * 16 + 16 * rnd(0, 2);
            if (n > 1 || rnd(0, 1))
                o.ldb = (k + 15) / 16 * 16 + 16 * rnd(0, 2);
            if (o.lda == 0) o.lda = 16;
            if (o.ldb == 0) o.ldb = 16;
            smm_decode_force_g = gs[rnd(0, 3)];
            smm_decode_force_s = gs[rnd(0, 3)];
            smm_decode_force_kind = rnd(0, 3);
            smm_decode_force_stages = stg[rnd(0, 3)];
            smm_decode_force_pre = (int)rnd(0, 2) - 1;
            run_case(o);
        }
        /* Layer shapes with the launcher's own choice and each decode
         * kernel, every element. */
        const int64_t big[5][3] = {{32, 4096, 14336}, {17, 6144, 4096}, {1, 28672, 4096},
                                   {9, 4096, 4096}, {24, 28672, 4096}};
        smm_decode_force_g = smm_decode_force_s = smm_decode_force_stages = 0;
        smm_decode_force_pre = 0;
        for (int kind = 0; kind < 4; kind++)
            for (int a = 0; a < 5; a++) {
                case_opts o = random_opts(big[a][0], big[a][1], big[a][2]);
                o.a_off = o.b_off = 0;
                o.lda = o.ldb = big[a][2];
                o.full_check = 1;
                smm_decode_force_kind = kind;
                run_case(o);
            }
        smm_decode_force_kind = 0;
    }

    fprintf(stderr, "A and B (or A alone, with B static) written by kernels queued just "
                    "before the GEMM, which may launch early (M 1..33 on the decode path, "
                    "then larger M)\n");
    {
        const int gs[] = {0, 1, 2, 4}, stg[] = {0, 2, 3, 16};
        for (it = 0; it < 100; it++) {
            const int64_t m = it < 94 ? rnd(1, 33) : rnd(64, 300);
            const int64_t n = rnd(0, 2) == 0 ? rnd(1, 300) : rnd(300, 3000);
            const int64_t k = rnd(0, 4) == 0 ? rnd(2000, 9000) : rnd(1, 2200);
            case_opts o = aligned_opts(m, n, k);
            o.late_inputs = 1;
            smm_decode_force_g = gs[rnd(0, 3)];
            smm_decode_force_s = gs[rnd(0, 3)];
            smm_decode_force_kind = rnd(0, 3);
            smm_decode_force_stages = stg[rnd(0, 3)];
            smm_decode_force_pre = (int)rnd(0, 2) - 1;
            run_case(o);
        }
        smm_decode_force_g = smm_decode_force_s = smm_decode_force_pre = 0;
        smm_decode_force_kind = smm_decode_force_stages = 0;
        /* The decode kernel's shared-memory forms (B static, no cluster;
         * M <= 8 with one row group, M = 9..32 with two), forced: the
         * random cases above reach them rarely, and a missing wait in them
         * shows only in a late-A case (the writer lets the GEMM launch
         * early). Where a form can run (sm_90+, programmatic launches on,
         * its shared memory fits), each of these must have run it. */
        const unsigned long pre0 = smm_decode_pre_launches;
        unsigned long expect = 0;
        for (it = 0; it < 48; it++) {
            const int64_t m = it < 24 ? rnd(1, 8) : rnd(9, 32);
            const int64_t n = rnd(1, 3000), k = rnd(64, 8192);
            const int g = it < 24 ? 1 : 2;
            case_opts o = aligned_opts(m, n, k);
            o.late_inputs = 1;
            o.b_static = 1;
            smm_decode_force_kind = 1;
            smm_decode_force_g = g;
            smm_decode_force_s = 1;
            smm_decode_force_pre = 1;
            run_case(o);
            if (forced_form_runs(m, g))
                expect++;
        }
        smm_decode_force_kind = smm_decode_force_g = smm_decode_force_s = 0;
        smm_decode_force_pre = 0;
        if (smm_decode_pre_launches - pre0 != expect) {
            g_failures++;
            fprintf(stderr, "FAIL: %lu of %lu forced launches ran the decode kernel's "
                            "shared-memory form\n", smm_decode_pre_launches - pre0, expect);
        }
        /* The ring decode kernel with B static copies weights before its
         * wait: late A (and the kernel's own check that it ran), forced,
         * every slot count and cluster size. */
        const int rs[] = {0, 3, 4, 5, 6, 7, 8};
        for (it = 0; it < 24; it++) {
            const int64_t m = rnd(1, 32), n = rnd(1, 3000), k = rnd(1, 9000);
            case_opts o = aligned_opts(m, n, k);
            o.late_inputs = 1;
            o.b_static = 1;
            smm_decode_force_kind = 3;
            smm_decode_force_stages = rs[rnd(0, 6)];
            smm_decode_force_s = ring_splits[rnd(0, 3)];
            run_case(o);
        }
        smm_decode_force_kind = smm_decode_force_stages = smm_decode_force_s = 0;
    }

    fprintf(stderr, "the ring decode kernel's stores at M 17..32 (staged 16-byte pieces where "
                    "a 64-column tile is whole and C's rows 16-byte aligned, else each "
                    "element), every output type\n");
    {
        const int64_t ns[] = {40, 64, 128, 192, 200, 250, 1000, 4096};
        const int64_t pads[] = {0, 8, 16, 1, 2, 3};
        for (it = 0; it < 32; it++) {
            const int64_t m = rnd(17, 32), n = ns[rnd(0, 7)], k = rnd(1, 3000);
            case_opts o = aligned_opts(m, n, k);
            const int t = it & 3;
            o.dtype = t == 0 ? SMM_DTYPE_BF16 : t == 1 ? SMM_DTYPE_F16
                      : t == 2 ? SMM_DTYPE_F32 : SMM_DTYPE_I32;
            if (o.dtype == SMM_DTYPE_I32)
                o.has_bias = o.has_azp = o.sa_per_row = o.sb_per_col = o.special_pct = 0;
            o.ldc = n + pads[rnd(0, 5)];
            o.c_off = rnd(0, 3) == 0 ? 1 : 0;
            o.b_static = (int)rnd(0, 1);
            o.full_check = 1;
            smm_decode_force_kind = 3;
            smm_decode_force_s = ring_splits[rnd(0, 3)];
            run_case(o);
        }
        smm_decode_force_kind = smm_decode_force_s = 0;
    }

    fprintf(stderr, "tile tails\n");
    {
        const int64_t ms[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257, 300};
        const int64_t ns[] = {1, 8, 15, 16, 17, 127, 128, 129, 255, 256, 257, 511, 513};
        const int64_t ks[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 257, 1000, 4097};
        for (it = 0; it < 300; it++)
            run_case(random_opts(ms[rnd(0, 18)], ns[rnd(0, 12)], ks[rnd(0, 14)]));
    }

    fprintf(stderr, "medium random\n");
    for (it = 0; it < 60; it++)
        run_case(random_opts(rnd(1, 700), rnd(1, 700), rnd(0, 2100)));

    fprintf(stderr, "wrapping sums (K = 140000, all -128)\n");
    {
        const smm_dtype dts[] = {SMM_DTYPE_I32, SMM_DTYPE_F32};
        const int64_t mss[] = {3, 40};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                case_opts o = random_opts(mss[b], 20, 140000);
                o.dtype = dts[a];
                o.extreme = 1;
                if (o.dtype == SMM_DTYPE_I32)
                    o.has_bias = o.has_azp = 0;
                else
                    o.has_azp = 1;
                o.full_check = 1;
                run_case(o);
            }
    }

    fprintf(stderr, "large (4096 x 4096 x 4096, sampled)\n");
    {
        const smm_dtype dts[] = {SMM_DTYPE_BF16, SMM_DTYPE_I32, SMM_DTYPE_F16, SMM_DTYPE_F32};
        for (int a = 0; a < 4; a++) {
            case_opts o = random_opts(4096, 4096, 4096);
            o.dtype = dts[a];
            if (a < 2) { /* the fast path: aligned, dense */
                o.a_off = o.b_off = 0;
                o.lda = o.ldb = 4096;
                o.ldc = 4096;
            }
            if (o.dtype == SMM_DTYPE_I32)
                o.has_bias = o.has_azp = o.sa_per_row = o.sb_per_col = 0;
            o.full_check = 0;
            run_case(o);
        }
        for (it = 0; it < 8; it++) {
            case_opts o = random_opts(rnd(1500, 3100), rnd(3000, 6200), rnd(0, 1100));
            if (it % 2 == 0) { /* aligned: the wgmma / cp.async path, with tails */
                o.a_off = o.b_off = 0;
                o.lda = (o.k + 15) / 16 * 16 + 16 * rnd(0, 2);
                o.ldb = (o.k + 15) / 16 * 16;
                if (o.lda == 0) o.lda = 16;
                if (o.ldb == 0) o.ldb = 16;
            }
            o.full_check = 0;
            run_case(o);
        }
    }

    fprintf(stderr, "two decode GEMMs chained on one stream, B static, the second's A the "
                    "first's output\n");
    for (it = 0; it < 18; it++)
        run_chain_case(it % 3);
}

/* Two decode GEMMs back to back on one stream, both with B static (as a
 * packed B is), int32 out: the second's A is the first's output, its
 * int32 rows read as int8 rows of 4 N1 bytes. The first lets its successor
 * launch right after its own wait (griddepcontrol.launch_dependents), or
 * at once in a shared-memory form (forced: pre_first 1, one row group at
 * M <= 8; 2, two row groups at M = 9..32; where a form can run, the first
 * must have run it), and the second loads its B before its wait; it must
 * still read all of the first's output, never the poison under it. Host
 * oracle: ref_element on the same bytes (int32 out: the wrapping sums).
 * (On an H200 a build with
 * the B-static kernel's wait deleted still passed these cases, the second
 * kernel evidently not reaching its loads of A before the first had
 * finished, while it failed 18 of the late-A cases above; they stay as a
 * check of chained results.) */
static void run_chain_case(int pre_first)
{
    const int g = pre_first; /* the forced form's row groups (pre_first 1 or 2) */
    const int64_t m = pre_first == 1 ? rnd(1, 8) : pre_first == 2 ? rnd(9, 32) : rnd(1, 32);
    const int64_t n1 = 4 * rnd(1, 512);
    const int64_t k1 = pre_first ? rnd(64, 8192) : rnd(1, 8192), n2 = rnd(1, 1500);
    const int64_t lda1 = (k1 + 15) / 16 * 16, k2 = 4 * n1; /* A2 rows: 16-byte multiples */
    host_problem p1, p2; /* int32 out: ref_element gives the sums (no column sums) */
    std::vector<int32_t> c1((size_t)(m * n1)), c2((size_t)(m * n2));
    std::vector<int32_t> got1(c1.size()), got2(c2.size());
    int8_t *da1, *db1, *db2;
    int32_t *dc1, *dc2;
    cudaStream_t st;
    long bad = 0;
    int form_missed = 0;

    p1.m = p2.m = m;
    p1.n = n1; p1.k = k1; p1.lda = lda1; p1.ldb = lda1; p1.ldc = n1;
    p2.n = n2; p2.k = k2; p2.lda = k2; p2.ldb = k2; p2.ldc = n2;
    p1.has_bias = p1.has_azp = p2.has_bias = p2.has_azp = 0;
    p1.dtype = p2.dtype = SMM_DTYPE_I32;
    p1.a.resize((size_t)(m * lda1));
    p1.b.resize((size_t)(n1 * lda1));
    p2.b.resize((size_t)(n2 * k2));
    for (auto &v : p1.a) v = (int8_t)rnd(-128, 127);
    for (auto &v : p1.b) v = (int8_t)rnd(-128, 127);
    for (auto &v : p2.b) v = (int8_t)rnd(-128, 127);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n1; j++)
            c1[(size_t)(i * n1 + j)] = (int32_t)ref_element(p1, i, j, 0, 1);
    p2.a.resize(c1.size() * 4);
    memcpy(p2.a.data(), c1.data(), p2.a.size());
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n2; j++)
            c2[(size_t)(i * n2 + j)] = (int32_t)ref_element(p2, i, j, 0, 1);

    CK(cudaMalloc((void **)&da1, p1.a.size()));
    CK(cudaMalloc((void **)&db1, p1.b.size()));
    CK(cudaMalloc((void **)&db2, p2.b.size()));
    CK(cudaMalloc((void **)&dc1, c1.size() * 4));
    CK(cudaMalloc((void **)&dc2, c2.size() * 4));
    CK(cudaMemcpy(da1, p1.a.data(), p1.a.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db1, p1.b.data(), p1.b.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db2, p2.b.data(), p2.b.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dc1, 0xA5, c1.size() * 4));
    CK(cudaMemset(dc2, 0xA5, c2.size() * 4));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    {
        smm_mm_problem q;
        memset(&q, 0, sizeof q);
        q.m = m; q.n = n1; q.k = k1;
        q.a = da1; q.lda = lda1;
        q.b = db1; q.ldb = lda1;
        q.c = dc1; q.ldc = n1;
        q.c_dtype = SMM_DTYPE_I32;
        /* The first one slow (64 rows per block, no split of K: few
         * blocks, each long), so that the second can launch while it runs;
         * or in the shared-memory form, which lets it launch at once. */
        if (pre_first) {
            smm_decode_force_kind = 1; /* the forms are the mma.sync kernel's */
            smm_decode_force_pre = 1;
            smm_decode_force_g = g;
            smm_decode_force_s = 1;
        } else {
            smm_decode_force_kind = 1;
            smm_decode_force_g = 4;
            smm_decode_force_s = 1;
        }
        const unsigned long pre0 = smm_decode_pre_launches;
        CK(smm_gpu_launch_mm(&q, true, st));
        smm_decode_force_kind = smm_decode_force_g = smm_decode_force_s = 0;
        smm_decode_force_pre = 0;
        if (pre_first && forced_form_runs(m, g) && smm_decode_pre_launches - pre0 != 1)
            form_missed = 1;
        q.n = n2; q.k = k2;
        q.a = (const int8_t *)dc1; q.lda = k2;
        q.b = db2; q.ldb = k2;
        q.c = dc2; q.ldc = n2;
        CK(smm_gpu_launch_mm(&q, true, st));
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(got1.data(), dc1, c1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got2.data(), dc2, c2.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < c1.size(); i++)
        bad += got1[i] != c1[i];
    for (size_t i = 0; i < c2.size(); i++)
        bad += got2[i] != c2[i];
    g_cases++;
    if (bad || form_missed) {
        g_failures++;
        fprintf(stderr, "FAIL chain m=%lld n1=%lld k1=%lld n2=%lld k2=%lld pre=%d: %ld bad%s\n",
                (long long)m, (long long)n1, (long long)k1, (long long)n2, (long long)k2,
                pre_first, bad,
                form_missed ? ", the first did not run its shared-memory form" : "");
    }
    CK(cudaStreamDestroy(st));
    cudaFree(da1);
    cudaFree(db1);
    cudaFree(db2);
    cudaFree(dc1);
    cudaFree(dc2);
}

/* ------------------------------------------------------------------ */
/* Benchmark                                                           */
/* ------------------------------------------------------------------ */

__global__ void fill_i8(int8_t *p, int64_t count, uint32_t salt)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = (int8_t)(h >> 24);
    }
}

__global__ void fill_f32(float *p, int64_t count, float base)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = base * (1.0f + (float)(i % 97) / 97.0f);
}

/* Device buffers of the timings: M x K tokens, B_BYTES of weights
 * (rotating copies), per-token and per-channel scales, an M x N output of
 * 4-byte elements; filled with fixed values. */
struct decode_bufs {
    int8_t *a, *b;
    float *sa, *sb;
    void *c;
};

static decode_bufs decode_bufs_alloc(int64_t m, int64_t n, int64_t k, int64_t b_bytes)
{
    decode_bufs d;
    CK(cudaMalloc((void **)&d.a, (size_t)(m * k)));
    CK(cudaMalloc((void **)&d.b, (size_t)b_bytes));
    CK(cudaMalloc((void **)&d.sa, (size_t)m * 4));
    CK(cudaMalloc((void **)&d.sb, (size_t)n * 4));
    CK(cudaMalloc(&d.c, (size_t)(m * n * 4)));
    fill_i8<<<1024, 256>>>(d.a, m * k, 1u);
    fill_i8<<<1024, 256>>>(d.b, b_bytes, 2u);
    fill_f32<<<64, 256>>>(d.sa, m, 0.01f);
    fill_f32<<<64, 256>>>(d.sb, n, 0.002f);
    CK(cudaDeviceSynchronize());
    return d;
}

static void decode_bufs_free(decode_bufs &d)
{
    cudaFree(d.a);
    cudaFree(d.b);
    cudaFree(d.sa);
    cudaFree(d.sb);
    cudaFree(d.c);
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void run_bench(void)
{
    const int64_t shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    const int64_t ms[] = {1, 16, 32, 2048, 4096, 8192};
    const int64_t max_m = 8192, max_ak = 14336, max_n = 28672;
    /* Weights rotate over copies filling at least 256 MiB (several times
     * the 50-60 MB L2), so every launch reads its B from device memory. */
    const int64_t rot_bytes = (int64_t)256 << 20;
    const int64_t max_b = (int64_t)384 << 20;
    cudaEvent_t e0, e1;
    cudaStream_t st;
    cudaDeviceProp prop;
    int dev = 0;

    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    decode_bufs bufs = decode_bufs_alloc(max_m, max_n, max_ak, max_b);
    int8_t *const a = bufs.a, *const b = bufs.b;
    float *const sa = bufs.sa, *const sb = bufs.sb;
    void *const c = bufs.c;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaDeviceSynchronize());

    /* Copy bandwidth: device to device, read + write bytes. */
    {
        const size_t bytes = (size_t)max_m * max_n * 2; /* 470 MB */
        std::vector<double> t;
        for (int r = 0; r < 12; r++) {
            float ms_ = 0;
            CK(cudaEventRecord(e0));
            CK(cudaMemcpyAsync((char *)c + bytes, c, bytes, cudaMemcpyDeviceToDevice));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms_, e0, e1));
            if (r >= 2)
                t.push_back(ms_ * 1e-3);
        }
        printf("copy_bandwidth_GBps %.0f (read+write, %zu MB copied)\n",
               2.0 * bytes / median(t) / 1e9, bytes >> 20);
    }

    /* Each point: a CUDA graph of `launches` back-to-back launches, the
     * i-th reading weight copy i % copies; median over replays of the
     * replay time / launches. wGB/s is N K / t (the weight bytes). */
    printf("%-6s %-6s %-6s %-5s %10s %9s %9s %9s %7s\n", "M", "N", "K", "out", "us", "TOPS",
           "GB/s", "wGB/s", "copies");
    for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < 6; mi++)
            for (int di = 0; di < 2; di++) {
                const int64_t n = shapes[s][0], k = shapes[s][1], m = ms[mi];
                const smm_dtype dt = di == 0 ? SMM_DTYPE_BF16 : SMM_DTYPE_I32;
                const int64_t wbytes = n * k;
                const int copies = (int)std::min<int64_t>((rot_bytes + wbytes - 1) / wbytes,
                                                          max_b / wbytes);
                const int per = m >= 2048 ? 1 : (m > 32 ? 4 : 24);
                const int launches = copies * per;
                smm_mm_problem q;
                std::vector<double> t;
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                memset(&q, 0, sizeof q);
                q.m = m; q.n = n; q.k = k;
                q.a = a; q.lda = k;
                q.b = b; q.ldb = k;
                if (dt != SMM_DTYPE_I32) {
                    q.scale_a = sa; q.scale_a_len = m;
                    q.scale_b = sb; q.scale_b_len = n;
                }
                q.c = c; q.ldc = n; q.c_dtype = dt;
                for (int r = 0; r < 2; r++)
                    CK(smm_gpu_launch_mm(&q, false, st));
                CK(cudaStreamSynchronize(st));
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int l = 0; l < launches; l++) {
                    q.b = b + (int64_t)(l % copies) * wbytes;
                    CK(smm_gpu_launch_mm(&q, false, st));
                }
                CK(cudaStreamEndCapture(st, &graph));
                CK(cudaGraphInstantiate(&exec, graph, 0));
                CK(cudaGraphLaunch(exec, st));
                CK(cudaStreamSynchronize(st));
                for (int r = 0; r < (m >= 2048 ? 5 : 15); r++) {
                    float ms_ = 0;
                    CK(cudaEventRecord(e0, st));
                    CK(cudaGraphLaunch(exec, st));
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&ms_, e0, e1));
                    t.push_back(ms_ * 1e-3 / launches);
                }
                CK(cudaGraphExecDestroy(exec));
                CK(cudaGraphDestroy(graph));
                {
                    const double sec = median(t);
                    const double ops = 2.0 * (double)m * (double)n * (double)k;
                    const double bytes = (double)m * k + (double)n * k +
                                         (double)m * n * (dt == SMM_DTYPE_I32 ? 4 : 2);
                    printf("%-6lld %-6lld %-6lld %-5s %10.2f %9.1f %9.0f %9.0f %7d\n",
                           (long long)m, (long long)n, (long long)k, dtype_name(dt), sec * 1e6,
                           ops / sec / 1e12, bytes / sec / 1e9, (double)wbytes / sec / 1e9,
                           copies);
                    fflush(stdout);
                }
            }
    cudaStreamDestroy(st);
    decode_bufs_free(bufs);
}

/* The decode measurements' problem: dense rows (lda = ldb = K, ldc = N),
 * per-token x per-channel scales, bf16 output. */
static smm_mm_problem decode_problem(int64_t m, int64_t n, int64_t k, const int8_t *a,
                                     const int8_t *b, const float *sa, const float *sb, void *c)
{
    smm_mm_problem q;
    memset(&q, 0, sizeof q);
    q.m = m; q.n = n; q.k = k;
    q.a = a; q.lda = k;
    q.b = b; q.ldb = k;
    q.scale_a = sa; q.scale_a_len = m;
    q.scale_b = sb; q.scale_b_len = n;
    q.c = c; q.ldc = n; q.c_dtype = SMM_DTYPE_BF16;
    return q;
}

/* The decode kernel's one-row-group variant (16 rows per block, 8 warps
 * splitting K in 64-byte chunks, 16-byte streaming loads of the weights,
 * four chunks in flight per lane; token rows past M clamped to the last,
 * as there) reduced to its parts, to see what each costs: the weight
 * reads alone (TG = 0), plus the TG token-fragment loads per chunk, plus
 * the mmas (MMA), without the block reduction and the epilogue; a K tail
 * shorter than a chunk is left out. Stores nothing unless what it read or
 * summed has one value (so that nothing is optimized away). */
template <int TG, bool MMA>
__global__ void __launch_bounds__(256, TG <= 1 ? 3 : 2)
parts_kernel(const int8_t *b, const int8_t *a, int64_t m, int64_t n, int64_t k, int32_t *sink)
{
    const int D = 4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int64_t n0 = (int64_t)blockIdx.x * 16;
    const int8_t *w0 = b + min(n0 + g, n - 1) * k + q * 16;
    const int8_t *w1 = b + min(n0 + g + 8, n - 1) * k + q * 16;
    const int8_t *x[TG > 0 ? TG : 1];
    for (int t = 0; t < TG; t++)
        x[t] = a + min((int64_t)(8 * t + g), m - 1) * k + q * 16;
    const int64_t full = k / 64;
    uint32_t v = 0;
    int32_t acc[TG > 0 ? TG : 1][4] = {};
    auto use = [&](const uint4 &u0, const uint4 &u1, const uint4 *xs) {
        v ^= u0.x ^ u0.y ^ u0.z ^ u0.w ^ u1.x ^ u1.y ^ u1.z ^ u1.w;
#pragma unroll
        for (int t = 0; t < TG; t++) {
            if (MMA) {
                smm_mma_16832(acc[t], u0.x, u1.x, u0.y, u1.y, xs[t].x, xs[t].y);
                smm_mma_16832(acc[t], u0.z, u1.z, u0.w, u1.w, xs[t].z, xs[t].w);
            } else {
                v ^= xs[t].x ^ xs[t].y ^ xs[t].z ^ xs[t].w;
            }
        }
    };
    int64_t c = warp;
    for (; c + (D - 1) * 8 < full; c += D * 8) {
        uint4 u[D][2], xs[D][TG > 0 ? TG : 1];
#pragma unroll
        for (int s = 0; s < D; s++) {
            u[s][0] = smm_ld_stream16(w0 + (c + 8 * s) * 64);
            u[s][1] = smm_ld_stream16(w1 + (c + 8 * s) * 64);
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[s][t] = smm_ld_cached16(x[t] + (c + 8 * s) * 64);
        }
#pragma unroll
        for (int s = 0; s < D; s++)
            use(u[s][0], u[s][1], xs[s]);
    }
    for (; c < full; c += 8) {
        uint4 xs[TG > 0 ? TG : 1];
        const uint4 u0 = smm_ld_stream16(w0 + c * 64), u1 = smm_ld_stream16(w1 + c * 64);
#pragma unroll
        for (int t = 0; t < TG; t++)
            xs[t] = smm_ld_cached16(x[t] + c * 64);
        use(u0, u1, xs);
    }
    for (int t = 0; t < TG; t++)
        v ^= (uint32_t)(acc[t][0] ^ acc[t][1] ^ acc[t][2] ^ acc[t][3]);
    if (v == 0x5eed5eedu)
        sink[blockIdx.x] = (int32_t)v;
}

__global__ void empty_kernel(void)
{
}

/* What a sweep column launches: the library's decode launcher (forced row
 * groups g, cluster blocks s; 0, 0: its own choice), parts_kernel in its
 * three forms, or empty_kernel (all with N / 16 blocks of 256 threads). */
enum sweep_kind {
    SW_DECODE, SW_READ, SW_TOKENS, SW_MMA, SW_EMPTY, SW_DTMA, SW_STATIC, SW_STATIC_R, SW_STATIC_S
};

static void launch_sweep_kind(int kind, int64_t m, unsigned nblk, const int8_t *b,
                              const int8_t *a, int64_t n, int64_t k, int32_t *sink,
                              cudaStream_t st)
{
    const int64_t tg = (m + 7) / 8;
    const bool mma = kind == SW_MMA;
    if (kind == SW_EMPTY)
        empty_kernel<<<nblk, 256, 0, st>>>();
    else if (kind == SW_READ)
        parts_kernel<0, false><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else if (tg == 1 && mma)
        parts_kernel<1, true><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else if (tg == 1)
        parts_kernel<1, false><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else if (tg == 2 && mma)
        parts_kernel<2, true><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else if (tg == 2)
        parts_kernel<2, false><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else if (mma)
        parts_kernel<4, true><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
    else
        parts_kernel<4, false><<<nblk, 256, 0, st>>>(b, a, m, n, k, sink);
}

/* --decode-sweep: weight GB/s of the launcher's choice (0,0) and of the
 * same with B static, as a packed B is (0,0p; 0,0r: the mma.sync decode
 * kernel without its shared-memory form, 0,0s: with it wherever it exists:
 * smm_decode_force_pre), of every decode row-group /
 * cluster choice (smm_decode_force_g / _s; columns g,s, and g,sp with B
 * static) and of the tensor-copy decode
 * kernel's stage counts and clusters (smm_decode_force_stages / _s;
 * columns tstages,s; 0: the launcher's choice) at M = 1, 16, 32, bf16
 * output, layer shapes; at the same weight rotation, the parts of the one-group variant alone
 * (rd: weight reads; rdx: and token loads; rdxm: and mmas; weight GB/s)
 * and an empty kernel with as many blocks (microseconds per launch). */
static void run_decode_sweep(void)
{
    const int64_t shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    const int64_t ms[] = {1, 16, 32};
    enum { NCFG = 26 };
    const int cfg[NCFG][3] = {{SW_DECODE, 0, 0}, {SW_STATIC, 0, 0},
                              {SW_STATIC_R, 0, 0}, {SW_STATIC_S, 0, 0},
                              {SW_DECODE, 1, 1}, {SW_DECODE, 2, 1},
                              {SW_DECODE, 1, 2}, {SW_DECODE, 2, 2}, {SW_DECODE, 2, 4},
                              {SW_STATIC, 1, 1}, {SW_STATIC, 2, 1}, {SW_STATIC, 1, 2},
                              {SW_STATIC, 2, 2}, {SW_STATIC, 2, 4},
                              {SW_DTMA, 0, 0},   {SW_DTMA, 0, 1},   {SW_DTMA, 0, 2},
                              {SW_DTMA, 0, 4},   {SW_DTMA, 3, 0},   {SW_DTMA, 4, 0},
                              {SW_DTMA, 8, 0},   {SW_DTMA, 16, 0},
                              {SW_READ, 0, 0},   {SW_TOKENS, 0, 0}, {SW_MMA, 0, 0},
                              {SW_EMPTY, 0, 0}};
    const char *const kind_name[] = {"", "rd", "rdx", "rdxm", "empty", "t"};
    const int64_t max_b = (int64_t)384 << 20, rot_bytes = (int64_t)256 << 20;
    decode_bufs bufs = decode_bufs_alloc(32, 28672, 14336, max_b);
    int8_t *const a = bufs.a, *const b = bufs.b;
    float *const sa = bufs.sa, *const sb = bufs.sb;
    void *const c = bufs.c;
    cudaEvent_t e0, e1;
    cudaStream_t st;

    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaDeviceSynchronize());
    printf("decode sweep, weight GB/s (bf16 out); columns g,s: the mma.sync decode kernel's "
           "row groups and cluster blocks (0,0 = the launcher's choice of kernel and "
           "variant; g,sp = the same with B static, as a packed B; 0,0r and 0,0s: the mma.sync "
           "kernel with B static, without and with its shared-memory form); tS,s: the "
           "tensor-copy decode kernel with S stages and s cluster blocks "
           "(0: its launcher's choice); rd, rdx, rdxm: the one-group variant's weight reads "
           "alone, with its token loads, with its mmas; empty: us per empty launch\n");
    printf("%-3s %-6s %-6s", "M", "N", "K");
    for (int ci = 0; ci < NCFG; ci++) {
        char name[16];
        if (cfg[ci][0] == SW_DECODE)
            snprintf(name, sizeof name, "%d,%d", cfg[ci][1], cfg[ci][2]);
        else if (cfg[ci][0] == SW_STATIC)
            snprintf(name, sizeof name, "%d,%dp", cfg[ci][1], cfg[ci][2]);
        else if (cfg[ci][0] == SW_STATIC_R || cfg[ci][0] == SW_STATIC_S)
            snprintf(name, sizeof name, "0,0%c", cfg[ci][0] == SW_STATIC_R ? 'r' : 's');
        else if (cfg[ci][0] == SW_DTMA)
            snprintf(name, sizeof name, "t%d,%d", cfg[ci][1], cfg[ci][2]);
        else
            snprintf(name, sizeof name, "%s", kind_name[cfg[ci][0]]);
        printf("  %6s", name);
    }
    printf("\n");
    for (int si = 0; si < 4; si++)
        for (int mi = 0; mi < 3; mi++) {
            const int64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
            const int64_t wbytes = n * k;
            const int copies = (int)std::min<int64_t>((rot_bytes + wbytes - 1) / wbytes,
                                                      max_b / wbytes);
            const int launches = copies * 24;
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int ci = 0; ci < NCFG; ci++) {
                smm_mm_problem q;
                std::vector<double> t;
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                const int kind0 = cfg[ci][0];
                const int kind =
                    kind0 == SW_STATIC_R || kind0 == SW_STATIC_S ? SW_STATIC : kind0;
                const unsigned nblk = (unsigned)((n + 15) / 16);
                if ((kind == SW_READ || kind == SW_EMPTY) && mi > 0) {
                    printf("  %6s", "-"); /* the same at every M */
                    continue;
                }
                /* g,s forced, and the register and shared-memory forms
                 * (_r, _s): the mma.sync kernel's */
                smm_decode_force_kind =
                    kind == SW_DTMA ? 2
                    : ((kind == SW_DECODE || kind == SW_STATIC) && cfg[ci][1]) ||
                            kind0 == SW_STATIC_R || kind0 == SW_STATIC_S
                        ? 1
                        : 0;
                smm_decode_force_g = kind == SW_DTMA ? 0 : cfg[ci][1];
                smm_decode_force_stages = kind == SW_DTMA ? cfg[ci][1] : 0;
                smm_decode_force_s = cfg[ci][2];
                /* g,sp forced: the register form, as in sweeps before the
                 * shared-memory form existed; 0,0p: the launcher's. */
                smm_decode_force_pre = kind0 == SW_STATIC_R || (kind0 == SW_STATIC && cfg[ci][1])
                                           ? -1
                                           : kind0 == SW_STATIC_S ? 1 : 0;
                q = decode_problem(m, n, k, a, b, sa, sb, c);
                if (kind == SW_DECODE || kind == SW_DTMA || kind == SW_STATIC)
                    CK(smm_gpu_launch_mm(&q, kind == SW_STATIC, st));
                else
                    launch_sweep_kind(kind, m, nblk, q.b, a, n, k, (int32_t *)c, st);
                CK(cudaGetLastError());
                CK(cudaStreamSynchronize(st));
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int l = 0; l < launches; l++) {
                    q.b = b + (int64_t)(l % copies) * wbytes;
                    if (kind == SW_DECODE || kind == SW_DTMA || kind == SW_STATIC)
                        CK(smm_gpu_launch_mm(&q, kind == SW_STATIC, st));
                    else
                        launch_sweep_kind(kind, m, nblk, q.b, a, n, k, (int32_t *)c, st);
                }
                CK(cudaGetLastError());
                CK(cudaStreamEndCapture(st, &graph));
                CK(cudaGraphInstantiate(&exec, graph, 0));
                CK(cudaGraphLaunch(exec, st));
                CK(cudaStreamSynchronize(st));
                for (int r = 0; r < 9; r++) {
                    float ms_ = 0;
                    CK(cudaEventRecord(e0, st));
                    CK(cudaGraphLaunch(exec, st));
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&ms_, e0, e1));
                    t.push_back(ms_ * 1e-3 / launches);
                }
                CK(cudaGraphExecDestroy(exec));
                CK(cudaGraphDestroy(graph));
                if (kind == SW_EMPTY)
                    printf("  %6.2f", median(t) * 1e6);
                else
                    printf("  %6.0f", (double)wbytes / median(t) / 1e9);
                fflush(stdout);
            }
            printf("\n");
        }
    smm_decode_force_g = smm_decode_force_s = smm_decode_force_pre = 0;
    smm_decode_force_kind = smm_decode_force_stages = 0;
    cudaStreamDestroy(st);
    decode_bufs_free(bufs);
}

/* --decode-one M N K [KIND]: 20 plain launches of one problem (bf16 out,
 * the launcher's choice, or with KIND 1, 2 or 3 the mma.sync, tensor-copy
 * or ring decode kernel forced), for a profiler. */
static void run_decode_one(int64_t m, int64_t n, int64_t k, int kind)
{
    smm_decode_force_kind = kind;
    decode_bufs d = decode_bufs_alloc(m, n, k, n * k);
    smm_mm_problem q = decode_problem(m, n, k, d.a, d.b, d.sa, d.sb, d.c);

    for (int l = 0; l < 20; l++)
        CK(smm_gpu_launch_mm(&q, false, 0));
    CK(cudaDeviceSynchronize());
    decode_bufs_free(d);
}

/* `launches` stream launches of the M x N x K decode problem on st, B
 * rotating over `copies` copies of N x K bytes from bufs.b, six times, the
 * first a warm-up: the medians of the other five, per launch, in seconds,
 * of the host's queueing loop (*queue) and until the stream is done
 * (*total). */
static void time_decode_launches(const decode_bufs &bufs, int64_t m, int64_t n, int64_t k,
                                 int copies, bool b_static, int launches, cudaStream_t st,
                                 double *queue, double *total)
{
    std::vector<double> tq, tt;
    for (int r = 0; r < 6; r++) {
        smm_mm_problem q = decode_problem(m, n, k, bufs.a, bufs.b, bufs.sa, bufs.sb, bufs.c);
        const auto t0 = std::chrono::steady_clock::now();
        for (int l = 0; l < launches; l++) {
            q.b = bufs.b + (int64_t)(l % copies) * n * k;
            CK(smm_gpu_launch_mm(&q, b_static, st));
        }
        const auto t1 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(st));
        const auto t2 = std::chrono::steady_clock::now();
        if (r == 0)
            continue; /* warm-up */
        tq.push_back(std::chrono::duration<double>(t1 - t0).count() / launches);
        tt.push_back(std::chrono::duration<double>(t2 - t0).count() / launches);
    }
    *queue = median(tq);
    *total = median(tt);
}

/* --launch-cost [raw]: the host's cost of queueing decode launches on a
 * stream (B static, or with raw B not, weights rotating over at least
 * 256 MiB, as the library's bench runs them): microseconds per launch
 * for queueing 2000 launches, and per launch until the stream is done, at
 * M = 1, 2, 4, 8, 16, 24, 32; median of 5 runs. When the
 * two are about equal the launches are host-bound: the GPU waits for the
 * host, and what the GPU could overlap between launches it cannot.
 * quick: only the launcher's own choice (the first two columns), and not
 * M = 2, 4: about 4 s instead of about 20, for comparing builds run after
 * one another in one session. */
static void run_launch_cost(bool b_static, bool quick)
{
    const int64_t shapes[4][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}};
    const int64_t ms[] = {1, 2, 4, 8, 16, 24, 32};
    const int64_t max_b = (int64_t)384 << 20, rot = (int64_t)256 << 20;
    const int launches = 2000;
    decode_bufs bufs = decode_bufs_alloc(32, 28672, 14336, max_b);
    cudaStream_t st;

    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaDeviceSynchronize());
    printf("launch cost, us per launch (queue: the host's loop of %d launches; total: until "
           "the stream is done), B %s, median of 5",
           launches, b_static ? "static" : "raw (not static)");
    if (quick)
        printf("; the launcher's choice only\n%-3s %-6s %-6s %9s %9s\n", "M", "N", "K", "queue",
               "total");
    else
        printf("; _r: the mma.sync decode kernel's register form; _m: the mma.sync decode "
               "kernel (its own forms); _g: the ring decode kernel\n"
               "%-3s %-6s %-6s %9s %9s %9s %9s %9s %9s\n",
               "M", "N", "K", "queue", "total", "queue_r", "total_r", "total_m", "total_g");
    for (int si = 0; si < 4; si++)
        for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++) {
            if (quick && (ms[mi] == 2 || ms[mi] == 4))
                continue;
            const int64_t m = ms[mi], n = shapes[si][0], k = shapes[si][1], wb = n * k;
            const int copies = (int)std::min<int64_t>((rot + wb - 1) / wb, max_b / wb);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int col = 0; col < (quick ? 1 : 4); col++) {
                double tq, tt;
                /* _r: the mma.sync kernel's register form */
                smm_decode_force_pre = col == 1 ? -1 : 0;
                smm_decode_force_kind = col == 1 || col == 2 ? 1 : col == 3 ? 3 : 0;
                time_decode_launches(bufs, m, n, k, copies, b_static, launches, st, &tq, &tt);
                if (col < 2)
                    printf(" %9.2f %9.2f", tq * 1e6, tt * 1e6);
                else
                    printf(" %9.2f", tt * 1e6);
            }
            printf("\n");
            fflush(stdout);
        }
    smm_decode_force_pre = smm_decode_force_kind = 0;
    cudaStreamDestroy(st);
    decode_bufs_free(bufs);
}

/* --ring-sweep: the ring decode kernel forced with each split of K (1, 2,
 * 4 blocks per cluster) and ring slots (3, 4, 5, 6, 8), against the
 * launcher's choice (first column), on the four layers at M = 16 and 32:
 * us per launch until the stream is done (2000 stream launches, B static,
 * weights rotating over at least 256 MiB), median of 5. */
static void run_ring_sweep(void)
{
    const int64_t shapes[4][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}};
    const int64_t ms[] = {16, 32};
    const int splits[] = {1, 2, 4}, slots[] = {3, 4, 5, 6, 8};
    const int64_t max_b = (int64_t)384 << 20, rot = (int64_t)256 << 20;
    const int launches = 2000;
    decode_bufs bufs = decode_bufs_alloc(32, 28672, 14336, max_b);
    cudaStream_t st;

    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("ring sweep, us per launch (%d stream launches, B static, median of 5); "
           "columns: the launcher's choice, then s<blocks per cluster>r<slots>\n%-3s %-6s %-6s %7s",
           launches, "M", "N", "K", "auto");
    for (int si = 0; si < 3; si++)
        for (int ri = 0; ri < 5; ri++)
            printf("   s%dr%d", splits[si], slots[ri]);
    printf("\n");
    for (int li = 0; li < 4; li++)
        for (int mi = 0; mi < 2; mi++) {
            const int64_t m = ms[mi], n = shapes[li][0], k = shapes[li][1], wb = n * k;
            const int copies = (int)std::min<int64_t>((rot + wb - 1) / wb, max_b / wb);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int col = 0; col < 16; col++) {
                double tq, tt;
                smm_decode_force_kind = col == 0 ? 0 : 3;
                smm_decode_force_s = col == 0 ? 0 : splits[(col - 1) / 5];
                smm_decode_force_stages = col == 0 ? 0 : slots[(col - 1) % 5];
                time_decode_launches(bufs, m, n, k, copies, true, launches, st, &tq, &tt);
                printf(" %7.2f", tt * 1e6);
                fflush(stdout);
            }
            printf("\n");
        }
    smm_decode_force_kind = smm_decode_force_s = smm_decode_force_stages = 0;
    cudaStreamDestroy(st);
    decode_bufs_free(bufs);
}

#if defined(SMM_RING_TRACE)
/* --trace M N K S R [L]: the ring decode kernel forced with S blocks per
 * cluster and R slots, B static, weights rotating over at least 256 MiB:
 * us per launch (as --ring-sweep, tracing on), then L (60) stream
 * launches traced, one line per block: SM, block, then its start, the
 * return of its wait, its last wgmma and its end, in ns from the first
 * start (scripts/ring-trace-summary.py reads them). */
static void run_trace(int64_t m, int64_t n, int64_t k, int s, int r, int launches)
{
    const int64_t max_b = (int64_t)384 << 20, rot = (int64_t)256 << 20, wb = n * k;
    if (m < 1 || m > 32 || n < 1 || n > 28672 || k < 1 || k > 14336 || wb > max_b ||
        s < 1 || s > 4 || s == 3 || r < 3 || r > 8 || launches < 7) {
        fprintf(stderr, "--trace: M 1..32, N 1..28672, K 1..14336 (N K <= 384 MiB), S 1, 2 "
                        "or 4, R 3..8, L >= 7\n");
        exit(2);
    }
    const int copies = (int)std::min<int64_t>((rot + wb - 1) / wb, max_b / wb);
    decode_bufs bufs = decode_bufs_alloc(32, 28672, 14336, max_b);
    cudaStream_t st;
    double tq, tt;
    unsigned cnt = 0;

    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    smm_decode_force_kind = 3;
    smm_decode_force_s = s;
    smm_decode_force_stages = r;
    time_decode_launches(bufs, m, n, k, copies, true, 2000, st, &tq, &tt);
    printf("# M %lld N %lld K %lld, %d blocks per cluster, %d slots asked (the launcher "
           "lowers them to what K allows): %.3f us per launch (2000 stream launches, tracing "
           "on)\n",
           (long long)m, (long long)n, (long long)k, s, r, tt * 1e6);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpyToSymbol(smm_ring_trace_n, &cnt, sizeof cnt));
    CK(cudaDeviceSynchronize()); /* the count is zero before the first traced launch */
    smm_mm_problem q = decode_problem(m, n, k, bufs.a, bufs.b, bufs.sa, bufs.sb, bufs.c);
    for (int l = 0; l < launches; l++) {
        q.b = bufs.b + (int64_t)(l % copies) * wb;
        CK(smm_gpu_launch_mm(&q, true, st));
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpyFromSymbol(&cnt, smm_ring_trace_n, sizeof cnt));
    cnt = std::min<unsigned>(cnt, SMM_RING_TRACE_MAX);
    std::vector<unsigned long long> tr((size_t)cnt * 5);
    CK(cudaMemcpyFromSymbol(tr.data(), smm_ring_trace, tr.size() * sizeof tr[0]));
    unsigned long long t0 = ~0ull;
    for (unsigned i = 0; i < cnt; i++)
        t0 = std::min(t0, tr[5 * i + 1]);
    printf("# %d launches, %u blocks; sm block start wait loop end (ns)\n", launches, cnt);
    for (unsigned i = 0; i < cnt; i++)
        printf("%llu %llu %llu %llu %llu %llu\n", tr[5 * i] & 0xffff, tr[5 * i] >> 16,
               tr[5 * i + 1] - t0, tr[5 * i + 2] - t0, tr[5 * i + 3] - t0, tr[5 * i + 4] - t0);
    smm_decode_force_kind = smm_decode_force_s = smm_decode_force_stages = 0;
    cudaStreamDestroy(st);
    decode_bufs_free(bufs);
}
#endif

int main(int argc, char **argv)
{
    int bench = 1, tests = 1, sweep = 0;
    const char *env = getenv("SMM_TEST_SEED");
    uint64_t seed;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-bench"))
            bench = 0;
        else if (!strcmp(argv[i], "--bench-only"))
            tests = 0;
        else if (!strcmp(argv[i], "--decode-sweep"))
            sweep = 1, tests = 0, bench = 0;
        else if (!strcmp(argv[i], "--launch-cost")) {
            bool raw = false, quick = false;
            for (int j = i + 1; j < argc; j++) {
                raw = raw || !strcmp(argv[j], "raw");
                quick = quick || !strcmp(argv[j], "quick");
            }
            run_launch_cost(!raw, quick);
            return 0;
#if defined(SMM_RING_TRACE)
        } else if (!strcmp(argv[i], "--trace") && i + 5 < argc) {
            run_trace(atoll(argv[i + 1]), atoll(argv[i + 2]), atoll(argv[i + 3]),
                      atoi(argv[i + 4]), atoi(argv[i + 5]), i + 6 < argc ? atoi(argv[i + 6]) : 60);
            return 0;
#endif
        } else if (!strcmp(argv[i], "--ring-sweep")) {
            run_ring_sweep();
            return 0;
        } else if (!strcmp(argv[i], "--decode-one") && i + 3 < argc) {
            const int kind = i + 4 < argc ? atoi(argv[i + 4]) : 0;
            if (kind < 0 || kind > 3) {
                fprintf(stderr, "--decode-one: KIND is 0 to 3\n");
                return 2;
            }
            run_decode_one(atoll(argv[i + 1]), atoll(argv[i + 2]), atoll(argv[i + 3]), kind);
            return 0;
        } else {
            fprintf(stderr, "usage: %s [--no-bench | --bench-only | --decode-sweep | "
                            "--launch-cost [raw] [quick] | --ring-sweep | --decode-one M N K [KIND] | "
                            "--trace M N K S R [L] (built with -DSMM_RING_TRACE)]\n",
                    argv[0]);
            return 2;
        }
    }
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    if (seed == 0)
        seed = 1;
    rng_state = seed;
    printf("seed %llu (replay with SMM_TEST_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    if (getenv("SMM_GPU_GEMM_KERNEL"))
        printf("SMM_GPU_GEMM_KERNEL=%s\n", getenv("SMM_GPU_GEMM_KERNEL"));
    fflush(stdout);

    if (tests) {
        run_tests();
        printf("tests: %ld cases, %ld failed\n", g_cases, g_failures);
        fflush(stdout);
    }
    if (bench)
        run_bench();
    if (sweep)
        run_decode_sweep();
    return g_failures ? 1 : 0;
}
