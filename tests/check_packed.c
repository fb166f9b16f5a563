/*
 * check_packed.c - prepacked B (smm_pack_b): results with a packed B are
 * bit-for-bit those with the unpacked B and those of the reference, on every
 * backend, kernel level, thread count, output type, scale mode, bias and
 * zero point, for shapes around the microkernel width and the K block and
 * past the int32 wrap; argument errors; allocator failures; lifetime.
 */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* One random problem, run several ways                                */
/* ------------------------------------------------------------------ */

typedef struct problem {
    int64_t m, n, k, lda, ldb, ldc;
    smm_dtype c_dtype;         /* I32: smm_gemm_s8s8s32[_packed] */
    int sa_token, sb_channel, bias, azp;   /* azp: 0 none, 1 tensor, 2 token */
    int8_t *a, *b;
    float *sa, *sb, *bi;
    int32_t *z;
} problem;

static int esize(smm_dtype t)
{
    return t == SMM_DTYPE_I32 || t == SMM_DTYPE_F32 ? 4 : 2;
}

static float rand_float(cf_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(cf_rng_next(r) >> 11) * 0x1p-53);
}

static void problem_make(problem *p, cf_rng *r, int64_t m, int64_t n, int64_t k, smm_dtype t)
{
    memset(p, 0, sizeof *p);
    p->m = m;
    p->n = n;
    p->k = k;
    p->lda = k + cf_rng_range(r, 0, 2) * cf_rng_range(r, 0, 37);
    p->ldb = k + cf_rng_range(r, 0, 2) * cf_rng_range(r, 0, 41);
    p->ldc = n + cf_rng_range(r, 0, 1) * cf_rng_range(r, 1, 7);
    p->c_dtype = t;
    p->a = malloc((size_t)(m * p->lda + 1));
    p->b = malloc((size_t)(n * p->ldb + 1));
    ck_assert(p->a && p->b);
    /* Extreme values now and then so that long sums wrap. */
    cf_values cls = cf_rng_range(r, 0, 3) == 0 ? CF_VALUES_EXTREME : CF_VALUES_UNIFORM;
    cf_fill_i8(r, p->a, m, k, p->lda, cls);
    cf_fill_i8(r, p->b, n, k, p->ldb, cls);
    if (t == SMM_DTYPE_I32)
        return;
    p->sa_token = (int)cf_rng_range(r, 0, 1);
    p->sb_channel = (int)cf_rng_range(r, 0, 1);
    p->bias = (int)cf_rng_range(r, 0, 1);
    p->azp = (int)cf_rng_range(r, 0, 2);
    p->sa = malloc(sizeof(float) * (size_t)m);
    p->sb = malloc(sizeof(float) * (size_t)n);
    p->bi = malloc(sizeof(float) * (size_t)n);
    p->z = malloc(sizeof(int32_t) * (size_t)m);
    ck_assert(p->sa && p->sb && p->bi && p->z);
    for (int64_t i = 0; i < m; i++) {
        p->sa[i] = rand_float(r, 1e-4f, 1e-2f);
        /* Zero points over the whole int32 range now and then. */
        p->z[i] = cf_rng_range(r, 0, 4) == 0 ? (int32_t)cf_rng_next(r)
                                               : (int32_t)cf_rng_range(r, -128, 127);
    }
    for (int64_t j = 0; j < n; j++) {
        p->sb[j] = rand_float(r, 1e-4f, 1e-1f);
        p->bi[j] = rand_float(r, -10.0f, 10.0f);
    }
}

static void problem_free(problem *p)
{
    free(p->a);
    free(p->b);
    free(p->sa);
    free(p->sb);
    free(p->bi);
    free(p->z);
}

static void problem_describe(const problem *p, char *buf, size_t size)
{
    snprintf(buf, size,
             "m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " lda=%" PRId64 " ldb=%" PRId64
             " ldc=%" PRId64 " c=%s sa=%s sb=%s bias=%d azp=%d",
             p->m, p->n, p->k, p->lda, p->ldb, p->ldc, smm_dtype_name(p->c_dtype),
             p->sa_token ? "token" : "tensor", p->sb_channel ? "channel" : "tensor", p->bias,
             p->azp);
}

