/*
 * kernels_avx_vnni.c - the AVX-VNNI level: the VEX-encoded vpdpbusd on ymm.
 *
 * Compiled with a per-function target attribute, so the library carries
 * this level whatever the build's -march; cpu_backend.c selects it only
 * when CPUID reports avx_vnni, avx2 and fma and XGETBV shows that the OS
 * saves the YMM state. The data flow (layouts, +128 shift, compensation)
 * is gemm_vnni.c's and cpu_internal.h's; kernels_vnni_emulated.c is its
 * portable twin, run through the same tests on any CPU.
 *
 * Exactness: _mm256_dpbusd_avx_epi32 (vpdpbusd, not the saturating
 * vpdpbusds) adds, per 32-bit lane, the exact sum of four u8 x s8 products
 * (within +-130560) to the lane with a wrapping int32 add: the lanes are
 * sums modulo 2^32, as the contract's accumulator, at every K.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#if defined(SMM_HAVE_AVX2_BUILD) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define SMM_BUILD_AVX_VNNI 1
#endif

#ifdef SMM_BUILD_AVX_VNNI
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KATTR static inline __attribute__((always_inline, target("avx2,fma,avxvnni")))

/* Every loop over the register block is unrolled completely (the bounds
 * are constants at each instance), so that the accumulator arrays are
 * scalarized into registers instead of living on the stack. */
#define UNROLL_ALL _Pragma("GCC unroll 16")

/* c + dpbusd(a, b), as _mm256_dpbusd_avx_epi32. Written as the instruction
 * with the accumulator tied to its output: gcc (12, 13) otherwise copies
 * every accumulator twice per step around the intrinsic. */
KATTR __m256i dpbusd(__m256i c, __m256i a, __m256i b)
{
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(c) : "x"(a), "x"(b));
    return c;
}

/* The 4 bytes at p broadcast to every lane. */
KATTR __m256i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* The sum of the 8 lanes, modulo 2^32 (vpaddd wraps). */
KATTR uint32_t hsum(__m256i v)
{
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(x);
}

/*
 * MR rows x NP panels of 8 columns: accumulator c[i][p] lane j is
 * (row i, column p * 8 + j). Per quad: NP loads of 32 bytes of B, MR
 * broadcasts of 4 bytes of A', MR * NP vpdpbusd (12 + 2 + 1 of the 16
 * ymm registers at 6 x 2).
 */
KATTR void panel_tile(const int MR, const int NP, int64_t kq, const uint8_t *a, int64_t lda,
                      const int8_t *b, int64_t ldbp, uint32_t *acc, int64_t ldacc)
{
    __m256i c[SMM_CPU_VNNI256_MR][SMM_CPU_VNNI256_NP];
    UNROLL_ALL for (int i = 0; i < MR; i++)
        UNROLL_ALL for (int p = 0; p < NP; p++)
            c[i][p] = _mm256_setzero_si256();
    for (int64_t q = 0; q < kq; q++) {
        __m256i bv[SMM_CPU_VNNI256_NP];
        UNROLL_ALL for (int p = 0; p < NP; p++) {
#if SMM_CPU_VNNI_PF_BYTES > 0
            /* one line per two quads */
            if ((q & 1) == 0)
                _mm_prefetch((const char *)(b + p * ldbp + q * 32 + SMM_CPU_VNNI_PF_BYTES),
                             SMM_CPU_VNNI_PF_HINT);
#endif
            bv[p] = _mm256_loadu_si256((const __m256i *)(b + p * ldbp + q * 32));
        }
        UNROLL_ALL for (int i = 0; i < MR; i++) {
            const __m256i av = bcast4(a + i * lda + 4 * q);
            UNROLL_ALL for (int p = 0; p < NP; p++)
                c[i][p] = dpbusd(c[i][p], av, bv[p]);
        }
    }
    UNROLL_ALL for (int i = 0; i < MR; i++)
        UNROLL_ALL for (int p = 0; p < NP; p++) {
            uint32_t *d = acc + i * ldacc + p * 8;
            __m256i old = _mm256_loadu_si256((const __m256i *)d);
            _mm256_storeu_si256((__m256i *)d, _mm256_add_epi32(old, c[i][p]));
        }
}

#define PANEL_CASE(MR_, NP_)                                                   \
    case (MR_) * 4 + (NP_):                                                    \
        panel_tile(MR_, NP_, kq, a, lda, b, ldbp, acc, ldacc);                 \
        break;

