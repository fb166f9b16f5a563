/*
 * gemm.hip - the GPU GEMM kernels and their launcher smm_gpu_launch_mm
 * (kernels.h): C = epilogue(A * B^T) or the raw int32 accumulators, for one
 * smm_mm_problem with device pointers (A: M x K int8 row-major, lda; B:
 * N x K int8 row-major, ldb; C: M x N, ldc; all in elements).
 *
 * The numbers are the numerics contract's (doc/numerics.md), bit for bit:
 * the int32 sums wrap modulo 2^32 (integer tensor-core / matrix-core and
 * dot-product instructions accumulate without saturation; every partial
 * sum here is int32 or uint32, so the grouping of the sum does not change
 * a bit), and the float epilogue is epilogue.h's, done once per element
 * after the whole sum.
 *
 * Kernels (one source for AMD and NVIDIA, see gpu_compat.h):
 *   generic_kernel   any GPU: 64 x 64 tile, bytes staged through shared
 *                    memory with guarded loads, 4-byte dot products (dp4a on
 *                    NVIDIA sm_61+, sdot4 on AMD GPUs that have it, plain
 *                    multiply-adds elsewhere). Every shape and stride.
 *   mma_kernel       NVIDIA sm_80+: mma.sync m16n8k32 s8 (inline PTX),
 *                    BM x BN block tile, K step 64, 8 warps, cp.async
 *                    multi-stage pipeline, ldmatrix from XOR-swizzled shared
 *                    memory; rows that are not 16-byte aligned are loaded
 *                    with guarded byte loads instead of cp.async.
 *   tma_kernel       NVIDIA sm_90a (H100/H200) code objects, large M, rows
 *                    16-byte aligned: persistent, warp-specialized; one
 *                    producer thread fills 4 stages of 128 x 128-byte A and
 *                    256 x 128-byte B tiles with tensor copies (TMA, 128-byte
 *                    swizzle, zeros past the edges; the tensor maps are
 *                    encoded on the host through the runtime's driver entry
 *                    point), two consumer warpgroups run m64n256k32 wgmmas
 *                    on a 128 x 256 tile; mbarrier hand-over; the epilogue
 *                    goes through shared memory, 16 x 32 slices per warp,
 *                    finished 4 elements per lane with 8 / 16-byte stores.
 *                    Falls back to wgmma_kernel when a tensor map cannot be
 *                    made.
 *   wgmma_kernel     NVIDIA sm_90a (H100/H200) code objects, large M:
 *                    128 x 256 tile, two warpgroups of
 *                    wgmma.mma_async m64n256k32 s8 reading both operands
 *                    from 64-byte-swizzled shared memory (the same layout
 *                    as mma_kernel's), 5 cp.async stages. Built only when
 *                    the sm_90a target is compiled; otherwise mma_kernel.
 *   decode_kernel    NVIDIA sm_80+, M <= 32 (token generation): B is the
 *                    16-row mma operand and the tokens the 8-column one, so
 *                    every weight byte is read once, with 16-byte loads
 *                    straight into the mma fragments; the warps of a block
 *                    split K and add their int32 partial sums in shared
 *                    memory before the epilogue. On sm_90+ it is launched
 *                    with programmatic dependent launch and waits for the
 *                    previous kernel in its first instruction; with a
 *                    packed B (K <= 8192) it first loads its first weights,
 *                    and lets the next kernel launch right after its wait
 *                    (at M <= 8 with SM room for another block, and at
 *                    M = 9..32 with two row groups and at most three
 *                    blocks for every two SMs: it lets the next launch
 *                    start at once and first copies up to 72 KiB (64 KiB)
 *                    of its weights into shared memory).
 *   decode_tma_kernel NVIDIA sm_90a code objects, 16 < M <= 32 where the
 *                    ring kernel does not run (a raw B: M = 17..24; M =
 *                    25..32 under 24 MiB), with many
 *                    64-row blocks per SM (N >= 3 x 64 x SMs): a producer
 *                    warp fills shared-memory stages with tensor copies of
 *                    64 weight rows and the padded tokens, a warpgroup runs
 *                    m64nNk32 wgmmas (weights as the 64-row operand, tokens
 *                    as the N = 8, 16 or 32 one); clusters split K.
 *   decode_ring_kernel NVIDIA sm_90a code objects, where it was faster
 *                    than the kernels above or no slower: with a packed B
 *                    at M >= 4, and at M = 1..3 on layers of 48 MiB and
 *                    more; with a raw B at M = 9..16 on layers of 48 MiB
 *                    and at M = 25..32 on layers of 24 MiB, and more: all
 *                    128 threads copy 64 weight rows and the tokens with
 *                    cp.async into a shared-memory ring of up to eight
 *                    256-byte slots of K that m64nNk32 wgmmas read (N = 8,
 *                    16 or 32); clusters split K. At N = 32 the outputs
 *                    go through shared memory and out in 16-byte pieces
 *                    of C's rows.
 *   amd_kernel       AMD: 128 x 128 tile through shared memory, multiplied
 *                    with v_mfma_i32_32x32x16_i8 (gfx940-942),
 *                    v_mfma_i32_32x32x8i8 (gfx908, gfx90a) using the lane
 *                    maps of mfma_layout.h, or sdot4 / plain code on other
 *                    AMD GPUs (chosen by the __gfx*__ macros when the code
 *                    object is compiled).
 *
 * The column sums of B needed with an activation zero point are computed by
 * the same kernels from the B tiles they already hold (int32, wrapping).
 *
 * Testing aids: SMM_GPU_GEMM_KERNEL=generic in the environment (read once
 * per process) runs every problem on generic_kernel; =mma keeps large
 * problems on mma_kernel instead of tma_kernel / wgmma_kernel; =wgmma
 * keeps them on wgmma_kernel instead of tma_kernel; both keep M <= 32 on
 * decode_kernel. SMM_GPU_PDL=0 launches the decode kernels without
 * programmatic dependent launch (below).
 * scripts/gpu-gemm-selftest.cu tests and times these kernels on NVIDIA.
 */
#include "kernels.h"
#include "epilogue.h"
#include "mfma_layout.h"

#if defined(SMM_GPU_NVIDIA)
#include <cudaTypedefs.h> /* CUtensorMap, PFN_cuTensorMapEncodeTiled (no -lcuda) */
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Shared helpers                                                      */
/* ------------------------------------------------------------------ */

/* c + the four byte products of a and b (signed), modulo 2^32. */
SMM_DEV int32_t smm_dot4(int32_t a, int32_t b, int32_t c)
{
#if defined(SMM_GPU_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#elif defined(SMM_GPU_AMD) &&                                                          \
    (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) ||              \
     defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) ||              \
     defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) ||           \
     defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) ||           \
     defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__))
    return __builtin_amdgcn_sdot4(a, b, c, false); /* no clamp: wraps */
#else
    uint32_t s = (uint32_t)c;
    int i;
    for (i = 0; i < 4; i++)
        s += (uint32_t)((int32_t)(int8_t)(a >> (8 * i)) * (int32_t)(int8_t)(b >> (8 * i)));
    return (int32_t)s;
#endif
}

/* The 4 bytes at p (k .. k+3 of a row whose valid length is `len` bytes
 * from p's row start, i.e. bytes at k + i >= len read as 0). `al4`: the
 * address is 4-byte aligned. */
SMM_DEV int32_t smm_load4(const int8_t *p, int64_t k, int64_t len, bool al4)
{
    if (al4 && k + 4 <= len)
        return *(const int32_t *)p;
    {
        uint32_t v = 0;
        int i;
        for (i = 0; i < 4; i++)
            if (k + i < len)
                v |= (uint32_t)(uint8_t)p[i] << (8 * i);
        return (int32_t)v;
    }
}

/* ------------------------------------------------------------------ */
/* Generic kernel: every GPU, every shape and stride                   */
/* ------------------------------------------------------------------ */

#define SMM_GEN_BM 64
#define SMM_GEN_BN 64
#define SMM_GEN_BKW 8 /* K step in 4-byte words (32 bytes) */

struct smm_mm_dims {
    const int8_t *a;
    const int8_t *b;
    int64_t m, n, k, lda, ldb;
    int pdl; /* decode kernel: launched with programmatic stream serialization */
    /* Decode kernel: B is a packed B, which no kernel writes; and with it,
     * the chunk steps per warp copied into shared memory before the wait
     * (0: the first U steps into registers). Two 16-bit fields where one
     * int was: the kernels' parameter block keeps its size. */
    int16_t b_static, pre;
};

__global__ void __launch_bounds__(256)
smm_generic_kernel(smm_mm_dims d, smm_epi_params e, int mtiles, int al4)
{
    __shared__ int32_t as[SMM_GEN_BKW][SMM_GEN_BM];
    __shared__ int32_t bs[SMM_GEN_BKW][SMM_GEN_BN];
    __shared__ int32_t cs[SMM_GEN_BN];
    const int tid = SMM_TID_X, tx = tid % 16, ty = tid / 16;
    const int64_t bm = (int64_t)(SMM_BID_X % mtiles) * SMM_GEN_BM;
    const int64_t bn = (int64_t)(SMM_BID_X / mtiles) * SMM_GEN_BN;
    int32_t acc[4][4];
    int32_t colsum = 0; /* threads 0..63: column bn + tid */

#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0;

    for (int64_t k0 = 0; k0 < d.k; k0 += 4 * SMM_GEN_BKW) {
        /* 64 rows x 8 words of A and of B; 2 words of each per thread.
         * Rows past the matrix read as zeros. */
#pragma unroll
        for (int it = 0; it < SMM_GEN_BM * SMM_GEN_BKW / 256; it++) {
            const int w = tid + 256 * it;
            const int r = w % SMM_GEN_BM, kw = w / SMM_GEN_BM;
            const int64_t kk = k0 + 4 * kw;
            int32_t va = 0, vb = 0;
            if (bm + r < d.m)
                va = smm_load4(d.a + (bm + r) * d.lda + kk, kk, d.k, al4 != 0);
            if (bn + r < d.n)
                vb = smm_load4(d.b + (bn + r) * d.ldb + kk, kk, d.k, al4 != 0);
            as[kw][r] = va;
            bs[kw][r] = vb;
        }
        SMM_SYNCTHREADS();
#pragma unroll
        for (int w = 0; w < SMM_GEN_BKW; w++) {
            int32_t av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                av[i] = as[w][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++)
                bv[j] = bs[w][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = smm_dot4(av[i], bv[j], acc[i][j]);
        }
        if (e.azp != NULL && tid < SMM_GEN_BN)
#pragma unroll
            for (int w = 0; w < SMM_GEN_BKW; w++)
                colsum = smm_dot4(bs[w][tid], 0x01010101, colsum);
        SMM_SYNCTHREADS();
    }
    if (tid < SMM_GEN_BN)
        cs[tid] = colsum;
    SMM_SYNCTHREADS();

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = bm + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = bn + tx + 16 * j;
            if (m < d.m && n < d.n)
                smm_epi_store(e, m, n, acc[i][j], cs[tx + 16 * j]);
        }
    }
}

/* ------------------------------------------------------------------ */
/* NVIDIA sm_80+: mma.sync m16n8k32 tiled kernel                        */
/* ------------------------------------------------------------------ */

#if defined(SMM_GPU_NVIDIA)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SMM_HAVE_MMA 1
#endif

SMM_DEV uint32_t smm_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

SMM_DEV void smm_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
#endif
}

SMM_DEV void smm_cp_async_commit()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> SMM_DEV void smm_cp_async_wait()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

SMM_DEV void smm_ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                             uint32_t &r3)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
#endif
}

/* d += a(16x32, row) * b(32x8, col), int32 wrapping (no .satfinite). */
SMM_DEV void smm_mma_16832(int32_t *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                           uint32_t b0, uint32_t b1)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* 16 bytes of a row at byte k (row length len), zero past len; unaligned
 * addresses are fine (byte loads). */
SMM_DEV uint4 smm_load16_guarded(const int8_t *p, int64_t k, int64_t len)
{
    uint32_t w[4] = {0, 0, 0, 0};
    int i;
    for (i = 0; i < 16; i++)
        if (k + i < len)
            w[i / 4] |= (uint32_t)(uint8_t)p[i] << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Byte offset of 16-byte chunk c (0..3) of row r in a 64-byte-row tile:
 * the chunk index is XORed with (r / 2) % 4 so that the 8 rows an ldmatrix
 * phase reads fall in 8 different bank groups. */
SMM_DEV uint32_t smm_swz(int r, int c)
{
    return (uint32_t)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
}

/*
 * Block tile BM x BN, warps WARPS_M x WARPS_N (8 in all), warp tile
 * (BM / WARPS_M) x (BN / WARPS_N) made of 16 x 8 mma tiles, K step 64
 * bytes, STAGES shared-memory stages. ASYNC: A and B rows are 16-byte
 * aligned (cp.async); else guarded byte loads. Tiles are numbered along
 * blockIdx.x in groups of 8 block rows (for L2 reuse of B).
 */
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, bool ASYNC>
__global__ void __launch_bounds__(WARPS_M *WARPS_N * 32)
smm_mma_kernel(smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_MMA)
    constexpr int THREADS = WARPS_M * WARPS_N * 32;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    constexpr int MT = WTM / 16, NT = WTN / 8;
    constexpr int STAGE_BYTES = (BM + BN) * 64;
    constexpr int GROUP_M = 8;
    extern __shared__ __align__(128) unsigned char smem[];
    int32_t *cs = (int32_t *)(smem + STAGES * STAGE_BYTES); /* BN column sums */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

    /* Grouped raster order over the (mtiles x ntiles) tiles. */
    const int t = blockIdx.x;
    const int in_group = GROUP_M * ntiles;
    const int first_m = (t / in_group) * GROUP_M;
    const int group_rows = min(mtiles - first_m, GROUP_M);
    const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
    const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;

    const int ktiles = (int)((d.k + 63) / 64);
    const uint32_t smem_base = smm_smem_addr(smem);
    const bool azp = e.azp != NULL;

    int32_t acc[MT][NT][4];
    int32_t colsum = 0; /* thread tid < BN: column bn + tid */

#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = 0;

    /* Queue the loads of k-tile kt into stage s. */
    auto load_tile = [&](int s, int kt) {
        const uint32_t sa = smem_base + s * STAGE_BYTES;
        const uint32_t sb = sa + BM * 64;
        unsigned char *pa = smem + s * STAGE_BYTES;
        unsigned char *pb = pa + BM * 64;
        const int64_t k0 = (int64_t)kt * 64;
#pragma unroll
        for (int it = 0; it < BM * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bm + r, kk = k0 + c * 16;
            const bool ok = row < d.m && kk < d.k;
            const int8_t *src = ok ? d.a + row * d.lda + kk : d.a;
            if (ASYNC) {
                const int bytes = ok ? (int)min((int64_t)16, d.k - kk) : 0;
                smm_cp_async16(sa + smm_swz(r, c), src, bytes);
            } else {
                *(uint4 *)(pa + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int it = 0; it < BN * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bn + r, kk = k0 + c * 16;
            const bool ok = row < d.n && kk < d.k;
            const int8_t *src = ok ? d.b + row * d.ldb + kk : d.b;
            if (ASYNC) {
                const int bytes = ok ? (int)min((int64_t)16, d.k - kk) : 0;
                smm_cp_async16(sb + smm_swz(r, c), src, bytes);
            } else {
                *(uint4 *)(pb + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
            }
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < ktiles)
            load_tile(s, s);
        smm_cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; kt++) {
        smm_cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int next = kt + STAGES - 1;
            if (next < ktiles)
                load_tile(next % STAGES, next);
            smm_cp_async_commit();
        }
        const int s = kt % STAGES;
        const uint32_t sa = smem_base + s * STAGE_BYTES;
        const uint32_t sb = sa + BM * 64;

#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            uint32_t af[MT][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = warp_m * WTM + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int c = kk * 2 + (lane >> 4);
                smm_ldmatrix_x4(sa + smm_swz(r, c), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                const int r = warp_n * WTN + j * 8 + (lane & 7) + (lane >> 4) * 8;
                const int c = kk * 2 + ((lane >> 3) & 1);
                smm_ldmatrix_x4(sb + smm_swz(r, c), bf[j][0], bf[j][1], bf[j + 1][0],
                                bf[j + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    smm_mma_16832(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0],
                                  bf[j][1]);
        }
        if (azp && tid < BN) {
            /* Row tid of the B tile: its 4 chunks, in any order. */
            const unsigned char *pb = smem + s * STAGE_BYTES + BM * 64 + tid * 64;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const uint4 v = *(const uint4 *)(pb + c * 16);
                colsum = __dp4a((int)v.x, 0x01010101, colsum);
                colsum = __dp4a((int)v.y, 0x01010101, colsum);
                colsum = __dp4a((int)v.z, 0x01010101, colsum);
                colsum = __dp4a((int)v.w, 0x01010101, colsum);
            }
        }
    }
    smm_cp_async_wait<0>();
    if (azp) {
        if (tid < BN)
            cs[tid] = colsum;
        __syncthreads();
    }

    /* Epilogue: accumulator (i, j) of lane (g, q) holds rows g and g + 8,
     * columns 2q and 2q + 1 of its 16 x 8 tile. */
    {
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int i = 0; i < MT; i++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t m = bm + warp_m * WTM + i * 16 + g + h * 8;
                if (m >= d.m)
                    continue;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const int cl = warp_n * WTN + j * 8 + 2 * q;
                    const int64_t n = bn + cl;
                    const int32_t c0 = azp ? cs[cl] : 0, c1 = azp ? cs[cl + 1] : 0;
                    if (n + 1 < d.n)
                        smm_epi_store2(e, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1], c0, c1);
                    else if (n < d.n)
                        smm_epi_store(e, m, n, acc[i][j][2 * h], c0);
                }
            }
        }
    }
