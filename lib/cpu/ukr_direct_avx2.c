/*
 * ukr_direct_avx2.c - the AVX2 level's microkernel with B read in place
 * (smm_cpu_ukr_direct_fn, cpu_internal.h): up to 3 rows of the packed
 * int16 A against 4 int8 rows of B, 16 k a step in AVX2 intrinsics.
 *
 * Per step each B row is loaded once and widened (vpmovsxbw), then
 * multiplied with each row of A (vpmaddwd, A read as a memory operand:
 * from L2 for the first B row, L1 for the other three) and summed into
 * that pair's 8 int32 lanes (vpaddd): 12 accumulators, one B vector and
 * one product in registers, so nothing spills (doc/design.md). The next
 * B lines are prefetched, since small M reads B from memory in this
 * kernel alone.
 *
 * Exactness as the portable kernel: each lane sums at most kc / 8 products
 * of int8 values (|a * b| <= 2^14), kc <= 131071, so no lane and no total
 * overflows int32; the totals are added to acc modulo 2^32. The k % 16
 * last products are summed by scalar code.
 */
#pragma GCC optimize("O3")

#include "config.h"
#include "cpu/cpu_internal.h"

#ifdef SMM_HAVE_AVX2_BUILD
#include <immintrin.h>
#include <stdint.h>

#define VATTR static inline __attribute__((always_inline, target("avx2,fma")))

VATTR int32_t hsum8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* One B row's step: widen its 16 bytes at k, then the products with each
 * row of A, summed into that row's accumulator for column j. The empty asm
 * keeps gcc from loading all four B vectors first: with one of them live
 * the 12 accumulators stay in registers. */
#define DIRECT_STEP(j, c0, c1, c2)                                                        \
    do {                                                                                  \
        const __m256i b_ = _mm256_cvtepi8_epi16(                                          \
            _mm_loadu_si128((const __m128i *)(brow[j] + k)));                             \
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(b_, _mm256_loadu_si256(               \
                                                        (const __m256i *)(a0 + k))));     \
        if (mr > 1)                                                                       \
            c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(b_, _mm256_loadu_si256(           \
                                                            (const __m256i *)(a1 + k)))); \
        if (mr > 2)                                                                       \
            c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(b_, _mm256_loadu_si256(           \
                                                            (const __m256i *)(a2 + k)))); \
        __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2));                              \
    } while (0)

/* acc[i][j] += the lanes of c plus the scalar products of the tail. */
VATTR void direct_finish(__m256i c, const int16_t *ai, const int8_t *bj, int64_t k, int64_t kc,
                         uint32_t *acc)
{
    int32_t s = hsum8(c);
    for (int64_t t = k; t < kc; t++)
        s += (int32_t)ai[t] * (int32_t)bj[t];
    *acc += (uint32_t)s;
}

VATTR void direct_body(const int mr, int64_t kc, const int16_t *a, int64_t lda,
                       const int8_t *const *brow, uint32_t *acc, int64_t ldacc)
{
    const int16_t *a0 = a, *a1 = a + (mr > 1 ? lda : 0), *a2 = a + (mr > 2 ? 2 * lda : 0);
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
    __m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m256i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        if ((k & 63) == 0)
            for (int j = 0; j < SMM_CPU_NR; j++)
                /* The address may lie past the row's end: formed as an
                 * integer, since a pointer there would be out of its object.
                 * A prefetch never faults. */
                _mm_prefetch((const char *)((uintptr_t)(brow[j] + k) + SMM_CPU_DIRECT_PREFETCH),
                             _MM_HINT_T0);
        DIRECT_STEP(0, c00, c10, c20);
        DIRECT_STEP(1, c01, c11, c21);
        DIRECT_STEP(2, c02, c12, c22);
        DIRECT_STEP(3, c03, c13, c23);
    }
    const __m256i c[3][SMM_CPU_NR] = {{c00, c01, c02, c03}, {c10, c11, c12, c13},
                                      {c20, c21, c22, c23}};
    const int16_t *ar[3] = {a0, a1, a2};
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < SMM_CPU_NR; j++)
            direct_finish(c[i][j], ar[i], brow[j], k, kc, acc + i * ldacc + j);
}

SMM_TARGET_AVX2 void smm_cpu_ukr_direct1_avx2(int64_t kc, const int16_t *a, int64_t lda,
                                              const int8_t *const *brow, uint32_t *acc,
                                              int64_t ldacc)
{
    direct_body(1, kc, a, lda, brow, acc, ldacc);
}

SMM_TARGET_AVX2 void smm_cpu_ukr_direct2_avx2(int64_t kc, const int16_t *a, int64_t lda,
                                              const int8_t *const *brow, uint32_t *acc,
                                              int64_t ldacc)
{
    direct_body(2, kc, a, lda, brow, acc, ldacc);
}

SMM_TARGET_AVX2 void smm_cpu_ukr_direct3_avx2(int64_t kc, const int16_t *a, int64_t lda,
                                              const int8_t *const *brow, uint32_t *acc,
                                              int64_t ldacc)
{
    direct_body(3, kc, a, lda, brow, acc, ldacc);
}
#endif
