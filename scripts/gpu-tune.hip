/*
 * gpu-tune.hip - the GPU tuning program (not installed, not run by make
 * check): times the GEMM kernels of the GPU backend and their variants
 * through the public API (include/scaledmm.h) and the plugin's internal
 * force interface (lib/rocm/kernels.h: smm_gpu_force_set picks the
 * kernel, row groups, cluster blocks, stages and shared-memory form;
 * smm_gpu_kernel_counts says what ran). Correctness is
 * tests/check_gpu_kernels.c's job; here every timed point is still checked:
 * after its timing, one more launch on the first weight copy is compared
 * bit for bit with a host context (the cpu backend, bit-exact with the
 * reference by contract; --ref: the reference backend itself) on the same
 * inputs: every row when M <= 128, else the first and last 64 rows.
 *
 * Build from the top of the source tree, after a CUDA build of the library
 * (BUILD_DIR=build-cuda ./setup.sh --with-cuda), one command:
 *
 *   nvcc -x cu -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 \
 *        -Iinclude -Ilib/rocm scripts/gpu-tune.hip -o build-cuda/gpu-tune \
 *        -Lbuild-cuda/lib/.libs -lscaledmm -ldl \
 *        -Xlinker -rpath -Xlinker "$PWD/build-cuda/lib/.libs"
 *
 * (AMD: hipcc -x hip -std=c++17 -O3 with the same -I, -L and -l flags.)
 * The kernels are the plugin's, so the -gencode line only covers the
 * program's own empty kernel. Run it with the plugin of that build:
 *
 *   export SMM_GPU_PLUGIN_DIR=$PWD/build-cuda/lib
 *   build-cuda/gpu-tune                  # the layer shapes at M = 1 .. 8192
 *   build-cuda/gpu-tune --kernel mma     # the same, one kernel forced
 *   build-cuda/gpu-tune --decode-sweep   # every decode variant, weight GB/s
 *   build-cuda/gpu-tune --launch-cost [raw] [quick]
 *   build-cuda/gpu-tune --layer-cost [405b]  # the decode layer: stream and graph
 *   build-cuda/gpu-tune --layer-sweep        # its knobs behind the quantizer
 *   build-cuda/gpu-tune --layer-trace        # its per-block timeline (trace build)
 *   build-cuda/gpu-tune --ring-sweep [405b]  # ring decode: clusters x slots
 *   build-cuda/gpu-tune --large-sweep [405b]  # large M: TMA, ping-pong
 *   ncu build-cuda/gpu-tune --decode-one 16 4096 4096 [KERNEL]
 *
 * Modes (results on stdout, progress and errors on stderr):
 *   (none)          the Llama-3.1-8B layers (N, K) = (6144, 4096), (4096,
 *                   4096), (28672, 4096), (4096, 14336) at M = 1, 16, 32,
 *                   2048, 4096, 8192, bf16 out (per-token x per-channel
 *                   scales) and int32 out: a graph of back-to-back launches
 *                   whose weights rotate over copies filling >= 256 MiB
 *                   (B read from memory, not L2); us per launch, TOPS,
 *                   GB/s, weight GB/s; and the device's copy bandwidth.
 *                   --kernel NAME forces a kernel (names: auto, generic,
 *                   mfma, mma, wgmma, tma, decode, decode_tma, decode_ring,
 *                   tma_pp).
 *   --decode-sweep  M = 1, 16, 32 on the four layers, bf16 out, graph
 *                   replays, weight GB/s per column: 0,0 the automatic
 *                   choice; 0,0p the same with a packed B; 0,0r / 0,0s the
 *                   decode kernel with a packed B without / with its
 *                   shared-memory form; g,s the decode kernel with g row
 *                   groups and s cluster blocks (g,sp: packed B, register
 *                   form); tS,s the tensor-copy decode kernel with S stages
 *                   (0: chosen) and s cluster blocks; ring: the ring decode
 *                   kernel (packed B); empty: us per launch of an empty
 *                   kernel of N / 16 blocks. "-": the forced kernel did not
 *                   run (this device or problem lacks it).
 *   --launch-cost   the host's cost of stream launches: us per launch of
 *                   the host's loop queueing 2000 launches, and until the
 *                   stream is done (events), median of 5 after a warm-up,
 *                   packed B (raw: a plain B), M = 1, 2, 4, 8, 16, 24, 32;
 *                   columns _r: the decode kernel's register form, _m: the
 *                   decode kernel, _g: the ring decode kernel. quick: the
 *                   automatic choice only, not M = 2, 4.
 *   --layer-cost    M = 1, 2, 4, 8, 16, 32 on the four layers (405b: and the
 *                   Llama-3.1-405B TP=4 ones), packed B: smm_linear (bf16
 *                   activations, dynamic per-token; as run, and forced to
 *                   one launch) against smm_scaled_mm
 *                   alone, each as 1000 stream launches and as a CUDA
 *                   graph of them; us per launch and % of the copy
 *                   bandwidth; the layer's outputs checked bitwise.
 *                   Column ring_g: the layer with the ring decode kernel
 *                   forced (0: it could not run).
 *   --layer-sweep   the 8B layers at M = 1, 4, 16, 32, smm_linear in graph
 *                   replays: as run, the ring decode kernel forced with 6
 *                   (chosen), 4, 2 and no weight slots copied before its
 *                   wait, and the quantizer with 2 and 4 chunks a thread;
 *                   us per launch and % of the copy bandwidth, each form
 *                   checked bitwise.
 *   --layer-trace   needs the plugin built with -DSMM_GPU_TRACE
 *                   (lib/rocm/trace.h), in a build directory of its own
 *                   (objects built without it are not rebuilt): from the
 *                   top of the source tree, BUILD_DIR=build-trace
 *                   ./setup.sh --with-cuda, then make -B -C
 *                   build-trace/lib GPU_CPPFLAGS="-I$PWD/include
 *                   -I$PWD/lib -I$PWD/lib/rocm -DSMM_GPU_TRACE", and
 *                   gpu-tune built against it: the 8B qkv, o and down layers
 *                   at M = 1, 16, 32, GEMM alone and layer, one CUDA-graph
 *                   replay traced; when the quantizer's and the GEMM's
 *                   blocks start, pass their waits and end, in us after
 *                   the previous GEMM's last block ended (medians).
 *   --ring-sweep    the ring decode kernel with 1, 2, 3, 4 cluster blocks
 *                   and 4, 6, 8 slots against the automatic choice and the
 *                   mma.sync decode kernel, M = 1, 2, 4, 8, 16, 32 on the
 *                   four layers (405b: the 405B TP=4 ones instead), packed
 *                   B, CUDA-graph replays of 500 launches, us per launch;
 *                   every point checked.
 *   --large-sweep   M = 64, 256, 1024, 2048, 4096, 8192 on the four layers (405b: and the
 *                   405B ones), bf16 out: TOPS of the TMA kernel, its
 *                   ping-pong form (64 x 256 warpgroup tiles with 4
 *                   stages, 128 x 128 with 5 and 6), the mma.sync kernel
 *                   and the automatic choice, in turn, median of 3 rounds
 *                   of graph replays.
 *   --decode-one M N K [KERNEL [TILE]]   20 plain launches of one problem
 *                   (bf16 out, dense rows), for a profiler; TILE 1 or 2
 *                   the tma_pp warpgroup tile (64 x 256, 128 x 128).
 * --ref (any mode): check against the reference backend instead of cpu.
 *
 * Inputs are random from SMM_TEST_SEED (decimal or 0x-hex, anything else
 * is refused, as the test suites do) or a fresh seed, printed first.
 * Exit status: 0 when every checked point matched, 1 on a mismatch or a
 * failed call, 2 on a usage error or when no GPU backend can run here.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "scaledmm.h"
#define SMM_GPU_FORCE_ONLY
#include "kernels.h"

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define GPU_BACKEND SMM_BACKEND_ROCM
#define PLUGIN_FILE "libscaledmm-rocm.so"
typedef hipStream_t rt_stream;
typedef hipEvent_t rt_event;
typedef hipGraph_t rt_graph;
typedef hipGraphExec_t rt_graph_exec;
typedef hipError_t rt_error;
typedef hipDeviceProp_t rt_prop;
#define RT(x) hip##x
#define rt_instantiate(e, g) hipGraphInstantiate(e, g, NULL, NULL, 0)
#else
#include <cuda_runtime.h>
#define GPU_BACKEND SMM_BACKEND_CUDA
#define PLUGIN_FILE "libscaledmm-cuda.so"
typedef cudaStream_t rt_stream;
typedef cudaEvent_t rt_event;
typedef cudaGraph_t rt_graph;
typedef cudaGraphExec_t rt_graph_exec;
typedef cudaError_t rt_error;
typedef cudaDeviceProp rt_prop;
#define RT(x) cuda##x
#define rt_instantiate(e, g) cudaGraphInstantiate(e, g, 0)
#endif

#define CK(call)                                                                           \
    do {                                                                                   \
        rt_error e_ = (call);                                                              \
        if (e_ != RT(Success)) {                                                           \
            fprintf(stderr, "gpu-tune: %s: %s\n", #call, RT(GetErrorString)(e_));         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define SK(ctx, call)                                                                      \
    do {                                                                                   \
        smm_status s_ = (call);                                                            \
        if (s_ != SMM_OK) {                                                                \
            fprintf(stderr, "gpu-tune: %s: %s (%s)\n", #call, smm_strerror(s_),           \
                    smm_context_last_error(ctx));                                          \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static smm_gpu_force_set_fn force_set;
static smm_gpu_kernel_counts_fn kernel_counts;
static smm_gpu_kernel_name_fn kernel_name;
static smm_gpu_trace_take_fn trace_take; /* NULL: an older plugin */
static smm_context *gctx, *hctx; /* the GPU context, the checking host context */
static rt_stream stream;
static rt_event ev0, ev1;
static long failures;

