/*
 * kernels_avx512_vnni.c - the AVX-512 VNNI level: vpdpbusd on zmm.
 *
 * Compiled with a per-function target attribute, so the library carries
 * this level whatever the build's -march; cpu_backend.c selects it only
 * when CPUID reports avx512f, avx512bw, avx512vl and avx512_vnni (plus
 * avx2 and fma) and XGETBV shows that the OS saves the opmask and ZMM
 * state. The data flow (layouts, +128 shift, compensation) is gemm_vnni.c's
 * and cpu_internal.h's; kernels_vnni_emulated.c is its portable twin, run
 * through the same tests on any CPU.
 *
 * Exactness: _mm512_dpbusd_epi32 (vpdpbusd, not the saturating vpdpbusds)
 * adds, per 32-bit lane, the exact sum of four u8 x s8 products (within
 * +-130560) to the lane with a wrapping int32 add: the lanes are sums
 * modulo 2^32, as the contract's accumulator, at every K.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#if defined(SMM_HAVE_AVX2_BUILD) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define SMM_BUILD_AVX512_VNNI 1
#endif

#ifdef SMM_BUILD_AVX512_VNNI
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KATTR static inline __attribute__((always_inline, target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Every loop over the register block is unrolled completely (the bounds
 * are constants at each instance), so that the accumulator arrays are
 * scalarized into registers instead of living on the stack. */
#define UNROLL_ALL _Pragma("GCC unroll 16")

/* c + dpbusd(a, b), as _mm512_dpbusd_epi32. Written as an instruction with
 * the accumulator tied to its output: gcc (12, 13) otherwise copies every
 * accumulator twice per step around the intrinsic (two register moves per
 * vpdpbusd in the hot loops). */
KATTR __m512i dpbusd(__m512i c, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));
    return c;
}

/* The 4 bytes a + 4q broadcast to every lane. */
KATTR __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/*
 * MR rows x NP panels of 16 columns: accumulator c[i][p] lane j is
 * (row i, column p * 16 + j). Per quad: NP loads of 64 bytes of B (and NP
 * prefetches, SMM_CPU_VNNI_PF_BYTES ahead), MR broadcasts of 4 bytes of
 * A', MR * NP vpdpbusd. MR, NP and FAR are constants
 * at every call, so the arrays live in registers. With FAR (above 8 rows:
 * one panel, up to 16 rows, 16 accumulators, the small-M path's single
 * pass over B; and panel_far's calls) each quad also asks for the line
 * SMM_CPU_VNNI_PF_FAR_BYTES ahead, into L2.
 */
KATTR void panel_tile(const int MR, const int NP, const int FAR, int64_t kq, const uint8_t *a,
                      int64_t lda, const int8_t *b, int64_t ldbp, uint32_t *acc, int64_t ldacc)
{
    __m512i c[SMM_CPU_VNNI512_DMR][SMM_CPU_VNNI512_NP];
    UNROLL_ALL for (int i = 0; i < MR; i++)
        UNROLL_ALL for (int p = 0; p < NP; p++)
            c[i][p] = _mm512_setzero_si512();
    for (int64_t q = 0; q < kq; q++) {
        __m512i bv[SMM_CPU_VNNI512_NP];
        UNROLL_ALL for (int p = 0; p < NP; p++) {
#if SMM_CPU_VNNI_PF_BYTES > 0
            _mm_prefetch((const char *)(b + p * ldbp + q * 64 + SMM_CPU_VNNI_PF_BYTES), SMM_CPU_VNNI_PF_HINT);
#endif
#if SMM_CPU_VNNI_PF_FAR_BYTES > 0
            if (FAR)
                _mm_prefetch((const char *)(b + p * ldbp + q * 64 + SMM_CPU_VNNI_PF_FAR_BYTES), _MM_HINT_T1);
#endif
            bv[p] = _mm512_loadu_si512((const void *)(b + p * ldbp + q * 64));
        }
        UNROLL_ALL for (int i = 0; i < MR; i++) {
            const __m512i av = bcast4(a + i * lda + 4 * q);
            UNROLL_ALL for (int p = 0; p < NP; p++)
                c[i][p] = dpbusd(c[i][p], av, bv[p]);
        }
    }
    UNROLL_ALL for (int i = 0; i < MR; i++)
        UNROLL_ALL for (int p = 0; p < NP; p++) {
            uint32_t *d = acc + i * ldacc + p * 16;
            __m512i old = _mm512_loadu_si512((const void *)d);
            _mm512_storeu_si512((void *)d, _mm512_add_epi32(old, c[i][p]));
        }
}

