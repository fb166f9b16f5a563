/*
 * reference.c - the scalar reference backend: the numerics contract
 * (doc/numerics.md) as plain C.
 *
 * This file is the executable form of the contract. It is meant to be read
 * side by side with doc/numerics.md: one loop nest per operation, one line
 * per formula, no blocking, no threads, no intrinsics. Every other backend
 * is tested against it bit for bit, so it stays the simplest code that is
 * obviously right; speed is not a goal.
 *
 * What it relies on (lib/internal.h):
 *   - the framework has validated the problem (m > 0, n > 0 for mm, m > 0
 *     for quantize; pointers, lengths and leading dimensions are valid; no
 *     output overlaps an input);
 *   - the calling thread's floating-point environment is the contract's:
 *     round to nearest even, no flush-to-zero, no denormals-are-zero. The
 *     int32 -> float conversions, the products, quotients and fmaf below,
 *     and nearbyintf all round in that mode;
 *   - the file is compiled with -ffp-contract=off, so a*b+c is never fused
 *     behind our back; the one fma of the contract is written as fmaf().
 *
 * Indices and offsets are int64_t throughout: problems with more than 2^31
 * elements are valid. The leading dimension of a one-row matrix may be any
 * value; it is only ever multiplied by the row index 0.
 */
#include "internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Integer helpers                                                     */
/* ------------------------------------------------------------------ */

/* The int32 whose two's-complement bits are u (u mod 2^32 as a signed
 * value), without relying on implementation-defined conversions. */
