/*
 * check_linear.c - smm_linear, the whole w8a8 linear layer in one call, on
 * every backend (GPU ones with device memory; an AUTO context given host
 * memory too): its C and
 * every returned q, x_scale and x_azp equal bit for bit those of the
 * reference backend's smm_quantize_i8 followed by smm_scaled_mm, over
 * random shapes, strides, modes, input and output types, bias, packed and
 * plain weights, thread counts; every error writes nothing.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define POISON 0xA5

/* A host buffer of n bytes with GUARD poisoned bytes either side. */
typedef struct {
    unsigned char *mem, *p;
    size_t n;
} gbuf;

static void gb_alloc(gbuf *b, size_t n)
{
    b->n = n;
    b->mem = malloc(n + 2 * GUARD);
    ck_assert_ptr_nonnull(b->mem);
    memset(b->mem, POISON, n + 2 * GUARD);
    b->p = b->mem + GUARD;
}

static int gb_equal(const gbuf *x, const gbuf *y)
{
    return x->n == y->n && memcmp(x->mem, y->mem, x->n + 2 * GUARD) == 0;
}

static int gb_untouched(const gbuf *b)
{
    for (size_t i = 0; i < b->n + 2 * GUARD; i++)
        if (b->mem[i] != POISON)
            return 0;
    return 1;
}

static void gb_free(gbuf *b)
{
    free(b->mem);
    b->mem = b->p = NULL;
}

static int64_t pick(cf_rng *r, const int64_t *v, size_t n)
{
    return v[cf_rng_next(r) % n];
}

static int esize(smm_dtype t)
{
    return t == SMM_DTYPE_F32 ? 4 : 2;
}

/* One random problem: its description, and the caller's buffers. */
typedef struct {
    int64_t m, n, k, ldx, ldq, ldc;
    smm_dtype x_dtype, c_dtype;
    smm_quant_mode mode;
    int asym, bias, packed, want_q, want_scale, want_azp;
    float static_scale;
    int32_t static_azp;
    gbuf x, b, scale_b, biasv;
} lcase;