#define PANEL_CASE(MR_, NP_, FAR_)                                             \
    case (MR_) * 4 + (NP_):                                                    \
        panel_tile(MR_, NP_, (FAR_) || (MR_) > SMM_CPU_VNNI512_MR, kq, a, lda, b, \
                   ldbp, acc, ldacc);                                          \
        break;

#define PANEL_CASES(FAR_)                                                      \
    PANEL_CASE(1, 1, FAR_) PANEL_CASE(2, 1, FAR_) PANEL_CASE(3, 1, FAR_)       \
    PANEL_CASE(4, 1, FAR_) PANEL_CASE(5, 1, FAR_) PANEL_CASE(6, 1, FAR_)       \
    PANEL_CASE(7, 1, FAR_) PANEL_CASE(8, 1, FAR_) PANEL_CASE(9, 1, FAR_)       \
    PANEL_CASE(10, 1, FAR_) PANEL_CASE(11, 1, FAR_) PANEL_CASE(12, 1, FAR_)    \
    PANEL_CASE(13, 1, FAR_) PANEL_CASE(14, 1, FAR_) PANEL_CASE(15, 1, FAR_)    \
    PANEL_CASE(16, 1, FAR_) PANEL_CASE(1, 2, FAR_) PANEL_CASE(2, 2, FAR_)      \
    PANEL_CASE(3, 2, FAR_) PANEL_CASE(4, 2, FAR_) PANEL_CASE(5, 2, FAR_)       \
    PANEL_CASE(6, 2, FAR_) PANEL_CASE(7, 2, FAR_) PANEL_CASE(8, 2, FAR_)

_Static_assert(SMM_CPU_VNNI512_MR == 8 && SMM_CPU_VNNI512_NP == 2 && SMM_CPU_VNNI512_DMR == 16,
               "the cases of PANEL_CASES");

static __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))) void
panel(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b, int64_t ldbp, int np,
      uint32_t *acc, int64_t ldacc)
{
    switch (mr * 4 + np) {
    PANEL_CASES(0)
    default:
        break;
    }
}

/* panel with the far L2 prefetch at every row count (smm_cpu_vnni_kernels'
 * panel_far). */
static __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))) void
panel_far(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b, int64_t ldbp,
          int np, uint32_t *acc, int64_t ldacc)
{
    switch (mr * 4 + np) {
    PANEL_CASES(1)
    default:
        break;
    }
}

/* acc[0 .. 3] += the sums of the 16 lanes of c0 .. c3, modulo 2^32 (a
 * transposing reduction: one 128-bit result instead of four scalar sums). */
KATTR void hsum4_add(__m512i c0, __m512i c1, __m512i c2, __m512i c3, uint32_t *acc)
{
    /* Per 128-bit block: [c0 0+2, c1 0+2, c0 1+3, c1 1+3], same for c2, c3. */
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(c0, c1), _mm512_unpackhi_epi32(c0, c1));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(c2, c3), _mm512_unpackhi_epi32(c2, c3));
    /* Per 128-bit block: [c0, c1, c2, c3] partial sums. */
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    __m128i old = _mm_loadu_si128((const __m128i *)acc);
    _mm_storeu_si128((__m128i *)acc, _mm_add_epi32(old, x));
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
 * RMR rows of A' against 4 rows of B, 64 bytes of K per step; the last
 * step loads B with a byte mask (bytes past kc read as 0 and never touch
 * memory), A' rows are zero-padded to a multiple of 64. Lanes are summed
 * at the end (the sum of the lanes modulo 2^32 is the sum over K). At
 * RMR = 6: 24 accumulators, 4 vectors of B and one of A' in the 32 zmm
 * registers; every loop over the block is unrolled so that they stay there.
 */
