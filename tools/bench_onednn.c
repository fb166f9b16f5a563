/*
 * bench_onednn.c - oneDNN's s8 x s8 matmul timed beside ours in
 * `scaledmm bench` (bench_onednn.h). Linked into the tool only.
 */
#include "config.h"
#include "bench_onednn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SMM_HAVE_ONEDNN

int bench_onednn_built(void)
{
    return 0;
}

void bench_onednn_describe(char *buf, size_t size)
{
    snprintf(buf, size, "not built in (configure found no oneDNN 1.x/2.x, or "
             "--with-onednn=no; on Debian: apt-get install libdnnl-dev)");
}

bench_onednn *bench_onednn_new(const bench_weights *w, char *err, size_t errsize)
{
    (void)w;
    snprintf(err, errsize, "the tool was built without oneDNN");
    return NULL;
}

void bench_onednn_free(bench_onednn *o)
{
    (void)o;
}

int bench_onednn_time(bench_onednn *o, const bench_config *cfg, const bench_weights *w,
                      int64_t m, const int8_t *q, float *dst, bench_result *res)
{
    (void)o, (void)cfg, (void)w, (void)m, (void)q, (void)dst;
    res->onednn_runs = 0;
    snprintf(res->message, sizeof res->message, "the tool was built without oneDNN");
    return -1;
}

#else /* SMM_HAVE_ONEDNN */

#ifdef SMM_ONEDNN_ONEAPI_HEADER
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#else
#include <dnnl.h>
#include <dnnl_debug.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#include "timer.h"

struct bench_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    int copies;
    int have_layout;             /* wmd below is valid, wmem holds copies */
    dnnl_memory_desc_t wmd;      /* layout of the reordered copies */
    dnnl_memory_t *wmem;         /* copies: weights in oneDNN's layout */
    dnnl_memory_t *smem;         /* copies: per-N scales (our buffers) */
};

int bench_onednn_built(void)
{
    return 1;
}

void bench_onednn_describe(char *buf, size_t size)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, size, "oneDNN %d.%d.%d (%s runtime), ISA %s; s8 x s8 matmul, weights "
             "reordered once into the layout it prefers, per-channel output scales "
             "only (no per-token scale), f32 output", v->major, v->minor, v->patch,
             dnnl_runtime2str(v->cpu_runtime), dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
}

static void free_copies(bench_onednn *o)
{
    int c;
    for (c = 0; o->wmem && c < o->copies; c++)
        if (o->wmem[c])
            dnnl_memory_destroy(o->wmem[c]);
    if (o->wmem)
        memset(o->wmem, 0, (size_t)o->copies * sizeof *o->wmem);
    o->have_layout = 0;
}

void bench_onednn_free(bench_onednn *o)
{
    int c;
    if (!o)
        return;
    free_copies(o);
    for (c = 0; o->smem && c < o->copies; c++)
        if (o->smem[c])
            dnnl_memory_destroy(o->smem[c]);
    free(o->wmem);
    free(o->smem);
    if (o->stream)
        dnnl_stream_destroy(o->stream);
    if (o->engine)
        dnnl_engine_destroy(o->engine);
    free(o);
}

bench_onednn *bench_onednn_new(const bench_weights *w, char *err, size_t errsize)
{
    bench_onednn *o = calloc(1, sizeof *o);
    dnnl_memory_desc_t smd;
    const dnnl_dims_t sdims = { w->n };
    dnnl_status_t st;
    int c;

    if (!o) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    o->copies = w->copies;
    o->wmem = calloc((size_t)w->copies, sizeof *o->wmem);
    o->smem = calloc((size_t)w->copies, sizeof *o->smem);
    if (!o->wmem || !o->smem) {
        snprintf(err, errsize, "out of memory");
        goto fail;
    }
    if ((st = dnnl_engine_create(&o->engine, dnnl_cpu, 0)) != dnnl_success ||
        (st = dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags))
            != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&smd, 1, sdims, dnnl_f32, dnnl_a))
            != dnnl_success) {
        snprintf(err, errsize, "oneDNN engine or stream: %s", dnnl_status2str(st));
        goto fail;
    }
    for (c = 0; c < w->copies; c++) {
        st = dnnl_memory_create(&o->smem[c], &smd, o->engine, w->scale_b[c]);
        if (st != dnnl_success) {
            snprintf(err, errsize, "oneDNN scales memory: %s", dnnl_status2str(st));
            goto fail;
        }
    }
    return o;
