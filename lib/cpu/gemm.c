/*
 * gemm.c - the CPU backend's matrix multiplication: C = epilogue(A * B^T).
 *
 * Blocking (BLIS's loops, with the K loop moved inside so that the epilogue
 * is fused): C is cut into tiles of mc x nc; OpenMP threads take whole tiles,
 * so every output element is produced by exactly one thread. For one tile:
 *
 *   for each K block (SMM_CPU_KC; small M: larger, see make_plan):
 *       pack the tile's rows of A (int16, MR-row micro-panels)   -> L2
 *       (with a zero point, plus one row of ones: the kernels then
 *        produce the column sums of B as one more accumulator row)
 *       for each NR columns of the tile:
 *           pack those rows of B (int16)                          -> L1
 *           (M <= the level's direct_m: B is read in place, as int8)
 *           for each MR rows: microkernel, adds into the tile's
 *           int32 accumulators (modulo 2^32)
 *   epilogue: accumulators (minus z * colsum) -> scaled output in C
 *
 * A B prepacked by smm_cpu_pack_b (smm_pack_b) holds exactly the panels the
 * loop above would pack, in the order it reads them ([K block][NR rows]),
 * so the blocked path reads them in place when several row tiles share
 * them (SMM_CPU_PANELS_MIN_MTILES; the panels are twice B's bytes, so a
 * single row tile is faster packing the int8 copy on the fly); the small-M
 * path reads the packed int8 copy of B; the column sums are precomputed,
 * so no row of ones is added to A.
 *
 * Exactness: a microkernel sums at most 65536 products of int8 values in
 * int32, which cannot overflow; K blocks and the zero-point correction are
 * combined in uint32, i.e. modulo 2^32, so every K (2^17 and beyond
 * included) gives the contract's wrapped sum, whatever the tiling or the
 * thread count. The epilogue is evaluated per element in the contract's
 * order (doc/numerics.md), with the one fma written as fmaf.
 *
 * The kernels are written in portable C shaped for the auto-vectorizer
 * (int16 x int16 -> int32 dot products become pmaddwd); each is compiled
 * twice, for the baseline ISA and for AVX2+FMA, and cpu_backend.c picks the
 * table at context creation. -fno-trapping-math only lets the compiler turn
 * selects into vector blends (no value changes: exceptions are masked);
 * contraction stays off.
 */
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")

#include "config.h"
#include "cpu/cpu_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Cache blocking. KC bounds the exact int32 partial sums (see above). */
#define SMM_CPU_KC 1024
#define SMM_CPU_MC 96
#define SMM_CPU_NC 128
/* M at or below which B is read in place (no packing of B), per level:
 * where the packed form's on-the-fly pack of B (its loads stall on
 * memory) costs more than widening B in every microkernel call
 * (doc/design.md, the avx2 level on Zen 2). */
#define SMM_CPU_DIRECT_M_C 16
#define SMM_CPU_DIRECT_M_AVX2 32
/* A packed B's int16 panels are read when C has at least this many row
 * tiles (each panel then serves that many tiles); fewer, and its int8 copy
 * is packed on the fly (see make_plan). 1: always read the panels. */
#ifndef SMM_CPU_PANELS_MIN_MTILES
#define SMM_CPU_PANELS_MIN_MTILES 2
#endif
/* Column tile of the small-M path. */
#define SMM_CPU_NC_DIRECT 64
/* Small-M path: K block sized so that the packed rows of A stay in L2 while
 * B streams past them in long sequential runs; at most 65536 (exactness). */
#define SMM_CPU_DIRECT_A_BYTES (192 * 1024)
#define SMM_CPU_DIRECT_KC_MAX 65536


/* ------------------------------------------------------------------ */
/* Kernel bodies (always inlined into each ISA's instance)             */
/* ------------------------------------------------------------------ */

