/*
 * bench_device.c - `scaledmm bench` through the device API (smm_malloc,
 * smm_memcpy, asynchronous launches, smm_synchronize), as GPU contexts
 * need it, and the device's copy bandwidth (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buffers.h"
#include "timer.h"

#define RUN_TARGET_S 0.02    /* one timed run lasts about this long */
#define MIN_LAUNCHES 3
#define MAX_LAUNCHES 2000
#define COPY_RUNS 5          /* timed runs of the copy bandwidth (median) */
#define COPIES_PER_RUN 4
#define COPY_MAX ((size_t)1 << 30)      /* on a GPU */
#define COPY_MAX_HOST ((size_t)256 << 20) /* --device-api on a CPU backend */
#define COPY_MIN ((size_t)64 << 20)

/* The copy kind for ctx: on a context without a device (--device-api on
 * a CPU backend, or AUTO without a GPU) smm_malloc memory is host memory. */
static smm_memcpy_kind kind_for(smm_context *ctx, smm_memcpy_kind kind)
{
    return smm_context_device_backend(ctx) != SMM_BACKEND_AUTO ? kind : SMM_MEMCPY_HOST_TO_HOST;
}

int bench_weights_to_device(bench_weights *w, smm_context *ctx, int pack, char *err,
                            size_t errsize)
{
    const size_t nk = (size_t)w->n * (size_t)w->k, sb = (size_t)w->n * sizeof(float);
    const size_t per_copy = nk + sb;
    const smm_memcpy_kind h2d = kind_for(ctx, SMM_MEMCPY_HOST_TO_DEVICE);
    smm_status st = SMM_OK;
    int c;

    w->dev_ctx = ctx;
    w->dev_copies = (int)(BENCH_DEVICE_ROTATE_BYTES / (per_copy ? per_copy : 1) + 1);
    w->dev_b = calloc((size_t)w->dev_copies, sizeof *w->dev_b);
    w->dev_scale_b = calloc((size_t)w->dev_copies, sizeof *w->dev_scale_b);
    if (!w->dev_b || !w->dev_scale_b) {
        snprintf(err, errsize, "out of host memory");
        goto fail;
    }
    for (c = 0; c < w->dev_copies; c++) {
        void *b = NULL, *s = NULL;
        st = smm_malloc(ctx, nk, &b);
        w->dev_b[c] = b;
        if (st == SMM_OK) {
            st = smm_malloc(ctx, sb, &s);
            w->dev_scale_b[c] = s;
        }
        if (st == SMM_OK)
            st = smm_memcpy(ctx, b, w->b[0], nk, h2d);
        if (st == SMM_OK)
            st = smm_memcpy(ctx, s, w->scale_b[0], sb, h2d);
        if (st != SMM_OK) {
            snprintf(err, errsize, "device weight copy %d of %d (%zu MiB each): %s (%s)",
                     c + 1, w->dev_copies, per_copy >> 20, smm_strerror(st),
                     smm_context_last_error(ctx));
            goto fail;
        }
    }
    st = smm_synchronize(ctx);
    if (st != SMM_OK) {
        snprintf(err, errsize, "smm_synchronize after the weight upload: %s (%s)",
                 smm_strerror(st), smm_context_last_error(ctx));
        goto fail;
    }
    if (pack) {
        w->dev_packed = calloc((size_t)w->dev_copies, sizeof *w->dev_packed);
        if (!w->dev_packed) {
            snprintf(err, errsize, "out of host memory");
            goto fail;
        }
        for (c = 0; c < w->dev_copies; c++) {
            st = smm_pack_b(ctx, w->n, w->k, w->dev_b[c], w->k, &w->dev_packed[c]);
            if (st != SMM_OK) {
                snprintf(err, errsize, "smm_pack_b of device weight copy %d of %d: %s (%s)",
                         c + 1, w->dev_copies, smm_strerror(st), smm_context_last_error(ctx));
                goto fail;
            }
            smm_free(ctx, w->dev_b[c]);
            w->dev_b[c] = NULL;
        }
    }
    return 0;
fail:
    bench_weights_free_device(w);
    return -1;
}