static const int64_t layers[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
/* (N, K) of the Llama-3.1-405B TP=4 layers qkv, o, gate_up, down (the
 * modes' 405b option) */
static const int64_t l405[4][2] = {{4608, 16384}, {16384, 4096}, {26624, 16384},
                                   {16384, 13312}};

/* ---- the force interface, from the plugin the library loaded ---- */

static int find_plugin(struct dl_phdr_info *info, size_t size, void *data)
{
    const char *name = info->dlpi_name, *slash = strrchr(name, '/');
    (void)size;
    if (strcmp(slash ? slash + 1 : name, PLUGIN_FILE) != 0)
        return 0;
    *(void **)data = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    return 1;
}

static void load_force_interface(void)
{
    void *h = NULL;
    dl_iterate_phdr(find_plugin, &h);
    if (h) {
        force_set = (smm_gpu_force_set_fn)dlsym(h, "smm_gpu_force_set");
        kernel_counts = (smm_gpu_kernel_counts_fn)dlsym(h, "smm_gpu_kernel_counts");
        kernel_name = (smm_gpu_kernel_name_fn)dlsym(h, "smm_gpu_kernel_name");
        trace_take = (smm_gpu_trace_take_fn)dlsym(h, "smm_gpu_trace_take");
    }
    if (!force_set || !kernel_counts || !kernel_name) {
        fprintf(stderr, "gpu-tune: the loaded %s does not export the force interface\n",
                PLUGIN_FILE);
        exit(1);
    }
}

static smm_gpu_force force_of(int kernel, int groups, int cluster, int stages, int pre)
{
    smm_gpu_force f;
    memset(&f, 0, sizeof f);
    f.kernel = kernel, f.groups = groups, f.cluster = cluster, f.stages = stages, f.pre = pre;
    return f;
}

static int kernel_of_name(const char *s)
{
    for (int k = 0; k < SMM_GPU_KERNEL_COUNT; k++)
        if (strcmp(s, kernel_name(k)) == 0)
            return k;
    return -1;
}

/* ---- inputs: device buffers and their host copies ---- */

static uint64_t rng_state;

static uint64_t rng_next(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

struct bufs {
    int64_t max_m, max_n, max_k, b_bytes;
    std::vector<int8_t> ha, hb;
    std::vector<float> hsa, hsb;
    int8_t *a, *b;
    float *sa, *sb;
    void *c;
};

static void fill_bytes(std::vector<int8_t> &v)
{
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
        const uint64_t r = rng_next();
        memcpy(&v[i], &r, 8);
    }
    for (; i < v.size(); i++)
        v[i] = (int8_t)rng_next();
}

/* M x K tokens, b_bytes of weights (copies at multiples of N K), per-token
 * and per-channel scales, and an M x N output of 4-byte elements. */
static bufs bufs_alloc(int64_t m, int64_t n, int64_t k, int64_t b_bytes)
{
    bufs d;
    d.max_m = m, d.max_n = n, d.max_k = k, d.b_bytes = b_bytes;
    fprintf(stderr, "gpu-tune: filling %lld MiB of inputs\n",
            (long long)((m * k + b_bytes) >> 20));
    d.ha.resize((size_t)(m * k));
    d.hb.resize((size_t)b_bytes);
    fill_bytes(d.ha);
    fill_bytes(d.hb);
    for (int64_t i = 0; i < m; i++)
        d.hsa.push_back(0.01f * (1.0f + (float)(rng_next() % 97) / 97.0f));
    for (int64_t i = 0; i < n; i++)
        d.hsb.push_back(0.002f * (1.0f + (float)(rng_next() % 97) / 97.0f));
    void *p;
    SK(gctx, smm_malloc(gctx, (size_t)(m * k), &p));
    d.a = (int8_t *)p;
    SK(gctx, smm_malloc(gctx, (size_t)b_bytes, &p));
    d.b = (int8_t *)p;
    SK(gctx, smm_malloc(gctx, (size_t)m * 4, &p));
    d.sa = (float *)p;
    SK(gctx, smm_malloc(gctx, (size_t)n * 4, &p));
    d.sb = (float *)p;
    SK(gctx, smm_malloc(gctx, (size_t)(m * n * 4), &d.c));
    SK(gctx, smm_memcpy(gctx, d.a, d.ha.data(), d.ha.size(), SMM_MEMCPY_HOST_TO_DEVICE));
    SK(gctx, smm_memcpy(gctx, d.b, d.hb.data(), d.hb.size(), SMM_MEMCPY_HOST_TO_DEVICE));
    SK(gctx, smm_memcpy(gctx, d.sa, d.hsa.data(), (size_t)m * 4, SMM_MEMCPY_HOST_TO_DEVICE));
    SK(gctx, smm_memcpy(gctx, d.sb, d.hsb.data(), (size_t)n * 4, SMM_MEMCPY_HOST_TO_DEVICE));
    return d;
}

static void bufs_free(bufs &d)
{
    smm_free(gctx, d.a), smm_free(gctx, d.b), smm_free(gctx, d.sa), smm_free(gctx, d.sb);
    smm_free(gctx, d.c);
}

/* Weight copies of an N x K layer: enough to fill 256 MiB, as many as fit. */
static int copies_of(const bufs &d, int64_t n, int64_t k)
{
    const int64_t wb = n * k, rot = (int64_t)256 << 20;
    return (int)std::max<int64_t>(1, std::min((rot + wb - 1) / wb, d.b_bytes / wb));
}

/* Packed copies of the first `copies` weight copies (NULL when !packed). */
static std::vector<smm_packed_b *> pack_copies(const bufs &d, int64_t n, int64_t k, int copies)
{
    std::vector<smm_packed_b *> v((size_t)copies);
    for (int i = 0; i < copies; i++)
        SK(gctx, smm_pack_b(gctx, n, k, d.b + (int64_t)i * n * k, k, &v[(size_t)i]));
    return v;
}

static void unpack_copies(std::vector<smm_packed_b *> &v)
{
    for (smm_packed_b *p : v)
        smm_packed_b_destroy(p);
    v.clear();
}

/* One launch: dense rows, per-token x per-channel scales (bf16 out) or
 * the raw sums (int32 out), weight copy `copy` (packed when pb is set). */
static void launch(const bufs &d, int64_t m, int64_t n, int64_t k, smm_dtype dt, int copy,
                   const std::vector<smm_packed_b *> *pb)
{
    const int8_t *b = d.b + (int64_t)copy * n * k;
    if (dt == SMM_DTYPE_I32) {
        if (pb)
            SK(gctx, smm_gemm_s8s8s32_packed(gctx, m, n, k, d.a, k, (*pb)[(size_t)copy],
                                             (int32_t *)d.c, n));
        else
            SK(gctx, smm_gemm_s8s8s32(gctx, m, n, k, d.a, k, b, k, (int32_t *)d.c, n));
        return;
    }
    smm_scaled_mm_args x;
    memset(&x, 0, sizeof x);
    x.m = m, x.n = n, x.k = k, x.a = d.a, x.lda = k;
    x.b = pb ? NULL : b, x.ldb = k, x.b_packed = pb ? (*pb)[(size_t)copy] : NULL;
    x.scale_a = d.sa, x.scale_a_len = m, x.scale_b = d.sb, x.scale_b_len = n;
    x.c = d.c, x.ldc = n, x.c_dtype = dt;
    SK(gctx, smm_scaled_mm(gctx, &x));
}

/* ---- the check of a timed point ---- */

/* The host context's result for rows [r0, r0 + rows) on weight copy 0. */
static std::vector<unsigned char> host_rows(const bufs &d, int64_t r0, int64_t rows, int64_t n,
                                            int64_t k, smm_dtype dt)
{
    const size_t es = dt == SMM_DTYPE_BF16 || dt == SMM_DTYPE_F16 ? 2 : 4;
    std::vector<unsigned char> c((size_t)(rows * n) * es);
    const int8_t *a = d.ha.data() + r0 * k;
    if (dt == SMM_DTYPE_I32) {
        SK(hctx, smm_gemm_s8s8s32(hctx, rows, n, k, a, k, d.hb.data(), k, (int32_t *)c.data(),
                                  n));
        return c;
    }
    smm_scaled_mm_args x;
    memset(&x, 0, sizeof x);
    x.m = rows, x.n = n, x.k = k, x.a = a, x.lda = k, x.b = d.hb.data(), x.ldb = k;
    x.scale_a = d.hsa.data() + r0, x.scale_a_len = rows;
    x.scale_b = d.hsb.data(), x.scale_b_len = n;
    x.c = c.data(), x.ldc = n, x.c_dtype = dt;
    SK(hctx, smm_scaled_mm(hctx, &x));
    return c;
}

/* The expected rows of the last problem checked, kept for the next point
 * of the same problem. */
static struct {
    int64_t m, n, k;
    smm_dtype dt;
    std::vector<unsigned char> head, tail;
} expect;

/* One launch on copy 0 under the force in effect, compared with the host
 * context; returns the kernel that ran (0: none counted). */
static int check_point(const bufs &d, int64_t m, int64_t n, int64_t k, smm_dtype dt,
                       const std::vector<smm_packed_b *> *pb)
{
    const int64_t part = m <= 128 ? m : 64;
    const size_t es = dt == SMM_DTYPE_BF16 || dt == SMM_DTYPE_F16 ? 2 : 4;
    if (expect.m != m || expect.n != n || expect.k != k || expect.dt != dt) {
        expect.m = m, expect.n = n, expect.k = k, expect.dt = dt;
        expect.head = host_rows(d, 0, part, n, k, dt);
        expect.tail.clear();
        if (part < m)
            expect.tail = host_rows(d, m - part, part, n, k, dt);
    }
    smm_gpu_counts before, after;
    kernel_counts(&before);
    launch(d, m, n, k, dt, 0, pb);
    SK(gctx, smm_synchronize(gctx));
    kernel_counts(&after);
    int ran = 0;
    for (int i = 1; i < SMM_GPU_KERNEL_COUNT; i++)
        if (after.launches[i] != before.launches[i])
            ran = i;
    std::vector<unsigned char> got(expect.head.size());
    for (int part_i = 0; part_i < (part < m ? 2 : 1); part_i++) {
        const std::vector<unsigned char> &want = part_i ? expect.tail : expect.head;
        const int64_t r0 = part_i ? m - part : 0;
        SK(gctx, smm_memcpy(gctx, got.data(), (char *)d.c + (size_t)(r0 * n) * es, got.size(),
                            SMM_MEMCPY_DEVICE_TO_HOST));
        if (memcmp(got.data(), want.data(), got.size()) != 0) {
            size_t at = 0;
            while (got[at] == want[at])
                at++;
            fprintf(stderr, "gpu-tune: MISMATCH M %lld N %lld K %lld %s, kernel %s: element "
                    "(%lld, %lld) differs from the %s backend's\n",
                    (long long)m, (long long)n, (long long)k, smm_dtype_name(dt),
                    kernel_name(ran), (long long)(r0 + (int64_t)(at / es) / n),
                    (long long)((int64_t)(at / es) % n),
                    smm_backend_name(smm_context_backend(hctx)));
            failures++;
            break;
        }
    }
    return ran;
}

/* ---- timing ---- */

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Seconds per launch: `launches` launches (issue(l)) captured into a graph,
 * replayed once to warm up, then `reps` times, each timed with events. */
template <class F> static double graph_time(int launches, int reps, F issue)
{
    rt_graph g;
    rt_graph_exec ex;
    std::vector<double> t;
    issue(0), issue(1);
    SK(gctx, smm_synchronize(gctx));
    CK(RT(StreamBeginCapture)(stream, RT(StreamCaptureModeThreadLocal)));
    for (int l = 0; l < launches; l++)
        issue(l);
    CK(RT(StreamEndCapture)(stream, &g));
    CK(rt_instantiate(&ex, g));
    CK(RT(GraphLaunch)(ex, stream));
    CK(RT(StreamSynchronize)(stream));
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        CK(RT(EventRecord)(ev0, stream));
        CK(RT(GraphLaunch)(ex, stream));
        CK(RT(EventRecord)(ev1, stream));
        CK(RT(EventSynchronize)(ev1));
        CK(RT(EventElapsedTime)(&ms, ev0, ev1));
        t.push_back(ms * 1e-3 / launches);
    }
    CK(RT(GraphExecDestroy)(ex));
    CK(RT(GraphDestroy)(g));
    return median(t);
}

