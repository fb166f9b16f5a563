/*
 * check_conformance.c - every available backend against the reference,
 * bit for bit: the conformance battery at several thread counts, then the
 * edge classes one by one (tails, extreme values, K around the int32 no-wrap
 * bound, strided views, single-row matrices with ld 0, unaligned pointers,
 * thread counts, every scale / bias / azp combination and output type).
 */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const smm_dtype out_types[4] = {
    SMM_DTYPE_I32, SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16
};

static void progress_dot(const char *name, int index, int total, void *user)
{
    (void)name;
    (void)user;
    if (index % 64 == 0 || index == total - 1)
        fprintf(stderr, "  battery %d/%d\r", index + 1, total);
}

/* Runs one case on every backend and thread count; aborts on a failure. */
static void run_mm_everywhere(const cf_mm_case *c, uint64_t seed)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int i = 0; i < nb; i++) {
        int th[3], nt = tu_thread_counts(bs[i], th);
        for (int t = 0; t < nt; t++) {
            smm_context *ctx = tu_ctx(bs[i], th[t]);
            char msg[640], desc[384];
            int res = cf_run_mm_case(ctx, ref, c, seed, msg, sizeof msg);
            smm_context_destroy(ctx);
            if (res == CF_FAIL) {
                cf_describe_mm_case(c, desc, sizeof desc);
                smm_context_destroy(ref);
                TU_FAIL_CASE(bs[i], th[t], desc, msg);
            }
        }
    }
    smm_context_destroy(ref);
}

static void fill_combo(cf_mm_case *c, int combo)
{
    c->scale_a_per_token = combo & 1;
    c->scale_b_per_channel = (combo >> 1) & 1;
    c->bias = (combo >> 2) & 1;
    c->azp = (combo >> 3) % 3;
}

/* ---- the battery ---- */

START_TEST(test_battery)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    ck_assert_int_ge(nb, 1);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    /* Every backend and thread count runs; failures are reported together. */
    static char failures_msg[4096];
    failures_msg[0] = '\0';
    int failed_runs = 0;
    for (int i = 0; i < nb; i++) {
        int th[3], nt = tu_thread_counts(bs[i], th);
        for (int t = 0; t < nt; t++) {
            smm_context *ctx = tu_ctx(bs[i], 0);
            cf_options opt = { .seed = tu_seed, .quick = 1, .num_threads = th[t],
                               .progress = progress_dot };
            cf_report rep;
            int failures = cf_run_battery(ctx, ref, &opt, &rep);
            fprintf(stderr, "battery on %s, %d thread(s):", smm_backend_name(bs[i]), th[t]);
            for (int g = 0; g < rep.ngroups; g++)
                fprintf(stderr, " %s %d/%d%s", rep.groups[g].group,
                        rep.groups[g].cases - rep.groups[g].failures - rep.groups[g].skipped,
                        rep.groups[g].cases, rep.groups[g].skipped ? " (some skipped)" : "");
            fprintf(stderr, "\n");
            /* The battery must have run every group, and the thread count
             * must be back to what it was. */
            int ngroups;
            cf_group_names(&ngroups);
            ck_assert_int_eq(rep.ngroups, ngroups);
            ck_assert_int_eq(smm_context_get_num_threads(ctx), 0);
            smm_context_destroy(ctx);
            ck_assert_int_eq(rep.failures, failures);
            if (failures != 0) {
                failed_runs++;
                fprintf(stderr, "  first failure: %s\n", rep.first_failure);
                size_t len = strlen(failures_msg);
                snprintf(failures_msg + len, sizeof failures_msg - len,
                         "\n  battery on %s with %d thread(s): %d failing case(s); first: %s",
                         smm_backend_name(bs[i]), th[t], failures, rep.first_failure);
            }
        }
    }
    smm_context_destroy(ref);
    ck_assert_msg(failed_runs == 0, "%d battery run(s) failed:%s", failed_runs, failures_msg);
}
END_TEST

/* The battery's harness must notice a wrong answer: compare two different
 * problems (other seeds) and expect a failure. Guards against a harness that
 * cannot fail. */