#endif
}

/* ------------------------------------------------------------------ */
/* NVIDIA sm_80+: decode kernel (M <= 32)                               */
/* ------------------------------------------------------------------ */

SMM_DEV uint4 smm_ld_stream16(const int8_t *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

SMM_DEV uint4 smm_ld_cached16(const int8_t *p)
{
    return __ldg((const uint4 *)p);
}

#define SMM_DEC_WARPS 8
/* The decode kernel's shared-memory form (BS 2): bytes per chunk step of
 * a block's warps and row group; at most 9 steps with one row group (72
 * KiB: three blocks fit an SM), 4 with two (64 KiB: on an H200, two blocks
 * per SM and a larger L1 for the tokens; 1, 2 and 5 to 8 were slower). */
#define SMM_DEC_PRE_STEP (2 * 512 * SMM_DEC_WARPS)
#define SMM_DEC_PRE_MAX 9
#define SMM_DEC_PRE_MAX2 4

/* Loads in flight per thread and K step: enough 16-byte loads to cover the
 * memory latency, within about 96 registers of loaded data (two steps for
 * TG = G = 2, which would otherwise spill within 128 registers). */
template <int TG, int G> struct smm_dec_unroll {
    static const int v = 8 * G + 4 * TG <= 24 && !(TG == 2 && G == 2) ? 4 : 2;
};

/* Blocks per SM the register allocation must allow (__launch_bounds__):
 * left to itself, ptxas gave TG = G = 2 162 registers on sm_90 (and
 * TG = 4, G = 2 128 or 130, depending on small changes elsewhere): above
 * 128, one block of 256 threads fits an SM, and an H200 read the weights
 * 20% (qkv, N = 6144, M = 16) to 50% (M = 32, at 130) slower than with two.
 * Three for the smallest variant (80 registers); one for the G = 4
 * variants, which would spill within 128 and run only when forced. */
template <int TG, int G> struct smm_dec_minblocks {
    static const int v = G == 4 ? 1 : (TG == 1 && G == 1 ? 3 : 2);
};

/* Waits for this thread's cp.async copies; a compiler barrier for the
 * shared-memory reads after it. */
SMM_DEV void smm_cp_async_wait_all()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

SMM_DEV unsigned smm_cluster_rank()
{
    unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
    return r;
}

SMM_DEV void smm_cluster_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

SMM_DEV void smm_cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

/* The address of the same shared variable in block `rank` of the cluster. */
SMM_DEV int32_t *smm_cluster_map(int32_t *p, unsigned rank)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t out;
    asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"((uint64_t)p), "r"(rank));
    return (int32_t *)out;
#else
    (void)rank;
    return p;
#endif
}

/*
 * One block (or one cluster of S blocks, sm_90+): 16 * G consecutive rows
 * of B (output columns n0 .. n0 + 16 G - 1) for all M <= 8 * TG tokens.
 * Lane (g, q) of a warp reads 16 bytes of B rows n0 + 16 j + g and
 * n0 + 16 j + g + 8 (j < G) and 16 bytes of token rows 8 * t + g, each at
 * byte 64 * chunk + 16 * q; two m16n8k32 mmas per (j, t) consume them (the
 * 64 k of a chunk are fed to the instruction in a permuted order, the same
 * for both operands, which leaves the integer sum unchanged). Each token
 * fragment is loaded once and used for the G row groups, so the token rows
 * are read 16 G times less often than the weights. Warp w of cluster block
 * r takes chunks r * 8 + w, r * 8 + w + 8 S, ...; a K tail shorter than a
 * chunk is read with guarded byte loads. The warps (and the blocks of a
 * cluster) add their int32 partial sums with integer atomics in shared
 * memory (in block 0's through distributed shared memory), which is exact
 * in any order modulo 2^32, and block 0 finishes the elements. Rows past N
 * or M are clamped to the last row (read, never stored). Needs 16-byte
 * aligned rows of A and B. BS: 0, B may be written by the kernel ahead in
 * the stream; 1 or 2, B is a packed B (below).
 */
template <int TG, int G, int S, int BS>
__global__ void __launch_bounds__(SMM_DEC_WARPS * 32, (smm_dec_minblocks<TG, G>::v))
smm_decode_kernel(smm_mm_dims d, smm_epi_params e)
{
#if defined(SMM_HAVE_MMA)
    static_assert(BS != 2 || (S == 1 && (G == 1 || G == 2)),
                  "the shared-memory form: one or two row groups, no cluster");
    const int U = smm_dec_unroll<TG, G>::v;
    const bool BSTATIC = BS != 0;
    const int NR = G * TG * 4 * 32; /* accumulator words of the block tile */
    __shared__ int32_t red[NR + G * 16];
    int32_t *const csred = red + NR; /* column sums: [G][16] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * 16 * G;
    const bool azp = e.azp != NULL;

    /* BS 1 and 2 (d.b_static): B is a packed B, complete before smm_pack_b
     * returned and never written by a kernel, so the kernel ahead in the
     * stream cannot be writing it: some weights are read before the wait
     * below, and the shared sums zeroed, while that kernel may still be
     * running. BS 1: the warp's first U steps, into registers. BS 2: its
     * first d.pre steps, copied into shared memory with cp.async (which
     * holds no registers); the launcher takes it for one token and row
     * group when the grid leaves each SM room for a block of the next
     * launch, and for two row groups when the grid is at most three
     * blocks for every two SMs and two fit an SM. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The next programmatically launched kernel in the stream may launch
     * now: its blocks take SM slots as this kernel's blocks exit (or at
     * once where there is room) and, if it is a decode kernel with B
     * static, load their first weights while this one finishes; it still
     * waits for this grid to complete before it reads anything this grid
     * writes. BS 2, and BS 1 with one row group and no cluster, let it
     * launch here, at the start; BS 1 otherwise after the wait below.
     * Measured on an H200 for BS 1 (stream launches, B static, weights
     * rotating over 256 MiB; three runs on two machines): at the start
     * rather than after the wait, o (N = K = 4096) M = 16 6.92-6.95 ->
     * 6.53-6.59 us per launch, qkv (N = 6144) M = 1 7.72 -> 7.46-7.47,
     * gate_up (N = 28672) M = 1 and 16 within 0.3%; replayed from a CUDA
     * graph, the same points -0.2% to +1.3%; two row groups in clusters
     * of two (o M = 32) no different. */
    const bool trigger_at_start = BS == 2 || (BS == 1 && G == 1 && S == 1);
    if (trigger_at_start)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* Lane (g, q)'s bytes of B row n0 + 16 j + 8 h + g (clamped to N). */
    auto wrow = [&](int j, int h) {
        return d.b + min(n0 + 16 * j + 8 * h + g, d.n - 1) * d.ldb + q * 16;
    };
    /* The warp's first chunk and the chunk count are written out here, not
     * shared with the main loop's c, full and CS: computed before the wait,
     * those changed the plain kernel's code (it spilled). */
    uint4 u0[U][G][2];
    const bool have_u =
        BS == 1 && (int64_t)rank * SMM_DEC_WARPS + warp + (U - 1) * S * SMM_DEC_WARPS < d.k / 64;
    if (have_u) {
        const int64_t c0 = (int64_t)rank * SMM_DEC_WARPS + warp;
#pragma unroll
        for (int s = 0; s < U; s++)
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    u0[s][j][h] =
                        smm_ld_stream16(wrow(j, h) + (c0 + s * S * SMM_DEC_WARPS) * 64);
    }
    /* BS 2: [warp][step][j][h][lane]; each lane reads back only the
     * 16-byte pieces it copied itself. */
    extern __shared__ uint4 smm_dec_pre[];
    int npre = 0;
    if (BS == 2) {
        const int64_t c0 = (int64_t)rank * SMM_DEC_WARPS + warp;
        const int64_t nch =
            c0 < d.k / 64 ? (d.k / 64 - 1 - c0) / (S * SMM_DEC_WARPS) + 1 : 0;
        uint4 *const pw = smm_dec_pre + (size_t)warp * d.pre * G * 2 * 32 + lane;
        npre = (int)min((int64_t)d.pre, nch);
        for (int s = 0; s < npre; s++)
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    smm_cp_async16(smm_smem_addr(pw + ((s * G + j) * 2 + h) * 32),
                                   wrow(j, h) + (c0 + s * S * SMM_DEC_WARPS) * 64, 16);
        smm_cp_async_commit();
    }
    if (BSTATIC)
        for (int i = tid; i < NR + G * 16; i += SMM_DEC_WARPS * 32)
            red[i] = 0;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Launched with programmatic stream serialization (d.pdl), the kernel
     * may start while the one ahead of it in the stream is finishing: it
     * waits here for that grid to complete and its memory to be visible
     * before it touches global memory (but a static B, above). Without a
     * prerequisite grid this returns at once. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    /* BS 1 with two or more row groups or a cluster lets the next launch
     * start here (the others did at their start, above). */
    if (BS == 1 && !trigger_at_start)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    if (!BSTATIC)
        for (int i = tid; i < NR + G * 16; i += SMM_DEC_WARPS * 32)
            red[i] = 0;
    if (S > 1)
        smm_cluster_arrive(); /* waited for before the adds into block 0 */
    else
        __syncthreads();

    const int8_t *w[G][2];
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            w[j][h] = wrow(j, h);
    const int8_t *x[TG];
#pragma unroll
    for (int t = 0; t < TG; t++)
        x[t] = d.a + min((int64_t)(8 * t + g), d.m - 1) * d.lda + q * 16;

    int32_t acc[G][TG][4];
    int32_t cs[G][2];
#pragma unroll
    for (int j = 0; j < G; j++) {
        cs[j][0] = cs[j][1] = 0;
#pragma unroll
        for (int t = 0; t < TG; t++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[j][t][r] = 0;
    }

    auto consume = [&](const uint4 (&u)[G][2], const uint4 (&xs)[TG]) {
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int t = 0; t < TG; t++) {
                smm_mma_16832(acc[j][t], u[j][0].x, u[j][1].x, u[j][0].y, u[j][1].y, xs[t].x,
                              xs[t].y);
                smm_mma_16832(acc[j][t], u[j][0].z, u[j][1].z, u[j][0].w, u[j][1].w, xs[t].z,
                              xs[t].w);
            }
        if (azp) {
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    cs[j][h] = __dp4a((int)u[j][h].x, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].y, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].z, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].w, 0x01010101, cs[j][h]);
                }
        }
    };

    const int64_t full = d.k / 64; /* whole 64-byte chunks */
    const int CS = S * SMM_DEC_WARPS;  /* chunk stride of one warp */
    int64_t c = (int64_t)rank * SMM_DEC_WARPS + warp;
    if (have_u) {
        uint4 xs[U][TG];
#pragma unroll
        for (int s = 0; s < U; s++)
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[s][t] = smm_ld_cached16(x[t] + (c + s * CS) * 64);
#pragma unroll
        for (int s = 0; s < U; s++)
            consume(u0[s], xs[s]);
        c += U * CS;
    }
    if (BS == 2) {
        /* The steps in shared memory, U at a time (their tokens loaded
         * together), then the rest as below. */
        const uint4 *const pw = smm_dec_pre + (size_t)warp * d.pre * G * 2 * 32 + lane;
        auto wsm = [&](int s, uint4 (&u)[G][2]) {
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    u[j][h] = pw[((s * G + j) * 2 + h) * 32];
        };
        smm_cp_async_wait_all();
        int s = 0;
        for (; s + U <= npre; s += U) {
            uint4 xs[U][TG];
#pragma unroll
            for (int ss = 0; ss < U; ss++)
#pragma unroll
                for (int t = 0; t < TG; t++)
                    xs[ss][t] = smm_ld_cached16(x[t] + (c + ss * CS) * 64);
#pragma unroll
            for (int ss = 0; ss < U; ss++) {
                uint4 u[G][2];
                wsm(s + ss, u);
                consume(u, xs[ss]);
            }
            c += U * CS;
        }
        for (; s < npre; s++, c += CS) {
            uint4 u[G][2], xs[TG];
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[t] = smm_ld_cached16(x[t] + c * 64);
            wsm(s, u);
            consume(u, xs);
        }
    }
    for (; c + (U - 1) * CS < full; c += U * CS) {
        uint4 u[U][G][2], xs[U][TG];
#pragma unroll
        for (int s = 0; s < U; s++) {
            const int64_t off = (c + s * CS) * 64;
#pragma unroll
            for (int j = 0; j < G; j++) {
                u[s][j][0] = smm_ld_stream16(w[j][0] + off);
                u[s][j][1] = smm_ld_stream16(w[j][1] + off);
            }
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[s][t] = smm_ld_cached16(x[t] + off);
        }
#pragma unroll
        for (int s = 0; s < U; s++)
            consume(u[s], xs[s]);
    }
    for (; c < full; c += CS) {
        uint4 u[G][2], xs[TG];
#pragma unroll
        for (int j = 0; j < G; j++) {
            u[j][0] = smm_ld_stream16(w[j][0] + c * 64);
            u[j][1] = smm_ld_stream16(w[j][1] + c * 64);
        }
#pragma unroll
        for (int t = 0; t < TG; t++)
            xs[t] = smm_ld_cached16(x[t] + c * 64);
        consume(u, xs);
    }
    if (full * 64 < d.k && (int64_t)rank * SMM_DEC_WARPS + warp == full % CS) {
        /* The K tail: bytes past K read as zero. */
        const int64_t kk = full * 64 + q * 16;
        uint4 u[G][2], xs[TG];
#pragma unroll
        for (int j = 0; j < G; j++) {
            u[j][0] = smm_load16_guarded(w[j][0] + full * 64, kk, d.k);
            u[j][1] = smm_load16_guarded(w[j][1] + full * 64, kk, d.k);
        }
#pragma unroll
        for (int t = 0; t < TG; t++)
            xs[t] = smm_load16_guarded(x[t] + full * 64, kk, d.k);
        consume(u, xs);
    }

    /* Output o: token o / (16 G), column n0 + o % (16 G) (consecutive
     * threads write consecutive columns). The scales (bias, zero point) of
     * all of a thread's elements are loaded here, together, before the
     * block sums, so that their memory latency overlaps the sums (on an
     * H200 this gave 0-2.7% at M <= 32 over loading them after the sums). */
    const int PER = (16 * G * 8 * TG + SMM_DEC_WARPS * 32 - 1) / (SMM_DEC_WARPS * 32);
    smm_epi_in in[PER];
    if (S == 1 || rank == 0) {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DEC_WARPS * 32;
            const int rr = o % (16 * G), m = o / (16 * G);
            if (o < 16 * G * 8 * TG && m < d.m && n0 + rr < d.n)
                in[i] = smm_epi_load(e, m, n0 + rr);
        }
    }

    /* Block sums (layout [G][TG * 4][32]: register, lane). */
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int t = 0; t < TG; t++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                atomicAdd(&red[((j * TG + t) * 4 + r) * 32 + lane], acc[j][t][r]);
    if (azp) {
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int32_t v = cs[j][h];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if (q == 0)
                    atomicAdd(&csred[j * 16 + h * 8 + g], v);
            }
    }
    __syncthreads();
    if (S > 1) {
        smm_cluster_wait(); /* block 0's sums are zeroed */
        if (rank != 0) {
            int32_t *dst = smm_cluster_map(red, 0);
            for (int i = tid; i < NR + (azp ? G * 16 : 0); i += SMM_DEC_WARPS * 32)
                atomicAdd(dst + i, red[i]);
        }
        smm_cluster_arrive();
        smm_cluster_wait();
        if (rank != 0)
            return;
    }

    /* The thread's outputs o, finished with the scales loaded above.
     * Element (row r, token mm) of the 16 x 8 tile (j, t) is register
     * (r / 8) * 2 + mm % 2 of lane (r % 8) * 4 + mm / 2. */
    {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DEC_WARPS * 32;
            const int rr = o % (16 * G), m = o / (16 * G);
            const int64_t n = n0 + rr;
            if (o >= 16 * G * 8 * TG || m >= d.m || n >= d.n)
                continue;
            const int j = rr / 16, r = rr % 16, t = m / 8, mm = m % 8;
            const int reg = t * 4 + (r / 8) * 2 + (mm % 2), ln = (r % 8) * 4 + mm / 2;
            const int32_t s = red[(j * TG * 4 + reg) * 32 + ln];
            smm_epi_store_in(e, m, n, s, azp ? csred[j * 16 + r] : 0, in[i]);
        }
    }
