/*
 * gemm_mfma.hip - the AMD kernel: a 128 x 128 tile through shared memory,
 * multiplied with v_mfma_i32_32x32x16_i8 (gfx940-942) or
 * v_mfma_i32_32x32x8i8 (gfx908, gfx90a) using the lane maps of
 * mfma_layout.h, or sdot4 / plain code on other AMD GPUs (chosen by the
 * __gfx*__ macros when the code object is compiled). Empty in an NVIDIA
 * build.
 */
#include "launch.h"
#include "mfma_layout.h"

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

gpuError_t smm_launch_mfma(const smm_mm_dims &d, const smm_epi_params &e, gpuStream_t stream)
{
    const int64_t mt = (d.m + SMM_AMD_BM - 1) / SMM_AMD_BM;
    const int64_t nt = (d.n + SMM_AMD_BN - 1) / SMM_AMD_BN;
    const int al16 = smm_aligned(d.a, d.lda, d.m, 16) && smm_aligned(d.b, d.ldb, d.n, 16);

    if (mt * nt > INT32_MAX)
        return gpuErrorInvalidValue;
    smm_amd_kernel<<<(unsigned)(mt * nt), SMM_AMD_THREADS, 0, stream>>>(d, e, (int)mt, al16);
    return gpuGetLastError();
}

#endif /* SMM_GPU_AMD */
