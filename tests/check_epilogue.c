/*
 * check_epilogue.c - smm_scaled_epilogue, the epilogue on the caller's
 * int32 accumulators, and the tensor-parallel recipes it makes exact:
 *   - on every backend (GPU ones with device memory; an AUTO context
 *     given host memory too), smm_scaled_epilogue on acc = A * B^T
 *     (smm_gemm_s8s8s32) and the column sums of B equals smm_scaled_mm on
 *     A and B bit for bit: every output type, bias, zero points per
 *     tensor and per token, scales per tensor, token and channel, strided
 *     acc and C, outputs poisoned and the bytes outside the view checked;
 *   - row parallelism on the CPU: K split into T = 1, 2, 4 shards (uneven,
 *     empty ones too), each shard's accumulators and column sums summed
 *     in int32 with wrapping, one epilogue: the TP = 1 smm_scaled_mm bit
 *     for bit; the float sum of the shards' epilogue outputs, what
 *     everyone else does, is counted where it differs (and must differ
 *     somewhere, or the test shows nothing);
 *   - column parallelism: N split into shards, each shard's smm_scaled_mm
 *     and smm_scaled_epilogue equal the columns of the full call;
 *   - every argument error, with its message and nothing written.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

/* A host buffer of n bytes with GUARD bytes either side, all poisoned. */
typedef struct {
    unsigned char *mem, *p;
    size_t n;
} gbuf;

static void gb_alloc(gbuf *b, size_t n, unsigned char poison)
{
    b->n = n;
    b->mem = malloc(n + 2 * GUARD);
    ck_assert_ptr_nonnull(b->mem);
    memset(b->mem, poison, n + 2 * GUARD);
    b->p = b->mem + GUARD;
}

static void gb_free(gbuf *b)
{
    free(b->mem);
    b->mem = b->p = NULL;
}

static int gb_equal(const gbuf *x, const gbuf *y)
{
    return x->n == y->n && memcmp(x->mem, y->mem, x->n + 2 * GUARD) == 0;
}

static int gb_untouched(const gbuf *b, unsigned char poison)
{
    for (size_t i = 0; i < b->n + 2 * GUARD; i++)
        if (b->mem[i] != poison)
            return 0;
    return 1;
}

static int64_t pick(cf_rng *r, const int64_t *v, size_t n)
{
    return v[cf_rng_next(r) % n];
}

static int esize(smm_dtype t)
{
    return t == SMM_DTYPE_F32 ? 4 : 2;
}

static int is_gpu(smm_backend b)
{
    return b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA;
}

/* One random problem: A (M x K, lda), B (N x K, ldb), scales, bias, zero
 * points, and the layout of acc and C. */
typedef struct {
    int64_t m, n, k, lda, ldb, ldacc, ldc;
    smm_dtype c_dtype;
    int bias, azp;            /* azp: 0 none, 1 per tensor, 2 per token */
    int64_t sa_len, sb_len;
    gbuf a, b, sa, sb, biasv, azpv;
} ecase;

