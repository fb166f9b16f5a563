/*
 * quantize.c - the CPU backend's activation quantizer (float -> int8),
 * rows spread over OpenMP threads.
 *
 * Formulas: doc/numerics.md, "Quantization of activations" (vLLM's
 * csrc/quantization/w8a8/int8/scaled_quant.cu, with the contract's
 * deviations). Each row is produced by one thread from that row alone, so
 * results do not depend on the thread count.
 *
 * The per-element helpers are branch-free (selects instead of branches) so
 * that the row loops vectorize; rounding to integers uses integer-exact
 * float arithmetic under the contract's environment (round to nearest even),
 * which every worker thread enters. Row extrema are taken on integer keys
 * that order binary32 values, with NaN (quiet or signalling) mapped to the
 * neutral element, i.e. ignored as the contract says.
 *
 * The AVX2 levels write every mode and input type in intrinsics instead:
 * the vectorizer's form of the loops above spilled registers and cost
 * about 2.5 cycles an element; written out, M = 128 x K = 4096 takes a
 * third (symmetric f32 / bf16) to a fifth (f16, asymmetric) of the time.
 * Their rounding is vroundps's own round-to-nearest-even, their scalar
 * tails use round_even under MXCSR: the two agree because every entry
 * point and worker runs in the contract's environment (lib/fpenv.c).
 * The per-row scalars (scale, zero point, degenerate test) and the scalar
 * extrema loops are shared: asym_params, sym_inv, minmax_keys, amax_key.
 */
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")

#include "config.h"
#include "cpu/cpu_internal.h"

#include <float.h>
#include <stdint.h>

/* Element idx of a row of x, widened exactly to binary32. */
SMM_ALWAYS_INLINE float load_x(const void *row, smm_dtype dt, int64_t idx)
{
    switch (dt) {
    case SMM_DTYPE_F16:
        return smm_cpu_f16_to_f32(((const uint16_t *)row)[idx]);
    case SMM_DTYPE_BF16:
        return smm_cpu_bf16_to_f32(((const uint16_t *)row)[idx]);
    default:
        return ((const float *)row)[idx];
    }
}

SMM_ALWAYS_INLINE int is_nan(float v)
{
    return (smm_cpu_f32_bits(v) & 0x7FFFFFFFu) > 0x7F800000u;
}

/* v (not NaN) rounded to an integral value, ties to even: below 2^23 adding
 * 2^23 rounds at the units place; from 2^23 up every float is integral. */
SMM_ALWAYS_INLINE float round_even(float v)
{
    uint32_t u = smm_cpu_f32_bits(v);
    float a = smm_cpu_bits_f32(u & 0x7FFFFFFFu);
    float r = (a + 8388608.0f) - 8388608.0f;
    r = a < 8388608.0f ? r : a;
    return smm_cpu_bits_f32(smm_cpu_f32_bits(r) | (u & 0x80000000u));
}

/* rne_sat_i8: NaN -> 0, else round half to even and clamp to [-128, 127]
 * (clamping first is equivalent: the bounds are integers). */
SMM_ALWAYS_INLINE int8_t rne_sat_i8(float v)
{
    float c = is_nan(v) ? 0.0f : v;
    c = c > 127.0f ? 127.0f : c;
    c = c < -128.0f ? -128.0f : c;
    return (int8_t)(int32_t)round_even(c);
}

/* rne_sat_i32: NaN -> 0, else round half to even and clamp to int32. */
SMM_ALWAYS_INLINE int32_t rne_sat_i32(float v)
{
    float c = is_nan(v) ? 0.0f : v;
    const int big = c >= 2147483648.0f;
    c = big ? 0.0f : c;
    c = c < -2147483648.0f ? -2147483648.0f : c;
    int32_t i = (int32_t)round_even(c);   /* integral, in [-2^31, 2^31) */
    return big ? INT32_MAX : i;
}

/* sat_i8(rne_sat_i32(x * inv) + z), the sum in 64 bits. */
SMM_ALWAYS_INLINE int8_t asym_q(float x, float inv, int32_t z)
{
    int64_t v = (int64_t)rne_sat_i32(x * inv) + (int64_t)z;
    v = v > 127 ? 127 : v;
    v = v < -128 ? -128 : v;
    return (int8_t)v;
}

/* Order-preserving key of a non-NaN binary32 as uint32 (-0 just below +0,
 * which no result below depends on), and its inverse. */