/* Bytes of C's view (rows of n elements, ldc apart). */
static size_t c_bytes(const problem *p)
{
    return p->m == 0 || p->n == 0 ? 0 : (size_t)((p->m - 1) * p->ldc + p->n) * (size_t)esize(p->c_dtype);
}

static smm_status run_one(smm_context *ctx, const problem *p, const smm_packed_b *pb, void *c)
{
    if (p->c_dtype == SMM_DTYPE_I32)
        return pb ? smm_gemm_s8s8s32_packed(ctx, p->m, p->n, p->k, p->a, p->lda, pb, c, p->ldc)
                  : smm_gemm_s8s8s32(ctx, p->m, p->n, p->k, p->a, p->lda, p->b, p->ldb, c, p->ldc);
    smm_scaled_mm_args args = {
        .m = p->m, .n = p->n, .k = p->k,
        .a = p->a, .lda = p->lda,
        .b = pb ? NULL : p->b, .ldb = pb ? -7 : p->ldb,   /* ldb is ignored when packed */
        .scale_a = p->sa, .scale_a_len = p->sa_token ? p->m : 1,
        .scale_b = p->sb, .scale_b_len = p->sb_channel ? p->n : 1,
        .bias = p->bias ? p->bi : NULL,
        .azp = p->azp ? p->z : NULL, .azp_len = p->azp == 2 ? p->m : 1,
        .c = c, .ldc = p->ldc, .c_dtype = p->c_dtype,
        .b_packed = pb,
    };
    return smm_scaled_mm(ctx, &args);
}

/* Runs p on ctx (with pb or the unpacked B) twice, into C poisoned 0xA5 and
 * 0x5A: both must succeed, agree on the view (so every element was
 * written), and leave the gaps between rows and the guards untouched. The
 * view's bytes go to out (c_bytes(p), gaps included as 0xA5). Returns 0 on
 * success, else writes msg. */
static int run_checked(smm_context *ctx, const problem *p, const smm_packed_b *pb,
                       unsigned char *out, char *msg, size_t msgsz)
{
    const size_t bytes = c_bytes(p), es = (size_t)esize(p->c_dtype);
    static const unsigned char poisons[2] = {0xA5, 0x5A};
    unsigned char *first = malloc(bytes + 1);
    ck_assert_ptr_nonnull(first);
    for (int pass = 0; pass < 2; pass++) {
        tu_buf c;
        tu_buf_alloc(&c, bytes, es * (size_t)pass, poisons[pass]);
        smm_status st = run_one(ctx, p, pb, c.p);
        if (st != SMM_OK) {
            snprintf(msg, msgsz, "%s: %s", smm_strerror(st), smm_context_last_error(ctx));
            tu_buf_free(&c);
            free(first);
            return 1;
        }
        /* Restore the view to the poison to check everything else. */
        unsigned char *view = malloc(bytes + 1);
        ck_assert_ptr_nonnull(view);
        memcpy(view, c.p, bytes);
        for (int64_t i = 0; i < p->m && p->n > 0; i++)
            memset(c.p + (size_t)(i * p->ldc) * es, poisons[pass], (size_t)p->n * es);
        if (!tu_buf_untouched(&c)) {
            snprintf(msg, msgsz, "bytes outside C's view were written (poison 0x%02X)", poisons[pass]);
            free(view);
            tu_buf_free(&c);
            free(first);
            return 1;
        }
        for (int64_t i = 0; i + 1 < p->m && p->n > 0; i++)   /* the gaps, already checked */
            memset(view + (size_t)(i * p->ldc + p->n) * es, 0xA5, (size_t)(p->ldc - p->n) * es);
        if (pass == 0) {
            memcpy(first, view, bytes);
        } else if (memcmp(first, view, bytes) != 0) {
            snprintf(msg, msgsz, "C not fully written (results differ between poisons)");
            free(view);
            tu_buf_free(&c);
            free(first);
            return 1;
        }
        free(view);
        tu_buf_free(&c);
    }
    memcpy(out, first, bytes);
    free(first);
    return 0;
}

