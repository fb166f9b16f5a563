/*
 * epilogue.h - the numerics contract's scaled epilogue (doc/numerics.md,
 * "Epilogue") as GPU device code, shared by every GEMM kernel of gemm.hip,
 * plus device versions of lib/convert.c's float16 / bfloat16 narrowing.
 *
 * Per output element (row m, column n), from the int32 accumulator acc and,
 * with an activation zero point, the column sum colsum[n] of B:
 *
 *   acc' = acc - z * colsum                 (mod 2^32, z = azp[0] or azp[m])
 *   f = (float)acc'                         round to nearest even
 *   t = f * sb                              sb = scale_b[0] or scale_b[n]
 *   y = sa * t                              no bias, no azp
 *   y = fma(sa, t, bias[n])                 bias
 *   y = fma(sa, t, +0.0f)                   azp without bias
 *   C[m][n] = convert(y)                    NaN -> canonical NaN of the type
 *
 * Every float operation is written so that no compiler can contract,
 * reorder or flush it:
 *   - NVIDIA: inline PTX cvt.rn.f32.s32, mul.rn.f32, fma.rn.f32 (no .ftz
 *     qualifier, so subnormals are kept even under -ftz=true or
 *     --use_fast_math);
 *   - AMD: plain int -> float conversion (round to nearest even), a product
 *     under `#pragma clang fp contract(off)` and __builtin_fmaf. f32
 *     denormals are kept as long as the code is not compiled with
 *     -fgpu-flush-denormals-to-zero / -ffast-math (HIP's default keeps them).
 * The float16 / bfloat16 conversions are integer arithmetic on the bits,
 * line for line those of lib/convert.c (whose comments explain each step),
 * so they match the reference in every case: rounding, overflow to Inf,
 * subnormals, signed zeros and the canonical NaN 0x7FFF. One exception:
 * on NVIDIA sm_90 the bfloat16 conversion is the instruction
 * cvt.rn.bf16.f32 (no .ftz), which tests/check_gpu_kernels.c (convert_all)
 * compares through the GEMM's output with lib/convert.c on all 2^32
 * binary32 patterns on the device; the float16 one stays integer
 * arithmetic.
 *
 * SMM_HD functions also compile for the host: tests/check_gpu_convert.c
 * compares the integer conversions with lib/convert.c there.
 */
#ifndef SMM_GPU_EPILOGUE_H
#define SMM_GPU_EPILOGUE_H

#include "gpu_compat.h"
#include "scaledmm.h"
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Bits of a binary32                                                  */
/* ------------------------------------------------------------------ */

SMM_HD uint32_t smm_epi_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

SMM_HD float smm_epi_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ------------------------------------------------------------------ */
/* Narrowing conversions (lib/convert.c, bit for bit)                  */
/* ------------------------------------------------------------------ */

/* binary32 -> binary16 bits: round to nearest even, subnormals kept,
 * |x| >= 65520 -> +-Inf, any NaN -> 0x7FFF. */
SMM_HD uint16_t smm_epi_f32_to_f16(float x)
{
    const uint32_t u = smm_epi_f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7FFFFFFFu;
    const uint32_t exp32 = mag >> 23;
    const uint32_t mant32 = mag & 0x007FFFFFu;

    if (mag > 0x7F800000u)                       /* NaN */
        return 0x7FFFu;
    if (mag >= 0x477FF000u)                      /* overflow, Inf */
        return (uint16_t)(sign | 0x7C00u);
    if (mag >= 0x38800000u) {                    /* normal result */
        uint32_t h = ((exp32 - 127u + 15u) << 10) | (mant32 >> 13);
        const uint32_t rest = mant32 & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h += 1u;
        return (uint16_t)(sign | h);
    }
    if (exp32 < 102u)                            /* below half the smallest subnormal */
        return sign;
    {                                            /* subnormal result */
        const uint32_t mant = 0x00800000u | mant32;
        const uint32_t shift = 126u - exp32;     /* 14 .. 24 */
        uint32_t kept = mant >> shift;
        const uint32_t rest = mant & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (kept & 1u)))
            kept += 1u;
        return (uint16_t)(sign | kept);
    }
}

/* binary32 -> bfloat16 bits: round to nearest even, any NaN -> 0x7FFF;
 * integer operations only. */
SMM_HD uint16_t smm_epi_f32_to_bf16_int(float x)
{
    const uint32_t u = smm_epi_f32_bits(x);
    uint32_t upper = u >> 16;
    const uint32_t lower = u & 0xFFFFu;

    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0x7FFFu;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
        upper += 1u;
    return (uint16_t)upper;
}

/* The same conversion; on NVIDIA sm_90 one instruction, cvt.rn.bf16.f32
 * (round to nearest even, subnormals kept without .ftz, the canonical
 * NaN 0x7FFF for any NaN), which tests/check_gpu_kernels.c compares with
 * lib/convert.c's on every binary32 bit pattern. */
SMM_HD uint16_t smm_epi_f32_to_bf16(float x)
{
#if defined(SMM_GPU_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
#else
    return smm_epi_f32_to_bf16_int(x);
#endif
}

