/*
 * check_large.c - 64-bit indexing: operands with more than 2^31 elements and
 * strided views whose leading dimension exceeds 2^31, CPU against the
 * reference (and a direct sum where the problem is small enough).
 *
 * Memory: the one dense operand (2 GiB + 32 KiB of int8) is an anonymous
 * mapping filled once and used both as A (M = 65537 rows) and as B
 * (N = 65537 rows). The huge-stride views are sparse mappings
 * (MAP_NORESERVE) of which only the touched pages ever exist.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG_ROWS 65537
#define BIG_K 32768            /* BIG_ROWS * BIG_K = 2^31 + 32768 elements */

static void *map_bytes(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_msg(p != MAP_FAILED, "mmap of %zu bytes failed", size);
    return p;
}

/* The dense operand: row r is a window of a random pool, so rows differ. */
static int8_t *big_operand(cf_rng *r, size_t *size)
{
    *size = (size_t)BIG_ROWS * BIG_K;
    int8_t *p = map_bytes(*size);
#ifdef MADV_HUGEPAGE
    madvise(p, *size, MADV_HUGEPAGE);   /* fewer page faults; a hint only */
#endif
    enum { POOL = 1 << 17 };
    int8_t *pool = malloc(POOL + BIG_K);
    ck_assert_ptr_nonnull(pool);
    cf_fill_i8(r, pool, 1, POOL + BIG_K, 0, CF_VALUES_UNIFORM);
    for (size_t row = 0; row < BIG_ROWS; row++) {
        size_t start = (size_t)cf_rng_range(r, 0, POOL - 1);
        memcpy(p + row * BIG_K, pool + start, BIG_K);
    }
    free(pool);
    return p;
}

static smm_context *cpu_or_skip(void)
{
    if (!smm_backend_available(SMM_BACKEND_CPU, NULL))
        return NULL;
    return tu_ctx(SMM_BACKEND_CPU, 0);
}

/* Runs the same call on every available backend; every result must equal
 * the reference's. `run` writes a compact result of `bytes` bytes. */
typedef smm_status (*runner)(smm_context *ctx, void *out, void *user);

static void compare_backends(runner run, void *user, size_t bytes, const char *what)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    unsigned char *want = malloc(bytes), *got = malloc(bytes);
    ck_assert(want && got);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    memset(want, 0xA5, bytes);
    smm_status st = run(ref, want, user);
    ck_assert_msg(st == SMM_OK, "%s on reference: %s (%s)", what, smm_strerror(st),
                  smm_context_last_error(ref));
    smm_context_destroy(ref);
    for (int i = 0; i < nb; i++) {
        if (bs[i] == SMM_BACKEND_REFERENCE)
            continue;
        smm_context *ctx = tu_ctx(bs[i], 0);
        memset(got, 0x5A, bytes);
        st = run(ctx, got, user);
        ck_assert_msg(st == SMM_OK, "%s on %s: %s (%s)", what, smm_backend_name(bs[i]),
                      smm_strerror(st), smm_context_last_error(ctx));
        if (memcmp(got, want, bytes) != 0) {
            size_t x = 0;
            while (got[x] == want[x])
                x++;
            ck_abort_msg("%s on %s: differs from the reference at byte %zu (element %zu of 4 "
                         "bytes): 0x%02x vs 0x%02x",
                         what, smm_backend_name(bs[i]), x, x / 4, got[x], want[x]);
        }
        smm_context_destroy(ctx);
    }
    free(want);
    free(got);
}

/* ---- more than 2^31 elements ---- */

typedef struct big_problem {
    int8_t *big, small[BIG_K];
    int as_b;                  /* 0: big is A (M = 65537, N = 1); 1: big is B (M = 1) */
    smm_dtype dt;
    float sa[BIG_ROWS], sb[BIG_ROWS], bias[BIG_ROWS];
    int32_t azp[BIG_ROWS];
} big_problem;

static smm_status run_big(smm_context *ctx, void *out, void *user)
{
    big_problem *p = user;
    int64_t m = p->as_b ? 1 : BIG_ROWS, n = p->as_b ? BIG_ROWS : 1;
    const int8_t *a = p->as_b ? p->small : p->big, *b = p->as_b ? p->big : p->small;
    if (p->dt == SMM_DTYPE_I32)
        return smm_gemm_s8s8s32(ctx, m, n, BIG_K, a, BIG_K, b, BIG_K, out, n);
    smm_scaled_mm_args args = { .m = m, .n = n, .k = BIG_K, .a = a, .lda = BIG_K, .b = b,
                                .ldb = BIG_K, .scale_a = p->sa, .scale_a_len = m,
                                .scale_b = p->sb, .scale_b_len = n, .bias = p->bias,
                                .azp = p->azp, .azp_len = m, .c = out, .ldc = n,
                                .c_dtype = p->dt };
    return smm_scaled_mm(ctx, &args);
}