SMM_ALWAYS_INLINE void ukr_packed_body(const int mr, int64_t kc, const int16_t *a, int64_t lda,
                                       const int16_t *b, int64_t ldb, uint32_t *acc, int64_t ldacc)
{
    const int16_t *restrict a0 = a;
    const int16_t *restrict a1 = a + (mr > 1 ? lda : 0);
    const int16_t *restrict a2 = a + (mr > 2 ? 2 * lda : 0);
    const int16_t *restrict b0 = b;
    const int16_t *restrict b1 = b + ldb;
    const int16_t *restrict b2 = b + 2 * ldb;
    const int16_t *restrict b3 = b + 3 * ldb;
    int32_t s00 = 0, s01 = 0, s02 = 0, s03 = 0;
    int32_t s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    int32_t s20 = 0, s21 = 0, s22 = 0, s23 = 0;
    kc &= ~(int64_t)(SMM_CPU_KPAD - 1);
    for (int64_t k = 0; k < kc; k++) {
        int32_t y0 = b0[k], y1 = b1[k], y2 = b2[k], y3 = b3[k];
        int32_t x0 = a0[k];
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        if (mr > 1) {
            int32_t x1 = a1[k];
            s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        }
        if (mr > 2) {
            int32_t x2 = a2[k];
            s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        }
    }
    acc[0] += (uint32_t)s00; acc[1] += (uint32_t)s01; acc[2] += (uint32_t)s02; acc[3] += (uint32_t)s03;
    if (mr > 1) {
        uint32_t *r = acc + ldacc;
        r[0] += (uint32_t)s10; r[1] += (uint32_t)s11; r[2] += (uint32_t)s12; r[3] += (uint32_t)s13;
    }
    if (mr > 2) {
        uint32_t *r = acc + 2 * ldacc;
        r[0] += (uint32_t)s20; r[1] += (uint32_t)s21; r[2] += (uint32_t)s22; r[3] += (uint32_t)s23;
    }
}

SMM_ALWAYS_INLINE void ukr_direct_body(const int mr, int64_t kc, const int16_t *a, int64_t lda,
                                       const int8_t *const *brow, uint32_t *acc, int64_t ldacc)
{
    const int16_t *restrict a0 = a;
    const int16_t *restrict a1 = a + (mr > 1 ? lda : 0);
    const int16_t *restrict a2 = a + (mr > 2 ? 2 * lda : 0);
    const int8_t *restrict b0 = brow[0];
    const int8_t *restrict b1 = brow[1];
    const int8_t *restrict b2 = brow[2];
    const int8_t *restrict b3 = brow[3];
    int32_t s00 = 0, s01 = 0, s02 = 0, s03 = 0;
    int32_t s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    int32_t s20 = 0, s21 = 0, s22 = 0, s23 = 0;
    for (int64_t k = 0; k < kc; k++) {
        int32_t y0 = (int16_t)b0[k], y1 = (int16_t)b1[k], y2 = (int16_t)b2[k], y3 = (int16_t)b3[k];
        int32_t x0 = a0[k];
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        if (mr > 1) {
            int32_t x1 = a1[k];
            s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        }
        if (mr > 2) {
            int32_t x2 = a2[k];
            s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        }
    }
    acc[0] += (uint32_t)s00; acc[1] += (uint32_t)s01; acc[2] += (uint32_t)s02; acc[3] += (uint32_t)s03;
    if (mr > 1) {
        uint32_t *r = acc + ldacc;
        r[0] += (uint32_t)s10; r[1] += (uint32_t)s11; r[2] += (uint32_t)s12; r[3] += (uint32_t)s13;
    }
    if (mr > 2) {
        uint32_t *r = acc + 2 * ldacc;
        r[0] += (uint32_t)s20; r[1] += (uint32_t)s21; r[2] += (uint32_t)s22; r[3] += (uint32_t)s23;
    }
}

SMM_ALWAYS_INLINE void pack_body(int64_t rows, int64_t cols, const int8_t *src, int64_t lds,
                                 int16_t *dst, int64_t ldd)
{
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *restrict s = src + r * lds;
        int16_t *restrict d = dst + r * ldd;
        for (int64_t k = 0; k < cols; k++)
            d[k] = s[k];
        for (int64_t k = cols; k < ldd; k++)
            d[k] = 0;
    }
}