static int32_t int32_from_bits(uint32_t u)
{
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* sat_i8: clamp an integer to [-128, 127]. */
static int8_t sat_i8(int64_t v)
{
    if (v < -128)
        return -128;
    if (v > 127)
        return 127;
    return (int8_t)v;
}

/* rne_sat_i8: NaN -> 0; else round to nearest integer, ties to even
 * (nearbyintf in the round-to-nearest environment), then clamp to
 * [-128, 127]. The clamp is done on the float, so no out-of-range float is
 * ever converted to an integer; +-Inf clamp to the ends. */
static int8_t rne_sat_i8(float v)
{
    float r;

    if (isnan(v))
        return 0;
    r = nearbyintf(v);
    if (r <= -128.0f)
        return -128;
    if (r >= 127.0f)
        return 127;
    return (int8_t)r;
}

/* rne_sat_i32: as rne_sat_i8, into [INT32_MIN, INT32_MAX]. 2^31 is the
 * first float above INT32_MAX (which is not a float itself). */
static int32_t rne_sat_i32(float v)
{
    float r;

    if (isnan(v))
        return 0;
    r = nearbyintf(v);
    if (r <= -2147483648.0f)
        return INT32_MIN;
    if (r >= 2147483648.0f)
        return INT32_MAX;
    return (int32_t)r;
}

/* ------------------------------------------------------------------ */
/* Matrix multiplication                                               */
/* ------------------------------------------------------------------ */

/* convert(y) into element `off` of C: float32 as is, float16 / bfloat16 by
 * round to nearest even (lib/convert.c); NaN as the canonical NaN of the
 * output type (float32 0x7FFFFFFF; the 16-bit ones inside convert.c). */
static void store_c(void *c, smm_dtype dtype, int64_t off, float y)
{
    if (dtype == SMM_DTYPE_F32) {
        uint32_t bits;
        if (isnan(y))
            bits = UINT32_C(0x7FFFFFFF);
        else
            memcpy(&bits, &y, sizeof bits);
        memcpy((float *)c + off, &bits, sizeof bits);
    } else if (dtype == SMM_DTYPE_F16) {
        ((uint16_t *)c)[off] = smm_f32_to_f16(y);
    } else { /* SMM_DTYPE_BF16 */
        ((uint16_t *)c)[off] = smm_f32_to_bf16(y);
    }
}

/*
 * The epilogue of one element, C[i][j] at offset off, from its accumulator
 * and B's column sum (both mod 2^32; colsum only read with azp):
 *
 *   acc'  = acc - z * colsum                      mod 2^32 (azp set)
 *   f = (float)acc';  t = f * sb
 *   y = sa * t                  no bias, no azp
 *   y = fmaf(sa, t, bias[j])    bias (with or without azp)
 *   y = fmaf(sa, t, +0.0f)      azp without bias
 *   C[i][j] = convert(y)
 *
 * p gives the scales, bias, zero points and C (smm_scaled_mm's fields, or
 * smm_scaled_epilogue's copied into them).
 */
static void epilogue_element(const smm_mm_problem *p, int64_t i, int64_t j, int64_t off,
                             uint32_t acc, uint32_t colsum)
{
    float sa, sb, f, t, y;

    if (p->azp != NULL) {
        int32_t z = p->azp_len == 1 ? p->azp[0] : p->azp[i];
        acc -= (uint32_t)z * colsum;
    }

    sa = p->scale_a_len == 1 ? p->scale_a[0] : p->scale_a[i];
    sb = p->scale_b_len == 1 ? p->scale_b[0] : p->scale_b[j];

    f = (float)int32_from_bits(acc);   /* round to nearest even */
    t = f * sb;
    if (p->bias != NULL)
        y = fmaf(sa, t, p->bias[j]);   /* one rounding */
    else if (p->azp != NULL)
        y = fmaf(sa, t, 0.0f);         /* -0 becomes +0 */
    else
        y = sa * t;

    store_c(p->c, p->c_dtype, off, y);
}

/*
 * C = epilogue(A * B^T), or the raw accumulators when c_dtype is I32.
 *
 *   acc[m][n]    = sum_k A[m][k] * B[n][k]            mod 2^32
 *   colsum[n]    = sum_k B[n][k]                       mod 2^32
 *   C[m][n]      = epilogue_element(acc, colsum)
 *
 * The sums are taken in uint32_t, whose arithmetic is defined modulo 2^32:
 * that is exactly the contract's wrapping int32 accumulator, without
 * signed overflow. Each int8 product fits an int32 (|a*b| <= 16384) and is
 * converted to uint32_t modulo 2^32 before it is added.
 */
static smm_status reference_mm(smm_context *ctx, const smm_mm_problem *p)
{
    int64_t i, j, kk;

    if (p->c_dtype != SMM_DTYPE_I32 && p->c_dtype != SMM_DTYPE_F32 &&
        p->c_dtype != SMM_DTYPE_F16 && p->c_dtype != SMM_DTYPE_BF16)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "reference: unsupported output type %d", (int)p->c_dtype);

    /* A packed B (reference_pack_b) is B's rows, copied densely. */
    const int8_t *b = p->b_packed ? p->b_packed->rows : p->b;
    const int64_t ldb = p->b_packed ? p->k : p->ldb;

    for (i = 0; i < p->m; i++) {
        const int8_t *arow = p->a + i * p->lda;
        for (j = 0; j < p->n; j++) {
            const int8_t *brow = b + j * ldb;
            const int64_t off = i * p->ldc + j;
            uint32_t acc = 0, colsum = 0;

            for (kk = 0; kk < p->k; kk++) {
                acc += (uint32_t)((int32_t)arow[kk] * (int32_t)brow[kk]);
                colsum += (uint32_t)(int32_t)brow[kk];
            }

            if (p->c_dtype == SMM_DTYPE_I32) {
                ((int32_t *)p->c)[off] = int32_from_bits(acc);
                continue;
            }
            epilogue_element(p, i, j, off, acc, colsum);
        }
    }
    return SMM_OK;
}

/* smm_scaled_epilogue: the same per-element epilogue on the caller's
 * accumulators and column sums. */