START_TEST(test_more_than_2g_elements)
{
    smm_context *cpu = cpu_or_skip();
    if (!cpu)
        return;   /* nothing to compare the reference with */
    smm_context_destroy(cpu);
    cf_rng r = tu_rng("big");
    size_t size;
    big_problem *p = calloc(1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    p->big = big_operand(&r, &size);
    cf_fill_i8(&r, p->small, 1, BIG_K, BIG_K, CF_VALUES_UNIFORM);
    for (int i = 0; i < BIG_ROWS; i++) {
        p->sa[i] = (float)cf_rng_range(&r, 1, 1000) * 0x1p-20f;
        p->sb[i] = (float)cf_rng_range(&r, 1, 1000) * 0x1p-16f;
        p->bias[i] = (float)cf_rng_range(&r, -1000, 1000) * 0x1p-4f;
        p->azp[i] = (int32_t)cf_rng_range(&r, -128, 127);
    }
    /* A with 2^31 + 32768 elements: raw accumulators */
    p->as_b = 0;
    p->dt = SMM_DTYPE_I32;
    compare_backends(run_big, p, (size_t)BIG_ROWS * 4, "gemm_s8s8s32 A 65537 x 32768");
    /* B with 2^31 + 32768 elements: the full epilogue (per-token scales and
     * zero points, per-channel scales, bias) in float16 */
    p->as_b = 1;
    p->dt = SMM_DTYPE_F16;
    compare_backends(run_big, p, (size_t)BIG_ROWS * 2, "scaled_mm f16 B 65537 x 32768");
    munmap(p->big, size);
    free(p);
}
END_TEST

/* ---- leading dimensions above 2^31 (sparse views) ---- */

#define HUGE_LD ((int64_t)1 << 31)

typedef struct strided {
    int8_t *a, *b;
    unsigned char *c;
    int64_t m, n, k, lda, ldb, ldc;
    smm_dtype dt;
    float sa[4], sb[4];
} strided;

static size_t esz(smm_dtype dt)
{
    return dt == SMM_DTYPE_F16 || dt == SMM_DTYPE_BF16 ? 2 : 4;
}

/* Runs into the sparse C, then copies the view out compactly and checks the
 * 64 bytes either side of every row are still the poison. */
static smm_status run_strided(smm_context *ctx, void *out, void *user)
{
    strided *s = user;
    size_t es = esz(s->dt);
    for (int64_t i = 0; i < s->m; i++) {
        size_t before = i > 0 ? 64 : 0;
        memset(s->c + (size_t)(i * s->ldc) * es - before, 0xA5, before + (size_t)s->n * es + 64);
    }
    smm_status st;
    if (s->dt == SMM_DTYPE_I32) {
        st = smm_gemm_s8s8s32(ctx, s->m, s->n, s->k, s->a, s->lda, s->b, s->ldb,
                              (int32_t *)s->c, s->ldc);
    } else {
        smm_scaled_mm_args args = { .m = s->m, .n = s->n, .k = s->k, .a = s->a, .lda = s->lda,
                                    .b = s->b, .ldb = s->ldb, .scale_a = s->sa,
                                    .scale_a_len = s->m, .scale_b = s->sb, .scale_b_len = s->n,
                                    .c = s->c, .ldc = s->ldc, .c_dtype = s->dt };
        st = smm_scaled_mm(ctx, &args);
    }
    if (st != SMM_OK)
        return st;
    for (int64_t i = 0; i < s->m; i++) {
        unsigned char *row = s->c + (size_t)(i * s->ldc) * es;
        memcpy((unsigned char *)out + (size_t)(i * s->n) * es, row, (size_t)s->n * es);
        for (size_t x = 0; x < 64; x++) {
            ck_assert_msg(row[(size_t)s->n * es + x] == 0xA5, "%s: wrote after row %lld",
                          smm_backend_name(smm_context_backend(ctx)), (long long)i);
            if (i > 0)
                ck_assert_msg(row[-(ptrdiff_t)x - 1] == 0xA5, "%s: wrote before row %lld",
                              smm_backend_name(smm_context_backend(ctx)), (long long)i);
        }
    }
    return SMM_OK;
}

START_TEST(test_huge_leading_dimensions)
{
    cf_rng r = tu_rng("huge_ld");
    strided s = { .m = 3, .n = 4, .k = 100 };
    s.lda = HUGE_LD + 13;
    s.ldb = HUGE_LD + 7;
    s.ldc = HUGE_LD / 2 + 5;   /* x 4 bytes: rows 2^33 bytes apart */
    size_t asz = (size_t)((s.m - 1) * s.lda + s.k), bsz = (size_t)((s.n - 1) * s.ldb + s.k);
    size_t csz = (size_t)((s.m - 1) * s.ldc + s.n) * 4 + 64;
    s.a = map_bytes(asz);
    s.b = map_bytes(bsz);
    s.c = map_bytes(csz);
    for (int64_t i = 0; i < s.m; i++)
        cf_fill_i8(&r, s.a + i * s.lda, 1, s.k, 0, CF_VALUES_UNIFORM);
    for (int64_t i = 0; i < s.n; i++)
        cf_fill_i8(&r, s.b + i * s.ldb, 1, s.k, 0, CF_VALUES_EXTREME);
    for (int i = 0; i < 4; i++) {
        s.sa[i] = 0.5f + (float)i;
        s.sb[i] = 0.25f * (float)(i + 1);
    }
    s.sb[3] = 3.0f;

    /* raw accumulators, checked against a direct sum */
    s.dt = SMM_DTYPE_I32;
    int32_t got[3 * 4];
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        ck_assert_int_eq(run_strided(ctx, got, &s), SMM_OK);
        for (int64_t x = 0; x < s.m; x++)
            for (int64_t y = 0; y < s.n; y++) {
                int64_t sum = 0;
                for (int64_t kk = 0; kk < s.k; kk++)
                    sum += (int64_t)s.a[x * s.lda + kk] * s.b[y * s.ldb + kk];
                ck_assert_msg(got[x * s.n + y] == (int32_t)sum, "%s: C[%lld][%lld] = %d, expected %lld",
                              smm_backend_name(bs[i]), (long long)x, (long long)y,
                              got[x * s.n + y], (long long)sum);
            }
        smm_context_destroy(ctx);
    }
    /* scaled, every output type, against the reference */
    static const smm_dtype dts[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    for (int d = 0; d < 3; d++) {
        s.dt = dts[d];
        compare_backends(run_strided, &s, (size_t)(s.m * s.n) * esz(s.dt), "scaled_mm with ld > 2^31");
    }
    munmap(s.a, asz);
    munmap(s.b, bsz);
    munmap(s.c, csz);
}
END_TEST

typedef struct qstrided {
    float *x;
    int8_t *q;
    int64_t m, k, ldx, ldq;
    smm_quant_mode mode;
} qstrided;

static smm_status run_qstrided(smm_context *ctx, void *out, void *user)
{
    qstrided *s = user;
    for (int64_t i = 0; i < s->m; i++)
        memset(s->q + i * s->ldq, 0xA5, (size_t)s->k + 64);
    const int64_t qbytes = (s->m * s->k + 3) & ~(int64_t)3;   /* keep scale aligned */
    float *scale = (float *)((int8_t *)out + qbytes);
    int32_t *azp = (int32_t *)((int8_t *)out + qbytes + s->m * 4);
    memset((int8_t *)out + s->m * s->k, 0, (size_t)(qbytes - s->m * s->k));
    float s_in = 0.0625f;
    smm_quantize_args args = { .m = s->m, .k = s->k, .x = s->x, .x_dtype = SMM_DTYPE_F32,
                               .ldx = s->ldx, .q = s->q, .ldq = s->ldq, .mode = s->mode,
                               .scale = s->mode == SMM_QUANT_DYNAMIC_PER_TOKEN ? scale : &s_in,
                               .azp = s->mode == SMM_QUANT_DYNAMIC_PER_TOKEN ? azp : NULL };
    if (s->mode == SMM_QUANT_STATIC_PER_TENSOR)
        memset(scale, 0, (size_t)s->m * 8);
    smm_status st = smm_quantize_i8(ctx, &args);
    if (st != SMM_OK)
        return st;
    for (int64_t i = 0; i < s->m; i++) {
        memcpy((int8_t *)out + i * s->k, s->q + i * s->ldq, (size_t)s->k);
        for (int x = 0; x < 64; x++)
            ck_assert_msg((unsigned char)s->q[i * s->ldq + s->k + x] == 0xA5,
                          "quantize wrote after row %lld", (long long)i);
    }
    return SMM_OK;
}

START_TEST(test_quantize_huge_leading_dimensions)
{
    cf_rng r = tu_rng("q_huge_ld");
    qstrided s = { .m = 3, .k = 77 };
    s.ldx = HUGE_LD + 3;        /* x 4 bytes: rows 8 GiB apart */
    s.ldq = HUGE_LD + 9;
    size_t xsz = (size_t)((s.m - 1) * s.ldx + s.k) * 4, qsz = (size_t)((s.m - 1) * s.ldq + s.k) + 64;
    s.x = map_bytes(xsz);
    s.q = map_bytes(qsz);
    for (int64_t i = 0; i < s.m; i++)
        for (int64_t j = 0; j < s.k; j++)
            s.x[i * s.ldx + j] = (float)cf_rng_range(&r, -100000, 100000) * 0x1p-9f;
    for (int mode = 0; mode < 2; mode++) {
        s.mode = mode ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
        compare_backends(run_qstrided, &s, (size_t)(((s.m * s.k + 3) & ~(int64_t)3) + s.m * 8),
                         "quantize with ldx, ldq > 2^31");
    }
    munmap(s.x, xsz);
    munmap(s.q, qsz);
}
END_TEST

static Suite *large_suite(void)
{
    Suite *s = suite_create("large");
    TCase *tc = tu_tcase(s, "strides", 600);
    tcase_add_test(tc, test_huge_leading_dimensions);
    tcase_add_test(tc, test_quantize_huge_leading_dimensions);
    tc = tu_tcase(s, "elements", 900);
    tcase_add_test(tc, test_more_than_2g_elements);
    return s;
}

int main(void)
{
    return tu_main(large_suite(), "check_large");
}
