/*
 * cpu_internal.h - what the CPU backend's files (lib/cpu/) share.
 *
 * The backend is BLIS-shaped: a portable driver (gemm.c: cache blocking,
 * packing, threading, fused epilogue) calls small kernels through a table
 * (smm_cpu_kernels) chosen once per context (cpu_backend.c). Each ISA level
 * is one table; a level a CPU lacks is never selected. Every table computes
 * the same bits: integer sums are exact modulo 2^32 and the epilogue is
 * evaluated per element in the contract's order (doc/numerics.md).
 */
#ifndef SMM_CPU_INTERNAL_H
#define SMM_CPU_INTERNAL_H

#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Kernel bodies are written once as always-inline functions and
 * instantiated per ISA level by thin wrappers carrying a target attribute. */
#define SMM_ALWAYS_INLINE static inline __attribute__((always_inline))
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define SMM_HAVE_AVX2_BUILD 1
#define SMM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* Small integer helpers of the blocked drivers (gemm.c, gemm_vnni.c). */
static inline int64_t round_up(int64_t x, int64_t to)
{
    return (x + to - 1) / to * to;
}
static inline int64_t min64(int64_t x, int64_t y)
{
    return x < y ? x : y;
}
static inline int64_t max64(int64_t x, int64_t y)
{
    return x > y ? x : y;
}
static inline size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

/* Register block of the microkernels: MR rows of A by NR rows of B. */
#define SMM_CPU_MR 3
#define SMM_CPU_NR 4
/* Packed K panels are padded with zeros to a multiple of this. */
#define SMM_CPU_KPAD 16

/*
 * Microkernel over packed operands (int8 values widened to int16):
 *   for i < mr (the table index, 1..SMM_CPU_MR), j < SMM_CPU_NR:
 *     acc[i * ldacc + j] += sum_{k < kc} a[i * lda + k] * b[j * ldb + k]
 * The sum over kc is taken in int32 (exact for kc <= 131071) and added to
 * acc modulo 2^32. kc is a multiple of SMM_CPU_KPAD.
 */
typedef void (*smm_cpu_ukr_packed_fn)(int64_t kc, const int16_t *a, int64_t lda,
                                      const int16_t *b, int64_t ldb,
                                      uint32_t *acc, int64_t ldacc);

/*
 * Microkernel with B read in place (int8 rows of the caller's matrix):
 *   acc[i * ldacc + j] += sum_{k < kc} a[i * lda + k] * brow[j][k]
 * for i < mr, j < SMM_CPU_NR; kc is any value <= 131071.
 */
typedef void (*smm_cpu_ukr_direct_fn)(int64_t kc, const int16_t *a, int64_t lda,
                                      const int8_t *const *brow,
                                      uint32_t *acc, int64_t ldacc);

/* Bytes ahead of the current k at which the direct microkernels prefetch
 * B's rows; the driver asks for the next column group's first bytes as
 * far ahead (gemm.c, doc/design.md). */
#ifndef SMM_CPU_DIRECT_PREFETCH
#define SMM_CPU_DIRECT_PREFETCH 256
#endif

/* Widens rows x cols int8 (leading dimension lds) to int16 rows of ldd
 * elements, zero-filling columns cols..ldd-1. */
typedef void (*smm_cpu_pack_fn)(int64_t rows, int64_t cols, const int8_t *src, int64_t lds,
                                int16_t *dst, int64_t ldd);

/* Everything the epilogue of one output row needs (doc/numerics.md). */
typedef struct smm_cpu_epilogue {
    const float *scale_a;   /* per-tensor (scale_a_len == 1) or per-token */
    int64_t scale_a_len;
    const float *scale_b;   /* per-tensor (scale_b_len == 1) or per-channel */
    int64_t scale_b_len;
    const float *bias;      /* NULL or N floats */
    const int32_t *azp;     /* NULL, 1 or M int32 */
    int64_t azp_len;
    void *c;
    int64_t ldc;
    smm_dtype c_dtype;      /* I32 (raw), F32, F16 or BF16 */
} smm_cpu_epilogue;