void bench_weights_free_device(bench_weights *w)
{
    int c;
    for (c = 0; w->dev_packed && c < w->dev_copies; c++)
        smm_packed_b_destroy(w->dev_packed[c]);
    for (c = 0; w->dev_b && c < w->dev_copies; c++)
        smm_free(w->dev_ctx, w->dev_b[c]);
    for (c = 0; w->dev_scale_b && c < w->dev_copies; c++)
        smm_free(w->dev_ctx, w->dev_scale_b[c]);
    free(w->dev_packed);
    free(w->dev_b);
    free(w->dev_scale_b);
    w->dev_packed = NULL;
    w->dev_b = NULL;
    w->dev_scale_b = NULL;
    w->dev_copies = 0;
    w->dev_ctx = NULL;
}

/* Device buffers of one point. */
typedef struct dev_bufs {
    uint16_t *x;      /* M x K bf16 activations */
    int8_t *q;        /* M x K int8 activations */
    float *scale_a;   /* M per-token scales */
    uint16_t *c;      /* M x N bf16 output */
} dev_bufs;

enum { PART_QUANT = 1, PART_MM = 2, PART_LAYER = 3 };

/* Queues `launches` layer parts (quantize, mm or both) on the device,
 * weight copies from *copy on, rotating. */
static smm_status launch(const bench_config *cfg, const bench_weights *w, int64_t m,
                         const dev_bufs *d, int part, int launches, int *copy,
                         const char **what)
{
    smm_status st = SMM_OK;
    int i;
    for (i = 0; i < launches && st == SMM_OK; i++) {
        smm_quantize_args qa;
        smm_scaled_mm_args ma;
        bench_layer_args(m, w->n, w->k, d->x, d->q, d->scale_a, w->dev_b[*copy],
                         w->dev_scale_b[*copy], d->c, &qa, &ma);
        if (w->dev_packed) {
            ma.b = NULL;
            ma.b_packed = w->dev_packed[*copy];
        }
        if (part == PART_LAYER) {   /* the layer in one call */
            smm_linear_args la;
            bench_linear_args(&qa, &ma, &la);
            st = smm_linear(cfg->ctx, &la);
            *what = "smm_linear";
        } else if (part == PART_QUANT) {
            st = smm_quantize_i8(cfg->ctx, &qa);
            *what = "smm_quantize_i8";
        } else {
            st = smm_scaled_mm(cfg->ctx, &ma);
            *what = "smm_scaled_mm";
        }
        *copy = (*copy + 1) % w->dev_copies;
    }
    return st;
}

/* Median seconds per launch of `part` over up to cfg->repeats runs of
 * `launches` launches + smm_synchronize. Returns the status; *runs, *sec. */
static smm_status time_part(const bench_config *cfg, const bench_weights *w, int64_t m,
                            const dev_bufs *d, int part, int launches, double *samples,
                            int *copy, int *runs, double *sec, const char **what)
{
    smm_status st = SMM_OK;
    double spent = 0.0;
    int r;
    *runs = 0;
    for (r = 0; r < cfg->repeats; r++) {
        double t0 = timer_now(), t;
        st = launch(cfg, w, m, d, part, launches, copy, what);
        if (st == SMM_OK) {
            st = smm_synchronize(cfg->ctx);
            *what = "smm_synchronize";
        }
        if (st != SMM_OK)
            return st;
        t = timer_now() - t0;
        samples[r] = t / launches;
        spent += t;
        *runs = r + 1;
        if (spent >= cfg->max_time)
            break;
    }
    *sec = bench_median(samples, *runs);
    return SMM_OK;
}

