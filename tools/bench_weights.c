/*
 * bench_weights.c - a layer's weights for `scaledmm bench`, in enough
 * copies to defeat the last-level cache (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_onednn.h"
#include "buffers.h"

int bench_copies(size_t bytes, size_t llc_bytes)
{
    size_t target = 2 * llc_bytes;
    if (bytes == 0)
        return 1;
    /* smallest c with c * bytes > target */
    return (int)(target / bytes + 1);
}

void bench_weights_free(bench_weights *w)
{
    int i;
    bench_onednn_free(w->onednn);
    for (i = 0; w->packed && i < w->copies; i++)
        smm_packed_b_destroy(w->packed[i]);
    free(w->packed);
    bench_weights_free_device(w);
    for (i = 0; w->b && i < w->copies; i++)
        free(w->b[i]);
    for (i = 0; w->scale_b && i < w->copies; i++)
        free(w->scale_b[i]);
    for (i = 0; w->b_f32 && i < w->copies_f32; i++)
        free(w->b_f32[i]);
    free(w->b);
    free(w->scale_b);
    free(w->b_f32);
    memset(w, 0, sizeof *w);
}

int bench_weights_init(bench_weights *w, const bench_config *cfg, int64_t n, int64_t k,
                       uint64_t tag_model, uint64_t tag_layer, char *err, size_t errsize)
{
    size_t nk = (size_t)n * (size_t)k, i;
    cf_rng rng;
    int c;

    memset(w, 0, sizeof *w);
    w->n = n;
    w->k = k;
    w->copies = bench_copies(nk + (size_t)n * sizeof(float), cfg->llc_bytes);
    w->b = calloc((size_t)w->copies, sizeof *w->b);
    w->scale_b = calloc((size_t)w->copies, sizeof *w->scale_b);
    if (!w->b || !w->scale_b)
        goto oom;
    for (c = 0; c < w->copies; c++) {
        w->b[c] = buf_alloc(nk);
        w->scale_b[c] = buf_alloc((size_t)n * sizeof(float));
        if (!w->b[c] || !w->scale_b[c])
            goto oom;
    }
    /* Weights symmetric int8; per-channel scales around 0.02 / 127, the
     * order of magnitude of a real checkpoint's. */
    buf_rng(&rng, cfg->seed, tag_model, tag_layer, 0x77);
    buf_fill_i8(&rng, w->b[0], nk);
    buf_fill_f32(&rng, w->scale_b[0], (size_t)n, 0.5e-4f, 2.5e-4f);
    for (c = 1; c < w->copies; c++) {
        memcpy(w->b[c], w->b[0], nk);
        memcpy(w->scale_b[c], w->scale_b[0], (size_t)n * sizeof(float));
    }

    if (cfg->baseline) {
        w->copies_f32 = bench_copies(nk * sizeof(float), cfg->llc_bytes);
        w->b_f32 = calloc((size_t)w->copies_f32, sizeof *w->b_f32);
        if (!w->b_f32)
            goto oom;
        for (c = 0; c < w->copies_f32; c++) {
            w->b_f32[c] = buf_alloc(nk * sizeof(float));
            if (!w->b_f32[c])
                goto oom;
            for (i = 0; i < nk; i++)
                w->b_f32[c][i] = (float)w->b[0][i];
        }
    }
    return 0;
oom:
    snprintf(err, errsize, "out of memory for the weights of a %lld x %lld layer "
             "(%d int8 copies, %d float copies)", (long long)n, (long long)k,
             w->copies, w->copies_f32);
    bench_weights_free(w);
    return -1;
}

int bench_weights_pack(bench_weights *w, smm_context *ctx, char *err, size_t errsize)
{
    int c;
    w->packed = calloc((size_t)w->copies, sizeof *w->packed);
    if (!w->packed) {
        snprintf(err, errsize, "out of memory (packed weights)");
        return -1;
    }
    for (c = 0; c < w->copies; c++) {
        smm_status st = smm_pack_b(ctx, w->n, w->k, w->b[c], w->k, &w->packed[c]);
        if (st != SMM_OK) {
            snprintf(err, errsize, "smm_pack_b: %s (%s)", smm_strerror(st),
                     smm_context_last_error(ctx));
            for (; c >= 0; c--)
                smm_packed_b_destroy(w->packed[c]);
            free(w->packed);
            w->packed = NULL;
            return -1;
        }
    }
    return 0;
}
