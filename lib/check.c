/*
 * check.c - argument checks of the public entry points.
 *
 * Run before any backend sees a problem, so that every backend gets the same
 * answer for bad input and nothing is ever written on error. The rules are
 * those of doc/numerics.md ("Operands and layout"):
 *   - sizes >= 0; M == 0 or N == 0 is a no-op (checked no further);
 *   - a leading dimension is checked only where it is read (rows > 1);
 *   - a pointer is required when its operand has at least one element;
 *   - pointers to elements wider than a byte are naturally aligned;
 *   - footprints ((rows - 1) * ld + cols) * element_size must not overflow;
 *   - no output footprint may intersect an input's or another output's.
 */
#include "config.h"
#include "internal.h"

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

/* A byte range [lo, hi); empty when lo == hi. */
typedef struct {
    const char *name;
    uintptr_t lo, hi;
} range;

_Alignas(64) const unsigned char smm_workspace_mark[64];

/* Footprint of a rows x cols matrix with leading dimension ld (elements).
 * Returns 0 on overflow of the byte count or of the address range. At
 * SMM_WORKSPACE (memory the call will allocate) the range is empty. */
static int footprint(const void *p, int64_t rows, int64_t cols, int64_t ld, int64_t esize,
                     const char *name, range *out)
{
    out->name = name;
    out->lo = out->hi = (uintptr_t)p;
    if (rows == 0 || cols == 0)
        return 1;
    int64_t elems, bytes;
    if (rows == 1) {
        elems = cols;
    } else if (__builtin_mul_overflow(rows - 1, ld, &elems) ||
               __builtin_add_overflow(elems, cols, &elems)) {
        return 0;
    }
    if (__builtin_mul_overflow(elems, esize, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return 0;
    uintptr_t hi;
    if (p == SMM_WORKSPACE)   /* memory of the call's own: it overlaps nothing */
        return 1;
    if (__builtin_add_overflow((uintptr_t)p, (uintptr_t)bytes, &hi))
        return 0;
    out->hi = hi;
    return 1;
}

/* Elements of size > 1 must be naturally aligned (C's rule for the typed
 * pointers; the same for the void * of c and x, whose type is an enum). */
static int misaligned(const void *p, int64_t esize)
{
    return p && esize > 1 && ((uintptr_t)p % (uintptr_t)esize) != 0;
}

static int intersects(const range *x, const range *y)
{
    if (x->lo == x->hi || y->lo == y->hi)
        return 0;
    return x->lo < y->hi && y->lo < x->hi;
}

static int dtype_size(smm_dtype t)
{
    switch (t) {
    case SMM_DTYPE_I8: return 1;
    case SMM_DTYPE_F16:
    case SMM_DTYPE_BF16: return 2;
    case SMM_DTYPE_I32:
    case SMM_DTYPE_F32: return 4;
    }
    return 0;
}

#define FAIL(st, ...) return smm_set_error(ctx, (st), __VA_ARGS__)

const char *smm_mm_who(const smm_mm_problem *p, int raw)
{
    return !raw ? "smm_scaled_mm" : (p && p->b_packed) ? "smm_gemm_s8s8s32_packed"
                                                       : "smm_gemm_s8s8s32";
}

smm_status smm_check_mm(smm_context *ctx, const smm_mm_problem *p, int raw, const char *who)
{
    if (!who)
        who = smm_mm_who(p, raw);
    if (!p)
        FAIL(SMM_ERR_INVALID_ARG, "%s: args is NULL", who);
    if (p->m < 0 || p->n < 0 || p->k < 0)
        FAIL(SMM_ERR_INVALID_ARG, "%s: negative size (m %" PRId64 ", n %" PRId64 ", k %" PRId64 ")",
             who, p->m, p->n, p->k);
    if (!raw && p->c_dtype != SMM_DTYPE_F32 && p->c_dtype != SMM_DTYPE_F16 &&
        p->c_dtype != SMM_DTYPE_BF16)
        FAIL(SMM_ERR_INVALID_ARG, "%s: c_dtype (%d, %s) is not f32, f16 or bf16", who,
             (int)p->c_dtype, smm_dtype_name(p->c_dtype));
    /* A packed B is checked even for an empty problem: a mismatch is a
     * bug in the caller whatever M is. */
    const smm_packed_b *pb = p->b_packed;
    if (pb) {
        if (p->b)
            FAIL(SMM_ERR_INVALID_ARG, "%s: b and b_packed are both set (b must be NULL)", who);
        if (pb->n != p->n || pb->k != p->k)
            FAIL(SMM_ERR_INVALID_ARG,
                 "%s: b_packed holds n %" PRId64 " x k %" PRId64 ", the problem has n %" PRId64
                 " x k %" PRId64, who, pb->n, pb->k, p->n, p->k);
        const char *fmt = ctx->ops->packed_format ? ctx->ops->packed_format(ctx) : NULL;
        if (pb->backend != ctx->backend || !fmt || strcmp(fmt, pb->format) != 0)
            FAIL(SMM_ERR_INVALID_ARG,
                 "%s: b_packed has format \"%s\", this context (%s backend) uses \"%s\"", who,
                 pb->format, ctx->ops->name, fmt ? fmt : "none");
    }
    if (p->m == 0 || p->n == 0)
        return SMM_OK;

    const int64_t m = p->m, n = p->n, k = p->k;
    if (k > 0 && !p->a)
        FAIL(SMM_ERR_INVALID_ARG, "%s: a is NULL", who);
    if (k > 0 && !p->b && !pb)
        FAIL(SMM_ERR_INVALID_ARG, "%s: b is NULL", who);
    if (!p->c)
        FAIL(SMM_ERR_INVALID_ARG, "%s: c is NULL", who);
    if (m > 1 && p->lda < k)
        FAIL(SMM_ERR_INVALID_ARG, "%s: lda (%" PRId64 ") < k (%" PRId64 ")", who, p->lda, k);
    if (n > 1 && !pb && p->ldb < k)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldb (%" PRId64 ") < k (%" PRId64 ")", who, p->ldb, k);
    if (m > 1 && p->ldc < n)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldc (%" PRId64 ") < n (%" PRId64 ")", who, p->ldc, n);
    if (misaligned(p->c, raw ? 4 : dtype_size(p->c_dtype)))
        FAIL(SMM_ERR_INVALID_ARG, "%s: c (%p) is not aligned to its %d-byte elements", who, p->c,
             raw ? 4 : dtype_size(p->c_dtype));
    if (!raw && (misaligned(p->scale_a, 4) || misaligned(p->scale_b, 4) ||
                 misaligned(p->bias, 4) || misaligned(p->azp, 4)))
        FAIL(SMM_ERR_INVALID_ARG, "%s: scale_a, scale_b, bias or azp is not 4-byte aligned", who);
    if (!raw) {
        if (!p->scale_a)
            FAIL(SMM_ERR_INVALID_ARG, "%s: scale_a is NULL", who);
        if (!p->scale_b)
            FAIL(SMM_ERR_INVALID_ARG, "%s: scale_b is NULL", who);
        if (p->scale_a_len != 1 && p->scale_a_len != m)
            FAIL(SMM_ERR_INVALID_ARG, "%s: scale_a_len (%" PRId64 ") is neither 1 nor m (%" PRId64 ")",
                 who, p->scale_a_len, m);
        if (p->scale_b_len != 1 && p->scale_b_len != n)
            FAIL(SMM_ERR_INVALID_ARG, "%s: scale_b_len (%" PRId64 ") is neither 1 nor n (%" PRId64 ")",
                 who, p->scale_b_len, n);
        if (p->azp && p->azp_len != 1 && p->azp_len != m)
            FAIL(SMM_ERR_INVALID_ARG, "%s: azp_len (%" PRId64 ") is neither 1 nor m (%" PRId64 ")",
                 who, p->azp_len, m);
    }

    range in[7], c;
    int nin = 0;
    /* A packed B's buffer counts as an input: its size is known; and so
     * does its handle, which the call reads too. */
    int ok = footprint(p->a, m, k, p->lda, 1, "a", &in[nin++]) &&
             (pb ? footprint(pb->mem, 1, (int64_t)pb->bytes, 0, 1, "b_packed", &in[nin++]) &&
                       footprint(pb, 1, (int64_t)sizeof *pb, 0, 1, "b_packed", &in[nin++])
                 : footprint(p->b, n, k, p->ldb, 1, "b", &in[nin++]));
    if (ok && !raw) {
        ok = footprint(p->scale_a, 1, p->scale_a_len, 0, 4, "scale_a", &in[nin++]) &&
             footprint(p->scale_b, 1, p->scale_b_len, 0, 4, "scale_b", &in[nin++]) &&
             footprint(p->bias, 1, p->bias ? n : 0, 0, 4, "bias", &in[nin++]) &&
             footprint(p->azp, 1, p->azp ? p->azp_len : 0, 0, 4, "azp", &in[nin++]);
    }
    if (!ok)
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of %s overflows", who, in[nin - 1].name);
    if (!footprint(p->c, m, n, p->ldc, raw ? 4 : dtype_size(p->c_dtype), "c", &c))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of c overflows", who);
    for (int i = 0; i < nin; i++)
        if (intersects(&c, &in[i]))
            FAIL(SMM_ERR_OVERLAP, "%s: c overlaps %s", who, in[i].name);
    return SMM_OK;
}

smm_status smm_check_epilogue(smm_context *ctx, const smm_epilogue_args *e)
{
    const char *who = "smm_scaled_epilogue";
    if (!e)
        FAIL(SMM_ERR_INVALID_ARG, "%s: args is NULL", who);
    if (e->m < 0 || e->n < 0)
        FAIL(SMM_ERR_INVALID_ARG, "%s: negative size (m %" PRId64 ", n %" PRId64 ")", who, e->m,
             e->n);
    if (e->c_dtype != SMM_DTYPE_F32 && e->c_dtype != SMM_DTYPE_F16 &&
        e->c_dtype != SMM_DTYPE_BF16)
        FAIL(SMM_ERR_INVALID_ARG, "%s: c_dtype (%d, %s) is not f32, f16 or bf16", who,
             (int)e->c_dtype, smm_dtype_name(e->c_dtype));
    if (e->m == 0 || e->n == 0)
        return SMM_OK;

    const int64_t m = e->m, n = e->n;
    const int csize = dtype_size(e->c_dtype);
    if (!e->acc)
        FAIL(SMM_ERR_INVALID_ARG, "%s: acc is NULL", who);
    if (!e->c)
        FAIL(SMM_ERR_INVALID_ARG, "%s: c is NULL", who);
    if (!e->scale_a)
        FAIL(SMM_ERR_INVALID_ARG, "%s: scale_a is NULL", who);
    if (!e->scale_b)
        FAIL(SMM_ERR_INVALID_ARG, "%s: scale_b is NULL", who);
    if (e->azp && !e->colsum_b)
        FAIL(SMM_ERR_INVALID_ARG, "%s: colsum_b is NULL with azp set", who);
    if (m > 1 && e->ldacc < n)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldacc (%" PRId64 ") < n (%" PRId64 ")", who, e->ldacc, n);
    if (m > 1 && e->ldc < n)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldc (%" PRId64 ") < n (%" PRId64 ")", who, e->ldc, n);
    if (e->scale_a_len != 1 && e->scale_a_len != m)
        FAIL(SMM_ERR_INVALID_ARG, "%s: scale_a_len (%" PRId64 ") is neither 1 nor m (%" PRId64 ")",
             who, e->scale_a_len, m);
    if (e->scale_b_len != 1 && e->scale_b_len != n)
        FAIL(SMM_ERR_INVALID_ARG, "%s: scale_b_len (%" PRId64 ") is neither 1 nor n (%" PRId64 ")",
             who, e->scale_b_len, n);
    if (e->azp && e->azp_len != 1 && e->azp_len != m)
        FAIL(SMM_ERR_INVALID_ARG, "%s: azp_len (%" PRId64 ") is neither 1 nor m (%" PRId64 ")",
             who, e->azp_len, m);
    if (misaligned(e->c, csize))
        FAIL(SMM_ERR_INVALID_ARG, "%s: c (%p) is not aligned to its %d-byte elements", who, e->c,
             csize);
    if (misaligned(e->acc, 4) || misaligned(e->scale_a, 4) || misaligned(e->scale_b, 4) ||
        misaligned(e->bias, 4) || misaligned(e->azp, 4) || (e->azp && misaligned(e->colsum_b, 4)))
        FAIL(SMM_ERR_INVALID_ARG,
             "%s: acc, scale_a, scale_b, bias, azp or colsum_b is not 4-byte aligned", who);

    range in[6], c;
    int nin = 0;
    const int ok = footprint(e->acc, m, n, e->ldacc, 4, "acc", &in[nin++]) &&
                   footprint(e->scale_a, 1, e->scale_a_len, 0, 4, "scale_a", &in[nin++]) &&
                   footprint(e->scale_b, 1, e->scale_b_len, 0, 4, "scale_b", &in[nin++]) &&
                   footprint(e->bias, 1, e->bias ? n : 0, 0, 4, "bias", &in[nin++]) &&
                   footprint(e->azp, 1, e->azp ? e->azp_len : 0, 0, 4, "azp", &in[nin++]) &&
                   footprint(e->colsum_b, 1, e->azp ? n : 0, 0, 4, "colsum_b", &in[nin++]);
    if (!ok)
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of %s overflows", who, in[nin - 1].name);
    if (!footprint(e->c, m, n, e->ldc, csize, "c", &c))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of c overflows", who);
    for (int i = 0; i < nin; i++)
        if (intersects(&c, &in[i]))
            FAIL(SMM_ERR_OVERLAP, "%s: c overlaps %s", who, in[i].name);
    return SMM_OK;
}

smm_status smm_check_pack_b(smm_context *ctx, int64_t n, int64_t k, const int8_t *b, int64_t ldb)
{
    const char *who = "smm_pack_b";
    if (n < 0 || k < 0)
        FAIL(SMM_ERR_INVALID_ARG, "%s: negative size (n %" PRId64 ", k %" PRId64 ")", who, n, k);
    if (n > 0 && k > 0 && !b)
        FAIL(SMM_ERR_INVALID_ARG, "%s: b is NULL", who);
    if (n > 1 && ldb < k)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldb (%" PRId64 ") < k (%" PRId64 ")", who, ldb, k);
    range r;
    if (!footprint(b, n, k, ldb, 1, "b", &r))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of b overflows", who);
    return SMM_OK;
}

smm_status smm_check_quantize(smm_context *ctx, const smm_quantize_args *q, const char *who)
{
    if (!who)
        who = "smm_quantize_i8";
    /* smm_linear's callers know the scales and zero points as x_scale, x_azp. */
    const int lin = strcmp(who, "smm_linear") == 0;
    const char *sn = lin ? "x_scale" : "scale", *zn = lin ? "x_azp" : "azp";
    if (!q)
        FAIL(SMM_ERR_INVALID_ARG, "%s: args is NULL", who);
    if (q->m < 0 || q->k < 0)
        FAIL(SMM_ERR_INVALID_ARG, "%s: negative size (m %" PRId64 ", k %" PRId64 ")", who, q->m, q->k);
    if (q->x_dtype != SMM_DTYPE_F32 && q->x_dtype != SMM_DTYPE_F16 && q->x_dtype != SMM_DTYPE_BF16)
        FAIL(SMM_ERR_INVALID_ARG, "%s: x_dtype (%d, %s) is not f32, f16 or bf16", who,
             (int)q->x_dtype, smm_dtype_name(q->x_dtype));
    if (q->mode != SMM_QUANT_STATIC_PER_TENSOR && q->mode != SMM_QUANT_DYNAMIC_PER_TOKEN)
        FAIL(SMM_ERR_INVALID_ARG, "%s: unknown mode (%d)", who, (int)q->mode);
    if (q->m == 0)
        return SMM_OK;

    const int64_t m = q->m, k = q->k;
    const int dynamic = q->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    if (k > 0 && !q->x)
        FAIL(SMM_ERR_INVALID_ARG, "%s: x is NULL", who);
    if (k > 0 && !q->q)
        FAIL(SMM_ERR_INVALID_ARG, "%s: q is NULL", who);
    if (!q->scale)
        FAIL(SMM_ERR_INVALID_ARG, "%s: %s is NULL", who, sn);
    if (m > 1 && q->ldx < k)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldx (%" PRId64 ") < k (%" PRId64 ")", who, q->ldx, k);
    if (m > 1 && q->ldq < k)
        FAIL(SMM_ERR_INVALID_ARG, "%s: ldq (%" PRId64 ") < k (%" PRId64 ")", who, q->ldq, k);
    if (misaligned(q->x, dtype_size(q->x_dtype)))
        FAIL(SMM_ERR_INVALID_ARG, "%s: x (%p) is not aligned to its %d-byte elements", who, q->x,
             dtype_size(q->x_dtype));
    if (misaligned(q->scale, 4) || misaligned(q->azp, 4))
        FAIL(SMM_ERR_INVALID_ARG, "%s: %s or %s is not 4-byte aligned", who, sn, zn);

    range x, out[3], in_scale, in_azp;
    int64_t per = dynamic ? m : 1;
    if (!footprint(q->x, m, k, q->ldx, dtype_size(q->x_dtype), "x", &x))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of x overflows", who);
    if (!footprint(q->q, m, k, q->ldq, 1, "q", &out[0]))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of q overflows", who);
    if (!footprint(q->scale, 1, per, 0, 4, sn, dynamic ? &out[1] : &in_scale) ||
        !footprint(q->azp, 1, q->azp ? per : 0, 0, 4, zn, dynamic ? &out[2] : &in_azp))
        FAIL(SMM_ERR_INVALID_ARG, "%s: the byte size of %s or %s overflows", who, sn, zn);

    if (dynamic) {
        /* Outputs q, scale, azp; the one input x. */
        for (int i = 0; i < 3; i++) {
            if (intersects(&out[i], &x))
                FAIL(SMM_ERR_OVERLAP, "%s: %s overlaps x", who, out[i].name);
            for (int j = i + 1; j < 3; j++)
                if (intersects(&out[i], &out[j]))
                    FAIL(SMM_ERR_OVERLAP, "%s: %s overlaps %s", who, out[i].name, out[j].name);
        }
    } else {
        /* The one output q; inputs x, scale, azp. */
        const range *ins[3] = {&x, &in_scale, &in_azp};
        for (int i = 0; i < 3; i++)
            if (intersects(&out[0], ins[i]))
                FAIL(SMM_ERR_OVERLAP, "%s: q overlaps %s", who, ins[i]->name);
    }
    return SMM_OK;
}

/* footprint(), or an empty range for a pointer not given (working memory
 * of the call, which intersects nothing of the caller's). */
static void opt_footprint(const void *p, int64_t rows, int64_t cols, int64_t ld, int64_t esize,
                          const char *name, range *out)
{
    if (!p || !footprint(p, rows, cols, ld, esize, name, out)) {
        out->name = name;
        out->lo = out->hi = 0;
    }
}

smm_status smm_check_linear(smm_context *ctx, const smm_linear_args *l,
                            const smm_quantize_args *q, const smm_mm_problem *p)
{
    const char *who = "smm_linear";
    /* The overlaps across the two halves first, under smm_linear's own
     * names: C against x and the activations' q, x_scale, x_azp (the
     * multiplication's A, scale_a, azp), and the quantizer's outputs
     * against the multiplication's other inputs, which they would
     * overwrite before it reads them. A range that overflows is left
     * empty here: the halves report it. */
    const int types_ok = (l->x_dtype == SMM_DTYPE_F32 || l->x_dtype == SMM_DTYPE_F16 ||
                          l->x_dtype == SMM_DTYPE_BF16) &&
                         (l->c_dtype == SMM_DTYPE_F32 || l->c_dtype == SMM_DTYPE_F16 ||
                          l->c_dtype == SMM_DTYPE_BF16);
    if (types_ok && l->m > 0 && l->n >= 0 && l->k >= 0) {
        const int dynamic = l->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
        const int64_t m = l->m, n = l->n, k = l->k, per = dynamic ? m : 1;
        range x, c, act[3], ins[4];
        int nin = 0;
        opt_footprint(l->x, m, k, l->ldx, dtype_size(l->x_dtype), "x", &x);
        opt_footprint(l->q, m, k, l->ldq, 1, "q", &act[0]);
        opt_footprint(l->x_scale, 1, per, 0, 4, "x_scale", &act[1]);
        opt_footprint(l->x_azp, 1, per, 0, 4, "x_azp", &act[2]);
        if (n > 0) {
            opt_footprint(l->c, m, n, l->ldc, dtype_size(l->c_dtype), "c", &c);
            if (intersects(&c, &x))
                FAIL(SMM_ERR_OVERLAP, "%s: c overlaps x", who);
            for (int i = 0; i < 3; i++)
                if (intersects(&c, &act[i]))
                    FAIL(SMM_ERR_OVERLAP, "%s: c overlaps %s", who, act[i].name);
            const smm_packed_b *pb = l->b_packed;
            if (pb) {
                opt_footprint(pb->mem, 1, (int64_t)pb->bytes, 0, 1, "b_packed", &ins[nin++]);
                opt_footprint(pb, 1, (int64_t)sizeof *pb, 0, 1, "b_packed", &ins[nin++]);
            } else
                opt_footprint(l->b, n, k, l->ldb, 1, "b", &ins[nin++]);
            opt_footprint(l->scale_b, 1, l->scale_b_len, 0, 4, "scale_b", &ins[nin++]);
            opt_footprint(l->bias, 1, l->bias ? n : 0, 0, 4, "bias", &ins[nin++]);
        }
        /* The quantizer's outputs: q always, x_scale and x_azp when dynamic. */
        for (int i = 0; i < (dynamic ? 3 : 1); i++)
            for (int j = 0; j < nin; j++)
                if (intersects(&act[i], &ins[j]))
                    FAIL(SMM_ERR_OVERLAP, "%s: %s overlaps %s", who, act[i].name, ins[j].name);
    }
    smm_status st = smm_check_quantize(ctx, q, who);
    if (st == SMM_OK)
        st = smm_check_mm(ctx, p, 0, who);
    return st;
}
