/*
 * conformance.c - the conformance battery (interface in conformance.h).
 *
 * Every case is generated from its own 64-bit seed, derived from the battery
 * seed, the group and the case index, so a failure replays exactly with
 * SMM_TEST_SEED set to the battery seed. A case runs the call three times:
 * on the tested context with the outputs poisoned with 0xA5, again with 0x5A,
 * and on the reference context with 0xA5. It passes when all three returned
 * SMM_OK, all three outputs are bit-identical (so every element was written:
 * an element left alone would still hold the two different poisons), every
 * byte outside the output views (guard bytes before and after, the gaps
 * between rows when ld > cols) still holds its poison, and the inputs are
 * unchanged.
 */
#define _POSIX_C_SOURCE 200809L
#include "conformance.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CF_GUARD 64          /* guard bytes around every buffer */
#define CF_POISON_1 0xA5
#define CF_POISON_2 0x5A

/* ------------------------------------------------------------------ */
/* Random numbers                                                      */
/* ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void cf_rng_seed(cf_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t cf_rng_next(cf_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

int64_t cf_rng_range(cf_rng *r, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    if (span == UINT64_MAX)
        return (int64_t)cf_rng_next(r);
    uint64_t n = span + 1;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;   /* a multiple of n */
    uint64_t v;
    do
        v = cf_rng_next(r);
    while (v >= limit);
    return (int64_t)((uint64_t)lo + v % n);
}

int cf_seed(uint64_t *seed)
{
    const char *s = getenv("SMM_TEST_SEED");
    if (s && *s) {
        int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
        /* As strict as `scaledmm check` (cli_parse_u64): digits only, no
         * sign or blanks, so a value is taken by both or by neither. */
        if (errno == 0 && end != s && *end == '\0' && s[0] >= '0' && s[0] <= '9') {
            *seed = (uint64_t)v;
            return 0;
        }
        fprintf(stderr, "SMM_TEST_SEED=\"%s\": not a decimal or 0x-hex 64-bit number\n", s);
        return -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 40;
    *seed = splitmix64(&x);
    return 0;
}

/* Seed of case `index` of group `group` of a battery. */
static uint64_t case_seed(uint64_t battery_seed, int group, int index)
{
    uint64_t x = battery_seed ^ ((uint64_t)(group + 1) << 48) ^ (uint64_t)(index + 1);
    splitmix64(&x);
    return splitmix64(&x);
}

static float rng_unit(cf_rng *r)   /* [0, 1), 24 random bits */
{
    return (float)(cf_rng_next(r) >> 40) * 0x1p-24f;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static size_t dtype_size(smm_dtype d)
{
    switch (d) {
    case SMM_DTYPE_I8: return 1;
    case SMM_DTYPE_I32: case SMM_DTYPE_F32: return 4;
    case SMM_DTYPE_F16: case SMM_DTYPE_BF16: return 2;
    }
    return 0;
}

/* Bytes the allocation of a rows x cols view needs (the contract's
 * footprint; the leading dimension of a single row is not used). */
static size_t footprint(int64_t rows, int64_t cols, int64_t ld, size_t es)
{
    if (rows <= 0 || cols < 0)
        return 0;
    int64_t span = (rows > 1 ? (rows - 1) * ld : 0) + cols;
    return span < 0 ? 0 : (size_t)span * es;
}

static size_t element_offset(int64_t rows, int64_t r, int64_t c, int64_t ld, size_t es)
{
    return (size_t)((rows > 1 ? r * ld : 0) + c) * es;
}

static uint32_t load_bits(const unsigned char *p, size_t es)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    switch (es) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    default: memcpy(&u32, p, 4); return u32;
    }
}

static size_t offset_for(cf_rng *r, int off, size_t es)
{
    size_t o = off == CF_OFFSET_RANDOM ? (size_t)cf_rng_range(r, 0, 63) : (size_t)(off < 0 ? 0 : off);
    return o - o % (es ? es : 1);
}