SMM_ALWAYS_INLINE uint32_t order_key(float v)
{
    uint32_t u = smm_cpu_f32_bits(v);
    uint32_t neg = (uint32_t)((int32_t)u >> 31);   /* all ones if negative */
    return u ^ (neg | 0x80000000u);
}

SMM_ALWAYS_INLINE float from_key(uint32_t k)
{
    return smm_cpu_bits_f32((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

SMM_ALWAYS_INLINE uint32_t u32_max(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

SMM_ALWAYS_INLINE uint32_t u32_min(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/* All ones when v is a NaN (quiet or signalling), else 0; bit operations
 * only, so that the reductions below stay plain min / max reductions. */
SMM_ALWAYS_INLINE uint32_t nan_mask(uint32_t u)
{
    return (uint32_t)((int32_t)(0x7F800000u - (u & 0x7FFFFFFFu)) >> 31);
}

/* Bits of |v| (ordered like the values), NaN -> 0 (ignored by a max). */
SMM_ALWAYS_INLINE uint32_t abs_key(float v)
{
    uint32_t u = smm_cpu_f32_bits(v);
    return (u & 0x7FFFFFFFu) & ~nan_mask(u);
}

/* order_key of v, NaN -> the neutral element of min / of max. */
SMM_ALWAYS_INLINE uint32_t min_key(float v)
{
    uint32_t u = smm_cpu_f32_bits(v);
    return order_key(v) | nan_mask(u);
}

SMM_ALWAYS_INLINE uint32_t max_key(float v)
{
    uint32_t u = smm_cpu_f32_bits(v);
    return order_key(v) & ~nan_mask(u);
}

/* The initial extrema keys of a dynamic asymmetric row: mn from +FLT_MAX,
 * mx from -FLT_MAX. */
#define MIN_KEY_INIT order_key(FLT_MAX)
#define MAX_KEY_INIT order_key(-FLT_MAX)

/* Elements k0 .. K-1 of a row folded into the extrema keys (NaN ignored),
 * and into the bits of max |x| (NaN mapped to 0): the portable rows, and
 * the tails of the AVX2 ones. */
SMM_ALWAYS_INLINE void minmax_keys(const void *x, smm_dtype dt, int64_t k0, int64_t K,
                                   uint32_t *kmn, uint32_t *kmx)
{
    uint32_t mn = *kmn, mx = *kmx;
    for (int64_t k = k0; k < K; k++) {
        const float v = load_x(x, dt, k);
        mn = u32_min(mn, min_key(v));
        mx = u32_max(mx, max_key(v));
    }
    *kmn = mn;
    *kmx = mx;
}

SMM_ALWAYS_INLINE uint32_t amax_key(const void *x, smm_dtype dt, int64_t k0, int64_t K,
                                    uint32_t amax_bits)
{
    for (int64_t k = k0; k < K; k++)
        amax_bits = u32_max(amax_bits, abs_key(load_x(x, dt, k)));
    return amax_bits;
}

/* A dynamic asymmetric row's scale s, fl(1/s) and zero point from its
 * extrema (NaN ignored); 0 for a degenerate row (s not a positive finite
 * number, or 1/s overflows), which then takes the symmetric formula with
 * zero point 0. */
SMM_ALWAYS_INLINE int asym_params(uint32_t kmn, uint32_t kmx, float *s_out, float *inv_out,
                                  int32_t *z_out)
{
    const float mn = from_key(kmn), mx = from_key(kmx);
    const float s = (mx - mn) / 255.0f;
    const float inv = 1.0f / s;
    if (!(s > 0.0f && s <= FLT_MAX && inv <= FLT_MAX))
        return 0;
    *s_out = s;
    *inv_out = inv;
    *z_out = rne_sat_i32(-128.0f - mn / s);
    return 1;
}

/* A dynamic symmetric row's multiplier 127 / amax (0 for an all-zero
 * row); its scale is amax / 127. */
SMM_ALWAYS_INLINE float sym_inv(float amax)
{
    return amax == 0.0f ? 0.0f : 127.0f / amax;
}

SMM_ALWAYS_INLINE void quantize_row(const smm_quantize_args *q, const smm_dtype dt, int64_t r)
{
    const size_t esize = dt == SMM_DTYPE_F32 ? 4 : 2;
    const void *x = (const unsigned char *)q->x + (size_t)r * (size_t)q->ldx * esize;
    int8_t *restrict out = q->q + r * q->ldq;
    const int64_t K = q->k;

    if (q->mode == SMM_QUANT_STATIC_PER_TENSOR) {
        const float s = q->scale[0];
        if (q->azp) {
            const float inv = 1.0f / s;
            const int32_t z = q->azp[0];
            for (int64_t k = 0; k < K; k++)
                out[k] = asym_q(load_x(x, dt, k), inv, z);
        } else {
            for (int64_t k = 0; k < K; k++)
                out[k] = rne_sat_i8(load_x(x, dt, k) / s);
        }
        return;
    }

    /* Dynamic per token. */
    if (q->azp) {
        uint32_t kmn = MIN_KEY_INIT, kmx = MAX_KEY_INIT;
        minmax_keys(x, dt, 0, K, &kmn, &kmx);
        float s, inv;
        int32_t z;
        if (asym_params(kmn, kmx, &s, &inv, &z)) {
            for (int64_t k = 0; k < K; k++)
                out[k] = asym_q(load_x(x, dt, k), inv, z);
            q->scale[r] = s;
            q->azp[r] = z;
            return;
        }
        /* Degenerate row: the symmetric formula, zero point 0. */
        q->azp[r] = 0;
    }
    /* amax = max |x| from +0: on the bits of |x| (the order of
     * non-negative floats), NaN mapped to 0. */
    const float amax = smm_cpu_bits_f32(amax_key(x, dt, 0, K, 0));
    const float inv = sym_inv(amax);
    for (int64_t k = 0; k < K; k++)
        out[k] = rne_sat_i8(load_x(x, dt, k) * inv);
    q->scale[r] = amax / 127.0f;
}

/* Rows r0 .. r1-1 by ROW(q, dt, r), dt a constant in each loop so that
 * the always-inlined row function is specialized per input type. */
#define QUANTIZE_ROWS(ROW, q, r0, r1)                                                      \
    do {                                                                                   \
        switch ((q)->x_dtype) {                                                            \
        case SMM_DTYPE_F16:                                                                \
            for (int64_t r_ = (r0); r_ < (r1); r_++)                                       \
                ROW((q), SMM_DTYPE_F16, r_);                                               \
            break;                                                                         \
        case SMM_DTYPE_BF16:                                                               \
            for (int64_t r_ = (r0); r_ < (r1); r_++)                                       \
                ROW((q), SMM_DTYPE_BF16, r_);                                              \
            break;                                                                         \
        default:                                                                           \
            for (int64_t r_ = (r0); r_ < (r1); r_++)                                       \
                ROW((q), SMM_DTYPE_F32, r_);                                               \
            break;                                                                         \
        }                                                                                  \
    } while (0)

void smm_cpu_quantize_rows_c(const smm_quantize_args *q, int64_t r0, int64_t r1)
{
    QUANTIZE_ROWS(quantize_row, q, r0, r1);
}

#ifdef SMM_HAVE_AVX2_BUILD
#include <immintrin.h>

#define VATTR static inline __attribute__((always_inline, target("avx2,fma")))

/* smm_cpu_f16_to_f32, lane by lane, on zero-extended binary16 bits: normal
 * and Inf / NaN by moving the fields (exponent rebased by 112 or 224), a
 * subnormal m * 2^-24 by an exact int -> float conversion and an exact
 * product (m < 2^10, the result normal). No F16C needed. */
VATTR __m256 f16x8(__m256i h)
{
    const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi32(0x7FFF));
    const __m256i sign = _mm256_slli_epi32(_mm256_xor_si256(h, mag), 16);
    const __m256i moved = _mm256_slli_epi32(mag, 13);
    const __m256i infnan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7BFF));
    __m256i bits = _mm256_add_epi32(moved, _mm256_blendv_epi8(_mm256_set1_epi32(0x38000000),
                                                              _mm256_set1_epi32(0x70000000),
                                                              infnan));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-24f));
    bits = _mm256_blendv_epi8(bits, _mm256_castps_si256(sub),
                              _mm256_cmpgt_epi32(_mm256_set1_epi32(0x400), mag));
    return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}