/*
 * Writes C[m][j0 + j] for j < n from the accumulators acc[j] (and, when azp
 * is set, colsum[j] = column sums of B over K for columns j0 + j, mod 2^32).
 */
typedef void (*smm_cpu_epilogue_fn)(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
                                    const uint32_t *acc, const uint32_t *colsum);

/* Quantizes rows r0 .. r1-1 of a validated smm_quantize_i8 problem
 * (quantize.c). */
typedef void (*smm_cpu_quantize_fn)(const smm_quantize_args *q, int64_t r0, int64_t r1);

/* One ISA level's kernels. Index 0 of the microkernel arrays is unused. */
typedef struct smm_cpu_kernels {
    const char *name;   /* "c", "avx2", ... */
    smm_cpu_ukr_packed_fn ukr_packed[SMM_CPU_MR + 1];
    smm_cpu_ukr_direct_fn ukr_direct[SMM_CPU_MR + 1];
    smm_cpu_pack_fn pack;
    smm_cpu_epilogue_fn epilogue;
    smm_cpu_quantize_fn quantize_rows;
    int direct_m;       /* gemm.c: M at or below which B is read in place */
} smm_cpu_kernels;

/* Kernel tables (gemm.c). smm_cpu_kernels_avx2 is NULL when the compiler
 * cannot build AVX2 code; it may only be used when the CPU and the OS
 * support AVX2 and FMA. */
extern const smm_cpu_kernels smm_cpu_kernels_c SMM_INTERNAL;
extern const smm_cpu_kernels *const smm_cpu_kernels_avx2 SMM_INTERNAL;

/* The quantizer's row functions of each level (quantize.c). */
void smm_cpu_quantize_rows_c(const smm_quantize_args *q, int64_t r0, int64_t r1) SMM_INTERNAL;
#ifdef SMM_HAVE_AVX2_BUILD
void smm_cpu_quantize_rows_avx2(const smm_quantize_args *q, int64_t r0, int64_t r1) SMM_INTERNAL;
/* ukr_direct_avx2.c: the AVX2 level's microkernels with B read in place,
 * mr = 1, 2, 3 (smm_cpu_ukr_direct_fn). */
void smm_cpu_ukr_direct1_avx2(int64_t kc, const int16_t *a, int64_t lda, const int8_t *const *brow,
                              uint32_t *acc, int64_t ldacc) SMM_INTERNAL;
void smm_cpu_ukr_direct2_avx2(int64_t kc, const int16_t *a, int64_t lda, const int8_t *const *brow,
                              uint32_t *acc, int64_t ldacc) SMM_INTERNAL;
void smm_cpu_ukr_direct3_avx2(int64_t kc, const int16_t *a, int64_t lda, const int8_t *const *brow,
                              uint32_t *acc, int64_t ldacc) SMM_INTERNAL;
/* The epilogue of the AVX2 and VNNI levels, in AVX2 + FMA intrinsics
 * (epilogue_avx2.c); the same bits as the portable one. */
void smm_cpu_epilogue_avx2(const smm_cpu_epilogue *e, int64_t m, int64_t j0, int64_t n,
                           const uint32_t *acc, const uint32_t *colsum) SMM_INTERNAL;
#endif

/* ------------------------------------------------------------------ */
/* VNNI levels (gemm_vnni.c, kernels_avx512_vnni.c, kernels_avx_vnni.c, */
/* kernels_vnni_emulated.c)                                            */
/* ------------------------------------------------------------------ */

/*
 * vpdpbusd multiplies unsigned bytes by signed bytes. The VNNI levels feed
 * it A' = A + 128 (A xor 0x80, as uint8) and B (int8), and subtract
 * 128 * colsum(B) per column afterwards:
 *   sum_k A'[k] B[k] = sum_k A[k] B[k] + 128 * sum_k B[k]
 * with every quantity taken modulo 2^32, so the result is the contract's
 * wrapped int32 sum at every K.
 *
 * B is packed in panels of nr columns (nr = 16 for zmm, 8 for ymm): for
 * each quad q of K values (K zero-padded to a multiple of 4), nr groups of
 * 4 bytes, group j = B[j][4q .. 4q+3], i.e. exactly one vpdpbusd operand.
 * Columns past N are zero.
 */