/* Stream launches, six rounds of `launches`, the first a warm-up: the
 * medians per launch of the host's queueing loop (*queue, host clock) and
 * of the whole round until the stream is done (*total, events). */
template <class F> static void stream_time(int launches, F issue, double *queue, double *total)
{
    std::vector<double> tq, tt;
    for (int r = 0; r < 6; r++) {
        float ms = 0;
        CK(RT(EventRecord)(ev0, stream));
        const auto t0 = std::chrono::steady_clock::now();
        for (int l = 0; l < launches; l++)
            issue(l);
        const auto t1 = std::chrono::steady_clock::now();
        CK(RT(EventRecord)(ev1, stream));
        CK(RT(EventSynchronize)(ev1));
        CK(RT(EventElapsedTime)(&ms, ev0, ev1));
        if (r == 0)
            continue;
        tq.push_back(std::chrono::duration<double>(t1 - t0).count() / launches);
        tt.push_back(ms * 1e-3 / launches);
    }
    *queue = median(tq), *total = median(tt);
}

/* The device's copy bandwidth, GB/s of bytes read + written: the median
 * of 10 device-to-device copies of `bytes` from buf to buf + bytes (after
 * two warm-up copies). */
static double copy_bandwidth(void *buf, size_t bytes)
{
    std::vector<double> t;
    for (int r = 0; r < 12; r++) {
        float ms_ = 0;
        CK(RT(EventRecord)(ev0, stream));
        SK(gctx, smm_memcpy(gctx, (char *)buf + bytes, buf, bytes, SMM_MEMCPY_DEVICE_TO_DEVICE));
        CK(RT(EventRecord)(ev1, stream));
        CK(RT(EventSynchronize)(ev1));
        CK(RT(EventElapsedTime)(&ms_, ev0, ev1));
        if (r >= 2)
            t.push_back(ms_ * 1e-3);
    }
    return 2.0 * (double)bytes / median(t) / 1e9;
}

/* The copy bandwidth measured on the weights' buffer of d (whose second
 * half the copy overwrites), then the weights put back from the host copy,
 * before any packing (with 405B, copy 0 is the whole buffer, and the
 * checks read copy 0). */
static double weights_bandwidth(const bufs &d)
{
    const double bw = copy_bandwidth(d.b, (size_t)(d.b_bytes / 2) & ~(size_t)4095);
    SK(gctx, smm_memcpy(gctx, d.b, d.hb.data(), d.hb.size(), SMM_MEMCPY_HOST_TO_DEVICE));
    return bw;
}

__global__ void empty_kernel(void)
{
}

/* ---- modes ---- */

