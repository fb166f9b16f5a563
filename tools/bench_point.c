/*
 * bench_point.c - times one w8a8 linear layer at one M and has it verified
 * and compared with the SGEMM baseline (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_onednn.h"
#include "buffers.h"
#include "timer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct point_bufs {
    uint16_t *x;      /* M x K bf16 activations */
    int8_t *q;        /* M x K int8 activations */
    float *scale_a;   /* M per-token scales */
    uint16_t *c;      /* M x N bf16 output */
    float *a32;       /* M x K float activations (baseline) */
    float *c32;       /* M x N float output (baseline) */
} point_bufs;

static void free_bufs(point_bufs *p)
{
    free(p->x);
    free(p->q);
    free(p->scale_a);
    free(p->c);
    free(p->a32);
    free(p->c32);
}

/* Poison the outputs so that anything left unwritten shows up in the
 * bitwise check (0xFFFF is a bf16 NaN the library never writes: its NaNs
 * are 0x7FFF). */
static void poison(const point_bufs *p, int64_t m, int64_t n, int64_t k)
{
    memset(p->q, 0x5A, (size_t)(m * k));
    memset(p->scale_a, 0xFF, (size_t)m * sizeof(float));
    memset(p->c, 0xFF, (size_t)(m * n) * sizeof(uint16_t));
}

void bench_layer_args(int64_t m, int64_t n, int64_t k, const uint16_t *x, int8_t *q,
                      float *scale_a, const int8_t *b, const float *scale_b, uint16_t *c,
                      smm_quantize_args *qa, smm_scaled_mm_args *ma)
{
    memset(qa, 0, sizeof *qa);
    memset(ma, 0, sizeof *ma);
    qa->m = m;
    qa->k = k;
    qa->x = x;
    qa->x_dtype = SMM_DTYPE_BF16;
    qa->ldx = k;
    qa->q = q;
    qa->ldq = k;
    qa->scale = scale_a;
    qa->azp = NULL;  /* symmetric */
    qa->mode = SMM_QUANT_DYNAMIC_PER_TOKEN;

    ma->m = m;
    ma->n = n;
    ma->k = k;
    ma->a = q;
    ma->lda = k;
    ma->b = b;
    ma->ldb = k;
    ma->scale_a = scale_a;
    ma->scale_a_len = m;
    ma->scale_b = scale_b;
    ma->scale_b_len = n;
    ma->bias = NULL;
    ma->azp = NULL;
    ma->c = c;
    ma->ldc = n;
    ma->c_dtype = SMM_DTYPE_BF16;
}

void bench_linear_args(const smm_quantize_args *qa, const smm_scaled_mm_args *ma,
                       smm_linear_args *la)
{
    memset(la, 0, sizeof *la);
    la->m = ma->m;
    la->n = ma->n;
    la->k = ma->k;
    la->x = qa->x;
    la->x_dtype = qa->x_dtype;
    la->ldx = qa->ldx;
    la->mode = qa->mode;
    la->asymmetric = qa->azp != NULL;
    la->x_scale = qa->scale;
    la->x_azp = qa->azp;
    la->q = qa->q;
    la->ldq = qa->ldq;
    la->b = ma->b;
    la->ldb = ma->ldb;
    la->b_packed = ma->b_packed;
    la->scale_b = ma->scale_b;
    la->scale_b_len = ma->scale_b_len;
    la->bias = ma->bias;
    la->c = ma->c;
    la->ldc = ma->ldc;
    la->c_dtype = ma->c_dtype;
}

/* The quantize and scaled_mm arguments of one layer with weight copy
 * `copy` (packed when the weights are). */
static void copy_args(const bench_weights *w, int copy, int64_t m, const point_bufs *p,
                      smm_quantize_args *qa, smm_scaled_mm_args *ma)
{
    bench_layer_args(m, w->n, w->k, p->x, p->q, p->scale_a, w->b[copy], w->scale_b[copy],
                     p->c, qa, ma);
    if (w->packed) {
        ma->b = NULL;
        ma->b_packed = w->packed[copy];
    }
}

/* One layer three ways: smm_linear (the layer in one call) with weight
 * copy `copy_l`, then smm_quantize_i8 and smm_scaled_mm alone with copy
 * `copy_m` (another copy, so that neither reads weights the other left in
 * cache). Times them if t is non-NULL (t[0]: quantize, t[1]: mm, t[2]:
 * the layer). The outputs left are those of copy_m's calls. */