static void describe(const ecase *c, char *buf, size_t size)
{
    snprintf(buf, size,
             "m %lld n %lld k %lld lda %lld ldb %lld ldacc %lld ldc %lld c %s bias %d azp %s "
             "scale_a_len %lld scale_b_len %lld",
             (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->lda,
             (long long)c->ldb, (long long)c->ldacc, (long long)c->ldc,
             smm_dtype_name(c->c_dtype), c->bias,
             c->azp == 0 ? "none" : c->azp == 1 ? "per-tensor" : "per-token",
             (long long)c->sa_len, (long long)c->sb_len);
}

static void fill_i8(cf_rng *r, gbuf *b, int extreme)
{
    for (size_t i = 0; i < b->n; i++) {
        uint64_t v = cf_rng_next(r);
        b->p[i] = extreme && v % 4 != 0 ? (unsigned char)(v % 8 < 4 ? 0x80 : 0x7F)
                                        : (unsigned char)v;
    }
}

/* A case of the given sizes; the rest drawn from r. */
static void make_case_sized(cf_rng *r, ecase *c, int64_t m, int64_t n, int64_t k)
{
    static const smm_dtype ts[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    memset(c, 0, sizeof *c);
    c->m = m;
    c->n = n;
    c->k = k;
    c->lda = k + (int64_t)(cf_rng_next(r) % 3);
    c->ldb = k + (int64_t)(cf_rng_next(r) % 3);
    c->ldacc = n + (int64_t)(cf_rng_next(r) % 3);
    c->ldc = n + (int64_t)(cf_rng_next(r) % 3);
    c->c_dtype = ts[cf_rng_next(r) % 3];
    c->bias = (int)(cf_rng_next(r) % 2);
    c->azp = (int)(cf_rng_next(r) % 3);
    c->sa_len = cf_rng_next(r) % 2 ? m : 1;
    c->sb_len = cf_rng_next(r) % 2 ? n : 1;
    const int extreme = cf_rng_next(r) % 8 == 0;
    gb_alloc(&c->a, (size_t)((m - 1) * c->lda + k), 0);
    gb_alloc(&c->b, (size_t)((n - 1) * c->ldb + k), 0);
    fill_i8(r, &c->a, extreme);
    fill_i8(r, &c->b, extreme);
    gb_alloc(&c->sa, (size_t)m * 4, 0);
    gb_alloc(&c->sb, (size_t)n * 4, 0);
    gb_alloc(&c->biasv, (size_t)n * 4, 0);
    gb_alloc(&c->azpv, (size_t)m * 4, 0);
    for (int64_t i = 0; i < m; i++) {
        float s = (float)(1 + cf_rng_next(r) % 1000) / 4096.0f;
        int32_t z = (int32_t)(cf_rng_next(r) % 256) - 128;
        memcpy(c->sa.p + 4 * i, &s, 4);
        memcpy(c->azpv.p + 4 * i, &z, 4);
    }
    for (int64_t j = 0; j < n; j++) {
        float s = (float)(1 + cf_rng_next(r) % 1000) / 65536.0f;
        float bv = (float)((int)(cf_rng_next(r) % 2001) - 1000) / 64.0f;
        memcpy(c->sb.p + 4 * j, &s, 4);
        memcpy(c->biasv.p + 4 * j, &bv, 4);
    }
}

static void make_case(cf_rng *r, ecase *c)
{
    static const int64_t ms[] = {1, 2, 3, 5, 8, 16, 17, 33, 64};
    static const int64_t ns[] = {1, 2, 7, 8, 16, 31, 48, 65};
    static const int64_t ks[] = {0, 1, 3, 4, 15, 64, 67, 130, 300, 1100};
    make_case_sized(r, c, pick(r, ms, 9), pick(r, ns, 8), pick(r, ks, 10));
}

static void free_case(ecase *c)
{
    gb_free(&c->a);
    gb_free(&c->b);
    gb_free(&c->sa);
    gb_free(&c->sb);
    gb_free(&c->biasv);
    gb_free(&c->azpv);
}

static size_t c_bytes(const ecase *c)
{
    return (size_t)((c->m - 1) * c->ldc + c->n) * (size_t)esize(c->c_dtype);
}

static size_t acc_bytes(const ecase *c)
{
    return (size_t)((c->m - 1) * c->ldacc + c->n) * 4;
}

/* smm_scaled_mm's arguments for case c on the buffers given. */
static smm_scaled_mm_args mm_args(const ecase *c, const void *a, const void *b, const void *sa,
                                  const void *sb, const void *bias, const void *azp, void *out)
{
    smm_scaled_mm_args x = {
        .m = c->m, .n = c->n, .k = c->k,
        .a = (const int8_t *)a, .lda = c->lda, .b = (const int8_t *)b, .ldb = c->ldb,
        .scale_a = (const float *)sa, .scale_a_len = c->sa_len,
        .scale_b = (const float *)sb, .scale_b_len = c->sb_len,
        .bias = c->bias ? (const float *)bias : NULL,
        .azp = c->azp ? (const int32_t *)azp : NULL, .azp_len = c->azp == 2 ? c->m : 1,
        .c = out, .ldc = c->ldc, .c_dtype = c->c_dtype,
    };
    return x;
}

static smm_epilogue_args epi_args(const ecase *c, const void *acc, const void *sa,
                                  const void *sb, const void *bias, const void *azp,
                                  const void *colsum, void *out)
{
    smm_epilogue_args e = {
        .m = c->m, .n = c->n,
        .acc = (const int32_t *)acc, .ldacc = c->ldacc,
        .scale_a = (const float *)sa, .scale_a_len = c->sa_len,
        .scale_b = (const float *)sb, .scale_b_len = c->sb_len,
        .bias = c->bias ? (const float *)bias : NULL,
        .azp = c->azp ? (const int32_t *)azp : NULL, .azp_len = c->azp == 2 ? c->m : 1,
        .colsum_b = c->azp ? (const int32_t *)colsum : NULL,
        .c = out, .ldc = c->ldc, .c_dtype = c->c_dtype,
    };
    return e;
}

/* The column sums of B (N x K, ldb) mod 2^32, as the header says to get
 * them: smm_gemm_s8s8s32 with A one row of K ones. */
static void colsums(smm_context *ctx, int64_t n, int64_t k, const int8_t *b, int64_t ldb,
                    int32_t *out)
{
    int8_t *ones = malloc((size_t)k + 1);
    ck_assert_ptr_nonnull(ones);
    memset(ones, 1, (size_t)k + 1);
    ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 1, n, k, ones, k, b, ldb, out, n), SMM_OK);
    free(ones);
}