static void describe(const lcase *c, char *buf, size_t size)
{
    snprintf(buf, size,
             "m %lld n %lld k %lld ldx %lld ldq %lld ldc %lld x %s c %s %s %s bias %d packed %d "
             "returns q %d scale %d azp %d",
             (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->ldx,
             (long long)c->ldq, (long long)c->ldc, smm_dtype_name(c->x_dtype),
             smm_dtype_name(c->c_dtype),
             c->mode == SMM_QUANT_DYNAMIC_PER_TOKEN ? "dynamic" : "static",
             c->asym ? "asymmetric" : "symmetric", c->bias, c->packed, c->want_q, c->want_scale,
             c->want_azp);
}

static void make_case(cf_rng *r, lcase *c)
{
    static const int64_t ms[] = {1, 2, 3, 5, 8, 16, 17, 33, 64};
    static const int64_t ns[] = {1, 2, 7, 16, 31, 48, 65};
    static const int64_t ks[] = {0, 1, 3, 4, 15, 64, 67, 130, 300};
    static const smm_dtype ts[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    memset(c, 0, sizeof *c);
    c->m = pick(r, ms, sizeof ms / sizeof ms[0]);
    c->n = pick(r, ns, sizeof ns / sizeof ns[0]);
    c->k = pick(r, ks, sizeof ks / sizeof ks[0]);
    c->ldx = c->k + (int64_t)(cf_rng_next(r) % 3);
    c->ldq = c->k + (int64_t)(cf_rng_next(r) % 3);
    c->ldc = c->n + (int64_t)(cf_rng_next(r) % 3);
    c->x_dtype = ts[cf_rng_next(r) % 3];
    c->c_dtype = ts[cf_rng_next(r) % 3];
    c->mode = cf_rng_next(r) % 2 ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
    c->asym = (int)(cf_rng_next(r) % 2);
    c->bias = (int)(cf_rng_next(r) % 2);
    c->packed = (int)(cf_rng_next(r) % 2);
    c->want_q = (int)(cf_rng_next(r) % 2);
    c->want_scale = (int)(cf_rng_next(r) % 2);
    c->want_azp = c->asym && (int)(cf_rng_next(r) % 2);
    c->static_scale = 0.01f + (float)(cf_rng_next(r) % 1000) / 4096.0f;
    c->static_azp = (int32_t)(cf_rng_next(r) % 41) - 20;

    /* x: random values of several magnitudes, some rows constant (the
     * quantizer's degenerate rows), written in x_dtype. */
    gb_alloc(&c->x, (size_t)((c->m - 1) * c->ldx + c->k) * (size_t)esize(c->x_dtype));
    for (int64_t i = 0; i < c->m; i++) {
        float mag = (float)(1u << (cf_rng_next(r) % 8)) / 16.0f;
        int constant = cf_rng_next(r) % 8 == 0;
        for (int64_t j = 0; j < c->k; j++) {
            float v = constant ? mag : mag * ((float)(cf_rng_next(r) % 2001) / 1000.0f - 1.0f);
            size_t off = (size_t)(i * c->ldx + j);
            if (c->x_dtype == SMM_DTYPE_F32) {
                memcpy(c->x.p + 4 * off, &v, 4);
            } else {
                uint16_t h = c->x_dtype == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
                memcpy(c->x.p + 2 * off, &h, 2);
            }
        }
    }
    gb_alloc(&c->b, (size_t)(c->n * c->k));
    for (size_t i = 0; i < c->b.n; i++)
        c->b.p[i] = (unsigned char)cf_rng_next(r);
    gb_alloc(&c->scale_b, (size_t)c->n * 4);
    gb_alloc(&c->biasv, (size_t)c->n * 4);
    for (int64_t j = 0; j < c->n; j++) {
        float s = (float)(1 + cf_rng_next(r) % 1000) / 65536.0f;
        float bv = (float)((int)(cf_rng_next(r) % 2001) - 1000) / 64.0f;
        memcpy(c->scale_b.p + 4 * j, &s, 4);
        memcpy(c->biasv.p + 4 * j, &bv, 4);
    }
}

static void free_case(lcase *c)
{
    gb_free(&c->x);
    gb_free(&c->b);
    gb_free(&c->scale_b);
    gb_free(&c->biasv);
}

/* A random case with M >= min_m, N >= min_n and K >= min_k. */
static void make_case_min(cf_rng *r, lcase *c, int64_t min_m, int64_t min_n, int64_t min_k)
{
    for (;;) {
        make_case(r, c);
        if (c->m >= min_m && c->n >= min_n && c->k >= min_k)
            return;
        free_case(c);
    }
}

/* Outputs of one run: C and the activations' q, scale, azp. */
typedef struct {
    gbuf c, q, scale, azp;
} outs;

static void outs_alloc(outs *o, const lcase *c)
{
    gb_alloc(&o->c, (size_t)((c->m - 1) * c->ldc + c->n) * (size_t)esize(c->c_dtype));
    gb_alloc(&o->q, (size_t)((c->m - 1) * c->ldq + c->k));
    gb_alloc(&o->scale, (size_t)c->m * 4);
    gb_alloc(&o->azp, (size_t)c->m * 4);
    if (c->mode == SMM_QUANT_STATIC_PER_TENSOR) {   /* inputs */
        memcpy(o->scale.p, &c->static_scale, 4);
        memcpy(o->azp.p, &c->static_azp, 4);
    }
}

static void outs_free(outs *o)
{
    gb_free(&o->c);
    gb_free(&o->q);
    gb_free(&o->scale);
    gb_free(&o->azp);
}

/* The reference: smm_quantize_i8, then smm_scaled_mm, into o. */
static void expected(smm_context *ref, const lcase *c, outs *o)
{
    const int dyn = c->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    smm_quantize_args qa = {
        .m = c->m, .k = c->k, .x = c->x.p, .x_dtype = c->x_dtype, .ldx = c->ldx,
        .q = (int8_t *)o->q.p, .ldq = c->ldq, .scale = (float *)o->scale.p,
        .azp = c->asym ? (int32_t *)o->azp.p : NULL, .mode = c->mode,
    };
    ck_assert_int_eq(smm_quantize_i8(ref, &qa), SMM_OK);
    smm_scaled_mm_args a = {
        .m = c->m, .n = c->n, .k = c->k, .a = (const int8_t *)o->q.p, .lda = c->ldq,
        .b = (const int8_t *)c->b.p, .ldb = c->k,
        .scale_a = (const float *)o->scale.p, .scale_a_len = dyn ? c->m : 1,
        .scale_b = (const float *)c->scale_b.p, .scale_b_len = c->n,
        .bias = c->bias ? (const float *)c->biasv.p : NULL,
        .azp = c->asym ? (const int32_t *)o->azp.p : NULL, .azp_len = dyn ? c->m : 1,
        .c = o->c.p, .ldc = c->ldc, .c_dtype = c->c_dtype,
    };
    ck_assert_int_eq(smm_scaled_mm(ref, &a), SMM_OK);
}

static smm_linear_args linear_args(const lcase *c, outs *o, const smm_packed_b *pb)
{
    const int dyn = c->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    smm_linear_args l = {
        .m = c->m, .n = c->n, .k = c->k,
        .x = c->x.p, .x_dtype = c->x_dtype, .ldx = c->ldx,
        .mode = c->mode, .asymmetric = c->asym,
        .x_scale = !dyn || c->want_scale ? (float *)o->scale.p : NULL,
        .x_azp = c->asym && (!dyn || c->want_azp) ? (int32_t *)o->azp.p : NULL,
        .q = c->want_q ? (int8_t *)o->q.p : NULL, .ldq = c->ldq,
        .b = pb ? NULL : (const int8_t *)c->b.p, .ldb = c->k,
        .scale_b = (const float *)c->scale_b.p, .scale_b_len = c->n,
        .bias = c->bias ? (const float *)c->biasv.p : NULL,
        .c = o->c.p, .ldc = c->ldc, .c_dtype = c->c_dtype,
        .b_packed = pb,
    };
    return l;
}

/* Runs case c on ctx and compares with the reference's outputs. */
static void check_case(smm_context *ctx, smm_context *ref, const lcase *c, const char *who,
                       int threads)
{
    const int dyn = c->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    outs want, got;
    outs_alloc(&want, c);
    outs_alloc(&got, c);
    expected(ref, c, &want);
    smm_packed_b *pb = NULL;
    if (c->packed)
        ck_assert_int_eq(smm_pack_b(ctx, c->n, c->k, (const int8_t *)c->b.p, c->k, &pb), SMM_OK);
    smm_linear_args l = linear_args(c, &got, pb);
    smm_status st = smm_linear(ctx, &l);
    smm_packed_b_destroy(pb);
    char desc[400], msg[400], where[500];
    describe(c, desc, sizeof desc);
    const char *bad = NULL;
    if (st != SMM_OK) {
        snprintf(msg, sizeof msg, "smm_linear returned %s: %s", smm_strerror(st),
                 smm_context_last_error(ctx));
        bad = msg;
    } else if (!gb_equal(&got.c, &want.c)) {
        bad = "C differs from quantize + scaled_mm";
    } else if (c->want_q ? !gb_equal(&got.q, &want.q) : !gb_untouched(&got.q)) {
        bad = c->want_q ? "q differs" : "q was written though not asked for";
    } else if (dyn && (c->want_scale ? !gb_equal(&got.scale, &want.scale)
                                     : !gb_untouched(&got.scale))) {
        bad = c->want_scale ? "x_scale differs" : "x_scale was written though not asked for";
    } else if (dyn && (c->want_azp ? !gb_equal(&got.azp, &want.azp) : !gb_untouched(&got.azp))) {
        bad = c->want_azp ? "x_azp differs" : "x_azp was written though not asked for";
    } else if (!dyn && (!gb_equal(&got.scale, &want.scale) || !gb_equal(&got.azp, &want.azp))) {
        bad = "a static x_scale or x_azp (inputs) was written";
    }
    outs_free(&want);
    outs_free(&got);
    if (bad) {
        snprintf(where, sizeof where, "%s (on %s)", bad, who);
        ck_abort_msg("%d threads: %s\n    case: %s\n    (replay with SMM_TEST_SEED=0x%016llx)",
                     threads, where, desc, (unsigned long long)tu_seed);
    }
}

static int gpu_backend(smm_backend b)
{
    return b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA;
}

/* A device copy of a guarded host buffer, guards included; returns the
 * device address of its usable bytes. */
static unsigned char *to_device(smm_context *ctx, const gbuf *h)
{
    void *d = NULL;
    ck_assert_int_eq(smm_malloc(ctx, h->n + 2 * GUARD, &d), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, d, h->mem, h->n + 2 * GUARD, SMM_MEMCPY_HOST_TO_DEVICE),
                     SMM_OK);
    return (unsigned char *)d + GUARD;
}

/* Copies the device buffer back over h (guards included) and frees it. */
static void from_device(smm_context *ctx, gbuf *h, unsigned char *d)
{
    ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, h->mem, d - GUARD, h->n + 2 * GUARD,
                                SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
    ck_assert_int_eq(smm_free(ctx, d - GUARD), SMM_OK);
}

/* check_case on a GPU context: every buffer staged in device memory; the
 * caller gives q, and when dynamic x_scale (and x_azp when asymmetric),
 * as a GPU requires. A NULL q is refused with nothing written. */
static void check_case_gpu(smm_context *ctx, smm_context *ref, lcase *c, int threads)
{
    const int dyn = c->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    c->want_q = c->want_scale = 1;
    c->want_azp = c->asym;
    outs want, got;
    outs_alloc(&want, c);
    outs_alloc(&got, c);
    expected(ref, c, &want);
    unsigned char *dx = to_device(ctx, &c->x), *db = to_device(ctx, &c->b),
                  *dsb = to_device(ctx, &c->scale_b), *dbias = to_device(ctx, &c->biasv),
                  *dc = to_device(ctx, &got.c), *dq = to_device(ctx, &got.q),
                  *ds = to_device(ctx, &got.scale), *dz = to_device(ctx, &got.azp);
    smm_packed_b *pb = NULL;
    if (c->packed)
        ck_assert_int_eq(smm_pack_b(ctx, c->n, c->k, (const int8_t *)db, c->k, &pb), SMM_OK);
    smm_linear_args l = linear_args(c, &got, pb);
    l.x = dx;
    l.b = pb ? NULL : (const int8_t *)db;
    l.scale_b = (const float *)dsb;
    l.bias = c->bias ? (const float *)dbias : NULL;
    l.c = dc;
    l.q = (int8_t *)dq;
    l.x_scale = (float *)ds;
    l.x_azp = c->asym ? (int32_t *)dz : NULL;
    smm_linear_args noq = l;
    noq.q = NULL;
    smm_status st0 = c->k > 0 ? smm_linear(ctx, &noq) : SMM_ERR_INVALID_ARG;
    char refused[200];
    snprintf(refused, sizeof refused, "%s", smm_context_last_error(ctx));
    smm_status st = smm_linear(ctx, &l);
    char err[300];
    snprintf(err, sizeof err, "%s", smm_context_last_error(ctx));
    smm_packed_b_destroy(pb);
    from_device(ctx, &got.c, dc);
    from_device(ctx, &got.q, dq);
    from_device(ctx, &got.scale, ds);
    from_device(ctx, &got.azp, dz);
    const gbuf *ins[4] = {&c->x, &c->b, &c->scale_b, &c->biasv};
    unsigned char *dins[4] = {dx, db, dsb, dbias};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(smm_free(ctx, dins[i] - GUARD), SMM_OK);
    (void)ins;
    char desc[400];
    describe(c, desc, sizeof desc);
    const char *bad = NULL;
    if (c->k > 0 && (st0 != SMM_ERR_INVALID_ARG || !strstr(refused, "q is NULL")))
        bad = "a NULL q was not refused on a GPU context";
    else if (st != SMM_OK)
        bad = err;
    else if (!gb_equal(&got.c, &want.c))
        bad = "C differs from quantize + scaled_mm";
    else if (!gb_equal(&got.q, &want.q))
        bad = "q differs";
    else if (!gb_equal(&got.scale, &want.scale) || (c->asym && !gb_equal(&got.azp, &want.azp)))
        bad = dyn ? "x_scale or x_azp differs" : "a static x_scale or x_azp was written";
    outs_free(&want);
    outs_free(&got);
    if (bad)
        ck_abort_msg("%s, %d threads: %s\n    case: %s\n    (replay with SMM_TEST_SEED=0x%016llx)",
                     smm_backend_name(smm_context_backend(ctx)), threads, bad, desc,
                     (unsigned long long)tu_seed);
}

START_TEST(test_matches_two_calls)
{
    cf_rng r = tu_rng("matches_two_calls");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *autoc = NULL;
    ck_assert_int_eq(smm_context_create(&autoc, SMM_BACKEND_AUTO), SMM_OK);
    for (int i = 0; i < 150; i++) {
        lcase c;
        make_case(&r, &c);
        for (int b = 0; b < nb; b++) {
            int th[3], nt = tu_thread_counts(bs[b], th);
            for (int t = 0; t < nt; t++) {
                smm_context *ctx = tu_ctx(bs[b], th[t]);
                if (gpu_backend(bs[b])) {
                    lcase g = c;
                    check_case_gpu(ctx, ref, &g, th[t]);
                } else {
                    check_case(ctx, ref, &c, smm_backend_name(bs[b]), th[t]);
                }
                smm_context_destroy(ctx);
            }
        }
        check_case(autoc, ref, &c, "auto (host memory)", 0);
        free_case(&c);
    }
    smm_context_destroy(autoc);
    smm_context_destroy(ref);
}
END_TEST

/* A' above 16 MiB: the cpu backend packs (and, fused, quantizes) A in
 * bands of rows, each band's tiles reading its rows' scales. */
START_TEST(test_bands)
{
    cf_rng r = tu_rng("bands");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *ctx = tu_ctx(SMM_BACKEND_CPU, 2);
    for (int asym = 0; asym < 2; asym++) {
        lcase c;
        make_case(&r, &c);
        free_case(&c);
        c.m = 2100;
        c.n = 5;
        c.k = 8200;
        c.ldx = c.ldq = c.k;
        c.ldc = c.n;
        c.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        c.asym = asym;
        c.want_q = c.want_scale = 1;
        c.want_azp = asym;
        gb_alloc(&c.x, (size_t)(c.m * c.k) * (size_t)esize(c.x_dtype));
        for (int64_t e = 0; e < c.m * c.k; e++) {
            float v = (float)((int)(cf_rng_next(&r) % 2001) - 1000) / 256.0f;
            if (c.x_dtype == SMM_DTYPE_F32) {
                memcpy(c.x.p + 4 * e, &v, 4);
            } else {
                uint16_t h = c.x_dtype == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
                memcpy(c.x.p + 2 * e, &h, 2);
            }
        }
        gb_alloc(&c.b, (size_t)(c.n * c.k));
        for (size_t i = 0; i < c.b.n; i++)
            c.b.p[i] = (unsigned char)cf_rng_next(&r);
        gb_alloc(&c.scale_b, (size_t)c.n * 4);
        gb_alloc(&c.biasv, (size_t)c.n * 4);
        for (int64_t j = 0; j < c.n; j++) {
            float sb = 1.0f / 4096.0f, bv = (float)j;
            memcpy(c.scale_b.p + 4 * j, &sb, 4);
            memcpy(c.biasv.p + 4 * j, &bv, 4);
        }
        check_case(ctx, ref, &c, "cpu", 2);
        free_case(&c);
    }
    smm_context_destroy(ctx);
    smm_context_destroy(ref);
}
END_TEST

/* M == 0 writes nothing; N == 0 writes only the activations' outputs. */
START_TEST(test_empty)
{
    cf_rng r = tu_rng("empty");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int b = 0; b < nb; b++) {
        smm_context *ctx = tu_ctx(bs[b], 0);
        lcase c;
        make_case(&r, &c);
        c.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        c.want_q = c.want_scale = 1;
        c.packed = 0;
        outs got;
        outs_alloc(&got, &c);
        smm_linear_args l = linear_args(&c, &got, NULL);
        l.m = 0;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_OK);
        ck_assert(gb_untouched(&got.c) && gb_untouched(&got.q) && gb_untouched(&got.scale));
        /* N == 0: q and the scales as smm_quantize_i8 writes them, C untouched. */
        l = linear_args(&c, &got, NULL);
        l.n = 0;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_OK);
        ck_assert(gb_untouched(&got.c));
        outs want;
        outs_alloc(&want, &c);
        smm_quantize_args qa = {
            .m = c.m, .k = c.k, .x = c.x.p, .x_dtype = c.x_dtype, .ldx = c.ldx,
            .q = (int8_t *)want.q.p, .ldq = c.ldq, .scale = (float *)want.scale.p,
            .azp = c.asym ? (int32_t *)want.azp.p : NULL, .mode = c.mode,
        };
        ck_assert_int_eq(smm_quantize_i8(ref, &qa), SMM_OK);
        ck_assert(gb_equal(&got.q, &want.q) && gb_equal(&got.scale, &want.scale));
        outs_free(&want);
        outs_free(&got);
        free_case(&c);
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