fail:
    bench_onednn_free(o);
    return NULL;
}

/* The matmul primitive descriptor for M x N x K with weights in layout
 * wtag; runtime per-N scales when the implementation takes them
 * (*runtime = 1), else fixed ones. */
static dnnl_status_t make_pd(bench_onednn *o, const bench_weights *w, int64_t m,
                             dnnl_format_tag_t wtag, dnnl_primitive_desc_t *pd, int *runtime)
{
    const dnnl_dims_t adims = { m, w->k }, bdims = { w->k, w->n }, cdims = { m, w->n };
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t st;
    int pass;

    *pd = NULL;
    if ((st = dnnl_memory_desc_init_by_tag(&amd, 2, adims, dnnl_s8, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&bmd, 2, bdims, dnnl_s8, wtag)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&cmd, 2, cdims, dnnl_f32, dnnl_ab)) != dnnl_success ||
        (st = dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd)) != dnnl_success)
        return st;
    for (pass = 0; pass < 2; pass++) {
        const float rt = DNNL_RUNTIME_F32_VAL;
        if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success)
            return st;
        st = dnnl_primitive_attr_set_output_scales(attr, pass == 0 ? 1 : w->n, 1 << 1,
                                                   pass == 0 ? &rt : w->scale_b[0]);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(pd, &desc, attr, o->engine, NULL);
        dnnl_primitive_attr_destroy(attr);
        if (st == dnnl_success) {
            *runtime = pass == 0;
            return st;
        }
        *pd = NULL;
    }
    return st;
}

/* Reorders weight copies [0, ncopies) (N x K row-major = K x N "ba") into
 * new memory of layout wmd, mem[c] (NULL on entry; NULL again on failure). */
static int reorder_into(bench_onednn *o, const bench_weights *w, const dnnl_memory_desc_t *wmd,
                        int ncopies, dnnl_memory_t *mem, char *msg, size_t msgsize)
{
    const dnnl_dims_t bdims = { w->k, w->n };
    dnnl_memory_desc_t user;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t src = NULL;
    dnnl_status_t st;
    int c, rc = -1;

    if ((st = dnnl_memory_desc_init_by_tag(&user, 2, bdims, dnnl_s8, dnnl_ba)) != dnnl_success ||
        (st = dnnl_reorder_primitive_desc_create(&rpd, &user, o->engine, wmd, o->engine,
                                                 NULL)) != dnnl_success ||
        (st = dnnl_primitive_create(&reorder, rpd)) != dnnl_success ||
        (st = dnnl_memory_create(&src, &user, o->engine, w->b[0])) != dnnl_success) {
        snprintf(msg, msgsize, "oneDNN weight reorder: %s", dnnl_status2str(st));
        goto done;
    }
    for (c = 0; c < ncopies; c++) {
        dnnl_exec_arg_t args[2];
        if ((st = dnnl_memory_set_data_handle(src, w->b[c])) != dnnl_success ||
            (st = dnnl_memory_create(&mem[c], wmd, o->engine, DNNL_MEMORY_ALLOCATE))
                != dnnl_success) {
            snprintf(msg, msgsize, "oneDNN weight copy %d: %s", c, dnnl_status2str(st));
            goto done;
        }
        args[0].arg = DNNL_ARG_FROM;
        args[0].memory = src;
        args[1].arg = DNNL_ARG_TO;
        args[1].memory = mem[c];
        if ((st = dnnl_primitive_execute(reorder, o->stream, 2, args)) != dnnl_success ||
            (st = dnnl_stream_wait(o->stream)) != dnnl_success) {
            snprintf(msg, msgsize, "oneDNN weight reorder, copy %d: %s", c,
                     dnnl_status2str(st));
            goto done;
        }
    }
    rc = 0;
done:
    for (c = 0; rc != 0 && c < ncopies; c++)
        if (mem[c]) {
            dnnl_memory_destroy(mem[c]);
            mem[c] = NULL;
        }
    if (src)
        dnnl_memory_destroy(src);
    if (reorder)
        dnnl_primitive_destroy(reorder);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    return rc;
}