static void run_bench(int kernel)
{
    const int64_t ms[] = {1, 16, 32, 2048, 4096, 8192};
    const int64_t max_b = (int64_t)384 << 20;
    rt_prop prop;
    int dev = 0;
    CK(RT(GetDevice)(&dev));
    CK(RT(GetDeviceProperties)(&prop, dev));
    printf("device: %s, %d.%d, %d SMs; kernel forced: %s\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, kernel_name(kernel));
    bufs d = bufs_alloc(8192, 28672, 14336, max_b);
    const size_t bytes = (size_t)8192 * 28672 * 2;
    printf("copy_bandwidth_GBps %.0f (read+write, %zu MB copied)\n",
           copy_bandwidth(d.c, bytes), bytes >> 20);
    const smm_gpu_force f = force_of(kernel, 0, 0, 0, 0);
    printf("%-6s %-6s %-6s %-5s %-11s %10s %9s %9s %9s %7s\n", "M", "N", "K", "out", "kernel",
           "us", "TOPS", "GB/s", "wGB/s", "copies");
    for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < 6; mi++)
            for (int di = 0; di < 2; di++) {
                const int64_t n = layers[s][0], k = layers[s][1], m = ms[mi];
                const smm_dtype dt = di == 0 ? SMM_DTYPE_BF16 : SMM_DTYPE_I32;
                const int copies = copies_of(d, n, k);
                const int launches = copies * (m >= 2048 ? 1 : m > 32 ? 4 : 24);
                fprintf(stderr, "gpu-tune: M %lld N %lld K %lld %s\n", (long long)m,
                        (long long)n, (long long)k, smm_dtype_name(dt));
                force_set(&f);
                const double sec = graph_time(launches, m >= 2048 ? 5 : 15, [&](int l) {
                    launch(d, m, n, k, dt, l % copies, NULL);
                });
                const int ran = check_point(d, m, n, k, dt, NULL);
                force_set(NULL);
                const double ops = 2.0 * (double)m * (double)n * (double)k;
                const double bytes = (double)m * k + (double)n * k +
                                     (double)m * n * (dt == SMM_DTYPE_I32 ? 4 : 2);
                printf("%-6lld %-6lld %-6lld %-5s %-11s %10.2f %9.1f %9.0f %9.0f %7d\n",
                       (long long)m, (long long)n, (long long)k, smm_dtype_name(dt),
                       kernel_name(ran), sec * 1e6, ops / sec / 1e12, bytes / sec / 1e9,
                       (double)(n * k) / sec / 1e9, copies);
                fflush(stdout);
            }
    bufs_free(d);
}

static void run_decode_sweep(void)
{
    /* kernel (-1: the empty kernel), groups, cluster, stages, pre, packed */
    struct col {
        const char *name;
        int kernel, groups, cluster, stages, pre, packed;
    };
    const int D = SMM_GPU_KERNEL_DECODE, T = SMM_GPU_KERNEL_DECODE_TMA;
    static const col cols[] = {
        {"0,0", 0, 0, 0, 0, 0, 0},   {"0,0p", 0, 0, 0, 0, 0, 1},  {"0,0r", D, 0, 0, 0, -1, 1},
        {"0,0s", D, 0, 0, 0, 1, 1},  {"1,1", D, 1, 1, 0, 0, 0},   {"2,1", D, 2, 1, 0, 0, 0},
        {"1,2", D, 1, 2, 0, 0, 0},   {"2,2", D, 2, 2, 0, 0, 0},   {"2,4", D, 2, 4, 0, 0, 0},
        {"1,1p", D, 1, 1, 0, -1, 1}, {"2,1p", D, 2, 1, 0, -1, 1}, {"1,2p", D, 1, 2, 0, -1, 1},
        {"2,2p", D, 2, 2, 0, -1, 1}, {"2,4p", D, 2, 4, 0, -1, 1}, {"t0,0", T, 0, 0, 0, 0, 0},
        {"t0,1", T, 0, 1, 0, 0, 0},  {"t0,2", T, 0, 2, 0, 0, 0},  {"t0,4", T, 0, 4, 0, 0, 0},
        {"t3,0", T, 0, 0, 3, 0, 0},  {"t4,0", T, 0, 0, 4, 0, 0},  {"t8,0", T, 0, 0, 8, 0, 0},
        {"t16,0", T, 0, 0, 16, 0, 0}, {"ring", SMM_GPU_KERNEL_DECODE_RING, 0, 0, 0, 0, 1},
        {"empty", -1, 0, 0, 0, 0, 0}};
    const int ncols = (int)(sizeof cols / sizeof cols[0]);
    const int64_t ms[] = {1, 16, 32};
    bufs d = bufs_alloc(32, 28672, 14336, (int64_t)384 << 20);
    printf("decode sweep, weight GB/s (bf16 out, CUDA-graph replays; empty: us per launch; "
           "-: the forced kernel did not run)\n%-3s %-6s %-6s", "M", "N", "K");
    for (int c = 0; c < ncols; c++)
        printf(" %6s", cols[c].name);
    printf("\n");
    for (int s = 0; s < 4; s++) {
        const int64_t n = layers[s][0], k = layers[s][1];
        const int copies = copies_of(d, n, k), launches = copies * 24;
        std::vector<smm_packed_b *> pb = pack_copies(d, n, k, copies);
        for (int mi = 0; mi < 3; mi++) {
            const int64_t m = ms[mi];
            fprintf(stderr, "gpu-tune: M %lld N %lld K %lld\n", (long long)m, (long long)n,
                    (long long)k);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int c = 0; c < ncols; c++) {
                const col &cl = cols[c];
                if (cl.kernel < 0) {
                    const unsigned nblk = (unsigned)((n + 15) / 16);
                    const double sec = graph_time(launches, 9, [&](int) {
                        empty_kernel<<<nblk, 256, 0, stream>>>();
                    });
                    printf(" %6.2f", sec * 1e6);
                    continue;
                }
                const smm_gpu_force f = force_of(cl.kernel, cl.groups, cl.cluster, cl.stages,
                                                 cl.pre);
                const std::vector<smm_packed_b *> *p = cl.packed ? &pb : NULL;
                force_set(&f);
                const double sec = graph_time(launches, 9, [&](int l) {
                    launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, p);
                });
                const int ran = check_point(d, m, n, k, SMM_DTYPE_BF16, p);
                force_set(NULL);
                if (cl.kernel != 0 && ran != cl.kernel)
                    printf(" %6s", "-");
                else
                    printf(" %6.0f", (double)(n * k) / sec / 1e9);
                fflush(stdout);
            }
            printf("\n");
        }
        unpack_copies(pb);
    }
    bufs_free(d);
}

static void run_launch_cost(bool packed, bool quick)
{
    const int64_t ms[] = {1, 2, 4, 8, 16, 24, 32};
    const int launches = 2000;
    bufs d = bufs_alloc(32, 28672, 14336, (int64_t)384 << 20);
    printf("launch cost, us per launch (queue: the host's loop of %d launches; total: until "
           "the stream is done), B %s, median of 5",
           launches, packed ? "packed" : "raw");
    if (quick)
        printf("; the automatic choice only\n%-3s %-6s %-6s %9s %9s\n", "M", "N", "K", "queue",
               "total");
    else
        printf("; _r: the decode kernel's register form; _m: the decode kernel; _g: the ring "
               "decode kernel; -: the forced kernel did not run\n"
               "%-3s %-6s %-6s %9s %9s %9s %9s %9s %9s\n",
               "M", "N", "K", "queue", "total", "queue_r", "total_r", "total_m", "total_g");
    const smm_gpu_force fs[4] = {force_of(0, 0, 0, 0, 0),
                                 force_of(SMM_GPU_KERNEL_DECODE, 0, 0, 0, -1),
                                 force_of(SMM_GPU_KERNEL_DECODE, 0, 0, 0, 0),
                                 force_of(SMM_GPU_KERNEL_DECODE_RING, 0, 0, 0, 0)};
    for (int s = 0; s < 4; s++) {
        const int64_t n = layers[s == 0 ? 1 : s == 1 ? 0 : s][0];
        const int64_t k = layers[s == 0 ? 1 : s == 1 ? 0 : s][1];
        const int copies = copies_of(d, n, k);
        std::vector<smm_packed_b *> pb;
        if (packed)
            pb = pack_copies(d, n, k, copies);
        const std::vector<smm_packed_b *> *p = packed ? &pb : NULL;
        for (int64_t m : ms) {
            if (quick && (m == 2 || m == 4))
                continue;
            fprintf(stderr, "gpu-tune: M %lld N %lld K %lld\n", (long long)m, (long long)n,
                    (long long)k);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int c = 0; c < (quick ? 1 : 4); c++) {
                double tq, tt;
                force_set(&fs[c]);
                stream_time(launches, [&](int l) {
                    launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, p);
                }, &tq, &tt);
                const int ran = check_point(d, m, n, k, SMM_DTYPE_BF16, p);
                force_set(NULL);
                const bool missed = c > 0 && ran != fs[c].kernel;
                if (c < 2 && missed)
                    printf(" %9s %9s", "-", "-");
                else if (c < 2)
                    printf(" %9.2f %9.2f", tq * 1e6, tt * 1e6);
                else if (missed)
                    printf(" %9s", "-");
                else
                    printf(" %9.2f", tt * 1e6);
            }
            printf("\n");
            fflush(stdout);
        }
        unpack_copies(pb);
    }
    bufs_free(d);
}

/* The decode layer's activations: up to 32 bf16 rows of max_k (hx, and its
 * device copy x), their int8 rows (q) and per-token scales (xs). */
