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
    unsigned char *shared = scratch;

    const smm_cpu_epilogue epi = {
        p->scale_a, p->scale_a_len, p->scale_b, p->scale_b_len, p->bias,
        p->azp, p->azp_len, p->c, p->ldc, p->c_dtype,
    };

#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
        smm_fpenv env;
        smm_fpenv_enter(&env);
#ifdef _OPENMP
        const int tid = omp_get_thread_num(), team = omp_get_num_threads();
#else
        const int tid = 0, team = 1;
#endif
        unsigned char *mine = scratch + shared_bytes + (size_t)tid * t->thread_bytes;
        /* Without prepare, one band of all rows. Within a band, tiles in
         * column-major order, so that a thread's consecutive tiles share
         * columns of B. */
        const int64_t band = t->prepare ? t->band_rows : t->m;
        for (int64_t b0 = 0; b0 < t->m; b0 += band) {
            const int64_t brows = min64(band, t->m - b0);
            const int64_t bmt = (brows + t->mc - 1) / t->mc, btotal = bmt * ntiles;
            if (t->prepare) {
                t->prepare(job, shared, tid, team, b0, brows);
#ifdef _OPENMP
#pragma omp barrier
#endif
            }
            /* The implied barrier at the end of the loop keeps the next
             * band's prepare() from overwriting what a tile still reads. */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t i = 0; i < btotal; i++) {
                const int64_t r = (i % bmt) * t->mc, i0 = b0 + r, j0 = (i / bmt) * t->nc;
                const int64_t mt = min64(t->mc, t->m - i0), nt = min64(t->nc, t->n - j0);
                tile(job, &epi, mine, shared + (t->prepare ? (size_t)r * t->shared_row_bytes : 0),
                     i0, mt, j0, nt);
            }
        }
        smm_fpenv_leave(&env);
    }

    smm_host_free(ctx, scratch);
    return SMM_OK;
}