START_TEST(test_harness_detects_difference)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    int8_t a[2 * 3] = { 1, 2, 3, 4, 5, 6 }, b[2 * 3] = { 1, 1, 1, 2, 2, 2 };
    float sa = 1.0f, sb = 1.0f;
    smm_scaled_mm_args args = { .m = 2, .n = 2, .k = 3, .a = a, .lda = 3, .b = b, .ldb = 3,
                                .scale_a = &sa, .scale_a_len = 1, .scale_b = &sb,
                                .scale_b_len = 1, .ldc = 5, .c_dtype = SMM_DTYPE_F32 };
    char msg[640];
    ck_assert_int_eq(cf_compare_mm(ref, ref, &args, 4, msg, sizeof msg), CF_PASS);
    ck_assert_int_eq(cf_compare_quantize(ref, ref,
                         &(smm_quantize_args){ .m = 1, .k = 2, .x = (float[]){ 1.5f, -2.5f },
                                               .x_dtype = SMM_DTYPE_F32, .ldx = 2, .ldq = 2,
                                               .scale = &sa,
                                               .mode = SMM_QUANT_STATIC_PER_TENSOR },
                         3, msg, sizeof msg),
                     CF_PASS);
    /* A status other than SMM_OK is a failure, not a pass. */
    args.lda = 1;
    ck_assert_int_eq(cf_compare_mm(ref, ref, &args, 0, msg, sizeof msg), CF_FAIL);
    ck_assert_ptr_nonnull(strstr(msg, "status"));
    smm_context_destroy(ref);
}
END_TEST

/* ---- edge classes ---- */

static const int64_t tails[] = {
    0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65,
    127, 128, 129, 255, 256, 257, 300
};
#define NTAILS ((int)(sizeof tails / sizeof tails[0]))

START_TEST(test_tails)
{
    cf_rng r = tu_rng("tails");
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < NTAILS; i++)
            for (int which = 0; which < 3; which++) {
                cf_mm_case c = { .c_dtype = out_types[d], .a_values = CF_VALUES_UNIFORM,
                                 .b_values = CF_VALUES_UNIFORM };
                int64_t t = tails[i];
                c.m = which == 0 ? t : cf_rng_range(&r, 1, 20);
                c.n = which == 1 ? t : cf_rng_range(&r, 1, 40);
                c.k = which == 2 ? t : cf_rng_range(&r, 1, 70);
                c.lda = c.k;
                c.ldb = c.k;
                c.ldc = c.n;
                fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
                run_mm_everywhere(&c, cf_rng_next(&r));
            }
}
END_TEST

START_TEST(test_extreme_values)
{
    cf_rng r = tu_rng("extreme");
    static const cf_values v[4] = { CF_VALUES_MIN, CF_VALUES_MAX, CF_VALUES_EXTREME,
                                    CF_VALUES_UNIFORM };
    for (int d = 0; d < 4; d++)
        for (int va = 0; va < 4; va++)
            for (int vb = 0; vb < 4; vb++)
                for (int rep = 0; rep < 2; rep++) {
                    cf_mm_case c = { .c_dtype = out_types[d], .a_values = v[va],
                                     .b_values = v[vb] };
                    c.m = cf_rng_range(&r, 1, 70);
                    c.n = cf_rng_range(&r, 1, 70);
                    c.k = cf_rng_range(&r, 1, 600);
                    c.lda = c.k + cf_rng_range(&r, 0, 5);
                    c.ldb = c.k;
                    c.ldc = c.n + cf_rng_range(&r, 0, 5);
                    fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
                    c.specials = rep;
                    run_mm_everywhere(&c, cf_rng_next(&r));
                }
}
END_TEST

/* sum_k A*B with |A|,|B| <= 128 is exact up to K = 131071 and wraps beyond;
 * every backend must wrap the same way. */
START_TEST(test_k_wrap_bound)
{
    cf_rng r = tu_rng("kwrap");
    static const int64_t ks[4] = { 131071, 131072, 131073, 140001 };
    static const cf_values v[3][2] = {
        { CF_VALUES_MIN, CF_VALUES_MIN },
        { CF_VALUES_MAX, CF_VALUES_MAX },
        { CF_VALUES_EXTREME, CF_VALUES_EXTREME },
    };
    for (int ki = 0; ki < 4; ki++)
        for (int vi = 0; vi < 3; vi++)
            for (int d = 0; d < 4; d++) {
                cf_mm_case c = { .c_dtype = out_types[d], .a_values = v[vi][0],
                                 .b_values = v[vi][1], .k = ks[ki] };
                /* small M takes the CPU backend's unpacked decode path,
                 * M > 12 its packed, blocked path: wrap through both */
                c.m = (d % 2) ? cf_rng_range(&r, 13, 40) : cf_rng_range(&r, 1, 3);
                c.n = cf_rng_range(&r, 1, 5);
                c.lda = c.k + cf_rng_range(&r, 0, 3);
                c.ldb = c.k + cf_rng_range(&r, 0, 3);
                c.ldc = c.n;
                fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
                run_mm_everywhere(&c, cf_rng_next(&r));
            }
}
END_TEST

