/*
 * epilogue_avx2.c - the fused epilogue of the AVX2 and VNNI levels, 8
 * outputs per step in AVX2 + FMA intrinsics.
 *
 * The same per-element formula as gemm.c's portable epilogue
 * (doc/numerics.md, "Epilogue"), written out instruction by instruction so
 * that its speed does not depend on what a compiler's vectorizer makes of
 * the portable loop:
 *   v = acc - z * colsum            vpmulld, vpsubd (modulo 2^32)
 *   t = (float)v * sb               vcvtdq2ps, vmulps (round to nearest)
 *   y = sa * t                      vmulps
 *     | fma(sa, t, bias)            vfmadd (one rounding, as fmaf)
 *     | fma(sa, t, +0.0f)           (with azp and no bias)
 *   C = the output type's conversion: the integer bit manipulations of
 *       smm_cpu_to_bf16 / smm_cpu_to_f16 / the f32 NaN rule
 *       (cpu_internal.h), lane by lane.
 * Every vector operation above is the correctly rounded IEEE operation in
 * the contract's environment (round to nearest, no FTZ/DAZ), so each lane
 * is bit for bit the scalar result; the n % 8 last outputs are computed
 * by the scalar code itself (smm_cpu_epi_value). Contraction is off
 * (-ffp-contract=off); the only fma is the explicit one.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#ifdef SMM_HAVE_AVX2_BUILD
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ATTR __attribute__((target("avx2,fma")))
#define VATTR static inline __attribute__((always_inline, target("avx2,fma")))

/* Lanes where the binary32 bits u are a NaN: |u| > 0x7F800000 (both sides
 * below 2^31, so the signed compare is the unsigned one). */
VATTR __m256i nan_mask(__m256i u)
{
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    return _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
}

/* smm_cpu_to_bf16, lane by lane; the results in the low 16 bits. */
VATTR __m256i to_bf16(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    r = _mm256_srli_epi32(r, 16);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF), nan_mask(u));
}

/* smm_cpu_to_f16, lane by lane (the same selections; vpsrlvd / vpsllvd
 * take the per-lane shift). */
VATTR __m256i to_f16(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i one = _mm256_set1_epi32(1);

    __m256i rn = _mm256_sub_epi32(a, _mm256_set1_epi32(0x38000000));
    rn = _mm256_add_epi32(rn, _mm256_add_epi32(_mm256_set1_epi32(0x0FFF),
                                               _mm256_and_si256(_mm256_srli_epi32(rn, 13), one)));
    rn = _mm256_srli_epi32(rn, 13);

    const __m256i e = _mm256_srli_epi32(a, 23);
    const __m256i m = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)),
                                      _mm256_set1_epi32(0x800000));
    __m256i sh = _mm256_sub_epi32(_mm256_set1_epi32(126), e);
    sh = _mm256_min_epu32(sh, _mm256_set1_epi32(31));
    sh = _mm256_or_si256(sh, _mm256_and_si256(_mm256_cmpeq_epi32(sh, _mm256_setzero_si256()), one));
    const __m256i half = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(sh, one)), one);
    __m256i rs = _mm256_add_epi32(m, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srlv_epi32(m, sh), one)));
    rs = _mm256_srlv_epi32(rs, sh);

    const __m256i is_normal = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x38800000 - 1));
    const __m256i is_zero = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x33000000), a);
    const __m256i is_inf = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x477FF000 - 1));
    const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i r = _mm256_blendv_epi8(rs, rn, is_normal);
    r = _mm256_andnot_si256(is_zero, r);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7C00), is_inf);
    r = _mm256_or_si256(r, sign);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF), is_nan);
}

/* The low 16 bits of the 8 lanes (each 0 .. 0xFFFF), stored as 8 uint16. */
VATTR void store_u16x8(uint16_t *c, __m256i r)
{
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)c, p);
}

/* y for outputs j .. j+7. */
VATTR __m256 vec_y(const uint32_t *acc, const uint32_t *colsum, __m256i z, __m256 sa,
                   const float *sbp, int pc_b, const float *bias, int has_azp, int64_t j)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(acc + j));
    if (has_azp)
        v = _mm256_sub_epi32(v, _mm256_mullo_epi32(z, _mm256_loadu_si256((const __m256i *)(colsum + j))));
    const __m256 sb = pc_b ? _mm256_loadu_ps(sbp + j) : _mm256_broadcast_ss(sbp);
    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(v), sb);
    if (bias)
        return _mm256_fmadd_ps(sa, t, _mm256_loadu_ps(bias + j));
    if (has_azp)
        return _mm256_fmadd_ps(sa, t, _mm256_setzero_ps());
    return _mm256_mul_ps(sa, t);
}