int bench_point_device(const bench_config *cfg, const bench_weights *w, int64_t m,
                       uint64_t tag_model, uint64_t tag_layer, bench_result *res)
{
    const int64_t n = w->n, k = w->k;
    const size_t mk = (size_t)(m * k), mn = (size_t)(m * n);
    smm_context *ctx = cfg->ctx;
    const smm_memcpy_kind h2d = kind_for(ctx, SMM_MEMCPY_HOST_TO_DEVICE);
    const smm_memcpy_kind d2h = kind_for(ctx, SMM_MEMCPY_DEVICE_TO_HOST);
    dev_bufs d = {0};
    void *p;
    uint16_t *x = NULL, *c = NULL;
    int8_t *q = NULL;
    float *scale_a = NULL;
    double *samples = NULL, t0, t;
    const char *what = "smm_malloc";
    smm_status st;
    cf_rng rng;
    int copy = 0, launches, runs, rc = -1, i;

    memset(res, 0, sizeof *res);
    if (w->dev_copies < 1) {
        snprintf(res->message, sizeof res->message, "no device weights");
        return -1;
    }
    x = buf_alloc(mk * sizeof(uint16_t));
    q = buf_alloc(mk);
    scale_a = buf_alloc((size_t)m * sizeof(float));
    c = buf_alloc(mn * sizeof(uint16_t));
    samples = malloc((size_t)cfg->repeats * sizeof *samples);
    if (!x || !q || !scale_a || !c || !samples) {
        snprintf(res->message, sizeof res->message, "out of host memory (M = %lld)",
                 (long long)m);
        goto done;
    }
    /* The same activations as the host path (bench_point). */
    buf_rng(&rng, cfg->seed, tag_model, tag_layer, (uint64_t)m);
    buf_fill_bf16(&rng, x, mk, 4.0f);

    if ((st = smm_malloc(ctx, mk * sizeof(uint16_t), &p)) != SMM_OK)
        goto failed;
    d.x = p;
    if ((st = smm_malloc(ctx, mk, &p)) != SMM_OK)
        goto failed;
    d.q = p;
    if ((st = smm_malloc(ctx, (size_t)m * sizeof(float), &p)) != SMM_OK)
        goto failed;
    d.scale_a = p;
    if ((st = smm_malloc(ctx, mn * sizeof(uint16_t), &p)) != SMM_OK)
        goto failed;
    d.c = p;
    what = "smm_memcpy";
    if ((st = smm_memcpy(ctx, d.x, x, mk * sizeof(uint16_t), h2d)) != SMM_OK)
        goto failed;

    /* Warm-up, then calibrate the launches per run on one layer. */
    if ((st = launch(cfg, w, m, &d, PART_LAYER, 1, &copy, &what)) != SMM_OK)
        goto failed;
    what = "smm_synchronize";
    if ((st = smm_synchronize(ctx)) != SMM_OK)
        goto failed;
    t0 = timer_now();
    if ((st = launch(cfg, w, m, &d, PART_LAYER, MIN_LAUNCHES, &copy, &what)) != SMM_OK)
        goto failed;
    what = "smm_synchronize";
    if ((st = smm_synchronize(ctx)) != SMM_OK)
        goto failed;
    t = (timer_now() - t0) / MIN_LAUNCHES;
    launches = t > 0.0 ? (int)(RUN_TARGET_S / t) + 1 : MAX_LAUNCHES;
    if (launches < MIN_LAUNCHES)
        launches = MIN_LAUNCHES;
    if (launches > MAX_LAUNCHES)
        launches = MAX_LAUNCHES;
    res->launches = launches;

    if ((st = time_part(cfg, w, m, &d, PART_QUANT, launches, samples, &copy, &runs,
                        &res->quant_s, &what)) != SMM_OK ||
        (st = time_part(cfg, w, m, &d, PART_MM, launches, samples, &copy, &runs,
                        &res->mm_s, &what)) != SMM_OK ||
        (st = time_part(cfg, w, m, &d, PART_LAYER, launches, samples, &copy, &runs,
                        &res->layer_s, &what)) != SMM_OK)
        goto failed;
    res->runs = runs;
    for (i = 0; i < runs; i++)
        res->run_s[i] = samples[i] * launches;

    /* Poison the device outputs, run once more, read back and verify. The
     * device copies all hold host copy 0's bits. */
    memset(q, 0x5A, mk);
    memset(scale_a, 0xFF, (size_t)m * sizeof(float));
    memset(c, 0xFF, mn * sizeof(uint16_t));
    what = "smm_memcpy";
    if ((st = smm_memcpy(ctx, d.q, q, mk, h2d)) != SMM_OK ||
        (st = smm_memcpy(ctx, d.scale_a, scale_a, (size_t)m * sizeof(float), h2d)) != SMM_OK ||
        (st = smm_memcpy(ctx, d.c, c, mn * sizeof(uint16_t), h2d)) != SMM_OK)
        goto failed;
    if ((st = launch(cfg, w, m, &d, PART_LAYER, 1, &copy, &what)) != SMM_OK)
        goto failed;
    what = "smm_memcpy (device to host)";
    if ((st = smm_memcpy(ctx, q, d.q, mk, d2h)) != SMM_OK ||
        (st = smm_memcpy(ctx, scale_a, d.scale_a, (size_t)m * sizeof(float), d2h)) != SMM_OK ||
        (st = smm_memcpy(ctx, c, d.c, mn * sizeof(uint16_t), d2h)) != SMM_OK)
        goto failed;
    what = "smm_synchronize";
    if ((st = smm_synchronize(ctx)) != SMM_OK)
        goto failed;
    if (bench_verify(cfg, w, 0, m, x, q, scale_a, c, res) != 0)
        goto done;
    rc = 0;
    goto done;
failed:
    snprintf(res->message, sizeof res->message, "%s: %s (%s)", what, smm_strerror(st),
             smm_context_last_error(ctx));
done:
    smm_free(ctx, d.x);
    smm_free(ctx, d.q);
    smm_free(ctx, d.scale_a);
    smm_free(ctx, d.c);
    free(x);
    free(q);
    free(scale_a);
    free(c);
    free(samples);
    return rc;
}