static __attribute__((target("avx2,fma,avxvnni"))) void
panel(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b, int64_t ldbp, int np,
      uint32_t *acc, int64_t ldacc)
{
    _Static_assert(SMM_CPU_VNNI256_MR == 6 && SMM_CPU_VNNI256_NP == 2, "cases below");
    switch (mr * 4 + np) {
    PANEL_CASE(1, 1) PANEL_CASE(2, 1) PANEL_CASE(3, 1)
    PANEL_CASE(4, 1) PANEL_CASE(5, 1) PANEL_CASE(6, 1)
    PANEL_CASE(1, 2) PANEL_CASE(2, 2) PANEL_CASE(3, 2)
    PANEL_CASE(4, 2) PANEL_CASE(5, 2) PANEL_CASE(6, 2)
    default:
        break;
    }
}

/* Asks for the cache line at offset k of each of the npf rows (a hint;
 * the lines go to L2: they are read by the next calls, not this one). */
KATTR void prefetch_rows(const int8_t *p0, const int8_t *p1, const int8_t *p2, const int8_t *p3,
                         int npf, int64_t k)
{
    if (npf > 0)
        _mm_prefetch((const char *)(p0 + k), _MM_HINT_T1);
    if (npf > 1)
        _mm_prefetch((const char *)(p1 + k), _MM_HINT_T1);
    if (npf > 2)
        _mm_prefetch((const char *)(p2 + k), _MM_HINT_T1);
    if (npf > 3)
        _mm_prefetch((const char *)(p3 + k), _MM_HINT_T1);
}

/*
 * RMR rows of A' against 4 rows of B, 32 bytes of K per step; the last
 * step copies B's remaining bytes into a zeroed buffer (AVX2 has no byte
 * mask loads), A' rows are zero-padded to a multiple of 64. Lanes are
 * summed at the end (the sum of the lanes modulo 2^32 is the sum over K).
 */
KATTR void rowdot_tile(const int RMR, int64_t kc, const uint8_t *a, int64_t lda,
                       const int8_t *const *brow, const int8_t *const *pf, int npf,
                       uint32_t *acc, int64_t ldacc)
{
    const int8_t *p0 = npf > 0 ? pf[0] : NULL, *p1 = npf > 1 ? pf[1] : NULL;
    const int8_t *p2 = npf > 2 ? pf[2] : NULL, *p3 = npf > 3 ? pf[3] : NULL;
    __m256i c[SMM_CPU_VNNI256_RMR][4];
    UNROLL_ALL for (int i = 0; i < RMR; i++)
        UNROLL_ALL for (int j = 0; j < 4; j++)
            c[i][j] = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= kc; k += 32) {
        if ((k & 63) == 0)
            prefetch_rows(p0, p1, p2, p3, npf, k);
        __m256i bv[4];
        UNROLL_ALL for (int j = 0; j < 4; j++)
            bv[j] = _mm256_loadu_si256((const __m256i *)(brow[j] + k));
        UNROLL_ALL for (int i = 0; i < RMR; i++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(a + i * lda + k));
            UNROLL_ALL for (int j = 0; j < 4; j++)
                c[i][j] = dpbusd(c[i][j], av, bv[j]);
        }
    }
    if (k < kc) {
        __m256i bv[4];
        UNROLL_ALL for (int j = 0; j < 4; j++) {
            int8_t t[32] = {0};
            memcpy(t, brow[j] + k, (size_t)(kc - k));
            bv[j] = _mm256_loadu_si256((const __m256i *)t);
        }
        UNROLL_ALL for (int i = 0; i < RMR; i++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(a + i * lda + k));
            UNROLL_ALL for (int j = 0; j < 4; j++)
                c[i][j] = dpbusd(c[i][j], av, bv[j]);
        }
    }
    UNROLL_ALL for (int i = 0; i < RMR; i++)
        UNROLL_ALL for (int j = 0; j < 4; j++)
            acc[i * ldacc + j] += hsum(c[i][j]);
}

static __attribute__((target("avx2,fma,avxvnni"))) void
rowdot(int64_t kc, const uint8_t *a, int64_t lda, int mr, const int8_t *const *brow,
       const int8_t *const *pf, int npf, uint32_t *acc, int64_t ldacc)
{
    _Static_assert(SMM_CPU_VNNI256_RMR == 2, "cases below");
    switch (mr) {
    case 1: rowdot_tile(1, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 2: rowdot_tile(2, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    default: break;
    }
}

static const smm_cpu_vnni_kernels table = {
    "avx_vnni", SMM_CPU_VNNI256_FORMAT, 8, SMM_CPU_VNNI256_MR, SMM_CPU_VNNI256_NP,
    SMM_CPU_VNNI256_DMR, SMM_CPU_VNNI256_RMR, panel, rowdot, NULL, 0, 1, NULL,
};
const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx = &table;
#else
const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx = NULL;
#endif
