/*
 * kernels_amx.c - the AMX level: Intel AMX-INT8 tiles (tdpbusd) for the
 * panel microkernel of the general path and for the small-M path's single
 * pass over a prepacked B (8 < M <= 16), the AVX-512 VNNI level's kernels
 * for everything else.
 *
 * The data flow is the VNNI levels' (gemm_vnni.c, cpu_internal.h): A' = A
 * xor 0x80 as uint8 rows, B in panels of 16 columns x k4 (the AVX-512
 * format, so a B packed on either level is used by the other), 128 *
 * colsum(B) subtracted before the epilogue. A quad row of a panel (64
 * bytes: 16 columns x 4 K values) is exactly one row of tdpbusd's second
 * operand, and 64 bytes of a row of A' one row of its first, so both are
 * loaded into tiles in place (tileloadd with a stride), with no packing of
 * their own.
 *
 * Exactness: tdpbusd adds to each 32-bit lane of the destination the sum
 * of four products of an unsigned byte of the first source by a signed
 * byte of the second (|sum| <= 130560, exact), with a wrapping 32-bit add,
 * as vpdpbusd does: the lanes are sums modulo 2^32 at every K.
 *
 * Use: cpu_backend.c selects this level only when CPUID reports amx_tile
 * and amx_int8 besides the AVX-512 VNNI level's features, XCR0 shows that
 * the OS manages the tile state (bits 17 and 18), and, on Linux, the
 * process was granted that state (smm_cpu_amx_permit: arch_prctl
 * ARCH_REQ_XCOMP_PERM, once per process).
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#if defined(SMM_HAVE_AVX2_BUILD) && defined(__x86_64__) &&                                 \
    (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define SMM_BUILD_AMX 1
#endif

_Static_assert(SMM_CPU_AMX_KC > 0 && SMM_CPU_AMX_KC % 64 == 0,
               "SMM_CPU_AMX_KC: a positive multiple of 64");

#ifdef SMM_BUILD_AMX
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define AATTR __attribute__((target("amx-tile,amx-int8,avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

/* LDTILECFG's 64-byte operand (palette 1). */
typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved0[14];
    uint16_t colsb[16]; /* bytes per row of tiles 0-7; the rest reserved, 0 */
    uint8_t rows[16];   /* rows of tiles 0-7; the rest reserved, 0 */
} tile_config;

/*
 * Tiles: 0-3 accumulators C[r][p] (rows 16 r .. of the block, panel p),
 * 4-5 rows of A' (16 each), 6-7 the two panels' quads (16 quads x 16
 * columns). R2: a second group of rows (mr > 16), NP2: a second panel.
 * acc (rows ldacc apart, uint32) += A' (mr rows, lda apart, 64 * steps
 * bytes) x the panels (b, ldbp apart; 16 * steps quads).
 */
static inline __attribute__((always_inline, target("amx-tile,amx-int8"))) void
amx_block(const int R2, const int NP2, const int PF, int r0, int r1, int64_t steps,
          const uint8_t *a, int64_t lda, const int8_t *b, int64_t ldbp, uint32_t *acc,
          int64_t ldacc)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = (uint8_t)r0, cfg.colsb[0] = 64;
    cfg.rows[4] = (uint8_t)r0, cfg.colsb[4] = 64;
    cfg.rows[6] = 16, cfg.colsb[6] = 64;
    if (NP2) {
        cfg.rows[1] = (uint8_t)r0, cfg.colsb[1] = 64;
        cfg.rows[7] = 16, cfg.colsb[7] = 64;
    }
    if (R2) {
        cfg.rows[2] = (uint8_t)r1, cfg.colsb[2] = 64;
        cfg.rows[5] = (uint8_t)r1, cfg.colsb[5] = 64;
        if (NP2)
            cfg.rows[3] = (uint8_t)r1, cfg.colsb[3] = 64;
    }
    /* GCC's tile intrinsics are asm statements that do not tell the
     * compiler which memory they read or write: these barriers keep the
     * configuration's stores before LDTILECFG and every tile store before
     * what follows the block (the K tail reads acc). */
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);

    const int64_t cs = ldacc * 4; /* bytes between rows of acc */
    uint32_t *acc1 = acc + 16 * ldacc;
    const uint8_t *a1 = a + 16 * lda;
    const int8_t *b1 = b + ldbp;
    _tile_loadd(0, acc, cs);
    if (NP2)
        _tile_loadd(1, acc + 16, cs);
    if (R2) {
        _tile_loadd(2, acc1, cs);
        if (NP2)
            _tile_loadd(3, acc1 + 16, cs);
    }
    for (int64_t s = 0; s < steps; s++) {
        if (PF && SMM_CPU_VNNI_PF_FAR_BYTES > 0)
            for (int l = 0; l < 16; l++)
                _mm_prefetch((const char *)b + 1024 * s + SMM_CPU_VNNI_PF_FAR_BYTES + 64 * l,
                             _MM_HINT_T1);
        _tile_loadd(4, a + 64 * s, lda);
        _tile_loadd(6, b + 1024 * s, 64);
        if (R2)
            _tile_loadd(5, a1 + 64 * s, lda);
        _tile_dpbusd(0, 4, 6);
        if (NP2) {
            _tile_loadd(7, b1 + 1024 * s, 64);
            _tile_dpbusd(1, 4, 7);
        }
        if (R2) {
            _tile_dpbusd(2, 5, 6);
            if (NP2)
                _tile_dpbusd(3, 5, 7);
        }
    }
    _tile_stored(0, acc, cs);
    if (NP2)
        _tile_stored(1, acc + 16, cs);
    if (R2) {
        _tile_stored(2, acc1, cs);
        if (NP2)
            _tile_stored(3, acc1 + 16, cs);
    }
    _tile_release();
    __asm__ volatile("" ::: "memory");
}