/* One bad argument: the status, a message naming smm_linear and `what`,
 * and every output untouched. */
typedef void (*breaker)(smm_linear_args *l, outs *o, lcase *c);

static void b_null_x(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->x = NULL; }
static void b_null_c(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->c = NULL; }
static void b_asym2(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->asymmetric = 2; }
static void b_dyn_azp(smm_linear_args *l, outs *o, lcase *c)
{
    (void)c;
    l->mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    l->asymmetric = 0;
    l->x_azp = (int32_t *)o->azp.p;
}
static void b_static_asym(smm_linear_args *l, outs *o, lcase *c)
{
    (void)o; (void)c;
    l->mode = SMM_QUANT_STATIC_PER_TENSOR;
    l->asymmetric = 1;
    l->x_azp = NULL;
}
static void b_static_scale(smm_linear_args *l, outs *o, lcase *c)
{
    (void)o; (void)c;
    l->mode = SMM_QUANT_STATIC_PER_TENSOR;
    l->asymmetric = 0;
    l->x_azp = NULL;
    l->x_scale = NULL;
}
static void b_neg_m(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->m = -1; }
static void b_neg_n(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->n = -1; }
static void b_mode(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->mode = (smm_quant_mode)7; }
static void b_x_dtype(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->x_dtype = SMM_DTYPE_I8; }
static void b_c_dtype(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->c_dtype = SMM_DTYPE_I32; }
static void b_ldx(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->ldx = l->k - 1; }
static void b_ldq(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->ldq = l->k - 1; }
static void b_ldc(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->ldc = l->n - 1; }
static void b_scale_b_len(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->scale_b_len = l->n + 1; }
static void b_null_b(smm_linear_args *l, outs *o, lcase *c) { (void)o; (void)c; l->b = NULL; }
static void b_c_over_x(smm_linear_args *l, outs *o, lcase *c) { (void)o; l->c = (void *)c->x.p; }
static void b_c_over_q(smm_linear_args *l, outs *o, lcase *c) { (void)c; l->q = (int8_t *)o->c.p; }
static void b_q_over_b(smm_linear_args *l, outs *o, lcase *c) { (void)c; l->b = (const int8_t *)o->q.p; }
static void b_q_over_x(smm_linear_args *l, outs *o, lcase *c) { (void)o; l->q = (int8_t *)c->x.p; }
static void b_scale_over_bias(smm_linear_args *l, outs *o, lcase *c)
{
    (void)c;
    l->mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    l->q = NULL;
    l->x_scale = (float *)o->scale.p;
    l->bias = (const float *)o->scale.p;
}
static void b_azp_over_scale_b(smm_linear_args *l, outs *o, lcase *c)
{
    (void)c;
    l->mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    l->asymmetric = 1;
    l->q = NULL;
    l->x_scale = NULL;
    l->x_azp = (int32_t *)o->azp.p;
    l->scale_b = (const float *)o->azp.p;
}