struct layer_io {
    std::vector<uint16_t> hx;
    void *x, *q, *xs;
};

static layer_io layer_io_alloc(int64_t max_k)
{
    layer_io io;
    io.hx.resize((size_t)(32 * max_k));
    for (uint16_t &v : io.hx)
        v = smm_f32_to_bf16((float)((int64_t)(rng_next() % 20001) - 10000) / 2500.0f);
    SK(gctx, smm_malloc(gctx, io.hx.size() * 2, &io.x));
    SK(gctx, smm_malloc(gctx, io.hx.size(), &io.q));
    SK(gctx, smm_malloc(gctx, 32 * 4, &io.xs));
    SK(gctx, smm_memcpy(gctx, io.x, io.hx.data(), io.hx.size() * 2, SMM_MEMCPY_HOST_TO_DEVICE));
    return io;
}

static void layer_io_free(layer_io &io)
{
    smm_free(gctx, io.x), smm_free(gctx, io.q), smm_free(gctx, io.xs);
}

/* smm_linear of M rows of io on an N x K layer of d (b_packed left to the
 * caller): dynamic per-token, per-channel weight scales, bf16 out. */
static smm_linear_args layer_args(const layer_io &io, const bufs &d, int64_t m, int64_t n,
                                  int64_t k)
{
    smm_linear_args la;
    memset(&la, 0, sizeof la);
    la.m = m, la.n = n, la.k = k, la.x = io.x, la.x_dtype = SMM_DTYPE_BF16, la.ldx = k;
    la.mode = SMM_QUANT_DYNAMIC_PER_TOKEN, la.x_scale = (float *)io.xs;
    la.q = (int8_t *)io.q, la.ldq = k;
    la.scale_b = d.sb, la.scale_b_len = n;
    la.c = d.c, la.ldc = n, la.c_dtype = SMM_DTYPE_BF16;
    return la;
}

/* la (b_packed set) on gctx, then on the host context from io's and d's
 * host copies: the output, the int8 activations and the scales compared
 * bit for bit (a mismatch is reported as `form` and counted). */
static void layer_verify(const layer_io &io, const bufs &d, const smm_linear_args &la,
                         const char *form)
{
    const int64_t m = la.m, n = la.n, k = la.k;
    SK(gctx, smm_linear(gctx, &la));
    SK(gctx, smm_synchronize(gctx));
    std::vector<unsigned char> want_c((size_t)(m * n * 2)), got_c(want_c.size());
    std::vector<int8_t> want_q((size_t)(m * k)), got_q(want_q.size());
    std::vector<float> want_s((size_t)m), got_s((size_t)m);
    smm_linear_args h = la;
    h.x = io.hx.data(), h.x_scale = want_s.data(), h.q = want_q.data();
    h.b = d.hb.data(), h.ldb = k, h.b_packed = NULL, h.scale_b = d.hsb.data();
    h.c = want_c.data();
    SK(hctx, smm_linear(hctx, &h));
    SK(gctx, smm_memcpy(gctx, got_c.data(), d.c, got_c.size(), SMM_MEMCPY_DEVICE_TO_HOST));
    SK(gctx, smm_memcpy(gctx, got_q.data(), io.q, got_q.size(), SMM_MEMCPY_DEVICE_TO_HOST));
    SK(gctx, smm_memcpy(gctx, got_s.data(), io.xs, (size_t)m * 4, SMM_MEMCPY_DEVICE_TO_HOST));
    if (memcmp(got_c.data(), want_c.data(), got_c.size()) != 0 ||
        memcmp(got_q.data(), want_q.data(), got_q.size()) != 0 ||
        memcmp(got_s.data(), want_s.data(), (size_t)m * 4) != 0) {
        fprintf(stderr, "gpu-tune: MISMATCH smm_linear (%s) M %lld N %lld K %lld: output, int8 "
                        "activations or scales differ from the %s backend's\n",
                form, (long long)m, (long long)n, (long long)k,
                smm_backend_name(smm_context_backend(hctx)));
        failures++;
    }
}

/* --layer-cost: the decode layer as vLLM runs it against the GEMM alone.
 * layer: smm_linear (bf16 activations quantized per token, then the GEMM
 * with per-token x per-channel scales, bf16 out), as the library runs it
 * (two launches: the quantizer, then the GEMM); fused: forced to one
 * launch of the decode kernel that quantizes its tokens, wherever it can
 * run (M <= 4); mm: smm_scaled_mm on int8
 * activations. Packed B, weights rotating over >= 256 MiB. Each is timed
 * as stream launches back to back (stream_time's total) and as replays of
 * the same launches captured in a CUDA graph; us per launch and weight
 * bytes / time as % of the copy bandwidth. Every layer form's output, int8
 * activations and scales are checked against the host context's
 * smm_linear on weight copy 0. */
static void run_layer_cost(bool big)
{
    const int64_t ms[] = {1, 2, 4, 8, 16, 32};
    const int launches = 1000;
    const int64_t max_k = big ? 16384 : 14336;
    bufs d = bufs_alloc(32, 28672, max_k, big ? (int64_t)26624 * 16384 : (int64_t)384 << 20);
    const double bw = weights_bandwidth(d);
    layer_io io = layer_io_alloc(max_k);
    printf("layer cost (packed B, bf16 out; layer = smm_linear from bf16 activations, dynamic "
           "per-token, as the library runs it; fused = forced to one launch, M <= 4; mm = "
           "smm_scaled_mm alone); us per launch over %d launches, "
           "stream launches (_s) and CUDA-graph replays (_g), median of 5; %% of the copy "
           "bandwidth %.0f GB/s; ring = the layer with the ring decode kernel forced, 0: it "
           "did not run\n"
           "%-3s %-6s %-6s %7s %7s %7s %7s %7s %7s %6s %6s %6s %6s %6s %6s %s\n",
           launches, bw, "M", "N", "K", "mm_s", "mm_g", "lay_s", "lay_g", "fus_g", "ring_g",
           "%mm_s", "%mm_g", "%lay_s", "%lay_g", "%fus_g", "%ring_g", "layer ran");
    for (int s = 0; s < (big ? 8 : 4); s++) {
        const int64_t n = s < 4 ? layers[s][0] : l405[s - 4][0];
        const int64_t k = s < 4 ? layers[s][1] : l405[s - 4][1];
        const int copies = copies_of(d, n, k);
        std::vector<smm_packed_b *> pb = pack_copies(d, n, k, copies);
        for (int64_t m : ms) {
            fprintf(stderr, "gpu-tune: M %lld N %lld K %lld\n", (long long)m, (long long)n,
                    (long long)k);
            smm_linear_args la = layer_args(io, d, m, n, k);
            auto layer = [&](int l) {
                la.b_packed = pb[(size_t)(l % copies)];
                SK(gctx, smm_linear(gctx, &la));
            };
            auto mm = [&](int l) { launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, &pb); };
            /* the layer on copy 0 against the host context; returns
             * whether the fused kernel ran */
            auto verify = [&](const char *form) {
                smm_gpu_counts c0, c1;
                kernel_counts(&c0);
                la.b_packed = pb[0];
                layer_verify(io, d, la, form);
                kernel_counts(&c1);
                return c1.decode_fused != c0.decode_fused;
            };
            double t[6], tq;
            stream_time(launches, mm, &tq, &t[0]);
            t[1] = graph_time(launches, 5, mm);
            stream_time(launches, layer, &tq, &t[2]);
            t[3] = graph_time(launches, 5, layer);
            check_point(d, m, n, k, SMM_DTYPE_BF16, &pb);
            const bool auto_fused = verify("as run");
            smm_gpu_force f = force_of(0, 0, 0, 0, 0);
            f.fuse = 1;
            force_set(&f);
            const bool fused = verify("fused");
            t[4] = fused ? graph_time(launches, 5, layer) : 0.0;
            /* the ring decode kernel forced behind the quantizer */
            f = force_of(SMM_GPU_KERNEL_DECODE_RING, 0, 0, 0, 0);
            force_set(&f);
            smm_gpu_counts r0, r1;
            kernel_counts(&r0);
            verify("ring");
            kernel_counts(&r1);
            const bool ring = r1.launches[SMM_GPU_KERNEL_DECODE_RING] !=
                              r0.launches[SMM_GPU_KERNEL_DECODE_RING];
            t[5] = ring ? graph_time(launches, 5, layer) : 0.0;
            force_set(NULL);
            const double wb = (double)(n * k) / 1e9;
            auto pct = [&](double tt) { return tt > 0 ? 100 * wb / tt / bw : 0.0; };
            printf("%-3lld %-6lld %-6lld %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %6.1f %6.1f %6.1f "
                   "%6.1f %6.1f %6.1f %s\n",
                   (long long)m, (long long)n, (long long)k, t[0] * 1e6, t[1] * 1e6, t[2] * 1e6,
                   t[3] * 1e6, t[4] * 1e6, t[5] * 1e6, pct(t[0]), pct(t[1]), pct(t[2]),
                   pct(t[3]), pct(t[4]), pct(t[5]), auto_fused ? "fused" : "two");
            fflush(stdout);
        }
        unpack_copies(pb);
    }
    layer_io_free(io);
    bufs_free(d);
}

