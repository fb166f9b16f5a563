/*
 * check_quantize.c - smm_quantize_i8 on every available backend against the
 * reference, bit for bit: every mode (static / dynamic, symmetric /
 * asymmetric), every input type, strided and unaligned views, tails of K and
 * M, degenerate rows, thread counts 1, 2, 3.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const smm_dtype xtypes[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };

static void run_everywhere(const cf_quant_case *c, uint64_t seed)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int i = 0; i < nb; i++) {
        int th[3], nt = tu_thread_counts(bs[i], th);
        for (int t = 0; t < nt; t++) {
            smm_context *ctx = tu_ctx(bs[i], th[t]);
            char msg[640], desc[256];
            int res = cf_run_quant_case(ctx, ref, c, seed, msg, sizeof msg);
            smm_context_destroy(ctx);
            if (res == CF_FAIL) {
                cf_describe_quant_case(c, desc, sizeof desc);
                smm_context_destroy(ref);
                TU_FAIL_CASE(bs[i], th[t], desc, msg);
            }
        }
    }
    smm_context_destroy(ref);
}

/* The battery's three quantize groups at each thread count. */
START_TEST(test_battery_groups)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    static const char *const groups[3] = { "quantize_f32", "quantize_f16", "quantize_bf16" };
    for (int i = 0; i < nb; i++) {
        int th[3], nt = tu_thread_counts(bs[i], th);
        for (int t = 0; t < nt; t++)
            for (int g = 0; g < 3; g++) {
                smm_context *ctx = tu_ctx(bs[i], 0);
                cf_options opt = { .seed = tu_seed, .quick = 0, .num_threads = th[t] };
                cf_report rep;
                memset(&rep, 0, sizeof rep);
                int f = cf_run_group(ctx, ref, &opt, groups[g], &rep);
                smm_context_destroy(ctx);
                ck_assert_int_eq(rep.ngroups, 1);
                ck_assert_int_gt(rep.groups[0].cases, 0);
                if (f != 0) {
                    smm_context_destroy(ref);
                    ck_abort_msg("%s on %s, %d thread(s): %d failing case(s); first: %s",
                                 groups[g], smm_backend_name(bs[i]), th[t], f, rep.first_failure);
                }
            }
    }
    smm_context_destroy(ref);
}
END_TEST

/* Every K tail and several M, each mode and input type, degenerate rows. */
START_TEST(test_tails)
{
    static const int64_t ks[] = { 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33,
                                  63, 64, 65, 127, 128, 129, 255, 256, 257, 1000 };
    static const int64_t ms[] = { 1, 2, 3, 5, 8, 17, 33 };
    cf_rng r = tu_rng("tails");
    for (int d = 0; d < 3; d++)
        for (int mode = 0; mode < 4; mode++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                cf_quant_case c = { .x_dtype = xtypes[d],
                                    .mode = mode < 2 ? SMM_QUANT_STATIC_PER_TENSOR
                                                     : SMM_QUANT_DYNAMIC_PER_TOKEN,
                                    .asym = mode & 1, .row_classes = 1,
                                    .specials = (int)(ki & 1) };
                c.m = ms[cf_rng_range(&r, 0, (int64_t)(sizeof ms / sizeof ms[0]) - 1)];
                c.k = ks[ki];
                c.ldx = c.k + cf_rng_range(&r, 0, 9);
                c.ldq = c.k + cf_rng_range(&r, 0, 9);
                c.x_off = c.out_off = CF_OFFSET_RANDOM;
                run_everywhere(&c, cf_rng_next(&r));
            }
}
END_TEST

