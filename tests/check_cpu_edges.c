/*
 * check_cpu_edges.c - the CPU backend's kernel edges, bit for bit against the
 * reference backend, on the kernel level SMM_CPU_ISA selects (tests/
 * isa-levels.sh runs this suite once per level):
 *   - rows of A all 0, all -128, all 127 against columns of B all 1 and all
 *     -128 at every K from 1 to 130 (the +128 shift and its column-sum
 *     compensation on the VNNI levels, K tails of every vector width);
 *   - N from 1 to 97 (3x the widest register block of 32 columns, plus one);
 *   - odd M from 1 to 17 (the small-M path and the step past it);
 *   - prepacked B with odd N;
 *   - sums that wrap past 2^31 (K > 131071, all -128);
 *   - a problem large enough that the VNNI levels pack A in bands of rows;
 *   - calls made inside the caller's own OpenMP region, where the library's
 *     region gets one thread for the three its context asks for: that
 *     thread computes every tile of the three threads' runs;
 *   - a B packed by one kernel level used on a context of another: the same
 *     format computes the same bits, another format is SMM_ERR_INVALID_ARG
 *     and writes nothing;
 * each through smm_gemm_s8s8s32 and smm_scaled_mm (with and without bias
 * and zero point), unpacked and prepacked B, at 1, 2 and 3 threads. Every
 * output is poisoned twice (0xA5, 0x5A) so that an element left unwritten
 * shows, and the bytes around C and between its rows must stay untouched.
 */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------ */
/* One problem and its comparison                                      */
/* ------------------------------------------------------------------ */

typedef struct edge {
    int64_t m, n, k, lda, ldb, ldc;
    smm_dtype c_dtype;              /* I32: smm_gemm_s8s8s32 */
    int8_t *a, *b;
    float *sa, *sb, *bias;          /* sa: M (per-token), sb: N (per-channel) */
    int32_t *azp;                   /* NULL or M (per-token) */
} edge;

static size_t esize(smm_dtype t)
{
    return t == SMM_DTYPE_I32 || t == SMM_DTYPE_F32 ? 4 : 2;
}

static void edge_alloc(edge *e, int64_t m, int64_t n, int64_t k)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->n = n;
    e->k = k;
    e->lda = k;
    e->ldb = k;
    e->ldc = n;
    e->a = malloc((size_t)(m * k + 1));
    e->b = malloc((size_t)(n * k + 1));
    ck_assert(e->a && e->b);
}

/* Scales, bias and per-token zero points for a scaled run. */
static void edge_epilogue(edge *e, cf_rng *r, smm_dtype t, int bias, int azp)
{
    e->c_dtype = t;
    e->sa = malloc((size_t)e->m * sizeof(float));
    e->sb = malloc((size_t)e->n * sizeof(float));
    ck_assert(e->sa && e->sb);
    for (int64_t i = 0; i < e->m; i++)
        e->sa[i] = (float)cf_rng_range(r, 1, 1000) * 0x1p-12f;
    for (int64_t j = 0; j < e->n; j++)
        e->sb[j] = (float)cf_rng_range(r, 1, 1000) * 0x1p-10f;
    if (bias) {
        e->bias = malloc((size_t)e->n * sizeof(float));
        ck_assert(e->bias);
        for (int64_t j = 0; j < e->n; j++)
            e->bias[j] = (float)cf_rng_range(r, -5000, 5000) * 0x1p-6f;
    }
    if (azp) {
        e->azp = malloc((size_t)e->m * sizeof(int32_t));
        ck_assert(e->azp);
        for (int64_t i = 0; i < e->m; i++)
            e->azp[i] = (int32_t)cf_rng_range(r, -200, 200);
    }
}

static void edge_free(edge *e)
{
    free(e->a);
    free(e->b);
    free(e->sa);
    free(e->sb);
    free(e->bias);
    free(e->azp);
    memset(e, 0, sizeof *e);
}

