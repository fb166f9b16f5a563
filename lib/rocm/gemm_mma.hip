/*
 * gemm_mma.hip - the NVIDIA sm_80+ tiled kernel: mma.sync m16n8k32 s8
 * (inline PTX), BM x BN block tile, K step 64, 8 warps, cp.async
 * multi-stage pipeline, ldmatrix from XOR-swizzled shared memory; rows
 * that are not 16-byte aligned are loaded with guarded byte loads instead
 * of cp.async. Empty in an AMD build.
 */
#include "launch.h"

#if defined(SMM_GPU_NVIDIA)

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

template <int BM, int BN, int WM, int WN, int STAGES, bool ASYNC>
static gpuError_t smm_launch_mma_t(const smm_mm_dims &d, const smm_epi_params &e,
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

gpuError_t smm_launch_mma(const smm_mm_dims &d, const smm_epi_params &e, smm_mma_form form,
                          gpuStream_t stream)
{
    switch (form) {
    case SMM_MMA_128X128_GUARDED: return smm_launch_mma_t<128, 128, 2, 4, 3, false>(d, e, stream);
    case SMM_MMA_128X256: return smm_launch_mma_t<128, 256, 2, 4, 4, true>(d, e, stream);
    default: return smm_launch_mma_t<128, 128, 2, 4, 4, true>(d, e, stream);
    }
}

#endif /* SMM_GPU_NVIDIA */