SMM_ALWAYS_INLINE void epilogue_body(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
                                     const uint32_t *restrict acc, const uint32_t *restrict colsum)
{
    if (e->c_dtype == SMM_DTYPE_I32) {   /* raw accumulators; no scales */
        int32_t *restrict c = (int32_t *)e->c + m * e->ldc + j0;
        for (int64_t j = 0; j < n; j++)
            c[j] = (int32_t)acc[j];
        return;
    }
    const float sa = e->scale_a[e->scale_a_len == 1 ? 0 : m];
    const int pc_b = e->scale_b_len != 1;
    const float *restrict sbp = e->scale_b + (pc_b ? j0 : 0);
    const float *restrict bias = e->bias ? e->bias + j0 : NULL;
    const int has_azp = e->azp != NULL;
    const uint32_t z = has_azp ? (uint32_t)e->azp[e->azp_len == 1 ? 0 : m] : 0u;
    static const uint32_t zero_cs = 0;
    if (!has_azp)
        colsum = &zero_cs;
    const int64_t csi = has_azp ? 1 : 0;

    switch (e->c_dtype) {
    case SMM_DTYPE_F32: {
        float *restrict c = (float *)e->c + m * e->ldc + j0;
        for (int64_t j = 0; j < n; j++) {
            float y = smm_cpu_epi_value(acc[j], colsum[j * csi], z, sa, sbp[pc_b ? j : 0], bias, has_azp, j);
            uint32_t u = smm_cpu_f32_bits(y);
            if ((u & 0x7FFFFFFFu) > 0x7F800000u)
                u = 0x7FFFFFFFu;
            memcpy(&c[j], &u, sizeof u);
        }
        break;
    }
    case SMM_DTYPE_F16: {
        uint16_t *restrict c = (uint16_t *)e->c + m * e->ldc + j0;
        for (int64_t j = 0; j < n; j++)
            c[j] = smm_cpu_to_f16(smm_cpu_epi_value(acc[j], colsum[j * csi], z, sa, sbp[pc_b ? j : 0],
                                            bias, has_azp, j));
        break;
    }
    case SMM_DTYPE_BF16: {
        uint16_t *restrict c = (uint16_t *)e->c + m * e->ldc + j0;
        for (int64_t j = 0; j < n; j++)
            c[j] = smm_cpu_to_bf16(smm_cpu_epi_value(acc[j], colsum[j * csi], z, sa, sbp[pc_b ? j : 0],
                                             bias, has_azp, j));
        break;
    }
    default:
        break;
    }
}

/* ------------------------------------------------------------------ */
/* Kernel tables                                                       */
/* ------------------------------------------------------------------ */

#define SMM_DEFINE_KERNELS(sfx, attr)                                                          \
    static attr void ukr_packed1_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int16_t *b, int64_t ldb, uint32_t *acc,           \
                                       int64_t ldacc)                                          \
    { ukr_packed_body(1, kc, a, lda, b, ldb, acc, ldacc); }                                    \
    static attr void ukr_packed2_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int16_t *b, int64_t ldb, uint32_t *acc,           \
                                       int64_t ldacc)                                          \
    { ukr_packed_body(2, kc, a, lda, b, ldb, acc, ldacc); }                                    \
    static attr void ukr_packed3_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int16_t *b, int64_t ldb, uint32_t *acc,           \
                                       int64_t ldacc)                                          \
    { ukr_packed_body(3, kc, a, lda, b, ldb, acc, ldacc); }                                    \
    static attr void pack_##sfx(int64_t rows, int64_t cols, const int8_t *src, int64_t lds,    \
                                int16_t *dst, int64_t ldd)                                     \
    { pack_body(rows, cols, src, lds, dst, ldd); }

/* The portable level's microkernels with B read in place (the AVX2 level
 * has its own, ukr_direct_avx2.c). */
#define SMM_DEFINE_DIRECT_KERNELS(sfx, attr)                                                   \
    static attr void ukr_direct1_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int8_t *const *brow, uint32_t *acc, int64_t ldacc)\
    { ukr_direct_body(1, kc, a, lda, brow, acc, ldacc); }                                      \
    static attr void ukr_direct2_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int8_t *const *brow, uint32_t *acc, int64_t ldacc)\
    { ukr_direct_body(2, kc, a, lda, brow, acc, ldacc); }                                      \
    static attr void ukr_direct3_##sfx(int64_t kc, const int16_t *a, int64_t lda,              \
                                       const int8_t *const *brow, uint32_t *acc, int64_t ldacc)\
    { ukr_direct_body(3, kc, a, lda, brow, acc, ldacc); }