/* The reference's accumulators (ldacc, poisoned gaps) and column sums. */
static void ref_acc(smm_context *ref, const ecase *c, gbuf *acc, gbuf *cs)
{
    gb_alloc(acc, acc_bytes(c), 0xEE);
    gb_alloc(cs, (size_t)c->n * 4, 0xEE);
    ck_assert_int_eq(smm_gemm_s8s8s32(ref, c->m, c->n, c->k, (const int8_t *)c->a.p, c->lda,
                                      (const int8_t *)c->b.p, c->ldb, (int32_t *)acc->p,
                                      c->ldacc), SMM_OK);
    colsums(ref, c->n, c->k, (const int8_t *)c->b.p, c->ldb, (int32_t *)cs->p);
}

/* A device copy of a host buffer, guards included; the device address of
 * its usable bytes. */
static unsigned char *to_device(smm_context *ctx, const gbuf *h)
{
    void *d = NULL;
    ck_assert_int_eq(smm_malloc(ctx, h->n + 2 * GUARD, &d), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, d, h->mem, h->n + 2 * GUARD, SMM_MEMCPY_HOST_TO_DEVICE),
                     SMM_OK);
    return (unsigned char *)d + GUARD;
}

static void from_device(smm_context *ctx, gbuf *h, unsigned char *d)
{
    ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, h->mem, d - GUARD, h->n + 2 * GUARD,
                                SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
}

static void free_device(smm_context *ctx, unsigned char *d)
{
    ck_assert_int_eq(smm_free(ctx, d - GUARD), SMM_OK);
}

/* smm_scaled_epilogue of case c on ctx into got (poisoned with `poison`),
 * from the accumulators and column sums given (host buffers; staged in
 * device memory on a GPU context). Returns the status; the message in err. */
static smm_status run_epilogue(smm_context *ctx, const ecase *c, const gbuf *acc, const gbuf *cs,
                               gbuf *got, char *err, size_t errsize)
{
    smm_status st;
    if (is_gpu(smm_context_backend(ctx))) {
        unsigned char *dacc = to_device(ctx, acc), *dcs = to_device(ctx, cs),
                      *dsa = to_device(ctx, &c->sa), *dsb = to_device(ctx, &c->sb),
                      *dbias = to_device(ctx, &c->biasv), *dazp = to_device(ctx, &c->azpv),
                      *dc = to_device(ctx, got);
        smm_epilogue_args e = epi_args(c, dacc, dsa, dsb, dbias, dazp, dcs, dc);
        st = smm_scaled_epilogue(ctx, &e);
        snprintf(err, errsize, "%s", smm_context_last_error(ctx));
        from_device(ctx, got, dc);
        unsigned char *all[7] = {dacc, dcs, dsa, dsb, dbias, dazp, dc};
        for (int i = 0; i < 7; i++)
            free_device(ctx, all[i]);
    } else {
        smm_epilogue_args e = epi_args(c, acc->p, c->sa.p, c->sb.p, c->biasv.p, c->azpv.p,
                                       cs->p, got->p);
        st = smm_scaled_epilogue(ctx, &e);
        snprintf(err, errsize, "%s", smm_context_last_error(ctx));
    }
    return st;
}

/* Case c on ctx: for two poisons, C of the epilogue equals C of the
 * reference's smm_scaled_mm (guards and the gaps between rows included,
 * so every element of the view is written and nothing else). */