static smm_status reference_epilogue(smm_context *ctx, const smm_epilogue_args *e)
{
    (void)ctx;
    const smm_mm_problem p = {
        .m = e->m, .n = e->n,
        .scale_a = e->scale_a, .scale_a_len = e->scale_a_len,
        .scale_b = e->scale_b, .scale_b_len = e->scale_b_len,
        .bias = e->bias, .azp = e->azp, .azp_len = e->azp_len,
        .c = e->c, .ldc = e->ldc, .c_dtype = e->c_dtype,
    };
    for (int64_t i = 0; i < e->m; i++)
        for (int64_t j = 0; j < e->n; j++)
            epilogue_element(&p, i, j, i * e->ldc + j, (uint32_t)e->acc[i * e->ldacc + j],
                             e->azp ? (uint32_t)e->colsum_b[j] : 0u);
    return SMM_OK;
}

/* ------------------------------------------------------------------ */
/* Quantization                                                        */
/* ------------------------------------------------------------------ */

/* The contract's max and min with "NaN ignored" (CUDA's fmaxf / fminf):
 * `running` is never NaN; any NaN v, quiet or signaling, leaves it as is.
 * (glibc's fmaxf returns NaN for a signaling NaN, so it is not used.) */
static float max_nan_ignored(float running, float v)
{
    return (!isnan(v) && v > running) ? v : running;
}

static float min_nan_ignored(float running, float v)
{
    return (!isnan(v) && v < running) ? v : running;
}

/* x[i][k] widened exactly to float32. */
static float load_x(const smm_quantize_args *a, int64_t i, int64_t k)
{
    const int64_t off = i * a->ldx + k;

    if (a->x_dtype == SMM_DTYPE_F32)
        return ((const float *)a->x)[off];
    if (a->x_dtype == SMM_DTYPE_F16)
        return smm_f16_to_f32(((const uint16_t *)a->x)[off]);
    return smm_bf16_to_f32(((const uint16_t *)a->x)[off]); /* BF16 */
}

/*
 * Dynamic per-token symmetric quantization of row i (also the fallback of
 * degenerate asymmetric rows):
 *   amax = max |x| over the row, from +0, NaN ignored
 *   scale[i] = amax / 127;  inv = (amax == 0) ? 0 : 127 / amax
 *   q = rne_sat_i8(x * inv)
 */
static void quantize_row_dynamic_symmetric(const smm_quantize_args *a, int64_t i)
{
    float amax = 0.0f, inv;
    int64_t kk;

    for (kk = 0; kk < a->k; kk++)
        amax = max_nan_ignored(amax, fabsf(load_x(a, i, kk)));

    inv = (amax == 0.0f) ? 0.0f : 127.0f / amax;
    for (kk = 0; kk < a->k; kk++)
        a->q[i * a->ldq + kk] = rne_sat_i8(load_x(a, i, kk) * inv);
    a->scale[i] = amax / 127.0f;
}

/*
 * Dynamic per-token asymmetric quantization of row i:
 *   mn = min over the row from +FLT_MAX, mx = max from -FLT_MAX, NaN
 *   ignored;  s = (mx - mn) / 255
 *   if s > 0, s finite and fl(1/s) finite:
 *       z = rne_sat_i32(-128 - mn / s)
 *       q = sat_i8(rne_sat_i32(x * fl(1/s)) + z)      (sum in 64-bit)
 *       scale[i] = s, azp[i] = z
 *   else (constant, empty or all-NaN row, infinite or subnormal range):
 *       the symmetric formula, azp[i] = 0
 */
static void quantize_row_dynamic_asymmetric(const smm_quantize_args *a, int64_t i)
{
    float mn = FLT_MAX, mx = -FLT_MAX, s, inv;
    int32_t z;
    int64_t kk;

    for (kk = 0; kk < a->k; kk++) {
        const float x = load_x(a, i, kk);
        mn = min_nan_ignored(mn, x);
        mx = max_nan_ignored(mx, x);
    }

    s = (mx - mn) / 255.0f;
    if (!(s > 0.0f && isfinite(s) && isfinite(1.0f / s))) {
        quantize_row_dynamic_symmetric(a, i);
        a->azp[i] = 0;
        return;
    }

    inv = 1.0f / s;
    z = rne_sat_i32(-128.0f - mn / s);
    for (kk = 0; kk < a->k; kk++)
        a->q[i * a->ldq + kk] =
            sat_i8((int64_t)rne_sat_i32(load_x(a, i, kk) * inv) + (int64_t)z);
    a->scale[i] = s;
    a->azp[i] = z;
}