static void edge_describe(const edge *e, const char *what, char *buf, size_t size)
{
    snprintf(buf, size, "%s: m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " ldc=%" PRId64 " %s%s%s",
             what, e->m, e->n, e->k, e->ldc, smm_dtype_name(e->c_dtype), e->bias ? " bias" : "",
             e->azp ? " azp" : "");
}

#define GUARD 64

/*
 * Runs e on ctx (with pb when not NULL) into a C of ldc-strided rows with
 * GUARD bytes either side, all poisoned; returns the status. On SMM_OK,
 * *view receives the M x N elements densely (malloc'd) and the bytes
 * around and between the rows must still hold the poison; on an error
 * every byte must (nothing written). Failures go to msg (returns -1).
 */
static int run_one(smm_context *ctx, const edge *e, const smm_packed_b *pb, unsigned char poison,
                   unsigned char **view, char *msg, size_t msgsz)
{
    const size_t es = esize(e->c_dtype);
    const size_t fp = (size_t)((e->m - 1) * e->ldc + e->n) * es;
    unsigned char *mem = malloc(fp + 2 * GUARD);
    ck_assert(mem);
    memset(mem, poison, fp + 2 * GUARD);
    unsigned char *c = mem + GUARD;
    smm_status st;
    if (e->c_dtype == SMM_DTYPE_I32) {
        st = pb ? smm_gemm_s8s8s32_packed(ctx, e->m, e->n, e->k, e->a, e->lda, pb, (int32_t *)c, e->ldc)
                : smm_gemm_s8s8s32(ctx, e->m, e->n, e->k, e->a, e->lda, e->b, e->ldb, (int32_t *)c,
                                   e->ldc);
    } else {
        smm_scaled_mm_args args = {
            .m = e->m, .n = e->n, .k = e->k,
            .a = e->a, .lda = e->lda, .b = pb ? NULL : e->b, .ldb = e->ldb,
            .scale_a = e->sa, .scale_a_len = e->m,
            .scale_b = e->sb, .scale_b_len = e->n,
            .bias = e->bias,
            .azp = e->azp, .azp_len = e->azp ? e->m : 0,
            .c = c, .ldc = e->ldc, .c_dtype = e->c_dtype,
            .b_packed = pb,
        };
        st = smm_scaled_mm(ctx, &args);
    }
    int bad = 0;
    if (st != SMM_OK) {
        for (size_t i = 0; i < fp + 2 * GUARD; i++)
            if (mem[i] != poison) {
                snprintf(msg, msgsz, "%s, yet byte %zu of C's buffer was written", smm_strerror(st), i);
                bad = 1;
                break;
            }
        free(mem);
        return bad ? -1 : (int)st;
    }
    for (size_t i = 0; i < GUARD && !bad; i++)
        if (mem[i] != poison || mem[GUARD + fp + i] != poison) {
            snprintf(msg, msgsz, "a byte next to C's footprint was written (poison 0x%02X)", poison);
            bad = 1;
        }
    for (int64_t i = 0; i + 1 < e->m && !bad; i++)
        for (size_t b = (size_t)e->n * es; b < (size_t)e->ldc * es; b++)
            if (c[(size_t)i * (size_t)e->ldc * es + b] != poison) {
                snprintf(msg, msgsz, "a byte between rows %" PRId64 " and %" PRId64 " was written",
                         i, i + 1);
                bad = 1;
                break;
            }
    if (!bad) {
        *view = malloc((size_t)(e->m * e->n) * es + 1);
        ck_assert(*view);
        for (int64_t i = 0; i < e->m; i++)
            memcpy(*view + (size_t)(i * e->n) * es, c + (size_t)(i * e->ldc) * es, (size_t)e->n * es);
    }
    free(mem);
    return bad ? -1 : SMM_OK;
}

