/*
 * check_vectors.c - hand-computed vectors of the numerics contract
 * (doc/numerics.md), run on every available backend.
 *
 * Each expected value is written as bits and was derived by hand from the
 * contract's formulas (the derivation is in the comment next to it) and
 * cross-checked with an independent exact-rational calculation, never with
 * the library itself. Each epilogue vector is replicated over a 5 x 19
 * output (every row and column the same problem), so vector lanes, tails and
 * every thread see it; every output element must carry the expected bits.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VM 5
#define VN 19

enum { NOBIAS = 0, BIAS = 1 };
enum { NOAZP = 0, AZP_TENSOR = 1, AZP_TOKEN = 2 };

typedef struct mm_vector {
    const char *what;
    int k;
    int8_t a[4], b[4];         /* one row of A and of B (K <= 4) */
    uint32_t sa, sb;           /* scale bits */
    int bias;
    uint32_t bias_bits;
    int azp;
    int32_t z;
    smm_dtype dt;
    uint32_t expect;           /* output bits */
} mm_vector;

#define F32 SMM_DTYPE_F32
#define F16 SMM_DTYPE_F16
#define BF16 SMM_DTYPE_BF16
#define ONE 0x3F800000u        /* 1.0f */

static const mm_vector mm_vectors[] = {
    /* fmaf(sa, t, bias) vs sa*t + bias rounded twice. acc = 3, sb = 1, t = 3,
     * sa = 1 + 2^-23 (0x3F800001), bias = -3. Exact sa*t = 3 + 3*2^-23; fma
     * rounds once: 3*2^-23 = 1.5 * 2^-22 -> 0x34C00000. The twice-rounded
     * sum rounds sa*t first: 3 + 1.5 ulp(3) ties to the even 3 + 2^-21
     * (0x40400002), minus 3 gives 2^-21 = 0x35000000 (wrong). */
    { "fma single rounding", 1, { 3 }, { 1 }, 0x3F800001u, ONE, BIAS, 0xC0400000u, NOAZP, 0, F32, 0x34C00000u },
    { "product without bias", 1, { 3 }, { 1 }, 0x3F800001u, ONE, NOBIAS, 0, NOAZP, 0, F32, 0x40400002u },
    /* Same in float16: 3*2^-23 = 6 * 2^-24 is the f16 subnormal 0x0006; the
     * twice-rounded 2^-21 would be 0x0008. */
    { "fma single rounding f16", 1, { 3 }, { 1 }, 0x3F800001u, ONE, BIAS, 0xC0400000u, NOAZP, 0, F16, 0x0006u },
    /* t = f * sb first, then sa * t. f = 3, sb = 1 + 2^-23, sa = 1 - 2^-24:
     *   t = 3 + 3*2^-23 -> 3 + 2^-21 (tie to even, as above)
     *   y = (1 - 2^-24)(3 + 2^-21) = 3 + 1.25 ulp - 2^-45 -> 3 + 2^-22 = 0x40400001
     * The other order: 3*(1 - 2^-24) = 3 - 0.75 ulp -> 3 - 2^-22, times
     * (1 + 2^-23) = 3 + 2^-23 - 2^-45 (just under half an ulp) -> 3 = 0x40400000. */
    { "(f*sb)*sa order", 1, { 3 }, { 1 }, 0x3F7FFFFFu, 0x3F800001u, NOBIAS, 0, NOAZP, 0, F32, 0x40400001u },

    /* Canonical NaNs: f32 0x7FFFFFFF, f16 0x7FFF, bf16 0x7FFF, whatever the
     * NaN's sign and payload. */
    { "NaN scale_a f32", 1, { 1 }, { 1 }, 0x7FC00001u, ONE, NOBIAS, 0, NOAZP, 0, F32, 0x7FFFFFFFu },
    { "NaN scale_a f16", 1, { 1 }, { 1 }, 0x7FC00001u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7FFFu },
    { "NaN scale_a bf16", 1, { 1 }, { 1 }, 0x7FC00001u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x7FFFu },
    { "-NaN scale_b f32", 1, { 1 }, { 1 }, ONE, 0xFFC00000u, BIAS, 0x3F800000u, NOAZP, 0, F32, 0x7FFFFFFFu },
    { "-NaN scale_b bf16", 1, { 1 }, { 1 }, ONE, 0xFFC00000u, NOBIAS, 0, NOAZP, 0, BF16, 0x7FFFu },
    { "NaN bias f16", 1, { 1 }, { 1 }, ONE, ONE, BIAS, 0xFFC12345u, NOAZP, 0, F16, 0x7FFFu },
    /* acc = 0, sb = Inf: t = 0 * Inf = NaN */
    { "0 * Inf f32", 1, { 0 }, { 5 }, ONE, 0x7F800000u, NOBIAS, 0, NOAZP, 0, F32, 0x7FFFFFFFu },
    { "0 * Inf f16", 1, { 0 }, { 5 }, ONE, 0x7F800000u, NOBIAS, 0, NOAZP, 0, F16, 0x7FFFu },
    { "0 * Inf bf16", 1, { 0 }, { 5 }, ONE, 0x7F800000u, NOBIAS, 0, NOAZP, 0, BF16, 0x7FFFu },
    /* sa = Inf, t = 0 */
    { "Inf * 0 f32", 1, { 0 }, { 5 }, 0x7F800000u, ONE, NOBIAS, 0, NOAZP, 0, F32, 0x7FFFFFFFu },
    /* t = Inf, bias = -Inf: fma(1, Inf, -Inf) = NaN */
    { "Inf - Inf f32", 1, { 1 }, { 1 }, ONE, 0x7F800000u, BIAS, 0xFF800000u, NOAZP, 0, F32, 0x7FFFFFFFu },
    { "Inf - Inf bf16", 1, { 1 }, { 1 }, ONE, 0x7F800000u, BIAS, 0xFF800000u, NOAZP, 0, BF16, 0x7FFFu },
    /* sa = Inf, t = 1: y = Inf, float16 0x7C00 */
    { "Inf result f16", 1, { 1 }, { 1 }, 0x7F800000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7C00u },

    /* Signs of zero. K == 0: acc = 0, t = 0 * (-1) = -0, y = 1 * -0 = -0. */
    { "K=0 -0 f32", 0, { 0 }, { 0 }, ONE, 0xBF800000u, NOBIAS, 0, NOAZP, 0, F32, 0x80000000u },
    { "K=0 -0 f16", 0, { 0 }, { 0 }, ONE, 0xBF800000u, NOBIAS, 0, NOAZP, 0, F16, 0x8000u },
    { "K=0 -0 bf16", 0, { 0 }, { 0 }, ONE, 0xBF800000u, NOBIAS, 0, NOAZP, 0, BF16, 0x8000u },
    /* K == 0 with bias +0: fma(1, -0, +0) = +0; with bias -0: -0. */
    { "K=0 bias +0", 0, { 0 }, { 0 }, ONE, 0xBF800000u, BIAS, 0x00000000u, NOAZP, 0, F32, 0x00000000u },
    { "K=0 bias -0", 0, { 0 }, { 0 }, ONE, 0xBF800000u, BIAS, 0x80000000u, NOAZP, 0, F32, 0x80000000u },
    /* K == 0 with bias 1.5: fma(sa, -0, 1.5) = 1.5 (not a copy: the formula) */
    { "K=0 bias 1.5", 0, { 0 }, { 0 }, ONE, 0xBF800000u, BIAS, 0x3FC00000u, NOAZP, 0, F32, 0x3FC00000u },
    /* azp without bias: acc = 2*3 = 6, colsum = 3, z = 2: acc' = 0; sb = -1
     * gives t = -0; without azp y would be -0, with azp y = fma(1, -0, +0) = +0. */
    { "azp no bias -0 -> +0", 1, { 2 }, { 3 }, ONE, 0xBF800000u, NOBIAS, 0, AZP_TENSOR, 2, F32, 0x00000000u },
    { "azp token no bias -0 -> +0 f16", 1, { 2 }, { 3 }, ONE, 0xBF800000u, NOBIAS, 0, AZP_TOKEN, 2, F16, 0x0000u },
    { "no azp -0 stays", 1, { 0 }, { 3 }, ONE, 0xBF800000u, NOBIAS, 0, NOAZP, 0, F32, 0x80000000u },
    { "azp bias -0 keeps -0", 1, { 2 }, { 3 }, ONE, 0xBF800000u, BIAS, 0x80000000u, AZP_TENSOR, 2, F32, 0x80000000u },
    /* acc = 1*3 + 2*4 = 11, colsum = 7, z = 2: acc' = -3 -> -3.0f */
    { "azp arithmetic", 2, { 1, 2 }, { 3, 4 }, ONE, ONE, NOBIAS, 0, AZP_TOKEN, 2, F32, 0xC0400000u },
    /* acc = 0, colsum = 127, z = 2^30: z * colsum = 127 * 2^30 = 3 * 2^30
     * (mod 2^32) = 0xC0000000; acc' = -0xC0000000 mod 2^32 = 2^30 -> 0x4E800000. */
    { "azp wraps mod 2^32", 1, { 0 }, { 127 }, ONE, ONE, NOBIAS, 0, AZP_TENSOR, 0x40000000, F32, 0x4E800000u },

    /* Subnormal results (kept, never flushed). f32: acc = 5, sb = 0.5,
     * t = 2.5, sa = 2^-149: 2.5 * 2^-149 ties to even 2 * 2^-149. */
    { "f32 subnormal tie", 1, { 5 }, { 1 }, 0x00000001u, 0x3F000000u, NOBIAS, 0, NOAZP, 0, F32, 0x00000002u },
    { "f32 subnormal 3", 1, { 3 }, { 1 }, 0x00000001u, ONE, NOBIAS, 0, NOAZP, 0, F32, 0x00000003u },
    /* subnormal scale times 1 stays exact (no DAZ) */
    { "f32 subnormal input", 1, { 1 }, { 1 }, 0x00012345u, ONE, NOBIAS, 0, NOAZP, 0, F32, 0x00012345u },
    /* f16 (y = sa, since acc = 1 and sb = 1): 2^-24 is f16's 0x0001.
     *   3 * 2^-24 (0x34400000)   -> 0x0003
     *   2.5 * 2^-24 (0x34200000) -> tie, even 0x0002
     *   1.5 * 2^-24 (0x33C00000) -> tie, even 0x0002
     *   0.5 * 2^-24 (0x33000000) -> tie, even 0x0000
     *   2^-25 + 2^-40 (0x33000100) -> just above half: 0x0001
     *   2^-14 - 2^-25 (0x387FE000) = 1023.5 * 2^-24 -> tie, even 1024 = 0x0400 */
    { "f16 subnormal 3", 1, { 1 }, { 1 }, 0x34400000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0003u },
    { "f16 subnormal tie 2.5", 1, { 1 }, { 1 }, 0x34200000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0002u },
    { "f16 subnormal tie 1.5", 1, { 1 }, { 1 }, 0x33C00000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0002u },
    { "f16 subnormal tie 0.5", 1, { 1 }, { 1 }, 0x33000000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0000u },
    { "f16 subnormal above half", 1, { 1 }, { 1 }, 0x33000100u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0001u },
    { "f16 subnormal -3", 1, { -1 }, { 1 }, 0x34400000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x8003u },
    { "f16 to min normal", 1, { 1 }, { 1 }, 0x387FE000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x0400u },
    /* bf16 keeps the top 16 bits of a binary32, rounded to nearest even:
     *   0x00018000 -> tie, even 0x0002;  0x00028000 -> tie, even 0x0002
     *   0x00030000 -> 0x0003;  0x80018000 -> 0x8002 */
    { "bf16 subnormal tie up", 1, { 1 }, { 1 }, 0x00018000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x0002u },
    { "bf16 subnormal tie down", 1, { 1 }, { 1 }, 0x00028000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x0002u },
    { "bf16 subnormal exact", 1, { 1 }, { 1 }, 0x00030000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x0003u },
    { "bf16 subnormal negative", 1, { 1 }, { 1 }, 0x80018000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x8002u },

    /* float16 overflow: 65504 (0x477FE000) is the largest finite, 0x7BFF;
     * values below 65520 round down to it, 65520 (0x477FF000) is the tie
     * with 65536 and goes to Inf (0x7C00). 65519 = 0x477FEF00, the float
     * just below 65520 is 0x477FEFFF. */
    { "f16 65504", 1, { 1 }, { 1 }, 0x477FE000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7BFFu },
    { "f16 65519", 1, { 1 }, { 1 }, 0x477FEF00u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7BFFu },
    { "f16 65519.996", 1, { 1 }, { 1 }, 0x477FEFFFu, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7BFFu },
    { "f16 65520 -> Inf", 1, { 1 }, { 1 }, 0x477FF000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7C00u },
    { "f16 -65520 -> -Inf", 1, { -1 }, { 1 }, 0x477FF000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0xFC00u },
    { "f16 FLT_MAX -> Inf", 1, { 1 }, { 1 }, 0x7F7FFFFFu, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x7C00u },
    /* float16 ties: 1 + 2^-11 (0x3F801000) is halfway between 0x3C00 and
     * 0x3C01 -> 0x3C00; 1 + 3*2^-11 (0x3F803000) -> 0x3C02. */
    { "f16 tie down", 1, { 1 }, { 1 }, 0x3F801000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x3C00u },
    { "f16 tie up", 1, { 1 }, { 1 }, 0x3F803000u, ONE, NOBIAS, 0, NOAZP, 0, F16, 0x3C02u },
    /* bfloat16 ties to even: 0x3F808000 -> 0x3F80, 0x3F818000 -> 0x3F82,
     * 0x3F808001 (above half) -> 0x3F81, 0xBF808000 -> 0xBF80;
     * overflow: 0x7F7FFFFF (FLT_MAX) and the tie 0x7F7F8000 (0x7F7F is odd)
     * round to Inf 0x7F80; 0x7F7F7FFF stays 0x7F7F. */
    { "bf16 tie down", 1, { 1 }, { 1 }, 0x3F808000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x3F80u },
    { "bf16 tie up", 1, { 1 }, { 1 }, 0x3F818000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x3F82u },
    { "bf16 above half", 1, { 1 }, { 1 }, 0x3F808001u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x3F81u },
    { "bf16 negative tie", 1, { -1 }, { 1 }, 0x3F808000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0xBF80u },
    { "bf16 FLT_MAX -> Inf", 1, { 1 }, { 1 }, 0x7F7FFFFFu, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x7F80u },
    { "bf16 tie at max -> Inf", 1, { 1 }, { 1 }, 0x7F7F8000u, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x7F80u },
    { "bf16 below tie at max", 1, { 1 }, { 1 }, 0x7F7F7FFFu, ONE, NOBIAS, 0, NOAZP, 0, BF16, 0x7F7Fu },
};

