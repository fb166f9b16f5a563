/*
 * check_threads.c - one context used by several threads at once
 * (include/scaledmm.h, "Threads"): threads hammer one context with failing
 * and succeeding calls; every failing call must read its own message
 * (never another thread's, never an empty one), every succeeding call ""
 * and bit-exact results. Also: messages are kept per context and per
 * thread, and a new context never shows an old one's message.
 *
 * Check's assertions are made on the test's own thread only: the workers
 * count what they see, and the first mismatch is reported from there.
 */
#include "config.h"
#include "testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NWORKERS = 4, ITERATIONS = 4000, M = 3, N = 5, K = 7 };

typedef struct {
    smm_context *ctx;
    int id;
    int8_t a[M * K], b[N * K];
    int32_t expect[M * N];   /* the reference's accumulators */
    long bad_message, empty_message, bad_result, bad_status, calls;
    char first[512];
} worker;

static void note(worker *w, const char *what, const char *got, const char *want)
{
    if (w->first[0] == '\0')
        snprintf(w->first, sizeof w->first, "worker %d: %s: got \"%s\", expected \"%s\"",
                 w->id, what, got, want);
}

static void *hammer(void *arg)
{
    worker *w = arg;
    char want_mm[128], want_q[128];
    /* Each worker fails with its own leading dimension, so that a message
     * read from another thread's call shows. */
    int64_t bad_lda = w->id;
    snprintf(want_mm, sizeof want_mm, "smm_gemm_s8s8s32: lda (%" PRId64 ") < k (%d)", bad_lda, K);
    snprintf(want_q, sizeof want_q, "smm_quantize_i8: ldq (%d) < k (%d)", w->id, K);
    float x[M * K] = {0};
    int8_t q[M * K];
    float scale[M];
    for (int it = 0; it < ITERATIONS; it++) {
        int32_t c[M * N];
        memset(c, 0xA5, sizeof c);
        smm_status st;
        const char *msg;
        switch (it % 3) {
        case 0:   /* fails: lda too small */
            st = smm_gemm_s8s8s32(w->ctx, M, N, K, w->a, bad_lda, w->b, K, c, N);
            msg = smm_context_last_error(w->ctx);
            if (st != SMM_ERR_INVALID_ARG)
                w->bad_status++;
            if (msg[0] == '\0')
                w->empty_message++;
            else if (strcmp(msg, want_mm) != 0) {
                w->bad_message++;
                note(w, "failing smm_gemm_s8s8s32", msg, want_mm);
            }
            break;
        case 1: { /* fails: ldq too small */
            smm_quantize_args qa = { .m = M, .k = K, .x = x, .x_dtype = SMM_DTYPE_F32, .ldx = K,
                                     .q = q, .ldq = w->id, .scale = scale,
                                     .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
            st = smm_quantize_i8(w->ctx, &qa);
            msg = smm_context_last_error(w->ctx);
            if (st != SMM_ERR_INVALID_ARG)
                w->bad_status++;
            if (msg[0] == '\0')
                w->empty_message++;
            else if (strcmp(msg, want_q) != 0) {
                w->bad_message++;
                note(w, "failing smm_quantize_i8", msg, want_q);
            }
            break;
        }
        default:  /* succeeds */
            st = smm_gemm_s8s8s32(w->ctx, M, N, K, w->a, K, w->b, K, c, N);
            msg = smm_context_last_error(w->ctx);
            if (st != SMM_OK)
                w->bad_status++;
            if (msg[0] != '\0') {
                w->bad_message++;
                note(w, "succeeding smm_gemm_s8s8s32", msg, "");
            }
            if (memcmp(c, w->expect, sizeof c) != 0)
                w->bad_result++;
            break;
        }
        w->calls++;
    }
    return NULL;
}

START_TEST(test_one_context_many_threads)
{
    cf_rng r = tu_rng("one_context_many_threads");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int i = 0; i < nb; i++) {
        /* One OpenMP thread per call: the workers are the concurrency. */
        smm_context *ctx = tu_ctx(bs[i], 1);
        static worker w[NWORKERS];
        pthread_t t[NWORKERS];
        memset(w, 0, sizeof w);
        for (int j = 0; j < NWORKERS; j++) {
            w[j].ctx = ctx;
            w[j].id = j + 1;   /* lda and ldq 1..4, all < K */
            cf_fill_i8(&r, w[j].a, M, K, K, CF_VALUES_UNIFORM);
            cf_fill_i8(&r, w[j].b, N, K, K, CF_VALUES_UNIFORM);
            ck_assert_int_eq(smm_gemm_s8s8s32(ref, M, N, K, w[j].a, K, w[j].b, K, w[j].expect, N),
                             SMM_OK);
        }
        for (int j = 0; j < NWORKERS; j++)
            ck_assert_int_eq(pthread_create(&t[j], NULL, hammer, &w[j]), 0);
        for (int j = 0; j < NWORKERS; j++)
            ck_assert_int_eq(pthread_join(t[j], NULL), 0);
        for (int j = 0; j < NWORKERS; j++) {
            printf("check_threads: %s, worker %d: %ld calls, %ld wrong messages, %ld empty, "
                   "%ld wrong results, %ld wrong statuses\n", smm_backend_name(bs[i]), w[j].id,
                   w[j].calls, w[j].bad_message, w[j].empty_message, w[j].bad_result,
                   w[j].bad_status);
            ck_assert_int_eq(w[j].calls, ITERATIONS);
            ck_assert_msg(w[j].bad_message == 0 && w[j].empty_message == 0 &&
                              w[j].bad_result == 0 && w[j].bad_status == 0,
                          "%s: %s (SMM_TEST_SEED=0x%016" PRIx64 ")", smm_backend_name(bs[i]),
                          w[j].first[0] ? w[j].first : "wrong status, result or empty message",
                          tu_seed);
        }
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

static void *read_message(void *arg)
{
    smm_context *ctx = arg;
    return (void *)(uintptr_t)(smm_context_last_error(ctx)[0] != '\0');
}

/* Messages are per context and per thread. */
START_TEST(test_messages_per_context_and_thread)
{
    smm_context *a = tu_ctx(SMM_BACKEND_REFERENCE, 0), *b = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    int8_t x[4] = {0};
    int32_t c[4];
    ck_assert_int_eq(smm_gemm_s8s8s32(a, 2, 2, 2, x, 1, x, 2, c, 2), SMM_ERR_INVALID_ARG);
    ck_assert_str_eq(smm_context_last_error(a), "smm_gemm_s8s8s32: lda (1) < k (2)");
    /* A success on another context leaves a's message. */
    ck_assert_int_eq(smm_gemm_s8s8s32(b, 2, 2, 2, x, 2, x, 2, c, 2), SMM_OK);
    ck_assert_str_eq(smm_context_last_error(b), "");
    ck_assert_str_eq(smm_context_last_error(a), "smm_gemm_s8s8s32: lda (1) < k (2)");
    /* Another thread made no call on a: it reads "". */
    pthread_t t;
    void *seen = (void *)1;
    ck_assert_int_eq(pthread_create(&t, NULL, read_message, a), 0);
    ck_assert_int_eq(pthread_join(t, &seen), 0);
    ck_assert_ptr_null(seen);
    /* A success on a clears it. */
    ck_assert_int_eq(smm_gemm_s8s8s32(a, 2, 2, 2, x, 2, x, 2, c, 2), SMM_OK);
    ck_assert_str_eq(smm_context_last_error(a), "");
    /* A new context (perhaps at a destroyed one's address) has no message. */
    ck_assert_int_eq(smm_gemm_s8s8s32(b, 2, 2, 2, x, 1, x, 2, c, 2), SMM_ERR_INVALID_ARG);
    smm_context_destroy(b);
    b = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    ck_assert_str_eq(smm_context_last_error(b), "");
    smm_context_destroy(a);
    smm_context_destroy(b);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tu_tcase(s, "threads", 600);
    tcase_add_test(tc, test_one_context_many_threads);
    tcase_add_test(tc, test_messages_per_context_and_thread);
    return s;
}

int main(void)
{
    return tu_main(threads_suite(), "check_threads");
}