/* --layer-sweep: the decode layer's knobs behind the quantizer (8B
 * layers, M = 1, 4, 16, 32, packed B, bf16 out), each a graph of 1000
 * smm_linear launches, us per launch (median of 5 replays) and % of the
 * copy bandwidth: auto (as run; again last, auto2, for drift); ring: the
 * ring decode kernel forced, its weight slots before the wait chosen (r -
 * 2), then 4, 2, none (p4, p2, p0); q2, q4: as run, the quantizer with at
 * least 2 / 4 chunks per thread. Every form checked bitwise; "-": the
 * forced kernel did not run. */
static void run_layer_sweep(void)
{
    const int64_t ms[] = {1, 4, 16, 32};
    const int launches = 1000;
    struct form {
        const char *name;
        int kernel, ring_pre, q_chunks;
    };
    const form forms[] = {{"auto", 0, 0, 0},
                          {"ring", SMM_GPU_KERNEL_DECODE_RING, 0, 0},
                          {"ring_p4", SMM_GPU_KERNEL_DECODE_RING, 4, 0},
                          {"ring_p2", SMM_GPU_KERNEL_DECODE_RING, 2, 0},
                          {"ring_p0", SMM_GPU_KERNEL_DECODE_RING, -1, 0},
                          {"q2", 0, 0, 2},
                          {"q4", 0, 0, 4},
                          {"auto2", 0, 0, 0}};
    const int nf = (int)(sizeof forms / sizeof forms[0]);
    bufs d = bufs_alloc(32, 28672, 14336, (int64_t)384 << 20);
    const double bw = weights_bandwidth(d);
    layer_io io = layer_io_alloc(14336);
    printf("layer sweep (packed B, bf16 out, smm_linear from bf16 activations, dynamic "
           "per-token); us per launch, CUDA-graph replays of %d launches, median of 5; "
           "%% of the copy bandwidth %.0f GB/s in brackets\n%-3s %-6s %-6s",
           launches, bw, "M", "N", "K");
    for (int f = 0; f < nf; f++)
        printf(" %14s", forms[f].name);
    printf("\n");
    for (int s = 0; s < 4; s++) {
        const int64_t n = layers[s][0], k = layers[s][1];
        const int copies = copies_of(d, n, k);
        std::vector<smm_packed_b *> pb = pack_copies(d, n, k, copies);
        for (int64_t m : ms) {
            fprintf(stderr, "gpu-tune: sweep M %lld N %lld K %lld\n", (long long)m,
                    (long long)n, (long long)k);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            smm_linear_args la = layer_args(io, d, m, n, k);
            for (int f = 0; f < nf; f++) {
                smm_gpu_force fo = force_of(forms[f].kernel, 0, 0, 0, 0);
                fo.ring_pre = forms[f].ring_pre, fo.q_chunks = forms[f].q_chunks;
                force_set(&fo);
                smm_gpu_counts c0, c1;
                kernel_counts(&c0);
                la.b_packed = pb[0];
                layer_verify(io, d, la, forms[f].name);
                kernel_counts(&c1);
                if (forms[f].kernel &&
                    c1.launches[forms[f].kernel] == c0.launches[forms[f].kernel]) {
                    printf(" %14s", "-");
                } else {
                    const double t = graph_time(launches, 5, [&](int l) {
                        la.b_packed = pb[(size_t)(l % copies)];
                        SK(gctx, smm_linear(gctx, &la));
                    });
                    printf(" %6.2f (%5.1f)", t * 1e6, 100 * (double)(n * k) / 1e9 / t / bw);
                }
                force_set(NULL);
                fflush(stdout);
            }
            printf("\n");
        }
        unpack_copies(pb);
    }
    layer_io_free(io);
    bufs_free(d);
}

/* --layer-trace: where a decode layer's time goes, from a trace build of
 * the plugin (lib/rocm/trace.h: per block, the global timer at its start,
 * after its wait, after its products and at its end). For the 8B qkv, o
 * and down layers at M = 1, 16, 32: a CUDA graph of one launch per weight
 * copy (packed B, bf16 out), of the GEMM alone (mm) and of the layer
 * (smm_linear: the quantizer, then the GEMM), replayed twice, the second
 * replay traced. Per launch k after the first two, times in us from the
 * end of launch k - 1's last GEMM block, medians over the launches:
 * q_wait / q_end: the quantizer's first block past its wait, its last
 * block's end; g_in: the GEMM's first / median / last block start; g_wait:
 * its first / last block past the wait; g_prod: its median / last block
 * past its products; g_end: its last block's end, the launch's period. */
static void run_layer_trace(void)
{
    if (!trace_take || trace_take(NULL, 0) < 0) {
        fprintf(stderr, "gpu-tune: --layer-trace needs a plugin built with -DSMM_GPU_TRACE "
                        "(lib/rocm/trace.h)\n");
        exit(2);
    }
    const int64_t ms[] = {1, 16, 32};
    const int ls[] = {0, 1, 3};
    const int max_rec = 1 << 16;
    std::vector<unsigned long long> rec((size_t)max_rec * SMM_TRACE_WORDS);
    bufs d = bufs_alloc(32, 28672, 14336, (int64_t)384 << 20);
    layer_io io = layer_io_alloc(14336);
    printf("layer trace (trace build: each block's exit delayed by one atomic); us from the end "
           "of the previous launch's GEMM, medians over the launches of a traced graph "
           "replay\n%-6s %-5s %-3s %-6s %-6s %6s %6s %20s %13s %13s %6s %s\n",
           "form", "layer", "M", "N", "K", "q_wait", "q_end", "g_in min/med/max",
           "g_wait min/max", "g_prod med/max", "g_end", "GEMM blocks");
    for (int li : ls) {
        const int64_t n = layers[li][0], k = layers[li][1];
        const char *lname = li == 0 ? "qkv" : li == 1 ? "o" : li == 2 ? "gate_up" : "down";
        const int copies = copies_of(d, n, k);
        std::vector<smm_packed_b *> pb = pack_copies(d, n, k, copies);
        for (int64_t m : ms)
            for (int form = 0; form < 2; form++) {
                fprintf(stderr, "gpu-tune: trace %s M %lld N %lld K %lld\n",
                        form ? "layer" : "mm", (long long)m, (long long)n, (long long)k);
                smm_linear_args la = layer_args(io, d, m, n, k);
                auto issue = [&](int l) {
                    if (form) {
                        la.b_packed = pb[(size_t)(l % copies)];
                        SK(gctx, smm_linear(gctx, &la));
                    } else {
                        launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, &pb);
                    }
                };
                rt_graph g;
                rt_graph_exec ex;
                issue(0);
                SK(gctx, smm_synchronize(gctx));
                CK(RT(StreamBeginCapture)(stream, RT(StreamCaptureModeThreadLocal)));
                for (int l = 0; l < copies; l++)
                    issue(l);
                CK(RT(StreamEndCapture)(stream, &g));
                CK(rt_instantiate(&ex, g));
                CK(RT(GraphLaunch)(ex, stream));
                CK(RT(StreamSynchronize)(stream));
                if (trace_take(rec.data(), max_rec) < 0)
                    exit(1);
                CK(RT(GraphLaunch)(ex, stream));
                CK(RT(StreamSynchronize)(stream));
                const int nr = trace_take(rec.data(), max_rec);
                CK(RT(GraphExecDestroy)(ex));
                CK(RT(GraphDestroy)(g));
                if (nr < 0 || nr >= max_rec) {
                    fprintf(stderr, "gpu-tune: trace: %d records\n", nr);
                    exit(1);
                }
                /* GEMM launches by tag (each copy once), in the order
                 * their last blocks ended; quantizer launches by the
                 * order of their blocks' waits (they run one at a time) */
                struct launch_rec {
                    std::vector<double> start, wait, prod, end;
                };
                std::vector<std::pair<unsigned long long, launch_rec>> gl;
                std::vector<std::pair<double, double>> qw; /* wait, end */
                double t0 = 1e300;
                for (int i = 0; i < nr; i++)
                    t0 = std::min(t0, (double)rec[(size_t)i * SMM_TRACE_WORDS + 2]);
                for (int i = 0; i < nr; i++) {
                    const unsigned long long *r = &rec[(size_t)i * SMM_TRACE_WORDS];
                    const int kind = (int)(r[0] & 0xff);
                    if (kind == SMM_TRACE_QUANT) {
                        qw.push_back({(double)r[3] - t0, (double)r[5] - t0});
                        continue;
                    }
                    size_t j = 0;
                    while (j < gl.size() && gl[j].first != r[1])
                        j++;
                    if (j == gl.size())
                        gl.push_back({r[1], launch_rec()});
                    gl[j].second.start.push_back((double)r[2] - t0);
                    gl[j].second.wait.push_back((double)r[3] - t0);
                    gl[j].second.prod.push_back((double)r[4] - t0);
                    gl[j].second.end.push_back((double)r[5] - t0);
                }
                auto mx = [](const std::vector<double> &v) {
                    return *std::max_element(v.begin(), v.end());
                };
                auto mn = [](const std::vector<double> &v) {
                    return *std::min_element(v.begin(), v.end());
                };
                std::sort(gl.begin(), gl.end(), [&](const auto &a, const auto &b) {
                    return mx(a.second.end) < mx(b.second.end);
                });
                std::sort(qw.begin(), qw.end());
                std::vector<std::pair<double, double>> ql; /* per launch: first wait, last end */
                for (size_t i = 0; i < qw.size(); i++) {
                    if (ql.empty() || qw[i].first > ql.back().second)
                        ql.push_back(qw[i]);
                    else
                        ql.back().second = std::max(ql.back().second, qw[i].second);
                }
                const bool have_q = form == 1 && ql.size() == gl.size();
                if ((int)gl.size() != copies || (form == 1 && !have_q))
                    fprintf(stderr, "gpu-tune: trace: %zu GEMM launches, %zu quantizer "
                                    "launches, %d expected\n",
                            gl.size(), ql.size(), copies);
                std::vector<double> c[10];
                size_t blocks = 0;
                for (size_t l = 2; l < gl.size(); l++) {
                    const double e0 = mx(gl[l - 1].second.end);
                    const launch_rec &r = gl[l].second;
                    blocks = r.start.size();
                    c[0].push_back(have_q ? ql[l].first - e0 : 0);
                    c[1].push_back(have_q ? ql[l].second - e0 : 0);
                    c[2].push_back(mn(r.start) - e0);
                    c[3].push_back(median(r.start) - e0);
                    c[4].push_back(mx(r.start) - e0);
                    c[5].push_back(mn(r.wait) - e0);
                    c[6].push_back(mx(r.wait) - e0);
                    c[7].push_back(median(r.prod) - e0);
                    c[8].push_back(mx(r.prod) - e0);
                    c[9].push_back(mx(r.end) - e0);
                }
                if (c[0].empty())
                    continue;
                double v[10];
                for (int i = 0; i < 10; i++)
                    v[i] = median(c[i]) * 1e-3;
                printf("%-6s %-5s %-3lld %-6lld %-6lld %6.2f %6.2f %6.2f/%6.2f/%6.2f %6.2f/%6.2f "
                       "%6.2f/%6.2f %6.2f %zu\n",
                       form ? "layer" : "mm", lname, (long long)m, (long long)n, (long long)k,
                       v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], blocks);
                fflush(stdout);
            }
        unpack_copies(pb);
    }
    layer_io_free(io);
    bufs_free(d);
}

