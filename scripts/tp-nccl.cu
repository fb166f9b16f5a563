/*
 * tp-nccl.cu - tensor parallelism without losing a bit, over NCCL (RCCL on
 * ROCm): one process drives T GPUs (ncclCommInitAll) and runs one w8a8
 * layer (M x K activations, N x K weights, per-token and per-channel
 * scales, bias, bfloat16 output) three ways:
 *   - TP = 1: smm_scaled_mm on GPU 0, the bits to match;
 *   - row parallel (o_proj, down_proj): rank r holds the K-slice r of A
 *     and B, computes its int32 accumulators (smm_gemm_s8s8s32), the
 *     accumulators are all-reduced as uint32 with SUM (wrapping, exact),
 *     and each rank applies smm_scaled_epilogue once: equal to TP = 1 bit
 *     for bit. The usual way, each rank's bfloat16 epilogue output (bias
 *     on rank 0) all-reduced in bfloat16, is counted where it differs;
 *   - column parallel (q/k/v, gate/up): rank r holds rows N-slice r of B,
 *     computes its columns of C with smm_scaled_mm: equal to the same
 *     columns of TP = 1 (no reduction at all).
 * Then it times the int32 all-reduce of M x N against a bfloat16
 * all-reduce of the same M x N. Asymmetric activations (azp) need the
 * column sums of B too: all-reduce the ranks' column sums of their
 * K-slices the same way, once per weight at load time
 * (doc/tensor-parallel.md).
 *
 * Build (from the repository root, after ./setup.sh with --with-cuda in
 * build-cuda, and pip's nvidia-nccl-cu12 wheel for NCCL):
 *   NCCL=$(python3 -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])')
 *   nvcc -O2 -std=c++17 -o tp-nccl scripts/tp-nccl.cu -Iinclude -I$NCCL/include \
 *        -Lbuild-cuda/lib/.libs -lscaledmm -L$NCCL/lib -l:libnccl.so.2 \
 *        -Xlinker -rpath,$PWD/build-cuda/lib/.libs -Xlinker -rpath,$NCCL/lib
 *   SMM_GPU_PLUGIN_DIR=$PWD/build-cuda/lib ./tp-nccl 2      # or 4: the ranks
 * On ROCm: hipcc -x hip -O2 -o tp-nccl scripts/tp-nccl.cu -Iinclude
 *   -Lbuild-rocm/lib/.libs -lscaledmm -lrccl (SMM_GPU_PLUGIN_DIR=build-rocm/lib).
 * Usage: tp-nccl [T [M N K]]  (defaults: every GPU, 256 4096 14336).
 * Exit status 0 when both recipes equal TP = 1 bit for bit.
 */
#include <scaledmm.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <rccl/rccl.h>
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaStream_t hipStream_t
#define cudaStreamCreate hipStreamCreate
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamDestroy hipStreamDestroy
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventDestroy hipEventDestroy
#define cudaGetErrorString hipGetErrorString
#define cudaSuccess hipSuccess
#define cudaError_t hipError_t
#define SMM_GPU SMM_BACKEND_ROCM
#else
#include <cuda_runtime.h>
#include <nccl.h>
#define SMM_GPU SMM_BACKEND_CUDA
#endif

#define CK_RT(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                    \
                    cudaGetErrorString(e_));                                              \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)
#define CK_NCCL(x)                                                                        \
    do {                                                                                  \
        ncclResult_t r_ = (x);                                                            \
        if (r_ != ncclSuccess) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                    \
                    ncclGetErrorString(r_));                                              \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)
#define CK_SMM(ctx, x)                                                                    \
    do {                                                                                  \
        smm_status s_ = (x);                                                              \
        if (s_ != SMM_OK) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #x,                \
                    smm_strerror(s_), smm_context_last_error(ctx));                       \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* A device copy of n bytes of host memory, on the calling thread's device. */