START_TEST(test_errors)
{
    static const struct {
        breaker f;
        smm_status st;
        const char *what;
    } cases[] = {
        {b_null_x, SMM_ERR_INVALID_ARG, "x is NULL"},
        {b_null_c, SMM_ERR_INVALID_ARG, "c is NULL"},
        {b_asym2, SMM_ERR_INVALID_ARG, "asymmetric (2)"},
        {b_dyn_azp, SMM_ERR_INVALID_ARG, "x_azp is set but asymmetric is 0"},
        {b_static_asym, SMM_ERR_INVALID_ARG, "x_azp, the static zero point, is NULL"},
        {b_static_scale, SMM_ERR_INVALID_ARG, "x_scale is NULL"},
        {b_neg_m, SMM_ERR_INVALID_ARG, "negative size"},
        {b_neg_n, SMM_ERR_INVALID_ARG, "negative size"},
        {b_mode, SMM_ERR_INVALID_ARG, "unknown mode"},
        {b_x_dtype, SMM_ERR_INVALID_ARG, "x_dtype"},
        {b_c_dtype, SMM_ERR_INVALID_ARG, "c_dtype"},
        {b_ldx, SMM_ERR_INVALID_ARG, "ldx"},
        {b_ldq, SMM_ERR_INVALID_ARG, "ldq"},
        {b_ldc, SMM_ERR_INVALID_ARG, "ldc"},
        {b_scale_b_len, SMM_ERR_INVALID_ARG, "scale_b_len"},
        {b_null_b, SMM_ERR_INVALID_ARG, "b is NULL"},
        {b_c_over_x, SMM_ERR_OVERLAP, "c overlaps x"},
        {b_c_over_q, SMM_ERR_OVERLAP, "c overlaps q"},
        {b_q_over_b, SMM_ERR_OVERLAP, "q overlaps b"},
        {b_q_over_x, SMM_ERR_OVERLAP, "q overlaps x"},
        {b_scale_over_bias, SMM_ERR_OVERLAP, "x_scale overlaps bias"},
        {b_azp_over_scale_b, SMM_ERR_OVERLAP, "x_azp overlaps scale_b"},
    };
    cf_rng r = tu_rng("errors");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int b = 0; b < nb; b++) {
        smm_context *ctx = tu_ctx(bs[b], 0);
        ck_assert_int_eq(smm_linear(ctx, NULL), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "smm_linear: args is NULL"));
        ck_assert_int_eq(smm_linear(NULL, NULL), SMM_ERR_INVALID_ARG);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            lcase c;
            make_case_min(&r, &c, 2, 2, 4);   /* what every breaker needs */
            c.want_q = 1;
            c.packed = 0;
            outs o;
            outs_alloc(&o, &c);
            smm_linear_args l = linear_args(&c, &o, NULL);
            cases[i].f(&l, &o, &c);
            /* Snapshots of everything the call could write. */
            gbuf snap[7] = {o.c, o.q, o.scale, o.azp, c.x, c.b, c.biasv};
            unsigned char *copy[7];
            for (int s = 0; s < 7; s++) {
                copy[s] = malloc(snap[s].n + 2 * GUARD);
                memcpy(copy[s], snap[s].mem, snap[s].n + 2 * GUARD);
            }
            smm_status st = smm_linear(ctx, &l);
            const char *m = smm_context_last_error(ctx);
            int untouched = 1;
            for (int s = 0; s < 7; s++) {
                untouched &= memcmp(copy[s], snap[s].mem, snap[s].n + 2 * GUARD) == 0;
                free(copy[s]);
            }
            ck_assert_msg(st == cases[i].st && strstr(m, "smm_linear") && strstr(m, cases[i].what),
                          "%s, case %zu: got %s \"%s\", want %s with \"%s\"",
                          smm_backend_name(bs[b]), i, smm_strerror(st), m,
                          smm_strerror(cases[i].st), cases[i].what);
            ck_assert_msg(untouched, "%s, case %zu (%s): a buffer was written",
                          smm_backend_name(bs[b]), i, cases[i].what);
            outs_free(&o);
            free_case(&c);
        }
        /* A packed B is checked even when M == 0: one of N + 1 rows. */
        lcase c;
        make_case(&r, &c);
        outs o;
        outs_alloc(&o, &c);
        int8_t *rows = calloc((size_t)((c.n + 1) * c.k) + 1, 1);
        ck_assert_ptr_nonnull(rows);
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(ctx, c.n + 1, c.k, rows, c.k, &pb), SMM_OK);
        smm_linear_args l = linear_args(&c, &o, pb);
        l.m = 0;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "b_packed holds"));
        ck_assert(gb_untouched(&o.c));
        smm_packed_b_destroy(pb);
        free(rows);
        outs_free(&o);
        free_case(&c);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* A context on backend whose allocations cnt counts. */