KATTR void rowdot_tile(const int RMR, int64_t kc, const uint8_t *a, int64_t lda,
                       const int8_t *const *brow, const int8_t *const *pf, int npf,
                       uint32_t *acc, int64_t ldacc)
{
    const int8_t *p0 = npf > 0 ? pf[0] : NULL, *p1 = npf > 1 ? pf[1] : NULL;
    const int8_t *p2 = npf > 2 ? pf[2] : NULL, *p3 = npf > 3 ? pf[3] : NULL;
    __m512i c[SMM_CPU_VNNI512_RMR][4];
    const int8_t *b0 = brow[0], *b1 = brow[1], *b2 = brow[2], *b3 = brow[3];
    UNROLL_ALL for (int i = 0; i < RMR; i++)
        UNROLL_ALL for (int j = 0; j < 4; j++)
            c[i][j] = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 64 <= kc; k += 64) {
        prefetch_rows(p0, p1, p2, p3, npf, k);
        __m512i bv[4];
        bv[0] = _mm512_loadu_si512((const void *)(b0 + k));
        bv[1] = _mm512_loadu_si512((const void *)(b1 + k));
        bv[2] = _mm512_loadu_si512((const void *)(b2 + k));
        bv[3] = _mm512_loadu_si512((const void *)(b3 + k));
        UNROLL_ALL for (int i = 0; i < RMR; i++) {
            const __m512i av = _mm512_loadu_si512((const void *)(a + i * lda + k));
            UNROLL_ALL for (int j = 0; j < 4; j++)
                c[i][j] = dpbusd(c[i][j], av, bv[j]);
        }
    }
    if (k < kc) {
        const __mmask64 m = ((__mmask64)1 << (kc - k)) - 1;   /* kc - k in 1 .. 63 */
        __m512i bv[4];
        bv[0] = _mm512_maskz_loadu_epi8(m, (const void *)(b0 + k));
        bv[1] = _mm512_maskz_loadu_epi8(m, (const void *)(b1 + k));
        bv[2] = _mm512_maskz_loadu_epi8(m, (const void *)(b2 + k));
        bv[3] = _mm512_maskz_loadu_epi8(m, (const void *)(b3 + k));
        UNROLL_ALL for (int i = 0; i < RMR; i++) {
            const __m512i av = _mm512_loadu_si512((const void *)(a + i * lda + k));
            UNROLL_ALL for (int j = 0; j < 4; j++)
                c[i][j] = dpbusd(c[i][j], av, bv[j]);
        }
    }
    UNROLL_ALL for (int i = 0; i < RMR; i++)
        hsum4_add(c[i][0], c[i][1], c[i][2], c[i][3], acc + i * ldacc);
}

static __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))) void
rowdot(int64_t kc, const uint8_t *a, int64_t lda, int mr, const int8_t *const *brow,
       const int8_t *const *pf, int npf, uint32_t *acc, int64_t ldacc)
{
    _Static_assert(SMM_CPU_VNNI512_RMR == 6, "cases below");
    switch (mr) {
    case 1: rowdot_tile(1, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 2: rowdot_tile(2, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 3: rowdot_tile(3, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 4: rowdot_tile(4, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 5: rowdot_tile(5, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    case 6: rowdot_tile(6, kc, a, lda, brow, pf, npf, acc, ldacc); break;
    default: break;
    }
}

const smm_cpu_vnni_kernels smm_cpu_vnni_avx512_kernels = {
    "avx512_vnni", SMM_CPU_VNNI512_FORMAT, 16, SMM_CPU_VNNI512_MR, SMM_CPU_VNNI512_NP,
    SMM_CPU_VNNI512_DMR, SMM_CPU_VNNI512_RMR, panel, rowdot, NULL, 0, 1, panel_far,
};
const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx512 = &smm_cpu_vnni_avx512_kernels;
#else
const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx512 = NULL;
#endif