/* First differing element of two views, for the message. */
static void describe_diff(const problem *p, const unsigned char *x, const unsigned char *y,
                          const char *what, char *msg, size_t msgsz)
{
    const size_t es = (size_t)esize(p->c_dtype);
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            size_t off = (size_t)(i * p->ldc + j) * es;
            if (memcmp(x + off, y + off, es) != 0) {
                uint32_t u = 0, v = 0;
                memcpy(&u, x + off, es);
                memcpy(&v, y + off, es);
                snprintf(msg, msgsz, "%s: C[%" PRId64 "][%" PRId64 "] = 0x%08X, reference 0x%08X",
                         what, i, j, (unsigned)u, (unsigned)v);
                return;
            }
        }
    snprintf(msg, msgsz, "%s: differs", what);
}

/* The reference on the unpacked B, then for each context in ctxs: unpacked
 * B, B packed by pack_ctx; plus the reference with its own packed B. All
 * bit-identical. */
static void check_problem(const problem *p, smm_context *ref, smm_context *pack_ctx,
                          smm_context *const *ctxs, int nctx)
{
    char desc[256], msg[512];
    problem_describe(p, desc, sizeof desc);
    const size_t bytes = c_bytes(p);
    unsigned char *want = malloc(bytes + 1), *got = malloc(bytes + 1);
    ck_assert(want && got);
    if (run_checked(ref, p, NULL, want, msg, sizeof msg))
        TU_FAIL_CASE(SMM_BACKEND_REFERENCE, 1, desc, msg);

    smm_packed_b *rpb = NULL, *pb = NULL;
    smm_status st = smm_pack_b(ref, p->n, p->k, p->b, p->ldb, &rpb);
    ck_assert_msg(st == SMM_OK, "%s: reference pack: %s", desc, smm_context_last_error(ref));
    if (run_checked(ref, p, rpb, got, msg, sizeof msg))
        TU_FAIL_CASE(SMM_BACKEND_REFERENCE, 1, desc, msg);
    if (memcmp(got, want, bytes) != 0) {
        describe_diff(p, got, want, "reference, packed B", msg, sizeof msg);
        TU_FAIL_CASE(SMM_BACKEND_REFERENCE, 1, desc, msg);
    }
    smm_packed_b_destroy(rpb);

    if (pack_ctx) {
        st = smm_pack_b(pack_ctx, p->n, p->k, p->b, p->ldb, &pb);
        ck_assert_msg(st == SMM_OK, "%s: pack: %s", desc, smm_context_last_error(pack_ctx));
        ck_assert_int_eq(smm_packed_b_n(pb), p->n);
        ck_assert_int_eq(smm_packed_b_k(pb), p->k);
    }
    for (int c = 0; c < nctx; c++) {
        smm_backend be = smm_context_backend(ctxs[c]);
        int th = smm_context_get_num_threads(ctxs[c]);
        for (int packed = 0; packed <= (pb ? 1 : 0); packed++) {
            if (run_checked(ctxs[c], p, packed ? pb : NULL, got, msg, sizeof msg))
                TU_FAIL_CASE(be, th, desc, msg);
            if (memcmp(got, want, bytes) != 0) {
                describe_diff(p, got, want, packed ? "packed B" : "unpacked B", msg, sizeof msg);
                TU_FAIL_CASE(be, th, desc, msg);
            }
        }
    }
    smm_packed_b_destroy(pb);
    free(want);
    free(got);
}