static smm_context *counting_ctx(smm_backend backend, tu_counting *cnt)
{
    tu_counting_init(cnt);
    smm_allocator al = tu_counting_allocator(cnt);
    smm_context *ctx = NULL;
    ck_assert_int_eq(smm_context_create_with_allocator(&ctx, backend, &al), SMM_OK);
    return ctx;
}

/* A case with K > 0 whose q (and dynamic scales) the call keeps in its
 * working memory, raw B, and its outputs. */
static void make_working_memory_case(cf_rng *r, lcase *c, outs *o)
{
    make_case_min(r, c, 0, 0, 1);
    c->want_q = 0;
    c->packed = 0;
    outs_alloc(o, c);
}

/* The working memory for what the caller does not take: a failed
 * allocation is SMM_ERR_NO_MEMORY with nothing written, and nothing leaks. */
START_TEST(test_no_memory)
{
    cf_rng r = tu_rng("no_memory");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int b = 0; b < nb; b++) {
        tu_counting cnt;
        smm_context *ctx = counting_ctx(bs[b], &cnt);
        lcase c;
        outs o;
        make_working_memory_case(&r, &c, &o);
        smm_linear_args l = linear_args(&c, &o, NULL);
        tu_counting_fail_in(&cnt, 0);
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_ERR_NO_MEMORY);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "smm_linear: out of memory"));
        ck_assert(gb_untouched(&o.c) && gb_untouched(&o.q));
        tu_counting_fail_in(&cnt, -1);
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_OK);
        smm_context_destroy(ctx);
        ck_assert_int_eq(cnt.live, 0);
        outs_free(&o);
        free_case(&c);
    }
}
END_TEST