/*
 * Panel microkernel, for i < mr (1 .. table mr, or 1 .. table dmr when
 * np = 1), j < np * nr (np 1 .. table np):
 *   acc[i * ldacc + j] += sum_{q < kq} sum_{t < 4}
 *                         a[i * lda + 4q + t] * b[(j / nr) * ldbp + q * 4 * nr + (j % nr) * 4 + t]
 * a as uint8 (the shifted A'), b as int8 (panels as above); every sum and
 * the addition to acc wrap modulo 2^32.
 */
typedef void (*smm_cpu_vnni_panel_fn)(int64_t kq, const uint8_t *a, int64_t lda, int mr,
                                      const int8_t *b, int64_t ldbp, int np,
                                      uint32_t *acc, int64_t ldacc);

/*
 * Row-dot microkernel (small M, B read in place), for i < mr (1 .. table
 * rmr), j < 4:
 *   acc[i * ldacc + j] += sum_{k < kc} a[i * lda + k] * brow[j][k]   (mod 2^32)
 * a as uint8, rows readable (and zero) up to round_up(kc, 64); brow[j] int8
 * rows, read only below kc. pf[t] for t < npf (0 .. 4): rows of npf * kc
 * bytes that the kernel asks the cache to fetch (into L2) while it runs,
 * a hint only (B's next rows: the stream from memory keeps going while
 * the rows in hand are reused from cache); nothing is read from them.
 */
typedef void (*smm_cpu_vnni_rowdot_fn)(int64_t kc, const uint8_t *a, int64_t lda, int mr,
                                       const int8_t *const *brow, const int8_t *const *pf,
                                       int npf, uint32_t *acc, int64_t ldacc);

/* Register blocking and packed formats of the two vector widths (the real
 * and the emulated tables of a width share them). zmm: 8 rows x 2 panels
 * of 16 columns = 16 accumulators; with one panel, up to 16 rows (the
 * small-M path's single pass, below); row-dot 6 rows x 4 columns. ymm (16
 * registers): 6 rows x 2 panels of 8 columns = 12 accumulators; row-dot 2
 * rows x 4 columns. */
#define SMM_CPU_VNNI512_FORMAT "cpu avx512_vnni int8 panels 16 rows x k4 + colsums"
#define SMM_CPU_VNNI512_MR 8
#define SMM_CPU_VNNI512_NP 2
#define SMM_CPU_VNNI512_DMR 16
#define SMM_CPU_VNNI512_RMR 6
#define SMM_CPU_VNNI256_FORMAT "cpu avx_vnni int8 panels 8 rows x k4 + colsums"
#define SMM_CPU_VNNI256_MR 6
#define SMM_CPU_VNNI256_NP 2
#define SMM_CPU_VNNI256_DMR 6
#define SMM_CPU_VNNI256_RMR 2
/* AMX (kernels_amx.c): the panel kernel on 2 x 2 tiles of 16 x 16 int32,
 * 32 rows x 2 panels of 16 columns, the AVX-512 packed format. */
#define SMM_CPU_AMX_MR 32
#define SMM_CPU_AMX_NP 2
/* Its K block: a build-time knob, a positive multiple of 64 (whole tile
 * steps; the last block of K takes any tail). */
#ifndef SMM_CPU_AMX_KC
#define SMM_CPU_AMX_KC 1024
#endif

/* How far ahead (bytes) in each panel of B the panel microkernels ask for
 * the cache line they will read (a prefetch into L1 per panel per step;
 * lines past the panel's end are the next K block's or the next panel's,
 * and a prefetch never faults). It keeps a stream from memory going when
 * B is read once (small M, prepacked B). 0: none. */