/* Row counts around thread splits, wide strides, single rows with ld 0. */
START_TEST(test_rows_and_strides)
{
    cf_rng r = tu_rng("rows");
    for (int d = 0; d < 3; d++)
        for (int rep = 0; rep < 12; rep++) {
            cf_quant_case c = { .x_dtype = xtypes[d],
                                .mode = rep & 2 ? SMM_QUANT_DYNAMIC_PER_TOKEN
                                                : SMM_QUANT_STATIC_PER_TENSOR,
                                .asym = rep & 1, .row_classes = 1, .specials = 1 };
            c.m = rep < 4 ? 1 : cf_rng_range(&r, 2, 300);
            c.k = cf_rng_range(&r, 1, 200);
            if (c.m == 1) {
                c.ldx = 0;
                c.ldq = 0;
            } else {
                c.ldx = c.k + cf_rng_range(&r, 1, 500);
                c.ldq = c.k + cf_rng_range(&r, 1, 500);
            }
            c.x_off = (int)cf_rng_range(&r, 0, 63);
            c.out_off = (int)cf_rng_range(&r, 0, 63);
            run_everywhere(&c, cf_rng_next(&r));
        }
}
END_TEST

/* Ordinary values only (no degenerate rows): the common path, many rows. */
START_TEST(test_ordinary_rows)
{
    cf_rng r = tu_rng("ordinary");
    for (int d = 0; d < 3; d++)
        for (int mode = 0; mode < 4; mode++) {
            cf_quant_case c = { .x_dtype = xtypes[d],
                                .mode = mode < 2 ? SMM_QUANT_STATIC_PER_TENSOR
                                                 : SMM_QUANT_DYNAMIC_PER_TOKEN,
                                .asym = mode & 1 };
            c.m = cf_rng_range(&r, 100, 400);
            c.k = cf_rng_range(&r, 100, 700);
            c.ldx = c.k;
            c.ldq = c.k;
            c.x_off = c.out_off = CF_OFFSET_RANDOM;
            run_everywhere(&c, cf_rng_next(&r));
        }
}
END_TEST

/* Every bf16 and every f16 bit pattern (the SIMD rows' widening, rounding,
 * clamping and NaN rule against the reference at every input), in all four
 * modes:
 * - static, symmetric and asymmetric, at scales that put many values on
 *   ties, past the int8 range and into subnormal quotients, the asymmetric
 *   ones at each scale with zero points that move the clamp, down to both
 *   int32 ends;
 * - dynamic, symmetric and asymmetric, on rows of three kinds, each with
 *   its own range: every pattern of the exponents up to the row's cap (the
 *   others 0); the same, non-negative only (zero point -128); every
 *   pattern of one sign with exponent equal to the cap, the others that
 *   binade's first value (a narrow one-signed range: large zero points).
 * K = 2^16 + 13, so that the 8-element step and the scalar tail run too.
 * The cpu backend at 1 and 2 threads. */