static void *up(smm_context *ctx, const void *h, size_t n)
{
    void *d = NULL;
    CK_SMM(ctx, smm_malloc(ctx, n, &d));
    CK_SMM(ctx, smm_memcpy(ctx, d, h, n, SMM_MEMCPY_HOST_TO_DEVICE));
    return d;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    CK_RT(cudaGetDeviceCount(&ndev));
    const int T = argc > 1 ? atoi(argv[1]) : ndev;
    const int64_t M = argc > 4 ? atoll(argv[2]) : 256, N = argc > 4 ? atoll(argv[3]) : 4096,
                  K = argc > 4 ? atoll(argv[4]) : 14336;
    if (T < 1 || T > ndev || M < 1 || N < T || K < T) {
        fprintf(stderr, "usage: %s [T [M N K]]: T from 1 to %d GPUs, N and K >= T\n", argv[0],
                ndev);
        return 2;
    }
    printf("tp-nccl: T = %d GPUs, M %lld N %lld K %lld, bf16 output, per-token and "
           "per-channel scales, bias\n", T, (long long)M, (long long)N, (long long)K);

    /* The layer, on the host. */
    std::vector<int8_t> a((size_t)(M * K)), b((size_t)(N * K));
    std::vector<float> sa((size_t)M), sb((size_t)N), bias((size_t)N);
    for (auto &v : a) v = (int8_t)rnd();
    for (auto &v : b) v = (int8_t)rnd();
    for (auto &v : sa) v = (float)(1 + rnd() % 1000) / 4096.0f;
    for (auto &v : sb) v = (float)(1 + rnd() % 1000) / 65536.0f;
    for (auto &v : bias) v = (float)((int)(rnd() % 2001) - 1000) / 64.0f;
    const size_t cbytes = (size_t)(M * N) * 2, abytes = (size_t)(M * N) * 4;

    std::vector<smm_context *> ctx(T);
    std::vector<cudaStream_t> stream(T);
    std::vector<ncclComm_t> comm(T);
    std::vector<int> devs(T);
    for (int r = 0; r < T; r++) {
        devs[r] = r;
        CK_RT(cudaSetDevice(r));
        CK_RT(cudaStreamCreate(&stream[r]));
        if (smm_context_create(&ctx[r], SMM_GPU) != SMM_OK) {
            const char *why = "";
            smm_backend_available(SMM_GPU, &why);
            fprintf(stderr, "tp-nccl: no %s context: %s\n", smm_backend_name(SMM_GPU), why);
            return 2;
        }
        CK_SMM(ctx[r], smm_context_set_stream(ctx[r], stream[r]));
    }
    CK_NCCL(ncclCommInitAll(comm.data(), T, devs.data()));

    /* Every rank's copy of A, B, the scales and bias (each rank reads
     * only its slice; whole copies keep the example short). */
    std::vector<int8_t *> da(T), db(T);
    std::vector<float *> dsa(T), dsb(T), dbias(T);
    std::vector<int32_t *> dacc(T);
    std::vector<uint16_t *> dc(T), dnaive(T);
    for (int r = 0; r < T; r++) {
        CK_RT(cudaSetDevice(r));
        da[r] = (int8_t *)up(ctx[r], a.data(), a.size());
        db[r] = (int8_t *)up(ctx[r], b.data(), b.size());
        dsa[r] = (float *)up(ctx[r], sa.data(), sa.size() * 4);
        dsb[r] = (float *)up(ctx[r], sb.data(), sb.size() * 4);
        dbias[r] = (float *)up(ctx[r], bias.data(), bias.size() * 4);
        CK_SMM(ctx[r], smm_malloc(ctx[r], abytes, (void **)&dacc[r]));
        CK_SMM(ctx[r], smm_malloc(ctx[r], cbytes, (void **)&dc[r]));
        CK_SMM(ctx[r], smm_malloc(ctx[r], cbytes, (void **)&dnaive[r]));
    }

    /* TP = 1 on GPU 0. */
    std::vector<uint16_t> want((size_t)(M * N)), got((size_t)(M * N)), naive((size_t)(M * N));
    CK_RT(cudaSetDevice(0));
    smm_scaled_mm_args full = {};
    full.m = M; full.n = N; full.k = K;
    full.a = da[0]; full.lda = K; full.b = db[0]; full.ldb = K;
    full.scale_a = dsa[0]; full.scale_a_len = M; full.scale_b = dsb[0]; full.scale_b_len = N;
    full.bias = dbias[0]; full.c = dc[0]; full.ldc = N; full.c_dtype = SMM_DTYPE_BF16;
    CK_SMM(ctx[0], smm_scaled_mm(ctx[0], &full));
    CK_SMM(ctx[0], smm_memcpy(ctx[0], want.data(), dc[0], cbytes, SMM_MEMCPY_DEVICE_TO_HOST));

    /* Row parallel: K-slices, int32 partial sums, all-reduce, one epilogue. */
    for (int r = 0; r < T; r++) {
        const int64_t k0 = K * r / T, k1 = K * (r + 1) / T;
        CK_RT(cudaSetDevice(r));
        CK_SMM(ctx[r], smm_gemm_s8s8s32(ctx[r], M, N, k1 - k0, da[r] + k0, K, db[r] + k0, K,
                                        dacc[r], N));
        /* The usual way, for comparison: the epilogue on each rank. */
        smm_scaled_mm_args p = full;
        p.k = k1 - k0;
        p.a = da[r] + k0; p.b = db[r] + k0;
        p.scale_a = dsa[r]; p.scale_b = dsb[r];
        p.bias = r == 0 ? dbias[r] : NULL;
        p.c = dnaive[r];
        CK_SMM(ctx[r], smm_scaled_mm(ctx[r], &p));
    }
    CK_NCCL(ncclGroupStart());
    for (int r = 0; r < T; r++) {
        /* uint32: wrapping addition, the same bits as int32 modulo 2^32 */
        CK_NCCL(ncclAllReduce(dacc[r], dacc[r], (size_t)(M * N), ncclUint32, ncclSum, comm[r],
                              stream[r]));
        CK_NCCL(ncclAllReduce(dnaive[r], dnaive[r], (size_t)(M * N), ncclBfloat16, ncclSum,
                              comm[r], stream[r]));
    }
    CK_NCCL(ncclGroupEnd());
    int row_ok = 1;
    long naive_diff = 0;
    for (int r = 0; r < T; r++) {
        CK_RT(cudaSetDevice(r));
        smm_epilogue_args e = {};
        e.m = M; e.n = N; e.acc = dacc[r]; e.ldacc = N;
        e.scale_a = dsa[r]; e.scale_a_len = M; e.scale_b = dsb[r]; e.scale_b_len = N;
        e.bias = dbias[r]; e.c = dc[r]; e.ldc = N; e.c_dtype = SMM_DTYPE_BF16;
        CK_SMM(ctx[r], smm_scaled_epilogue(ctx[r], &e));
        CK_SMM(ctx[r], smm_memcpy(ctx[r], got.data(), dc[r], cbytes, SMM_MEMCPY_DEVICE_TO_HOST));
        CK_SMM(ctx[r], smm_memcpy(ctx[r], naive.data(), dnaive[r], cbytes,
                                  SMM_MEMCPY_DEVICE_TO_HOST));
        row_ok &= memcmp(got.data(), want.data(), cbytes) == 0;
        if (r == 0)
            for (size_t i = 0; i < want.size(); i++)
                naive_diff += naive[i] != want[i];
    }
    printf("row parallel: int32 all-reduce + one epilogue %s TP = 1 bit for bit on every rank\n",
           row_ok ? "EQUALS" : "DIFFERS FROM");
    printf("row parallel: bf16 all-reduce of the ranks' outputs: %ld of %lld outputs differ "
           "from TP = 1\n", naive_diff, (long long)(M * N));

    /* Column parallel: N-slices of B, each rank its columns of C. */
    int col_ok = 1;
    for (int r = 0; r < T; r++) {
        const int64_t n0 = N * r / T, n1 = N * (r + 1) / T, ns = n1 - n0;
        CK_RT(cudaSetDevice(r));
        smm_scaled_mm_args p = full;
        p.n = ns;
        p.a = da[r]; p.b = db[r] + n0 * K;
        p.scale_a = dsa[r]; p.scale_b = dsb[r] + n0; p.scale_b_len = ns;
        p.bias = dbias[r] + n0; p.c = dc[r]; p.ldc = ns;
        CK_SMM(ctx[r], smm_scaled_mm(ctx[r], &p));
        std::vector<uint16_t> part((size_t)(M * ns));
        CK_SMM(ctx[r], smm_memcpy(ctx[r], part.data(), dc[r], part.size() * 2,
                                  SMM_MEMCPY_DEVICE_TO_HOST));
        for (int64_t i = 0; i < M; i++)
            col_ok &= memcmp(part.data() + i * ns, want.data() + i * N + n0, (size_t)ns * 2) == 0;
    }
    printf("column parallel: every rank's columns %s TP = 1 bit for bit\n",
           col_ok ? "EQUAL" : "DIFFER FROM");

    /* Time the all-reduce of M x N: int32 (4 bytes) against bf16 (2). */
    const int iters = 20;
    for (int pass = 0; pass < 2; pass++) {
        const int i32 = pass == 0;
        std::vector<cudaEvent_t> t0(T), t1(T);
        for (int r = 0; r < T; r++) {
            CK_RT(cudaSetDevice(r));
            CK_RT(cudaEventCreate(&t0[r]));
            CK_RT(cudaEventCreate(&t1[r]));
        }
        for (int it = -3; it < iters; it++) {   /* 3 warm-up runs */
            if (it == 0)
                for (int r = 0; r < T; r++) {
                    CK_RT(cudaSetDevice(r));
                    CK_RT(cudaEventRecord(t0[r], stream[r]));
                }
            CK_NCCL(ncclGroupStart());
            for (int r = 0; r < T; r++)
                CK_NCCL(ncclAllReduce(i32 ? (void *)dacc[r] : (void *)dnaive[r],
                                      i32 ? (void *)dacc[r] : (void *)dnaive[r], (size_t)(M * N),
                                      i32 ? ncclUint32 : ncclBfloat16, ncclSum, comm[r],
                                      stream[r]));
            CK_NCCL(ncclGroupEnd());
        }
        float worst = 0.0f;
        for (int r = 0; r < T; r++) {
            CK_RT(cudaSetDevice(r));
            CK_RT(cudaEventRecord(t1[r], stream[r]));
            CK_RT(cudaEventSynchronize(t1[r]));
            float ms = 0.0f;
            CK_RT(cudaEventElapsedTime(&ms, t0[r], t1[r]));
            worst = ms > worst ? ms : worst;
            CK_RT(cudaEventDestroy(t0[r]));
            CK_RT(cudaEventDestroy(t1[r]));
        }
        printf("all-reduce of %lld x %lld %s (%.1f MiB): %.1f us per call (slowest rank, mean "
               "of %d)\n", (long long)M, (long long)N, i32 ? "int32" : "bf16 ",
               (double)(M * N) * (i32 ? 4 : 2) / 1048576.0, 1000.0 * worst / iters, iters);
    }

    for (int r = 0; r < T; r++) {
        CK_RT(cudaSetDevice(r));
        void *bufs[8] = {da[r], db[r], dsa[r], dsb[r], dbias[r], dacc[r], dc[r], dnaive[r]};
        for (void *p : bufs)
            smm_free(ctx[r], p);
        smm_context_destroy(ctx[r]);
        ncclCommDestroy(comm[r]);
        CK_RT(cudaStreamDestroy(stream[r]));
    }
    return row_ok && col_ok ? 0 : 1;
}