/* The first differing element, for the message. */
static void describe_diff(const edge *e, const unsigned char *got, const unsigned char *want,
                          char *msg, size_t msgsz)
{
    const size_t es = esize(e->c_dtype);
    for (int64_t i = 0; i < e->m; i++)
        for (int64_t j = 0; j < e->n; j++) {
            const size_t off = (size_t)(i * e->n + j) * es;
            if (memcmp(got + off, want + off, es) != 0) {
                uint32_t u = 0, v = 0;
                memcpy(&u, got + off, es);
                memcpy(&v, want + off, es);
                snprintf(msg, msgsz, "C[%" PRId64 "][%" PRId64 "] = 0x%08X, reference 0x%08X", i, j,
                         (unsigned)u, (unsigned)v);
                return;
            }
        }
    snprintf(msg, msgsz, "differs");
}

/* The reference's result of e (malloc'd, dense M x N). */
static unsigned char *reference_of(smm_context *ref, const edge *e)
{
    unsigned char *want = NULL;
    char msg[256] = "";
    int st = run_one(ref, e, NULL, 0xA5, &want, msg, sizeof msg);
    ck_assert_msg(st == SMM_OK, "reference failed: %s %s", smm_strerror((smm_status)(st < 0 ? 0 : st)),
                  msg);
    return want;
}

/* e on ctx, unpacked and (when pack) with B packed by ctx, each with two
 * poisons, equal to want. */
static void check_on(smm_context *ctx, const edge *e, const unsigned char *want, int pack,
                     const char *what)
{
    char desc[256], msg[512] = "";
    edge_describe(e, what, desc, sizeof desc);
    const int th = smm_context_get_num_threads(ctx);
    const size_t bytes = (size_t)(e->m * e->n) * esize(e->c_dtype);
    smm_packed_b *pb = NULL;
    if (pack) {
        smm_status st = smm_pack_b(ctx, e->n, e->k, e->b, e->ldb, &pb);
        ck_assert_msg(st == SMM_OK, "%s: pack: %s", desc, smm_context_last_error(ctx));
    }
    for (int packed = 0; packed <= pack; packed++) {
        for (int pass = 0; pass < 2; pass++) {
            unsigned char *got = NULL;
            int st = run_one(ctx, e, packed ? pb : NULL, pass ? 0x5A : 0xA5, &got, msg, sizeof msg);
            if (st != SMM_OK) {
                if (st > 0)
                    snprintf(msg, sizeof msg, "%s: %s", smm_strerror((smm_status)st),
                             smm_context_last_error(ctx));
                TU_FAIL_CASE(SMM_BACKEND_CPU, th, desc, msg);
            }
            if (memcmp(got, want, bytes) != 0) {
                char d[256];
                describe_diff(e, got, want, d, sizeof d);
                snprintf(msg, sizeof msg, "%s B, poison 0x%02X: %s", packed ? "packed" : "unpacked",
                         pass ? 0x5A : 0xA5, d);
                free(got);
                TU_FAIL_CASE(SMM_BACKEND_CPU, th, desc, msg);
            }
            free(got);
        }
    }
    smm_packed_b_destroy(pb);
}

/* The reference, then every CPU context in cpus. */
static void check_all(smm_context *ref, smm_context *const *cpus, int ncpu, const edge *e, int pack,
                      const char *what)
{
    unsigned char *want = reference_of(ref, e);
    for (int i = 0; i < ncpu; i++)
        check_on(cpus[i], e, want, pack, what);
    free(want);
}

/* CPU contexts at 1, 2 and 3 threads (level: SMM_CPU_ISA). */
static int cpu_contexts(smm_context *out[3])
{
    int th[3];
    int n = tu_thread_counts(SMM_BACKEND_CPU, th);
    for (int i = 0; i < n; i++)
        out[i] = tu_ctx(SMM_BACKEND_CPU, th[i]);
    return n;
}