static void every_pattern(smm_dtype dt)
{
    static const float scales[] = { 1.0f, 0.5f, 0.25f, 3.0f, 0x1p-20f, 0x1p-130f, 1e30f,
                                    0.0078125f, 1.0f / 127.0f };
    static const int32_t zps[] = { 0, 1, -128, 127, 100000, INT32_MAX, INT32_MIN };
    const int64_t K = 65536 + 13, M = 64;
    const int f16 = dt == SMM_DTYPE_F16;
    uint16_t *x = malloc((size_t)(M * K) * sizeof *x);
    int8_t *q = malloc((size_t)(M * K)), *qr = malloc((size_t)(M * K));
    float sc[64], scr[64];
    int32_t zp[64], zpr[64];
    ck_assert(x && q && qr);
    for (int64_t r = 0; r < M; r++) {
        /* exponent field vs cap (rows >= 3) */
        const uint32_t cap = f16 ? (uint32_t)(r / 2 - 1) : (uint32_t)(r * 4 - 1);
        const unsigned mbits = f16 ? 10 : 7;
        const uint16_t sign = r & 4 ? 0x8000 : 0;
        const uint16_t first = (uint16_t)(sign | cap << mbits);
        for (int64_t k = 0; k < K; k++) {
            const uint16_t v = (uint16_t)k;
            const uint32_t e = ((uint32_t)v >> mbits) & (f16 ? 0x1F : 0xFF);
            uint16_t w;
            if (r < 3)
                w = v;
            else if (r % 3 == 0)
                w = e <= cap ? v : 0;
            else if (r % 3 == 1)
                w = e <= cap && !(v & 0x8000) ? v : 0;
            else
                w = e == cap && (v & 0x8000) == sign ? v : first;
            x[r * K + k] = w;
        }
    }
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int th = 1; th <= 2; th++) {
        smm_context *ctx = tu_ctx(SMM_BACKEND_CPU, th);
        for (int mode = 0; mode < 4; mode++) {
            const int dyn = mode >= 2, asym = mode & 1;
            const size_t ns = dyn ? 1 : sizeof scales / sizeof scales[0];
            const size_t nz = asym && !dyn ? sizeof zps / sizeof zps[0] : 1;
            for (size_t c = 0; c < ns * nz; c++) {
                const size_t si = c / nz;
                float s1 = scales[si];
                int32_t z1 = zps[c % nz];
                smm_quantize_args a = { .m = dyn ? M : 3, .k = K, .x = x, .ldx = K,
                                        .x_dtype = dt, .ldq = K,
                                        .mode = dyn ? SMM_QUANT_DYNAMIC_PER_TOKEN
                                                    : SMM_QUANT_STATIC_PER_TENSOR };
                smm_quantize_args b = a;
                memset(q, 0x5A, (size_t)(M * K));
                memset(qr, 0xA5, (size_t)(M * K));
                for (int i = 0; i < 64; i++) {
                    sc[i] = scr[i] = -1.0f;
                    zp[i] = zpr[i] = -7;
                }
                a.q = q;
                a.scale = dyn ? sc : &s1;
                a.azp = !asym ? NULL : dyn ? zp : &z1;
                b.q = qr;
                b.scale = dyn ? scr : &s1;
                b.azp = !asym ? NULL : dyn ? zpr : &z1;
                ck_assert_int_eq(smm_quantize_i8(ctx, &a), SMM_OK);
                ck_assert_int_eq(smm_quantize_i8(ref, &b), SMM_OK);
                for (int64_t i = 0; i < a.m * K; i++)
                    if (q[i] != qr[i])
                        ck_abort_msg("%s %s %s, scale %a, zero point %d, %d thread(s): row %lld, "
                                     "x bits 0x%04x: q %d, reference %d",
                                     f16 ? "f16" : "bf16", dyn ? "dynamic" : "static",
                                     asym ? "asymmetric" : "symmetric", dyn ? 0.0 : (double)s1,
                                     (int)z1, th, (long long)(i / K), x[i], q[i], qr[i]);
                if (dyn)
                    ck_assert_mem_eq(sc, scr, sizeof sc);
                if (dyn && asym)
                    ck_assert_mem_eq(zp, zpr, sizeof zp);
            }
        }
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
    free(x);
    free(q);
    free(qr);
}

START_TEST(test_every_bf16)
{
    every_pattern(SMM_DTYPE_BF16);
}
END_TEST

START_TEST(test_every_f16)
{
    every_pattern(SMM_DTYPE_F16);
}
END_TEST

static Suite *quantize_suite(void)
{
    Suite *s = suite_create("quantize");
    TCase *tc = tu_tcase(s, "battery", 600);
    tcase_add_test(tc, test_battery_groups);
    tc = tu_tcase(s, "shapes", 600);
    tcase_add_test(tc, test_tails);
    tcase_add_test(tc, test_rows_and_strides);
    tcase_add_test(tc, test_ordinary_rows);
    tcase_add_test(tc, test_every_bf16);
    tcase_add_test(tc, test_every_f16);
    return s;
}

int main(void)
{
    return tu_main_gpu(quantize_suite(), "check_quantize");
}