#ifndef SMM_CPU_VNNI_PF_BYTES
#define SMM_CPU_VNNI_PF_BYTES 1024
#endif
#ifndef SMM_CPU_VNNI_PF_HINT
#define SMM_CPU_VNNI_PF_HINT _MM_HINT_T0
#endif
/* The single-pass panel kernel (more than mr rows, one panel), and
 * panel_far (M <= mr over a packed B, on Intel CPUs): a second prefetch
 * per step this far ahead (bytes), into L2, so that enough of the stream
 * is in flight to cover the memory's latency (a core tracks few more L1
 * misses than the near prefetch keeps busy). 0: none. */
#ifndef SMM_CPU_VNNI_PF_FAR_BYTES
#define SMM_CPU_VNNI_PF_FAR_BYTES 8192
#endif

/* One VNNI level's kernels and register blocking. */
typedef struct smm_cpu_vnni_kernels {
    const char *name;     /* "avx512_vnni", "avx512_vnni_emulated", ... */
    const char *format;   /* the packed-B format (same layout = same string) */
    int nr;               /* panel width (columns), 16 or 8 */
    int mr, np;           /* panel kernel: rows, panels */
    int dmr;              /* panel kernel with np = 1: up to dmr rows (>= mr);
                             the small-M path with a prepacked B then
                             makes one pass over B when M <= dmr */
    int rmr;              /* row-dot kernel: rows */
    smm_cpu_vnni_panel_fn panel;
    smm_cpu_vnni_rowdot_fn rowdot;   /* NULL when .small is set */
    /* NULL, or the kernels of the small-M path (M <= 16), same format */
    const struct smm_cpu_vnni_kernels *small;
    int kc;               /* K block of the general path (bytes, a multiple
                             of 4), 0: SMM_CPU_VNNI_KC (gemm_vnni.c) */
    int pf_next;          /* general path: 1 asks for the next step's
                             panels of B into L2 while a step runs (the
                             vector kernels), 0 not (the AMX tiles, which it
                             slowed by a third) */
    /* NULL, or panel with the far L2 prefetch at every row count, for the
     * single row block over a packed B (M <= mr) on CPUs whose cores keep
     * too few misses in flight to stream B without it (gemm_vnni.c,
     * wants_far_prefetch) */
    smm_cpu_vnni_panel_fn panel_far;
} smm_cpu_vnni_kernels;

/* The tables. The real ones are NULL when the compiler cannot build them;
 * they may only be used when the CPU and the OS support the level (see
 * cpu_backend.c). The emulated ones are portable C with the same layout,
 * packing, compensation and lane arithmetic (SMM_CPU_ISA=*_emulated, a
 * testing aid: they prove the data flow on any CPU; they are slow). */
extern const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx512 SMM_INTERNAL;
extern const smm_cpu_vnni_kernels smm_cpu_vnni_avx512_kernels SMM_INTERNAL; /* when built */
extern const smm_cpu_vnni_kernels *const smm_cpu_vnni_amx SMM_INTERNAL;
/* Linux: the process's permission to use the AMX tile state, asked for
 * once (arch_prctl); 1 when granted or not needed, 0 otherwise or when
 * the AMX kernels are not built. */
int smm_cpu_amx_permit(void) SMM_INTERNAL;
extern const smm_cpu_vnni_kernels *const smm_cpu_vnni_avx SMM_INTERNAL;
extern const smm_cpu_vnni_kernels smm_cpu_vnni_avx512_emulated SMM_INTERNAL;
extern const smm_cpu_vnni_kernels smm_cpu_vnni_avx_emulated SMM_INTERNAL;
extern const smm_cpu_vnni_kernels smm_cpu_vnni_amx_emulated SMM_INTERNAL;

/* ------------------------------------------------------------------ */
/* Kernel levels (levels.c)                                            */
/* ------------------------------------------------------------------ */

/*
 * One CPU kernel level: everything the backend knows about it. The levels
 * are registered in one ordered table (smm_cpu_level_table, levels.c),
 * lowest first, the emulations (testing aids) last; the backend chooses
 * the highest real level this CPU runs at or below the cap SMM_CPU_ISA
 * (cpu_backend.c), and smm_cpu_levels() lists them by their names.
 */