/* The checks come before the working memory: an invalid call makes no
 * allocation, and reports its error, not an out-of-memory one, even when
 * the working memory it would have needed could never be allocated. */
START_TEST(test_checks_before_memory)
{
    cf_rng r = tu_rng("checks_before_memory");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int b = 0; b < nb; b++) {
        tu_counting cnt;
        smm_context *ctx = counting_ctx(bs[b], &cnt);
        lcase c;
        outs o;
        make_working_memory_case(&r, &c, &o);
        smm_linear_args l = linear_args(&c, &o, NULL);
        l.c_dtype = SMM_DTYPE_I32;
        const int64_t before = cnt.calls;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "c_dtype"));
        ck_assert_int_eq(cnt.calls, before);
        /* 2^22 x 2^22 activations (16 TiB of working memory for q), x
         * NULL; N = 0, so that no huge C overlaps the other buffers */
        l = linear_args(&c, &o, NULL);
        l.m = l.k = (int64_t)1 << 22;
        l.n = 0;
        l.ldx = l.k;
        l.x = NULL;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_ERR_INVALID_ARG);
        ck_assert_msg(strstr(smm_context_last_error(ctx), "smm_linear: x is NULL"), "%s",
                      smm_context_last_error(ctx));
        ck_assert_int_eq(cnt.calls, before);
        /* Working memory whose size wraps around: q of M bytes fits, the
         * dynamic scales and zero points of M rows (8 M bytes) do not. */
        l = linear_args(&c, &o, NULL);
        l.m = (int64_t)(UINT64_MAX / 9 + 1);
        l.k = 1;
        l.n = 0;
        l.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        l.asymmetric = 1;
        l.q = NULL;
        l.x_scale = NULL;
        l.x_azp = NULL;
        ck_assert_int_eq(smm_linear(ctx, &l), SMM_ERR_INVALID_ARG);
        ck_assert_msg(strstr(smm_context_last_error(ctx), "working memory"), "%s",
                      smm_context_last_error(ctx));
        ck_assert_int_eq(cnt.calls, before);
        ck_assert(gb_untouched(&o.c));
        smm_context_destroy(ctx);
        outs_free(&o);
        free_case(&c);
    }
}
END_TEST