/* binary32 as stored: any NaN -> 0x7FFFFFFF. */
SMM_HD uint32_t smm_epi_f32_canonical(float x)
{
    const uint32_t u = smm_epi_f32_bits(x);
    return ((u & 0x7FFFFFFFu) > 0x7F800000u) ? 0x7FFFFFFFu : u;
}

/* ------------------------------------------------------------------ */
/* Widening conversions (the quantizer's inputs; exact)                */
/* ------------------------------------------------------------------ */

/* binary16 bits -> binary32, exactly (subnormals normalised, Inf and NaN
 * kept as Inf and NaN, the NaN payload shifted into place). Integer
 * operations only, so no flush-to-zero mode can touch it. */
SMM_HD float smm_epi_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;

    if (exp == 0x1Fu) /* Inf / NaN */
        return smm_epi_f32_from_bits(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return smm_epi_f32_from_bits(sign);
        /* Subnormal: shift the leading 1 into the implicit bit. */
        exp = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        man &= 0x3FFu;
        return smm_epi_f32_from_bits(sign | (exp << 23) | (man << 13));
    }
    return smm_epi_f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

/* bfloat16 bits -> binary32 (the upper half). */
SMM_HD float smm_epi_bf16_to_f32(uint16_t b)
{
    return smm_epi_f32_from_bits((uint32_t)b << 16);
}

/* ------------------------------------------------------------------ */
/* The float operations of the contract                                */
/* ------------------------------------------------------------------ */

#if defined(SMM_GPU_NVIDIA) || defined(SMM_GPU_AMD)

#if defined(SMM_GPU_NVIDIA) && defined(__CUDA_ARCH__)
SMM_DEV float smm_epi_i2f(int32_t v)
{
    float r;
    asm("cvt.rn.f32.s32 %0, %1;" : "=f"(r) : "r"(v));
    return r;
}

