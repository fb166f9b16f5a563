/*
 * tiles.c - the threaded loop over the tiles of C that every blocked CPU
 * driver shares (gemm.c for the int16 levels, gemm_vnni.c for the VNNI
 * levels): one scratch allocation before anything is written (a shared
 * part, filled by the driver's prepare step on every thread for each band
 * of rows, and a part per thread), the problem's epilogue, the contract's floating-point environment on every
 * OpenMP worker, tiles in
 * column-major order so that a thread's consecutive tiles share columns of
 * B. Each thread takes its own contiguous run of tiles first, then those
 * of threads that are behind (one tile at a time, through a counter per
 * thread), so that a thread the OS set aside, or slowed, holds the others
 * up for one tile rather than for its whole share. Which thread computes
 * a tile changes no bit of it.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Run `part` of `parts` of a band's tiles: the next tile to take, and
 * the end of the run; one cache line each, so that taking a tile touches
 * no other run's line. */
typedef struct tiles_cursor {
    int64_t next, end;
    char pad[64 - 2 * sizeof(int64_t)];
} tiles_cursor;

static void cursor_set(tiles_cursor *c, int64_t total, int part, int parts)
{
    __atomic_store_n(&c->next, total * part / parts, __ATOMIC_RELAXED);
    c->end = total * (part + 1) / parts;
}

/* Rows per band: band_rows with prepare, else one band of all rows. */
static int64_t band_of(const smm_cpu_tiling *t)
{
    return t->prepare ? t->band_rows : t->m;
}

/* The tile rows (of mc rows each, the last one shorter) of the band of
 * rows that starts at row b0. The first band (b0 = 0) is the largest, so
 * it also sizes the team and the runs set before the team starts. */
static int64_t band_tiles(const smm_cpu_tiling *t, int64_t b0)
{
    return (min64(band_of(t), t->m - b0) + t->mc - 1) / t->mc;
}

/* What every thread of smm_cpu_run_tiles needs. */
typedef struct tiles_run {
    const smm_cpu_tiling *t;
    smm_cpu_tile_fn tile;
    const void *job;
    const smm_cpu_epilogue *epi;
    unsigned char *scratch;
    size_t shared_bytes;
    int64_t ntiles;
    tiles_cursor *cur; /* one per thread asked for (the team may be smaller) */
    int ncur;
    int region;        /* in a parallel region of more than one thread */
} tiles_run;

/* Thread tid's share of the tiles, `team` threads working: with one
 * thread it is called directly, without a parallel region, and meets no
 * OpenMP construct (an orphaned one would bind to a team of the caller's).
 * Threads of the region past `team` (tid >= team) do no work but meet
 * the same barriers. */