static smm_dtype rand_dtype(cf_rng *r)
{
    static const smm_dtype t[4] = {SMM_DTYPE_I32, SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    return t[cf_rng_range(r, 0, 3)];
}

/* ------------------------------------------------------------------ */
/* Equality                                                            */
/* ------------------------------------------------------------------ */

/* CPU contexts of 1, 2 and 3 threads in cpu[0..2]; returns how many (0
 * when the cpu backend is not available). */
static int cpu_contexts(smm_context *cpu[3])
{
    if (!smm_backend_available(SMM_BACKEND_CPU, NULL))
        return 0;
    for (int i = 0; i < 3; i++)
        cpu[i] = tu_ctx(SMM_BACKEND_CPU, i + 1);
    return 3;
}

static void contexts_destroy(smm_context *const *ctx, int n)
{
    for (int i = 0; i < n; i++)
        smm_context_destroy(ctx[i]);
}

/* Random shapes: N from 1 to 3 * NR and beyond (tails), K around the
 * K block, M on both sides of the small-M path, 1..3 threads, packed by a
 * context of another thread count. */
START_TEST(test_random_shapes)
{
    cf_rng r = tu_rng("random_shapes");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    const int ncpu = cpu_contexts(cpu);
    static const int64_t ms[] = {1, 2, 3, 4, 7, 12, 13, 14, 16, 17, 32, 33, 37, 97, 128};
    static const int64_t ks[] = {0, 1, 2, 15, 16, 17, 100, 1000, 1023, 1024, 1025, 1040, 2047, 2048, 2049, 3000};
    for (int it = 0; it < 120; it++) {
        problem p;
        int64_t m = ms[cf_rng_range(&r, 0, (int64_t)(sizeof ms / sizeof ms[0]) - 1)];
        int64_t n = it % 3 == 0 ? cf_rng_range(&r, 130, 300) : cf_rng_range(&r, 1, 12);
        int64_t k = it % 4 == 0 ? cf_rng_range(&r, 0, 4200)
                                : ks[cf_rng_range(&r, 0, (int64_t)(sizeof ks / sizeof ks[0]) - 1)];
        problem_make(&p, &r, m, n, k, rand_dtype(&r));
        check_problem(&p, ref, ncpu ? cpu[cf_rng_range(&r, 0, ncpu - 1)] : NULL, cpu, ncpu);
        problem_free(&p);
    }
    contexts_destroy(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Decode over a packed B (M <= 8) with the far prefetch forced on and off
 * (SMM_CPU_FAR_PREFETCH; by default only Intel CPUs take it), K around the
 * prefetch distances, 1..3 threads. */
START_TEST(test_far_prefetch)
{
    cf_rng r = tu_rng("far_prefetch");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    const int ncpu = cpu_contexts(cpu);
    const char *saved = getenv("SMM_CPU_FAR_PREFETCH");
    char saved_copy[64] = "";
    if (saved)
        snprintf(saved_copy, sizeof saved_copy, "%s", saved);
    static const int64_t ks[] = {1, 64, 511, 512, 513, 1023, 1024, 4095, 8192, 8193, 12000};
    for (int it = 0; it < 32; it++) {
        setenv("SMM_CPU_FAR_PREFETCH", it % 2 ? "1" : "0", 1);
        problem p;
        const int64_t m = cf_rng_range(&r, 1, 8), n = cf_rng_range(&r, 1, 70);
        const int64_t k = ks[cf_rng_range(&r, 0, (int64_t)(sizeof ks / sizeof ks[0]) - 1)];
        problem_make(&p, &r, m, n, k, rand_dtype(&r));
        check_problem(&p, ref, ncpu ? cpu[cf_rng_range(&r, 0, ncpu - 1)] : NULL, cpu, ncpu);
        problem_free(&p);
    }
    if (saved)
        setenv("SMM_CPU_FAR_PREFETCH", saved_copy, 1);
    else
        unsetenv("SMM_CPU_FAR_PREFETCH");
    contexts_destroy(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Every N from 1 to 3 * NR + 1 (NR = 4), all output types; M = 3 (small-M
 * path), 20 (one row tile: the int8 copy packed on the fly) and 100 (two
 * row tiles: the int16 panels read in place). */
START_TEST(test_every_small_n)
{
    cf_rng r = tu_rng("every_small_n");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[2] = {NULL, NULL};
    int ncpu = smm_backend_available(SMM_BACKEND_CPU, NULL) ? 2 : 0;
    for (int i = 0; i < ncpu; i++)
        cpu[i] = tu_ctx(SMM_BACKEND_CPU, 2 * i + 1);
    for (int64_t n = 1; n <= 13; n++)
        for (int mi = 0; mi < 3; mi++) {
            static const int64_t ms[3] = {3, 20, 100};
            problem p;
            problem_make(&p, &r, ms[mi], n, cf_rng_range(&r, 1, 1100), rand_dtype(&r));
            check_problem(&p, ref, ncpu ? cpu[0] : NULL, cpu, ncpu);
            problem_free(&p);
        }
    for (int i = 0; i < ncpu; i++)
        smm_context_destroy(cpu[i]);
    smm_context_destroy(ref);
}
END_TEST

/* K past 2^17: the int32 sums and the zero-point correction wrap; the
 * packed column sums must wrap the same way. Both CPU paths. */
START_TEST(test_huge_k)
{
    cf_rng r = tu_rng("huge_k");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[1] = {NULL};
    int ncpu = smm_backend_available(SMM_BACKEND_CPU, NULL) ? 1 : 0;
    if (ncpu)
        cpu[0] = tu_ctx(SMM_BACKEND_CPU, 2);
    static const int64_t ms[] = {2, 14, 98};
    for (int mi = 0; mi < 3; mi++)
        for (int t = 0; t < 2; t++) {
            problem p;
            int64_t k = 131072 + cf_rng_range(&r, 1, 5000);
            problem_make(&p, &r, ms[mi], cf_rng_range(&r, 1, mi == 2 ? 5 : 9), k,
                         t ? SMM_DTYPE_F32 : SMM_DTYPE_I32);
            /* All -128: every product is 2^14, the sum passes 2^31. */
            for (int64_t i = 0; i < p.m; i++)
                memset(p.a + i * p.lda, 0x80, (size_t)k);
            for (int64_t j = 0; j < p.n; j++)
                memset(p.b + j * p.ldb, 0x80, (size_t)k);
            if (t) {
                p.azp = 1;
                p.z[0] = (int32_t)cf_rng_next(&r);
            }
            check_problem(&p, ref, ncpu ? cpu[0] : NULL, cpu, ncpu);
            problem_free(&p);
        }
    if (ncpu)
        smm_context_destroy(cpu[0]);
    smm_context_destroy(ref);
}
END_TEST

/* The scalar and AVX2 kernel levels share one format: a B packed by the
 * portable C level is used as is by the AVX2 level and vice versa (the
 * VNNI levels have formats of their own: tests/check_cpu_edges.c). */
START_TEST(test_across_kernel_levels)
{
    if (!smm_backend_available(SMM_BACKEND_CPU, NULL))
        return;
    cf_rng r = tu_rng("across_kernel_levels");
    const char *saved = getenv("SMM_CPU_ISA");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("SMM_CPU_ISA", "scalar", 1);
    smm_context *scalar = tu_ctx(SMM_BACKEND_CPU, 2);
    setenv("SMM_CPU_ISA", "avx2", 1);
    smm_context *best = tu_ctx(SMM_BACKEND_CPU, 3);
    if (saved_copy)
        setenv("SMM_CPU_ISA", saved_copy, 1);
    else
        unsetenv("SMM_CPU_ISA");
    free(saved_copy);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);

    int8_t b[8 * 16] = {0};
    smm_packed_b *ps = NULL, *pd = NULL;
    ck_assert_int_eq(smm_pack_b(scalar, 8, 16, b, 16, &ps), SMM_OK);
    ck_assert_int_eq(smm_pack_b(best, 8, 16, b, 16, &pd), SMM_OK);
    ck_assert_str_eq(smm_packed_b_format(ps), smm_packed_b_format(pd));
    ck_assert(strncmp(smm_packed_b_format(ps), "cpu ", 4) == 0);
    smm_packed_b_destroy(ps);
    smm_packed_b_destroy(pd);

    smm_context *both[2] = {scalar, best};
    for (int it = 0; it < 24; it++) {
        problem p;
        problem_make(&p, &r, it % 2 ? 1 + it : it % 4 ? 40 : 99, cf_rng_range(&r, 1, 70),
                     cf_rng_range(&r, 1, 2100),
                     rand_dtype(&r));
        check_problem(&p, ref, both[it % 4 < 2 ? 0 : 1], both, 2);
        problem_free(&p);
    }
    smm_context_destroy(scalar);
    smm_context_destroy(best);
    smm_context_destroy(ref);
}
END_TEST

/* K == 0 (C = epilogue(0)) and N == 0 (a no-op) with packed B. */
START_TEST(test_empty)
{
    cf_rng r = tu_rng("empty");
    smm_backend be[4];
    int nb = tu_host_backends(be);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(be[i], 2);
        problem p;
        problem_make(&p, &r, 5, 9, 0, SMM_DTYPE_F32);
        p.azp = 1;
        check_problem(&p, ref, ctx, &ctx, 1);
        problem_free(&p);

        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(ctx, 0, 7, NULL, 0, &pb), SMM_OK);
        ck_assert_int_eq(smm_packed_b_n(pb), 0);
        ck_assert_int_eq(smm_packed_b_k(pb), 7);
        int8_t a[3 * 7] = {0};
        int32_t c = 0x5A5A5A5A;
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, 3, 0, 7, a, 7, pb, &c, 0), SMM_OK);
        ck_assert_int_eq(c, 0x5A5A5A5A);
        smm_packed_b_destroy(pb);
        /* K == 0 with b NULL packs too. */
        ck_assert_int_eq(smm_pack_b(ctx, 4, 0, NULL, 0, &pb), SMM_OK);
        smm_packed_b_destroy(pb);
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

#define BOGUS ((smm_packed_b *)(uintptr_t)0x10)

START_TEST(test_pack_errors)
{
    smm_backend be[4];
    int nb = tu_host_backends(be);
    int8_t b[4 * 8] = {0};
    smm_packed_b *pb = BOGUS;
    ck_assert_int_eq(smm_pack_b(NULL, 4, 8, b, 8, &pb), SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(pb);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(be[i], 0);
        ck_assert_int_eq(smm_pack_b(ctx, 4, 8, b, 8, NULL), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "out"));
        struct { int64_t n, k, ldb; const int8_t *b; const char *what; } bad[] = {
            {-1, 8, 8, b, "negative"},
            {4, -1, 8, b, "negative"},
            {4, 8, 8, NULL, "b is NULL"},
            {4, 8, 7, b, "ldb"},
            {INT64_MAX / 4, 8, 8, b, "overflows"},          /* footprint of b */
            /* B's 2^60 bytes fit, the CPU's packed copy (K padded to 4 or
             * 16, plus column sums) does not, in any of its formats (the
             * reference's copy would fit: not run there). */
            {(int64_t)1 << 60, 1, 1, b, "packed copy"},
            /* One row longer than INT64_MAX / 2: the CPU's rounding of K
             * up to its padding would itself overflow (not run on the
             * reference, which would try to allocate it). */
            {1, ((int64_t)1 << 62) + 1, 0, b, "packed copy"},
        };
        for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
            if (t >= 5 && be[i] != SMM_BACKEND_CPU)
                continue;
            pb = BOGUS;
            smm_status st = smm_pack_b(ctx, bad[t].n, bad[t].k, bad[t].b, bad[t].ldb, &pb);
            ck_assert_msg(st == SMM_ERR_INVALID_ARG, "%s case %zu: %s", smm_backend_name(be[i]),
                          t, smm_strerror(st));
            ck_assert_msg(strstr(smm_context_last_error(ctx), bad[t].what) != NULL,
                          "case %zu: message \"%s\"", t, smm_context_last_error(ctx));
            ck_assert_ptr_null(pb);
        }
        /* One row: ldb is not read. */
        ck_assert_int_eq(smm_pack_b(ctx, 1, 8, b, 0, &pb), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        smm_packed_b_destroy(pb);
        smm_context_destroy(ctx);
    }
    /* NULL handles. */
    smm_packed_b_destroy(NULL);
    ck_assert_int_eq(smm_packed_b_n(NULL), -1);
    ck_assert_int_eq(smm_packed_b_k(NULL), -1);
    ck_assert_str_eq(smm_packed_b_format(NULL), "");
}
END_TEST

/* Misuse of b_packed: nothing written, a message, even for M == 0. */
START_TEST(test_mm_errors)
{
    smm_backend be[4];
    int nb = tu_host_backends(be);
    enum { M = 5, N = 6, K = 40 };
    int8_t a[M * K], b[N * K];
    memset(a, 3, sizeof a);
    memset(b, -2, sizeof b);
    float one = 1.0f;
    smm_packed_b *pbs[4] = {NULL};
    smm_context *ctxs[4] = {NULL};
    for (int i = 0; i < nb; i++) {
        ctxs[i] = tu_ctx(be[i], 2);
        ck_assert_int_eq(smm_pack_b(ctxs[i], N, K, b, K, &pbs[i]), SMM_OK);
    }
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = ctxs[i];
        tu_buf c;
        tu_buf_alloc(&c, M * N * 4, 0, 0xC3);
        smm_scaled_mm_args ok = {
            .m = M, .n = N, .k = K, .a = a, .lda = K,
            .scale_a = &one, .scale_a_len = 1, .scale_b = &one, .scale_b_len = 1,
            .c = c.p, .ldc = N, .c_dtype = SMM_DTYPE_F32, .b_packed = pbs[i],
        };
        smm_scaled_mm_args x;
        struct { int64_t m, n, k; int set_b; const char *what; } bad[] = {
            {M, N - 1, K, 0, "n 6"},
            {M, N, K + 1, 0, "k 41"},
            {M, N, K - 1, 0, "k 40"},
            {M, N, K, 1, "both set"},
            {0, N + 1, K, 0, "n 6"},      /* checked for M == 0 too */
        };
        for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
            x = ok;
            x.m = bad[t].m;
            x.n = bad[t].n;
            x.k = bad[t].k;
            x.ldb = K + 1;
            if (bad[t].set_b)
                x.b = b;
            ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_INVALID_ARG);
            ck_assert_msg(strstr(smm_context_last_error(ctx), bad[t].what) != NULL,
                          "case %zu: message \"%s\"", t, smm_context_last_error(ctx));
            ck_assert(tu_buf_untouched(&c));
        }
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, M, N, K, a, K, NULL, (int32_t *)c.p, N),
                         SMM_ERR_INVALID_ARG);
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, M, N + 1, K, a, K, pbs[i], (int32_t *)c.p, N + 1),
                         SMM_ERR_INVALID_ARG);
        ck_assert(tu_buf_untouched(&c));
        /* A packed B of another backend: both formats named. */
        for (int j = 0; j < nb; j++) {
            if (j == i)
                continue;
            x = ok;
            x.b_packed = pbs[j];
            ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_INVALID_ARG);
            const char *e = smm_context_last_error(ctx);
            ck_assert_msg(strstr(e, smm_packed_b_format(pbs[j])) && strstr(e, smm_packed_b_format(pbs[i])),
                          "message \"%s\" names not both formats", e);
            ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, M, N, K, a, K, pbs[j], (int32_t *)c.p, N),
                             SMM_ERR_INVALID_ARG);
            ck_assert(tu_buf_untouched(&c));
        }
        /* And the good call works. */
        ck_assert_int_eq(smm_scaled_mm(ctx, &ok), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        float want = (float)(3 * -2 * K);
        for (int e = 0; e < M * N; e++)
            ck_assert_uint_eq(tu_f2u(((float *)c.p)[e]), tu_f2u(want));
        tu_buf_free(&c);
    }
    for (int i = 0; i < nb; i++) {
        smm_packed_b_destroy(pbs[i]);
        smm_context_destroy(ctxs[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Allocators and lifetime                                             */
/* ------------------------------------------------------------------ */

static smm_context *counting_ctx(smm_backend be, tu_counting *cnt)
{
    smm_allocator al = tu_counting_allocator(cnt);
    smm_context *ctx = NULL;
    ck_assert_int_eq(smm_context_create_with_allocator(&ctx, be, &al), SMM_OK);
    return ctx;
}

/* Every allocation of smm_pack_b failing in turn: SMM_ERR_NO_MEMORY,
 * *out NULL, nothing leaked; then success. */
START_TEST(test_allocation_failure)
{
    smm_backend be[4];
    int nb = tu_host_backends(be);
    int8_t b[9 * 33];
    memset(b, 1, sizeof b);
    for (int i = 0; i < nb; i++) {
        tu_counting cnt;
        tu_counting_init(&cnt);
        smm_context *ctx = counting_ctx(be[i], &cnt);
        const int64_t base = cnt.live;
        int failures = 0;
        for (int allow = 0;; allow++) {
            smm_packed_b *pb = BOGUS;
            tu_counting_fail_in(&cnt, allow);
            smm_status st = smm_pack_b(ctx, 9, 33, b, 33, &pb);
            tu_counting_fail_in(&cnt, -1);
            if (st == SMM_OK) {
                ck_assert_ptr_nonnull(pb);
                smm_packed_b_destroy(pb);
                ck_assert_int_eq(cnt.live, base);
                break;
            }
            ck_assert_int_eq(st, SMM_ERR_NO_MEMORY);
            ck_assert_ptr_null(pb);
            ck_assert_int_eq(cnt.live, base);
            ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "memory"));
            failures++;
            ck_assert_int_lt(allow, 10);
        }
        ck_assert_int_ge(failures, 1);
        smm_context_destroy(ctx);
        ck_assert_int_eq(cnt.live, 0);
    }
}
END_TEST

/* A packed B outlives its context (its allocator is kept), and serves
 * another context of the same backend. */
START_TEST(test_outlives_context)
{
    cf_rng r = tu_rng("outlives_context");
    smm_backend be[4];
    int nb = tu_host_backends(be);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    for (int i = 0; i < nb; i++) {
        problem p;
        problem_make(&p, &r, 17, 11, 1500, SMM_DTYPE_BF16);
        tu_counting cnt;
        tu_counting_init(&cnt);
        smm_context *maker = counting_ctx(be[i], &cnt);
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(maker, p.n, p.k, p.b, p.ldb, &pb), SMM_OK);
        smm_context_destroy(maker);
        ck_assert_int_eq(cnt.live, 2);    /* the handle and its data */
        /* B itself may go too: the packed copy is independent of it. */
        int8_t *orig = p.b;
        p.b = malloc((size_t)(p.n * p.ldb + 1));
        memcpy(p.b, orig, (size_t)(p.n * p.ldb + 1));
        memset(orig, 0x7F, (size_t)(p.n * p.ldb + 1));
        free(orig);

        smm_context *user = tu_ctx(be[i], 3);
        char desc[256], msg[256];
        problem_describe(&p, desc, sizeof desc);
        size_t bytes = c_bytes(&p);
        unsigned char *want = malloc(bytes), *got = malloc(bytes);
        if (run_checked(ref, &p, NULL, want, msg, sizeof msg) ||
            run_checked(user, &p, pb, got, msg, sizeof msg))
            TU_FAIL_CASE(be[i], 3, desc, msg);
        ck_assert_msg(memcmp(got, want, bytes) == 0, "%s: packed B after its context differs", desc);
        free(want);
        free(got);
        smm_context_destroy(user);
        smm_packed_b_destroy(pb);
        ck_assert_int_eq(cnt.live, 0);
        problem_free(&p);
    }
    smm_context_destroy(ref);
}
END_TEST