/* The packed B's handle is an input too: an output placed on it is an
 * overlap, refused with nothing written (smm_linear and smm_scaled_mm). */
START_TEST(test_output_on_packed_handle)
{
    cf_rng r = tu_rng("output_on_packed_handle");
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int b = 0; b < nb; b++) {
        smm_context *ctx = tu_ctx(bs[b], 0);
        lcase c;
        make_case_min(&r, &c, 1, 4, 4);
        c.want_q = 1;
        c.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        outs o;
        outs_alloc(&o, &c);
        /* M = 1, N = K = 4: every output placed on the handle spans 16
         * bytes at most, inside it, and overlaps nothing else. */
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(ctx, 4, 4, (const int8_t *)c.b.p, c.k, &pb), SMM_OK);
        unsigned char head[16];
        memcpy(head, pb, sizeof head);
        for (int which = 0; which < 4; which++) {
            smm_linear_args l = linear_args(&c, &o, pb);
            l.m = 1;
            l.n = l.k = l.scale_b_len = 4;
            smm_status st;
            if (which == 0) {
                l.c = pb;
                st = smm_linear(ctx, &l);
            } else if (which == 1) {
                l.q = (int8_t *)pb;
                l.ldq = l.k;
                st = smm_linear(ctx, &l);
            } else if (which == 2) {
                l.x_scale = (float *)pb;
                st = smm_linear(ctx, &l);
            } else {
                const smm_scaled_mm_args a = {
                    .m = 1, .n = 4, .k = 4, .a = (const int8_t *)o.q.p, .lda = 4,
                    .b_packed = pb, .scale_a = (const float *)o.scale.p, .scale_a_len = 1,
                    .scale_b = (const float *)c.scale_b.p, .scale_b_len = 4,
                    .c = pb, .ldc = 4, .c_dtype = SMM_DTYPE_F32,
                };
                st = smm_scaled_mm(ctx, &a);
            }
            ck_assert_msg(st == SMM_ERR_OVERLAP && strstr(smm_context_last_error(ctx), "b_packed"),
                          "%s, case %d: got %s \"%s\"", smm_backend_name(bs[b]), which,
                          smm_strerror(st), smm_context_last_error(ctx));
            ck_assert(memcmp(head, pb, sizeof head) == 0);
        }
        smm_packed_b_destroy(pb);
        outs_free(&o);
        free_case(&c);
        smm_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("linear");
    TCase *tc = tu_tcase(s, "linear", 600);
    tcase_add_test(tc, test_matches_two_calls);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_bands);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_no_memory);
    tcase_add_test(tc, test_checks_before_memory);
    tcase_add_test(tc, test_output_on_packed_handle);
    return tu_main_gpu(s, "check_linear");
}