#endif
}

/* ------------------------------------------------------------------ */
/* NVIDIA sm_90a: wgmma kernel (large M)                                */
/* ------------------------------------------------------------------ */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMM_HAVE_WGMMA 1
#endif

/*
 * Shared-memory matrix descriptor of a K-major int8 tile with 64-byte rows
 * in the 64-byte swizzle layout (the one smm_swz writes: 16-byte chunk
 * index XOR address bits 7..8, tile based on a 512-byte boundary): start
 * address, leading byte offset 1 (unused: a K step of 32 bytes stays
 * inside one swizzled row), stride byte offset 512 (8 rows), layout 2.
 */
SMM_DEV uint64_t smm_wgmma_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(512 >> 4) << 32) | ((uint64_t)2 << 62);
}

/* d(64 x 256) += A(64 x 32, smem) * B(256 x 32, smem)^T, int32 wrapping. */
SMM_DEV void smm_wgmma_64x256x32(int32_t *d, uint64_t da, uint64_t db)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n"
                 "}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                   "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
                   "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
                   "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
                   "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
                   "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
                   "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
                   "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
                   "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
                   "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
                   "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
                   "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
                   "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
                   "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
                   "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
                   "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
                 : "l"(da), "l"(db));
#endif
}

/*
 * Block tile 128 x 256, two warpgroups (64 rows each, all 256 columns),
 * K step 64 bytes in STAGES shared-memory stages filled by cp.async (or by
 * guarded byte loads when rows are not 16-byte aligned) two k-tiles ahead;
 * each stage is two m64n256k32 wgmmas per warpgroup, with one k-tile of
 * wgmmas left in flight. The accumulator layout of a warpgroup is that of
 * mma.sync's 16 x 8 tiles: warp w holds rows 16w .. 16w + 15.
 * Built only for sm_90a; elsewhere the body is a stub the launcher never
 * runs (it carries a static shared array, which is how the launcher tells
 * the two apart through cudaFuncGetAttributes).
 */
template <int STAGES, bool ASYNC>
__global__ void __launch_bounds__(256)
smm_wgmma_kernel(smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BM = 128, BN = 256, THREADS = 256;
    constexpr int STAGE_BYTES = (BM + BN) * 64;
    constexpr int GROUP_M = 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* Stages on a 1024-byte boundary (the swizzle is of absolute address
     * bits); the launcher asks for 1024 bytes more. */
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    int32_t *cs = (int32_t *)(smem + STAGES * STAGE_BYTES);
    const uint32_t smem_base = smm_smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wwarp = warp & 3;

    const int t = blockIdx.x;
    const int in_group = GROUP_M * ntiles;
    const int first_m = (t / in_group) * GROUP_M;
    const int group_rows = min(mtiles - first_m, GROUP_M);
    const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
    const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;

    const int ktiles = (int)((d.k + 63) / 64);
    const bool azp = e.azp != NULL;
    int32_t acc[128];
    int32_t colsum = 0; /* column bn + tid */

#pragma unroll
    for (int i = 0; i < 128; i++)
        acc[i] = 0;

    auto load_tile = [&](int s, int kt) {
        const uint32_t sa = smem_base + s * STAGE_BYTES;
        const uint32_t sb = sa + BM * 64;
        unsigned char *pa = smem + s * STAGE_BYTES;
        unsigned char *pb = pa + BM * 64;
        const int64_t k0 = (int64_t)kt * 64;
#pragma unroll
        for (int it = 0; it < BM * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bm + r, kk = k0 + c * 16;
            const bool ok = row < d.m && kk < d.k;
            const int8_t *src = ok ? d.a + row * d.lda + kk : d.a;
            if (ASYNC)
                smm_cp_async16(sa + smm_swz(r, c), src, ok ? (int)min((int64_t)16, d.k - kk) : 0);
            else
                *(uint4 *)(pa + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int it = 0; it < BN * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bn + r, kk = k0 + c * 16;
            const bool ok = row < d.n && kk < d.k;
            const int8_t *src = ok ? d.b + row * d.ldb + kk : d.b;
            if (ASYNC)
                smm_cp_async16(sb + smm_swz(r, c), src, ok ? (int)min((int64_t)16, d.k - kk) : 0);
            else
                *(uint4 *)(pb + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < ktiles)
            load_tile(s, s);
        smm_cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; kt++) {
        smm_cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        {
            /* Stage of k-tile kt - 2: every warpgroup has waited for its
             * wgmmas (wait_group 1 after committing kt - 1). */
            const int next = kt + STAGES - 2;
            if (next < ktiles)
                load_tile(next % STAGES, next);
            smm_cp_async_commit();
        }
        const int s = kt % STAGES;
        const uint32_t sa = smem_base + s * STAGE_BYTES + wg * 64 * 64;
        const uint32_t sb = smem_base + s * STAGE_BYTES + BM * 64;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        smm_wgmma_64x256x32(acc, smm_wgmma_desc(sa), smm_wgmma_desc(sb));
        smm_wgmma_64x256x32(acc, smm_wgmma_desc(sa + 32), smm_wgmma_desc(sb + 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (azp) {
            const unsigned char *pb = smem + s * STAGE_BYTES + BM * 64 + tid * 64;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const uint4 v = *(const uint4 *)(pb + c * 16);
                colsum = __dp4a((int)v.x, 0x01010101, colsum);
                colsum = __dp4a((int)v.y, 0x01010101, colsum);
                colsum = __dp4a((int)v.z, 0x01010101, colsum);
                colsum = __dp4a((int)v.w, 0x01010101, colsum);
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    smm_cp_async_wait<0>();
    if (azp) {
        cs[tid] = colsum;
        __syncthreads();
    }

    {
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t m = bm + wg * 64 + wwarp * 16 + g + h * 8;
            if (m >= d.m)
                continue;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int cl = j * 8 + 2 * q;
                const int64_t n = bn + cl;
                const int32_t c0 = azp ? cs[cl] : 0, c1 = azp ? cs[cl + 1] : 0;
                if (n + 1 < d.n)
                    smm_epi_store2(e, m, n, acc[j * 4 + 2 * h], acc[j * 4 + 2 * h + 1], c0, c1);
                else if (n < d.n)
                    smm_epi_store(e, m, n, acc[j * 4 + 2 * h], c0);
            }
        }
    }
#else
    __shared__ int smm_no_wgmma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_wgmma)[threadIdx.x & 3] = mtiles + ntiles + (int)e.ldc;
#endif
}


/* ------------------------------------------------------------------ */
/* NVIDIA sm_90a: warp-specialized TMA + wgmma kernel (large M)         */
/* ------------------------------------------------------------------ */

SMM_DEV void smm_mbar_init(uint32_t bar, uint32_t count)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

/* Arrive once and add `bytes` to the transaction count of the phase. */
SMM_DEV void smm_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
#endif
}

SMM_DEV void smm_mbar_arrive(uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

/* Waits until the phase of parity `parity` of the barrier has completed.
 * CLUSTER: with acquire at cluster scope, so that what other blocks of the
 * cluster wrote (their completions counted on the barrier) is visible
 * after it. */
template <bool CLUSTER = false> SMM_DEV void smm_mbar_wait(uint32_t bar, uint32_t parity)
{
#if defined(SMM_HAVE_WGMMA)
    uint32_t done = 0;
    do {
        if (CLUSTER)
            asm volatile("{\n.reg .pred p;\n"
                         "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done)
                         : "r"(bar), "r"(parity)
                         : "memory");
        else
            asm volatile("{\n.reg .pred p;\n"
                         "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done)
                         : "r"(bar), "r"(parity)
                         : "memory");
    } while (!done);
#endif
}

/* Tensor copy of the box at (c0 = byte along K, c1 = row) into shared
 * memory at dst, completing on barrier bar. */
SMM_DEV void smm_tma_load_2d(uint32_t dst, const void *tmap, int c0, int c1, uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"((uint64_t)tmap), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
#endif
}

/*
 * Shared-memory matrix descriptor of a K-major int8 tile with 128-byte
 * rows in the 128-byte swizzle layout the tensor copy writes (16-byte
 * chunk index XOR row % 8, tile on a 1024-byte boundary): stride byte
 * offset 1024 (8 rows), layout 1. A K step of 32 bytes inside the row is
 * a start address 32 bytes further.
 */
SMM_DEV uint64_t smm_wgmma_desc128(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The same descriptor from its low word, smm_wgmma_desc128_lo(addr) (a
 * shared-memory address below 256 KiB: the low word of the descriptor of
 * addr + 16 i is that of addr plus i, so a loop can step it with one
 * 32-bit add). */
SMM_DEV uint32_t smm_wgmma_desc128_lo(uint32_t addr)
{
    return ((addr & 0x3FFFF) >> 4) | (1u << 16);
}

SMM_DEV uint64_t smm_wgmma_desc128_of(uint32_t lo)
{
    return (uint64_t)lo | ((uint64_t)((1024 >> 4) | (1u << 30)) << 32);
}

#define SMM_TMA_STAGES 4
#define SMM_TMA_STG_LD 36 /* int32 per row of a warp's 16 x 32 epilogue slice */
#define SMM_TMA_SMEM                                                                       \
    (SMM_TMA_STAGES * (128 + 256) * 128 + 2 * SMM_TMA_STAGES * 8 + 3 * 256 * 4 + 2 * 128 * 4 + \
     8 * 16 * SMM_TMA_STG_LD * 4 + 1024)

/* Finishes elements (m, n .. n + 3) of C (those below nmax) from their
 * int32 sums v, with the tile's column data (colsum, scale_b, bias at
 * column n) and row data (scale_a, zero point of row m); the epilogue.h
 * arithmetic, in the same order. One 8- or 16-byte store when all four
 * are inside C and the address is aligned for it. */
SMM_DEV void smm_tma_epi4(const smm_epi_params &e, bool scaled, bool azp, int64_t m, int64_t n,
                          int64_t nmax, int4 v, const int32_t *cs, const float *sb,
                          const float *bias, float sa, int32_t z)
{
    const int64_t off = m * e.ldc + n;
    const bool all4 = n + 3 < nmax;
    uint32_t w[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};

    if (scaled) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            uint32_t a = w[c];
            float y;
            if (azp)
                a -= (uint32_t)z * (uint32_t)cs[c];
            {
                const float t = smm_epi_mul(smm_epi_i2f((int32_t)a), sb[c]);
                if (e.bias != NULL)
                    y = smm_epi_fma(sa, t, bias[c]);
                else if (azp)
                    y = smm_epi_fma(sa, t, 0.0f);
                else
                    y = smm_epi_mul(sa, t);
            }
            if (e.c_dtype == SMM_DTYPE_F32)
                w[c] = smm_epi_f32_canonical(y);
            else if (e.c_dtype == SMM_DTYPE_F16)
                w[c] = smm_epi_f32_to_f16(y);
            else
                w[c] = smm_epi_f32_to_bf16(y);
        }
    }
    if (e.c_dtype == SMM_DTYPE_F16 || e.c_dtype == SMM_DTYPE_BF16) {
        uint16_t *p = (uint16_t *)e.c + off;
        if (all4 && ((uintptr_t)p & 7u) == 0) {
            *(uint2 *)p = make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (n + c < nmax)
                    p[c] = (uint16_t)w[c];
        }
    } else {
        uint32_t *p = (uint32_t *)e.c + off;
        if (all4 && ((uintptr_t)p & 15u) == 0) {
            *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (n + c < nmax)
                    p[c] = w[c];
        }
    }
}

/*
 * Persistent kernel, block tile 128 x 256, K step 128 bytes, 384 threads:
 * warpgroup 0 is the producer (one thread issues the tensor copies of A and
 * B tiles into SMM_TMA_STAGES shared-memory stages, 128-byte swizzle, rows
 * and columns past the matrix filled with zeros by the copy engine),
 * warpgroups 1 and 2 the consumers (64 rows x 256 columns each, four
 * m64n256k32 wgmmas per stage, one stage of wgmmas left in flight). Stage
 * s is handed over with two barriers: full[s] (the copies landed) and
 * empty[s] (all 256 consumer threads are done reading it). Tiles
 * blockIdx.x, blockIdx.x + gridDim.x, ... in groups of 8 block rows; the
 * producer runs ahead into the next tile while the consumers finish the
 * last one. Needs 16-byte aligned rows of A and B (the tensor maps).
 */
__global__ void __launch_bounds__(384, 1)
smm_tma_kernel(const __grid_constant__ CUtensorMap tma, const __grid_constant__ CUtensorMap tmb,
               smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BM = 128, BN = 256, BK = 128, STAGES = SMM_TMA_STAGES;
    constexpr int A_BYTES = BM * BK, STAGE_BYTES = (BM + BN) * BK;
    constexpr int GROUP_M = 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t smem_base = smm_smem_addr(smem);
    const uint32_t bar_full = smem_base + STAGES * STAGE_BYTES;
    const uint32_t bar_empty = bar_full + STAGES * 8;
    int32_t *cs = (int32_t *)(smem + STAGES * STAGE_BYTES + 2 * STAGES * 8); /* BN */
    float *csb = (float *)(cs + BN);                                          /* BN */
    float *cbias = csb + BN;                                                  /* BN */
    float *csa = cbias + BN;                                                  /* BM */
    int32_t *cz = (int32_t *)(csa + BM);                                      /* BM */
    int32_t *stg = cz + BM; /* 8 warps x 16 x SMM_TMA_STG_LD */

    const int tid = threadIdx.x, wg = tid >> 7;
    const int ktiles = (int)((d.k + BK - 1) / BK);
    const int tiles = mtiles * ntiles;
    const int in_group = GROUP_M * ntiles;

    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            smm_mbar_init(bar_full + 8 * s, 1);
            smm_mbar_init(bar_empty + 8 * s, 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* Producer. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int first_m = (t / in_group) * GROUP_M;
                const int group_rows = min(mtiles - first_m, GROUP_M);
                const int bm = (first_m + (t % in_group) % group_rows) * BM;
                const int bn = ((t % in_group) / group_rows) * BN;
                for (int kt = 0; kt < ktiles; kt++, it++) {
                    const uint32_t s = it % STAGES;
                    const uint32_t sa = smem_base + s * STAGE_BYTES;
                    smm_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
                    smm_mbar_expect_tx(bar_full + 8 * s, STAGE_BYTES);
                    smm_tma_load_2d(sa, &tma, kt * BK, bm, bar_full + 8 * s);
                    smm_tma_load_2d(sa + A_BYTES, &tmb, kt * BK, bn, bar_full + 8 * s);
                }
            }
        }
    } else {
        /* Consumers. */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int ctid = tid - 128, cwg = wg - 1;
        const int lane = tid & 31, wwarp = (tid >> 5) & 3;
        const int g = lane >> 2, q = lane & 3;
        const bool azp = e.azp != NULL;
        const bool scaled = e.c_dtype != SMM_DTYPE_I32;
        uint32_t it = 0;
        int32_t acc[128];

        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int first_m = (t / in_group) * GROUP_M;
            const int group_rows = min(mtiles - first_m, GROUP_M);
            const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
            const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;
            int32_t colsum = 0; /* column bn + ctid */

#pragma unroll
            for (int i = 0; i < 128; i++)
                acc[i] = 0;

            for (int kt = 0; kt < ktiles; kt++, it++) {
                const uint32_t s = it % STAGES;
                const uint32_t sa = smem_base + s * STAGE_BYTES + cwg * 64 * BK;
                const uint32_t sb = smem_base + s * STAGE_BYTES + A_BYTES;
                smm_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 32; kk++)
                    smm_wgmma_64x256x32(acc, smm_wgmma_desc128(sa + 32 * kk),
                                        smm_wgmma_desc128(sb + 32 * kk));
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                if (azp) {
                    /* Row ctid of the B tile (its 16-byte chunks permuted,
                     * which leaves the sum alone), chunks in a rotated
                     * order to spread the banks. */
                    const unsigned char *pb = smem + s * STAGE_BYTES + A_BYTES + ctid * BK;
#pragma unroll
                    for (int c = 0; c < BK / 16; c++) {
                        const uint4 v = *(const uint4 *)(pb + (((c + ctid) & 7) << 4));
                        colsum = __dp4a((int)v.x, 0x01010101, colsum);
                        colsum = __dp4a((int)v.y, 0x01010101, colsum);
                        colsum = __dp4a((int)v.z, 0x01010101, colsum);
                        colsum = __dp4a((int)v.w, 0x01010101, colsum);
                    }
                }
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                if (kt > 0)
                    smm_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (ktiles > 0)
                smm_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
            /* Per-tile column and row data into shared memory (after every
             * consumer is done with the last tile's). */
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (scaled) {
                const int64_t n = bn + ctid < d.n ? bn + ctid : d.n - 1;
                cs[ctid] = colsum;
                csb[ctid] = __ldg(e.scale_b_per_col ? e.scale_b + n : e.scale_b);
                cbias[ctid] = e.bias != NULL ? __ldg(e.bias + n) : 0.0f;
                if (ctid < BM) {
                    const int64_t m = bm + ctid < d.m ? bm + ctid : d.m - 1;
                    csa[ctid] = __ldg(e.scale_a_per_row ? e.scale_a + m : e.scale_a);
                    cz[ctid] = azp ? __ldg(e.azp_per_row ? e.azp + m : e.azp) : 0;
                }
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");

            /* Epilogue, 32 columns at a time: warp wwarp of the warpgroup
             * holds rows 16 wwarp .. 16 wwarp + 15 of its 64, register
             * j * 4 + 2 h + c being row g + 8 h, column 8 j + 2 q + c. The
             * warp parks a 16 x 32 slice in shared memory, then each lane
             * finishes 4 consecutive elements of a row per step (8 lanes a
             * row) and stores them with one 8- or 16-byte store. */
            {
                int32_t *st = stg + (ctid >> 5) * (16 * SMM_TMA_STG_LD);
                const int rbase = cwg * 64 + wwarp * 16;
#pragma unroll
                for (int jc = 0; jc < 8; jc++) {
#pragma unroll
                    for (int jj = 0; jj < 4; jj++)
#pragma unroll
                        for (int h = 0; h < 2; h++)
                            *(int2 *)(st + (g + 8 * h) * SMM_TMA_STG_LD + jj * 8 + 2 * q) =
                                make_int2(acc[(jc * 4 + jj) * 4 + 2 * h],
                                          acc[(jc * 4 + jj) * 4 + 2 * h + 1]);
                    __syncwarp();
#pragma unroll 1
                    for (int step = 0; step < 4; step++) {
                        const int idx = step * 32 + lane;
                        const int r = idx >> 3, cl = jc * 32 + (idx & 7) * 4;
                        const int64_t m = bm + rbase + r, n = bn + cl;
                        if (m < d.m && n < d.n) {
                            const int4 v = *(const int4 *)(st + r * SMM_TMA_STG_LD + (idx & 7) * 4);
                            smm_tma_epi4(e, scaled, azp, m, n, d.n, v, cs + cl, csb + cl,
                                         cbias + cl, csa[rbase + r], cz[rbase + r]);
                        }
                    }
                    __syncwarp();
                }
            }
        }
    }
#else
    __shared__ int smm_no_tma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_tma)[threadIdx.x & 3] = mtiles + ntiles + (int)e.ldc;
