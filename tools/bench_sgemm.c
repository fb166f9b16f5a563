/*
 * bench_sgemm.c - the float32 baseline of `scaledmm bench`: OpenBLAS
 * cblas_sgemm on the same problem (bench.h).
 */
#include "bench.h"

#include <cblas.h>
#include <stdlib.h>
#include "timer.h"

void bench_sgemm(const bench_config *cfg, const bench_weights *w, int64_t m,
                 const float *a32, float *c32, bench_result *res)
{
    const blasint M = (blasint)m, N = (blasint)w->n, K = (blasint)w->k;
    double *t = malloc((size_t)cfg->repeats * sizeof *t), spent = 0.0;
    int i, runs = 0;

    res->sgemm_runs = 0;
    res->sgemm_s = 0.0;
    if (!t)
        return;
    openblas_set_num_threads(cfg->threads);
    /* C = A * B^T: A is M x K (lda K), B is the N x K weights (ldb K). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f,
                a32, K, w->b_f32[0], K, 0.0f, c32, N);
    for (i = 0; i < cfg->repeats; i++) {
        const float *b = w->b_f32[(i + 1) % w->copies_f32];
        double t0 = timer_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f,
                    a32, K, b, K, 0.0f, c32, N);
        t[i] = timer_now() - t0;
        spent += t[i];
        runs = i + 1;
        if (spent >= cfg->max_time)
            break;
    }
    res->sgemm_runs = runs;
    res->sgemm_s = bench_median(t, runs);
    free(t);
}