/* The loop over one row for one case of (per-channel, bias, azp, type):
 * the flags are constants at every instance below. */
VATTR void row(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
               const uint32_t *restrict acc, const uint32_t *restrict colsum, const int pc_b,
               const int has_bias, const int has_azp, const smm_dtype dt)
{
    const float sa1 = e->scale_a[e->scale_a_len == 1 ? 0 : m];
    const float *sbp = e->scale_b + (pc_b ? j0 : 0);
    const float *bias = has_bias ? e->bias + j0 : NULL;
    const uint32_t z1 = has_azp ? (uint32_t)e->azp[e->azp_len == 1 ? 0 : m] : 0u;
    const __m256 sa = _mm256_set1_ps(sa1);
    const __m256i z = _mm256_set1_epi32((int32_t)z1);
    int64_t j = 0;
    if (dt == SMM_DTYPE_F32) {
        float *restrict c = (float *)e->c + m * e->ldc + j0;
        for (; j + 8 <= n; j += 8) {
            const __m256i u = _mm256_castps_si256(vec_y(acc, colsum, z, sa, sbp, pc_b, bias, has_azp, j));
            const __m256i r = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x7FFFFFFF), nan_mask(u));
            _mm256_storeu_si256((__m256i *)(c + j), r);
        }
        for (; j < n; j++) {
            uint32_t u = smm_cpu_f32_bits(smm_cpu_epi_value(acc[j], has_azp ? colsum[j] : 0u, z1, sa1,
                                                   sbp[pc_b ? j : 0], bias, has_azp, j));
            if ((u & 0x7FFFFFFFu) > 0x7F800000u)
                u = 0x7FFFFFFFu;
            memcpy(&c[j], &u, sizeof u);
        }
    } else {
        uint16_t *restrict c = (uint16_t *)e->c + m * e->ldc + j0;
        const int bf = dt == SMM_DTYPE_BF16;
        for (; j + 8 <= n; j += 8) {
            const __m256 y = vec_y(acc, colsum, z, sa, sbp, pc_b, bias, has_azp, j);
            store_u16x8(c + j, bf ? to_bf16(y) : to_f16(y));
        }
        for (; j < n; j++) {
            const float y = smm_cpu_epi_value(acc[j], has_azp ? colsum[j] : 0u, z1, sa1, sbp[pc_b ? j : 0],
                                     bias, has_azp, j);
            c[j] = bf ? smm_cpu_to_bf16(y) : smm_cpu_to_f16(y);
        }
    }
}

#define ROW_CASES(DT)                                                                     \
    switch ((pc_b ? 4 : 0) + (has_bias ? 2 : 0) + (has_azp ? 1 : 0)) {                   \
    case 0: row(e, m, j0, n, acc, colsum, 0, 0, 0, DT); break;                            \
    case 1: row(e, m, j0, n, acc, colsum, 0, 0, 1, DT); break;                            \
    case 2: row(e, m, j0, n, acc, colsum, 0, 1, 0, DT); break;                            \
    case 3: row(e, m, j0, n, acc, colsum, 0, 1, 1, DT); break;                            \
    case 4: row(e, m, j0, n, acc, colsum, 1, 0, 0, DT); break;                            \
    case 5: row(e, m, j0, n, acc, colsum, 1, 0, 1, DT); break;                            \
    case 6: row(e, m, j0, n, acc, colsum, 1, 1, 0, DT); break;                            \
    default: row(e, m, j0, n, acc, colsum, 1, 1, 1, DT); break;                           \
    }

ATTR void smm_cpu_epilogue_avx2(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
                                const uint32_t *acc, const uint32_t *colsum)
{
    if (e->c_dtype == SMM_DTYPE_I32) {   /* raw accumulators; no scales */
        int32_t *c = (int32_t *)e->c + m * e->ldc + j0;
        memcpy(c, acc, (size_t)n * sizeof *c);
        return;
    }
    const int pc_b = e->scale_b_len != 1, has_bias = e->bias != NULL, has_azp = e->azp != NULL;
    switch (e->c_dtype) {
    case SMM_DTYPE_F32: ROW_CASES(SMM_DTYPE_F32) break;
    case SMM_DTYPE_F16: ROW_CASES(SMM_DTYPE_F16) break;
    case SMM_DTYPE_BF16: ROW_CASES(SMM_DTYPE_BF16) break;
    default: break;
    }
}
#endif