/* Elements k .. k+7 of a row of x, widened exactly to binary32. */
VATTR __m256 load8(const void *row, smm_dtype dt, int64_t k)
{
    if (dt == SMM_DTYPE_F32)
        return _mm256_loadu_ps((const float *)row + k);
    const __m256i h = _mm256_cvtepu16_epi32(
        _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    if (dt == SMM_DTYPE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    return f16x8(h);
}

/* All ones in the NaN lanes of v's bits (both sides of the compare below
 * 2^31, so the signed compare is the unsigned one). */
VATTR __m256i nan_mask8(__m256i u)
{
    return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                              _mm256_set1_epi32(0x7F800000));
}

/* abs_key, lane by lane: the bits of |v|, NaN -> 0. */
VATTR __m256i abs_key8(__m256 v)
{
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
    return _mm256_andnot_si256(nan_mask8(_mm256_castps_si256(v)), a);
}

/* order_key, lane by lane (NaN lanes are masked by the callers). */
VATTR __m256i order_key8(__m256i u)
{
    return _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31),
                                               _mm256_set1_epi32((int)0x80000000u)));
}

/* rne_sat_i8, lane by lane, as int32: NaN -> +0, clamped to [-128, 127]
 * (min / max of non-NaN values are the selects above), rounded half to
 * even by vroundps's own mode (whatever MXCSR says), then truncated
 * (exact: the value is integral). */