SMM_DEFINE_KERNELS(c, )
SMM_DEFINE_DIRECT_KERNELS(c, )

/* The portable epilogue; the AVX2 table uses epilogue_avx2.c's. */
static void epilogue_c(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
                       const uint32_t *acc, const uint32_t *colsum)
{
    epilogue_body(e, m, j0, n, acc, colsum);
}

const smm_cpu_kernels smm_cpu_kernels_c = {
    "c",
    {NULL, ukr_packed1_c, ukr_packed2_c, ukr_packed3_c},
    {NULL, ukr_direct1_c, ukr_direct2_c, ukr_direct3_c},
    pack_c,
    epilogue_c,
    smm_cpu_quantize_rows_c,
    SMM_CPU_DIRECT_M_C,
};

#ifdef SMM_HAVE_AVX2_BUILD
SMM_DEFINE_KERNELS(avx2, SMM_TARGET_AVX2)

static const smm_cpu_kernels kernels_avx2 = {
    "avx2",
    {NULL, ukr_packed1_avx2, ukr_packed2_avx2, ukr_packed3_avx2},
    {NULL, smm_cpu_ukr_direct1_avx2, smm_cpu_ukr_direct2_avx2, smm_cpu_ukr_direct3_avx2},
    pack_avx2,
    smm_cpu_epilogue_avx2,
    smm_cpu_quantize_rows_avx2,
    SMM_CPU_DIRECT_M_AVX2,
};
const smm_cpu_kernels *const smm_cpu_kernels_avx2 = &kernels_avx2;
#else
const smm_cpu_kernels *const smm_cpu_kernels_avx2 = NULL;
#endif

/* ------------------------------------------------------------------ */
/* Driver                                                              */
/* ------------------------------------------------------------------ */



/* Splits `total` into the fewest blocks of at most `cap` and returns an
 * equal block size, a multiple of `unit`. */
static int64_t balanced_block(int64_t total, int64_t cap, int64_t unit)
{
    int64_t nblk = (total + cap - 1) / cap;
    return round_up((total + nblk - 1) / nblk, unit);
}

/* ------------------------------------------------------------------ */
/* Packed B                                                            */
/* ------------------------------------------------------------------ */

/* The format names the layout: a B packed under other constants must not
 * be mistaken for this one. */
_Static_assert(SMM_CPU_NR == 4 && SMM_CPU_KC == 1024 && SMM_CPU_KPAD == 16,
               "the packed layout changed: rename smm_cpu_packed_format");
const char smm_cpu_packed_format[] = "cpu int16 panels 4x1024 + int8 rows + colsums";

/*
 * The layout inside smm_packed_b.mem (all parts 64-byte aligned):
 *   packed_layout             this header (smm_packed_b.data)
 *   colsum[G * NR]            uint32 column sums of B over K, mod 2^32
 *                             (0 past N); G = ceil(N / NR) column groups
 *   panels                    for each K block kb of SMM_CPU_KC (the last
 *                             one shorter, kc = K - kb * KC, padded to
 *                             kcp = round_up(kc, KPAD)), for each group g:
 *                             NR rows of kcp int16 (rows past N and
 *                             columns past kc are 0) -- exactly what
 *                             run_tile packs into bpack;
 *                             G * NR * round_up(K, KPAD) elements in all
 *   rows[N * K]               B as dense int8 rows (leading dimension K)
 */
typedef struct packed_layout {
    int64_t groups;
    const uint32_t *colsum;
    const int16_t *panels;
    const int8_t *rows;
} packed_layout;

/* Panel of column group g in the K block starting at k0 (kcp its padded
 * length): the full blocks before it hold G * NR * KC elements each. */
static inline const int16_t *packed_panel(const packed_layout *pk, int64_t k0, int64_t g, int64_t kcp)
{
    return pk->panels + k0 * pk->groups * SMM_CPU_NR + g * SMM_CPU_NR * kcp;
}