static void run_mm_vector(smm_context *ctx, smm_backend be, const mm_vector *v)
{
    enum { LDA = 7, LDB = 6, LDC = VN + 3 };
    int8_t a[VM * LDA], b[VN * LDB];
    float sa[VM], sb[VN], bias[VN];
    int32_t azp[VM];
    memset(a, 0x55, sizeof a);   /* gaps hold garbage */
    memset(b, 0x66, sizeof b);
    for (int m = 0; m < VM; m++) {
        memcpy(a + m * LDA, v->a, (size_t)v->k);
        sa[m] = tu_u2f(v->sa);
        azp[m] = v->z;
    }
    for (int n = 0; n < VN; n++) {
        memcpy(b + n * LDB, v->b, (size_t)v->k);
        sb[n] = tu_u2f(v->sb);
        bias[n] = tu_u2f(v->bias_bits);
    }
    size_t es = v->dt == SMM_DTYPE_F32 ? 4 : 2;
    /* Per-token / per-channel scales for odd-numbered runs, per-tensor for even. */
    for (int mode = 0; mode < 2; mode++) {
        unsigned char c[VM * LDC * 4];
        memset(c, 0xA5, sizeof c);
        smm_scaled_mm_args args = {
            .m = VM, .n = VN, .k = v->k, .a = a, .lda = LDA, .b = b, .ldb = LDB,
            .scale_a = sa, .scale_a_len = mode ? VM : 1,
            .scale_b = sb, .scale_b_len = mode ? VN : 1,
            .bias = v->bias ? bias : NULL,
            .azp = v->azp ? azp : NULL, .azp_len = v->azp == AZP_TOKEN ? VM : 1,
            .c = c, .ldc = LDC, .c_dtype = v->dt,
        };
        smm_status st = smm_scaled_mm(ctx, &args);
        ck_assert_msg(st == SMM_OK, "%s: vector \"%s\": %s (%s)", smm_backend_name(be), v->what,
                      smm_strerror(st), smm_context_last_error(ctx));
        for (int m = 0; m < VM; m++) {
            for (int n = 0; n < VN; n++) {
                uint32_t got = 0;
                memcpy(&got, c + ((size_t)m * LDC + n) * es, es);
                ck_assert_msg(got == v->expect,
                              "%s: vector \"%s\" (%s, %s scales): C[%d][%d] = 0x%0*x, expected 0x%0*x",
                              smm_backend_name(be), v->what, smm_dtype_name(v->dt),
                              mode ? "per-token/per-channel" : "per-tensor", m, n, (int)es * 2,
                              got, (int)es * 2, v->expect);
            }
            for (size_t x = (size_t)VN * es; x < LDC * es && m < VM - 1; x++)
                ck_assert_msg(c[(size_t)m * LDC * es + x] == 0xA5,
                              "%s: vector \"%s\": gap byte written", smm_backend_name(be), v->what);
        }
    }
}