/* "plain" or "blocked", "+comp" when the reorder stores compensation. */
static const char *layout_name(const dnnl_memory_desc_t *md, int64_t k, int64_t n)
{
    const dnnl_dims_t bdims = { k, n };
    dnnl_memory_desc_t ab, ba;
    int plain = 0;
    if (dnnl_memory_desc_init_by_tag(&ab, 2, bdims, dnnl_s8, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&ba, 2, bdims, dnnl_s8, dnnl_ba) == dnnl_success)
        plain = dnnl_memory_desc_equal(md, &ab) || dnnl_memory_desc_equal(md, &ba);
    if (md->extra.flags != 0)
        return plain ? "plain+comp" : "blocked+comp";
    return plain ? "plain" : "blocked";
}

/* One execution of prim (weights wmem, scales smem when runtime) and the
 * wait for it. */
static dnnl_status_t exec_once(bench_onednn *o, dnnl_primitive_t prim, int runtime,
                               dnnl_memory_t amem, dnnl_memory_t wmem, dnnl_memory_t cmem,
                               dnnl_memory_t smem)
{
    dnnl_exec_arg_t args[4];
    dnnl_status_t st;
    args[0].arg = DNNL_ARG_SRC;
    args[0].memory = amem;
    args[1].arg = DNNL_ARG_WEIGHTS;
    args[1].memory = wmem;
    args[2].arg = DNNL_ARG_DST;
    args[2].memory = cmem;
    args[3].arg = DNNL_ARG_ATTR_OUTPUT_SCALES;
    args[3].memory = smem;
    st = dnnl_primitive_execute(prim, o->stream, runtime ? 4 : 3, args);
    return st == dnnl_success ? dnnl_stream_wait(o->stream) : st;
}

/* A matmul primitive for one weights layout. */
typedef struct candidate {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    const dnnl_memory_desc_t *wmd;   /* owned by pd */
    int runtime;                     /* runtime output scales */
    double trial_s;
} candidate;

static dnnl_status_t candidate_make(bench_onednn *o, const bench_weights *w, int64_t m,
                                    dnnl_format_tag_t wtag, candidate *cd)
{
    dnnl_status_t st;
    memset(cd, 0, sizeof *cd);
    if ((st = make_pd(o, w, m, wtag, &cd->pd, &cd->runtime)) != dnnl_success)
        return st;
    cd->wmd = dnnl_primitive_desc_query_md(cd->pd, dnnl_query_weights_md, 0);
    if (!cd->wmd)
        return dnnl_runtime_error;
    return dnnl_primitive_create(&cd->prim, cd->pd);
}

static void candidate_free(candidate *cd)
{
    if (cd->prim)
        dnnl_primitive_destroy(cd->prim);
    if (cd->pd)
        dnnl_primitive_desc_destroy(cd->pd);
    memset(cd, 0, sizeof *cd);
}

/* A trial run of a candidate, outside the timed runs, to choose the
 * layout: weight copy 0 reordered into it, one warm-up, the faster of two
 * runs. */
static int candidate_trial(bench_onednn *o, const bench_weights *w, candidate *cd,
                           dnnl_memory_t amem, dnnl_memory_t cmem, char *msg, size_t msgsize)
{
    dnnl_memory_t wmem = NULL;
    dnnl_status_t st = dnnl_success;
    int r;
    cd->trial_s = 1e30;
    if (reorder_into(o, w, cd->wmd, 1, &wmem, msg, msgsize) != 0)
        return -1;
    for (r = 0; r < 3 && st == dnnl_success; r++) {
        double t0 = timer_now(), t;
        st = exec_once(o, cd->prim, cd->runtime, amem, wmem, cmem, o->smem[0]);
        t = timer_now() - t0;
        if (r > 0 && t < cd->trial_s)
            cd->trial_s = t;
    }
    dnnl_memory_destroy(wmem);
    if (st != dnnl_success) {
        snprintf(msg, msgsize, "oneDNN matmul: %s", dnnl_status2str(st));
        return -1;
    }
    return 0;
}