static void tiles_worker(const tiles_run *run, int tid, int team)
{
    const smm_cpu_tiling *t = run->t;
    unsigned char *shared = run->scratch;
    const int works = tid < team;
    unsigned char *mine = works ? run->scratch + run->shared_bytes + (size_t)tid * t->thread_bytes
                                : NULL;
    smm_fpenv env;
    smm_fpenv_enter(&env);
    /* Without prepare, one band of all rows. Within a band, tiles in
     * column-major order, so that a thread's consecutive tiles share
     * columns of B; each thread takes a contiguous run of them. */
    const int64_t band = band_of(t);
    for (int64_t b0 = 0; b0 < t->m; b0 += band) {
        const int64_t brows = min64(band, t->m - b0);
        const int64_t bmt = band_tiles(t, b0), btotal = bmt * run->ntiles;
        /* A run per thread asked for: the team may have fewer. The first
         * band's runs were set before the team started; a later band's
         * (only with prepare) are set here and seen by the others after
         * the barrier that follows prepare(). */
        if (b0 > 0 && works)
            for (int c = tid; c < run->ncur; c += team)
                cursor_set(&run->cur[c], btotal, c, run->ncur);
        if (t->prepare) {
            if (works)
                t->prepare(run->job, shared, tid, team, b0, brows);
            if (run->region) {
#ifdef _OPENMP
#pragma omp barrier
#endif
            }
        }
        /* Its own run, then the others' from the next one on. */
        for (int v = 0; works && v < run->ncur; v++) {
            tiles_cursor *c = &run->cur[(tid + v) % run->ncur];
            int64_t i;
            while ((i = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED)) < c->end) {
                const int64_t r = (i % bmt) * t->mc, i0 = b0 + r, j0 = (i / bmt) * t->nc;
                const int64_t mt = min64(t->mc, t->m - i0), nt = min64(t->nc, t->n - j0);
                run->tile(run->job, run->epi, mine,
                          shared + (t->prepare ? (size_t)r * t->shared_row_bytes : 0), i0, mt,
                          j0, nt);
            }
        }
        /* The next band's prepare() must not overwrite what a tile still
         * reads. */
        if (run->region) {
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
    const int64_t ntiles = (t->n + t->nc - 1) / t->nc;
    /* Threads beyond the tiles of the largest band, the first, would have
     * nothing to do. */
    const int64_t total = band_tiles(t, 0) * ntiles;
    const int region_threads = nthreads;
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

    /* All scratch before any output is written: the runs' cursors and the
     * shared part first, then one part per thread. */
    const size_t cursor_bytes = (size_t)nthreads * sizeof(tiles_cursor);
    const size_t shared_bytes = align64(t->shared_bytes);
    size_t bytes;
    unsigned char *scratch = NULL;
    if (__builtin_mul_overflow(t->thread_bytes, (size_t)nthreads, &bytes) ||
        __builtin_add_overflow(bytes, shared_bytes, &bytes) ||
        __builtin_add_overflow(bytes, cursor_bytes, &bytes) ||
        !(scratch = smm_host_alloc(ctx, bytes, 64)))
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY,
                             "cpu backend: out of memory (%zu bytes of scratch per thread, "
                             "%zu shared)", t->thread_bytes, t->shared_bytes);
    const smm_cpu_epilogue epi = {
        p->scale_a, p->scale_a_len, p->scale_b, p->scale_b_len, p->bias,
        p->azp, p->azp_len, p->c, p->ldc, p->c_dtype,
    };

    tiles_cursor *cur = (tiles_cursor *)scratch;
    for (int c = 0; c < nthreads; c++)
        cursor_set(&cur[c], total, c, nthreads);
    if (nthreads == 1) {
        const tiles_run run = {t, tile, job, &epi, scratch + cursor_bytes, shared_bytes, ntiles,
                               cur, 1, 0};
        tiles_worker(&run, 0, 1);
    } else {
        /* The region has the thread count the caller's calls use
         * (smm_threads), even when fewer threads work: libgomp ends the
         * pool's surplus threads whenever a region asks for fewer, and
         * the next region of the full count creates them again, on
         * every call that alternates between the two counts
         * (doc/design.md has the measurement), and on the AMX level
         * each new thread then faults in its tile state. */
        const tiles_run run = {t, tile, job, &epi, scratch + cursor_bytes, shared_bytes, ntiles,
                               cur, nthreads, 1};
#ifdef _OPENMP
#pragma omp parallel num_threads(region_threads)
        {
            const int team = omp_get_num_threads();
            tiles_worker(&run, omp_get_thread_num(), team < nthreads ? team : nthreads);
        }
#else
        (void)region_threads;
        tiles_worker(&run, 0, 1);
#endif
    }

    smm_host_free(ctx, scratch);
    return SMM_OK;
}

void smm_cpu_run_rows(smm_context *ctx, int64_t m, int64_t row_elems, smm_cpu_rows_fn rows,
                      const void *job)
{
    const int region_threads = smm_threads(ctx);
    int nthreads = region_threads;
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
    /* The region has the full thread count, as smm_cpu_run_tiles's. */
#ifdef _OPENMP
#pragma omp parallel num_threads(region_threads)
#endif
    {
#ifdef _OPENMP
        const int64_t tid = omp_get_thread_num(), team = omp_get_num_threads();
        const int64_t nt = team < nthreads ? team : nthreads;
#else
        const int64_t tid = 0, nt = 1;
#endif
        if (tid < nt) {
            smm_fpenv env;
            smm_fpenv_enter(&env);
            rows(job, m * tid / nt, m * (tid + 1) / nt);
            smm_fpenv_leave(&env);
        }
    }
}