typedef struct smm_cpu_level {
    const char *name;         /* as SMM_CPU_ISA and smm_cpu_levels spell it */
    const char *alias;        /* NULL, or another name SMM_CPU_ISA accepts */
    const char *description;  /* its kernels, in a few words */
    /* Feature test: 1 when the CPU and the OS support the level (this
     * build's kernels are checked apart, through k and v), else 0 and
     * *why says what is missing. NULL: every CPU. */
    int (*supported)(const smm_cpu_info *ci, const char **why);
    /* NULL, or the process-wide permission the level needs (1: granted),
     * asked for only when the level is about to be chosen. */
    int (*permit)(void);
    /* The int16 kernels, epilogue and quantizer: a table the build may
     * leave NULL (the level then does not run); k NULL: the best int16
     * table this CPU runs (the emulations). */
    const smm_cpu_kernels *const *k;
    /* NULL (an int16 level), or the VNNI kernels used for every product:
     * a table the build may leave NULL (the level then does not run). */
    const smm_cpu_vnni_kernels *const *v;
    const char *format;       /* the packed-B format (smm_packed_b_format) */
    int emulation;            /* a portable emulation of a level's data flow:
                                 runs anywhere, chosen only by its name */
} smm_cpu_level;

extern const smm_cpu_level smm_cpu_level_table[] SMM_INTERNAL;
extern const int smm_cpu_level_count SMM_INTERNAL;

/* Can this CPU, OS and build run level l? 1, or 0 and *why says what is
 * missing. ask: ask for the level's permission (l->permit, a process-wide
 * change, so only when the level is about to be chosen); without ask the
 * level is taken to run when the CPU, OS and build support it. */
int smm_cpu_level_runs(const smm_cpu_level *l, const char **why, int ask) SMM_INTERNAL;

/* The level a context created now uses: the highest real level this
 * machine runs at or below the cap SMM_CPU_ISA names (any case; an
 * emulation when it names one), with the int16 table it runs with in *k.
 * why (cap bytes; NULL: none) receives the level, the reason and the
 * levels this CPU runs, in words. */
const smm_cpu_level *smm_cpu_level_select(const smm_cpu_kernels **k, char *why,
                                          size_t cap) SMM_INTERNAL;

/* Per-context state (ctx->backend_data). */
typedef struct smm_cpu_state {
    const smm_cpu_level *level;      /* the context's level */
    const smm_cpu_kernels *k;        /* int16 kernels, epilogue, quantizer */
    const smm_cpu_vnni_kernels *v;   /* NULL, or the VNNI level's kernels
                                        (then used for every product) */
} smm_cpu_state;

/* The backend's operations (gemm.c, quantize.c); arguments already
 * validated by the framework (lib/internal.h). */
/* Fills the part of the shared buffer that thread tid of nthreads owns
 * with what the tiles of rows r0 .. r0+rows-1 of C need (every thread
 * calls it once per band of rows, before any tile of the band; the tiles
 * start after all have returned). */
typedef void (*smm_cpu_prepare_fn)(const void *job, unsigned char *shared, int tid, int nthreads,
                                   int64_t r0, int64_t rows);
/* The tiles of C a blocked driver computes: an m x n problem cut into tiles
 * of mc x nc (the last ones smaller), each thread with thread_bytes of
 * scratch. With prepare set, the rows are taken in bands of band_rows (a
 * multiple of mc; the last band smaller): prepare() fills shared_bytes of
 * scratch for the band, then the band's tiles run, each handed the shared
 * buffer offset by shared_row_bytes per row of the band above it. */
/* The fewest multiply-adds (M * N * K) worth a thread of their own in
 * smm_cpu_run_tiles. */
#define SMM_CPU_MACS_PER_THREAD ((int64_t)1 << 17)

typedef struct smm_cpu_tiling {
    int64_t m, n, mc, nc;
    size_t thread_bytes;
    size_t shared_bytes;
    smm_cpu_prepare_fn prepare;
    int64_t band_rows;
    size_t shared_row_bytes;
} smm_cpu_tiling;
/* Computes the tile C[i0 .. i0+m) x [j0 .. j0+n) of the driver's job,
 * writing it through epi, with the calling thread's scratch and the shared
 * buffer (read only by then; with prepare, at the tile's first row). */