int bench_onednn_time(bench_onednn *o, const bench_config *cfg, const bench_weights *w,
                      int64_t m, const int8_t *q, float *dst, bench_result *res)
{
    const dnnl_dims_t adims = { m, w->k }, cdims = { m, w->n };
    candidate cand[2];
    dnnl_memory_t amem = NULL, cmem = NULL;
    dnnl_memory_desc_t amd, cmd;
    const char *impl = "?", *layout;
    double *t = malloc((size_t)cfg->repeats * sizeof *t), spent = 0.0;
    dnnl_status_t st;
    int i, runs = 0, rc = -1, ncand = 1, pick = 0;
#ifdef _OPENMP
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(cfg->threads);
#endif

    memset(cand, 0, sizeof cand);
    res->onednn_runs = 0;
    res->onednn_s = 0.0;
    res->onednn_impl[0] = '\0';
    if (!t) {
        snprintf(res->message, sizeof res->message, "out of memory (oneDNN timings)");
        goto done;
    }
    if ((st = dnnl_memory_desc_init_by_tag(&amd, 2, adims, dnnl_s8, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&cmd, 2, cdims, dnnl_f32, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_create(&amem, &amd, o->engine, (void *)q)) != dnnl_success ||
        (st = dnnl_memory_create(&cmem, &cmd, o->engine, dst)) != dnnl_success) {
        snprintf(res->message, sizeof res->message, "oneDNN memory: %s", dnnl_status2str(st));
        goto done;
    }
    /* The layout oneDNN prefers (format_tag_any). When that is a plain one
     * (gemm-based implementations), the other plain one, B^T (K x N seen
     * as N x K, our layout), can be faster: try both once, untimed, and
     * keep the faster. */
    if ((st = candidate_make(o, w, m, dnnl_format_tag_any, &cand[0])) != dnnl_success) {
        snprintf(res->message, sizeof res->message, "oneDNN matmul s8 x s8 -> f32 with "
                 "per-N output scales, M = %lld: %s", (long long)m, dnnl_status2str(st));
        goto done;
    }
    if (strncmp(layout_name(cand[0].wmd, w->k, w->n), "plain", 5) == 0) {
        if (candidate_make(o, w, m, dnnl_ba, &cand[1]) == dnnl_success &&
            !dnnl_memory_desc_equal(cand[0].wmd, cand[1].wmd))
            ncand = 2;
        else
            candidate_free(&cand[1]);
    }
    if (ncand == 2) {
        for (i = 0; i < 2; i++)
            if (candidate_trial(o, w, &cand[i], amem, cmem, res->message,
                                sizeof res->message) != 0)
                goto done;
        pick = cand[1].trial_s < cand[0].trial_s;
    }
    if ((!o->have_layout || !dnnl_memory_desc_equal(&o->wmd, cand[pick].wmd))) {
        free_copies(o);
        if (reorder_into(o, w, cand[pick].wmd, o->copies, o->wmem, res->message,
                         sizeof res->message) != 0) {
            free_copies(o);
            goto done;
        }
        o->wmd = *cand[pick].wmd;
        o->have_layout = 1;
    }
    if (dnnl_primitive_desc_query(cand[pick].pd, dnnl_query_impl_info_str, 0, &impl)
        != dnnl_success)
        impl = "?";
    layout = layout_name(cand[pick].wmd, w->k, w->n);
    snprintf(res->onednn_impl, sizeof res->onednn_impl, "%s, %s%s weights, %s scales", impl,
             layout, ncand == 1 ? "" : pick ? " (N x K: faster than the K x N of "
             "format any)" : " (K x N, format any: faster than N x K)",
             cand[pick].runtime ? "runtime" : "fixed");

    /* Warm-up with copy 0, then the timed runs on the following copies. */
    for (i = -1; i < cfg->repeats; i++) {
        const int c = (i + 1) % o->copies;
        double t0 = timer_now();
        st = exec_once(o, cand[pick].prim, cand[pick].runtime, amem, o->wmem[c], cmem,
                       o->smem[c]);
        if (st != dnnl_success) {
            snprintf(res->message, sizeof res->message, "oneDNN matmul: %s",
                     dnnl_status2str(st));
            goto done;
        }
        if (i < 0)
            continue;
        t[i] = timer_now() - t0;
        spent += t[i];
        runs = i + 1;
        if (spent >= cfg->max_time)
            break;
    }
    res->onednn_runs = runs;
    res->onednn_s = bench_median(t, runs);
    rc = 0;
done:
#ifdef _OPENMP
    omp_set_num_threads(saved_threads);
#endif
    if (amem)
        dnnl_memory_destroy(amem);
    if (cmem)
        dnnl_memory_destroy(cmem);
    candidate_free(&cand[0]);
    candidate_free(&cand[1]);
    free(t);
    return rc;
}

#endif /* SMM_HAVE_ONEDNN */