VATTR __m256i rne_sat_i8x8(__m256 v)
{
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-128.0f));
    return _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* asym_q, lane by lane, as int32: rne_sat_i32(c) (NaN -> 0, from 2^31 up
 * INT32_MAX, below -2^31 INT32_MIN), clamped to [lo, hi] = [-128 - z,
 * 127 - z] intersected with the int32 range, plus z: the int64 sum
 * saturated to int8, with no lane overflowing. */
VATTR __m256i asym_q8(__m256 c, __m256i lo, __m256i hi, __m256i z)
{
    c = _mm256_and_ps(c, _mm256_cmp_ps(c, c, _CMP_ORD_Q));
    const __m256i big = _mm256_castps_si256(_mm256_cmp_ps(c, _mm256_set1_ps(2147483648.0f),
                                                          _CMP_GE_OQ));
    c = _mm256_max_ps(c, _mm256_set1_ps(-2147483648.0f));
    __m256i i = _mm256_cvttps_epi32(_mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT |
                                                           _MM_FROUND_NO_EXC));
    i = _mm256_blendv_epi8(i, _mm256_set1_epi32(INT32_MAX), big);
    i = _mm256_min_epi32(_mm256_max_epi32(i, lo), hi);
    return _mm256_add_epi32(i, z);
}

/* One row's int8 values: x / f (QDIV), x * f (QMUL), or asym_q(x, f, z)
 * (QASYM), 32 then 8 elements a step, the rest by the scalar code. */
enum { QDIV, QMUL, QASYM };

VATTR __m256i q8(__m256 v, int op, __m256 vf, __m256i lo, __m256i hi, __m256i vz)
{
    if (op == QASYM)
        return asym_q8(_mm256_mul_ps(v, vf), lo, hi, vz);
    return rne_sat_i8x8(op == QDIV ? _mm256_div_ps(v, vf) : _mm256_mul_ps(v, vf));
}

VATTR void row8(const void *x, smm_dtype dt, int64_t K, int op, float f, int32_t z,
                int8_t *out)
{
    const __m256 vf = _mm256_set1_ps(f);
    const int64_t lo64 = (int64_t)-128 - z, hi64 = (int64_t)127 - z;
    const __m256i lo = _mm256_set1_epi32((int32_t)(lo64 < INT32_MIN ? INT32_MIN : lo64));
    const __m256i hi = _mm256_set1_epi32((int32_t)(hi64 > INT32_MAX ? INT32_MAX : hi64));
    const __m256i vz = _mm256_set1_epi32(z);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m256i r[4];
        for (int j = 0; j < 4; j++)
            r[j] = q8(load8(x, dt, k + 8 * j), op, vf, lo, hi, vz);
        /* Per 128-bit half: int32 -> int16 -> int8 (the values fit), then
         * the four 4-byte groups of each half back into element order. */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]),
                                             _mm256_packs_epi32(r[2], r[3]));
        _mm256_storeu_si256((__m256i *)(out + k), _mm256_permutevar8x32_epi32(p, order));
    }
    for (; k + 8 <= K; k += 8) {
        const __m256i r = q8(load8(x, dt, k), op, vf, lo, hi, vz);
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r, r), _mm256_setzero_si256());
        _mm_storel_epi64((__m128i *)(out + k),
                         _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(p, order)));
    }
    for (; k < K; k++) {
        const float v = load_x(x, dt, k);
        out[k] = op == QASYM ? asym_q(v, f, z) : rne_sat_i8(op == QDIV ? v / f : v * f);
    }
}

