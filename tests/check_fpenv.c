/*
 * check_fpenv.c - results do not depend on the caller's floating-point
 * environment, and the caller gets its environment back.
 *
 * Each backend runs the same problems twice: once in the default
 * environment, once with a hostile one set on the calling thread and on
 * every OpenMP worker (rounding up, down or toward zero; on x86 also
 * flush-to-zero and denormals-are-zero). The inputs are chosen so that the
 * hostile settings would change the bits: inexact products and sums,
 * subnormal scales, subnormal results, subnormal activations.
 */
#include "testutil.h"

#include <fenv.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#define MXCSR_FTZ 0x8000u
#define MXCSR_DAZ 0x0040u
#endif

enum { M = 37, N = 29, K = 67 };

typedef struct env_case {
    const char *name;
    int round;
    int ftz_daz;
} env_case;

static const env_case hostile[] = {
    {"upward + FTZ/DAZ", FE_UPWARD, 1},
    {"downward", FE_DOWNWARD, 0},
    {"toward zero + FTZ/DAZ", FE_TOWARDZERO, 1},
};

/* Sets (or, with e == NULL, resets) the environment of this thread. */
static void set_env_this_thread(const env_case *e)
{
    fesetround(e ? e->round : FE_TONEAREST);
#ifdef HAVE_MXCSR
    unsigned csr = _mm_getcsr() & ~(MXCSR_FTZ | MXCSR_DAZ);
    if (e && e->ftz_daz)
        csr |= MXCSR_FTZ | MXCSR_DAZ;
    _mm_setcsr(csr);
#endif
}

/* ... on this thread and on every thread of the OpenMP pool. */
static void set_env_everywhere(const env_case *e)
{
    set_env_this_thread(e);
#ifdef _OPENMP
#pragma omp parallel num_threads(3)
    set_env_this_thread(e);
#endif
}

typedef struct problem {
    int8_t a[M * K], b[N * K];
    float scale_a[M], scale_b[N], bias[N];
    int32_t azp[M];
    float x[M * K];
} problem;

static void make_problem(problem *p, cf_rng *r)
{
    cf_fill_i8(r, p->a, M, K, K, CF_VALUES_UNIFORM);
    cf_fill_i8(r, p->b, N, K, K, CF_VALUES_UNIFORM);
    for (int i = 0; i < M; i++) {
        /* inexact scales, a few subnormal ones */
        p->scale_a[i] = (float)(cf_rng_next(r) >> 40) * 0x1p-30f + 0x1p-12f;
        if (i % 7 == 3)
            p->scale_a[i] = tu_u2f((uint32_t)cf_rng_range(r, 1, 0x7FFFFF));
        p->azp[i] = (int32_t)cf_rng_range(r, -128, 127);
    }
    for (int j = 0; j < N; j++) {
        p->scale_b[j] = (float)(cf_rng_next(r) >> 40) * 0x1p-33f + 0x1p-20f;
        if (j % 5 == 1)
            p->scale_b[j] = 0x1p-120f;   /* results near or below FLT_MIN */
        p->bias[j] = (float)((int64_t)(cf_rng_next(r) >> 40) - (1 << 23)) * 0x1p-30f;
    }
    for (int i = 0; i < M * K; i++) {
        p->x[i] = (float)((int64_t)(cf_rng_next(r) >> 40) - (1 << 23)) * 0x1p-17f;
        if (i % 11 == 5)
            p->x[i] = tu_u2f((uint32_t)cf_rng_range(r, 1, 0x7FFFFF)) * (i % 2 ? 1.0f : -1.0f);
    }
}

/* Every output of one backend on one problem, concatenated. */
typedef struct outputs {
    float c32[3][M * N];          /* no bias; bias; azp per token, no bias */
    uint16_t c16[2][M * N];       /* f16, bf16 (bias + azp per tensor) */
    int32_t acc[M * N];
    int8_t q[3][M * K];           /* static; dynamic symmetric; dynamic azp */
    float qscale[2][M];
    int32_t qazp[M];
} outputs;

