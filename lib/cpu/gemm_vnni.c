/*
 * gemm_vnni.c - the CPU backend's matrix multiplication on the VNNI levels
 * (vpdpbusd on zmm or ymm, or their portable emulation): C = epilogue(A B^T).
 *
 * vpdpbusd multiplies unsigned by signed bytes, so A is packed shifted,
 * A' = A + 128 (A xor 0x80), and 128 * colsum(B) is subtracted per column
 * before the epilogue (cpu_internal.h). Every sum is taken modulo 2^32: the
 * kernels accumulate in wrapping 32-bit lanes over the whole of K, and
 *   acc = sum_k A'[k] B[k] - 128 * colsum      (mod 2^32)
 * equals the contract's wrapped sum_k A[k] B[k] at every K. Within one
 * vpdpbusd lane the four products u8 * s8 lie in [-32640, 32385] and their
 * sum in [-130560, 129540]: that sum is exact, and its addition to the
 * lane is the plain wrapping int32 add (vpdpbusd, not the saturating
 * vpdpbusds), i.e. addition modulo 2^32 as the contract's accumulator.
 *
 * Blocking (BLIS's loops, the K loop inside a tile so that the epilogue is
 * fused, as gemm.c): C is cut into tiles of mc x nc, OpenMP threads take
 * whole tiles. First, once per call, the threads pack A' (uint8, all of K,
 * zero-padded, plus a row of ones) into one buffer that every tile reads
 * (packed per tile, it was repacked N / nc times); above 16 MiB of A', in
 * bands of rows, each band's tiles run before the next band is packed.
 * For one tile:
 *
 *   for each K block:
 *       general path: for each np * nr columns:
 *           B's panels: read in place from a prepacked B (the next
 *           step's panels are prefetched meanwhile), else packed here
 *           (int8, k4 x nr layout) with their column sums          -> L1
 *           for each mr rows: panel microkernel, A' rows from L2
 *       small M (M <= SMM_CPU_VNNI_DIRECT_M), B not prepacked: B's rows
 *           are read in place, 4 at a time, by the row-dot kernel, every
 *           row of A' (plus one row of ones, which yields the column sums)
 *           against them: B streams from memory once.
 *       small M, B prepacked, mr < M <= dmr (the level's panel kernel
 *           takes that many rows with one panel): one K block of all of
 *           K, and each panel in one call with every row, so that B
 *           streams from memory once, in address order, with no second
 *           pass over it from cache.
 *       small M, B prepacked, M <= mr (one row block): one K block of
 *           all of K as well, the general path's calls over np panels.
 *   acc - (128 + z) * colsum -> epilogue (per row, the level's)
 *
 * A prepacked B (smm_cpu_vnni_pack_b) holds B as panels over the whole of
 * K (K padded to a multiple of 4) and the column sums; a K block of a panel
 * is a contiguous part of it, so every path reads it in place.
 */
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")