void bench_device_measure(bench_device *d, smm_context *ctx)
{
    const smm_memcpy_kind d2d = kind_for(ctx, SMM_MEMCPY_DEVICE_TO_DEVICE);
    void *src = NULL, *dst = NULL;
    double samples[COPY_RUNS], start = timer_now();
    size_t bytes;
    smm_status st = SMM_OK;
    int r, i;

    memset(d, 0, sizeof *d);
    for (bytes = d2d == SMM_MEMCPY_DEVICE_TO_DEVICE ? COPY_MAX : COPY_MAX_HOST;
         bytes >= COPY_MIN; bytes /= 2) {
        if (smm_malloc(ctx, bytes, &src) == SMM_OK && smm_malloc(ctx, bytes, &dst) == SMM_OK)
            break;
        smm_free(ctx, src);
        smm_free(ctx, dst);
        src = dst = NULL;
    }
    if (!src) {
        snprintf(d->how, sizeof d->how, "not measured (cannot allocate 2 x %zu MiB: %s)",
                 COPY_MIN >> 20, smm_context_last_error(ctx));
        return;
    }
    /* Warm-up (pages touched, the copy engine or kernel loaded). */
    st = smm_memcpy(ctx, dst, src, bytes, d2d);
    if (st == SMM_OK)
        st = smm_synchronize(ctx);
    for (r = 0; r < COPY_RUNS && st == SMM_OK; r++) {
        double t0 = timer_now();
        for (i = 0; i < COPIES_PER_RUN && st == SMM_OK; i++)
            st = smm_memcpy(ctx, (i & 1) ? src : dst, (i & 1) ? dst : src, bytes,
                            d2d);
        if (st == SMM_OK)
            st = smm_synchronize(ctx);
        samples[r] = timer_now() - t0;
    }
    if (st != SMM_OK) {
        snprintf(d->how, sizeof d->how, "not measured (device-to-device smm_memcpy: %s: "
                 "%.80s)", smm_strerror(st), smm_context_last_error(ctx));
    } else {
        d->copy_bytes = bytes;
        d->copies = COPIES_PER_RUN;
        d->copy_gbps = 2.0 * (double)bytes * COPIES_PER_RUN /
                       bench_median(samples, COPY_RUNS) * 1e-9;
    }
    smm_free(ctx, src);
    smm_free(ctx, dst);
    d->copy_s = timer_now() - start;
}