/*
 * Static per-tensor quantization; scale[0] (and azp[0] when non-NULL) are
 * inputs, only q is written:
 *   symmetric:   q = rne_sat_i8(x / s)                     true division
 *   asymmetric:  q = sat_i8(rne_sat_i32(x * fl(1/s)) + z)  sum in 64-bit
 */
static void quantize_static(const smm_quantize_args *a)
{
    const float s = a->scale[0];
    int64_t i, kk;

    if (a->azp == NULL) {
        for (i = 0; i < a->m; i++)
            for (kk = 0; kk < a->k; kk++)
                a->q[i * a->ldq + kk] = rne_sat_i8(load_x(a, i, kk) / s);
    } else {
        const float inv = 1.0f / s;
        const int64_t z = a->azp[0];
        for (i = 0; i < a->m; i++)
            for (kk = 0; kk < a->k; kk++)
                a->q[i * a->ldq + kk] =
                    sat_i8((int64_t)rne_sat_i32(load_x(a, i, kk) * inv) + z);
    }
}

static smm_status reference_quantize(smm_context *ctx, const smm_quantize_args *a)
{
    int64_t i;

    if (a->x_dtype != SMM_DTYPE_F32 && a->x_dtype != SMM_DTYPE_F16 &&
        a->x_dtype != SMM_DTYPE_BF16)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "reference: unsupported input type %d", (int)a->x_dtype);

    switch (a->mode) {
    case SMM_QUANT_STATIC_PER_TENSOR:
        quantize_static(a);
        return SMM_OK;
    case SMM_QUANT_DYNAMIC_PER_TOKEN:
        for (i = 0; i < a->m; i++) {
            if (a->azp != NULL)
                quantize_row_dynamic_asymmetric(a, i);
            else
                quantize_row_dynamic_symmetric(a, i);
        }
        return SMM_OK;
    }
    return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                         "reference: unknown quantization mode %d", (int)a->mode);
}

/* ------------------------------------------------------------------ */
/* Packed B: a dense copy of B's rows                                  */
/* ------------------------------------------------------------------ */

static const char reference_format[] = "reference int8 rows";

static const char *reference_packed_format(const smm_context *ctx)
{
    (void)ctx;
    return reference_format;
}

static smm_status reference_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb,
                                   smm_packed_b *pb)
{
    int64_t j;
    size_t bytes = (size_t)pb->n * (size_t)pb->k;   /* B's footprint was checked */
    int8_t *rows = smm_host_alloc(ctx, bytes, 64);

    if (rows == NULL)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "reference: out of memory (%zu bytes)", bytes);
    for (j = 0; j < pb->n && pb->k > 0; j++)
        memcpy(rows + j * pb->k, b + j * ldb, (size_t)pb->k);
    pb->mem = rows;
    pb->bytes = bytes;
    pb->rows = rows;
    pb->data = rows;
    return SMM_OK;
}

/* ------------------------------------------------------------------ */
/* Registration                                                        */
/* ------------------------------------------------------------------ */

static int reference_probe(const char **reason)
{
    if (reason != NULL)
        *reason = "always available (scalar C, the executable form of the numerics contract)";
    return 1;
}

const smm_backend_ops smm_reference_ops = {
    .id = SMM_BACKEND_REFERENCE,
    .name = "reference",
    .probe = reference_probe,
    .mm = reference_mm,
    .quantize = reference_quantize,
    .epilogue = reference_epilogue,
    .packed_format = reference_packed_format,
    .pack_b = reference_pack_b,
};