/* Geometry and per-thread scratch of one call. */
typedef struct plan {
    int64_t m, n, k;
    int64_t mc, nc;         /* tile size */
    int64_t kc;             /* K block */
    int64_t kcmax;          /* padded K block, as allocated */
    int64_t ldacc;          /* leading dimension of a tile's accumulators */
    int64_t mtiles, ntiles;
    int direct;             /* B read in place */
    int panels;             /* B's int16 panels read from a packed B */
    size_t apack_elems, bpack_elems, acc_elems;
    size_t thread_bytes;
} plan;


static void make_plan(plan *pl, const smm_mm_problem *p, int nthreads, int direct_m)
{
    pl->m = p->m;
    pl->n = p->n;
    pl->k = p->k;
    pl->direct = p->m <= direct_m;
    if (pl->direct) {
        pl->mc = pl->m;
        /* Enough column tiles to keep every thread busy. */
        int64_t nc = SMM_CPU_NC_DIRECT;
        while (nc > SMM_CPU_NR && (pl->n + nc - 1) / nc < 4 * (int64_t)nthreads)
            nc /= 2;
        pl->nc = balanced_block(pl->n, nc, SMM_CPU_NR);
    } else {
        pl->mc = balanced_block(pl->m, SMM_CPU_MC, SMM_CPU_MR);
        pl->nc = balanced_block(pl->n, SMM_CPU_NC, SMM_CPU_NR);
        /* Small problems: split further so that every thread has a tile. */
        while ((pl->m + pl->mc - 1) / pl->mc * ((pl->n + pl->nc - 1) / pl->nc) < 2 * (int64_t)nthreads
               && pl->nc > 4 * SMM_CPU_NR)
            pl->nc = round_up(pl->nc / 2, SMM_CPU_NR);
    }
    pl->mtiles = (pl->m + pl->mc - 1) / pl->mc;
    pl->ntiles = (pl->n + pl->nc - 1) / pl->nc;
    /* The int16 panels have twice the bytes of B: worth reading from memory
     * only when several row tiles reuse them. Otherwise the packed int8
     * copy is packed on the fly, as an unpacked B would be. */
    pl->panels = p->b_packed && !pl->direct && pl->mtiles >= SMM_CPU_PANELS_MIN_MTILES;
    if (pl->direct) {
        int64_t kc = SMM_CPU_DIRECT_A_BYTES / ((pl->m + 1) * (int64_t)sizeof(int16_t));
        kc = kc / SMM_CPU_KPAD * SMM_CPU_KPAD;
        pl->kc = kc < SMM_CPU_KC ? SMM_CPU_KC : kc > SMM_CPU_DIRECT_KC_MAX ? SMM_CPU_DIRECT_KC_MAX : kc;
    } else {
        pl->kc = SMM_CPU_KC;   /* the K block of the packed panels */
    }
    pl->kcmax = round_up(min64(pl->k, pl->kc), SMM_CPU_KPAD);
    if (pl->kcmax == 0)
        pl->kcmax = SMM_CPU_KPAD;
    pl->ldacc = round_up(pl->nc, SMM_CPU_NR);
    /* One more row of A and of the accumulators for the column sums. */
    pl->apack_elems = (size_t)(pl->mc + 1) * (size_t)pl->kcmax;
    pl->bpack_elems = pl->direct || pl->panels ? 0 : (size_t)SMM_CPU_NR * (size_t)pl->kcmax;
    pl->acc_elems = (size_t)(pl->mc + 1) * (size_t)pl->ldacc;
    pl->thread_bytes = align64(pl->apack_elems * sizeof(int16_t)) +
                       align64(pl->bpack_elems * sizeof(int16_t)) +
                       align64(pl->acc_elems * sizeof(uint32_t));
}

/* Asks for the first `bytes` of `rows` rows of B (ldb apart) in L1. The
 * direct microkernels prefetch each of their rows a fixed distance ahead
 * of k, so a column group's first bytes would be requested only once the
 * kernel starts on it; asked for while the group before runs, the stream
 * does not stall at the switch (doc/design.md). */
static void prefetch_rows(const int8_t *b, int64_t ldb, int64_t rows, int64_t bytes)
{
    for (int64_t j = 0; j < rows; j++)
        for (int64_t o = 0; o < bytes; o += 64)
            __builtin_prefetch(b + j * ldb + o, 0, 3);
}

