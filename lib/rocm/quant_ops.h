/*
 * quant_ops.h - the numerics contract's activation quantization for one
 * element and one row (doc/numerics.md, "Quantization of activations"), as
 * device functions: the quantizer (quantize.hip) and the decode kernel that
 * quantizes its tokens itself (gemm_decode.hip) both build on these, so the
 * two give the same bits by construction:
 *   static symmetric:    q = rne_sat_i8(x / s)                    true division
 *   static asymmetric:   q = sat_i8(rne_sat_i32(x * fl(1/s)) + z) sum in 64-bit
 *   dynamic symmetric:   amax = max |x| (from +0, NaN ignored); scale = amax / 127;
 *                        inv = amax == 0 ? 0 : 127 / amax; q = rne_sat_i8(x * inv)
 *   dynamic asymmetric:  mn / mx from +-FLT_MAX, NaN ignored; s = (mx - mn) / 255;
 *                        if s > 0, s and fl(1/s) finite:
 *                          z = rne_sat_i32(-128 - mn / s), q as static asymmetric
 *                        else the symmetric row and azp = 0
 *
 * Every float operation is one IEEE binary32 operation rounded to nearest
 * even: on NVIDIA through the __fdiv_rn / __fmul_rn / __fsub_rn intrinsics
 * (no contraction, no approximate division whatever the flags); on AMD
 * through the plain operators, which clang keeps correctly rounded for HIP
 * (-fhip-fp32-correctly-rounded-divide-sqrt is its default) with
 * -ffp-contract=off and -fno-gpu-flush-denormals-to-zero, as configure
 * passes them. Rounding to integers: rintf / __builtin_rintf (nearest
 * even), then the reference's clamps on the float, then an exact cast.
 *
 * The contract's max and min with NaN ignored are order-independent (the
 * maximum of a set is the set's maximum however it is taken; the one
 * order-dependent detail, which of +0 and -0 a min or max over equal zeros
 * keeps, cannot reach any output: -128 - (+-0 / s), mx - (+-0) and
 * (+-0) - mn are equal for either sign, and a row whose min and max are
 * both zeros takes the symmetric path with |x|), so any reduction tree
 * gives the reference's result.
 */
#ifndef SMM_GPU_QUANT_OPS_H
#define SMM_GPU_QUANT_OPS_H

#include "gpu_compat.h"

#include <float.h>
#include <stdint.h>

SMM_DEV float q_div(float a, float b)
{
#if defined(SMM_GPU_NVIDIA)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

SMM_DEV float q_mul(float a, float b)
{
#if defined(SMM_GPU_NVIDIA)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

SMM_DEV float q_sub(float a, float b)
{
#if defined(SMM_GPU_NVIDIA)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* Round to the nearest integer, ties to even (NaN and +-Inf as they are). */
SMM_DEV float q_rint(float v)
{
#if defined(SMM_GPU_NVIDIA)
    return rintf(v);
#else
    return __builtin_rintf(v);
#endif
}

SMM_DEV bool q_isnan(float v)
{
    return v != v;
}

/* |v|: clears the sign bit (fabsf without a math library). */
SMM_DEV float q_abs(float v)
{
    return __uint_as_float(__float_as_uint(v) & 0x7FFFFFFFu);
}

/* Finite: neither NaN nor +-Inf. */
SMM_DEV bool q_isfinite(float v)
{
    return (__float_as_uint(v) & 0x7F800000u) != 0x7F800000u;
}

/* sat_i8: clamp an integer to [-128, 127]. */
SMM_DEV int8_t q_sat_i8(int64_t v)
{
    return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
}

/* rne_sat_i8: NaN -> 0; round to nearest even; clamp on the float. */
SMM_DEV int8_t q_rne_sat_i8(float v)
{
    float r;

    if (q_isnan(v))
        return 0;
    r = q_rint(v);
    if (r <= -128.0f)
        return -128;
    if (r >= 127.0f)
        return 127;
    return (int8_t)(int)r;
}

/* rne_sat_i32: as rne_sat_i8, into [INT32_MIN, INT32_MAX] (2^31 is the
 * first float above INT32_MAX). */
SMM_DEV int32_t q_rne_sat_i32(float v)
{
    float r;

    if (q_isnan(v))
        return 0;
    r = q_rint(v);
    if (r <= -2147483648.0f)
        return INT32_MIN;
    if (r >= 2147483648.0f)
        return INT32_MAX;
    return (int32_t)r;
}

/* The contract's max / min with NaN ignored (any NaN, quiet or signaling,
 * leaves `running` as is; `running` is never NaN). */
SMM_DEV float q_max(float running, float v)
{
    return (!q_isnan(v) && v > running) ? v : running;
}

SMM_DEV float q_min(float running, float v)
{
    return (!q_isnan(v) && v < running) ? v : running;
}

/* One element, by the forms above. */
SMM_DEV int8_t q_static_sym(float x, float s)
{
    return q_rne_sat_i8(q_div(x, s));
}

SMM_DEV int8_t q_scaled_sym(float x, float inv)
{
    return q_rne_sat_i8(q_mul(x, inv));
}

SMM_DEV int8_t q_scaled_asym(float x, float inv, int32_t z)
{
    return q_sat_i8((int64_t)q_rne_sat_i32(q_mul(x, inv)) + (int64_t)z);
}

/* A symmetric row's factor and scale from its amax. */
SMM_DEV float q_sym_inv(float amax)
{
    return amax == 0.0f ? 0.0f : q_div(127.0f, amax);
}

SMM_DEV float q_sym_scale(float amax)
{
    return q_div(amax, 127.0f);
}

/* A dynamic asymmetric row from its min and max: true with *s, *inv and
 * *z set when the row is asymmetric; false: the symmetric row (azp 0). */
SMM_DEV bool q_asym_params(float mn, float mx, float *s, float *inv, int32_t *z)
{
    *s = q_div(q_sub(mx, mn), 255.0f);
    if (!(*s > 0.0f && q_isfinite(*s) && q_isfinite(q_div(1.0f, *s))))
        return false;
    *inv = q_div(1.0f, *s);
    *z = q_rne_sat_i32(q_sub(-128.0f, q_div(mn, *s)));
    return true;
}

#endif