typedef void (*smm_cpu_tile_fn)(const void *job, const smm_cpu_epilogue *epi,
                                unsigned char *scratch, const unsigned char *shared,
                                int64_t i0, int64_t m, int64_t j0, int64_t n);
/* Runs tile() over every tile of problem p (after prepare() for each band
 * of rows, when set), on up to nthreads OpenMP threads (fewer when there
 * are fewer tiles), each in the contract's floating-point environment,
 * with p's epilogue. Allocates all scratch first: SMM_ERR_NO_MEMORY before
 * any output is written, else SMM_OK. */
smm_status smm_cpu_run_tiles(smm_context *ctx, const smm_mm_problem *p, const smm_cpu_tiling *t,
                             int nthreads, smm_cpu_tile_fn tile, const void *job) SMM_INTERNAL;

/* Runs rows(job, r0, r1) over rows [0, m) split into contiguous ranges
 * among up to smm_threads(ctx) OpenMP threads, at most one thread per
 * 16K elements (m * row_elems), each in the contract's floating-point
 * environment; with one thread, directly on the caller (already in that
 * environment). Used by the passes that work row by row (the quantizer,
 * smm_scaled_epilogue). */
typedef void (*smm_cpu_rows_fn)(const void *job, int64_t r0, int64_t r1);
void smm_cpu_run_rows(smm_context *ctx, int64_t m, int64_t row_elems, smm_cpu_rows_fn rows,
                      const void *job) SMM_INTERNAL;

smm_status smm_cpu_mm(smm_context *ctx, const smm_mm_problem *p) SMM_INTERNAL;

/* Allocates, through ctx's allocator, one 64-byte-aligned block for a
 * packed B: a header of header_bytes at its start, then nparts parts in
 * order, part i of size[i][0] * size[i][1] * size[i][2] * size[i][3]
 * bytes at byte offset off[i], a multiple of 64; every product and sum is
 * checked for overflow. *bytes receives the block's size. Errors (ctx's
 * message set, nothing allocated): SMM_ERR_INVALID_ARG when the size
 * overflows ("smm_pack_b: the byte size of the packed copy of N x K
 * overflows"), SMM_ERR_NO_MEMORY. */
smm_status smm_cpu_packed_alloc(smm_context *ctx, int64_t n, int64_t k, size_t header_bytes,
                                const int64_t (*size)[4], int nparts, unsigned char **mem,
                                size_t *bytes, size_t *off) SMM_INTERNAL;
/* The packed-B builders of the two kinds of level; the backend's pack_b
 * (cpu_backend.c) has refused N or K above INT64_MAX / 2 before calling
 * them, so their rounding of N and K up to whole groups cannot overflow. */
smm_status smm_cpu_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb,
                          smm_packed_b *pb) SMM_INTERNAL;
/* The one packed-B format of every kernel level (gemm.c): the blocked
 * driver's int16 panels (SMM_CPU_NR rows per K block), an int8 copy of B
 * for the small-M path, and the column sums. */
extern const char smm_cpu_packed_format[] SMM_INTERNAL;
smm_status smm_cpu_quantize(smm_context *ctx, const smm_quantize_args *q) SMM_INTERNAL;
/* The same operations on a VNNI level (gemm_vnni.c); st->v is set. */
smm_status smm_cpu_vnni_mm(smm_context *ctx, const smm_mm_problem *p) SMM_INTERNAL;
/* smm_linear on a VNNI level: each row of A is quantized (q) by the thread
 * that packs it into A', in the same pass (q's outputs are p's a, scale_a
 * and azp). */
smm_status smm_cpu_vnni_linear(smm_context *ctx, const smm_quantize_args *q,
                               const smm_mm_problem *p) SMM_INTERNAL;
smm_status smm_cpu_vnni_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb,
                               smm_packed_b *pb) SMM_INTERNAL;