static smm_status run_layer(const bench_config *cfg, const bench_weights *w, int copy_l,
                            int copy_m, int64_t m, const point_bufs *p, double t[3],
                            const char **what)
{
    smm_quantize_args qa;
    smm_scaled_mm_args ma;
    smm_linear_args la;
    smm_status st;
    double t0, t1, t2, t3;

    copy_args(w, copy_l, m, p, &qa, &ma);
    bench_linear_args(&qa, &ma, &la);
    copy_args(w, copy_m, m, p, &qa, &ma);
    t0 = timer_now();
    st = smm_linear(cfg->ctx, &la);
    t1 = timer_now();
    if (st != SMM_OK) {
        *what = "smm_linear";
        return st;
    }
    st = smm_quantize_i8(cfg->ctx, &qa);
    t2 = timer_now();
    if (st != SMM_OK) {
        *what = "smm_quantize_i8";
        return st;
    }
    st = smm_scaled_mm(cfg->ctx, &ma);
    t3 = timer_now();
    if (st != SMM_OK) {
        *what = "smm_scaled_mm";
        return st;
    }
    if (t) {
        t[0] = t2 - t1;
        t[1] = t3 - t2;
        t[2] = t1 - t0;
    }
    return SMM_OK;
}

int bench_point(const bench_config *cfg, const bench_weights *w, int64_t m,
                uint64_t tag_model, uint64_t tag_layer, bench_result *res)
{
    const int64_t n = w->n, k = w->k;
    point_bufs p = {0};
    double *tq = NULL, *tm = NULL, *tl = NULL, spent = 0.0;
    const char *what = "";
    cf_rng rng;
    smm_status st;
    int i, runs = 0, copy = 0, rc = -1;
    size_t mk = (size_t)(m * k), mn = (size_t)(m * n), j;

    if (cfg->device)
        return bench_point_device(cfg, w, m, tag_model, tag_layer, res);
    memset(res, 0, sizeof *res);
    p.x = buf_alloc(mk * sizeof(uint16_t));
    p.q = buf_alloc(mk);
    p.scale_a = buf_alloc((size_t)m * sizeof(float));
    p.c = buf_alloc(mn * sizeof(uint16_t));
    tq = malloc((size_t)cfg->repeats * sizeof *tq);
    tm = malloc((size_t)cfg->repeats * sizeof *tm);
    tl = malloc((size_t)cfg->repeats * sizeof *tl);
    if (cfg->baseline)
        p.a32 = buf_alloc(mk * sizeof(float));
    if (cfg->baseline || w->onednn)
        p.c32 = buf_alloc(mn * sizeof(float));
    if (!p.x || !p.q || !p.scale_a || !p.c || !tq || !tm || !tl ||
        (cfg->baseline && !p.a32) || ((cfg->baseline || w->onednn) && !p.c32)) {
        snprintf(res->message, sizeof res->message, "out of memory (M = %lld)",
                 (long long)m);
        goto done;
    }
    /* Activations: bf16 in [-4, 4]; the per-token scales then differ a
     * little from row to row, as real ones do. */
    buf_rng(&rng, cfg->seed, tag_model, tag_layer, (uint64_t)m);
    buf_fill_bf16(&rng, p.x, mk, 4.0f);

    /* Warm-up (threads started, pages touched), then the timed runs. */
    poison(&p, m, n, k);
    st = run_layer(cfg, w, 0, w->copies > 1 ? 1 : 0, m, &p, NULL, &what);
    for (i = 0; st == SMM_OK && i < cfg->repeats; i++) {
        double t[3];
        const int copy_l = (2 * i + 2) % w->copies;
        copy = (2 * i + 3) % w->copies;
        poison(&p, m, n, k);
        st = run_layer(cfg, w, copy_l, copy, m, &p, t, &what);
        if (st != SMM_OK)
            break;
        tq[i] = t[0];
        tm[i] = t[1];
        tl[i] = t[2];
        spent += t[0] + t[1] + t[2];
        runs = i + 1;
        if (spent >= cfg->max_time)
            break;
    }
    if (st != SMM_OK) {
        snprintf(res->message, sizeof res->message, "%s: %s (%s)", what,
                 smm_strerror(st), smm_context_last_error(cfg->ctx));
        goto done;
    }
    res->runs = runs;
    memcpy(res->run_s, tl, (size_t)runs * sizeof *tl);
    res->quant_s = bench_median(tq, runs);
    res->mm_s = bench_median(tm, runs);
    res->layer_s = bench_median(tl, runs);

    /* The output of the last timed run is what gets verified. */
    if (bench_verify(cfg, w, copy, m, p.x, p.q, p.scale_a, p.c, res) != 0)
        goto done;

    if (cfg->baseline) {
        for (j = 0; j < mk; j++)
            p.a32[j] = smm_bf16_to_f32(p.x[j]);
        bench_sgemm(cfg, w, m, p.a32, p.c32, res);
        if (res->sgemm_runs == 0) {
            snprintf(res->message, sizeof res->message, "out of memory (SGEMM timings)");
            goto done;
        }
    }
    /* oneDNN multiplies the int8 activations our quantizer wrote (checked
     * above) by the same weights. A failure there is the baseline's, not
     * ours: it leaves the oneDNN figures empty and says why in onednn_impl. */
    if (w->onednn && bench_onednn_time(w->onednn, cfg, w, m, p.q, p.c32, res) != 0) {
        snprintf(res->onednn_impl, sizeof res->onednn_impl, "error: %.140s", res->message);
        res->message[0] = '\0';
    }
    rc = 0;
done:
    free_bufs(&p);
    free(tq);
    free(tm);
    free(tl);
    return rc;
}