/* The panel microkernel (cpu_internal.h), mr <= 32, np <= 2: whole groups
 * of 16 quads on the tiles, the rest of K (fewer than 16 quads) on the
 * AVX-512 VNNI panel kernel, 8 rows at a time, into the same sums. */
static AATTR void panel(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b,
                        int64_t ldbp, int np, uint32_t *acc, int64_t ldacc)
{
    const int64_t steps = kq / 16;
    if (steps > 0) {
        const int r0 = mr < 16 ? mr : 16, r1 = mr - r0;
        if (r1 > 0 && np > 1)
            amx_block(1, 1, 0, r0, r1, steps, a, lda, b, ldbp, acc, ldacc);
        else if (r1 > 0)
            amx_block(1, 0, 0, r0, r1, steps, a, lda, b, ldbp, acc, ldacc);
        else if (np > 1)
            amx_block(0, 1, 0, r0, 0, steps, a, lda, b, ldbp, acc, ldacc);
        else
            amx_block(0, 0, 0, r0, 0, steps, a, lda, b, ldbp, acc, ldacc);
    }
    if (kq > 16 * steps) {
        const smm_cpu_vnni_kernels *v = &smm_cpu_vnni_avx512_kernels;
        for (int i = 0; i < mr; i += v->mr)
            v->panel(kq - 16 * steps, a + i * lda + 64 * steps, lda,
                     mr - i < v->mr ? mr - i : v->mr, b + 1024 * steps, ldbp, np,
                     acc + i * ldacc, ldacc);
    }
}

/* Linux: asks once for the process's permission to use the tile data
 * state (which Linux grants on request, and which the first tile
 * instruction would otherwise fault on). 1 when granted or not needed. */
int smm_cpu_amx_permit(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* 0 not asked, 1 granted, -1 refused. A plain variable, as the
     * library's other per-process caches: the first call comes from the
     * cpu backend's probe, which lib/dispatch.c runs under its lock before
     * any context exists, and a repeated request gets the same answer. */
    static int state;
    if (state == 0) {
        const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
        state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
    }
    return state > 0;
#else
    return 1;
#endif
}

/* The small-M path's panel kernel: the single pass over a prepacked B
 * (np = 1, SMM_CPU_VNNI512_MR < mr <= 16 rows, all of K in one call) on
 * one accumulator tile, with a prefetch into L2 of the stream
 * SMM_CPU_VNNI_PF_FAR_BYTES ahead (16 lines per step: the tile loads of
 * B are not prefetched by the core the way vector loads are); the rest
 * of K, and every other call, on the AVX-512 VNNI panel kernel. At
 * M = 16 the AVX-512 kernel's vpdpbusd work is about as long as the
 * stream of B from memory; on the tile it is a few times shorter. */
static AATTR void small_panel(int64_t kq, const uint8_t *a, int64_t lda, int mr,
                              const int8_t *b, int64_t ldbp, int np, uint32_t *acc,
                              int64_t ldacc)
{
    const smm_cpu_vnni_kernels *v = &smm_cpu_vnni_avx512_kernels;
    int64_t steps = kq / 16;
    if (np != 1 || mr <= v->mr || mr > 16)
        steps = 0;
    if (steps > 0)
        amx_block(0, 0, 1, mr, 0, steps, a, lda, b, ldbp, acc, ldacc);
    if (kq > 16 * steps)
        v->panel(kq - 16 * steps, a + 64 * steps, lda, mr, b + 1024 * steps, ldbp, np, acc,
                 ldacc);
}

/* M <= 8 over a packed B: the AVX-512 VNNI panel with the far prefetch. */
static AATTR void small_panel_far(int64_t kq, const uint8_t *a, int64_t lda, int mr,
                                  const int8_t *b, int64_t ldbp, int np, uint32_t *acc,
                                  int64_t ldacc)
{
    smm_cpu_vnni_avx512_kernels.panel_far(kq, a, lda, mr, b, ldbp, np, acc, ldacc);
}

static AATTR void small_rowdot(int64_t kc, const uint8_t *a, int64_t lda, int mr,
                               const int8_t *const *brow, const int8_t *const *pf, int npf,
                               uint32_t *acc, int64_t ldacc)
{
    smm_cpu_vnni_avx512_kernels.rowdot(kc, a, lda, mr, brow, pf, npf, acc, ldacc);
}

/* Small M (the direct path, .small): the AVX-512 VNNI level's blocking
 * and kernels, but for the single pass over a prepacked B at 8 < M <= 16
 * on a tile. */
static const smm_cpu_vnni_kernels small_table = {
    "amx_int8", SMM_CPU_VNNI512_FORMAT, 16, SMM_CPU_VNNI512_MR, SMM_CPU_VNNI512_NP,
    SMM_CPU_VNNI512_DMR, SMM_CPU_VNNI512_RMR, small_panel, small_rowdot, NULL, 0, 0,
    small_panel_far,
};

static const smm_cpu_vnni_kernels table = {
    "amx_int8", SMM_CPU_VNNI512_FORMAT, 16, SMM_CPU_AMX_MR, SMM_CPU_AMX_NP, SMM_CPU_AMX_MR,
    SMM_CPU_VNNI512_RMR, panel, NULL, &small_table, SMM_CPU_AMX_KC, 0, NULL,
};
const smm_cpu_vnni_kernels *const smm_cpu_vnni_amx = &table;
#else
int smm_cpu_amx_permit(void)
{
    return 0;
}

const smm_cpu_vnni_kernels *const smm_cpu_vnni_amx = NULL;
#endif