/* One tile: rows i0 .. i0+mt-1, columns j0 .. j0+nt-1 of C. */
static void run_tile(const smm_cpu_kernels *kr, const plan *pl, const smm_mm_problem *p,
                     const smm_cpu_epilogue *epi, unsigned char *scratch,
                     int64_t i0, int64_t mt, int64_t j0, int64_t nt)
{
    int16_t *apack = (int16_t *)scratch;
    scratch += align64(pl->apack_elems * sizeof(int16_t));
    int16_t *bpack = (int16_t *)scratch;
    scratch += align64(pl->bpack_elems * sizeof(int16_t));
    uint32_t *acc = (uint32_t *)scratch;

    const int64_t ldacc = pl->ldacc;
    const int64_t K = pl->k;
    const packed_layout *pk = p->b_packed ? (const packed_layout *)p->b_packed->data : NULL;
    /* B's int8 rows where they are read (small-M path, or packed on the
     * fly): the caller's, or the packed copy (leading dimension K). */
    const int8_t *brows = pk ? pk->rows : p->b;
    const int64_t ldb = pk ? K : p->ldb;
    /* With a zero point, one more row of A, all ones, makes the kernels
     * produce the column sums of B as accumulator row mt; a packed B has
     * them already. */
    const int ones_row = p->azp && !pk;
    const int64_t ma = mt + (ones_row ? 1 : 0);
    const uint32_t *colsum = !p->azp ? NULL : pk ? pk->colsum + j0 : acc + mt * ldacc;
    memset(acc, 0, (size_t)(ma * ldacc) * sizeof(uint32_t));

    for (int64_t k0 = 0; k0 < K; k0 += pl->kc) {
        const int64_t kc = min64(pl->kc, K - k0);
        const int64_t kcp = round_up(kc, SMM_CPU_KPAD);
        /* A block: row i of the tile at apack + i * kcp, so each MR rows
         * form a micro-panel. */
        kr->pack(mt, kc, p->a + i0 * p->lda + k0, p->lda, apack, kcp);
        if (ones_row) {
            int16_t *ones = apack + mt * kcp;
            for (int64_t k = 0; k < kcp; k++)
                ones[k] = k < kc ? 1 : 0;
        }

        for (int64_t jr = 0; jr < nt; jr += SMM_CPU_NR) {
            const int64_t nr = min64(SMM_CPU_NR, nt - jr);
            if (pl->direct) {
                const int8_t *bsrc = brows + (j0 + jr) * ldb + k0;
                /* Columns past the edge repeat the last one; their sums land
                 * in the padding of the accumulator rows. */
                const int8_t *brow[SMM_CPU_NR];
                for (int64_t j = 0; j < SMM_CPU_NR; j++)
                    brow[j] = bsrc + min64(j, nr - 1) * ldb;
                if (jr + SMM_CPU_NR < nt)
                    prefetch_rows(bsrc + SMM_CPU_NR * ldb, ldb,
                                  min64(SMM_CPU_NR, nt - jr - SMM_CPU_NR),
                                  min64(kc, SMM_CPU_DIRECT_PREFETCH));
                for (int64_t ir = 0; ir < ma; ir += SMM_CPU_MR) {
                    const int64_t mr = min64(SMM_CPU_MR, ma - ir);
                    kr->ukr_direct[mr](kc, apack + ir * kcp, kcp, brow, acc + ir * ldacc + jr, ldacc);
                }
            } else {
                const int16_t *bp = bpack;
                if (pl->panels) {
                    /* j0 and jr are multiples of NR, k0 of the panels' K block. */
                    bp = packed_panel(pk, k0, (j0 + jr) / SMM_CPU_NR, kcp);
                } else {
                    kr->pack(nr, kc, brows + (j0 + jr) * ldb + k0, ldb, bpack, kcp);
                    if (nr < SMM_CPU_NR)
                        memset(bpack + nr * kcp, 0, (size_t)((SMM_CPU_NR - nr) * kcp) * sizeof(int16_t));
                }
                for (int64_t ir = 0; ir < ma; ir += SMM_CPU_MR) {
                    const int64_t mr = min64(SMM_CPU_MR, ma - ir);
                    kr->ukr_packed[mr](kcp, apack + ir * kcp, kcp, bp, kcp, acc + ir * ldacc + jr, ldacc);
                }
            }
        }
    }

    for (int64_t i = 0; i < mt; i++)
        kr->epilogue(epi, i0 + i, j0, nt, acc + i * ldacc, colsum);
}