START_TEST(test_epilogue_vectors)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++)
        for (int threads = 1; threads <= 2; threads++) {
            smm_context *ctx = tu_ctx(bs[i], threads);
            for (size_t v = 0; v < sizeof mm_vectors / sizeof mm_vectors[0]; v++)
                run_mm_vector(ctx, bs[i], &mm_vectors[v]);
            smm_context_destroy(ctx);
        }
}
END_TEST

/* The exported scalar conversions agree with the same hand values. */
START_TEST(test_conversion_functions)
{
    for (size_t v = 0; v < sizeof mm_vectors / sizeof mm_vectors[0]; v++) {
        const mm_vector *x = &mm_vectors[v];
        /* vectors whose y is simply sa (acc = 1 or -1, sb = 1, no bias/azp) */
        if (x->k != 1 || x->sb != ONE || x->bias || x->azp || x->b[0] != 1 ||
            (x->a[0] != 1 && x->a[0] != -1) || x->dt == SMM_DTYPE_F32)
            continue;
        float y = tu_u2f(x->sa) * (float)x->a[0];
        uint16_t got = x->dt == SMM_DTYPE_F16 ? smm_f32_to_f16(y) : smm_f32_to_bf16(y);
        ck_assert_msg(got == x->expect, "%s: convert(0x%08x) = 0x%04x, expected 0x%04x", x->what,
                      tu_f2u(y), got, x->expect);
    }
    /* widening is exact: subnormals, Inf, NaN payload kept as NaN */
    ck_assert_uint_eq(tu_f2u(smm_f16_to_f32(0x0001)), 0x33800000u);   /* 2^-24 */
    ck_assert_uint_eq(tu_f2u(smm_f16_to_f32(0x83FF)), 0xB87FC000u);   /* -(1023 * 2^-24) */
    ck_assert_uint_eq(tu_f2u(smm_f16_to_f32(0x7BFF)), 0x477FE000u);   /* 65504 */
    ck_assert_uint_eq(tu_f2u(smm_f16_to_f32(0xFC00)), 0xFF800000u);   /* -Inf */
    ck_assert(isnan(smm_f16_to_f32(0x7E00)));
    ck_assert_uint_eq(tu_f2u(smm_bf16_to_f32(0x0001)), 0x00010000u);  /* 2^-133 */
    ck_assert_uint_eq(tu_f2u(smm_bf16_to_f32(0xFF80)), 0xFF800000u);
    ck_assert(isnan(smm_bf16_to_f32(0x7FC1)));
    /* NaN of any sign and payload -> 0x7FFF */
    ck_assert_uint_eq(smm_f32_to_f16(tu_u2f(0xFFC00001u)), 0x7FFFu);
    ck_assert_uint_eq(smm_f32_to_bf16(tu_u2f(0x7F800001u)), 0x7FFFu);
    ck_assert_uint_eq(smm_f32_to_bf16(tu_u2f(0xFFFFFFFFu)), 0x7FFFu);
}
END_TEST