/* ------------------------------------------------------------------ */
/* Scalar conversions of the contract, written as integer bit          */
/* manipulation so that they are independent of the floating-point    */
/* environment (and of lib/convert.c, which they are tested against).  */
/* ------------------------------------------------------------------ */

static inline uint32_t smm_cpu_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float smm_cpu_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* y of the contract for one output (doc/numerics.md, "Epilogue"): acc the
 * sum over K, cs the column sum (read only with a zero point z), sa and sb
 * the two scales, bias NULL or the row's bias (element j). */
static inline float smm_cpu_epi_value(uint32_t acc, uint32_t cs, uint32_t z, float sa, float sb,
                                      const float *bias, int has_azp, int64_t j)
{
    int32_t v = (int32_t)(acc - z * cs);
    float t = (float)v * sb;
    if (bias)
        return fmaf(sa, t, bias[j]);
    if (has_azp)
        return fmaf(sa, t, 0.0f);
    return sa * t;
}

/* binary32 -> bfloat16, round to nearest even, any NaN -> 0x7FFF. */
static inline uint16_t smm_cpu_to_bf16(float x)
{
    uint32_t u = smm_cpu_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0x7FFF;
    /* Adding 0x7FFF plus the lowest kept bit rounds half to even; a carry
     * out of the mantissa bumps the exponent, up to Inf. */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* binary32 -> binary16, round to nearest even, subnormals kept, |x| >= 65520
 * -> Inf, any NaN -> 0x7FFF. Branch-free (every case is computed and the
 * right one selected) so that output loops vectorize. */
static inline uint16_t smm_cpu_to_f16(float x)
{
    uint32_t u = smm_cpu_f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;

    /* Normal binary16 (|x| >= 2^-14): rebias the exponent by 127 - 15 and
     * round off 13 bits; a carry may reach the exponent (up to Inf). */
    uint32_t rn = a - 0x38000000u;
    rn = (rn + 0x0FFFu + ((rn >> 13) & 1u)) >> 13;

    /* Subnormal binary16 (2^-25 <= |x| < 2^-14): units of 2^-24, value =
     * m * 2^(e - 150), so shift the 24-bit significand right by 126 - e
     * (14 .. 24), ties to even. The shift is clamped only to stay defined
     * in the lanes whose result is not selected. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t sh = 126u - e;
    sh = sh > 31u ? 31u : sh;
    sh |= (uint32_t)(sh == 0);
    /* Adding half - 1 plus the lowest kept bit rounds half to even; 0x400
     * is the smallest normal. */
    uint32_t rs = (m + ((1u << (sh - 1u)) - 1u) + ((m >> sh) & 1u)) >> sh;

    /* Selections as masks (all ones / zero). */
    uint32_t is_normal = 0u - (uint32_t)(a >= 0x38800000u);
    uint32_t is_zero = 0u - (uint32_t)(a < 0x33000000u);    /* below 2^-25: 0 */
    uint32_t is_inf = 0u - (uint32_t)(a >= 0x477FF000u);    /* 65520 and up: Inf */
    uint32_t is_nan = 0u - (uint32_t)(a > 0x7F800000u);
    uint32_t r = (rn & is_normal) | (rs & ~is_normal);
    r &= ~is_zero;
    r = (r & ~is_inf) | (0x7C00u & is_inf);
    r |= sign;
    r = (r & ~is_nan) | (0x7FFFu & is_nan);
    return (uint16_t)r;
}

/* Exact widening of bfloat16 / binary16 bits. */
static inline float smm_cpu_bf16_to_f32(uint16_t h)
{
    return smm_cpu_bits_f32((uint32_t)h << 16);
}

static inline float smm_cpu_f16_to_f32(uint16_t h)
{
    /* Branch-free (vectorizes): select among the three encodings. A
     * subnormal m * 2^-24 is exact in binary32 (m < 2^10, a normal result). */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
    uint32_t special = sign | 0x7F800000u | (m << 13);
    uint32_t sub = sign | smm_cpu_f32_bits((float)(int32_t)m * 0x1p-24f);
    return smm_cpu_bits_f32(e == 0x1Fu ? special : e == 0 ? sub : normal);
}

#endif
