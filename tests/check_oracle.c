/*
 * check_oracle.c - smm_gemm_s8s8s32 on every backend against an independent
 * oracle: OpenBLAS's cblas_dgemm on the int8 values as doubles. Every partial
 * sum is an integer below 2^53 in magnitude (|A*B| <= 2^14, K < 2^39), so the
 * double result is exact whatever OpenBLAS's order of summation; reduced
 * modulo 2^32 it is the contract's wrapping int32 accumulator.
 */
#include "testutil.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One problem: random int8 data of the given classes, strided and offset
 * for the library, compact doubles for the oracle. */
static void check_against_oracle(cf_rng *r, int64_t m, int64_t n, int64_t k, cf_values va,
                                 cf_values vb)
{
    int64_t lda = m > 1 ? k + cf_rng_range(r, 0, 9) : cf_rng_range(r, 0, k);
    int64_t ldb = n > 1 ? k + cf_rng_range(r, 0, 9) : cf_rng_range(r, 0, k);
    int64_t ldc = m > 1 ? n + cf_rng_range(r, 0, 9) : 0;
    size_t aoff = (size_t)cf_rng_range(r, 0, 63), boff = (size_t)cf_rng_range(r, 0, 63);
    size_t afoot = m > 0 ? (size_t)((m > 1 ? (m - 1) * lda : 0) + k) : 0;
    size_t bfoot = n > 0 ? (size_t)((n > 1 ? (n - 1) * ldb : 0) + k) : 0;
    int8_t *abuf = malloc(afoot + aoff + 1), *bbuf = malloc(bfoot + boff + 1);
    double *ad = malloc(sizeof(double) * (size_t)(m * k + 1));
    double *bd = malloc(sizeof(double) * (size_t)(n * k + 1));
    double *cd = malloc(sizeof(double) * (size_t)(m * n + 1));
    ck_assert(abuf && bbuf && ad && bd && cd);
    int8_t *a = abuf + aoff, *b = bbuf + boff;
    cf_fill_i8(r, a, m, k, lda, va);
    cf_fill_i8(r, b, n, k, ldb, vb);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++)
            ad[i * k + j] = (double)a[(m > 1 ? i * lda : 0) + j];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++)
            bd[i * k + j] = (double)b[(n > 1 ? i * ldb : 0) + j];
    if (m > 0 && n > 0 && k > 0)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0, ad,
                    (int)k, bd, (int)k, 0.0, cd, (int)n);
    else
        for (int64_t i = 0; i < m * n; i++)
            cd[i] = 0.0;

    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    size_t cfoot = m > 0 && n > 0 ? (size_t)((m > 1 ? (m - 1) * ldc : 0) + n) : 0;
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], bs[i] == SMM_BACKEND_REFERENCE ? 0 : (int)cf_rng_range(r, 1, 3));
        tu_buf c;
        tu_buf_alloc(&c, cfoot * 4, (size_t)cf_rng_range(r, 0, 15) * 4, 0xA5);
        int32_t *cp = (int32_t *)c.p;
        smm_status st = smm_gemm_s8s8s32(ctx, m, n, k, a, lda, b, ldb, cp, ldc);
        ck_assert_msg(st == SMM_OK, "%s: %s (%s)", smm_backend_name(bs[i]), smm_strerror(st),
                      smm_context_last_error(ctx));
        for (int64_t x = 0; x < m; x++)
            for (int64_t y = 0; y < n; y++) {
                int64_t exact = (int64_t)cd[x * n + y];
                int32_t want = (int32_t)(uint32_t)(uint64_t)exact;
                int32_t got = cp[(m > 1 ? x * ldc : 0) + y];
                ck_assert_msg(got == want,
                              "%s: m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld A=%d B=%d: "
                              "C[%lld][%lld] = %d (0x%08x), oracle %lld -> %d (0x%08x) "
                              "(replay with SMM_TEST_SEED=0x%016llx)",
                              smm_backend_name(bs[i]), (long long)m, (long long)n, (long long)k,
                              (long long)lda, (long long)ldb, (long long)ldc, (int)va, (int)vb,
                              (long long)x, (long long)y, got, (unsigned)got, (long long)exact,
                              want, (unsigned)want, (unsigned long long)tu_seed);
            }
        /* bytes outside the view untouched: poison again where elements are */
        for (int64_t x = 0; x < m; x++)
            memset(cp + (m > 1 ? x * ldc : 0), 0xA5, (size_t)n * 4);
        ck_assert_msg(tu_buf_untouched(&c), "%s: wrote outside C's view (m=%lld n=%lld ldc=%lld)",
                      smm_backend_name(bs[i]), (long long)m, (long long)n, (long long)ldc);
        tu_buf_free(&c);
        smm_context_destroy(ctx);
    }
    free(abuf);
    free(bbuf);
    free(ad);
    free(bd);
    free(cd);
}

static const int64_t tails[] = { 0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33,
                                 63, 64, 65, 127, 128, 129, 255, 256, 257 };
#define NT ((int64_t)(sizeof tails / sizeof tails[0]))

START_TEST(test_random_tails)
{
    cf_rng r = tu_rng("oracle_tails");
    for (int rep = 0; rep < 60; rep++) {
        int64_t m = tails[cf_rng_range(&r, 0, NT - 1)];
        int64_t n = tails[cf_rng_range(&r, 0, NT - 1)];
        int64_t k = rep % 3 == 0 ? cf_rng_range(&r, 1, 1200) : tails[cf_rng_range(&r, 0, NT - 1)];
        check_against_oracle(&r, m, n, k, (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1),
                             (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1));
    }
}
END_TEST

START_TEST(test_random_shapes)
{
    cf_rng r = tu_rng("oracle_shapes");
    for (int rep = 0; rep < 12; rep++)
        check_against_oracle(&r, cf_rng_range(&r, 1, 300), cf_rng_range(&r, 1, 300),
                             cf_rng_range(&r, 1, 600), CF_VALUES_UNIFORM, CF_VALUES_UNIFORM);
}
END_TEST

/* K past the no-wrap bound: the oracle's exact sum reduced mod 2^32. */
START_TEST(test_wrapping)
{
    cf_rng r = tu_rng("oracle_wrap");
    static const int64_t ks[] = { 131071, 131072, 131073, 200003 };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        check_against_oracle(&r, cf_rng_range(&r, 1, 3), cf_rng_range(&r, 1, 3), ks[i],
                             CF_VALUES_EXTREME, CF_VALUES_EXTREME);
        check_against_oracle(&r, 2, 2, ks[i], CF_VALUES_MIN, CF_VALUES_MIN);
        check_against_oracle(&r, 1, 3, ks[i], CF_VALUES_MAX, CF_VALUES_MAX);
    }
}
END_TEST

static Suite *oracle_suite(void)
{
    Suite *s = suite_create("oracle");
    TCase *tc = tu_tcase(s, "dgemm", 600);
    tcase_add_test(tc, test_random_tails);
    tcase_add_test(tc, test_random_shapes);
    tcase_add_test(tc, test_wrapping);
    return s;
}

int main(void)
{
    return tu_main(oracle_suite(), "check_oracle");
}