/* ---- quantizer vectors ---- */

#define QMAX 10
typedef struct q_vector {
    const char *what;
    smm_dtype xt;
    smm_quant_mode mode;
    int asym;
    int k;
    uint32_t x[QMAX];          /* bits of the input type */
    uint32_t scale;            /* static: input scale; dynamic: expected */
    int32_t z;                 /* static asym: input; dynamic asym: expected */
    int8_t q[QMAX];
} q_vector;

#define STATIC SMM_QUANT_STATIC_PER_TENSOR
#define DYNAMIC SMM_QUANT_DYNAMIC_PER_TOKEN
#define PINF 0x7F800000u
#define NINF 0xFF800000u
#define QNAN 0x7FC00000u

static const q_vector q_vectors[] = {
    /* rne_sat_i8(x / 1): ties to even, and +-0.5 to 0 */
    { "ties", F32, STATIC, 0, 8,
      { 0x40200000u /* 2.5 */, 0x40600000u /* 3.5 */, 0xC0200000u /* -2.5 */, 0xC0600000u /* -3.5 */,
        0x3F000000u /* 0.5 */, 0xBF000000u /* -0.5 */, 0x3FC00000u /* 1.5 */, 0xBFC00000u /* -1.5 */ },
      ONE, 0, { 2, 4, -2, -4, 0, 0, 2, -2 } },
    /* saturation: +-1e30 and +-Inf clamp to the ends, NaN -> 0, 127.5 rounds
     * to 128 then clamps to 127, -128.5 rounds to -128. */
    { "saturation", F32, STATIC, 0, 8,
      { 0x7149F2CAu /* 1e30 */, 0xF149F2CAu /* -1e30 */, PINF, NINF, QNAN,
        0x42FF0000u /* 127.5 */, 0xC3008000u /* -128.5 */, 0xC3010000u /* -129 */ },
      ONE, 0, { 127, -128, 127, -128, 0, 127, -128, -128 } },
    /* static symmetric is a true division: s = 3, x = 28.499998 (0x41E3FFFF):
     * x/3 = 9.499999 -> 9 (x * fl(1/3) would give 9.5 -> 10);
     * x = 52.499996 (0x4251FFFF): x/3 = 17.499998 -> 17 (not 18). */
    { "division, not reciprocal", F32, STATIC, 0, 2, { 0x41E3FFFFu, 0x4251FFFFu },
      0x40400000u, 0, { 9, 17 } },
    /* static asymmetric multiplies by fl(1/s): same x, s = 3, z = 0:
     * 28.499998 * 0.33333334 = 9.5 (rounded) -> 10; 52.499996 -> 17.5 -> 18. */
    { "asym reciprocal", F32, STATIC, 1, 2, { 0x41E3FFFFu, 0x4251FFFFu },
      0x40400000u, 0, { 10, 18 } },
    /* scale 0: x/0 = +-Inf -> 127 / -128, 0/0 = NaN -> 0 */
    { "static scale 0", F32, STATIC, 0, 3, { ONE, 0xBF800000u, 0 }, 0, 0, { 127, -128, 0 } },
    /* static asymmetric, s = 1, z = 10: rne(x) + 10, saturated:
     * 0 -> 10, 117 -> 127, 118 -> 128 -> 127, -138 -> -128, -139 -> -129 -> -128,
     * 2.5 -> 2 + 10 = 12, -2.5 -> -2 + 10 = 8 */
    { "static asym", F32, STATIC, 1, 7,
      { 0, 0x42EA0000u /* 117 */, 0x42EC0000u /* 118 */, 0xC30A0000u /* -138 */,
        0xC30B0000u /* -139 */, 0x40200000u, 0xC0200000u },
      ONE, 10, { 10, 127, 127, -128, -128, 12, 8 } },
    /* z added in 64 bits after saturating to int32: x = 1e10 -> INT32_MAX,
     * + 100 = 2147483747 -> 127 (an int32 wrap would give -128). */
    { "z sum in 64 bits (+)", F32, STATIC, 1, 1, { 0x501502F9u /* 1e10 */ }, ONE, 100, { 127 } },
    { "z sum in 64 bits (-)", F32, STATIC, 1, 1, { 0xD01502F9u /* -1e10 */ }, ONE, -100, { -128 } },
    /* INT32_MAX + (-2147483647) = 0 */
    { "z cancels saturated value", F32, STATIC, 1, 1, { 0x501502F9u }, ONE, -2147483647, { 0 } },
    /* INT32_MIN + INT32_MAX = -1 */
    { "z with INT32_MIN", F32, STATIC, 1, 1, { 0xD01502F9u }, ONE, 2147483647, { -1 } },

    /* dynamic symmetric: [1, -2, 0.5]: amax = 2, scale = 2/127 = 0x3C810204,
     * inv = 127/2 = 63.5: 63.5 -> 64 (tie, even), -127, 31.75 -> 32 */
    { "dynamic", F32, DYNAMIC, 0, 3, { ONE, 0xC0000000u, 0x3F000000u }, 0x3C810204u, 0, { 64, -127, 32 } },
    /* NaN ignored by amax and quantized to 0: [NaN, 2, -1]: amax 2,
     * -1 * 63.5 = -63.5 -> -64 (tie, even) */
    { "dynamic NaN", F32, DYNAMIC, 0, 3, { QNAN, 0x40000000u, 0xBF800000u }, 0x3C810204u, 0, { 0, 127, -64 } },
    /* zero row: amax = 0, scale 0, inv 0 */
    { "dynamic zero row", F32, DYNAMIC, 0, 3, { 0, 0x80000000u, 0 }, 0, 0, { 0, 0, 0 } },
    /* row with Inf: amax = Inf, scale = Inf, inv = 127/Inf = 0; Inf*0 = NaN -> 0 */
    { "dynamic Inf row", F32, DYNAMIC, 0, 3, { PINF, ONE, 0xC0000000u }, PINF, 0, { 0, 0, 0 } },
    /* dynamic asymmetric [0, 255]: s = 255/255 = 1, z = rne(-128 - 0) = -128,
     * q = rne(x) - 128 = -128, 127 */
    { "dynamic asym", F32, DYNAMIC, 1, 2, { 0, 0x437F0000u }, ONE, -128, { -128, 127 } },
    /* [-1, 1, 0.25]: s = fl(2/255) = 0x3C008081 (slightly above 2/255), so
     * fl(1/s) = 127.49999237, -1/s = -127.49999237 and
     * z = rne(-128 + 127.49999237) = rne(-0.50000763) = -1;
     * q = rne(-127.49999) - 1 = -128, rne(127.49999) - 1 = 126,
     * rne(31.87499809) - 1 = 31 */
    { "dynamic asym symmetric range", F32, DYNAMIC, 1, 3, { 0xBF800000u, ONE, 0x3E800000u },
      0x3C008081u, -1, { -128, 126, 31 } },
    /* [1e6, 1e6 + 64, 1e6 + 32]: s = 64/255 = 0x3E808081, 1e6/s = 3984374.75,
     * z = rne(-3984502.75) = -3984503, q = -128, 127, -1 (a zero point far
     * outside int8) */
    { "dynamic asym offset range", F32, DYNAMIC, 1, 3,
      { 0x49742400u /* 1e6 */, 0x49742800u /* 1000064 */, 0x49742600u /* 1000032 */ },
      0x3E808081u, -3984503, { -128, 127, -1 } },
    /* degenerate rows fall back to symmetric with azp 0:
     * constant [3, 3, 3]: s = 0 -> amax 3, scale 3/127 = 0x3CC18306,
     * inv = 127/3 = 42.333332, 3 * 42.333332 = 127 (rounded) -> 127 */
    { "asym constant row", F32, DYNAMIC, 1, 3, { 0x40400000u, 0x40400000u, 0x40400000u },
      0x3CC18306u, 0, { 127, 127, 127 } },
    /* all-NaN: mn = FLT_MAX, mx = -FLT_MAX, s = -Inf -> fallback, amax 0 */
    { "asym all-NaN row", F32, DYNAMIC, 1, 3, { QNAN, 0xFFC00000u, 0x7FC12345u }, 0, 0, { 0, 0, 0 } },
    /* infinite range [-Inf, 1, 2]: s = Inf -> fallback: amax Inf, inv 0 */
    { "asym infinite range", F32, DYNAMIC, 1, 3, { NINF, ONE, 0x40000000u }, PINF, 0, { 0, 0, 0 } },
    /* overflowing range [-3e38, 3e38]: mx - mn = Inf -> fallback:
     * scale = 3e38/127 = 0x7BE378D8, q = -127, 127 */
    { "asym overflowing range", F32, DYNAMIC, 1, 2, { 0xFF61B1E6u, 0x7F61B1E6u }, 0x7BE378D8u, 0,
      { -127, 127 } },
    /* subnormal range [0, 1e-40 (0x000116C2)]: s = 1e-40/255 > 0 but
     * fl(1/s) = Inf -> fallback: scale = 0x000116C2/127 = 0x00000232
     * (subnormal, kept), inv = 127/1e-40 = Inf, 0*Inf = NaN -> 0, 1e-40*Inf -> 127 */
    { "asym subnormal range", F32, DYNAMIC, 1, 2, { 0, 0x000116C2u }, 0x00000232u, 0, { 0, 127 } },

    /* float16 inputs, widened exactly (subnormals included):
     * scale 2^-24: 0x0001 = 2^-24 -> 1, 0x0003 -> 3, 0x8005 -> -5,
     * 0x0200 = 2^-15 -> 512 -> 127, NaN 0x7E00 -> 0, -Inf 0xFC00 -> -128 */
    { "f16 subnormals", F16, STATIC, 0, 6, { 0x0001, 0x0003, 0x8005, 0x0200, 0x7E00, 0xFC00 },
      0x33800000u /* 2^-24 */, 0, { 1, 3, -5, 127, 0, -128 } },
    /* scale 2^-23: 0x0001 -> 0.5 -> 0, 0x0003 -> 1.5 -> 2, 0x0005 -> 2.5 -> 2,
     * 0x8007 -> -3.5 -> -4; 65504/512 with scale 512: 127.9375 -> 128 -> 127 */
    { "f16 subnormal ties", F16, STATIC, 0, 4, { 0x0001, 0x0003, 0x0005, 0x8007 },
      0x34000000u /* 2^-23 */, 0, { 0, 2, 2, -4 } },
    { "f16 max", F16, STATIC, 0, 2, { 0x7BFF, 0xFBFF }, 0x44000000u /* 512 */, 0, { 127, -128 } },
    /* dynamic on f16 subnormals [2^-24, -2^-23, 0]: amax = 2^-23,
     * scale = 2^-23/127 = 0x30810204, inv = 127 * 2^23: 63.5 -> 64, -127, 0 */
    { "f16 dynamic subnormals", F16, DYNAMIC, 0, 3, { 0x0001, 0x8002, 0x0000 }, 0x30810204u, 0,
      { 64, -127, 0 } },
    /* bfloat16: 0x0001 = 2^-133; scale 2^-134 (0x00008000, a subnormal
     * float): 0x0001 -> 2, 0x0003 -> 6, 0x8002 -> -4, NaN -> 0, -Inf -> -128 */
    { "bf16 subnormals", BF16, STATIC, 0, 5, { 0x0001, 0x0003, 0x8002, 0x7FC1, 0xFF80 },
      0x00008000u, 0, { 2, 6, -4, 0, -128 } },
    /* scale 2^-132 (0x00020000): 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -3.5 -> -4 */
    { "bf16 subnormal ties", BF16, STATIC, 0, 4, { 0x0001, 0x0003, 0x0005, 0x8007 },
      0x00020000u, 0, { 0, 2, 2, -4 } },
    /* bf16 dynamic asym [0, 255] (0x437F): as the f32 case */
    { "bf16 dynamic asym", BF16, DYNAMIC, 1, 2, { 0x0000, 0x437F }, ONE, -128, { -128, 127 } },
};