static void check_case(smm_context *ctx, smm_context *ref, const ecase *c, const char *who,
                       int threads)
{
    static const unsigned char poisons[2] = {0xA5, 0x5A};
    gbuf acc, cs;
    ref_acc(ref, c, &acc, &cs);
    for (int p = 0; p < 2; p++) {
        gbuf want, got;
        gb_alloc(&want, c_bytes(c), poisons[p]);
        gb_alloc(&got, c_bytes(c), poisons[p]);
        smm_scaled_mm_args a = mm_args(c, c->a.p, c->b.p, c->sa.p, c->sb.p, c->biasv.p,
                                       c->azpv.p, want.p);
        ck_assert_int_eq(smm_scaled_mm(ref, &a), SMM_OK);
        char err[300];
        smm_status st = run_epilogue(ctx, c, &acc, &cs, &got, err, sizeof err);
        const int same = gb_equal(&want, &got);
        gb_free(&want);
        gb_free(&got);
        if (st != SMM_OK || !same) {
            char desc[300];
            describe(c, desc, sizeof desc);
            ck_abort_msg("%s, %d threads: %s\n    case: %s\n    (replay with "
                         "SMM_TEST_SEED=0x%016llx)", who, threads,
                         st != SMM_OK ? err : "C differs from smm_scaled_mm", desc,
                         (unsigned long long)tu_seed);
        }
    }
    gb_free(&acc);
    gb_free(&cs);
}

START_TEST(test_matches_scaled_mm)
{
    cf_rng r = tu_rng("matches_scaled_mm");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *autoc = NULL;
    ck_assert_int_eq(smm_context_create(&autoc, SMM_BACKEND_AUTO), SMM_OK);
    for (int i = 0; i < 200; i++) {
        ecase c;
        make_case(&r, &c);
        for (int b = 0; b < nb; b++) {
            int th[3], nt = tu_thread_counts(bs[b], th);
            for (int t = 0; t < nt; t++) {
                smm_context *ctx = tu_ctx(bs[b], th[t]);
                check_case(ctx, ref, &c, smm_backend_name(bs[b]), th[t]);
                smm_context_destroy(ctx);
            }
        }
        check_case(autoc, ref, &c, "auto (host memory)", 0);
        free_case(&c);
    }
    /* Large enough for the cpu backend to share the rows among threads. */
    for (int i = 0; i < 4; i++) {
        ecase c;
        make_case_sized(&r, &c, 300, 200, 20);
        for (int b = 0; b < nb; b++) {
            smm_context *ctx = tu_ctx(bs[b], is_gpu(bs[b]) ? 0 : 3);
            check_case(ctx, ref, &c, smm_backend_name(bs[b]), 3);
            smm_context_destroy(ctx);
        }
        free_case(&c);
    }
    smm_context_destroy(autoc);
    smm_context_destroy(ref);
}
END_TEST

/* ---- row parallelism: K split across T ranks ---- */

/* Shard boundaries: T + 1 cut points 0 = k0 <= k1 <= ... <= kT = K, drawn
 * at random (uneven, and empty shards now and then), or even. */
static void split(cf_rng *r, int64_t total, int t, int64_t *cut)
{
    cut[0] = 0;
    cut[t] = total;
    const int even = cf_rng_next(r) % 3 == 0;
    for (int i = 1; i < t; i++)
        cut[i] = even ? total * i / t : (int64_t)(cf_rng_next(r) % (uint64_t)(total + 1));
    for (int i = 1; i < t; i++)   /* sort (t <= 4) */
        for (int j = i + 1; j < t; j++)
            if (cut[j] < cut[i]) {
                int64_t x = cut[i];
                cut[i] = cut[j];
                cut[j] = x;
            }
}

/* Float sums that differ from TP = 1, per output type, over the suite. */
static long naive_diff[3], naive_total[3];

static int dtype_index(smm_dtype t)
{
    return t == SMM_DTYPE_F32 ? 0 : t == SMM_DTYPE_F16 ? 1 : 2;
}

/* Element (i, j) of a C of type t as a float. */
static float c_value(const unsigned char *p, smm_dtype t, int64_t off)
{
    if (t == SMM_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * off, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * off, 2);
    return t == SMM_DTYPE_F16 ? smm_f16_to_f32(h) : smm_bf16_to_f32(h);
}

/* x rounded to type t (to nearest even), as a float. */
static float round_to(smm_dtype t, float x)
{
    return t == SMM_DTYPE_F32   ? x
           : t == SMM_DTYPE_F16 ? smm_f16_to_f32(smm_f32_to_f16(x))
                                : smm_bf16_to_f32(smm_f32_to_bf16(x));
}

/* Case c split in T K-shards on ctx: the exact recipe against TP = 1, and
 * the float sum of the shards' outputs counted. */