#endif
}

/* ------------------------------------------------------------------ */
/* NVIDIA sm_90a: tensor-copy decode kernel (M <= 32)                   */
/* ------------------------------------------------------------------ */

/* d(64 x NT) = A(64 x 32, smem) * B(NT x 32, smem)^T + (acc ? d : 0),
 * int32 wrapping, for NT = 8, 16, 32 (NT / 2 accumulator registers per
 * thread). */
template <int NT> SMM_DEV void smm_wgmma_64xNx32(int32_t *d, uint64_t da, uint64_t db, int acc);

#if defined(SMM_HAVE_WGMMA)
#define SMM_WGMMA_N_HEAD(n, sd)                                                               \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " sd ", 0;\nwgmma.mma_async.sync.aligned.m64n" #n   \
    "k32.s32.s8.s8 "
#else
#define SMM_WGMMA_N_HEAD(n, sd) ""
#endif

template <> SMM_DEV void smm_wgmma_64xNx32<8>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(8, "%6") "{%0, %1, %2, %3}, %4, %5, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

template <> SMM_DEV void smm_wgmma_64xNx32<16>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(16, "%10") "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
                   "+r"(d[6]), "+r"(d[7])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

template <> SMM_DEV void smm_wgmma_64xNx32<32>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(32, "%18") "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                                      "%12, %13, %14, %15}, %16, %17, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
                   "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]),
                   "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

#define SMM_DTMA_BR 64      /* weight rows (output columns) per block */
#define SMM_DTMA_THREADS 160 /* one consumer warpgroup and a producer warp */

/* Shared memory of the tensor-copy decode kernel with `stages` stages. */
static inline int smm_dtma_smem(int nt, int stages)
{
    return stages * (SMM_DTMA_BR + nt) * 128 + 2 * stages * 8 +
           (nt * (SMM_DTMA_BR + 4) + SMM_DTMA_BR) * 4 + 1024;
}

/*
 * The weights as the 64-row wgmma operand, the tokens (M <= NT, padded
 * with zero rows by the copy engine) as the NT-column one: block (or
 * cluster of S blocks, each a contiguous share of the 128-byte k-tiles)
 * computes output columns n0 .. n0 + 63 for every token. Warp 4 (one
 * thread) issues the tensor copies of each k-tile's 64 x 128-byte weight
 * box and NT x 128-byte token box into `stages` shared-memory stages,
 * 128-byte swizzle, zeros past N, M and K; warps 0-3 (a warpgroup) run
 * four m64nNTk32 wgmmas per stage and hand the stage back through an
 * mbarrier, so up to `stages` k-tiles of weights are in flight per block
 * from the start. The int32 sums (and the weight rows' sums for a zero
 * point) meet in block 0's shared memory (stores, then the other blocks'
 * integer atomics through distributed shared memory: exact in any order
 * modulo 2^32) and block 0 finishes the elements, consecutive threads on
 * consecutive columns. Launched with programmatic dependent launch, it
 * waits (griddepcontrol.wait) before its first global memory access.
 * Needs what the tensor maps need: 16-byte aligned bases, row strides
 * multiples of 16.
 */
template <int NT, int S>
__global__ void __launch_bounds__(SMM_DTMA_THREADS, 1)
smm_decode_tma_kernel(const __grid_constant__ CUtensorMap tma,
                      const __grid_constant__ CUtensorMap tmb, smm_mm_dims d, smm_epi_params e,
                      int stages, int kt_per)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BR = SMM_DTMA_BR, BK = 128, W_BYTES = BR * BK;
    constexpr int STAGE_BYTES = (BR + NT) * BK, LDR = BR + 4;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t smem_base = smm_smem_addr(smem);
    const uint32_t bar_full = smem_base + stages * STAGE_BYTES;
    const uint32_t bar_empty = bar_full + stages * 8;
    int32_t *red = (int32_t *)(smem + stages * STAGE_BYTES + 2 * stages * 8); /* [NT][LDR] */
    int32_t *csred = red + NT * LDR;                                          /* [BR] */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * BR;
    const int ktiles = (int)((d.k + BK - 1) / BK);
    const int kt0 = min((int)rank * kt_per, ktiles), nk = min(kt0 + kt_per, ktiles) - kt0;
    const bool azp = e.azp != NULL;

    if (tid == 0) {
        for (int s = 0; s < stages; s++) {
            smm_mbar_init(bar_full + 8 * s, 1);
            smm_mbar_init(bar_empty + 8 * s, 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tma) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmb) : "memory");
    }
    /* The kernel ahead in the stream (programmatic launch) is complete
     * and its writes visible past this point. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    __syncthreads();

    if (warp == 4) {
        if (lane == 0) {
            for (int i = 0; i < nk; i++) {
                const int s = i % stages;
                const uint32_t st = smem_base + s * STAGE_BYTES;
                smm_mbar_wait(bar_empty + 8 * s, ((i / stages) & 1) ^ 1);
                smm_mbar_expect_tx(bar_full + 8 * s, STAGE_BYTES);
                smm_tma_load_2d(st, &tmb, (kt0 + i) * BK, (int)n0, bar_full + 8 * s);
                smm_tma_load_2d(st + W_BYTES, &tma, (kt0 + i) * BK, 0, bar_full + 8 * s);
            }
        }
        __syncwarp();
    } else {
        /* Warp w of the warpgroup holds weight rows 16 w + g (+ 8),
         * register 4 j + 2 h + c being row 16 w + g + 8 h, token
         * 8 j + 2 q + c. */
        const int g = lane >> 2, q = lane & 3;
        int32_t acc[NT / 2];
        int32_t colsum = 0; /* half (tid & 1) of weight row tid / 2 */
        if (nk <= 0) {
#pragma unroll
            for (int i = 0; i < NT / 2; i++)
                acc[i] = 0;
        }
        /* The first wgmma overwrites the accumulators (scale-d 0): no
         * other instruction defines them while wgmmas are in flight. */
        for (int i = 0; i < nk; i++) {
            const int s = i % stages;
            const uint32_t sw = smem_base + s * STAGE_BYTES, sx = sw + W_BYTES;
            smm_mbar_wait(bar_full + 8 * s, (i / stages) & 1);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 32; kk++)
                smm_wgmma_64xNx32<NT>(acc, smm_wgmma_desc128(sw + 32 * kk),
                                      smm_wgmma_desc128(sx + 32 * kk), i > 0 || kk > 0);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            if (azp) {
                /* Four of the row's eight 16-byte chunks (swizzled: the
                 * two halves hold all eight between them). */
                const unsigned char *pw = smem + s * STAGE_BYTES + (tid >> 1) * BK + (tid & 1) * 64;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint4 v = *(const uint4 *)(pw + c * 16);
                    colsum = __dp4a((int)v.x, 0x01010101, colsum);
                    colsum = __dp4a((int)v.y, 0x01010101, colsum);
                    colsum = __dp4a((int)v.z, 0x01010101, colsum);
                    colsum = __dp4a((int)v.w, 0x01010101, colsum);
                }
            }
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (i > 0)
                smm_mbar_arrive(bar_empty + 8 * ((i - 1) % stages));
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        colsum += __shfl_xor_sync(0xffffffffu, colsum, 1);

        int32_t *dst = red, *dcs = csred;
        if (S > 1 && rank != 0) {
            __syncwarp(); /* the .aligned barrier wants the warp converged */
            smm_cluster_arrive(); /* block 0's own sums are stored */
            smm_cluster_wait();
            dst = smm_cluster_map(red, 0);
            dcs = smm_cluster_map(csred, 0);
        }
        const int nr = (warp << 4) + g;
#pragma unroll
        for (int j = 0; j < NT / 8; j++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int32_t *p = dst + (8 * j + 2 * q + c) * LDR + nr + 8 * h;
                    if (S > 1 && rank != 0)
                        atomicAdd(p, acc[4 * j + 2 * h + c]);
                    else
                        *p = acc[4 * j + 2 * h + c];
                }
        if (azp && (tid & 1) == 0) {
            if (S > 1 && rank != 0)
                atomicAdd(dcs + (tid >> 1), colsum);
            else
                dcs[tid >> 1] = colsum;
        }
        if (S > 1 && rank == 0) {
            __syncwarp();
            smm_cluster_arrive();
            smm_cluster_wait();
        }
    }
    if (S > 1) {
        if (warp == 4) { /* the producer warp takes part in both barriers */
            smm_cluster_arrive();
            smm_cluster_wait();
        }
        smm_cluster_arrive(); /* every block's sums are added */
        smm_cluster_wait();
        if (rank != 0)
            return;
    } else {
        __syncthreads();
    }

    /* Output o: token o / BR, column n0 + o % BR. The scales (bias, zero
     * point) of all of a thread's elements are loaded before any is
     * finished. */
    {
        constexpr int PER = (NT * BR + SMM_DTMA_THREADS - 1) / SMM_DTMA_THREADS;
        const int tot = (int)min((int64_t)NT, d.m) * BR;
        smm_epi_in in[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DTMA_THREADS;
            if (o < tot && n0 + o % BR < d.n)
                in[i] = smm_epi_load(e, o / BR, n0 + o % BR);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DTMA_THREADS, m = o / BR, nl = o % BR;
            if (o >= tot || n0 + nl >= d.n)
                continue;
            smm_epi_store_in(e, m, n0 + nl, red[m * LDR + nl], azp ? csred[nl] : 0, in[i]);
        }
    }
#else
    __shared__ int smm_no_dtma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_dtma)[threadIdx.x & 3] = stages + kt_per + (int)e.ldc;
#endif
}

/* ------------------------------------------------------------------ */
/* NVIDIA sm_90a: ring decode kernel (M <= 32, wgmma, cp.async ring)    */
/* ------------------------------------------------------------------ */

#define SMM_RING_BR 64 /* weight rows (output columns) per block */
#define SMM_RING_SUB 2 /* 128-byte k-tiles per ring slot */
#define SMM_RING_MAX 8 /* most ring slots */

/* Shared memory of the ring decode kernel with NT token rows and r slots:
 * the slots (each two k-tiles of 64 weight rows and of NT token rows),
 * then the sums the other blocks of a cluster add in, the weight rows'
 * sums and the barrier that counts the other blocks' adds. */
static inline int smm_ring_smem(int nt, int r)
{
    return r * SMM_RING_SUB * (SMM_RING_BR + nt) * 128 + (nt / 2 * 128 + SMM_RING_BR) * 4 + 16 +
           1024;
}

/* The shared::cluster address of the shared variable at (shared::cta)
 * address addr in block `rank` of the cluster. */
SMM_DEV uint32_t smm_cluster_map32(uint32_t addr, unsigned rank)
{
    uint32_t out = addr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
#else
    (void)rank;
#endif
    return out;
}

/* Adds v (modulo 2^32) to the int32 at shared::cluster address addr, in
 * another block of the cluster, and counts its 4 bytes on that block's
 * barrier bar (a shared::cluster address) once done. */
SMM_DEV void smm_red_async_add(uint32_t addr, int32_t v, uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32"
                 " [%0], %1, [%2];\n" ::"r"(addr),
                 "r"(v), "r"(bar)
                 : "memory");
#else
    (void)addr, (void)v, (void)bar;
#endif
}

/* Waits until at most n (0..SMM_RING_MAX) of this thread's cp.async groups
 * are pending. */
SMM_DEV void smm_cp_async_wait_n(int n)
{
    switch (n) {
    case 0: smm_cp_async_wait<0>(); break;
    case 1: smm_cp_async_wait<1>(); break;
    case 2: smm_cp_async_wait<2>(); break;
    case 3: smm_cp_async_wait<3>(); break;
    case 4: smm_cp_async_wait<4>(); break;
    case 5: smm_cp_async_wait<5>(); break;
    case 6: smm_cp_async_wait<6>(); break;
    default: smm_cp_async_wait<7>(); break;
    }
}

/* Built with -DSMM_RING_TRACE (gpu-gemm-selftest --trace), the ring
 * decode kernel's thread 0 records per block: the SM and block, and the
 * global timer (ns) at its start, after griddepcontrol.wait, after its
 * last wgmma and before it leaves, in smm_ring_trace (up to
 * SMM_RING_TRACE_MAX blocks, smm_ring_trace_n of them); the atomic that
 * takes the record's place comes after the last time, and delays the
 * block's exit. Off (the default), none of this is compiled. */
#if defined(SMM_RING_TRACE)
#define SMM_RING_TRACE_MAX (1 << 16)
__device__ unsigned long long smm_ring_trace[5 * SMM_RING_TRACE_MAX];
__device__ unsigned smm_ring_trace_n;

SMM_DEV unsigned long long smm_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

SMM_DEV void smm_ring_trace_put(const unsigned long long *t)
{
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    const unsigned long long t_end = smm_globaltimer();
    const unsigned ix = atomicAdd(&smm_ring_trace_n, 1u);
    if (ix < SMM_RING_TRACE_MAX) {
        unsigned long long *o = smm_ring_trace + 5ull * ix;
        o[0] = smid | ((unsigned long long)blockIdx.x << 16);
        o[1] = t[0];
        o[2] = t[1];
        o[3] = t[2];
        o[4] = t_end;
    }
}
#define SMM_RING_TRACE_AT(i)                                                               \
    do {                                                                                   \
        trace_t[i] = smm_globaltimer();                                                    \
    } while (0)
#define SMM_RING_TRACE_END()                                                               \
    do {                                                                                   \
        if (tid == 0)                                                                      \
            smm_ring_trace_put(trace_t);                                                   \
    } while (0)
#else
#define SMM_RING_TRACE_AT(i) ((void)0)
#define SMM_RING_TRACE_END() ((void)0)
#endif