#include "config.h"
#include "cpu/cpu_internal.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Cache blocking of the general path; build-time knobs (CPPFLAGS), with
 * the small-M K block of a packed B below. A K block must be a positive
 * multiple of 4, since a K block of a packed B starts at a quad of its
 * k4 panels (multiples of 64 keep A' and B reads on cache lines). */
#ifndef SMM_CPU_VNNI_KC
#define SMM_CPU_VNNI_KC 1024
#endif
#ifndef SMM_CPU_VNNI_MC
#define SMM_CPU_VNNI_MC 192
#endif
#ifndef SMM_CPU_VNNI_NC
#define SMM_CPU_VNNI_NC 128
#endif
/* M at or below which the small-M (decode) path runs, and its K block. */
#define SMM_CPU_VNNI_DIRECT_M 16
#define SMM_CPU_VNNI_DIRECT_KC 4096
#ifndef SMM_CPU_VNNI_DIRECT_PACKED_KC
#define SMM_CPU_VNNI_DIRECT_PACKED_KC 1024
#endif
_Static_assert(SMM_CPU_VNNI_KC > 0 && SMM_CPU_VNNI_KC % 4 == 0,
               "SMM_CPU_VNNI_KC: a positive multiple of 4");
_Static_assert(SMM_CPU_VNNI_DIRECT_PACKED_KC > 0 && SMM_CPU_VNNI_DIRECT_PACKED_KC % 4 == 0,
               "SMM_CPU_VNNI_DIRECT_PACKED_KC: a positive multiple of 4");
_Static_assert(SMM_CPU_VNNI_MC > 0 && SMM_CPU_VNNI_NC > 0,
               "SMM_CPU_VNNI_MC, SMM_CPU_VNNI_NC: positive");
/* Row padding of packed A (the widest vector). */
#define SMM_CPU_VNNI_APAD 64
/* The most bytes of A' packed at a time (larger problems go in bands of
 * rows). */
#ifndef SMM_CPU_VNNI_A_BYTES
#define SMM_CPU_VNNI_A_BYTES ((int64_t)16 << 20)
#endif





static int64_t balanced_block(int64_t total, int64_t cap, int64_t unit)
{
    int64_t nblk = (total + cap - 1) / cap;
    if (nblk < 1)
        nblk = 1;
    return round_up((total + nblk - 1) / nblk, unit);
}

/* ------------------------------------------------------------------ */
/* Packing                                                             */
/* ------------------------------------------------------------------ */

/* rows x kc of A as A' = A xor 0x80 (uint8), rows of ld bytes, zero from
 * kc to ld. */
static void pack_a(int64_t rows, int64_t kc, const int8_t *src, int64_t lds, uint8_t *dst,
                   int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *restrict s = src + r * lds;
        uint8_t *restrict d = dst + r * ld;
        for (int64_t k = 0; k < kc; k++)
            d[k] = (uint8_t)s[k] ^ 0x80u;
        memset(d + kc, 0, (size_t)(ld - kc));
    }
}

/* A row of ld bytes: 1 below kc, 0 after (its products are B itself). */
static void ones_row(int64_t kc, uint8_t *dst, int64_t ld)
{
    memset(dst, 1, (size_t)kc);
    memset(dst + kc, 0, (size_t)(ld - kc));
}

/*
 * One column of B into a panel: quads q0 .. ceil(kc / 4) - 1 of the row s
 * (K values 4 q0 .. kc-1, zero past kc) at d + q * step; returns the sum of
 * those K values (mod 2^32).
 */
static uint32_t pack_b_column(const int8_t *restrict s, int64_t q0, int64_t kc, int8_t *restrict d,
                              int64_t step)
{
    const int64_t kq = (kc + 3) / 4, kfull = kc / 4;
    for (int64_t q = q0; q < kfull; q++)
        memcpy(d + q * step, s + 4 * q, 4);
    if (kq > kfull && kq > q0) {
        int8_t t[4] = {0, 0, 0, 0};
        memcpy(t, s + 4 * kfull, (size_t)(kc - 4 * kfull));
        memcpy(d + kfull * step, t, 4);
    }
    uint32_t sum = 0;
    for (int64_t k = 4 * q0; k < kc; k++)
        sum += (uint32_t)(int32_t)s[k];
    return sum;
}

#ifdef SMM_HAVE_AVX2_BUILD
#include <immintrin.h>
/*
 * 8 columns of B (rows s, s + ldb, ..., all valid), K values 0 .. 32 kb - 1,
 * into a panel at d (column 0 of the 8 at d, quad q at d + q * step): per
 * 32 bytes of K, an 8 x 8 transpose of 4-byte groups. When colsum is
 * not NULL, colsum[0 .. 7] += the column sums over those K values (mod
 * 2^32), taken from the packed quads (vpmaddubsw by ones: exact pairs in
 * int16; vpmaddwd by ones: exact quad sums in int32; lanes added modulo
 * 2^32).
 */