static void destroy_all(smm_context **c, int n)
{
    for (int i = 0; i < n; i++)
        smm_context_destroy(c[i]);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

/* Row i of A: all 0, all -128, all 127 (i mod 3); column j of B: all 1,
 * all -128 (j mod 2). */
static void fill_classes(edge *e)
{
    static const int8_t arow[3] = {0, -128, 127}, bcol[2] = {1, -128};
    for (int64_t i = 0; i < e->m; i++)
        memset(e->a + i * e->lda, arow[i % 3], (size_t)e->k);
    for (int64_t j = 0; j < e->n; j++)
        memset(e->b + j * e->ldb, bcol[j % 2], (size_t)e->k);
}

/* Every K from 1 to 130 on the value classes of the shift compensation:
 * 3 x 2 (the small-M path) and 40 x 35 (the blocked path, tails of the
 * register block in both directions); raw accumulators, and scaled with
 * per-token zero points and bias (bf16) or without either (f32). */
START_TEST(test_shift_classes_every_k)
{
    cf_rng r = tu_rng("shift_classes_every_k");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    static const int64_t shapes[2][2] = {{3, 2}, {40, 35}};
    for (int64_t k = 1; k <= 130; k++) {
        for (int s = 0; s < 2; s++) {
            for (int mode = 0; mode < 3; mode++) {
                edge e;
                edge_alloc(&e, shapes[s][0], shapes[s][1], k);
                fill_classes(&e);
                if (mode == 1)
                    edge_epilogue(&e, &r, SMM_DTYPE_BF16, 1, 1);
                else if (mode == 2)
                    edge_epilogue(&e, &r, SMM_DTYPE_F32, 0, 0);
                else
                    e.c_dtype = SMM_DTYPE_I32;
                /* One thread count per case, cycling through 1, 2, 3 (all
                 * three on the small shape at the vector-width edges). */
                if (s == 0 && (k <= 4 || k % 32 <= 1 || k % 32 == 31))
                    check_all(ref, cpu, ncpu, &e, 1, "value classes");
                else
                    check_all(ref, &cpu[(k + s + mode) % ncpu], 1, &e, 1, "value classes");
                edge_free(&e);
            }
        }
    }
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Random values, N from 1 to 97, M of the small-M path (1, 7) and of the
 * blocked one (21), K random (tails of every block), packed and unpacked. */
START_TEST(test_every_n)
{
    cf_rng r = tu_rng("every_n");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    static const int64_t ms[3] = {1, 7, 21};
    for (int64_t n = 1; n <= 97; n++) {
        for (int mi = 0; mi < 3; mi++) {
            edge e;
            edge_alloc(&e, ms[mi], n, cf_rng_range(&r, 1, 300));
            cf_fill_i8(&r, e.a, e.m, e.k, e.lda, (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1));
            cf_fill_i8(&r, e.b, e.n, e.k, e.ldb, (cf_values)cf_rng_range(&r, 0, CF_VALUES_COUNT - 1));
            if (cf_rng_range(&r, 0, 1))
                e.c_dtype = SMM_DTYPE_I32;
            else
                edge_epilogue(&e, &r, cf_rng_range(&r, 0, 1) ? SMM_DTYPE_F16 : SMM_DTYPE_F32,
                              (int)cf_rng_range(&r, 0, 1), (int)cf_rng_range(&r, 0, 1));
            e.ldc = n + cf_rng_range(&r, 0, 3);
            check_all(ref, &cpu[(n + mi) % ncpu], 1, &e, 1, "every n");
            edge_free(&e);
        }
    }
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Odd M from 1 to 17 (the small-M path up to 16 rows, then the blocked
 * path), odd N, K on both sides of the vector widths and of the small-M
 * K block (4096), with zero points and bias, at 1, 2 and 3 threads. */
START_TEST(test_odd_m_decode)
{
    cf_rng r = tu_rng("odd_m_decode");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    static const int64_t ks[6] = {1, 63, 65, 129, 4095, 4101};
    for (int64_t m = 1; m <= 17; m += 2) {
        for (int ki = 0; ki < 6; ki++) {
            edge e;
            edge_alloc(&e, m, 2 * cf_rng_range(&r, 0, 40) + 1, ks[ki]);
            cf_fill_i8(&r, e.a, e.m, e.k, e.lda, ki % 2 ? CF_VALUES_EXTREME : CF_VALUES_UNIFORM);
            cf_fill_i8(&r, e.b, e.n, e.k, e.ldb, ki % 3 ? CF_VALUES_UNIFORM : CF_VALUES_EXTREME);
            if (ki % 2)
                e.c_dtype = SMM_DTYPE_I32;
            else
                edge_epilogue(&e, &r, SMM_DTYPE_BF16, 1, 1);
            check_all(ref, cpu, ncpu, &e, 1, "odd m");
            edge_free(&e);
        }
    }
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Prepacked B with odd N (1 to 99), one packed B used by contexts of 1,
 * 2 and 3 threads (it was packed by the first). */
START_TEST(test_packed_odd_n)
{
    cf_rng r = tu_rng("packed_odd_n");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    for (int64_t n = 1; n <= 99; n += 2) {
        edge e;
        edge_alloc(&e, cf_rng_range(&r, 0, 1) ? cf_rng_range(&r, 1, 16) : cf_rng_range(&r, 17, 50), n,
                   cf_rng_range(&r, 1, 1100));
        cf_fill_i8(&r, e.a, e.m, e.k, e.lda, CF_VALUES_UNIFORM);
        cf_fill_i8(&r, e.b, e.n, e.k, e.ldb, n % 3 ? CF_VALUES_UNIFORM : CF_VALUES_EXTREME);
        if (n % 4 == 1)
            e.c_dtype = SMM_DTYPE_I32;
        else
            edge_epilogue(&e, &r, SMM_DTYPE_F16, n % 4 == 3, 1);
        unsigned char *want = reference_of(ref, &e);
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(cpu[0], e.n, e.k, e.b, e.ldb, &pb), SMM_OK);
        char desc[256], msg[512] = "";
        edge_describe(&e, "packed odd n", desc, sizeof desc);
        for (int c = 0; c < ncpu; c++) {
            unsigned char *got = NULL;
            int st = run_one(cpu[c], &e, pb, 0x5A, &got, msg, sizeof msg);
            if (st != SMM_OK)
                TU_FAIL_CASE(SMM_BACKEND_CPU, smm_context_get_num_threads(cpu[c]), desc,
                             st > 0 ? smm_context_last_error(cpu[c]) : msg);
            if (memcmp(got, want, (size_t)(e.m * e.n) * esize(e.c_dtype)) != 0) {
                describe_diff(&e, got, want, msg, sizeof msg);
                TU_FAIL_CASE(SMM_BACKEND_CPU, smm_context_get_num_threads(cpu[c]), desc, msg);
            }
            free(got);
        }
        smm_packed_b_destroy(pb);
        free(want);
        edge_free(&e);
    }
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* Sums past 2^31: all -128 (16384 per product) over K = 131073, which
 * wraps; on both paths. */
START_TEST(test_wrapping_sums)
{
    cf_rng r = tu_rng("wrapping_sums");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    static const int64_t ms[2] = {2, 19};
    for (int mi = 0; mi < 2; mi++) {
        edge e;
        edge_alloc(&e, ms[mi], 5, 131073);
        memset(e.a, -128, (size_t)(e.m * e.k));
        memset(e.b, -128, (size_t)(e.n * e.k));
        e.b[3] = 127;   /* one column a little off */
        e.c_dtype = SMM_DTYPE_I32;
        check_all(ref, &cpu[mi % ncpu], 1, &e, 1, "wrapping");
        edge_epilogue(&e, &r, SMM_DTYPE_F32, 1, 1);
        check_all(ref, &cpu[(mi + 1) % ncpu], 1, &e, 1, "wrapping");
        edge_free(&e);
    }
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* A problem whose shifted copy of A exceeds the 16 MiB the VNNI levels pack
 * at a time (301 x 65600 bytes): A' is packed in two bands of rows, each
 * band's tiles run before the next is packed (other levels: their usual
 * path); random data, unpacked and packed B, raw accumulators and f32 with
 * bias and per-token zero points. */
START_TEST(test_row_bands)
{
    cf_rng r = tu_rng("row_bands");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu[3];
    int ncpu = cpu_contexts(cpu);
    edge e;
    edge_alloc(&e, 300, 17, 65536);
    for (int64_t i = 0; i < e.m * e.k; i++)
        e.a[i] = (int8_t)(cf_rng_next(&r) >> 56);
    for (int64_t i = 0; i < e.n * e.k; i++)
        e.b[i] = (int8_t)(cf_rng_next(&r) >> 56);
    e.c_dtype = SMM_DTYPE_I32;
    check_all(ref, &cpu[1 % ncpu], 1, &e, 1, "row bands");
    edge_epilogue(&e, &r, SMM_DTYPE_F32, 1, 1);
    check_all(ref, &cpu[2 % ncpu], 1, &e, 1, "row bands");
    edge_free(&e);
    destroy_all(cpu, ncpu);
    smm_context_destroy(ref);
}
END_TEST

/* A B packed on one kernel level and used on another: equal formats give
 * the reference's bits, different ones SMM_ERR_INVALID_ARG naming both,
 * with C untouched. Levels the CPU lacks are capped to one it has, so
 * every context here runs. */
START_TEST(test_packed_across_levels)
{
    /* Every level the library knows, then the emulations. */
    enum { CAP = 32 };
    const char *levels[2 * CAP];
    int nall = 0, nemu = 0;
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, levels, CAP, &nall), SMM_OK);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_EMULATED, levels + nall, CAP, &nemu), SMM_OK);
    ck_assert(nall <= CAP && nemu <= CAP);
    const int NL = nall + nemu;
    cf_rng r = tu_rng("packed_across_levels");
    const char *saved = getenv("SMM_CPU_ISA");
    char *saved_copy = saved ? strdup(saved) : NULL;
    smm_context *ctx[2 * CAP];
    for (int l = 0; l < NL; l++) {
        setenv("SMM_CPU_ISA", levels[l], 1);
        ctx[l] = tu_ctx(SMM_BACKEND_CPU, 1 + l % 3);
    }
    if (saved_copy)
        setenv("SMM_CPU_ISA", saved_copy, 1);
    else
        unsetenv("SMM_CPU_ISA");
    free(saved_copy);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);

    /* M = 9 takes the small-M path, M = 40 the blocked one (the AMX
     * tiles at amx_int8). */
    static const int64_t ms[] = {9, 40};
    int differing = 0;
    for (int si = 0; si < 2; si++) {
        edge e;
        edge_alloc(&e, ms[si], 37, 70);
        cf_fill_i8(&r, e.a, e.m, e.k, e.lda, CF_VALUES_UNIFORM);
        cf_fill_i8(&r, e.b, e.n, e.k, e.ldb, CF_VALUES_UNIFORM);
        edge_epilogue(&e, &r, SMM_DTYPE_BF16, 1, 1);
        unsigned char *want = reference_of(ref, &e);
        for (int i = 0; i < NL; i++) {
            smm_packed_b *pb = NULL;
            ck_assert_int_eq(smm_pack_b(ctx[i], e.n, e.k, e.b, e.ldb, &pb), SMM_OK);
            const char *fi = smm_packed_b_format(pb);
            ck_assert(strncmp(fi, "cpu", 3) == 0);
            for (int j = 0; j < NL; j++) {
                char desc[256], msg[512] = "";
                snprintf(desc, sizeof desc, "M=%d: packed on SMM_CPU_ISA=%s (%s), used on SMM_CPU_ISA=%s",
                         (int)e.m, levels[i], fi, levels[j]);
                smm_packed_b *own = NULL;
                ck_assert_int_eq(smm_pack_b(ctx[j], 1, 4, e.b, 4, &own), SMM_OK);
                const int same = strcmp(fi, smm_packed_b_format(own)) == 0;
                smm_packed_b_destroy(own);
                unsigned char *got = NULL;
                int st = run_one(ctx[j], &e, pb, 0x5A, &got, msg, sizeof msg);
                if (same) {
                    if (st != SMM_OK)
                        TU_FAIL_CASE(SMM_BACKEND_CPU, 1, desc, st > 0 ? smm_context_last_error(ctx[j]) : msg);
                    if (memcmp(got, want, (size_t)(e.m * e.n) * 2) != 0) {
                        describe_diff(&e, got, want, msg, sizeof msg);
                        TU_FAIL_CASE(SMM_BACKEND_CPU, 1, desc, msg);
                    }
                    free(got);
                } else {
                    differing++;
                    if (st < 0)
                        TU_FAIL_CASE(SMM_BACKEND_CPU, 1, desc, msg);
                    ck_assert_msg(st == SMM_ERR_INVALID_ARG, "%s: %s", desc, smm_strerror((smm_status)st));
                    ck_assert_msg(strstr(smm_context_last_error(ctx[j]), fi) != NULL, "%s: message \"%s\"",
                                  desc, smm_context_last_error(ctx[j]));
                    /* The raw entry point too. */
                    int32_t c1[1] = {0x12345678};
                    ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx[j], 1, 1, e.k, e.a, e.lda, pb, c1, 1),
                                     SMM_ERR_INVALID_ARG);
                    ck_assert_int_eq(c1[0], 0x12345678);
                }
            }
            smm_packed_b_destroy(pb);
        }
        free(want);
        edge_free(&e);
    }
    /* The emulated VNNI levels' formats always differ from the scalar one. */
    ck_assert_int_gt(differing, 0);
    for (int l = 0; l < NL; l++)
        smm_context_destroy(ctx[l]);
    smm_context_destroy(ref);
}
END_TEST