static void run_q_vector(smm_context *ctx, smm_backend be, const q_vector *v)
{
    enum { QM = 3 };
    const int ldx = v->k + 2, ldq = v->k + 3;
    size_t xs = v->xt == SMM_DTYPE_F32 ? 4 : 2;
    unsigned char x[QM * (QMAX + 2) * 4];
    int8_t q[QM * (QMAX + 3)];
    float scale[QM];
    int32_t azp[QM];
    memset(x, 0x7F, sizeof x);   /* gaps: NaN-ish / huge garbage */
    for (int m = 0; m < QM; m++)
        for (int k = 0; k < v->k; k++) {
            uint32_t bits = v->x[k];
            memcpy(x + ((size_t)m * ldx + k) * xs, &bits, xs);   /* little-endian */
        }
    memset(q, 0xA5, sizeof q);
    memset(scale, 0xA5, sizeof scale);
    memset(azp, 0xA5, sizeof azp);
    float s_in = tu_u2f(v->scale);
    int32_t z_in = v->z;
    smm_quantize_args args = { .m = QM, .k = v->k, .x = x, .x_dtype = v->xt, .ldx = ldx,
                               .q = q, .ldq = ldq, .mode = v->mode };
    if (v->mode == STATIC) {
        args.scale = &s_in;
        args.azp = v->asym ? &z_in : NULL;
    } else {
        args.scale = scale;
        args.azp = v->asym ? azp : NULL;
    }
    smm_status st = smm_quantize_i8(ctx, &args);
    ck_assert_msg(st == SMM_OK, "%s: quantizer vector \"%s\": %s (%s)", smm_backend_name(be),
                  v->what, smm_strerror(st), smm_context_last_error(ctx));
    for (int m = 0; m < QM; m++) {
        for (int k = 0; k < v->k; k++)
            ck_assert_msg(q[m * ldq + k] == v->q[k],
                          "%s: quantizer vector \"%s\": q[%d][%d] = %d, expected %d",
                          smm_backend_name(be), v->what, m, k, q[m * ldq + k], v->q[k]);
        for (int k = v->k; k < ldq && m < QM - 1; k++)
            ck_assert_msg((unsigned char)q[m * ldq + k] == 0xA5, "%s: \"%s\": gap of q written",
                          smm_backend_name(be), v->what);
        if (v->mode == DYNAMIC) {
            ck_assert_msg(tu_f2u(scale[m]) == v->scale,
                          "%s: quantizer vector \"%s\": scale[%d] = 0x%08x, expected 0x%08x",
                          smm_backend_name(be), v->what, m, tu_f2u(scale[m]), v->scale);
            if (v->asym)
                ck_assert_msg(azp[m] == v->z,
                              "%s: quantizer vector \"%s\": azp[%d] = %d, expected %d",
                              smm_backend_name(be), v->what, m, azp[m], v->z);
        }
    }
    if (v->mode == DYNAMIC && !v->asym) {
        for (int m = 0; m < QM; m++)
            ck_assert_int_eq(azp[m], (int32_t)0xA5A5A5A5);
    }
}

