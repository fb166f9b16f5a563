/*
 * gemm_generic.hip - the generic kernel, for every GPU, shape and stride:
 * a 64 x 64 tile, bytes staged through shared memory with guarded loads,
 * 4-byte dot products (dp4a on NVIDIA sm_61+, sdot4 on AMD GPUs that have
 * it, plain multiply-adds elsewhere; smm_dot4 in device_common.h).
 */
#include "launch.h"

#define SMM_GEN_BM 64
#define SMM_GEN_BN 64
#define SMM_GEN_BKW 8 /* K step in 4-byte words (32 bytes) */

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

gpuError_t smm_launch_generic(const smm_mm_dims &d, const smm_epi_params &e,
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