static void tp_case(smm_context *ctx, const ecase *c, int t, const int64_t *cut)
{
    const int64_t m = c->m, n = c->n;
    uint32_t *acc = calloc((size_t)(m * c->ldacc), 4), *cs = calloc((size_t)n, 4);
    int32_t *part = malloc((size_t)(m * c->ldacc) * 4), *pcs = malloc((size_t)n * 4);
    float *naive = calloc((size_t)(m * n), 4);
    ck_assert(acc && cs && part && pcs && naive);
    gbuf out;
    gb_alloc(&out, c_bytes(c), 0);
    for (int s = 0; s < t; s++) {
        const int64_t k0 = cut[s], ks = cut[s + 1] - cut[s];
        const int8_t *as = (const int8_t *)c->a.p + k0, *bs = (const int8_t *)c->b.p + k0;
        /* This rank's int32 partial sums over its K-slice ... */
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, m, n, ks, as, c->lda, bs, c->ldb, part, c->ldacc),
                         SMM_OK);
        colsums(ctx, n, ks, bs, c->ldb, pcs);
        /* ... all-reduced with SUM: wrapping int32 addition. */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                acc[i * c->ldacc + j] += (uint32_t)part[i * c->ldacc + j];
        for (int64_t j = 0; j < n; j++)
            cs[j] += (uint32_t)pcs[j];
        /* What everyone else does: the epilogue on each rank (bias on
         * rank 0 only), the outputs summed in rank order in C's type (an
         * all-reduce of C's type rounds each partial sum to it). */
        smm_scaled_mm_args a = mm_args(c, as, bs, c->sa.p, c->sb.p, c->biasv.p, c->azpv.p, out.p);
        a.k = ks;
        if (s > 0)
            a.bias = NULL;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                naive[i * n + j] = round_to(c->c_dtype, naive[i * n + j] +
                                                            c_value(out.p, c->c_dtype,
                                                                    i * c->ldc + j));
    }
    gb_free(&out);

    gbuf want, got;
    gb_alloc(&want, c_bytes(c), 0xA5);
    gb_alloc(&got, c_bytes(c), 0xA5);
    smm_scaled_mm_args a = mm_args(c, c->a.p, c->b.p, c->sa.p, c->sb.p, c->biasv.p, c->azpv.p,
                                   want.p);
    ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
    smm_epilogue_args e = epi_args(c, acc, c->sa.p, c->sb.p, c->biasv.p, c->azpv.p, cs, got.p);
    ck_assert_int_eq(smm_scaled_epilogue(ctx, &e), SMM_OK);
    if (!gb_equal(&want, &got)) {
        char desc[300];
        describe(c, desc, sizeof desc);
        ck_abort_msg("TP=%d (cuts %lld %lld %lld): the epilogue of the summed accumulators "
                     "differs from TP=1\n    case: %s\n    (replay with SMM_TEST_SEED=0x%016llx)",
                     t, (long long)cut[1], (long long)(t > 2 ? cut[2] : -1),
                     (long long)(t > 3 ? cut[3] : -1), desc, (unsigned long long)tu_seed);
    }
    if (t > 1) {
        const int d = dtype_index(c->c_dtype);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const float w = c_value(want.p, c->c_dtype, i * c->ldc + j);
                naive_total[d]++;
                if (tu_f2u(naive[i * n + j]) != tu_f2u(w))
                    naive_diff[d]++;
            }
    }
    gb_free(&want);
    gb_free(&got);
    free(acc);
    free(cs);
    free(part);
    free(pcs);
    free(naive);
}

START_TEST(test_row_parallel)
{
    cf_rng r = tu_rng("row_parallel");
    static const int ts[3] = {1, 2, 4};
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    memset(naive_diff, 0, sizeof naive_diff);
    memset(naive_total, 0, sizeof naive_total);
    for (int b = 0; b < nb; b++) {
        smm_context *ctx = tu_ctx(bs[b], bs[b] == SMM_BACKEND_CPU ? 2 : 0);
        for (int i = 0; i < 60; i++) {
            ecase c;
            make_case(&r, &c);
            for (int ti = 0; ti < 3; ti++) {
                int64_t cut[5];
                split(&r, c.k, ts[ti], cut);
                tp_case(ctx, &c, ts[ti], cut);
            }
            free_case(&c);
        }
        /* K past 131071 with extreme values: the accumulators wrap, the
         * shards' sums wrap differently, the recipe still gives the bits. */
        ecase c;
        make_case_sized(&r, &c, 2, 3, 140000);
        memset(c.a.p, 0x80, c.a.n);
        memset(c.b.p, 0x80, c.b.n);
        for (int ti = 0; ti < 3; ti++) {
            int64_t cut[5];
            split(&r, c.k, ts[ti], cut);
            tp_case(ctx, &c, ts[ti], cut);
        }
        free_case(&c);
        smm_context_destroy(ctx);
    }
    static const char *names[3] = {"f32", "f16", "bf16"};
    for (int d = 0; d < 3; d++)
        printf("check_epilogue: row parallel, T = 2 and 4: the float sum of the shards' outputs "
               "differs from TP = 1 in %ld of %ld %s outputs; the int32 all-reduce recipe in 0\n",
               naive_diff[d], naive_total[d], names[d]);
    ck_assert_msg(naive_diff[0] > 0, "the float sum never differed: the test shows nothing");
}
END_TEST