/* Horizontal max / min of eight uint32 lanes. */
VATTR uint32_t hmax8(__m256i m)
{
    uint32_t lane[8], r = 0;
    _mm256_storeu_si256((__m256i *)lane, m);
    for (int j = 0; j < 8; j++)
        r = u32_max(r, lane[j]);
    return r;
}

VATTR uint32_t hmin8(__m256i m)
{
    uint32_t lane[8], r = UINT32_MAX;
    _mm256_storeu_si256((__m256i *)lane, m);
    for (int j = 0; j < 8; j++)
        r = u32_min(r, lane[j]);
    return r;
}

/* quantize_row in intrinsics, for a constant dt: the same formulas, each
 * vector operation the correctly rounded one of its scalar step, and the
 * per-row scalars (scale, zero point, degenerate test) by the same code. */
VATTR void quantize_row_avx2(const smm_quantize_args *q, const smm_dtype dt, int64_t r)
{
    const size_t esize = dt == SMM_DTYPE_F32 ? 4 : 2;
    const void *x = (const unsigned char *)q->x + (size_t)r * (size_t)q->ldx * esize;
    int8_t *out = q->q + r * q->ldq;
    const int64_t K = q->k;
    int64_t k;

    if (q->mode == SMM_QUANT_STATIC_PER_TENSOR) {
        if (q->azp)
            row8(x, dt, K, QASYM, 1.0f / q->scale[0], q->azp[0], out);
        else
            row8(x, dt, K, QDIV, q->scale[0], 0, out);
        return;
    }
    if (q->azp) {
        uint32_t kmn = MIN_KEY_INIT, kmx = MAX_KEY_INIT;
        __m256i vmn = _mm256_set1_epi32((int)kmn), vmx = _mm256_set1_epi32((int)kmx);
        for (k = 0; k + 8 <= K; k += 8) {
            const __m256i u = _mm256_castps_si256(load8(x, dt, k));
            const __m256i nan = nan_mask8(u), key = order_key8(u);
            vmn = _mm256_min_epu32(vmn, _mm256_or_si256(key, nan));
            vmx = _mm256_max_epu32(vmx, _mm256_andnot_si256(nan, key));
        }
        kmn = u32_min(kmn, hmin8(vmn));
        kmx = u32_max(kmx, hmax8(vmx));
        minmax_keys(x, dt, k, K, &kmn, &kmx);
        float s, inv;
        int32_t z;
        if (asym_params(kmn, kmx, &s, &inv, &z)) {
            row8(x, dt, K, QASYM, inv, z, out);
            q->scale[r] = s;
            q->azp[r] = z;
            return;
        }
        /* Degenerate row: the symmetric formula, zero point 0. */
        q->azp[r] = 0;
    }
    /* amax = max |x| from +0, on the bits of |x|, NaN mapped to 0. */
    __m256i m = _mm256_setzero_si256();
    for (k = 0; k + 8 <= K; k += 8)
        m = _mm256_max_epu32(m, abs_key8(load8(x, dt, k)));
    const float amax = smm_cpu_bits_f32(amax_key(x, dt, k, K, hmax8(m)));
    row8(x, dt, K, QMUL, sym_inv(amax), 0, out);
    q->scale[r] = amax / 127.0f;
}

SMM_TARGET_AVX2 void smm_cpu_quantize_rows_avx2(const smm_quantize_args *q, int64_t r0, int64_t r1)
{
    QUANTIZE_ROWS(quantize_row_avx2, q, r0, r1);
}
#endif

typedef struct {
    smm_cpu_quantize_fn rows;
    const smm_quantize_args *q;
} quantize_job;

static void quantize_range(const void *job, int64_t r0, int64_t r1)
{
    const quantize_job *j = job;
    j->rows(j->q, r0, r1);
}

smm_status smm_cpu_quantize(smm_context *ctx, const smm_quantize_args *q)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const quantize_job job = {st ? st->k->quantize_rows : smm_cpu_quantize_rows_c, q};
    smm_cpu_run_rows(ctx, q->m, q->k, quantize_range, &job);
    return SMM_OK;
}