/* What one tile needs (smm_cpu_run_tiles hands it to mm_tile). */
typedef struct {
    const smm_cpu_kernels *kr;
    const plan *pl;
    const smm_mm_problem *p;
} mm_job;

static void mm_tile(const void *job, const smm_cpu_epilogue *epi, unsigned char *scratch,
                    const unsigned char *shared, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
    (void)shared;
    const mm_job *j = job;
    run_tile(j->kr, j->pl, j->p, epi, scratch, i0, m, j0, n);
}

smm_status smm_cpu_mm(smm_context *ctx, const smm_mm_problem *p)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const smm_cpu_kernels *kr = st ? st->k : &smm_cpu_kernels_c;
    const int nthreads = smm_threads(ctx);

    plan pl;
    make_plan(&pl, p, nthreads, kr->direct_m);
    const mm_job job = {kr, &pl, p};
    const smm_cpu_tiling tiling = {pl.m, pl.n, pl.mc, pl.nc, pl.thread_bytes, 0, NULL, 0, 0};
    return smm_cpu_run_tiles(ctx, p, &tiling, nthreads, mm_tile, &job);
}

smm_status smm_cpu_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb, smm_packed_b *pb)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const smm_cpu_kernels *kr = st ? st->k : &smm_cpu_kernels_c;
    const int64_t n = pb->n, k = pb->k;
    const int64_t groups = (n + SMM_CPU_NR - 1) / SMM_CPU_NR;
    const int64_t kp = round_up(k, SMM_CPU_KPAD);

    /* The parts (see packed_layout): column sums, panels, rows. */
    const int64_t size[3][4] = {
        {groups, SMM_CPU_NR, (int64_t)sizeof(uint32_t), 1},
        {groups, SMM_CPU_NR, kp, (int64_t)sizeof(int16_t)},
        {n, k, 1, 1},
    };
    unsigned char *mem;
    size_t bytes, off[3];
    smm_status status = smm_cpu_packed_alloc(ctx, n, k, sizeof(packed_layout), size, 3, &mem,
                                               &bytes, off);
    if (status != SMM_OK)
        return status;
    packed_layout *pk = (packed_layout *)mem;
    uint32_t *colsum = (uint32_t *)(mem + off[0]);
    int16_t *panels = (int16_t *)(mem + off[1]);
    int8_t *rows = (int8_t *)(mem + off[2]);
    pk->groups = groups;
    pk->colsum = colsum;
    pk->panels = panels;
    pk->rows = rows;

    int nthreads = smm_threads(ctx);
    if (nthreads > groups)
        nthreads = groups > 0 ? (int)groups : 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int64_t g = 0; g < groups; g++) {
        const int64_t j0 = g * SMM_CPU_NR;
        const int64_t nr = min64(SMM_CPU_NR, n - j0);
        for (int64_t j = 0; j < SMM_CPU_NR; j++) {
            uint32_t sum = 0;
            if (j < nr && k > 0) {   /* b may be NULL when k == 0 */
                const int8_t *src = b + (j0 + j) * ldb;
                for (int64_t kk = 0; kk < k; kk++)
                    sum += (uint32_t)(int32_t)src[kk];
                memcpy(rows + (j0 + j) * k, src, (size_t)k);
            }
            colsum[j0 + j] = sum;
        }
        for (int64_t k0 = 0; k0 < k; k0 += SMM_CPU_KC) {
            const int64_t kc = min64(SMM_CPU_KC, k - k0);
            const int64_t kcp = round_up(kc, SMM_CPU_KPAD);
            int16_t *dst = (int16_t *)packed_panel(pk, k0, g, kcp);
            kr->pack(nr, kc, b + j0 * ldb + k0, ldb, dst, kcp);
            if (nr < SMM_CPU_NR)
                memset(dst + nr * kcp, 0, (size_t)((SMM_CPU_NR - nr) * kcp) * sizeof(int16_t));
        }
    }

    pb->mem = mem;
    pb->bytes = bytes;
    pb->rows = rows;
    pb->data = pk;
    return SMM_OK;
}