/* ---- column parallelism: N split across ranks ---- */

START_TEST(test_column_parallel)
{
    cf_rng r = tu_rng("column_parallel");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int b = 0; b < nb; b++) {
        smm_context *ctx = tu_ctx(bs[b], 0);
        for (int i = 0; i < 60; i++) {
            ecase c;
            make_case(&r, &c);
            const int t = 1 << (cf_rng_next(&r) % 3);
            int64_t cut[5];
            split(&r, c.n, t, cut);
            gbuf acc, cs, want, got, got_e;
            ref_acc(ref, &c, &acc, &cs);
            gb_alloc(&want, c_bytes(&c), 0xA5);
            gb_alloc(&got, c_bytes(&c), 0xA5);
            gb_alloc(&got_e, c_bytes(&c), 0xA5);
            smm_scaled_mm_args a = mm_args(&c, c.a.p, c.b.p, c.sa.p, c.sb.p, c.biasv.p,
                                           c.azpv.p, want.p);
            ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
            const int es = esize(c.c_dtype);
            for (int s = 0; s < t; s++) {
                const int64_t n0 = cut[s], ns = cut[s + 1] - cut[s];
                /* Rank s: its rows of B (columns of C), their scales and
                 * bias, the whole A; its columns of C written in place. */
                smm_scaled_mm_args p = a;
                p.n = ns;
                p.b = (const int8_t *)c.b.p + n0 * c.ldb;
                p.scale_b = (const float *)c.sb.p + (c.sb_len == 1 ? 0 : n0);
                p.scale_b_len = c.sb_len == 1 ? 1 : ns;
                p.bias = a.bias ? a.bias + n0 : NULL;
                p.c = got.p + n0 * es;
                ck_assert_int_eq(smm_scaled_mm(ctx, &p), SMM_OK);
                smm_epilogue_args e = epi_args(&c, acc.p, c.sa.p, c.sb.p, c.biasv.p, c.azpv.p,
                                               cs.p, got_e.p);
                e.n = ns;
                e.acc += n0;
                e.scale_b = p.scale_b;
                e.scale_b_len = p.scale_b_len;
                e.bias = p.bias;
                e.colsum_b = e.colsum_b ? e.colsum_b + n0 : NULL;
                e.c = got_e.p + n0 * es;
                ck_assert_int_eq(smm_scaled_epilogue(ctx, &e), SMM_OK);
            }
            if (!gb_equal(&want, &got) || !gb_equal(&want, &got_e)) {
                char desc[300];
                describe(&c, desc, sizeof desc);
                ck_abort_msg("%s: %d column shards: %s differs from the full call\n    case: %s\n"
                             "    (replay with SMM_TEST_SEED=0x%016llx)",
                             smm_backend_name(bs[b]), t,
                             gb_equal(&want, &got) ? "smm_scaled_epilogue" : "smm_scaled_mm", desc,
                             (unsigned long long)tu_seed);
            }
            gb_free(&acc);
            gb_free(&cs);
            gb_free(&want);
            gb_free(&got);
            gb_free(&got_e);
            free_case(&c);
        }
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

/* ---- errors ---- */

/* The buffers of an error case: everything the call reads or could write. */
typedef struct {
    ecase c;
    gbuf acc, cs, out;
    smm_epilogue_args e;
} errcase;

typedef void (*breaker)(errcase *x);

static void b_neg_m(errcase *x) { x->e.m = -1; }
static void b_neg_n(errcase *x) { x->e.n = -3; }
static void b_dtype_i32(errcase *x) { x->e.c_dtype = SMM_DTYPE_I32; }
static void b_dtype_bad(errcase *x) { x->e.c_dtype = (smm_dtype)42; }
static void b_null_acc(errcase *x) { x->e.acc = NULL; }
static void b_null_c(errcase *x) { x->e.c = NULL; }
static void b_null_sa(errcase *x) { x->e.scale_a = NULL; }
static void b_null_sb(errcase *x) { x->e.scale_b = NULL; }
static void b_null_cs(errcase *x) { x->e.colsum_b = NULL; }
static void b_ldacc(errcase *x) { x->e.ldacc = x->e.n - 1; }
static void b_ldc(errcase *x) { x->e.ldc = x->e.n - 1; }
static void b_sa_len(errcase *x) { x->e.scale_a_len = x->e.m + 1; }
static void b_sb_len(errcase *x) { x->e.scale_b_len = 0; }
static void b_azp_len(errcase *x) { x->e.azp_len = 2 * x->e.m + 1; }
static void b_c_align(errcase *x) { x->e.c = (unsigned char *)x->e.c + 1; }
static void b_acc_align(errcase *x) { x->e.acc = (const int32_t *)((const unsigned char *)x->e.acc + 2); }
static void b_cs_align(errcase *x) { x->e.colsum_b = (const int32_t *)((const unsigned char *)x->e.colsum_b + 1); }
static void b_acc_overflow(errcase *x) { x->e.ldacc = INT64_MAX / 2; }
static void b_c_overflow(errcase *x) { x->e.ldc = INT64_MAX / 3; }
static void b_c_over_acc(errcase *x) { x->e.c = (void *)x->acc.p; x->e.c_dtype = SMM_DTYPE_F32; }
static void b_c_over_sa(errcase *x) { x->e.scale_a = (const float *)x->out.p; }
static void b_c_over_sb(errcase *x) { x->e.scale_b = (const float *)x->out.p + x->e.n - 1; }
static void b_c_over_bias(errcase *x) { x->e.bias = (const float *)x->out.p; }
static void b_c_over_azp(errcase *x) { x->e.azp = (const int32_t *)x->out.p; }
static void b_c_over_cs(errcase *x) { x->e.colsum_b = (const int32_t *)x->out.p; }

START_TEST(test_errors)
{
    static const struct {
        breaker f;
        smm_status st;
        const char *what;
    } cases[] = {
        {b_neg_m, SMM_ERR_INVALID_ARG, "negative size"},
        {b_neg_n, SMM_ERR_INVALID_ARG, "negative size"},
        {b_dtype_i32, SMM_ERR_INVALID_ARG, "c_dtype"},
        {b_dtype_bad, SMM_ERR_INVALID_ARG, "c_dtype"},
        {b_null_acc, SMM_ERR_INVALID_ARG, "acc is NULL"},
        {b_null_c, SMM_ERR_INVALID_ARG, "c is NULL"},
        {b_null_sa, SMM_ERR_INVALID_ARG, "scale_a is NULL"},
        {b_null_sb, SMM_ERR_INVALID_ARG, "scale_b is NULL"},
        {b_null_cs, SMM_ERR_INVALID_ARG, "colsum_b is NULL with azp set"},
        {b_ldacc, SMM_ERR_INVALID_ARG, "ldacc"},
        {b_ldc, SMM_ERR_INVALID_ARG, "ldc"},
        {b_sa_len, SMM_ERR_INVALID_ARG, "scale_a_len"},
        {b_sb_len, SMM_ERR_INVALID_ARG, "scale_b_len"},
        {b_azp_len, SMM_ERR_INVALID_ARG, "azp_len"},
        {b_c_align, SMM_ERR_INVALID_ARG, "not aligned"},
        {b_acc_align, SMM_ERR_INVALID_ARG, "not 4-byte aligned"},
        {b_cs_align, SMM_ERR_INVALID_ARG, "not 4-byte aligned"},
        {b_acc_overflow, SMM_ERR_INVALID_ARG, "byte size of acc overflows"},
        {b_c_overflow, SMM_ERR_INVALID_ARG, "byte size of c overflows"},
        {b_c_over_acc, SMM_ERR_OVERLAP, "c overlaps acc"},
        {b_c_over_sa, SMM_ERR_OVERLAP, "c overlaps scale_a"},
        {b_c_over_sb, SMM_ERR_OVERLAP, "c overlaps scale_b"},
        {b_c_over_bias, SMM_ERR_OVERLAP, "c overlaps bias"},
        {b_c_over_azp, SMM_ERR_OVERLAP, "c overlaps azp"},
        {b_c_over_cs, SMM_ERR_OVERLAP, "c overlaps colsum_b"},
    };
    cf_rng r = tu_rng("errors");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    smm_context *ctxs[5];
    const char *names[5];
    for (int b = 0; b < nb; b++) {
        ctxs[b] = tu_ctx(bs[b], 0);
        names[b] = smm_backend_name(bs[b]);
    }
    ck_assert_int_eq(smm_context_create(&ctxs[nb], SMM_BACKEND_AUTO), SMM_OK);
    names[nb] = "auto";
    for (int b = 0; b <= nb; b++) {
        smm_context *ctx = ctxs[b];
        ck_assert_int_eq(smm_scaled_epilogue(NULL, NULL), SMM_ERR_INVALID_ARG);
        ck_assert_int_eq(smm_scaled_epilogue(ctx, NULL), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx),
                                     "smm_scaled_epilogue: args is NULL"));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            errcase x;
            make_case_sized(&r, &x.c, 3, 4, 5);
            x.c.azp = 2;
            x.c.bias = 1;
            x.c.sa_len = 3;
            x.c.sb_len = 4;
            ref_acc(ref, &x.c, &x.acc, &x.cs);
            gb_alloc(&x.out, c_bytes(&x.c), 0xA5);
            x.e = epi_args(&x.c, x.acc.p, x.c.sa.p, x.c.sb.p, x.c.biasv.p, x.c.azpv.p, x.cs.p,
                           x.out.p);
            cases[i].f(&x);
            /* Snapshots of everything the call could write. */
            gbuf *snap[7] = {&x.out, &x.acc, &x.cs, &x.c.sa, &x.c.sb, &x.c.biasv, &x.c.azpv};
            unsigned char *copy[7];
            for (int s = 0; s < 7; s++) {
                copy[s] = malloc(snap[s]->n + 2 * GUARD);
                memcpy(copy[s], snap[s]->mem, snap[s]->n + 2 * GUARD);
            }
            smm_status st = smm_scaled_epilogue(ctx, &x.e);
            const char *m = smm_context_last_error(ctx);
            int untouched = 1;
            for (int s = 0; s < 7; s++) {
                untouched &= memcmp(copy[s], snap[s]->mem, snap[s]->n + 2 * GUARD) == 0;
                free(copy[s]);
            }
            ck_assert_msg(st == cases[i].st && strstr(m, "smm_scaled_epilogue") &&
                              strstr(m, cases[i].what),
                          "%s, case %zu: got %s \"%s\", want %s with \"%s\"", names[b], i,
                          smm_strerror(st), m, smm_strerror(cases[i].st), cases[i].what);
            ck_assert_msg(untouched, "%s, case %zu (%s): a buffer was written", names[b], i,
                          cases[i].what);
            gb_free(&x.acc);
            gb_free(&x.cs);
            gb_free(&x.out);
            free_case(&x.c);
        }
        /* M == 0 or N == 0: success, nothing written, nothing else read
         * (NULL pointers are fine). Without azp, colsum_b is ignored. */
        ecase c;
        make_case_sized(&r, &c, 2, 3, 4);
        c.azp = 0;
        gbuf acc, cs, out;
        ref_acc(ref, &c, &acc, &cs);
        gb_alloc(&out, c_bytes(&c), 0xA5);
        smm_epilogue_args e = epi_args(&c, NULL, NULL, NULL, NULL, NULL, NULL, out.p);
        e.m = 0;
        ck_assert_int_eq(smm_scaled_epilogue(ctx, &e), SMM_OK);
        e.m = 2;
        e.n = 0;
        ck_assert_int_eq(smm_scaled_epilogue(ctx, &e), SMM_OK);
        ck_assert(gb_untouched(&out, 0xA5));
        e = epi_args(&c, acc.p, c.sa.p, c.sb.p, c.biasv.p, NULL, NULL, out.p);
        e.colsum_b = (const int32_t *)out.p;   /* ignored: no azp */
        e.azp_len = -7;                         /* ignored too */
        ck_assert_msg(smm_scaled_epilogue(ctx, &e) == SMM_OK, "%s: %s", names[b],
                      smm_context_last_error(ctx));
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        gb_free(&acc);
        gb_free(&cs);
        gb_free(&out);
        free_case(&c);
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("epilogue");
    TCase *tc = tu_tcase(s, "epilogue", 600);
    tcase_add_test(tc, test_matches_scaled_mm);
    tcase_add_test(tc, test_row_parallel);
    tcase_add_test(tc, test_column_parallel);
    tcase_add_test(tc, test_errors);
    return tu_main_gpu(s, "check_epilogue");
}