/* C inside the packed buffer: SMM_ERR_OVERLAP, the buffer untouched. */
START_TEST(test_overlap_with_packed)
{
    smm_backend be[4];
    int nb = tu_host_backends(be);
    enum { M = 2, N = 8, K = 64 };
    int8_t a[M * K], b[N * K];
    memset(a, 1, sizeof a);
    memset(b, 1, sizeof b);
    for (int i = 0; i < nb; i++) {
        tu_counting cnt;
        tu_counting_init(&cnt);
        smm_context *ctx = counting_ctx(be[i], &cnt);
        cnt.largest = NULL;
        cnt.largest_size = 0;
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(ctx, N, K, b, K, &pb), SMM_OK);
        ck_assert_uint_ge(cnt.largest_size, (size_t)(N * K));
        unsigned char *mem = cnt.largest, *copy = malloc(cnt.largest_size);
        memcpy(copy, mem, cnt.largest_size);
        int32_t *c = (int32_t *)(void *)(mem + (cnt.largest_size / 2 & ~(size_t)3));
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, M, N, K, a, K, pb, c, N), SMM_ERR_OVERLAP);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "b_packed"));
        ck_assert(memcmp(copy, mem, cnt.largest_size) == 0);
        free(copy);
        smm_packed_b_destroy(pb);
        smm_context_destroy(ctx);
    }
}
END_TEST

static Suite *packed_suite(void)
{
    Suite *s = suite_create("packed");
    TCase *tc = tu_tcase(s, "equality", 900);
    tcase_add_test(tc, test_random_shapes);
    tcase_add_test(tc, test_far_prefetch);
    tcase_add_test(tc, test_every_small_n);
    tcase_add_test(tc, test_huge_k);
    tcase_add_test(tc, test_across_kernel_levels);
    tcase_add_test(tc, test_empty);
    tc = tu_tcase(s, "errors", 120);
    tcase_add_test(tc, test_pack_errors);
    tcase_add_test(tc, test_mm_errors);
    tcase_add_test(tc, test_overlap_with_packed);
    tc = tu_tcase(s, "lifetime", 120);
    tcase_add_test(tc, test_allocation_failure);
    tcase_add_test(tc, test_outlives_context);
    return s;
}

int main(void)
{
    return tu_main(packed_suite(), "check_packed");
}