SMM_DEV float smm_epi_mul(float a, float b)
{
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

SMM_DEV float smm_epi_fma(float a, float b, float c)
{
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}
#else
SMM_HD float smm_epi_i2f(int32_t v)
{
    return (float)v; /* round to nearest even */
}

SMM_HD float smm_epi_mul(float a, float b)
{
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    return a * b;
}

SMM_HD float smm_epi_fma(float a, float b, float c)
{
    return __builtin_fmaf(a, b, c);
}
#endif

/* What a kernel needs to finish an output element; built once by the
 * launcher from the problem. Pointers are device pointers. */
typedef struct smm_epi_params {
    void *c;                 /* C, element (m, n) at m * ldc + n */
    int64_t ldc;
    int c_dtype;             /* smm_dtype: I32 (raw), F32, F16 or BF16 */
    const float *scale_a;    /* NULL for I32 */
    int scale_a_per_row;     /* scale_a_len == M (and M > 1 or len is M) */
    const float *scale_b;
    int scale_b_per_col;
    const float *bias;       /* NULL: none */
    const int32_t *azp;      /* NULL: none */
    int azp_per_row;
} smm_epi_params;

/* The inputs of element (m, n) besides its sums: scales, bias, zero
 * point (what is absent reads as 0). Loading them apart from the
 * arithmetic lets a kernel issue the loads of several elements at once. */
typedef struct smm_epi_in {
    float sa, sb, bias;
    int32_t z;
} smm_epi_in;

/* The inputs that depend on the row m alone (scale_a, zero point) into
 * in->sa and in->z; the rest of *in is left as it is. */
SMM_DEV void smm_epi_load_row(const smm_epi_params &e, int64_t m, smm_epi_in *in)
{
    in->sa = 0.0f;
    in->z = 0;
    if (e.c_dtype == SMM_DTYPE_I32)
        return;
    in->sa = e.scale_a_per_row ? e.scale_a[m] : e.scale_a[0];
    if (e.azp != NULL)
        in->z = e.azp_per_row ? e.azp[m] : e.azp[0];
}

/* The inputs that depend on the column n alone (scale_b, bias) into
 * in->sb and in->bias; the rest of *in is left as it is. */
SMM_DEV void smm_epi_load_col(const smm_epi_params &e, int64_t n, smm_epi_in *in)
{
    in->sb = in->bias = 0.0f;
    if (e.c_dtype == SMM_DTYPE_I32)
        return;
    in->sb = e.scale_b_per_col ? e.scale_b[n] : e.scale_b[0];
    if (e.bias != NULL)
        in->bias = e.bias[n];
}

SMM_DEV smm_epi_in smm_epi_load(const smm_epi_params &e, int64_t m, int64_t n)
{
    smm_epi_in in;
    smm_epi_load_row(e, m, &in);
    smm_epi_load_col(e, n, &in);
    return in;
}

/* Element (m, n)'s inputs from row m's (smm_epi_load_row) and column
 * n's (smm_epi_load_col). */
SMM_DEV smm_epi_in smm_epi_join(const smm_epi_in &row, const smm_epi_in &col)
{
    smm_epi_in in;
    in.sa = row.sa;
    in.z = row.z;
    in.sb = col.sb;
    in.bias = col.bias;
    return in;
}

/* y of the contract for one element (scaled output types only), from its
 * loaded inputs. */
SMM_DEV float smm_epi_value_in(const smm_epi_params &e, const smm_epi_in &in, int32_t acc,
                               int32_t colsum)
{
    float f, t;
    uint32_t a = (uint32_t)acc;

    if (e.azp != NULL)
        a -= (uint32_t)in.z * (uint32_t)colsum;      /* mod 2^32 */
    f = smm_epi_i2f((int32_t)a);
    t = smm_epi_mul(f, in.sb);
    if (e.bias != NULL)
        return smm_epi_fma(in.sa, t, in.bias);
    if (e.azp != NULL)
        return smm_epi_fma(in.sa, t, 0.0f);
    return smm_epi_mul(in.sa, t);
}

/* y of the contract for one element (scaled output types only). */
SMM_DEV float smm_epi_value(const smm_epi_params &e, int64_t m, int64_t n, int32_t acc,
                            int32_t colsum)
{
    return smm_epi_value_in(e, smm_epi_load(e, m, n), acc, colsum);
}

/* The bits of element (m, n) of C, from its int32 accumulator and its
 * loaded inputs (colsum is only read when e.azp is set): C's type, in the
 * low 16 bits for float16 and bfloat16. */
SMM_DEV uint32_t smm_epi_bits_in(const smm_epi_params &e, int32_t acc, int32_t colsum,
                                 const smm_epi_in &in)
{
    if (e.c_dtype == SMM_DTYPE_I32)
        return (uint32_t)acc;
    const float y = smm_epi_value_in(e, in, acc, colsum);
    if (e.c_dtype == SMM_DTYPE_F32)
        return smm_epi_f32_canonical(y);
    if (e.c_dtype == SMM_DTYPE_F16)
        return smm_epi_f32_to_f16(y);
    return smm_epi_f32_to_bf16(y);
}

/* Bytes of one element of C: 4 (int32, float) or 2 (float16, bfloat16). */
SMM_DEV int smm_epi_c_bytes(const smm_epi_params &e)
{
    return e.c_dtype == SMM_DTYPE_I32 || e.c_dtype == SMM_DTYPE_F32 ? 4 : 2;
}

/* Stores element (m, n) of C from its bits (smm_epi_bits_in). */
SMM_DEV void smm_epi_put(const smm_epi_params &e, int64_t m, int64_t n, uint32_t bits)
{
    const int64_t off = m * e.ldc + n;

    if (e.c_dtype == SMM_DTYPE_I32 || e.c_dtype == SMM_DTYPE_F32)
        ((uint32_t *)e.c)[off] = bits;
    else
        ((uint16_t *)e.c)[off] = (uint16_t)bits;
}

/* Finishes and stores element (m, n) of C from its int32 accumulator and
 * its loaded inputs (colsum is only read when e.azp is set). */
SMM_DEV void smm_epi_store_in(const smm_epi_params &e, int64_t m, int64_t n, int32_t acc,
                              int32_t colsum, const smm_epi_in &in)
{
    smm_epi_put(e, m, n, smm_epi_bits_in(e, acc, colsum, in));
}

/* Finishes and stores element (m, n) of C from its int32 accumulator
 * (colsum is only read when e.azp is set). */
SMM_DEV void smm_epi_store(const smm_epi_params &e, int64_t m, int64_t n, int32_t acc,
                           int32_t colsum)
{
    smm_epi_store_in(e, m, n, acc, colsum, smm_epi_load(e, m, n));
}

/* Elements (m, n) and (m, n + 1) at once (both inside C); one wider store
 * when the pair is aligned for it. */
SMM_DEV void smm_epi_store2(const smm_epi_params &e, int64_t m, int64_t n, int32_t acc0,
                            int32_t acc1, int32_t colsum0, int32_t colsum1)
{
    const int64_t off = m * e.ldc + n;
    const uint32_t w0 = smm_epi_bits_in(e, acc0, colsum0, smm_epi_load(e, m, n));
    const uint32_t w1 = smm_epi_bits_in(e, acc1, colsum1, smm_epi_load(e, m, n + 1));

    if (e.c_dtype == SMM_DTYPE_I32 || e.c_dtype == SMM_DTYPE_F32) {
        uint32_t *c32 = (uint32_t *)e.c + off;
        if (((uintptr_t)c32 & 7u) == 0) {
            uint2 v;
            v.x = w0;
            v.y = w1;
            *(uint2 *)c32 = v;
        } else {
            c32[0] = w0;
            c32[1] = w1;
        }
    } else {
        uint16_t *c16 = (uint16_t *)e.c + off;
        if (((uintptr_t)c16 & 3u) == 0) {
            *(uint32_t *)c16 = w0 | (w1 << 16);
        } else {
            c16[0] = (uint16_t)w0;
            c16[1] = (uint16_t)w1;
        }
    }
}

#endif /* GPU compilers */

#endif