static void run_ring_sweep(bool big)
{
    const int splits[] = {1, 2, 3, 4}, slots[] = {4, 6, 8};
    const int64_t ms[] = {1, 2, 4, 8, 16, 32};
    const int launches = 500, ncol = 2 + 4 * 3;
    bufs d = bufs_alloc(32, 28672, big ? 16384 : 14336,
                        big ? (int64_t)26624 * 16384 : (int64_t)384 << 20);
    printf("ring sweep (%s layers), us per launch (CUDA-graph replays of %d launches, packed "
           "B, bf16 out, median of 5); columns: the automatic choice, the mma.sync decode "
           "kernel (its own plan), then s<cluster blocks>r<slots>; -: the forced kernel did "
           "not run\n%-3s %-6s %-6s %7s %7s",
           big ? "Llama-3.1-405B TP=4" : "Llama-3.1-8B", launches, "M", "N", "K", "auto", "dec");
    for (int c = 2; c < ncol; c++)
        printf("   s%dr%d", splits[(c - 2) / 3], slots[(c - 2) % 3]);
    printf("\n");
    for (int s = 0; s < 4; s++) {
        const int64_t n = big ? l405[s][0] : layers[s][0], k = big ? l405[s][1] : layers[s][1];
        const int copies = copies_of(d, n, k);
        std::vector<smm_packed_b *> pb = pack_copies(d, n, k, copies);
        for (int64_t m : ms) {
            fprintf(stderr, "gpu-tune: M %lld N %lld K %lld\n", (long long)m, (long long)n,
                    (long long)k);
            printf("%-3lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            for (int c = 0; c < ncol; c++) {
                const int want = c == 0   ? 0
                                 : c == 1 ? SMM_GPU_KERNEL_DECODE
                                          : SMM_GPU_KERNEL_DECODE_RING;
                const smm_gpu_force f =
                    c < 2 ? force_of(want, 0, 0, 0, 0)
                          : force_of(want, 0, splits[(c - 2) / 3], slots[(c - 2) % 3], 0);
                force_set(&f);
                const double tt = graph_time(launches, 5, [&](int l) {
                    launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, &pb);
                });
                const int ran = check_point(d, m, n, k, SMM_DTYPE_BF16, &pb);
                force_set(NULL);
                if (c > 0 && ran != want)
                    printf(" %7s", "-");
                else
                    printf(" %7.2f", tt * 1e6);
                fflush(stdout);
            }
            printf("\n");
        }
        unpack_copies(pb);
    }
    bufs_free(d);
}

static void run_decode_one(int64_t m, int64_t n, int64_t k, int kernel, int tile)
{
    bufs d = bufs_alloc(m, n, k, n * k);
    smm_gpu_force f = force_of(kernel, 0, 0, 0, 0);
    f.tile = tile;
    force_set(&f);
    for (int l = 0; l < 20; l++)
        launch(d, m, n, k, SMM_DTYPE_BF16, 0, NULL);
    const int ran = check_point(d, m, n, k, SMM_DTYPE_BF16, NULL);
    force_set(NULL);
    printf("M %lld N %lld K %lld: 21 launches of %s (forced: %s)\n", (long long)m,
           (long long)n, (long long)k, kernel_name(ran), kernel_name(kernel));
    bufs_free(d);
}

/* The large-M kernels side by side: M = 64 .. 8192 on the four
 * layers (big: and the Llama-3.1-405B TP=4 ones), bf16 out, per-token x
 * per-channel scales, weights rotating over >= 256 MiB; the TMA kernel,
 * its ping-pong forms (64 x 256 warpgroup tiles, 4 stages; 128 x 128, 5
 * and 6), the mma.sync tiled kernel and the automatic choice, in turn,
 * three rounds of graph replays each (median); TOPS and the forms'
 * ratios. Every form's point checked. */