/* Calls from inside the caller's own parallel region of two threads, with
 * nested regions off: the library's region on a 3-thread context then has
 * one thread, which must take the tiles of all three runs (one band and
 * two bands of rows), on the region's first thread (the test's own, where
 * Check's assertions belong) while the other waits at the region's end. */
START_TEST(test_inside_callers_region)
{
#ifdef _OPENMP
    cf_rng r = tu_rng("inside_region");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *cpu = tu_ctx(SMM_BACKEND_CPU, 3);
    static const int64_t shapes[2][3] = {{40, 97, 300}, {300, 17, 65536}};
    const int levels = omp_get_max_active_levels();
    omp_set_max_active_levels(1);
    for (int s = 0; s < 2; s++) {
        edge e;
        edge_alloc(&e, shapes[s][0], shapes[s][1], shapes[s][2]);
        for (int64_t i = 0; i < e.m * e.k; i++)
            e.a[i] = (int8_t)(cf_rng_next(&r) >> 56);
        for (int64_t i = 0; i < e.n * e.k; i++)
            e.b[i] = (int8_t)(cf_rng_next(&r) >> 56);
        edge_epilogue(&e, &r, SMM_DTYPE_BF16, 1, 1);
        unsigned char *want = reference_of(ref, &e);
        int nested = -1;
#pragma omp parallel num_threads(2)
        if (omp_get_thread_num() == 0) {
#pragma omp parallel num_threads(3)
#pragma omp single
            nested = omp_get_num_threads();
            check_on(cpu, &e, want, 1, "inside the caller's region");
        }
        ck_assert_int_eq(nested, 1);
        free(want);
        edge_free(&e);
    }
    omp_set_max_active_levels(levels);
    smm_context_destroy(cpu);
    smm_context_destroy(ref);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_edges");
    tcase_add_test(tu_tcase(s, "shift", 600), test_shift_classes_every_k);
    tcase_add_test(tu_tcase(s, "shapes", 600), test_every_n);
    tcase_add_test(tu_tcase(s, "decode", 600), test_odd_m_decode);
    tcase_add_test(tu_tcase(s, "packed", 600), test_packed_odd_n);
    tcase_add_test(tu_tcase(s, "wrap", 600), test_wrapping_sums);
    tcase_add_test(tu_tcase(s, "bands", 600), test_row_bands);
    tcase_add_test(tu_tcase(s, "levels", 600), test_packed_across_levels);
    tcase_add_test(tu_tcase(s, "inside region", 600), test_inside_callers_region);
    return tu_main(s, "check_cpu_edges");
}