/*
 * Block (or cluster of S blocks, each a contiguous share of K's 256-byte
 * slots: `share` each, the last block what is left): output columns
 * n0 .. n0 + 63 for every token (M <= NT, NT = 8, 16 or 32). One
 * warpgroup; each of its 128 threads copies with cp.async four 16-byte
 * pieces of each 128-byte k-tile of the 64 weight rows and NT / 16 of the
 * token rows into a ring of r slots of two k-tiles each (128-byte
 * swizzle; bytes past K zero-filled, rows past N read from the last row
 * and never stored, rows past M likewise or, with PART, not copied), up to
 * r - 2 slots ahead of the one its four m64nNTk32 wgmmas per k-tile read,
 * with one slot of wgmmas left in flight (at the start, all r slots). The
 * weights (and the tokens) are the two shared-memory operands, as in
 * smm_decode_tma_kernel; here every thread keeps copies in flight, which
 * holds no registers. With B static (d.b_static) the first r - 2 slots of
 * weights are copied before griddepcontrol.wait and the next launch is
 * let in at the start; the tokens, and the weights of slots r - 2 and
 * r - 1, always after the wait. The other blocks of a cluster add their
 * sums into block 0's shared memory (red.async, counted on a barrier of
 * block 0's) and leave; block 0 finishes the elements (with NT = 32,
 * written through shared memory as 16-byte pieces of C's rows). AZP
 * (e.azp != NULL): the weight rows' sums are taken from the ring too; a
 * separate instantiation, since that code in the loop makes ptxas
 * serialize the wgmmas (C7515), which the kernel without it avoids.
 * PART (M < NT): the token rows past M are not copied; a separate
 * instantiation, since the same test in the kernel for M = NT made those
 * launches slower on an H200 (gpu-gemm-selftest --launch-cost, stream
 * launches, B static, us per launch, two runs each, against the kernel
 * without it: o, N = K = 4096, M = 32: 6.85-6.90 against 6.68-6.74),
 * where for M < NT it was faster (M = 1: N = 28672, K = 4096 27.31-27.33
 * against 29.07-29.21; N = 4096, K = 14336 15.10-15.17 against
 * 15.64-15.66; M = 24: N = 6144, K = 4096 9.02-9.09 against 9.92-10.00).
 * Needs 16-byte aligned rows of A and B.
 */
template <int NT, int S, bool AZP, bool PART>
__global__ void __launch_bounds__(128, 1)
smm_decode_ring_kernel(smm_mm_dims d, smm_epi_params e, int r, int share)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BR = SMM_RING_BR, WT = BR * 128, XT = NT * 128;
    constexpr int SLOT = SMM_RING_SUB * (WT + XT);
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t base = smm_smem_addr(smem);
    int32_t *red = (int32_t *)(smem + r * SLOT); /* [NT / 2][128]: register, thread */
    int32_t *csred = red + NT / 2 * 128;         /* [BR] */
    const uint32_t bar = smm_smem_addr(csred + BR); /* the other blocks' adds */
    constexpr int SUMS = NT / 2 * 128 + (AZP ? BR : 0); /* int32 each other block adds */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * BR;
    const int64_t nslot = (d.k + 255) / 256;
    /* K's slots s0 .. s0 + ns - 1: share each, the last block what is left
     * (with S = 2 and block 0 taking more than half, block 1 the rest). */
    const int64_t s0 = min((int64_t)rank * share, nslot);
    const int ns = (int)(min(s0 + share, nslot) - s0);
    const bool azp = AZP; /* e.azp != NULL */
#if defined(SMM_RING_TRACE)
    unsigned long long trace_t[3];
#endif
    SMM_RING_TRACE_AT(0);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (d.b_static)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* Thread tid copies piece u = tid % 8 (16 bytes) of each 128-byte
     * k-tile of weight rows tid / 8 + 16 j (j < 4) and of token rows
     * tid / 8 + 16 j (j < NT / 16; NT = 8: threads below 64). Rows past N
     * are read from the last row (never stored); rows past M too, or, with
     * PART (M < NT), not copied at all (their slots keep whatever they
     * held, and their sums are never stored); bytes past K are zero-filled
     * (cp.async reads bytes < 16 of the source; a piece wholly past K reads
     * none, from the start of the block's share). */
    constexpr int XJ = NT >= 16 ? NT / 16 : 1;
    const int u = tid & 7, r0 = tid >> 3;
    const uint32_t poff = (uint32_t)(((u ^ (r0 & 7)) << 4) + r0 * 128); /* + j * 2048 */
    const int8_t *wp[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        wp[j] = d.b + min(n0 + r0 + 16 * j, d.n - 1) * d.ldb + s0 * 256 + u * 16;
    const int8_t *xp[XJ];
#pragma unroll
    for (int j = 0; j < XJ; j++)
        xp[j] = d.a + min((int64_t)(r0 + 16 * j), d.m - 1) * d.lda + s0 * 256 + u * 16;
    const int kleft = (int)(d.k - s0 * 256) - u * 16; /* K bytes from piece u of slot 0 */
    bool xin[XJ]; /* token row r0 + 16 j is copied */
#pragma unroll
    for (int j = 0; j < XJ; j++)
        xin[j] = !PART || r0 + 16 * j < d.m;
    /* Slot sl (0 .. ns - 1) of this block's share into ring slot pos: its
     * weights (w), its tokens (x). */
    auto copy = [&](int sl, int pos, bool w, bool x) {
        if (sl >= ns)
            return;
        const uint32_t st = base + pos * SLOT;
#pragma unroll
        for (int sub = 0; sub < SMM_RING_SUB; sub++) {
            const int off = sl * 256 + sub * 128, kl = kleft - off;
            const int bytes = kl >= 16 ? 16 : kl > 0 ? kl : 0;
            const int offc = kl > 0 ? off : -u * 16;
            if (w)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    smm_cp_async16(st + sub * WT + poff + j * 2048, wp[j] + offc, bytes);
            if (x && (NT >= 16 || tid < 64))
#pragma unroll
                for (int j = 0; j < XJ; j++)
                    if (xin[j])
                        smm_cp_async16(st + SMM_RING_SUB * WT + sub * XT + poff + j * 2048,
                                       xp[j] + offc, bytes);
        }
    };
    /* Groups: weights of slots 0 .. r - 3 (one each), their tokens (one),
     * slots r - 2 and r - 1 (weights and tokens, one each; the ring's
     * last two slots are free at the start), then slot i + r - 2 in
     * iteration i >= 2. Slots r - 2 and r - 1 copied in iterations 0 and
     * 1 instead, once all before them were in, launches were slower on an
     * H200 (gpu-gemm-selftest --launch-cost, B static, the launcher's
     * choice, us per launch, two runs, N = K = 4096, M = 32 / 16:
     * 6.90-6.94 / 6.17-6.23 against 6.67-6.72 / 5.93-6.01; N = 4096,
     * K = 14336: 17.08-17.10 / 15.95-15.96 against 16.73 / 15.47-15.50). */
    if (d.b_static)
        for (int sl = 0; sl < r - 2; sl++) {
            copy(sl, sl, true, false);
            smm_cp_async_commit();
        }
    /* A cluster's sums meet in block 0: it zeroes them (and the weight
     * rows' sums) and sets its barrier to count the other blocks' adds,
     * before the cluster barrier that the others wait for before adding. */
    if (S > 1) {
        if (rank == 0) {
            for (int i = tid; i < SUMS; i += 128)
                red[i] = 0;
            if (tid == 0) {
                smm_mbar_init(bar, 1);
                asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
                smm_mbar_expect_tx(bar, (S - 1) * SUMS * 4);
            }
        }
        smm_cluster_arrive();
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The kernel ahead in the stream (programmatic launch) is complete
     * and its writes visible past this point. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (!d.b_static)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    SMM_RING_TRACE_AT(1);
    if (!d.b_static)
        for (int sl = 0; sl < r - 2; sl++) {
            copy(sl, sl, true, false);
            smm_cp_async_commit();
        }
    for (int sl = 0; sl < r - 2; sl++)
        copy(sl, sl, false, true);
    smm_cp_async_commit();
    for (int sl = r - 2; sl < r; sl++) {
        copy(sl, sl, true, true);
        smm_cp_async_commit();
    }
    /* The scales (bias, zero point) of the thread's elements, loaded
     * here, after the wait (the kernel ahead may write them), so that the
     * loop hides their latency: rows 8 j + 2 q + c (rin[2 j + c]) and
     * columns n0 + 16 w + g + 8 h (cin[h]) of warp w, clamped into C
     * (elements outside C are not stored). */
    smm_epi_in rin[NT / 4], cin[2];
#pragma unroll
    for (int jc = 0; jc < NT / 4; jc++)
        smm_epi_load_row(e, min((int64_t)(8 * (jc >> 1) + 2 * q + (jc & 1)), d.m - 1),
                         &rin[jc]);
#pragma unroll
    for (int h = 0; h < 2; h++)
        smm_epi_load_col(e, min(n0 + 16 * warp + g + 8 * h, d.n - 1), &cin[h]);

    /* Warp w holds weight rows 16 w + g (+ 8), register 4 j + 2 h + c
     * being row 16 w + g + 8 h, token 8 j + 2 q + c. */
    int32_t acc[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++)
        acc[i] = 0;
    int32_t colsum = 0; /* half (tid & 1) of weight row tid / 2 */
    int pos = 0, pos_next = r - 2; /* ring slots of slot i and slot i + r - 2 */
    const uint32_t dlo = smm_wgmma_desc128_lo(base);
    for (int i = 0; i < ns; i++) {
        if (i == 0)
            smm_cp_async_wait<2>(); /* all but slots r - 2 and r - 1 */
        else if (i >= r - 2)
            smm_cp_async_wait_n(r - 3); /* slot i's group is in */
        /* The copies (generic proxy) before the wgmmas' reads (async
         * proxy); then every thread's, and every warp's wgmmas of slot
         * i - 2, whose ring slot the next copy takes. */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (i >= 2) {
            copy(i + r - 2, pos_next, true, true);
            smm_cp_async_commit();
        }
        /* The descriptors' low words, stepped by 16-byte units. */
        const uint32_t dw = dlo + pos * (SLOT / 16), dx = dw + SMM_RING_SUB * WT / 16;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int sub = 0; sub < SMM_RING_SUB; sub++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                smm_wgmma_64xNx32<NT>(acc, smm_wgmma_desc128_of(dw + (sub * WT + 32 * kk) / 16),
                                      smm_wgmma_desc128_of(dx + (sub * XT + 32 * kk) / 16), 1);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (azp) {
            /* Half of the row's 16-byte pieces in each k-tile (swizzled
             * within the row: the two halves hold all of them). */
#pragma unroll
            for (int sub = 0; sub < SMM_RING_SUB; sub++) {
                const unsigned char *pw =
                    smem + pos * SLOT + sub * WT + (tid >> 1) * 128 + (tid & 1) * 64;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint4 v = *(const uint4 *)(pw + c * 16);
                    colsum = __dp4a((int)v.x, 0x01010101, colsum);
                    colsum = __dp4a((int)v.y, 0x01010101, colsum);
                    colsum = __dp4a((int)v.z, 0x01010101, colsum);
                    colsum = __dp4a((int)v.w, 0x01010101, colsum);
                }
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        pos = pos + 1 == r ? 0 : pos + 1;
        pos_next = pos_next + 1 == r ? 0 : pos_next + 1;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    colsum += __shfl_xor_sync(0xffffffffu, colsum, 1);
    SMM_RING_TRACE_AT(2);

    /* The other blocks of a cluster add their sums into block 0's shared
     * memory and leave; block 0 waits for all of their adds. With the sums
     * stored by every block and read by block 0 between two cluster
     * barriers, launches were slower on an H200 (measured as above, the
     * slots r - 2 and r - 1 copied in iterations 0 and 1 in both:
     * N = K = 4096, M = 32 / 16: 7.18-7.19 / 6.65 against 6.90-6.94 /
     * 6.17-6.23; K = 14336: 17.32-17.37 / 16.65 against 17.08-17.10 /
     * 15.95-15.96). */
    if (S > 1) {
        smm_cluster_wait(); /* block 0's zeroes and barrier are set */
        if (rank != 0) {
            const uint32_t rbar = smm_cluster_map32(bar, 0);
            const uint32_t rred = smm_cluster_map32(smm_smem_addr(red), 0);
#pragma unroll
            for (int i = 0; i < NT / 2; i++)
                smm_red_async_add(rred + (uint32_t)(i * 128 + tid) * 4, acc[i], rbar);
            if (azp && (tid & 1) == 0)
                smm_red_async_add(rred + (uint32_t)(NT / 2 * 128 + (tid >> 1)) * 4, colsum, rbar);
            SMM_RING_TRACE_END();
            return;
        }
        smm_mbar_wait<true>(bar, 0);
#pragma unroll
        for (int i = 0; i < NT / 2; i++)
            acc[i] += red[i * 128 + tid];
    }
    int32_t cs[2] = {0, 0};
    if (azp) {
        if ((tid & 1) == 0)
            csred[tid >> 1] = (S > 1 ? csred[tid >> 1] : 0) + colsum;
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; h++)
            cs[h] = csred[16 * warp + g + 8 * h];
    }

    /* The thread's elements: all of them finished, then stored. With each
     * store right after its element's arithmetic, launches at M = 32 were
     * slower on an H200 (gpu-gemm-selftest --launch-cost, stream launches,
     * B static, separate runs): o 7.62 against 7.19 us, qkv 9.70 against
     * 9.22; a traced copy of the kernel showed the block's tail, last
     * wgmma to exit, shorter (doc/performance.md). */
    uint32_t bits[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++) {
        const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
        bits[i] = smm_epi_bits_in(e, acc[i], cs[h], smm_epi_join(rin[2 * j + c], cin[h]));
    }
    /* NT = 32, a whole tile of 64 columns, C's rows 16-byte aligned: the
     * elements go through shared memory (ring slot 0, its wgmmas done; rows
     * of 64 elements and 16 bytes' padding, so that neither the 2- or 4-byte
     * writes nor the 16-byte reads meet in a bank) and out as 16-byte
     * pieces of C's rows, 2 (or 4) stores per thread instead of 16 of 2 (or
     * 4) bytes. Measured on an H200 (gpu-gemm-selftest --launch-cost,
     * stream launches, B static, us per launch, two or three runs each,
     * against the per-element stores in the same run; doc/performance.md,
     * "The ring kernel's outputs at NT = 32"): N = K = 4096, M = 32 6.20-6.24
     * against 6.69-6.75, M = 24 6.28-6.34 against 6.76-6.84; N = 6144,
     * K = 4096, M = 32 8.00-8.03 against 9.14-9.16; N = 28672, K = 4096,
     * M = 32 32.24-32.36 against 33.14-33.42; N = 4096, K = 14336, M = 32
     * 16.37-16.50 against 16.74-17.01. At NT = 16 it was slower (N = K =
     * 4096, M = 16: 5.89-5.90 against 5.68-5.76), so NT = 8 and 16 store
     * each element. */
    const int es = smm_epi_c_bytes(e);
    if (NT == 32 && n0 + BR <= d.n && ((uintptr_t)e.c & 15) == 0 && ((e.ldc * es) & 15) == 0) {
        const int pitch = BR * es + 16, pieces = BR * es / 16; /* per row */
        __syncthreads(); /* every warp is past its last wgmma */
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
            const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
            unsigned char *p = smem + (8 * j + 2 * q + c) * pitch + (16 * warp + g + 8 * h) * es;
            if (es == 4)
                *(uint32_t *)p = bits[i];
            else
                *(uint16_t *)p = (uint16_t)bits[i];
        }
        __syncthreads();
        const int rows = (int)min((int64_t)NT, d.m);
        for (int pc = tid; pc < rows * pieces; pc += 128) {
            const int m = pc / pieces, u16 = pc - m * pieces;
            *(uint4 *)((unsigned char *)e.c + ((int64_t)m * e.ldc + n0) * es + u16 * 16) =
                *(const uint4 *)(smem + m * pitch + u16 * 16);
        }
    } else {
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
            const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
            const int64_t m = 8 * j + 2 * q + c, n = n0 + 16 * warp + g + 8 * h;
            if (m < d.m && n < d.n)
                smm_epi_put(e, m, n, bits[i]);
        }
    }
    SMM_RING_TRACE_END();
#else
    __shared__ int smm_no_ring[4];
    if (d.m < 0)
        ((volatile int *)smm_no_ring)[threadIdx.x & 3] = r + share + (int)e.ldc;
#endif
}

#endif /* SMM_GPU_NVIDIA */

/* ------------------------------------------------------------------ */
/* AMD: MFMA (gfx942, gfx90a) or sdot4 tiled kernel                     */
/* ------------------------------------------------------------------ */

#if defined(SMM_GPU_AMD)

#define SMM_AMD_BM 128
#define SMM_AMD_BN 128
#define SMM_AMD_BK 64         /* bytes of K per step */
#define SMM_AMD_LDS 72        /* bytes per tile row in LDS (padded) */
#define SMM_AMD_THREADS 256   /* 4 waves of 64 */

#if defined(__HIP_DEVICE_COMPILE__) &&                                                 \
    (defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define SMM_AMD_MFMA_K 16     /* v_mfma_i32_32x32x16_i8 */
#elif defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx908__) || defined(__gfx90a__))
#define SMM_AMD_MFMA_K 8      /* v_mfma_i32_32x32x8i8 */
#endif

/*
 * Block tile 128 x 128, K step 64, A and B tiles staged in LDS with
 * guarded loads (16-byte loads when `al16`). With MFMA, wave w (2 x 2
 * waves) owns a 64 x 64 quarter: 2 x 2 accumulators of 32 x 32, fragments
 * read with mfma_layout.h's maps. Without MFMA each thread computes 8 x 8
 * elements with 4-byte dot products.
 */
__global__ void __launch_bounds__(SMM_AMD_THREADS)
smm_amd_kernel(smm_mm_dims d, smm_epi_params e, int mtiles, int al16)
{
    __shared__ __attribute__((aligned(16))) int8_t as[SMM_AMD_BM * SMM_AMD_LDS];
    __shared__ __attribute__((aligned(16))) int8_t bs[SMM_AMD_BN * SMM_AMD_LDS];
    __shared__ int32_t cs[SMM_AMD_BN];
    const int tid = SMM_TID_X;
    const int64_t bm = (int64_t)(SMM_BID_X % mtiles) * SMM_AMD_BM;
    const int64_t bn = (int64_t)(SMM_BID_X / mtiles) * SMM_AMD_BN;
    const bool azp = e.azp != NULL;
    int32_t colsum = 0; /* threads < 128: column bn + tid */
    int64_t k0;

#if defined(SMM_AMD_MFMA_K)
    const int lane = tid % 64, wave = tid / 64;
    const int wm = (wave / 2) * 64, wn = (wave % 2) * 64;
    smm_i32x16 acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int r = 0; r < 16; r++)
                acc[i][j][r] = 0;
#else
    const int tx = tid % 16, ty = tid / 16;
    int32_t acc[8][8];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0;
#endif

    for (k0 = 0; k0 < d.k; k0 += SMM_AMD_BK) {
        /* 128 rows x 4 chunks of 16 bytes, for A and for B. */
        for (int qd = tid; qd < SMM_AMD_BM * 4; qd += SMM_AMD_THREADS) {
            const int r = qd / 4, c = qd % 4;
            const int64_t kk = k0 + 16 * c;
            uint32_t wa[4] = {0, 0, 0, 0}, wb[4] = {0, 0, 0, 0};
            if (bm + r < d.m) {
                const int8_t *p = d.a + (bm + r) * d.lda + kk;
                if (al16 && kk + 16 <= d.k) {
                    const uint4 v = *(const uint4 *)p;
                    wa[0] = v.x; wa[1] = v.y; wa[2] = v.z; wa[3] = v.w;
                } else {
                    for (int i = 0; i < 16; i++)
                        if (kk + i < d.k)
                            wa[i / 4] |= (uint32_t)(uint8_t)p[i] << (8 * (i % 4));
                }
            }
            if (bn + r < d.n) {
                const int8_t *p = d.b + (bn + r) * d.ldb + kk;
                if (al16 && kk + 16 <= d.k) {
                    const uint4 v = *(const uint4 *)p;
                    wb[0] = v.x; wb[1] = v.y; wb[2] = v.z; wb[3] = v.w;
                } else {
                    for (int i = 0; i < 16; i++)
                        if (kk + i < d.k)
                            wb[i / 4] |= (uint32_t)(uint8_t)p[i] << (8 * (i % 4));
                }
            }
            uint32_t *da = (uint32_t *)(as + r * SMM_AMD_LDS + 16 * c);
            uint32_t *db = (uint32_t *)(bs + r * SMM_AMD_LDS + 16 * c);
            for (int i = 0; i < 4; i++) {
                da[i] = wa[i];
                db[i] = wb[i];
            }
        }
        SMM_SYNCTHREADS();

#if defined(SMM_AMD_MFMA_K)
        for (int kk = 0; kk < SMM_AMD_BK; kk += SMM_AMD_MFMA_K) {
            /* Each lane's operand is E = 8 (or 4) consecutive bytes of one
             * tile row (mfma_layout.h); rows are 72 bytes apart and the
             * offsets multiples of E, so one aligned LDS read gives it. */
            const int64_t fo = smm_mfma_frag_offset(32, SMM_AMD_MFMA_K, lane, SMM_AMD_LDS);
            uint64_t af[2], bf[2];
            for (int i = 0; i < 2; i++) {
                const int8_t *pa = as + (wm + 32 * i) * SMM_AMD_LDS + kk + fo;
#if SMM_AMD_MFMA_K == 16
                af[i] = *(const uint64_t *)pa;
#else
                af[i] = *(const uint32_t *)pa;
#endif
            }
            for (int j = 0; j < 2; j++) {
                const int8_t *pb = bs + (wn + 32 * j) * SMM_AMD_LDS + kk + fo;
#if SMM_AMD_MFMA_K == 16
                bf[j] = *(const uint64_t *)pb;
#else
                bf[j] = *(const uint32_t *)pb;
#endif
            }
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
#if SMM_AMD_MFMA_K == 16
                    acc[i][j] = smm_mfma_32x32x16(af[i], bf[j], acc[i][j]);
#else
                    acc[i][j] = smm_mfma_32x32x8(af[i], bf[j], acc[i][j]);
#endif
        }
#else
        for (int w = 0; w < SMM_AMD_BK / 4; w++) {
            int32_t av[8], bv[8];
            for (int i = 0; i < 8; i++)
                av[i] = *(const int32_t *)(as + (ty + 16 * i) * SMM_AMD_LDS + 4 * w);
            for (int j = 0; j < 8; j++)
                bv[j] = *(const int32_t *)(bs + (tx + 16 * j) * SMM_AMD_LDS + 4 * w);
            for (int i = 0; i < 8; i++)
                for (int j = 0; j < 8; j++)
                    acc[i][j] = smm_dot4(av[i], bv[j], acc[i][j]);
        }
#endif
        if (azp && tid < SMM_AMD_BN)
            for (int w = 0; w < SMM_AMD_BK / 4; w++)
                colsum = smm_dot4(*(const int32_t *)(bs + tid * SMM_AMD_LDS + 4 * w), 0x01010101,
                                  colsum);
        SMM_SYNCTHREADS();
    }
    if (tid < SMM_AMD_BN)
        cs[tid] = colsum;
    SMM_SYNCTHREADS();

#if defined(SMM_AMD_MFMA_K)
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int r = 0; r < 16; r++) {
                const int ti = smm_mfma_d_row(32, lane, r), tj = smm_mfma_d_col(32, lane, r);
                const int64_t m = bm + wm + 32 * i + ti;
                const int cl = wn + 32 * j + tj;
                const int64_t n = bn + cl;
                if (m < d.m && n < d.n)
                    smm_epi_store(e, m, n, acc[i][j][r], cs[cl]);
            }
#else
    for (int i = 0; i < 8; i++) {
        const int64_t m = bm + ty + 16 * i;
        if (m >= d.m)
            continue;
        for (int j = 0; j < 8; j++) {
            const int64_t n = bn + tx + 16 * j;
            if (n < d.n)
                smm_epi_store(e, m, n, acc[i][j], cs[tx + 16 * j]);
        }
    }
#endif
}