static void run_all(smm_context *ctx, const problem *p, outputs *o)
{
    memset(o, 0xA5, sizeof *o);
    smm_scaled_mm_args args = {
        .m = M, .n = N, .k = K, .a = p->a, .lda = K, .b = p->b, .ldb = K,
        .scale_a = p->scale_a, .scale_a_len = M, .scale_b = p->scale_b, .scale_b_len = N,
        .ldc = N, .c_dtype = SMM_DTYPE_F32,
    };
    for (int v = 0; v < 3; v++) {
        args.bias = v == 1 ? p->bias : NULL;
        args.azp = v == 2 ? p->azp : NULL;
        args.azp_len = M;
        args.c = o->c32[v];
        ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
    }
    args.bias = p->bias;
    args.azp = p->azp;
    args.azp_len = 1;
    for (int v = 0; v < 2; v++) {
        args.c_dtype = v == 0 ? SMM_DTYPE_F16 : SMM_DTYPE_BF16;
        args.c = o->c16[v];
        ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
    }
    ck_assert_int_eq(smm_gemm_s8s8s32(ctx, M, N, K, p->a, K, p->b, K, o->acc, N), SMM_OK);

    float s_static = 0.0371f;
    smm_quantize_args qa = {.m = M, .k = K, .x = p->x, .x_dtype = SMM_DTYPE_F32, .ldx = K,
                            .ldq = K};
    qa.mode = SMM_QUANT_STATIC_PER_TENSOR;
    qa.q = o->q[0];
    qa.scale = &s_static;
    ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
    qa.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    qa.q = o->q[1];
    qa.scale = o->qscale[0];
    ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
    qa.q = o->q[2];
    qa.scale = o->qscale[1];
    qa.azp = o->qazp;
    ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
}

START_TEST(test_hostile_environment)
{
    cf_rng r = tu_rng("test_hostile_environment");
    problem *p = malloc(sizeof *p);
    outputs *want = malloc(sizeof *want), *got = malloc(sizeof *got);
    ck_assert(p && want && got);
    make_problem(p, &r);

    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        for (int threads = 1; threads <= (bs[i] == SMM_BACKEND_REFERENCE ? 1 : 3); threads += 2) {
            smm_context *ctx = tu_ctx(bs[i], threads);
            set_env_everywhere(NULL);
            run_all(ctx, p, want);
            for (size_t e = 0; e < sizeof hostile / sizeof hostile[0]; e++) {
                set_env_everywhere(&hostile[e]);
#ifdef HAVE_MXCSR
                unsigned csr_before = _mm_getcsr() & ~0x3Fu;   /* less the sticky flags */
#endif
                run_all(ctx, p, got);
                int round_after = fegetround();
#ifdef HAVE_MXCSR
                unsigned csr_after = _mm_getcsr() & ~0x3Fu;
#endif
                set_env_everywhere(NULL);
                ck_assert_msg(round_after == hostile[e].round,
                              "%s: the caller's rounding mode was not restored (%s)",
                              smm_backend_name(bs[i]), hostile[e].name);
#ifdef HAVE_MXCSR
                ck_assert_msg(csr_after == csr_before,
                              "%s: the caller's MXCSR was not restored (%s): 0x%04x -> 0x%04x",
                              smm_backend_name(bs[i]), hostile[e].name, csr_before, csr_after);
#endif
                const unsigned char *w = (const unsigned char *)want, *g = (const unsigned char *)got;
                size_t at = 0;
                while (at < sizeof *want && w[at] == g[at])
                    at++;
                ck_assert_msg(at == sizeof *want,
                              "%s, %d threads: results differ under \"%s\" at byte %zu of the "
                              "outputs (replay with SMM_TEST_SEED=0x%016llx)",
                              smm_backend_name(bs[i]), threads, hostile[e].name, at,
                              (unsigned long long)tu_seed);
            }
            smm_context_destroy(ctx);
        }
    }
    free(p);
    free(want);
    free(got);
}
END_TEST

/* The test above can fail: without the library's own environment handling
 * the hostile settings do change float results on this machine. */
START_TEST(test_environment_matters)
{
    volatile float a = 1.0f, b = 0x1p-30f, tiny = 0x1p-140f;
    set_env_everywhere(&hostile[0]);
    volatile float up = a + b;
#ifdef HAVE_MXCSR
    volatile float flushed = tiny * 0.5f;
#endif
    set_env_everywhere(NULL);
    ck_assert_msg(up != a + b, "FE_UPWARD did not change 1 + 2^-30");
#ifdef HAVE_MXCSR
    ck_assert_msg(flushed == 0.0f && tiny * 0.5f != 0.0f, "FTZ did not flush a subnormal result");
#endif
}
END_TEST

static Suite *fpenv_suite(void)
{
    Suite *s = suite_create("fpenv");
    TCase *tc = tu_tcase(s, "environment", 300);
    tcase_add_test(tc, test_environment_matters);
    tcase_add_test(tc, test_hostile_environment);
    return s;
}

int main(void)
{
    return tu_main(fpenv_suite(), "check_fpenv");
}