START_TEST(test_quantizer_vectors)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++)
        for (int threads = 1; threads <= 3; threads += 2) {
            smm_context *ctx = tu_ctx(bs[i], threads);
            for (size_t v = 0; v < sizeof q_vectors / sizeof q_vectors[0]; v++)
                run_q_vector(ctx, bs[i], &q_vectors[v]);
            smm_context_destroy(ctx);
        }
}
END_TEST

/* K == 0, dynamic: scale 0 and azp 0 written for every row; q untouched. */
START_TEST(test_quantize_k0)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        float scale[4];
        int32_t azp[4];
        int8_t q[4];
        float x[4] = { 1, 2, 3, 4 };
        memset(scale, 0xA5, sizeof scale);
        memset(azp, 0xA5, sizeof azp);
        memset(q, 0xA5, sizeof q);
        smm_quantize_args args = { .m = 3, .k = 0, .x = x, .x_dtype = SMM_DTYPE_F32, .ldx = 0,
                                   .q = q, .ldq = 0, .scale = scale, .azp = azp,
                                   .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
        ck_assert_int_eq(smm_quantize_i8(ctx, &args), SMM_OK);
        for (int m = 0; m < 3; m++) {
            ck_assert_uint_eq(tu_f2u(scale[m]), 0u);
            ck_assert_int_eq(azp[m], 0);
        }
        ck_assert_uint_eq(tu_f2u(scale[3]), 0xA5A5A5A5u);
        ck_assert_int_eq(azp[3], (int32_t)0xA5A5A5A5);
        for (int j = 0; j < 4; j++)
            ck_assert_int_eq((unsigned char)q[j], 0xA5);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* Signalling NaNs are NaNs too: ignored by the dynamic range (fmaxf / fminf
 * semantics, "NaN ignored") and quantized to 0. Row [Inf, sNaN, 1]: amax is
 * Inf whatever the NaN's kind, so scale = Inf, inv = 0, q = 0, 0, 0. Row
 * [sNaN, 2, -1] as the quiet-NaN vector: scale 2/127, q = 0, 127, -64. */
START_TEST(test_quantize_signalling_nan)
{
    static const q_vector v[] = {
        { "sNaN after Inf", F32, DYNAMIC, 0, 3, { PINF, 0x7FA00000u, ONE }, PINF, 0, { 0, 0, 0 } },
        { "-sNaN after Inf", F32, DYNAMIC, 0, 3, { PINF, 0xFF800001u, ONE }, PINF, 0, { 0, 0, 0 } },
        { "sNaN first", F32, DYNAMIC, 0, 3, { 0x7F800001u, 0x40000000u, 0xBF800000u }, 0x3C810204u, 0,
          { 0, 127, -64 } },
        /* asym [0, sNaN, 255]: s = 1, z = -128; the NaN element gives
         * sat_i8(rne_sat_i32(NaN) + z) = sat_i8(0 - 128) = -128 */
        { "sNaN asym", F32, DYNAMIC, 1, 3, { 0, 0x7F800001u, 0x437F0000u }, ONE, -128, { -128, -128, 127 } },
        /* f16 sNaN 0x7C01 between 65504 and 1: amax 65504, scale =
         * 65504/127 = 515.7795 = 0x4400F1E4, 65504 * fl(127/65504) -> 127,
         * 1 * fl(127/65504) = 0.0019 -> 0 */
        { "f16 sNaN", F16, DYNAMIC, 0, 3, { 0x7BFF, 0x7C01, 0x3C00 }, 0x4400F1E4u, 0, { 127, 0, 0 } },
    };
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 1);
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++)
            run_q_vector(ctx, bs[i], &v[j]);
        smm_context_destroy(ctx);
    }
}
END_TEST

static Suite *vectors_suite(void)
{
    Suite *s = suite_create("vectors");
    TCase *tc = tu_tcase(s, "epilogue", 300);
    tcase_add_test(tc, test_epilogue_vectors);
    tcase_add_test(tc, test_conversion_functions);
    tc = tu_tcase(s, "quantizer", 300);
    tcase_add_test(tc, test_quantizer_vectors);
    tcase_add_test(tc, test_quantize_k0);
    tcase_add_test(tc, test_quantize_signalling_nan);
    return s;
}

int main(void)
{
    return tu_main(vectors_suite(), "check_vectors");
}
