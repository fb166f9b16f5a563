/*
 * check_quantize.c - smm_quantize_i8 on every available backend against the
 * reference, bit for bit: every mode (static / dynamic, symmetric /
 * asymmetric), every input type, strided and unaligned views, tails of K and
 * M, degenerate rows, thread counts 1, 2, 3.
 */
#include "testutil.h"

#include <stdio.h>
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

static Suite *quantize_suite(void)
{
    Suite *s = suite_create("quantize");
    TCase *tc = tu_tcase(s, "battery", 600);
    tcase_add_test(tc, test_battery_groups);
    tc = tu_tcase(s, "shapes", 600);
    tcase_add_test(tc, test_tails);
    tcase_add_test(tc, test_rows_and_strides);
    tcase_add_test(tc, test_ordinary_rows);
    return s;
}

int main(void)
{
    return tu_main_gpu(quantize_suite(), "check_quantize");
}