static void run_large_sweep(bool big)
{
    const int64_t ms[] = {64, 256, 1024, 2048, 4096, 8192};
    struct form {
        const char *name;
        int kernel, stages, tile;
    } forms[] = {{"tma", SMM_GPU_KERNEL_TMA, 0, 0},      {"pp4", SMM_GPU_KERNEL_TMA_PP, 4, 1},
                 {"sq5", SMM_GPU_KERNEL_TMA_PP, 5, 2},   {"sq6", SMM_GPU_KERNEL_TMA_PP, 6, 2},
                 {"mma", SMM_GPU_KERNEL_MMA, 0, 0},      {"auto", SMM_GPU_KERNEL_AUTO, 0, 0}};
    const int nf = 6;
    const int64_t max_k = big ? 16384 : 14336;
    bufs d = bufs_alloc(8192, 28672, max_k, big ? (int64_t)26624 * 16384 : (int64_t)384 << 20);
    printf("large M (bf16 out, per-token x per-channel): TOPS, graph replays, median of 3 "
           "rounds\n%-5s %-6s %-6s", "M", "N", "K");
    for (int f = 0; f < nf; f++)
        printf(" %8s", forms[f].name);
    printf(" %7s %7s %7s %7s %s\n", "pp4/tma", "sq5/pp4", "sq6/pp4", "pp4/mma", "auto ran");
    double lsum[3] = {0, 0, 0}, ssum[2] = {0, 0};
    int lcount = 0, nm = 0;
    for (int s = 0; s < (big ? 8 : 4); s++) {
        const int64_t n = s < 4 ? layers[s][0] : l405[s - 4][0];
        const int64_t k = s < 4 ? layers[s][1] : l405[s - 4][1];
        const int copies = copies_of(d, n, k);
        for (int64_t m : ms) {
            fprintf(stderr, "gpu-tune: M %lld N %lld K %lld\n", (long long)m, (long long)n,
                    (long long)k);
            std::vector<double> t[6];
            int ran[6] = {0, 0, 0, 0, 0, 0};
            for (int round = 0; round < 3; round++)
                for (int f = 0; f < nf; f++) {
                    smm_gpu_force fo = force_of(forms[f].kernel, 0, 0, forms[f].stages, 0);
                    fo.tile = forms[f].tile;
                    force_set(&fo);
                    t[f].push_back(graph_time(copies * (m >= 2048 ? 1 : 4), 3, [&](int l) {
                        launch(d, m, n, k, SMM_DTYPE_BF16, l % copies, NULL);
                    }));
                    if (round == 0)
                        ran[f] = check_point(d, m, n, k, SMM_DTYPE_BF16, NULL);
                    force_set(NULL);
                }
            const double ops = 2.0 * (double)m * (double)n * (double)k;
            double tops[6];
            printf("%-5lld %-6lld %-6lld", (long long)m, (long long)n, (long long)k);
            nm++;
            for (int f = 0; f < nf; f++) {
                tops[f] = ops / median(t[f]) / 1e12;
                if (forms[f].kernel && ran[f] != forms[f].kernel)
                    printf(" %8s", "-");
                else
                    printf(" %8.1f", tops[f]);
            }
            printf(" %7.3f %7.3f %7.3f %7.3f %s\n", tops[1] / tops[0], tops[2] / tops[1],
                   tops[3] / tops[1], tops[1] / tops[4], kernel_name(ran[5]));
            if (m >= 2048) {
                lsum[0] += log(tops[1] / tops[0]), lsum[1] += log(tops[2] / tops[1]);
                ssum[0] += log(tops[3] / tops[1]);
                lcount++;
            } else {
                lsum[2] += log(tops[1] / tops[4]), ssum[1] += log(tops[3] / tops[1]);
            }
            fflush(stdout);
        }
    }
    printf("geomean at M >= 2048 (%d points): pp4/tma %.3f, sq5/pp4 %.3f, sq6/pp4 %.3f; at M < "
           "2048 (%d points): pp4/mma %.3f, sq6/pp4 %.3f\n",
           lcount, exp(lsum[0] / lcount), exp(lsum[1] / lcount), exp(ssum[0] / lcount),
           nm - lcount, exp(lsum[2] / (nm - lcount)), exp(ssum[1] / (nm - lcount)));
    bufs_free(d);
}

/* ---- main ---- */

static int usage(const char *why)
{
    fprintf(stderr, "gpu-tune: %s\nusage: gpu-tune [--ref] [--kernel NAME | --decode-sweep | "
            "--launch-cost [raw] [quick] | --layer-cost [405b] | --layer-sweep | --layer-trace | "
            "--ring-sweep [405b] | "
            "--large-sweep [405b] | --decode-one M N K [KERNEL [TILE]]]\n",
            why);
    return 2;
}

/* A positive size argument, digits only. */
static int64_t size_arg(const char *s)
{
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && s[0] >= '0' && s[0] <= '9' && v > 0 &&
                   v <= (1 << 20)
               ? (int64_t)v
               : -1;
}

int main(int argc, char **argv)
{
    enum { BENCH, SWEEP, COST, LAYER, LSWEEP, TRACE, RING, ONE, LARGE } mode = BENCH;
    const char *kernel_arg = NULL;
    bool raw = false, quick = false, ref = false, big = false;
    int64_t one[3] = {0, 0, 0};
    int one_tile = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--ref"))
            ref = true;
        else if (!strcmp(a, "--kernel") && i + 1 < argc && mode == BENCH)
            kernel_arg = argv[++i];
        else if (!strcmp(a, "--decode-sweep"))
            mode = SWEEP;
        else if (!strcmp(a, "--ring-sweep"))
            mode = RING;
        else if (!strcmp(a, "--launch-cost"))
            mode = COST;
        else if (mode == COST && !strcmp(a, "raw"))
            raw = true;
        else if (mode == COST && !strcmp(a, "quick"))
            quick = true;
        else if (!strcmp(a, "--layer-cost"))
            mode = LAYER;
        else if (!strcmp(a, "--layer-sweep"))
            mode = LSWEEP;
        else if (!strcmp(a, "--layer-trace"))
            mode = TRACE;
        else if ((mode == LAYER || mode == LARGE || mode == RING) && !strcmp(a, "405b"))
            big = true;
        else if (!strcmp(a, "--large-sweep"))
            mode = LARGE;
        else if (!strcmp(a, "--decode-one") && i + 3 < argc) {
            mode = ONE;
            for (int j = 0; j < 3; j++)
                if ((one[j] = size_arg(argv[++i])) < 0)
                    return usage("--decode-one: M, N and K are positive integers");
            if (one[0] > 32768 || one[1] * one[2] > ((int64_t)1 << 32))
                return usage("--decode-one: M at most 32768, N K at most 2^32");
            if (i + 1 < argc && argv[i + 1][0] != '-')
                kernel_arg = argv[++i];
            if (kernel_arg && i + 1 < argc && argv[i + 1][0] >= '1' && argv[i + 1][0] <= '2' &&
                argv[i + 1][1] == '\0')
                one_tile = argv[++i][0] - '0';
        } else
            return usage(a);
    }
    if (kernel_arg && mode != BENCH && mode != ONE)
        return usage("--kernel goes with the default mode");

    uint64_t seed;
    const char *s = getenv("SMM_TEST_SEED");
    if (s && *s) {
        const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
        if (errno != 0 || end == s || *end != '\0' || s[0] < '0' || s[0] > '9') {
            fprintf(stderr, "SMM_TEST_SEED=\"%s\": not a decimal or 0x-hex 64-bit number\n", s);
            return 2;
        }
        seed = v;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
               ((uint64_t)getpid() << 40);
    }
    rng_state = seed ? seed : 1;

    const char *why = NULL;
    if (!smm_backend_available(GPU_BACKEND, &why)) {
        fprintf(stderr, "gpu-tune: no GPU: the %s backend cannot run here: %s\n",
                smm_backend_name(GPU_BACKEND), why ? why : "");
        return 2;
    }
    smm_backend host = ref || !smm_backend_available(SMM_BACKEND_CPU, NULL)
                           ? SMM_BACKEND_REFERENCE
                           : SMM_BACKEND_CPU;
    if (smm_context_create(&gctx, GPU_BACKEND) != SMM_OK ||
        smm_context_create(&hctx, host) != SMM_OK) {
        fprintf(stderr, "gpu-tune: cannot create the %s and %s contexts\n",
                smm_backend_name(GPU_BACKEND), smm_backend_name(host));
        return 2;
    }
    load_force_interface();
    int kernel = 0;
    if (kernel_arg && (kernel = kernel_of_name(kernel_arg)) < 0)
        return usage("unknown kernel name");
    CK(RT(StreamCreateWithFlags)(&stream, RT(StreamNonBlocking)));
    CK(RT(EventCreate)(&ev0));
    CK(RT(EventCreate)(&ev1));
    SK(gctx, smm_context_set_stream(gctx, stream));
    printf("seed 0x%016llx (replay with SMM_TEST_SEED=0x%016llx); checked against %s\n",
           (unsigned long long)seed, (unsigned long long)seed, smm_backend_name(host));
    if (getenv("SMM_GPU_GEMM_KERNEL"))
        printf("SMM_GPU_GEMM_KERNEL=%s\n", getenv("SMM_GPU_GEMM_KERNEL"));
    fflush(stdout);

    switch (mode) {
    case BENCH: run_bench(kernel); break;
    case SWEEP: run_decode_sweep(); break;
    case COST: run_launch_cost(!raw, quick); break;
    case LAYER: run_layer_cost(big); break;
    case LSWEEP: run_layer_sweep(); break;
    case TRACE: run_layer_trace(); break;
    case RING: run_ring_sweep(big); break;
    case ONE: run_decode_one(one[0], one[1], one[2], kernel, one_tile); break;
    case LARGE: run_large_sweep(big); break;
    }
    SK(gctx, smm_synchronize(gctx));
    smm_context_destroy(gctx);
    smm_context_destroy(hctx);
    printf("checked points: %s\n", failures ? "MISMATCHES (see stderr)" : "all bit-exact");
    return failures ? 1 : 0;
}