static void appendf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...)
{
    if (!buf || size == 0)
        return;
    size_t len = strlen(buf);
    if (len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Output buffers: three copies (tested twice, reference once)         */
/* ------------------------------------------------------------------ */

typedef struct cf_out {
    const char *name;
    int64_t rows, cols, ld;
    size_t es, off, foot, size;
    unsigned char *buf[3];
} cf_out;

static const char *const run_names[3] = {
    "tested (poison 0xA5)", "tested (poison 0x5A)", "reference"
};
static const unsigned char run_poison[3] = { CF_POISON_1, CF_POISON_2, CF_POISON_1 };

static int out_init(cf_out *o, const char *name, int64_t rows, int64_t cols, int64_t ld,
                    size_t es, size_t off)
{
    memset(o, 0, sizeof *o);
    o->name = name;
    o->rows = rows;
    o->cols = cols;
    o->ld = ld;
    o->es = es;
    o->off = off - off % es;
    o->foot = footprint(rows, cols, ld, es);
    o->size = CF_GUARD + o->off + o->foot + CF_GUARD;
    for (int i = 0; i < 3; i++) {
        o->buf[i] = malloc(o->size);
        if (!o->buf[i])
            return -1;
    }
    return 0;
}

static void out_free(cf_out *o)
{
    for (int i = 0; i < 3; i++)
        free(o->buf[i]);
    memset(o, 0, sizeof *o);
}

static void *out_view(cf_out *o, int i)
{
    return o->buf[i] + CF_GUARD + o->off;
}

static void out_poison(cf_out *o, int i)
{
    memset(o->buf[i], run_poison[i], o->size);
}

/* Every byte outside the view still holds run i's poison? */
static int out_check_outside(const cf_out *o, int i, char *msg, size_t msgsz)
{
    const unsigned char *b = o->buf[i];
    unsigned char p = run_poison[i];
    size_t base = CF_GUARD + o->off, pos = 0;
    int64_t rows = (o->cols > 0) ? o->rows : 0;
    for (int64_t r = 0; r <= rows; r++) {
        size_t end = r < rows ? base + element_offset(o->rows, r, 0, o->ld, o->es) : o->size;
        for (size_t x = pos; x < end; x++) {
            if (b[x] != p) {
                long long rel = (long long)x - (long long)base;
                appendf(msg, msgsz,
                        "%s wrote byte 0x%02x outside the view of %s at byte offset %+lld from "
                        "its first element (%s; poison 0x%02x)",
                        run_names[i], b[x], o->name, rel,
                        rel < 0 ? "before the first element"
                        : x >= base + o->foot ? "after the last element"
                                              : "in a gap between rows",
                        p);
                return 1;
            }
        }
        if (r < rows)
            pos = end + (size_t)o->cols * o->es;
    }
    return 0;
}

/* All three runs bit-identical inside the view? */
static int out_compare(const cf_out *o, char *msg, size_t msgsz)
{
    size_t base = CF_GUARD + o->off;
    for (int64_t r = 0; r < o->rows; r++)
        for (int64_t c = 0; c < o->cols; c++) {
            size_t at = base + element_offset(o->rows, r, c, o->ld, o->es);
            const unsigned char *t1 = o->buf[0] + at, *t2 = o->buf[1] + at, *rf = o->buf[2] + at;
            if (memcmp(t1, rf, o->es) == 0 && memcmp(t2, rf, o->es) == 0)
                continue;
            int w = (int)o->es * 2;
            uint32_t v1 = load_bits(t1, o->es), v2 = load_bits(t2, o->es),
                     vr = load_bits(rf, o->es);
            if (v1 == v2)
                appendf(msg, msgsz, "first difference in %s at (row %" PRId64 ", col %" PRId64
                        "): tested 0x%0*" PRIx32 ", reference 0x%0*" PRIx32,
                        o->name, r, c, w, v1, w, vr);
            else
                appendf(msg, msgsz, "first difference in %s at (row %" PRId64 ", col %" PRId64
                        "): tested 0x%0*" PRIx32 " after poison 0xA5 but 0x%0*" PRIx32
                        " after poison 0x5A (element not written, or not deterministic), "
                        "reference 0x%0*" PRIx32,
                        o->name, r, c, w, v1, w, v2, w, vr);
            return 1;
        }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Input snapshots (inputs must come back unchanged)                   */
/* ------------------------------------------------------------------ */

#define CF_MAX_SNAPS 8
typedef struct cf_snaps {
    int n;
    struct { const char *name; const void *p; size_t size; void *copy; } s[CF_MAX_SNAPS];
} cf_snaps;

static int snap_take(cf_snaps *sn, const char *name, const void *p, size_t size)
{
    if (!p || size == 0 || sn->n >= CF_MAX_SNAPS)
        return 0;
    void *copy = malloc(size);
    if (!copy)
        return -1;
    memcpy(copy, p, size);
    sn->s[sn->n].name = name;
    sn->s[sn->n].p = p;
    sn->s[sn->n].size = size;
    sn->s[sn->n].copy = copy;
    sn->n++;
    return 0;
}

static int snap_check(const cf_snaps *sn, char *msg, size_t msgsz)
{
    for (int i = 0; i < sn->n; i++)
        if (memcmp(sn->s[i].p, sn->s[i].copy, sn->s[i].size) != 0) {
            const unsigned char *a = sn->s[i].p, *b = sn->s[i].copy;
            size_t x = 0;
            while (a[x] == b[x])
                x++;
            appendf(msg, msgsz, "input %s modified at byte %zu (0x%02x, was 0x%02x)",
                    sn->s[i].name, x, a[x], b[x]);
            return 1;
        }
    return 0;
}

static void snap_free(cf_snaps *sn)
{
    for (int i = 0; i < sn->n; i++)
        free(sn->s[i].copy);
    sn->n = 0;
}

/* ------------------------------------------------------------------ */
/* Device staging (GPU contexts take device pointers)                  */
/* ------------------------------------------------------------------ */

/*
 * On a GPU context every input is copied to device memory (smm_malloc,
 * smm_memcpy) with its address kept modulo 64 and CF_GUARD bytes of a NaN
 * pattern (0x7FC0DEAD) on either side, so a kernel reading out of bounds
 * still meets NaN; after the runs the whole device copy, guards included,
 * must come back unchanged. Each output buffer (guards, gaps and poison
 * included) is copied to the device before a run and back after
 * smm_synchronize, so the host-side checks apply unchanged.
 */
static int is_device_ctx(const smm_context *ctx)
{
    /* A GPU context, or an AUTO context with a GPU: its smm_malloc memory
     * is device memory, and calls given it run on the GPU. */
    return smm_context_device_backend(ctx) != SMM_BACKEND_AUTO;
}

typedef struct cf_staged {
    const char *name;
    unsigned char *image;   /* host: what the device copy must hold */
    unsigned char *mem;     /* device allocation */
    size_t size;            /* bytes of both */
} cf_staged;

#define CF_MAX_STAGED 8
typedef struct cf_stage {
    smm_context *ctx;       /* NULL: no staging (host context) */
    int n;
    cf_staged in[CF_MAX_STAGED];
    unsigned char *out_mem[3];
} cf_stage;

static int stage_fail(cf_stage *st, const char *what, smm_status s, char *msg, size_t msgsz)
{
    appendf(msg, msgsz, "staging on %s: %s: %s (%s)",
            smm_backend_name(smm_context_device_backend(st->ctx)), what, smm_strerror(s), smm_context_last_error(st->ctx));
    return -1;
}

/* The device copy of a host input of `size` bytes at `host` (NULL: none).
 * Returns 0 and sets *dev, or -1 with msg. */
static int stage_input(cf_stage *st, const char *name, const void *host, size_t size,
                       const void **dev, char *msg, size_t msgsz)
{
    *dev = host;
    if (!st->ctx || !host)
        return 0;
    if (st->n >= CF_MAX_STAGED) {
        appendf(msg, msgsz, "staging: too many inputs");
        return -1;
    }
    static const unsigned char nan_bytes[4] = { 0xAD, 0xDE, 0xC0, 0x7F };
    size_t off = CF_GUARD + (size_t)((uintptr_t)host % 64);
    size_t total = off + size + CF_GUARD;
    cf_staged *s = &st->in[st->n];
    s->name = name;
    s->size = total;
    s->image = malloc(total);
    s->mem = NULL;
    if (!s->image) {
        appendf(msg, msgsz, "out of memory staging %s", name);
        return -1;
    }
    st->n++;
    for (size_t i = 0; i < total; i++)
        s->image[i] = nan_bytes[i % 4];
    memcpy(s->image + off, host, size);
    void *mem = NULL;
    smm_status r = smm_malloc(st->ctx, total, &mem);
    if (r != SMM_OK)
        return stage_fail(st, "smm_malloc", r, msg, msgsz);
    s->mem = mem;
    r = smm_memcpy(st->ctx, s->mem, s->image, total, SMM_MEMCPY_HOST_TO_DEVICE);
    if (r != SMM_OK)
        return stage_fail(st, "smm_memcpy to the device", r, msg, msgsz);
    *dev = s->mem + off;
    return 0;
}

/* Every staged input (with its guards) still as it was on the device? */
static int stage_check_inputs(cf_stage *st, char *msg, size_t msgsz)
{
    for (int i = 0; i < st->n; i++) {
        cf_staged *s = &st->in[i];
        unsigned char *back = malloc(s->size);
        if (!back) {
            appendf(msg, msgsz, "out of memory");
            return 1;
        }
        smm_status r = smm_memcpy(st->ctx, back, s->mem, s->size, SMM_MEMCPY_DEVICE_TO_HOST);
        if (r != SMM_OK) {
            free(back);
            stage_fail(st, "smm_memcpy to the host", r, msg, msgsz);
            return 1;
        }
        for (size_t x = 0; x < s->size; x++)
            if (back[x] != s->image[x]) {
                appendf(msg, msgsz, "device copy of input %s modified at byte %zu of its "
                        "staging buffer (0x%02x, was 0x%02x)", s->name, x, back[x], s->image[x]);
                free(back);
                return 1;
            }
        free(back);
    }
    return 0;
}

/* The device twin of output o for tested run i: allocated on first use
 * (slot j), loaded with the host buffer (poison, guards and all). Returns
 * the device view, or NULL with msg. */
static void *stage_output(cf_stage *st, int j, cf_out *o, int i, char *msg, size_t msgsz)
{
    if (!st->out_mem[j]) {
        void *mem = NULL;
        smm_status r = smm_malloc(st->ctx, o->size, &mem);
        if (r != SMM_OK) {
            stage_fail(st, "smm_malloc", r, msg, msgsz);
            return NULL;
        }
        st->out_mem[j] = mem;
    }
    smm_status r = smm_memcpy(st->ctx, st->out_mem[j], o->buf[i], o->size,
                              SMM_MEMCPY_HOST_TO_DEVICE);
    if (r != SMM_OK) {
        stage_fail(st, "smm_memcpy to the device", r, msg, msgsz);
        return NULL;
    }
    return st->out_mem[j] + CF_GUARD + o->off;
}

/* Copies output slot j back into run i's host buffer. */
static int unstage_output(cf_stage *st, int j, cf_out *o, int i, char *msg, size_t msgsz)
{
    smm_status r = smm_memcpy(st->ctx, o->buf[i], st->out_mem[j], o->size,
                              SMM_MEMCPY_DEVICE_TO_HOST);
    if (r != SMM_OK) {
        stage_fail(st, "smm_memcpy to the host", r, msg, msgsz);
        return -1;
    }
    return 0;
}

static void stage_free(cf_stage *st)
{
    for (int i = 0; i < st->n; i++) {
        if (st->in[i].mem)
            smm_free(st->ctx, st->in[i].mem);
        free(st->in[i].image);
    }
    for (int j = 0; j < 3; j++)
        if (st->out_mem[j])
            smm_free(st->ctx, st->out_mem[j]);
    memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------ */
/* Comparison of one call                                              */
/* ------------------------------------------------------------------ */

static smm_status call_mm(smm_context *ctx, const smm_scaled_mm_args *a)
{
    if (a->c_dtype == SMM_DTYPE_I32)
        return smm_gemm_s8s8s32(ctx, a->m, a->n, a->k, a->a, a->lda, a->b, a->ldb,
                                (int32_t *)a->c, a->ldc);
    return smm_scaled_mm(ctx, a);
}

static int status_failure(const smm_status st[3], smm_context *tested, smm_context *ref,
                          char *msg, size_t msgsz)
{
    appendf(msg, msgsz, "status: tested %s / %s, reference %s",
            smm_strerror(st[0]), smm_strerror(st[1]), smm_strerror(st[2]));
    if (st[0] != SMM_OK || st[1] != SMM_OK)
        appendf(msg, msgsz, " (tested: \"%s\")", smm_context_last_error(tested));
    if (st[2] != SMM_OK)
        appendf(msg, msgsz, " (reference: \"%s\")", smm_context_last_error(ref));
    return CF_FAIL;
}

int cf_compare_mm(smm_context *tested, smm_context *reference,
                  const smm_scaled_mm_args *args, int c_off, char *msg, size_t msgsz)
{
    if (msg && msgsz)
        msg[0] = '\0';
    size_t es = dtype_size(args->c_dtype);
    if (es == 0 || es == 1) {
        appendf(msg, msgsz, "cf_compare_mm: c_dtype %d is not an output type", (int)args->c_dtype);
        return CF_FAIL;
    }
    cf_out o;
    cf_snaps sn = { 0 };
    cf_stage stg = { 0 };
    int result = CF_PASS;
    if (out_init(&o, "C", args->m, args->n, args->ldc, es, c_off < 0 ? 0 : (size_t)c_off) != 0) {
        out_free(&o);
        appendf(msg, msgsz, "out of memory allocating the outputs");
        return CF_FAIL;
    }
    int scaled = args->c_dtype != SMM_DTYPE_I32;
    int ok = snap_take(&sn, "A", args->a, footprint(args->m, args->k, args->lda, 1)) == 0 &&
             snap_take(&sn, "B", args->b, footprint(args->n, args->k, args->ldb, 1)) == 0;
    if (scaled && ok)
        ok = snap_take(&sn, "scale_a", args->scale_a,
                       args->scale_a_len > 0 ? (size_t)args->scale_a_len * 4 : 0) == 0 &&
             snap_take(&sn, "scale_b", args->scale_b,
                       args->scale_b_len > 0 ? (size_t)args->scale_b_len * 4 : 0) == 0 &&
             snap_take(&sn, "bias", args->bias, args->n > 0 ? (size_t)args->n * 4 : 0) == 0 &&
             snap_take(&sn, "azp", args->azp,
                       args->azp_len > 0 ? (size_t)args->azp_len * 4 : 0) == 0;
    if (!ok) {
        appendf(msg, msgsz, "out of memory");
        result = CF_FAIL;
        goto done;
    }

    /* What the tested context gets: the inputs, on its device if it has one. */
    smm_scaled_mm_args targs = *args;
    if (is_device_ctx(tested)) {
        stg.ctx = tested;
        const void *p[6];
        if (stage_input(&stg, "A", args->a, footprint(args->m, args->k, args->lda, 1), &p[0],
                        msg, msgsz) ||
            stage_input(&stg, "B", args->b, footprint(args->n, args->k, args->ldb, 1), &p[1],
                        msg, msgsz)) {
            result = CF_FAIL;
            goto done;
        }
        targs.a = p[0];
        targs.b = p[1];
        if (scaled) {
            if (stage_input(&stg, "scale_a", args->scale_a,
                            args->scale_a_len > 0 ? (size_t)args->scale_a_len * 4 : 0, &p[2],
                            msg, msgsz) ||
                stage_input(&stg, "scale_b", args->scale_b,
                            args->scale_b_len > 0 ? (size_t)args->scale_b_len * 4 : 0, &p[3],
                            msg, msgsz) ||
                stage_input(&stg, "bias", args->bias, args->n > 0 ? (size_t)args->n * 4 : 0,
                            &p[4], msg, msgsz) ||
                stage_input(&stg, "azp", args->azp,
                            args->azp_len > 0 ? (size_t)args->azp_len * 4 : 0, &p[5],
                            msg, msgsz)) {
                result = CF_FAIL;
                goto done;
            }
            targs.scale_a = p[2];
            targs.scale_b = p[3];
            targs.bias = p[4];
            targs.azp = p[5];
        }
    }

    smm_status st[3];
    for (int i = 0; i < 3; i++) {
        smm_scaled_mm_args a = i < 2 ? targs : *args;
        int dev = i < 2 && stg.ctx;
        out_poison(&o, i);
        a.c = dev ? stage_output(&stg, 0, &o, i, msg, msgsz) : out_view(&o, i);
        if (!a.c) {
            result = CF_FAIL;
            goto done;
        }
        st[i] = call_mm(i < 2 ? tested : reference, &a);
        if (i == 0 && st[0] == SMM_ERR_UNSUPPORTED) {
            result = CF_SKIP;
            goto done;
        }
        if (dev && st[i] == SMM_OK) {
            st[i] = smm_synchronize(tested);
            if (st[i] == SMM_OK && unstage_output(&stg, 0, &o, i, msg, msgsz) != 0) {
                result = CF_FAIL;
                goto done;
            }
        }
    }
    if (st[0] != SMM_OK || st[1] != SMM_OK || st[2] != SMM_OK) {
        result = status_failure(st, tested, reference, msg, msgsz);
        goto done;
    }
    for (int i = 0; i < 3; i++)
        if (out_check_outside(&o, i, msg, msgsz)) {
            result = CF_FAIL;
            goto done;
        }
    if (out_compare(&o, msg, msgsz) || snap_check(&sn, msg, msgsz) ||
        (stg.ctx && stage_check_inputs(&stg, msg, msgsz)))
        result = CF_FAIL;
done:
    stage_free(&stg);
    snap_free(&sn);
    out_free(&o);
    return result;
}

int cf_compare_quantize(smm_context *tested, smm_context *reference,
                        const smm_quantize_args *args, int out_off, char *msg, size_t msgsz)
{
    if (msg && msgsz)
        msg[0] = '\0';
    size_t xs = dtype_size(args->x_dtype);
    if (args->x_dtype != SMM_DTYPE_F32 && args->x_dtype != SMM_DTYPE_F16 &&
        args->x_dtype != SMM_DTYPE_BF16) {
        appendf(msg, msgsz, "cf_compare_quantize: x_dtype %d is not an input type",
                (int)args->x_dtype);
        return CF_FAIL;
    }
    int dynamic = args->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    size_t off = out_off < 0 ? 0 : (size_t)out_off;
    cf_out outs[3];
    int nouts = 0, result = CF_PASS;
    cf_snaps sn = { 0 };
    cf_stage stg = { 0 };
    memset(outs, 0, sizeof outs);
    int fail = out_init(&outs[nouts++], "q", args->m, args->k, args->ldq, 1, off) != 0;
    if (dynamic && !fail)
        fail = out_init(&outs[nouts++], "scale", 1, args->m, 0, 4, off) != 0;
    if (dynamic && args->azp && !fail)
        fail = out_init(&outs[nouts++], "azp", 1, args->m, 0, 4, off + 4) != 0;
    if (!fail)
        fail = snap_take(&sn, "x", args->x, footprint(args->m, args->k, args->ldx, xs)) != 0;
    if (!dynamic && !fail)
        fail = snap_take(&sn, "scale", args->scale, 4) != 0 ||
               snap_take(&sn, "azp", args->azp, 4) != 0;
    if (fail) {
        appendf(msg, msgsz, "out of memory");
        result = CF_FAIL;
        goto done;
    }

    /* What the tested context gets: the inputs, on its device if it has one. */
    smm_quantize_args targs = *args;
    if (is_device_ctx(tested)) {
        stg.ctx = tested;
        const void *p[3] = { NULL, NULL, NULL };
        if (stage_input(&stg, "x", args->x, footprint(args->m, args->k, args->ldx, xs), &p[0],
                        msg, msgsz) ||
            (!dynamic && (stage_input(&stg, "scale", args->scale, 4, &p[1], msg, msgsz) ||
                          stage_input(&stg, "azp", args->azp, 4, &p[2], msg, msgsz)))) {
            result = CF_FAIL;
            goto done;
        }
        targs.x = p[0];
        if (!dynamic) {   /* inputs in this mode, behind the struct's non-const pointers */
            targs.scale = (float *)(uintptr_t)p[1];
            targs.azp = (int32_t *)(uintptr_t)p[2];
        }
    }

    smm_status st[3];
    for (int i = 0; i < 3; i++) {
        smm_quantize_args q = i < 2 ? targs : *args;
        int dev = i < 2 && stg.ctx;
        void *view[3] = { NULL, NULL, NULL };
        for (int j = 0; j < nouts; j++) {
            out_poison(&outs[j], i);
            view[j] = dev ? stage_output(&stg, j, &outs[j], i, msg, msgsz) : out_view(&outs[j], i);
            if (!view[j]) {
                result = CF_FAIL;
                goto done;
            }
        }
        q.q = view[0];
        if (dynamic) {
            q.scale = view[1];
            q.azp = args->azp ? view[2] : NULL;
        }
        st[i] = smm_quantize_i8(i < 2 ? tested : reference, &q);
        if (i == 0 && st[0] == SMM_ERR_UNSUPPORTED) {
            result = CF_SKIP;
            goto done;
        }
        if (dev && st[i] == SMM_OK) {
            st[i] = smm_synchronize(tested);
            for (int j = 0; j < nouts && st[i] == SMM_OK; j++)
                if (unstage_output(&stg, j, &outs[j], i, msg, msgsz) != 0) {
                    result = CF_FAIL;
                    goto done;
                }
        }
    }
    if (st[0] != SMM_OK || st[1] != SMM_OK || st[2] != SMM_OK) {
        result = status_failure(st, tested, reference, msg, msgsz);
        goto done;
    }
    for (int j = 0; j < nouts; j++)
        for (int i = 0; i < 3; i++)
            if (out_check_outside(&outs[j], i, msg, msgsz)) {
                result = CF_FAIL;
                goto done;
            }
    /* Report the per-row outputs first: a wrong scale explains a wrong q. */
    for (int j = nouts - 1; j >= 0; j--)
        if (out_compare(&outs[j], msg, msgsz)) {
            result = CF_FAIL;
            goto done;
        }
    if (snap_check(&sn, msg, msgsz) || (stg.ctx && stage_check_inputs(&stg, msg, msgsz)))
        result = CF_FAIL;
done:
    stage_free(&stg);
    snap_free(&sn);
    for (int j = 0; j < 3; j++)
        out_free(&outs[j]);
    return result;
}

/* ------------------------------------------------------------------ */
/* Input generation                                                    */
/* ------------------------------------------------------------------ */

static int8_t value_i8(cf_rng *r, cf_values cls)
{
    switch (cls) {
    case CF_VALUES_MIN: return -128;
    case CF_VALUES_MAX: return 127;
    case CF_VALUES_EXTREME: return (cf_rng_next(r) >> 63) ? 127 : -128;
    case CF_VALUES_SMALL: return (int8_t)cf_rng_range(r, -3, 3);
    default: return (int8_t)cf_rng_range(r, -128, 127);
    }
}

void cf_fill_i8(cf_rng *r, int8_t *p, int64_t rows, int64_t cols, int64_t ld, cf_values cls)
{
    size_t foot = footprint(rows, cols, ld, 1);
    for (size_t i = 0; i < foot; i++)          /* gaps: anything */
        p[i] = (int8_t)(cf_rng_next(r) >> 56);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            p[element_offset(rows, i, j, ld, 1)] = value_i8(r, cls);
}

static float random_nan(cf_rng *r)
{
    uint32_t u = 0x7F800000u | (uint32_t)cf_rng_range(r, 1, 0x7FFFFF);
    if (cf_rng_next(r) >> 63)
        u |= 0x80000000u;
    return bits_f32(u);
}

static float special_f32(cf_rng *r)
{
    float s = (cf_rng_next(r) >> 63) ? -1.0f : 1.0f;
    switch (cf_rng_range(r, 0, 8)) {
    case 0: return random_nan(r);
    case 1: return s * INFINITY;
    case 2: return s * 0.0f;
    case 3: return s * FLT_MAX;
    case 4: return s * 1e30f;
    case 5: return s * ldexpf(rng_unit(r), -126);          /* subnormal (or 0) */
    case 6: return s * FLT_TRUE_MIN;
    case 7: return s * FLT_MIN;
    default: return s * 1e-30f;
    }
}

/* A positive scale 2^(e + [-3, 3]) * [1, 2), or a special value. */
static float gen_scale(cf_rng *r, int e, int specials)
{
    if (specials && cf_rng_range(r, 0, 23) == 0) {
        switch (cf_rng_range(r, 0, 9)) {
        case 0: return 0.0f;
        case 1: return -0.0f;
        case 2: case 3: return -ldexpf(1.0f + rng_unit(r), e + (int)cf_rng_range(r, -3, 3));
        case 4: return 1e30f;
        case 5: return FLT_MAX;
        case 6: return 1e-40f;
        case 7: return FLT_TRUE_MIN;
        case 8: return INFINITY;
        default: return random_nan(r);
        }
    }
    return ldexpf(1.0f + rng_unit(r), e + (int)cf_rng_range(r, -3, 3));
}

static float gen_bias(cf_rng *r, int e, int specials)
{
    if (specials && cf_rng_range(r, 0, 23) == 0)
        return special_f32(r);
    float v = ldexpf(1.0f + rng_unit(r), e + (int)cf_rng_range(r, -6, 6));
    return (cf_rng_next(r) >> 63) ? -v : v;
}

/* A float buffer of n elements at a random element offset, neighbours NaN
 * (a backend reading past the end sees NaN and fails the comparison). */
static float *float_buffer(cf_rng *r, int64_t n, int off, float **base)
{
    size_t o = offset_for(r, off, 4) / 4;
    size_t total = o + (size_t)(n > 0 ? n : 0) + CF_GUARD / 4;
    float *b = malloc(total * sizeof(float));
    if (!b)
        return NULL;
    for (size_t i = 0; i < total; i++)
        b[i] = bits_f32(0x7FC0DEADu);
    *base = b;
    return b + o;
}

/* An int8 rows x cols view at `off` bytes into an allocation, filled. */
static int8_t *i8_buffer(cf_rng *r, int64_t rows, int64_t cols, int64_t ld, cf_values cls,
                         int off, void **base)
{
    size_t o = offset_for(r, off, 1);
    size_t foot = footprint(rows, cols, ld, 1);
    unsigned char *b = malloc(o + foot + CF_GUARD);
    if (!b)
        return NULL;
    for (size_t i = 0; i < o + foot + CF_GUARD; i++)
        b[i] = (unsigned char)(cf_rng_next(r) >> 56);
    *base = b;
    cf_fill_i8(r, (int8_t *)(b + o), rows, cols, ld, cls);
    return (int8_t *)(b + o);
}

static const char *values_name(cf_values v)
{
    switch (v) {
    case CF_VALUES_UNIFORM: return "uniform";
    case CF_VALUES_MIN: return "all-128";
    case CF_VALUES_MAX: return "all127";
    case CF_VALUES_EXTREME: return "extreme";
    case CF_VALUES_SMALL: return "small";
    default: return "?";
    }
}

void cf_describe_mm_case(const cf_mm_case *c, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    buf[0] = '\0';
    appendf(buf, size, "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " lda=%" PRId64
            " ldb=%" PRId64 " ldc=%" PRId64 " A=%s B=%s",
            c->c_dtype == SMM_DTYPE_I32 ? "gemm_s8s8s32" : "scaled_mm",
            c->m, c->n, c->k, c->lda, c->ldb, c->ldc,
            values_name(c->a_values), values_name(c->b_values));
    if (c->c_dtype != SMM_DTYPE_I32)
        appendf(buf, size, " c=%s scale_a=%s scale_b=%s bias=%s azp=%s%s",
                smm_dtype_name(c->c_dtype),
                c->scale_a_per_token ? "token" : "tensor",
                c->scale_b_per_channel ? "channel" : "tensor",
                c->bias == 2 ? "cancel" : c->bias ? "yes" : "no",
                c->azp == 2 ? "token" : c->azp ? "tensor" : "no",
                c->specials ? " specials" : "");
    appendf(buf, size, " offsets=");
    const int offs[3] = { c->a_off, c->b_off, c->c_off };
    for (int i = 0; i < 3; i++) {
        if (offs[i] == CF_OFFSET_RANDOM)
            appendf(buf, size, "%srandom", i ? "/" : "");
        else
            appendf(buf, size, "%s%d", i ? "/" : "", offs[i]);
    }
}

int cf_run_mm_case(smm_context *tested, smm_context *reference, const cf_mm_case *c,
                   uint64_t seed, char *msg, size_t msgsz)
{
    if (msg && msgsz)
        msg[0] = '\0';
    cf_rng r;
    cf_rng_seed(&r, seed);
    int scaled = c->c_dtype != SMM_DTYPE_I32;
    void *abase = NULL, *bbase = NULL;
    float *sabase = NULL, *sbbase = NULL, *biasbase = NULL;
    int32_t *azpbase = NULL;
    int result = CF_FAIL;

    int8_t *a = i8_buffer(&r, c->m, c->k, c->lda, c->a_values, c->a_off, &abase);
    int8_t *b = i8_buffer(&r, c->n, c->k, c->ldb, c->b_values, c->b_off, &bbase);
    if (!a || !b)
        goto oom;

    smm_scaled_mm_args args = {
        .m = c->m, .n = c->n, .k = c->k,
        .a = a, .lda = c->lda, .b = b, .ldb = c->ldb,
        .ldc = c->ldc, .c_dtype = c->c_dtype,
    };
    if (scaled) {
        int ea = (int)cf_rng_range(&r, -14, 0), eb = (int)cf_rng_range(&r, -14, 0);
        int64_t sa_len = c->scale_a_per_token ? c->m : 1;
        int64_t sb_len = c->scale_b_per_channel ? c->n : 1;
        float *sa = float_buffer(&r, sa_len, CF_OFFSET_RANDOM, &sabase);
        float *sb = float_buffer(&r, sb_len, CF_OFFSET_RANDOM, &sbbase);
        if (!sa || !sb)
            goto oom;
        for (int64_t i = 0; i < sa_len; i++)
            sa[i] = gen_scale(&r, ea, c->specials);
        for (int64_t i = 0; i < sb_len; i++)
            sb[i] = gen_scale(&r, eb, c->specials);
        args.scale_a = sa;
        args.scale_a_len = sa_len;
        args.scale_b = sb;
        args.scale_b_len = sb_len;

        int32_t *azp = NULL;
        if (c->azp) {
            int64_t len = c->azp == 2 ? c->m : 1;
            int huge = c->specials && cf_rng_range(&r, 0, 3) == 0;
            size_t o = offset_for(&r, CF_OFFSET_RANDOM, 4) / 4;
            azpbase = malloc((o + (size_t)len + CF_GUARD / 4) * sizeof(int32_t));
            if (!azpbase)
                goto oom;
            for (size_t i = 0; i < o + (size_t)len + CF_GUARD / 4; i++)
                azpbase[i] = INT32_MIN + 12345;   /* out-of-range reads show */
            azp = azpbase + o;
            for (int64_t i = 0; i < len; i++)
                azp[i] = huge ? (int32_t)(uint32_t)cf_rng_next(&r)
                              : (int32_t)cf_rng_range(&r, -128, 127);
            args.azp = azp;
            args.azp_len = len;
        } else {
            args.azp_len = cf_rng_range(&r, -3, 3);   /* ignored without azp */
        }

        if (c->bias) {
            float *bias = float_buffer(&r, c->n, CF_OFFSET_RANDOM, &biasbase);
            if (!bias)
                goto oom;
            for (int64_t j = 0; j < c->n; j++)
                bias[j] = gen_bias(&r, ea + eb + 12, c->specials);
            if (c->bias == 2 && c->m > 0) {
                /* bias[n] = -(sa * t) of row 0: fmaf leaves the exact
                 * rounding error of the product, a separate multiply and
                 * add leave 0. */
                int32_t z = azp ? azp[0] : 0;
                for (int64_t j = 0; j < c->n; j++) {
                    uint32_t acc = 0, colsum = 0;
                    for (int64_t kk = 0; kk < c->k; kk++) {
                        int8_t bv = b[element_offset(c->n, j, kk, c->ldb, 1)];
                        acc += (uint32_t)((int32_t)a[kk] * (int32_t)bv);
                        colsum += (uint32_t)(int32_t)bv;
                    }
                    acc -= (uint32_t)z * colsum;
                    int32_t acc32;
                    memcpy(&acc32, &acc, 4);
                    float t = (float)acc32 * sb[c->scale_b_per_channel ? j : 0];
                    float p = sa[0] * t;
                    bias[j] = -p;
                }
            }
            args.bias = bias;
        }
    }
    {
        int c_off = (int)offset_for(&r, c->c_off, dtype_size(c->c_dtype));
        result = cf_compare_mm(tested, reference, &args, c_off, msg, msgsz);
    }
    goto done;
oom:
    appendf(msg, msgsz, "out of memory generating the inputs");
done:
    free(abase);
    free(bbase);
    free(sabase);
    free(sbbase);
    free(biasbase);
    free(azpbase);
    return result;
}

/* --- quantizer inputs --- */

enum {
    ROW_ORDINARY, ROW_NONNEG, ROW_CONSTANT, ROW_ZERO, ROW_ALLNAN, ROW_INF,
    ROW_SUBNORMAL, ROW_OVERFLOW, ROW_TIES, ROW_SIGNS
};

static void store_x(void *x, smm_dtype d, size_t idx, float v)
{
    if (d == SMM_DTYPE_F32) {
        memcpy((char *)x + idx * 4, &v, 4);
    } else {
        uint16_t h = d == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
        memcpy((char *)x + idx * 2, &h, 2);
    }
}

void cf_describe_quant_case(const cf_quant_case *c, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    buf[0] = '\0';
    appendf(buf, size, "quantize x=%s mode=%s%s m=%" PRId64 " k=%" PRId64 " ldx=%" PRId64
            " ldq=%" PRId64 "%s%s",
            smm_dtype_name(c->x_dtype),
            c->mode == SMM_QUANT_STATIC_PER_TENSOR ? "static" : "dynamic",
            c->asym ? "-asym" : "-sym", c->m, c->k, c->ldx, c->ldq,
            c->row_classes ? " row-classes" : "", c->specials ? " specials" : "");
}

int cf_run_quant_case(smm_context *tested, smm_context *reference, const cf_quant_case *c,
                      uint64_t seed, char *msg, size_t msgsz)
{
    if (msg && msgsz)
        msg[0] = '\0';
    cf_rng r;
    cf_rng_seed(&r, seed);
    size_t xs = dtype_size(c->x_dtype);
    if (c->x_dtype != SMM_DTYPE_F32 && c->x_dtype != SMM_DTYPE_F16 &&
        c->x_dtype != SMM_DTYPE_BF16) {
        appendf(msg, msgsz, "cf_run_quant_case: bad x_dtype %d", (int)c->x_dtype);
        return CF_FAIL;
    }
    size_t xo = offset_for(&r, c->x_off, xs);
    size_t foot = footprint(c->m, c->k, c->ldx, xs);
    size_t total = xo + foot + CF_GUARD;
    unsigned char *xbase = malloc(total);
    if (!xbase) {
        appendf(msg, msgsz, "out of memory");
        return CF_FAIL;
    }
    for (size_t i = 0; i < total; i++)       /* garbage around and between rows */
        xbase[i] = (unsigned char)(cf_rng_next(&r) >> 56);
    void *x = xbase + xo;

    /* Exponent ranges that keep most values finite in the input type. */
    int emin = -40, emax = 40;
    if (c->x_dtype == SMM_DTYPE_F16) {
        emin = -16;
        emax = 14;
    }
    int e = (int)cf_rng_range(&r, emin, emax);
    int pow2_scale = cf_rng_range(&r, 0, 2) == 0;
    float s = pow2_scale ? ldexpf(1.0f, e - 7) : ldexpf(1.0f + rng_unit(&r), e - 7 + (int)cf_rng_range(&r, -2, 1));
    int es = e - 7;
    if (c->mode == SMM_QUANT_STATIC_PER_TENSOR && c->specials && cf_rng_range(&r, 0, 7) == 0) {
        switch (cf_rng_range(&r, 0, 7)) {
        case 0: s = 0.0f; break;
        case 1: s = -s; break;
        case 2: s = 1e-40f; break;
        case 3: s = FLT_TRUE_MIN; break;
        case 4: s = INFINITY; break;
        case 5: s = random_nan(&r); break;
        case 6: s = 1e30f; break;
        default: s = 3.0f; break;
        }
    }

    for (int64_t i = 0; i < c->m; i++) {
        int cls = ROW_ORDINARY;
        if (c->row_classes) {
            int pick = (int)cf_rng_range(&r, 0, 15);
            static const int map[16] = {
                ROW_ORDINARY, ROW_ORDINARY, ROW_ORDINARY, ROW_ORDINARY, ROW_ORDINARY,
                ROW_ORDINARY, ROW_NONNEG, ROW_CONSTANT, ROW_ZERO, ROW_ALLNAN, ROW_INF,
                ROW_SUBNORMAL, ROW_OVERFLOW, ROW_TIES, ROW_TIES, ROW_SIGNS
            };
            cls = map[pick];
        }
        int re = cls == ROW_ORDINARY || cls == ROW_NONNEG
                     ? e + (int)cf_rng_range(&r, -2, 2) : e;
        float range = ldexpf(1.0f, re);
        float cval = ldexpf(1.0f + rng_unit(&r), re) * ((cf_rng_next(&r) >> 63) ? -1.0f : 1.0f);
        int64_t inf_at = c->k > 0 ? cf_rng_range(&r, 0, c->k - 1) : 0;
        for (int64_t j = 0; j < c->k; j++) {
            float v;
            float sign = (cf_rng_next(&r) >> 63) ? -1.0f : 1.0f;
            switch (cls) {
            case ROW_NONNEG: v = range * rng_unit(&r); break;
            case ROW_CONSTANT: v = cval; break;
            case ROW_ZERO: v = sign * 0.0f; break;
            case ROW_ALLNAN: v = random_nan(&r); break;
            case ROW_INF:
                v = j == inf_at ? sign * INFINITY : sign * range * rng_unit(&r);
                break;
            case ROW_SUBNORMAL:
                v = sign * (c->x_dtype == SMM_DTYPE_F16 ? ldexpf(rng_unit(&r), -14)
                                                        : ldexpf(rng_unit(&r), -126));
                break;
            case ROW_OVERFLOW:
                v = sign * (c->x_dtype == SMM_DTYPE_F16 ? 65504.0f * (0.5f + rng_unit(&r) / 2)
                                                        : FLT_MAX * (0.5f + rng_unit(&r) / 2));
                break;
            case ROW_TIES:
                v = ldexpf((float)cf_rng_range(&r, -140, 140) + 0.5f, es);
                break;
            case ROW_SIGNS: v = sign * cval; break;
            default: v = sign * range * rng_unit(&r); break;
            }
            if (c->specials && cf_rng_range(&r, 0, 31) == 0)
                v = special_f32(&r);
            size_t idx = (size_t)((c->m > 1 ? i * c->ldx : 0) + j);
            store_x(x, c->x_dtype, idx, v);
            if (c->x_dtype != SMM_DTYPE_F32 && c->specials && cf_rng_range(&r, 0, 15) == 0) {
                uint16_t h = (uint16_t)cf_rng_next(&r);   /* any 16-bit pattern */
                memcpy((char *)x + idx * 2, &h, 2);
            }
        }
    }

    float scale_in = s;
    int32_t azp_in = 0;
    if (c->asym) {
        azp_in = (int32_t)cf_rng_range(&r, -128, 127);
        if (c->specials && cf_rng_range(&r, 0, 5) == 0)
            azp_in = (int32_t)(uint32_t)cf_rng_next(&r);
    }
    int32_t azp_flag = 0;
    smm_quantize_args q = {
        .m = c->m, .k = c->k, .x = x, .x_dtype = c->x_dtype, .ldx = c->ldx,
        .ldq = c->ldq, .mode = c->mode,
    };
    if (c->mode == SMM_QUANT_STATIC_PER_TENSOR) {
        q.scale = &scale_in;
        q.azp = c->asym ? &azp_in : NULL;
    } else {
        q.azp = c->asym ? &azp_flag : NULL;   /* non-NULL: produce zero points */
    }
    int out_off = (int)offset_for(&r, c->out_off, 1);
    int result = cf_compare_quantize(tested, reference, &q, out_off, msg, msgsz);
    free(xbase);
    return result;
}

/* ------------------------------------------------------------------ */
/* The battery                                                         */
/* ------------------------------------------------------------------ */

static const char *const group_names[] = {
    "gemm_s8s8s32", "scaled_mm_f32", "scaled_mm_f16", "scaled_mm_bf16",
    "quantize_f32", "quantize_f16", "quantize_bf16",
};
#define NGROUPS ((int)(sizeof group_names / sizeof group_names[0]))

const char *const *cf_group_names(int *count)
{
    if (count)
        *count = NGROUPS;
    return group_names;
}

static int group_cases(int g, int quick)
{
    if (g == 0)
        return quick ? 40 : 160;
    if (g <= 3)
        return quick ? 48 : 192;
    return quick ? 40 : 160;
}

/* Sizes around the usual blocking factors, and small ones. */
static const int64_t tail_pool[] = {
    1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33,
    47, 48, 49, 63, 64, 65, 95, 96, 97, 127, 128, 129, 191, 192, 193, 255, 256, 257,
};

static int64_t draw_dim(cf_rng *r, int64_t maxv)
{
    for (;;) {
        int64_t v;
        int c = (int)cf_rng_range(r, 0, 7);
        if (c == 0)
            v = cf_rng_range(r, 0, 3);
        else if (c <= 4)
            v = tail_pool[cf_rng_range(r, 0, (int64_t)(sizeof tail_pool / sizeof tail_pool[0]) - 1)];
        else
            v = cf_rng_range(r, 1, maxv);
        if (v <= maxv)
            return v;
    }
}

static int64_t draw_ld(cf_rng *r, int64_t rows, int64_t cols)
{
    if (rows == 1 && cf_rng_range(r, 0, 3) == 0)
        return cf_rng_range(r, 0, 1) ? 0 : cf_rng_range(r, 0, cols);   /* not read */
    if (cf_rng_range(r, 0, 1))
        return cols;
    return cols + cf_rng_range(r, 0, 17);
}

static cf_values draw_values(cf_rng *r)
{
    int c = (int)cf_rng_range(r, 0, 9);
    if (c < 4)
        return CF_VALUES_UNIFORM;
    if (c < 6)
        return CF_VALUES_EXTREME;
    if (c == 6)
        return CF_VALUES_MIN;
    if (c == 7)
        return CF_VALUES_MAX;
    return CF_VALUES_SMALL;
}

static void draw_mm_case(cf_rng *r, int g, int index, int quick, cf_mm_case *c)
{
    static const smm_dtype dt[4] = { SMM_DTYPE_I32, SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    memset(c, 0, sizeof *c);
    c->c_dtype = dt[g];
    int64_t maxdim = quick ? 130 : 300;
    double cap = quick ? 1.5e6 : 1.2e7;
    if (index % 24 == 7) {
        /* K at and past the no-wrap bound 131071, few rows. */
        static const int64_t ks[4] = { 131071, 131072, 131073, 0 };
        c->k = ks[(index / 24) % 4];
        if (c->k == 0)
            c->k = 131072 + cf_rng_range(r, 1, 8000);
        c->m = cf_rng_range(r, 1, 3);
        c->n = cf_rng_range(r, 1, 4);
        c->a_values = cf_rng_range(r, 0, 3) ? (cf_values)cf_rng_range(r, 1, 3) : draw_values(r);
        c->b_values = cf_rng_range(r, 0, 3) ? (cf_values)cf_rng_range(r, 1, 3) : draw_values(r);
    } else {
        int64_t kmax = (!quick && cf_rng_range(r, 0, 7) == 0) ? 1100 : maxdim;
        for (int tries = 0;; tries++) {
            c->m = draw_dim(r, maxdim);
            c->n = draw_dim(r, maxdim);
            c->k = draw_dim(r, kmax);
            if ((double)c->m * (double)c->n * (double)c->k <= cap)
                break;
            if (tries > 20) {
                c->m = draw_dim(r, 40);
                break;
            }
        }
        c->a_values = draw_values(r);
        c->b_values = draw_values(r);
    }
    c->lda = draw_ld(r, c->m, c->k);
    c->ldb = draw_ld(r, c->n, c->k);
    c->ldc = draw_ld(r, c->m, c->n);
    if (g > 0) {
        int combo = index % 24;   /* every scale / bias / azp combination */
        c->scale_a_per_token = combo & 1;
        c->scale_b_per_channel = (combo >> 1) & 1;
        c->bias = (combo >> 2) & 1;
        c->azp = (combo >> 3) % 3;
        if (c->bias && cf_rng_range(r, 0, 3) == 0)
            c->bias = 2;
        c->specials = (int)cf_rng_range(r, 0, 1);
    }
    c->a_off = c->b_off = c->c_off = CF_OFFSET_RANDOM;
}

static void draw_quant_case(cf_rng *r, int g, int index, int quick, cf_quant_case *c)
{
    static const smm_dtype dt[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    memset(c, 0, sizeof *c);
    c->x_dtype = dt[g - 4];
    c->mode = (index & 2) ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
    c->asym = index & 1;
    int64_t maxdim = quick ? 200 : 300;
    c->m = draw_dim(r, maxdim);
    c->k = (!quick && cf_rng_range(r, 0, 7) == 0) ? cf_rng_range(r, 300, 5000)
                                                   : draw_dim(r, quick ? 300 : 1100);
    c->ldx = draw_ld(r, c->m, c->k);
    c->ldq = draw_ld(r, c->m, c->k);
    c->row_classes = cf_rng_range(r, 0, 3) != 0;
    c->specials = (int)cf_rng_range(r, 0, 1);
    c->x_off = c->out_off = CF_OFFSET_RANDOM;
}

static int run_group_index(smm_context *tested, smm_context *reference, const cf_options *opt,
                           int g, cf_report *report, int base_index, int total)
{
    cf_group_result *gr = NULL;
    if (report->ngroups < CF_MAX_GROUPS) {
        gr = &report->groups[report->ngroups++];
        memset(gr, 0, sizeof *gr);
        gr->group = group_names[g];
    }
    int n = group_cases(g, opt->quick);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        uint64_t seed = case_seed(opt->seed, g, i);
        cf_rng r;
        cf_rng_seed(&r, seed);
        char desc[384], msg[640];
        cf_mm_case mc;
        cf_quant_case qc;
        if (g < 4) {
            draw_mm_case(&r, g, i, opt->quick, &mc);
            cf_describe_mm_case(&mc, desc, sizeof desc);
        } else {
            draw_quant_case(&r, g, i, opt->quick, &qc);
            cf_describe_quant_case(&qc, desc, sizeof desc);
        }
        if (opt->progress) {
            char name[480];
            snprintf(name, sizeof name, "%s #%d: %s", group_names[g], i, desc);
            opt->progress(name, base_index + i, total, opt->user);
        }
        uint64_t data_seed = cf_rng_next(&r);
        int res = g < 4 ? cf_run_mm_case(tested, reference, &mc, data_seed, msg, sizeof msg)
                        : cf_run_quant_case(tested, reference, &qc, data_seed, msg, sizeof msg);
        if (gr)
            gr->cases++;
        if (res == CF_SKIP) {
            if (gr)
                gr->skipped++;
            continue;
        }
        if (res == CF_PASS)
            continue;
        failures++;
        if (gr)
            gr->failures++;
        if (report->first_failure[0] == '\0')
            appendf(report->first_failure, sizeof report->first_failure,
                    "%s case %d: %s; case: %s (case seed 0x%016" PRIx64
                    "; replay with SMM_TEST_SEED=0x%016" PRIx64 "%s)",
                    group_names[g], i, msg, desc, seed, opt->seed, opt->quick ? ", quick" : "");
    }
    report->failures += failures;
    return failures;
}

static int begin(smm_context *tested, smm_context *reference, const cf_options *opt,
                 cf_report *report, int *saved_threads)
{
    if (!report)
        return -1;
    if (!tested || !reference || !opt) {
        report->failures++;
        snprintf(report->first_failure, sizeof report->first_failure,
                 "cf_run_battery: NULL context or options");
        return -1;
    }
    *saved_threads = smm_context_get_num_threads(tested);
    smm_status st = smm_context_set_num_threads(tested, opt->num_threads);
    if (st != SMM_OK) {
        report->failures++;
        snprintf(report->first_failure, sizeof report->first_failure,
                 "smm_context_set_num_threads(%d): %s", opt->num_threads, smm_strerror(st));
        return -1;
    }
    return 0;
}

int cf_run_group(smm_context *tested, smm_context *reference, const cf_options *opt,
                 const char *group, cf_report *report)
{
    int g = -1;
    for (int i = 0; i < NGROUPS && group; i++)
        if (strcmp(group, group_names[i]) == 0)
            g = i;
    if (g < 0 || !report)
        return -1;
    int saved;
    if (begin(tested, reference, opt, report, &saved) != 0)
        return report->failures;
    int f = run_group_index(tested, reference, opt, g, report, 0, group_cases(g, opt->quick));
    smm_context_set_num_threads(tested, saved);
    return f;
}

int cf_run_battery(smm_context *tested, smm_context *reference, const cf_options *opt,
                   cf_report *report)
{
    if (!report)
        return -1;
    memset(report, 0, sizeof *report);
    int saved;
    if (begin(tested, reference, opt, report, &saved) != 0)
        return report->failures;
    int total = 0;
    for (int g = 0; g < NGROUPS; g++)
        total += group_cases(g, opt->quick);
    int index = 0;
    for (int g = 0; g < NGROUPS; g++) {
        run_group_index(tested, reference, opt, g, report, index, total);
        index += group_cases(g, opt->quick);
    }
    smm_context_set_num_threads(tested, saved);
    return report->failures;
}