/* The same bound with values computed by hand:
 *   all A = -128, all B = -128: every product is 16384 = 2^14;
 *   K = 131071: 131071 * 2^14 = 2^31 - 2^14 = 2147467264  (fits)
 *   K = 131072: 2^31, wraps to INT32_MIN = -2147483648
 *   K = 131073: 2^31 + 2^14 wraps to -2^31 + 2^14 = -2147467264
 *   A = 127, B = -128: products -16256; K = 131072: -2130706432 (fits);
 *   A = B = 127: products 16129; K = 133145 (first K past 2^31 / 16129):
 *   2147495705 wraps to 2147495705 - 2^32 = -2147471591. */
START_TEST(test_k_wrap_hand_values)
{
    static const struct { int64_t k; int8_t a, b; int32_t expect; } cases[] = {
        { 131071, -128, -128, 2147467264 },
        { 131072, -128, -128, INT32_MIN },
        { 131073, -128, -128, -2147467264 },
        { 131072, 127, -128, -2130706432 },
        { 131072, 127, 127, 2114060288 },      /* 16129 * 131072 */
        { 133145, 127, 127, -2147471591 },     /* 16129 * 133145 = 2147495705 - 2^32 */
    };
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t k = cases[ci].k;
        enum { M = 20, N = 3 };   /* M > 12: the CPU backend's blocked path */
        int8_t *a = malloc((size_t)(M * k)), *b = malloc((size_t)(N * k));
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        memset(a, (unsigned char)cases[ci].a, (size_t)(M * k));
        memset(b, (unsigned char)cases[ci].b, (size_t)(N * k));
        for (int i = 0; i < nb; i++) {
            smm_context *ctx = tu_ctx(bs[i], 2);
            int32_t c[M * N];
            memset(c, 0xA5, sizeof c);
            ck_assert_int_eq(smm_gemm_s8s8s32(ctx, M, N, k, a, k, b, k, c, N), SMM_OK);
            for (int e = 0; e < M * N; e++)
                ck_assert_msg(c[e] == cases[ci].expect,
                              "%s: K=%lld A=%d B=%d: C[%d] = %d (0x%08x), expected %d",
                              smm_backend_name(bs[i]), (long long)k, cases[ci].a, cases[ci].b,
                              e, c[e], (unsigned)c[e], cases[ci].expect);
            /* and through the epilogue: f = (float)INT32_MIN = -2^31 */
            float sa = 1.0f, sb = 0x1p-31f, out[M * N];
            smm_scaled_mm_args args = { .m = M, .n = N, .k = k, .a = a, .lda = k, .b = b,
                                        .ldb = k, .scale_a = &sa, .scale_a_len = 1,
                                        .scale_b = &sb, .scale_b_len = 1, .c = out, .ldc = N,
                                        .c_dtype = SMM_DTYPE_F32 };
            ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
            for (int e = 0; e < M * N; e++)
                ck_assert_msg(tu_f2u(out[e]) == tu_f2u((float)cases[ci].expect * 0x1p-31f),
                              "%s: K=%lld scaled: 0x%08x", smm_backend_name(bs[i]),
                              (long long)k, tu_f2u(out[e]));
            smm_context_destroy(ctx);
        }
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(test_strided_views)
{
    cf_rng r = tu_rng("strided");
    for (int d = 0; d < 4; d++)
        for (int rep = 0; rep < 6; rep++) {
            cf_mm_case c = { .c_dtype = out_types[d], .a_values = CF_VALUES_UNIFORM,
                             .b_values = CF_VALUES_UNIFORM };
            c.m = cf_rng_range(&r, 2, 40);
            c.n = cf_rng_range(&r, 2, 40);
            c.k = cf_rng_range(&r, 1, 100);
            c.lda = c.k + cf_rng_range(&r, 1, rep < 3 ? 17 : 1000);
            c.ldb = c.k + cf_rng_range(&r, 1, rep < 3 ? 17 : 1000);
            c.ldc = c.n + cf_rng_range(&r, 1, rep < 3 ? 17 : 1000);
            c.a_off = c.b_off = c.c_off = CF_OFFSET_RANDOM;
            fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
            run_mm_everywhere(&c, cf_rng_next(&r));
        }
}
END_TEST

/* A single-row matrix's leading dimension is not read: M == 1 with lda == 0
 * and ldc == 0, N == 1 with ldb == 0. */
START_TEST(test_single_row_ld_zero)
{
    cf_rng r = tu_rng("ldzero");
    for (int d = 0; d < 4; d++)
        for (int rep = 0; rep < 8; rep++) {
            cf_mm_case c = { .c_dtype = out_types[d], .a_values = CF_VALUES_UNIFORM,
                             .b_values = CF_VALUES_UNIFORM };
            c.k = cf_rng_range(&r, 0, 300);
            if (rep & 1) {
                c.m = 1;
                c.n = cf_rng_range(&r, 1, 70);
                c.lda = 0;
                c.ldc = 0;
                c.ldb = c.k;
            } else {
                c.m = cf_rng_range(&r, 1, 70);
                c.n = 1;
                c.lda = c.k;
                c.ldb = 0;
                c.ldc = 1;
            }
            if (rep >= 4) {
                c.m = c.n = 1;
                c.lda = c.ldb = c.ldc = 0;
            }
            fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
            run_mm_everywhere(&c, cf_rng_next(&r));
        }
}
END_TEST

START_TEST(test_unaligned)
{
    cf_rng r = tu_rng("unaligned");
    for (int d = 0; d < 4; d++)
        for (int off = 1; off < 64; off += 5) {
            cf_mm_case c = { .c_dtype = out_types[d], .a_values = CF_VALUES_UNIFORM,
                             .b_values = CF_VALUES_UNIFORM };
            c.m = cf_rng_range(&r, 1, 33);
            c.n = cf_rng_range(&r, 1, 33);
            c.k = cf_rng_range(&r, 1, 140);
            c.lda = c.k + cf_rng_range(&r, 0, 3);
            c.ldb = c.k + cf_rng_range(&r, 0, 3);
            c.ldc = c.n + cf_rng_range(&r, 0, 3);
            c.a_off = off;
            c.b_off = 64 - off;
            c.c_off = off;
            fill_combo(&c, (int)cf_rng_range(&r, 0, 23));
            run_mm_everywhere(&c, cf_rng_next(&r));
        }
}
END_TEST

/* Every scale-mode combination, bias on/off, azp none/per-tensor/per-token,
 * every output type: several instances each. */
START_TEST(test_all_combinations)
{
    cf_rng r = tu_rng("combos");
    for (int d = 1; d < 4; d++)
        for (int combo = 0; combo < 24; combo++)
            for (int rep = 0; rep < 3; rep++) {
                cf_mm_case c = { .c_dtype = out_types[d],
                                 .a_values = (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1),
                                 .b_values = (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1) };
                c.m = cf_rng_range(&r, 1, 50);
                c.n = cf_rng_range(&r, 1, 50);
                c.k = cf_rng_range(&r, 0, 200);
                c.lda = c.k + cf_rng_range(&r, 0, 4);
                c.ldb = c.k + cf_rng_range(&r, 0, 4);
                c.ldc = c.n + cf_rng_range(&r, 0, 4);
                fill_combo(&c, combo);
                if (c.bias && rep == 2)
                    c.bias = 2;
                c.specials = rep == 1;
                c.a_off = c.b_off = c.c_off = CF_OFFSET_RANDOM;
                run_mm_everywhere(&c, cf_rng_next(&r));
            }
}
END_TEST

/* Thread counts 1, 2, 3 and more threads than cores give identical bits
 * (compared with each other directly, not only with the reference). */
START_TEST(test_thread_counts_identical)
{
    cf_rng r = tu_rng("threads");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    enum { M = 133, N = 77, K = 301, LDC = 80 };
    int8_t *a = malloc(M * K), *b = malloc(N * K);
    float *sa = malloc(M * sizeof(float)), *sb = malloc(N * sizeof(float));
    float *bias = malloc(N * sizeof(float));
    int32_t azp[M];
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(sa);
    ck_assert_ptr_nonnull(sb);
    ck_assert_ptr_nonnull(bias);
    cf_fill_i8(&r, a, M, K, K, CF_VALUES_UNIFORM);
    cf_fill_i8(&r, b, N, K, K, CF_VALUES_UNIFORM);
    for (int i = 0; i < M; i++) {
        sa[i] = (float)cf_rng_range(&r, 1, 1000) * 0x1p-16f;
        azp[i] = (int32_t)cf_rng_range(&r, -128, 127);
    }
    for (int i = 0; i < N; i++) {
        sb[i] = (float)cf_rng_range(&r, 1, 1000) * 0x1p-14f;
        bias[i] = (float)cf_rng_range(&r, -100000, 100000) * 0x1p-10f;
    }
    static const int threads[5] = { 1, 2, 3, 4, 7 };
    for (int d = 0; d < 4; d++) {
        size_t es = out_types[d] == SMM_DTYPE_F16 || out_types[d] == SMM_DTYPE_BF16 ? 2 : 4;
        size_t bytes = (size_t)M * LDC * es;
        unsigned char *first = malloc(bytes), *c = malloc(bytes);
        ck_assert_ptr_nonnull(first);
        ck_assert_ptr_nonnull(c);
        int have_first = 0;
        for (int i = 0; i < nb; i++)
            for (int t = 0; t < 5; t++) {
                if (bs[i] == SMM_BACKEND_REFERENCE && t > 0)
                    continue;
                smm_context *ctx = tu_ctx(bs[i], threads[t]);
                memset(c, t & 1 ? 0x5A : 0xA5, bytes);
                smm_status st;
                if (out_types[d] == SMM_DTYPE_I32) {
                    st = smm_gemm_s8s8s32(ctx, M, N, K, a, K, b, K, (int32_t *)c, LDC);
                } else {
                    smm_scaled_mm_args args = { .m = M, .n = N, .k = K, .a = a, .lda = K,
                                                .b = b, .ldb = K, .scale_a = sa,
                                                .scale_a_len = M, .scale_b = sb,
                                                .scale_b_len = N, .bias = bias, .azp = azp,
                                                .azp_len = M, .c = c, .ldc = LDC,
                                                .c_dtype = out_types[d] };
                    st = smm_scaled_mm(ctx, &args);
                }
                smm_context_destroy(ctx);
                ck_assert_int_eq(st, SMM_OK);
                /* compare the view only (gaps hold the poison) */
                for (int m = 0; m < M; m++) {
                    if (!have_first)
                        continue;
                    ck_assert_msg(memcmp(first + (size_t)m * LDC * es, c + (size_t)m * LDC * es,
                                         (size_t)N * es) == 0,
                                  "%s output %s with %d threads differs from the first run "
                                  "in row %d", smm_backend_name(bs[i]),
                                  smm_dtype_name(out_types[d]), threads[t], m);
                }
                if (!have_first) {
                    memcpy(first, c, bytes);
                    have_first = 1;
                }
            }
        free(first);
        free(c);
    }
    free(a);
    free(b);
    free(sa);
    free(sb);
    free(bias);
}
END_TEST

static Suite *conformance_suite(void)
{
    Suite *s = suite_create("conformance");
    TCase *tc = tu_tcase(s, "battery", 900);
    tcase_add_test(tc, test_harness_detects_difference);
    tcase_add_test(tc, test_battery);
    tc = tu_tcase(s, "edges", 900);
    tcase_add_test(tc, test_tails);
    tcase_add_test(tc, test_extreme_values);
    tcase_add_test(tc, test_k_wrap_bound);
    tcase_add_test(tc, test_k_wrap_hand_values);
    tcase_add_test(tc, test_strided_views);
    tcase_add_test(tc, test_single_row_ld_zero);
    tcase_add_test(tc, test_unaligned);
    tcase_add_test(tc, test_all_combinations);
    tcase_add_test(tc, test_thread_counts_identical);
    return s;
}

int main(void)
{
    return tu_main_gpu(conformance_suite(), "check_conformance");
}