#endif /* SMM_GPU_AMD */

/* ------------------------------------------------------------------ */
/* Launcher                                                            */
/* ------------------------------------------------------------------ */

static bool smm_aligned(const void *p, int64_t ld, int64_t rows, unsigned bytes)
{
    return ((uintptr_t)p % bytes) == 0 && (rows == 1 || ld % (int64_t)bytes == 0);
}

/* SMM_GPU_GEMM_KERNEL=generic in the environment (read once) sends every
 * problem to the generic kernel: a way to test it on any GPU. */
static int smm_gemm_force_generic = -1;

static bool smm_force_generic(void)
{
    if (smm_gemm_force_generic < 0) {
        const char *v = getenv("SMM_GPU_GEMM_KERNEL");
        smm_gemm_force_generic = v != NULL && strcmp(v, "generic") == 0;
    }
    return smm_gemm_force_generic != 0;
}

static gpuError_t smm_launch_generic(const smm_mm_dims &d, const smm_epi_params &e,
                                     gpuStream_t stream)
{
    const int64_t mt = (d.m + SMM_GEN_BM - 1) / SMM_GEN_BM;
    const int64_t nt = (d.n + SMM_GEN_BN - 1) / SMM_GEN_BN;
    const int al4 = smm_aligned(d.a, d.lda, d.m, 4) && smm_aligned(d.b, d.ldb, d.n, 4);

    if (mt * nt > INT32_MAX)
        return gpuErrorInvalidValue;
    smm_generic_kernel<<<(unsigned)(mt * nt), 256, 0, stream>>>(d, e, (int)mt, al4);
    return gpuGetLastError();
}

#if defined(SMM_GPU_NVIDIA)

/* The current device as an index into the launchers' per-device caches
 * (arrays of 64): 0 when it cannot be read or is past them. */
static int smm_cache_dev(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        dev = 0;
    return dev;
}

/* Compute capability (major * 10 + minor) and SM count of the current
 * device, read once per device. */
static void smm_device_info(int *cc, int *sms)
{
    static int cache_cc[64], cache_sms[64];

    const int dev = smm_cache_dev();
    if (cache_cc[dev] == 0) {
        int major = 0, minor = 0, count = 0;
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
        cache_sms[dev] = count;
        cache_cc[dev] = major * 10 + minor;
    }
    *cc = cache_cc[dev];
    *sms = cache_sms[dev];
}

template <int BM, int BN, int WM, int WN, int STAGES, bool ASYNC>
static gpuError_t smm_launch_mma(const smm_mm_dims &d, const smm_epi_params &e,
                                 gpuStream_t stream)
{
    const int64_t mt = (d.m + BM - 1) / BM, nt = (d.n + BN - 1) / BN;
    const int smem = STAGES * (BM + BN) * 64 + BN * 4;
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_mma_kernel<BM, BN, WM, WN, STAGES, ASYNC>;

    if (mt * nt > INT32_MAX)
        return gpuErrorInvalidValue;
    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smem);
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    kern<<<(unsigned)(mt * nt), WM * WN * 32, smem, stream>>>(d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

#define SMM_WGMMA_STAGES 5

/* Whether the code object the driver loaded for kern on the current device
 * is the sm_90a one (the sm_90a kernels take only dynamic shared memory,
 * their stubs for other targets a static array), read once per device into
 * cache (one array per kernel). */
template <typename K> static bool smm_sm90a_loaded(K kern, signed char (&cache)[64])
{
    const int dev = smm_cache_dev();
    if (cache[dev] == 0) {
        cudaFuncAttributes attr;
        const bool ok = cudaFuncGetAttributes(&attr, kern) == cudaSuccess &&
                        attr.sharedSizeBytes == 0;
        (void)cudaGetLastError();
        cache[dev] = ok ? 1 : -1;
    }
    return cache[dev] > 0;
}

/* Whether the wgmma kernel the driver loaded for the current device is the
 * sm_90a one (the stub has static shared memory), read once per device. */
static bool smm_have_wgmma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_wgmma_kernel<SMM_WGMMA_STAGES, true>, cache);
}

static gpuError_t smm_launch_wgmma(const smm_mm_dims &d, const smm_epi_params &e,
                                   gpuStream_t stream)
{
    const int64_t mt = (d.m + 127) / 128, nt = (d.n + 255) / 256;
    const int smem = SMM_WGMMA_STAGES * (128 + 256) * 64 + 256 * 4 + 1024;
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_wgmma_kernel<SMM_WGMMA_STAGES, true>;

    if (mt * nt > INT32_MAX)
        return gpuErrorInvalidValue;
    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smem);
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    kern<<<(unsigned)(mt * nt), 256, smem, stream>>>(d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no
 * link against the driver library), looked up once; NULL if missing. */
static PFN_cuTensorMapEncodeTiled_v12000 smm_tmap_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int tried;

    if (!tried) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &q);
#else
        cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p,
                                                  cudaEnableDefault, &q);
#endif
        if (err == cudaSuccess && q == cudaDriverEntryPointSuccess && p != NULL)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
        (void)cudaGetLastError();
        tried = 1;
    }
    return fn;
}

/* Tensor map of a rows x k int8 matrix (row stride ld bytes, a multiple
 * of 16, base 16-byte aligned): boxes of 128 bytes of K by box_rows rows,
 * 128-byte swizzle, zeros past the edges. */
static bool smm_make_tmap(CUtensorMap *map, const int8_t *base, int64_t rows, int64_t k,
                          int64_t ld, unsigned box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = smm_tmap_encoder();
    cuuint64_t dims[2], strides[1];
    cuuint32_t box[2], estr[2] = {1, 1};

    if (fn == NULL)
        return false;
    dims[0] = (cuuint64_t)k;
    dims[1] = (cuuint64_t)rows;
    strides[0] = (cuuint64_t)ld;
    box[0] = 128;
    box[1] = box_rows;
    return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)base, dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Whether the TMA kernel the driver loaded is the sm_90a one (as
 * smm_have_wgmma), read once per device. */
static bool smm_have_tma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_tma_kernel, cache) && smm_tmap_encoder() != NULL;
}

/* The TMA kernel when the problem suits it (16-byte aligned, strides
 * multiples of 16, sizes below 2^31, K > 0) and the tensor maps encode;
 * *done false: nothing launched, use another kernel. */
static gpuError_t smm_launch_tma(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                                 gpuStream_t stream, bool *done)
{
    const int64_t mt = (d.m + 127) / 128, nt = (d.n + 255) / 256;
    static bool attr_set[64];
    CUtensorMap ta, tb;

    *done = false;
    if (d.k <= 0 || d.m >= INT32_MAX || d.n >= INT32_MAX || d.k >= INT32_MAX ||
        d.lda % 16 != 0 || d.ldb % 16 != 0 || d.lda < d.k || d.ldb < d.k ||
        ((uintptr_t)d.a & 15) != 0 || ((uintptr_t)d.b & 15) != 0 || mt * nt > INT32_MAX)
        return gpuSuccess;
    if (!smm_make_tmap(&ta, d.a, d.m, d.k, d.lda, 128) ||
        !smm_make_tmap(&tb, d.b, d.n, d.k, d.ldb, 256))
        return gpuSuccess;
    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(smm_tma_kernel, SMM_TMA_SMEM);
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    *done = true;
    smm_tma_kernel<<<(unsigned)(mt * nt < sms ? mt * nt : sms), 384, SMM_TMA_SMEM, stream>>>(
        ta, tb, d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

/* SMM_GPU_GEMM_KERNEL=wgmma (read once) keeps large problems on the
 * cp.async wgmma kernel instead of the TMA one. */
static bool smm_tma_allowed(void)
{
    static int allowed = -1;
    if (allowed < 0) {
        const char *v = getenv("SMM_GPU_GEMM_KERNEL");
        allowed = !(v != NULL && strcmp(v, "wgmma") == 0);
    }
    return allowed != 0;
}

/* SMM_GPU_GEMM_KERNEL=mma (read once) keeps large problems off wgmma. */
static bool smm_wgmma_allowed(void)
{
    static int allowed = -1;
    if (allowed < 0) {
        const char *v = getenv("SMM_GPU_GEMM_KERNEL");
        allowed = !(v != NULL && strcmp(v, "mma") == 0);
    }
    return allowed != 0;
}

#endif

#if defined(SMM_GPU_NVIDIA)

/* The self-test's tuning hook (scripts/gpu-gemm-selftest.cu): nonzero
 * values force the decode kernel's 16-row groups per block (1, 2, 4) and
 * blocks per cluster (1, 2, 4; sm_90+ only, else 1). */
static int smm_decode_force_g = 0, smm_decode_force_s = 0;

/* Also the self-test's: 1 forces the mma.sync decode kernel, 2 the
 * tensor-copy one (sm_90a), 3 the ring one (sm_90a), 0 leaves the choice
 * to the launcher; a nonzero smm_decode_force_stages forces the tensor-copy
 * kernel's stage count (2 to 16) or the ring kernel's slots (3 to 8). */
static int smm_decode_force_kind = 0, smm_decode_force_stages = 0;

/* Also the self-test's: 1 takes the decode kernel's shared-memory form
 * (B static) wherever it exists, -1 never, 0 leaves it to the launcher. */
static int smm_decode_force_pre = 0;

/* Launches of the decode kernel's shared-memory form so far (the
 * self-test checks that forced ones ran). */
static unsigned long smm_decode_pre_launches = 0;

/* Launches of the tensor-copy decode kernel so far (the self-test checks
 * that a forced one ran). */
static unsigned long smm_decode_tma_launches = 0;

/* Programmatic dependent launch of the decode kernel (sm_90+): on unless
 * SMM_GPU_PDL=0 is in the environment (read once per process) or a launch
 * with it was refused. Each decode launch may then begin while the kernel
 * ahead of it in the stream drains, and waits for that kernel's completion
 * (griddepcontrol.wait) before it touches global memory, but for the
 * first weights of a static B (smm_decode_kernel): the launch latency
 * overlaps the previous kernel's tail, with the stream's order kept. */
static int smm_decode_pdl_env = -1, smm_decode_pdl_off = 0;

static bool smm_decode_pdl_allowed(void)
{
    if (smm_decode_pdl_env < 0) {
        const char *v = getenv("SMM_GPU_PDL");
        smm_decode_pdl_env = !(v != NULL && strcmp(v, "0") == 0);
    }
    return smm_decode_pdl_env && !smm_decode_pdl_off;
}

/* Launches a decode kernel: `blocks` blocks of `threads` threads with
 * `smem` bytes of dynamic shared memory, in clusters of s blocks (s > 1,
 * sm_90+) and, with pdl, with programmatic stream serialization. A launch
 * refused with the latter is tried without it; when that one goes
 * through, the runtime or driver lacks programmatic launches: plain
 * launches from now on (smm_decode_pdl_off). */
template <typename... KArgs, typename... Args>
static gpuError_t smm_launch_decode_ex(void (*kern)(KArgs...), int64_t blocks, int threads,
                                       size_t smem, int s, bool pdl, gpuStream_t stream,
                                       Args &&...args)
{
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    memset(&cfg, 0, sizeof cfg);
    memset(at, 0, sizeof at);
    cfg.gridDim = dim3((unsigned)blocks, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = s;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = s > 1 ? at : at + 1;
    cfg.numAttrs = (s > 1 ? 1 : 0) + (pdl ? 1 : 0);
    gpuError_t err = cudaLaunchKernelEx(&cfg, kern, args...);
    if (err != gpuSuccess && pdl) {
        cfg.numAttrs = s > 1 ? 1 : 0;
        if (cudaLaunchKernelEx(&cfg, kern, args...) == gpuSuccess) {
            (void)gpuGetLastError(); /* the refused launch's error */
            smm_decode_pdl_off = 1;
            err = gpuSuccess;
        }
    }
    return err;
}

/* The decode kernel's shared-memory form (BS 2) exists for one token
 * group with one row group, and for more token groups with two, without
 * clusters; kernel() is null elsewhere, and max the most steps. */
template <int TG, int G, int S> struct smm_dec_pre_form {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return nullptr; }
    static const int max = 0;
};
template <> struct smm_dec_pre_form<1, 1, 1> {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return smm_decode_kernel<1, 1, 1, 2>; }
    static const int max = SMM_DEC_PRE_MAX;
};
template <int TG> struct smm_dec_pre_form2 {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return smm_decode_kernel<TG, 2, 1, 2>; }
    static const int max = SMM_DEC_PRE_MAX2;
};
template <> struct smm_dec_pre_form<2, 2, 1> : smm_dec_pre_form2<2> {};
template <> struct smm_dec_pre_form<3, 2, 1> : smm_dec_pre_form2<3> {};
template <> struct smm_dec_pre_form<4, 2, 1> : smm_dec_pre_form2<4> {};