static __attribute__((target("avx2"))) void pack_b_8cols_avx2(const int8_t *s, int64_t ldb,
                                                              int64_t kb, int8_t *d, int64_t step,
                                                              uint32_t *colsum)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i cs = _mm256_setzero_si256();
    for (int64_t blk = 0; blk < kb; blk++) {
        const int8_t *sk = s + 32 * blk;
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(sk + 0 * ldb));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(sk + 1 * ldb));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(sk + 2 * ldb));
        __m256i r3 = _mm256_loadu_si256((const __m256i *)(sk + 3 * ldb));
        __m256i r4 = _mm256_loadu_si256((const __m256i *)(sk + 4 * ldb));
        __m256i r5 = _mm256_loadu_si256((const __m256i *)(sk + 5 * ldb));
        __m256i r6 = _mm256_loadu_si256((const __m256i *)(sk + 6 * ldb));
        __m256i r7 = _mm256_loadu_si256((const __m256i *)(sk + 7 * ldb));
        /* [r0.0 r1.0 r0.1 r1.1 | r0.4 r1.4 r0.5 r1.5] ... */
        __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1);
        __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3);
        __m256i t4 = _mm256_unpacklo_epi32(r4, r5), t5 = _mm256_unpackhi_epi32(r4, r5);
        __m256i t6 = _mm256_unpacklo_epi32(r6, r7), t7 = _mm256_unpackhi_epi32(r6, r7);
        /* [r0..3 quad 0 | r0..3 quad 4], quads 1|5, 2|6, 3|7; rows 4..7 likewise. */
        __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        __m256i o[8];
        o[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
        o[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
        o[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
        o[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
        o[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
        o[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
        o[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
        o[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
        int8_t *dq = d + 8 * blk * step;
        for (int q = 0; q < 8; q++) {
            _mm256_storeu_si256((__m256i *)(dq + q * step), o[q]);
            cs = _mm256_add_epi32(cs, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, o[q]), ones16));
        }
    }
    if (colsum) {
        __m256i old = _mm256_loadu_si256((const __m256i *)colsum);
        _mm256_storeu_si256((__m256i *)colsum, _mm256_add_epi32(old, cs));
    }
}
#endif

/*
 * Packs columns 0 .. cols-1 of B (rows of the N x K matrix, leading
 * dimension ldb), K values 0 .. kc-1, into np panels of nr columns at dst
 * (panel p at dst + p * ldbp; ceil(kc / 4) quads of nr x 4 bytes). Columns
 * cols .. np*nr-1 and K values past kc are 0. When colsum is not NULL,
 * colsum[j] += sum_k B[j][k] (mod 2^32) for j < cols. avx2: the CPU runs
 * AVX2 (whole groups of 8 columns and 32 K values are then transposed in
 * vectors; the rest, and every byte otherwise, column by column).
 */
static void pack_b_panels(const int8_t *src, int64_t ldb, int64_t cols, int np, int nr, int64_t kc,
                          int8_t *dst, int64_t ldbp, uint32_t *colsum, int avx2)
{
    const int64_t kq = (kc + 3) / 4;
    const int64_t step = 4 * (int64_t)nr;
    (void)avx2;
    for (int p = 0; p < np; p++) {
        int8_t *restrict panel = dst + p * ldbp;
        for (int jj = 0; jj < nr;) {
            const int64_t j = (int64_t)p * nr + jj;
            int8_t *restrict d = panel + jj * 4;
            if (j >= cols) {
                for (int64_t q = 0; q < kq; q++)
                    memset(d + q * step, 0, 4);
                jj++;
                continue;
            }
#ifdef SMM_HAVE_AVX2_BUILD
            if (avx2 && jj % 8 == 0 && j + 8 <= cols && kc >= 32) {
                const int64_t kb = kc / 32;
                pack_b_8cols_avx2(src + j * ldb, ldb, kb, d, step, colsum ? colsum + j : NULL);
                for (int t = 0; t < 8; t++) {
                    const uint32_t rest = pack_b_column(src + (j + t) * ldb, 8 * kb, kc, d + 4 * t, step);
                    if (colsum)
                        colsum[j + t] += rest;
                }
                jj += 8;
                continue;
            }
#endif
            const uint32_t sum = pack_b_column(src + j * ldb, 0, kc, d, step);
            if (colsum)
                colsum[j] += sum;
            jj++;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Packed B                                                            */
/* ------------------------------------------------------------------ */

/*
 * The layout inside smm_packed_b.mem (parts 64-byte aligned):
 *   vnni_packed         this header (smm_packed_b.data)
 *   colsum[G * nr]      uint32 column sums over K, mod 2^32 (0 past N)
 *   panels              G = ceil(N / nr) panels of kp * nr bytes, kp =
 *                       round_up(K, 4): panel g, quad q, column j, byte t
 *                       at g * kp * nr + q * 4 * nr + j * 4 + t
 *                       = B[g * nr + j][4q + t] (0 past N or K)
 */
typedef struct vnni_packed {
    int64_t groups, kp;
    const uint32_t *colsum;
    const int8_t *panels;
} vnni_packed;

smm_status smm_cpu_vnni_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb, smm_packed_b *pb)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const smm_cpu_vnni_kernels *v = st->v;
    const int64_t n = pb->n, k = pb->k, nr = v->nr;
    const int64_t groups = (n + nr - 1) / nr;
    const int64_t kp = round_up(k, 4);

    /* Column sums, then panels. */
    const int64_t size[2][4] = {
        {groups, nr, (int64_t)sizeof(uint32_t), 1},
        {groups, nr, kp, 1},
    };
    unsigned char *mem;
    size_t bytes, off[2];
    smm_status status = smm_cpu_packed_alloc(ctx, n, k, sizeof(vnni_packed), size, 2, &mem,
                                               &bytes, off);
    if (status != SMM_OK)
        return status;
    vnni_packed *pk = (vnni_packed *)mem;
    uint32_t *colsum = (uint32_t *)(mem + off[0]);
    int8_t *panels = (int8_t *)(mem + off[1]);
    pk->groups = groups;
    pk->kp = kp;
    pk->colsum = colsum;
    pk->panels = panels;
    memset(colsum, 0, (size_t)(groups * nr) * sizeof(uint32_t));

    int nthreads = smm_threads(ctx);
    if (nthreads > groups)
        nthreads = groups > 0 ? (int)groups : 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int64_t g = 0; g < groups; g++) {
        const int64_t j0 = g * nr;
        /* b may be NULL when k == 0: nothing is read then. */
        pack_b_panels(k > 0 ? b + j0 * ldb : b, ldb, k > 0 ? min64(nr, n - j0) : 0, 1, (int)nr, k,
                      panels + g * kp * nr, kp * nr, colsum + j0, st->k == smm_cpu_kernels_avx2);
    }

    pb->mem = mem;
    pb->bytes = bytes;
    pb->rows = NULL;
    pb->data = pk;
    return SMM_OK;
}

/* ------------------------------------------------------------------ */
/* Driver                                                              */
/* ------------------------------------------------------------------ */

typedef struct vplan {
    int64_t m, n, k;
    int64_t mc, nc, kc;
    int64_t lda_p;          /* bytes per row of the packed A' (all of K) */
    int64_t ldacc;
    int direct;             /* small M (B streams from memory once) */
    int rowdot;             /* small M, B read in place */
    int onepass;            /* small M, B prepacked, mr < M <= dmr: one pass
                               per panel */
    smm_cpu_vnni_panel_fn panel; /* the panel kernel of the general loop */
    int64_t band_rows;      /* rows of A' packed at a time (a multiple of mc,
                               or M) */
    size_t apack_bytes;     /* shared: band_rows + 1 rows of A' */
    size_t bpack_bytes, acc_elems, thread_bytes;
} vplan;

/* Whether this CPU's cores need the far L2 prefetch to stream a packed B
 * at M <= mr: SMM_CPU_FAR_PREFETCH=1 or 0 (read at each such call), else
 * Intel's. On a 16-core Xeon with AMX (2 to 16 threads, M = 1 and 4, the
 * 8B layers) it took the weights' stream from 1.05x to 1.30x (10 of 11
 * alternating rounds faster); on a Zen 5 it was 5-10% slower in each of
 * three rounds, whose cores keep more misses in flight. */
static int wants_far_prefetch(void)
{
    static const char intel[] = "GenuineIntel";
    const char *env = getenv("SMM_CPU_FAR_PREFETCH");
    if (env && (env[0] == '0' || env[0] == '1') && env[1] == '\0')
        return env[0] == '1';
    return memcmp(smm_cpu_info_get()->vendor, intel, sizeof intel) == 0;
}

static void make_plan(vplan *pl, const smm_cpu_vnni_kernels *v, const smm_mm_problem *p,
                      int nthreads)
{
    const int64_t unit = (int64_t)v->nr * v->np;
    pl->m = p->m;
    pl->n = p->n;
    pl->k = p->k;
    const int direct = p->m <= SMM_CPU_VNNI_DIRECT_M;
    pl->direct = direct;
    pl->rowdot = direct && !p->b_packed;
    pl->onepass = direct && p->b_packed && p->m > v->mr && p->m <= v->dmr;
    pl->panel = v->panel_far && p->b_packed && p->m <= v->mr && wants_far_prefetch()
                    ? v->panel_far
                    : v->panel;
    if (direct) {
        pl->mc = pl->m;
        /* Enough column tiles to keep every thread busy. */
        int64_t nc = 4 * unit;
        while (nc > unit && (pl->n + nc - 1) / nc < 4 * (int64_t)nthreads)
            nc /= 2;
        pl->nc = balanced_block(pl->n, nc, unit);
        /* Row-dot: long rows of B per call. Prepacked B through the panel
         * kernel: a K block small enough that the unit's panels stay in
         * L1 while every row block of A' passes over them, so that B
         * streams from memory once, without pauses. */
        pl->kc = p->b_packed ? SMM_CPU_VNNI_DIRECT_PACKED_KC : SMM_CPU_VNNI_DIRECT_KC;
        /* One pass, or one row block (M <= mr: B is read once whatever
         * the K block): all of K in one block, so that a panel is one run
         * of memory that the next panel follows (short K blocks gave the
         * prefetchers a new stream every few KiB). */
        if (pl->onepass || (p->b_packed && p->m <= v->mr))
            pl->kc = round_up(max64(pl->k, 1), 4);
    } else {
        pl->mc = balanced_block(pl->m, SMM_CPU_VNNI_MC, v->mr);
        pl->nc = balanced_block(pl->n, SMM_CPU_VNNI_NC, unit);
        while ((pl->m + pl->mc - 1) / pl->mc * ((pl->n + pl->nc - 1) / pl->nc) < 2 * (int64_t)nthreads
               && pl->nc > unit)
            pl->nc = round_up(pl->nc / 2, unit);
        pl->kc = v->kc > 0 ? v->kc : SMM_CPU_VNNI_KC;
    }
    /* Rows of A' hold all of K, padded to the widest vector; a row length
     * that is a multiple of 1 KiB gets one more vector, so that the rows a
     * microkernel reads together do not all map to the same L1 sets. */
    pl->lda_p = round_up(max64(pl->k, 1), SMM_CPU_VNNI_APAD);
    if (pl->lda_p % 1024 == 0)
        pl->lda_p += SMM_CPU_VNNI_APAD;
    pl->ldacc = round_up(pl->nc, unit);
    /* A' is packed once per call by all threads (prepare_a), in bands of
     * rows when all of it would take more than SMM_CPU_VNNI_A_BYTES (each
     * band's tiles then read B once more). One more row of A' (ones: the
     * row-dot path's column sums; that path has M <= mc, one band) and of
     * the accumulators (column sums). M, K and lda were checked against
     * the size of A's footprint, so these products fit. */
    pl->band_rows = pl->m;
    if ((pl->m + 1) * pl->lda_p > SMM_CPU_VNNI_A_BYTES)
        pl->band_rows = min64(pl->m, max64(pl->mc, (SMM_CPU_VNNI_A_BYTES / pl->lda_p - 1) /
                                                       pl->mc * pl->mc));
    pl->apack_bytes = (size_t)(pl->band_rows + 1) * (size_t)pl->lda_p;
    pl->bpack_bytes = direct || p->b_packed ? 0 : (size_t)unit * (size_t)round_up(min64(pl->k, pl->kc), 4);
    pl->acc_elems = (size_t)(pl->mc + 1) * (size_t)pl->ldacc;
    pl->thread_bytes = align64(pl->bpack_bytes) + align64(pl->acc_elems * sizeof(uint32_t));
}

/* Rows b0 .. b0+brows-1 of A' = A xor 0x80 over all of K (zero to lda_p)
 * at apack, and a row of ones after them, split between the threads. With
 * quant (smm_linear), each row of A is first quantized from x by the
 * thread that packs it (quant's q, scale and azp are p's a, scale_a and
 * azp), so that the row is packed from cache; the tiles, which read the
 * scales and zero points, run after the band's barrier. */
static void prepare_a(const vplan *pl, const smm_mm_problem *p, const smm_quantize_args *quant,
                      smm_cpu_quantize_fn qrows, uint8_t *apack, int tid, int nthreads,
                      int64_t b0, int64_t brows)
{
    const int64_t rows = brows + 1;
    const int64_t r0 = rows * tid / nthreads, r1 = rows * (tid + 1) / nthreads;
    const int64_t kc = pl->k > 0 ? pl->k : 0;
    for (int64_t r = r0; r < r1; r++) {
        if (quant && r < brows)
            qrows(quant, b0 + r, b0 + r + 1);
        if (r == brows)
            ones_row(kc, apack + r * pl->lda_p, pl->lda_p);
        else if (kc > 0)   /* a may be NULL when K == 0 */
            pack_a(1, kc, p->a + (b0 + r) * p->lda, p->lda, apack + r * pl->lda_p, pl->lda_p);
        else
            memset(apack + r * pl->lda_p, 0, (size_t)pl->lda_p);
    }
}

/* Asks for the lines of the np rows or panels of B at b (ldbp apart),
 * bytes [0, bytes) of each, that fall to part `part` of `parts` (a hint:
 * into L2). */
static void prefetch_panels(const int8_t *b, int64_t ldbp, int np, int64_t bytes, int64_t part,
                            int64_t parts)
{
    const int64_t lines = (bytes + 63) / 64, total = np * lines;
    const int64_t l0 = part * total / parts, l1 = (part + 1) * total / parts;
    if (l0 >= l1)
        return;
    /* One division for the first line, none per line. */
    int64_t row = l0 / lines * ldbp, line = l0 % lines;
    for (int64_t l = l0; l < l1; l++) {
        __builtin_prefetch(b + row + line * 64, 0, 2);
        if (++line == lines) {
            line = 0;
            row += ldbp;
        }
    }
}

/* One tile: rows i0 .. i0+mt-1, columns j0 .. j0+nt-1 of C; apack: the
 * tile's first row in the shared A' (prepare_a). */
static void run_tile(const smm_cpu_vnni_kernels *v, const smm_cpu_kernels *kr, const vplan *pl,
                     const smm_mm_problem *p, const smm_cpu_epilogue *epi, unsigned char *scratch,
                     const uint8_t *apack, int64_t i0, int64_t mt, int64_t j0, int64_t nt)
{
    /* The row-dot path has all M rows in one band, i0 = 0, and reads the
     * row of ones after them. */
    int8_t *bpack = (int8_t *)scratch;
    scratch += align64(pl->bpack_bytes);
    uint32_t *acc = (uint32_t *)scratch;

    const int64_t ldacc = pl->ldacc, lda_p = pl->lda_p, K = pl->k;
    const int64_t nr = v->nr, unit = nr * v->np;
    const vnni_packed *pk = p->b_packed ? (const vnni_packed *)p->b_packed->data : NULL;
    /* Column sums: the packed B's, else accumulator row mt (the row-dot
     * path's row of ones, or the sums taken while packing B). */
    uint32_t *csrow = acc + mt * ldacc;
    const uint32_t *colsum = pk ? pk->colsum + j0 : csrow;
    const int64_t ma = mt + (pl->rowdot ? 1 : 0);
    memset(acc, 0, (size_t)((mt + 1) * ldacc) * sizeof(uint32_t));

    for (int64_t k0 = 0; k0 < K; k0 += pl->kc) {
        const int64_t kc = min64(pl->kc, K - k0);
        const int64_t kq = (kc + 3) / 4;

        if (pl->rowdot) {
            const int64_t ncalls = (ma + v->rmr - 1) / v->rmr;
            for (int64_t jr = 0; jr < nt; jr += 4) {
                const int64_t nb = min64(4, nt - jr);
                /* Columns past the edge repeat the last one; their sums
                 * land in the padding of the accumulator rows. */
                const int8_t *brow[4];
                for (int64_t j = 0; j < 4; j++)
                    brow[j] = p->b + (j0 + jr + min64(j, nb - 1)) * p->ldb + k0;
                /* The next 4 rows of B (same K range), fetched while these
                 * are used: each call of the row loop asks for its share. */
                const int8_t *next[4];
                int nnext = 0;
                if (jr + 4 < nt) {
                    const int64_t nb2 = min64(4, nt - jr - 4);
                    for (int64_t j = 0; j < nb2; j++)
                        next[nnext++] = p->b + (j0 + jr + 4 + j) * p->ldb + k0;
                }
                int64_t call = 0;
                for (int64_t ir = 0; ir < ma; ir += v->rmr, call++) {
                    const int mr = (int)min64(v->rmr, ma - ir);
                    const int64_t f0 = call * nnext / ncalls, f1 = (call + 1) * nnext / ncalls;
                    v->rowdot(kc, apack + ir * lda_p + k0, lda_p, mr, brow, next + f0, (int)(f1 - f0),
                              acc + ir * ldacc + jr, ldacc);
                }
            }
            continue;
        }

        for (int64_t jr = 0; jr < nt; jr += unit) {
            const int np = (int)((min64(unit, nt - jr) + nr - 1) / nr);
            /* What B the next step reads, fetched into L2 while this one
             * is computed, a share per row block (pf NULL: nothing). */
            const int8_t *bp, *pf = NULL;
            int64_t ldbp, pf_ld = 0, pf_bytes = 0;
            int pf_n = 0;
            if (pk) {
                /* j0 + jr is a multiple of nr, k0 of 4. */
                ldbp = pk->kp * nr;
                bp = pk->panels + (j0 + jr) / nr * ldbp + k0 * nr;
                /* The panels of the next step: the next columns, else the
                 * tile's first ones in the next K block. Not at small M:
                 * one or two row blocks would ask for them all at once;
                 * the kernels' own prefetches keep B streaming. Not for
                 * the tiles either (pf_next 0). */
                int64_t jn = jr + unit, kn = k0;
                if (jn >= nt) {
                    jn = 0;
                    kn = k0 + pl->kc;
                }
                if (kn < K && !pl->direct && v->pf_next) {
                    pf = pk->panels + (j0 + jn) / nr * ldbp + kn * nr;
                    pf_ld = ldbp;
                    pf_bytes = round_up(min64(pl->kc, K - kn), 4) * nr;
                    pf_n = (int)((min64(unit, nt - jn) + nr - 1) / nr);
                }
            } else {
                ldbp = kq * 4 * nr;
                pack_b_panels(p->b + (j0 + jr) * p->ldb + k0, p->ldb, min64(unit, nt - jr), np, (int)nr,
                              kc, bpack, ldbp, csrow + jr, kr == smm_cpu_kernels_avx2);
                bp = bpack;
                /* The rows of the next column block (same K range), so
                 * that packing them does not wait on memory. */
                if (jr + unit < nt) {
                    pf = p->b + (j0 + jr + unit) * p->ldb + k0;
                    pf_ld = p->ldb;
                    pf_bytes = kc;
                    pf_n = (int)min64(unit, nt - jr - unit);
                }
            }
            if (pl->onepass) {
                /* Every row (mt <= dmr) against one panel at a time. */
                for (int pi = 0; pi < np; pi++)
                    v->panel(kq, apack + k0, lda_p, (int)mt, bp + pi * ldbp, ldbp, 1,
                             acc + jr + pi * nr, ldacc);
                continue;
            }
            const int64_t nblk = (mt + v->mr - 1) / v->mr;
            int64_t blk = 0;
            for (int64_t ir = 0; ir < mt; ir += v->mr, blk++) {
                const int mr = (int)min64(v->mr, mt - ir);
                if (pf)
                    prefetch_panels(pf, pf_ld, pf_n, pf_bytes, blk, nblk);
                pl->panel(kq, apack + ir * lda_p + k0, lda_p, mr, bp, ldbp, np, acc + ir * ldacc + jr, ldacc);
            }
        }
    }

    /* Undo the shift: acc - 128 * colsum (mod 2^32); the epilogue then
     * subtracts z * colsum when there is a zero point. */
    for (int64_t i = 0; i < mt; i++) {
        uint32_t *restrict row = acc + i * ldacc;
        const uint32_t *restrict cs = colsum;
        for (int64_t j = 0; j < nt; j++)
            row[j] -= 128u * cs[j];
        kr->epilogue(epi, i0 + i, j0, nt, row, colsum);
    }
}

/* What one tile needs (smm_cpu_run_tiles hands it to mm_tile). */
typedef struct {
    const smm_cpu_vnni_kernels *v;
    const smm_cpu_kernels *kr;
    const vplan *pl;
    const smm_mm_problem *p;
    const smm_quantize_args *quant;   /* smm_linear: rows quantized in prepare_a */
    smm_cpu_quantize_fn qrows;
} mm_job;

static void mm_tile(const void *job, const smm_cpu_epilogue *epi, unsigned char *scratch,
                    const unsigned char *shared, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
    const mm_job *j = job;
    run_tile(j->v, j->kr, j->pl, j->p, epi, scratch, shared, i0, m, j0, n);
}

static void mm_prepare(const void *job, unsigned char *shared, int tid, int nthreads, int64_t r0,
                       int64_t rows)
{
    const mm_job *j = job;
    prepare_a(j->pl, j->p, j->quant, j->qrows, shared, tid, nthreads, r0, rows);
}

static smm_status vnni_run(smm_context *ctx, const smm_mm_problem *p,
                           const smm_quantize_args *quant)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const int nthreads = smm_threads(ctx);
    /* A level may hand small M to another one of the same format. */
    const smm_cpu_vnni_kernels *v =
        p->m <= SMM_CPU_VNNI_DIRECT_M && st->v->small ? st->v->small : st->v;

    vplan pl;
    make_plan(&pl, v, p, nthreads);
    const mm_job job = {v, st->k, &pl, p, quant, st->k->quantize_rows};
    const smm_cpu_tiling tiling = {pl.m, pl.n, pl.mc, pl.nc, pl.thread_bytes, pl.apack_bytes,
                                   mm_prepare, pl.band_rows, (size_t)pl.lda_p};
    return smm_cpu_run_tiles(ctx, p, &tiling, nthreads, mm_tile, &job);
}

smm_status smm_cpu_vnni_mm(smm_context *ctx, const smm_mm_problem *p)
{
    return vnni_run(ctx, p, NULL);
}

smm_status smm_cpu_vnni_linear(smm_context *ctx, const smm_quantize_args *q,
                               const smm_mm_problem *p)
{
    return vnni_run(ctx, p, q);
}
