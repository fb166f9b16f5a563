/*
 * tiles.c - the threaded loop over the tiles of C that every blocked CPU
 * driver shares (gemm.c for the int16 levels, gemm_vnni.c for the VNNI
 * levels): one scratch allocation before anything is written (a shared
 * part, filled by the driver's prepare step on every thread for each band
 * of rows, and a part per thread), the problem's epilogue, the contract's floating-point environment on every
 * OpenMP worker, tiles in
 * column-major order so that a thread's consecutive tiles share columns of
 * B.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* What every thread of smm_cpu_run_tiles needs. */
typedef struct tiles_run {
    const smm_cpu_tiling *t;
    smm_cpu_tile_fn tile;
    const void *job;
    const smm_cpu_epilogue *epi;
    unsigned char *scratch;
    size_t shared_bytes;
    int64_t ntiles;
} tiles_run;

/* Thread tid's share of the tiles, in a team of `team` threads: with one
 * thread it is called directly, without a parallel region, and meets no
 * OpenMP construct (an orphaned one would bind to a team of the caller's). */
static void tiles_worker(const tiles_run *run, int tid, int team)
{
    const smm_cpu_tiling *t = run->t;
    unsigned char *shared = run->scratch;
    unsigned char *mine = run->scratch + run->shared_bytes + (size_t)tid * t->thread_bytes;
    smm_fpenv env;
    smm_fpenv_enter(&env);
    /* Without prepare, one band of all rows. Within a band, tiles in
     * column-major order, so that a thread's consecutive tiles share
     * columns of B; each thread takes a contiguous run of them. */
    const int64_t band = t->prepare ? t->band_rows : t->m;
    for (int64_t b0 = 0; b0 < t->m; b0 += band) {
        const int64_t brows = min64(band, t->m - b0);
        const int64_t bmt = (brows + t->mc - 1) / t->mc, btotal = bmt * run->ntiles;
        if (t->prepare) {
            t->prepare(run->job, shared, tid, team, b0, brows);
            if (team > 1) {
#ifdef _OPENMP
#pragma omp barrier
#endif
            }
        }
        for (int64_t i = btotal * tid / team; i < btotal * (tid + 1) / team; i++) {
            const int64_t r = (i % bmt) * t->mc, i0 = b0 + r, j0 = (i / bmt) * t->nc;
            const int64_t mt = min64(t->mc, t->m - i0), nt = min64(t->nc, t->n - j0);
            run->tile(run->job, run->epi, mine,
                      shared + (t->prepare ? (size_t)r * t->shared_row_bytes : 0), i0, mt, j0, nt);
        }
        /* The next band's prepare() must not overwrite what a tile still
         * reads. */
        if (team > 1) {
#ifdef _OPENMP
#pragma omp barrier
#endif
        }
    }
    smm_fpenv_leave(&env);
}

smm_status smm_cpu_run_tiles(smm_context *ctx, const smm_mm_problem *p, const smm_cpu_tiling *t,
                             int nthreads, smm_cpu_tile_fn tile, const void *job)
{
    const int64_t mtiles = (t->m + t->mc - 1) / t->mc;
    const int64_t ntiles = (t->n + t->nc - 1) / t->nc;
    /* Threads beyond the tiles of the largest band would have nothing to do. */
    const int64_t band_mtiles = t->prepare ? min64(mtiles, (t->band_rows + t->mc - 1) / t->mc) : mtiles;
    const int64_t total = band_mtiles * ntiles;
    if (nthreads > total)
        nthreads = (int)total;
    /* With the default thread count (0), a thread per
     * SMM_CPU_MACS_PER_THREAD multiply-adds at most: below that, starting
     * and joining a team costs more than it saves (a call on a small layer
     * is then one thread's few microseconds). A count the caller set is
     * used as it is. */
    int64_t macs;
    if (__builtin_mul_overflow(t->m, t->n, &macs) ||
        __builtin_mul_overflow(macs, p->k > 0 ? p->k : 1, &macs))
        macs = INT64_MAX;
    if (ctx->num_threads == 0 && (int64_t)nthreads > macs / SMM_CPU_MACS_PER_THREAD + 1)
        nthreads = (int)(macs / SMM_CPU_MACS_PER_THREAD + 1);
    if (nthreads < 1)
        nthreads = 1;

    /* All scratch before any output is written: the shared part first,
     * then one part per thread. */
    const size_t shared_bytes = align64(t->shared_bytes);
    size_t bytes;
    unsigned char *scratch = NULL;
    if (__builtin_mul_overflow(t->thread_bytes, (size_t)nthreads, &bytes) ||
        __builtin_add_overflow(bytes, shared_bytes, &bytes) ||
        !(scratch = smm_host_alloc(ctx, bytes, 64)))
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY,
                             "cpu backend: out of memory (%zu bytes of scratch per thread, "
                             "%zu shared)", t->thread_bytes, t->shared_bytes);
    const smm_cpu_epilogue epi = {
        p->scale_a, p->scale_a_len, p->scale_b, p->scale_b_len, p->bias,
        p->azp, p->azp_len, p->c, p->ldc, p->c_dtype,
    };

    const tiles_run run = {t, tile, job, &epi, scratch, shared_bytes, ntiles};
    if (nthreads == 1) {
        tiles_worker(&run, 0, 1);
    } else {
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
        tiles_worker(&run, omp_get_thread_num(), omp_get_num_threads());
#else
        tiles_worker(&run, 0, 1);
#endif
    }

    smm_host_free(ctx, scratch);
    return SMM_OK;
}

void smm_cpu_run_rows(smm_context *ctx, int64_t m, int64_t row_elems, smm_cpu_rows_fn rows,
                      const void *job)
{
    int nthreads = smm_threads(ctx);
    int64_t work;
    if (__builtin_mul_overflow(m, row_elems > 0 ? row_elems : 1, &work))
        work = INT64_MAX;
    if ((int64_t)nthreads > work / 16384 + 1)
        nthreads = (int)(work / 16384 + 1);
    if ((int64_t)nthreads > m)
        nthreads = (int)m;
    if (nthreads <= 1) {
        rows(job, 0, m);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
        smm_fpenv env;
        smm_fpenv_enter(&env);
#ifdef _OPENMP
        const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int64_t tid = 0, nt = 1;
#endif
        rows(job, m * tid / nt, m * (tid + 1) / nt);
        smm_fpenv_leave(&env);
    }
}