/* Blocks of a shared-memory form that fit an SM at its largest size (max
 * steps, stored in *max when max is not null), read once per device; 0
 * when that size cannot be allowed or the form does not exist. Allowing it
 * here is what lets every launch of the form ask for up to that much
 * shared memory. */
template <int TG, int G>
static int smm_decode_pre_fit(int *max)
{
    static signed char cache[64]; /* per device: 0 not asked, else blocks + 1 */

    if (max)
        *max = smm_dec_pre_form<TG, G, 1>::max;
    const int dev = smm_cache_dev();
    if (cache[dev] == 0) {
        const int bytes = smm_dec_pre_form<TG, G, 1>::max * G * SMM_DEC_PRE_STEP;
        auto kern = smm_dec_pre_form<TG, G, 1>::kernel();
        int blocks = 0;
        if (kern == nullptr || gpuFuncSetMaxDynamicSharedMemory(kern, bytes) != gpuSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kern, SMM_DEC_WARPS * 32,
                                                          (size_t)bytes) != cudaSuccess)
            blocks = 0;
        (void)gpuGetLastError();
        cache[dev] = (signed char)(blocks > 100 ? 101 : blocks + 1);
    }
    return cache[dev] - 1;
}

/* The same for tg token groups and g row groups (tg <= 4); *max is 0
 * where there is no form. */
static int smm_decode_pre_fit_tg(int tg, int g, int *max = nullptr)
{
    if (max)
        *max = 0;
    if (g == 1)
        return tg == 1 ? smm_decode_pre_fit<1, 1>(max) : 0;
    if (g != 2)
        return 0;
    return tg == 2   ? smm_decode_pre_fit<2, 2>(max)
           : tg == 3 ? smm_decode_pre_fit<3, 2>(max)
           : tg == 4 ? smm_decode_pre_fit<4, 2>(max)
                     : 0;
}

template <int TG, int G, int S>
static gpuError_t smm_launch_decode_tgs(const smm_mm_dims &d, const smm_epi_params &e,
                                        gpuStream_t stream)
{
    const int64_t nb = (d.n + 16 * G - 1) / (16 * G);

    if (nb * S > INT32_MAX)
        return gpuErrorInvalidValue;
    auto kern = d.b_static ? smm_decode_kernel<TG, G, S, 1> : smm_decode_kernel<TG, G, S, 0>;
    int smem = 0;
    if (d.b_static && d.pre > 0 && smm_dec_pre_form<TG, G, S>::kernel()) {
        /* The shared-memory form, where smm_launch_decode chose it (it
         * allowed the largest size once per device: smm_decode_pre_fit). */
        kern = smm_dec_pre_form<TG, G, S>::kernel();
        smem = d.pre * G * SMM_DEC_PRE_STEP;
    }
    if (S == 1 && d.pdl == 0) {
        kern<<<(unsigned)nb, SMM_DEC_WARPS * 32, (size_t)smem, stream>>>(d, e);
        return gpuGetLastError();
    }
    gpuError_t err = smm_launch_decode_ex(kern, nb * S, SMM_DEC_WARPS * 32, (size_t)smem, S,
                                          d.pdl != 0, stream, d, e);
    if (err == gpuSuccess && smem > 0)
        smm_decode_pre_launches++;
    return err;
}

template <int TG>
static gpuError_t smm_launch_decode_tg(const smm_mm_dims &d, const smm_epi_params &e, int g,
                                       int s, gpuStream_t stream)
{
    if (g == 1)
        return s == 4 ? smm_launch_decode_tgs<TG, 1, 4>(d, e, stream)
                      : s == 2 ? smm_launch_decode_tgs<TG, 1, 2>(d, e, stream)
                               : smm_launch_decode_tgs<TG, 1, 1>(d, e, stream);
    if (g == 2)
        return s == 4 ? smm_launch_decode_tgs<TG, 2, 4>(d, e, stream)
                      : s == 2 ? smm_launch_decode_tgs<TG, 2, 2>(d, e, stream)
                               : smm_launch_decode_tgs<TG, 2, 1>(d, e, stream);
    return s == 4 ? smm_launch_decode_tgs<TG, 4, 4>(d, e, stream)
                  : s == 2 ? smm_launch_decode_tgs<TG, 4, 2>(d, e, stream)
                           : smm_launch_decode_tgs<TG, 4, 1>(d, e, stream);
}

/* Whether the decode kernels were compiled for sm_90+ (from sm_90+ PTX)
 * for the current device: only then do they carry the cluster
 * instructions and the wait for a programmatic launch (older code, or
 * code JIT-compiled from older PTX, compiles them out); asked once per
 * device. (Like the library's other per-process caches, these are plain
 * variables: threads racing on them store the same values.) */
static bool smm_decode_have_cluster(int cc)
{
    static signed char have[64]; /* per device: 0 not asked, 1 yes, -1 no */
    if (cc < 90)
        return false;
    const int dev = smm_cache_dev();
    if (have[dev] == 0) {
        cudaFuncAttributes attr;
        have[dev] =
            cudaFuncGetAttributes(&attr, smm_decode_kernel<1, 1, 2, 0>) == cudaSuccess &&
                    attr.binaryVersion >= 90 && attr.ptxVersion >= 90
                ? 1
                : -1;
    }
    return have[dev] > 0;
}

/* Whether the tensor-copy decode kernel the driver loaded is the sm_90a
 * one (as smm_have_wgmma), read once per device. */
static bool smm_have_dtma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_decode_tma_kernel<8, 1>, cache) && smm_tmap_encoder() != NULL;
}

template <int NT, int S>
static gpuError_t smm_launch_dtma_ns(const CUtensorMap &ta, const CUtensorMap &tb,
                                     const smm_mm_dims &d, const smm_epi_params &e,
                                     int64_t blocks, int stages, int kt_per, gpuStream_t stream)
{
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_decode_tma_kernel<NT, S>;

    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smm_dtma_smem(NT, 16));
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    gpuError_t err = smm_launch_decode_ex(kern, blocks, SMM_DTMA_THREADS,
                                          (size_t)smm_dtma_smem(NT, stages), S, d.pdl != 0,
                                          stream, ta, tb, d, e, stages, kt_per);
    if (err == gpuSuccess)
        smm_decode_tma_launches++;
    return err;
}

template <int NT>
static gpuError_t smm_launch_dtma_n(const CUtensorMap &ta, const CUtensorMap &tb,
                                    const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                    int s, int stages, int kt_per, gpuStream_t stream)
{
    return s == 4 ? smm_launch_dtma_ns<NT, 4>(ta, tb, d, e, rt * 4, stages, kt_per, stream)
           : s == 2 ? smm_launch_dtma_ns<NT, 2>(ta, tb, d, e, rt * 2, stages, kt_per, stream)
                    : smm_launch_dtma_ns<NT, 1>(ta, tb, d, e, rt, stages, kt_per, stream);
}

/* Whether the two sm_90a decode kernels (tensor-copy, ring) take the
 * problem, with rt blocks of 64 weight rows (up to 4 per cluster): K > 0,
 * N, K and the blocks below 2^31, 16-byte aligned bases, row strides
 * multiples of 16 and at least K (a single row's stride is not read). */
static bool smm_decode_wg_takes(const smm_mm_dims &d, int64_t rt)
{
    return !(d.k <= 0 || d.n >= INT32_MAX || d.k >= INT32_MAX || rt * 4 > INT32_MAX ||
             ((uintptr_t)d.a & 15) != 0 || ((uintptr_t)d.b & 15) != 0 ||
             (d.m > 1 && (d.lda % 16 != 0 || d.lda < d.k)) ||
             (d.n > 1 && (d.ldb % 16 != 0 || d.ldb < d.k)));
}

/* The tensor-copy decode kernel (sm_90a code, tensor maps encodable,
 * 16-byte aligned bases, row strides multiples of 16, K > 0, sizes below
 * 2^31); *done false: nothing launched. Picks the blocks per cluster
 * (split of K) so the blocks cover the SMs, and as many stages as the
 * shared memory of the blocks an SM holds allows (2 to 16). */
static gpuError_t smm_launch_decode_tma(const smm_mm_dims &d, const smm_epi_params &e,
                                        int sms, gpuStream_t stream, bool *done)
{
    const int nt = d.m <= 8 ? 8 : d.m <= 16 ? 16 : 32;
    const int64_t rt = (d.n + SMM_DTMA_BR - 1) / SMM_DTMA_BR;
    const int64_t ktiles = (d.k + 127) / 128;
    CUtensorMap ta, tb;
    int s, stages, per_sm;

    *done = false;
    if (!smm_decode_wg_takes(d, rt))
        return gpuSuccess;
    if (!smm_make_tmap(&ta, d.a, d.m, d.k, d.m > 1 ? d.lda : (d.k + 15) / 16 * 16, nt) ||
        !smm_make_tmap(&tb, d.b, d.n, d.k, d.n > 1 ? d.ldb : (d.k + 15) / 16 * 16,
                       SMM_DTMA_BR))
        return gpuSuccess;
    s = rt >= sms ? 1 : 2 * rt >= sms ? 2 : 4;
    if (smm_decode_force_s > 0)
        s = smm_decode_force_s;
    if (ktiles < s)
        s = ktiles >= 2 ? 2 : 1;
    per_sm = (int)((rt * s + sms - 1) / sms);
    stages = (200 * 1024 / per_sm - (nt * (SMM_DTMA_BR + 4) + SMM_DTMA_BR) * 4 - 1024) /
             ((SMM_DTMA_BR + nt) * 128 + 16);
    {
        const int64_t kt_per = (ktiles + s - 1) / s;
        if (stages > kt_per)
            stages = (int)kt_per;
    }
    if (smm_decode_force_stages > 0)
        stages = smm_decode_force_stages;
    stages = stages < 2 ? 2 : stages > 16 ? 16 : stages;
    *done = true;
    {
        const int kt_per = (int)((ktiles + s - 1) / s);
        return nt == 8 ? smm_launch_dtma_n<8>(ta, tb, d, e, rt, s, stages, kt_per, stream)
               : nt == 16 ? smm_launch_dtma_n<16>(ta, tb, d, e, rt, s, stages, kt_per, stream)
                          : smm_launch_dtma_n<32>(ta, tb, d, e, rt, s, stages, kt_per, stream);
    }
}

/* Launches of the ring decode kernel so far (the self-test checks that
 * forced ones ran). */
static unsigned long smm_decode_ring_launches = 0;

/* Whether the ring decode kernel the driver loaded is the sm_90a one (as
 * smm_have_wgmma), read once per device. */
static bool smm_have_ring(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_decode_ring_kernel<8, 1, false, false>, cache);
}

template <int NT, int S, bool AZP, bool PART>
static gpuError_t smm_launch_ring_ns(const smm_mm_dims &d, const smm_epi_params &e,
                                     int64_t blocks, int r, int share, gpuStream_t stream)
{
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_decode_ring_kernel<NT, S, AZP, PART>;

    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smm_ring_smem(NT, SMM_RING_MAX));
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    gpuError_t err = smm_launch_decode_ex(kern, blocks, 128, (size_t)smm_ring_smem(NT, r), S,
                                          d.pdl != 0, stream, d, e, r, share);
    if (err == gpuSuccess)
        smm_decode_ring_launches++;
    return err;
}

template <int NT, bool AZP, bool PART>
static gpuError_t smm_launch_ring_nap(const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                      int s, int r, int share, gpuStream_t stream)
{
    return s == 4 ? smm_launch_ring_ns<NT, 4, AZP, PART>(d, e, rt * 4, r, share, stream)
           : s == 2 ? smm_launch_ring_ns<NT, 2, AZP, PART>(d, e, rt * 2, r, share, stream)
                    : smm_launch_ring_ns<NT, 1, AZP, PART>(d, e, rt, r, share, stream);
}

/* The instantiation for e.azp and for rows past M (PART: M < NT). */
template <int NT>
static gpuError_t smm_launch_ring_n(const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                    int s, int r, int share, gpuStream_t stream)
{
    const bool part = d.m < NT;
    if (e.azp != NULL)
        return part ? smm_launch_ring_nap<NT, true, true>(d, e, rt, s, r, share, stream)
                    : smm_launch_ring_nap<NT, true, false>(d, e, rt, s, r, share, stream);
    return part ? smm_launch_ring_nap<NT, false, true>(d, e, rt, s, r, share, stream)
                : smm_launch_ring_nap<NT, false, false>(d, e, rt, s, r, share, stream);
}

/* The blocks per cluster of the ring decode kernel for rt 64-row blocks:
 * two (each about half of K; smm_launch_decode_ring) where that still
 * leaves at most one block per SM, else one. */
static int smm_ring_split(int64_t rt, int sms)
{
    return 2 * rt <= (int64_t)sms ? 2 : 1;
}

/* The ring decode kernel (sm_90a code, 16-byte aligned bases, row strides
 * multiples of 16, K > 0, sizes below 2^31); *done false: nothing
 * launched. Measured on an H200 (gpu-gemm-selftest --ring-sweep: stream
 * launches, B static, weights rotating over 256 MiB, us per launch,
 * M = 32 / M = 16): with at most one block per SM the more slots the
 * faster (o, N = K = 4096, two blocks per cluster: 3 slots 11.73 / 10.21,
 * 4 9.78 / 7.94, 6 8.37 / 6.88, 8 8.00 / 6.66; qkv, N = 6144, one:
 * 6 10.54 / 9.11, 8 10.07 / 8.65; down, N = 4096, K = 14336, two:
 * 6 18.69 / 16.93, 8 18.18 / 16.71); with more blocks than SMs (gate_up,
 * N = 28672, one per cluster) the most slots with which two blocks share
 * an SM (M = 32: 4 slots 34.76, 5 (one block per SM) 43.61, 3 40.95;
 * M = 16: 5 30.85, 4 31.60, 6 37.27). Splits that leave more blocks than
 * SMs were slower (qkv two per cluster 11.56 at best, o and qkv four per
 * cluster 12.35 and 14.67 at best). */
static gpuError_t smm_launch_decode_ring(const smm_mm_dims &d, const smm_epi_params &e,
                                         int sms, gpuStream_t stream, bool *done)
{
    const int nt = d.m <= 8 ? 8 : d.m <= 16 ? 16 : 32;
    const int64_t rt = (d.n + SMM_RING_BR - 1) / SMM_RING_BR;
    const int64_t nslot = (d.k + 255) / 256;

    *done = false;
    if (!smm_decode_wg_takes(d, rt))
        return gpuSuccess;
    int s = smm_ring_split(rt, sms);
    if (smm_decode_force_s > 0)
        s = smm_decode_force_s;
    if (s > nslot)
        s = nslot >= 2 ? 2 : 1;
    /* Each block's share of K's slots; of two blocks at M <= 16, block 0
     * (which finishes the elements after the other has added its sums and
     * left) takes max(1, share / 12) more, and block 1 the rest: at least
     * one slot and no more than block 0's, so the kernel's rule (share
     * each, the last block what is left) gives it exactly that. Measured
     * on an H200 (gpu-gemm-selftest --launch-cost, stream launches, B
     * static, us per launch, two runs each; one more slot / two more /
     * even shares): o (N = K = 4096, 8 slots each) M = 16 5.66-5.71 /
     * 5.80-5.83 / 5.93-6.00, M = 4 5.61-5.63 / 5.60-5.65 / 5.91-5.99; down
     * (N = 4096, K = 14336, 28 each) M = 16 15.22-15.26 / 15.17-15.19 /
     * 15.45-15.47, M = 4 15.04-15.06 / 14.80-14.84 / 15.24-15.25; at
     * M = 32 no faster (o 6.70-6.72 / 6.98-7.06 / 6.71-6.76). One slot
     * fewer was slower (o M = 16 6.19-6.21). */
    int share = (int)((nslot + s - 1) / s);
    if (s == 2 && nt <= 16) {
        share += share / 12 > 1 ? share / 12 : 1;
        share = share < nslot ? share : (int)nslot - 1;
    }
    /* One block per SM: the most slots; more: the most that let two
     * blocks share an SM (228 KiB of shared memory, 1 KiB of it the
     * system's per block). */
    int r = SMM_RING_MAX;
    if (rt * s > sms)
        while (r > 3 && 2 * (smm_ring_smem(nt, r) + 1024) > 228 * 1024)
            r--;
    if (smm_decode_force_stages > 0)
        r = smm_decode_force_stages;
    r = r > SMM_RING_MAX ? SMM_RING_MAX : r;
    r = r > share + 2 ? share + 2 : r;
    r = r < 3 ? 3 : r;
    *done = true;
    return nt == 8 ? smm_launch_ring_n<8>(d, e, rt, s, r, share, stream)
           : nt == 16 ? smm_launch_ring_n<16>(d, e, rt, s, r, share, stream)
                      : smm_launch_ring_n<32>(d, e, rt, s, r, share, stream);
}

/* M <= 32, rows of A and B 16-byte aligned: picks the row groups per block
 * (fewer re-reads of the tokens) and the blocks per cluster (enough blocks
 * for the SMs when N is small), then launches smm_decode_kernel. */
static gpuError_t smm_launch_decode(smm_mm_dims d, const smm_epi_params &e, int cc,
                                    int sms, gpuStream_t stream)
{
    const int tg = (int)((d.m + 7) / 8);
    const int64_t nb2 = (d.n + 31) / 32; /* blocks with two row groups */
    /* Measured on an H200 (132 SMs, Llama-3.1-8B shapes, M = 1, 16, 32):
     * for M > 8, two row groups pay once they still give a block to every
     * SM (for M <= 8 one group with 4 loads in flight was fastest), except
     * at M <= 16 with more than two such blocks per SM (N = 28672: one
     * group 7% faster); for M > 16 with fewer such blocks than SMs, two
     * groups in clusters of two blocks (half of K each; N = 4096,
     * K = 14336: 6% faster, K = 4096: no different; with B static, see
     * below); four groups (fewer registers for loads in flight) and the
     * other clusters were slower or no faster on those shapes. */
    const bool sm90 = smm_decode_have_cluster(cc); /* clusters and the wait */
    const int16_t b_static = d.b_static; /* as the caller gave it */
    int g = tg > 1 && nb2 >= (int64_t)sms && (tg > 2 || nb2 <= 2 * (int64_t)sms) ? 2 : 1;
    int s = 1;

    d.pdl = sm90 && smm_decode_pdl_allowed();
    /* A packed B (b_static) lets the kernel load its first weights before
     * its wait and launch its successor early (smm_decode_kernel). Measured
     * on an H200 against the same kernel without (graph of back-to-back
     * launches, weights rotating over 256 MiB): K = 4096, +3% to +13% at
     * M = 1, 16, 32 (qkv M = 32 2055 -> 2261 GB/s, o M = 16 2380 -> 2587),
     * except gate_up M = 16 -1%; K = 14336 (down), M = 1 16% slower. Only
     * up to K = 8192, then. */
    d.b_static = d.b_static && d.pdl && d.k <= 8192;
    /* Those clusters, except with B static and K <= 4096: there one
     * row group without a cluster, which lets the next launch start at its
     * first instruction (smm_decode_kernel), was faster on an H200 (stream
     * launches, weights rotating over 256 MiB, two runs each, us per
     * launch against clusters): o (N = K = 4096) M = 32 8.38-8.42 against
     * 8.68-8.74, M = 24 7.49-7.51 against 7.89-7.91; N = K = 2048 and
     * N = 3072, K = 4096 at M = 24 and 32 3-9% faster. At K = 8192
     * (N = 4096) the clusters were faster at M = 32 (13.72-13.87 against
     * 14.29-14.35) and 0.5-1% slower at M = 24 (12.52-12.69 against
     * 12.39-12.62). */
    if (tg > 2 && nb2 < (int64_t)sms && sm90 && !(d.b_static && d.k <= 4096))
        g = 2, s = 2;
    if (smm_decode_force_g > 0)
        g = smm_decode_force_g;
    if (smm_decode_force_s > 0)
        s = smm_decode_force_s;
    if (!sm90)
        s = 1;
    /* The shared-memory form of the decode kernel with B static (BS 2),
     * no cluster. One token group and one row group, where the grid leaves
     * every SM room for a block of the next launch (at most two of the
     * three blocks an SM holds at the form's largest size, where three
     * fit): the next launch, let start at once, then copies its weights
     * while this one computes. Measured on an H200 (graph of back-to-back
     * launches, weights rotating over 256 MiB, two sweeps each): o
     * (N = K = 4096, 256 blocks), M = 1, 2853-2890 -> 3187-3203 GB/s;
     * forced where the grid fills the SMs, 4-5% slower (qkv, N = 6144,
     * M = 1: 3529 -> 3369; gate_up 3900 -> 3704); with more token groups
     * and one row group (M > 8, three blocks per SM, registers spilled)
     * 20-50% slower (o M = 16 2588 -> 2032, M = 32 2003 -> 1018). More
     * token groups and two row groups, where two blocks fit an SM at the
     * form's 64 KiB and the grid is at most three blocks for every two
     * SMs (below): qkv
     * (N = 6144, 192 blocks), M = 16 2615 -> 2857-2867, M = 32 2259 ->
     * 2353-2368 (stream launches, three runs: 9.95 -> 9.32-9.42 us, 11.54 ->
     * 10.98-11.13 us); forced on gate_up's 896 blocks (N = 28672, M = 16)
     * 3525 -> 3153; o (N = 4096, 128 blocks, M = 16 and 32) 10-14% slower
     * than the launcher's choices there (one row group at M = 16, two in
     * clusters of two at M = 32: 2588 -> 2238, 2004 -> 1797),
     * and no faster with the form in clusters of two. (On GPUs with less
     * shared memory per SM the forms run only when the self-test forces
     * them.) */
    d.pre = 0;
    if (d.b_static && s == 1 && smm_decode_force_pre >= 0 && d.k >= 64) {
        int most = 0; /* the form's most steps */
        const int fit = smm_decode_pre_fit_tg(tg, g, &most);
        const int64_t nch = (d.k / 64 + SMM_DEC_WARPS - 1) / SMM_DEC_WARPS;
        const int64_t nb = (d.n + 16 * g - 1) / (16 * g);
        /* Two row groups: at most three blocks for every two SMs, so that
         * half the SMs hold one block of this grid and room for the next
         * launch's. Measured on an H200 (stream launches, B static, K =
         * 4096, two runs, us per launch, the form against the register
         * form): N = 8192 (256 blocks, more than 3 per 2 SMs) M = 16 11.50
         * against 11.15, M = 32 13.33-13.36 against 12.84-12.87; N = 7168
         * (224) M = 16 10.25 against 10.31-10.33, M = 32 12.09-12.10
         * against 11.97-12.00; N = 6144 (192, within) M = 16 9.24-9.28
         * against 9.86-9.87, M = 32 10.97-10.98 against 11.51-11.53;
         * N = 5120 (160) 8.38 against 9.55, 10.34 against 11.41. */
        const bool room = g == 1 ? nb <= 2 * (int64_t)sms && fit >= 3
                                 : 2 * nb <= 3 * (int64_t)sms && fit >= 2;
        if (fit >= 1 && (smm_decode_force_pre > 0 || room))
            d.pre = (int16_t)(nch < most ? nch : most);
    }
    /* The ring decode kernel (sm_90a): with B static (its first weights
     * copied before its wait) at M >= 4, and at M = 1..3 on layers of at
     * least 48 MiB of weights; with a raw B only at M = 9..16 on layers of
     * at least 48 MiB and at M = 25..32 on layers of at least 24 MiB.
     * Measured on an H200 (gpu-gemm-selftest --launch-cost: stream
     * launches, weights rotating over 256 MiB, median of 5 runs of 2000,
     * us per launch), B static, the launcher's choice before this rule
     * (the mma.sync decode kernel's forms at M <= 8 and M = 17..24, the
     * tensor-copy kernel on gate_up at M = 17..24; the ring kernel at
     * M = 9..16 and 25..32) against the ring kernel forced, two runs:
     * M = 1: o (N = K = 4096, 16 MiB) 5.87-5.92 against 5.91-6.01, qkv
     * (N = 6144, 24 MiB) 7.43-7.44 against 8.00-8.11, gate_up
     * (N = 28672, 112 MiB) 30.42-30.43 against 28.80-28.87, down
     * (N = 4096, K = 14336, 56 MiB) 16.71-16.72 against 15.44-15.52;
     * M = 8: o 6.48-6.52 against 5.89-5.91, qkv 7.71-7.72 against
     * 7.58-7.60, gate_up 31.23 against 27.51-27.56, down 17.31-17.36
     * against 15.04-15.06;
     * M = 24: o 7.43-7.45 against 6.91-6.95, qkv 10.36-10.37 against
     * 9.95-9.97, gate_up 34.52-34.66 against 34.59-34.61, down
     * 18.80-18.82 against 16.73-16.75; in a later run (one each, the
     * mma.sync decode kernel's forms against the ring kernel), M = 2: o
     * 6.03 against 5.97, qkv 7.57 against 7.73, gate_up 30.75 against
     * 28.41, down 16.73 against 15.17; M = 4: o 6.18 against 5.93, qkv
     * 7.64 against 7.55, gate_up 30.85 against 27.36, down 16.86 against
     * 15.12;
     * M = 16 and 32: the ring kernel, as before. With a raw B (measured
     * when the rule was first set, commit d95e63f: the same kind of run
     * with `raw`, the ring kernel forced against the mma.sync kernel's
     * forms), M = 32 / 16: o 9.26 against 8.88 /
     * 7.72 against 7.13, qkv 11.29 against 12.39 / 10.19 against 9.84,
     * gate_up 34.37 against 43.12 / 31.77 against 32.89, down 19.40
     * against 20.35 / 17.77 against 18.12; M = 8 and 24 slower or no
     * faster on every layer but gate_up at M = 8. */
    const int64_t wmib = d.n * d.k >> 20;
    const bool ring =
        smm_decode_force_kind == 3 ||
        (smm_decode_force_kind == 0 && smm_wgmma_allowed() && smm_tma_allowed() &&
         (b_static ? d.m >= 4 || wmib >= 48
                   : (d.m > 8 && d.m <= 16 && wmib >= 48) || (d.m > 24 && wmib >= 24)));
    if (ring && cc == 90 && smm_have_ring()) {
        smm_mm_dims dr = d;
        dr.b_static = b_static;
        bool done = false;
        gpuError_t err = smm_launch_decode_ring(dr, e, sms, stream, &done);
        if (done || err != gpuSuccess)
            return err;
    }
    /* The tensor-copy kernel reads the tokens a quarter as often per
     * weight byte at M > 16 (64 rows per block against 32); measured on
     * an H200 it was faster only with at least three blocks per SM and no
     * split of K (gate_up, N = 28672, M = 32: 3220-3250 against 2650-2690
     * GB/s) and
     * slower on the smaller layers (N = 4096 and 6144: 10-50%). */
    const bool dtma = smm_decode_force_kind == 2 ||
                      (smm_decode_force_kind == 0 && d.m > 16 && smm_wgmma_allowed() &&
                       smm_tma_allowed() &&
                       (d.n + SMM_DTMA_BR - 1) / SMM_DTMA_BR >= 3 * (int64_t)sms);
    if (dtma && cc == 90 && smm_have_dtma()) {
        bool done = false;
        gpuError_t err = smm_launch_decode_tma(d, e, sms, stream, &done);
        if (done || err != gpuSuccess)
            return err;
    }
    switch (tg) {
    case 1: return smm_launch_decode_tg<1>(d, e, g, s, stream);
    case 2: return smm_launch_decode_tg<2>(d, e, g, s, stream);
    case 3: return smm_launch_decode_tg<3>(d, e, g, s, stream);
    default: return smm_launch_decode_tg<4>(d, e, g, s, stream);
    }
}

#endif

gpuError_t smm_gpu_launch_mm(const smm_mm_problem *p, bool b_static, gpuStream_t stream)
{
    smm_mm_dims d;
    smm_epi_params e;

    d.a = p->a;
    d.b = p->b;
    d.m = p->m;
    d.n = p->n;
    d.k = p->k;
    d.lda = p->lda;
    d.ldb = p->ldb;
    d.pdl = 0;
    d.b_static = b_static;
    d.pre = 0;

    e.c = p->c;
    e.ldc = p->ldc;
    e.c_dtype = (int)p->c_dtype;
    e.scale_a = p->scale_a;
    e.scale_a_per_row = p->scale_a != NULL && p->scale_a_len != 1;
    e.scale_b = p->scale_b;
    e.scale_b_per_col = p->scale_b != NULL && p->scale_b_len != 1;
    e.bias = p->c_dtype == SMM_DTYPE_I32 ? NULL : p->bias;
    e.azp = p->c_dtype == SMM_DTYPE_I32 ? NULL : p->azp;
    e.azp_per_row = p->azp != NULL && p->azp_len != 1;

#if defined(SMM_GPU_NVIDIA)
    {
        int cc = 0, sms = 0;
        smm_device_info(&cc, &sms);
        if (cc >= 80 && !smm_force_generic()) {
            const bool al16 = smm_aligned(d.a, d.lda, d.m, 16) && smm_aligned(d.b, d.ldb, d.n, 16);
            if (al16 && d.m <= 32)
                return smm_launch_decode(d, e, cc, sms, stream);
            if (!al16)
                return smm_launch_mma<128, 128, 2, 4, 3, false>(d, e, stream);
            /* 128 x 256 tiles when they still fill the device. */
            if (((d.m + 127) / 128) * ((d.n + 255) / 256) >= (int64_t)sms) {
                if (cc == 90 && smm_wgmma_allowed() && smm_tma_allowed() && smm_have_tma()) {
                    bool done = false;
                    gpuError_t err = smm_launch_tma(d, e, sms, stream, &done);
                    if (done || err != gpuSuccess)
                        return err;
                }
                if (cc == 90 && smm_wgmma_allowed() && smm_have_wgmma())
                    return smm_launch_wgmma(d, e, stream);
                return smm_launch_mma<128, 256, 2, 4, 4, true>(d, e, stream);
            }
            return smm_launch_mma<128, 128, 2, 4, 4, true>(d, e, stream);
        }
    }
    return smm_launch_generic(d, e, stream);
#else
    {
        const int64_t mt = (d.m + SMM_AMD_BM - 1) / SMM_AMD_BM;
        const int64_t nt = (d.n + SMM_AMD_BN - 1) / SMM_AMD_BN;
        const int al16 =
            smm_aligned(d.a, d.lda, d.m, 16) && smm_aligned(d.b, d.ldb, d.n, 16);
        if (smm_force_generic())
            return smm_launch_generic(d, e, stream);
        if (mt * nt > INT32_MAX)
            return gpuErrorInvalidValue;
        smm_amd_kernel<<<(unsigned)(mt * nt), SMM_AMD_THREADS, 0, stream>>>(d, e, (int)mt, al16);
        return gpuGetLastError();
    }
#endif
}
