/*
 * kernels_vnni_emulated.c - portable C twins of the VNNI kernels
 * (kernels_avx512_vnni.c, kernels_avx_vnni.c): the same register blocking
 * constants, the same packed layouts, and vpdpbusd's lane arithmetic
 * written out, so that the packing, the +128 shift and the column-sum
 * compensation of gemm_vnni.c run through the whole test battery on any
 * CPU (SMM_CPU_ISA=avx512_vnni_emulated or avx_vnni_emulated). A testing
 * aid: nothing selects these tables unless asked to; they are slow.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#include <stdint.h>

/* One vpdpbusd lane: four products of an unsigned and a signed byte,
 * summed exactly in int32 (|sum| <= 130560), then added to the lane
 * modulo 2^32. */
static inline uint32_t dpbusd_lane(uint32_t lane, const uint8_t *u, const int8_t *s)
{
    int32_t t = (int32_t)u[0] * s[0] + (int32_t)u[1] * s[1] + (int32_t)u[2] * s[2] +
                (int32_t)u[3] * s[3];
    return lane + (uint32_t)t;
}

/* The panel kernel: one accumulator lane per (row, column), a broadcast
 * quad of A' against one quad per column of the panel. */
static inline void panel_body(int nr, int64_t kq, const uint8_t *a, int64_t lda, int mr,
                              const int8_t *b, int64_t ldbp, int np, uint32_t *acc, int64_t ldacc)
{
    for (int i = 0; i < mr; i++) {
        for (int p = 0; p < np; p++) {
            for (int j = 0; j < nr; j++) {
                uint32_t lane = 0;
                for (int64_t q = 0; q < kq; q++)
                    lane = dpbusd_lane(lane, a + i * lda + 4 * q, b + p * ldbp + q * 4 * nr + j * 4);
                acc[i * ldacc + p * nr + j] += lane;
            }
        }
    }
}

/* The row-dot kernel: vl / 4 lanes per (row, column) over vectors of vl
 * bytes of K (the last one zero-extended past kc, as the masked or copied
 * loads of the real kernels), then the lanes summed. */
static inline void rowdot_body(int vl, int64_t kc, const uint8_t *a, int64_t lda, int mr,
                               const int8_t *const *brow, uint32_t *acc, int64_t ldacc)
{
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < 4; j++) {
            uint32_t lanes[16] = {0};
            for (int64_t k = 0; k < kc; k += vl) {
                int8_t bv[64] = {0};
                const int64_t len = kc - k < vl ? kc - k : vl;
                memcpy(bv, brow[j] + k, (size_t)len);
                for (int l = 0; l < vl / 4; l++)
                    lanes[l] = dpbusd_lane(lanes[l], a + i * lda + k + 4 * l, bv + 4 * l);
            }
            uint32_t sum = 0;
            for (int l = 0; l < vl / 4; l++)
                sum += lanes[l];
            acc[i * ldacc + j] += sum;
        }
    }
}

static void panel16(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b,
                    int64_t ldbp, int np, uint32_t *acc, int64_t ldacc)
{
    panel_body(16, kq, a, lda, mr, b, ldbp, np, acc, ldacc);
}

static void panel8(int64_t kq, const uint8_t *a, int64_t lda, int mr, const int8_t *b,
                   int64_t ldbp, int np, uint32_t *acc, int64_t ldacc)
{
    panel_body(8, kq, a, lda, mr, b, ldbp, np, acc, ldacc);
}

static void rowdot64(int64_t kc, const uint8_t *a, int64_t lda, int mr, const int8_t *const *brow,
                     const int8_t *const *pf, int npf, uint32_t *acc, int64_t ldacc)
{
    (void)pf;
    (void)npf;
    rowdot_body(64, kc, a, lda, mr, brow, acc, ldacc);
}

static void rowdot32(int64_t kc, const uint8_t *a, int64_t lda, int mr, const int8_t *const *brow,
                     const int8_t *const *pf, int npf, uint32_t *acc, int64_t ldacc)
{
    (void)pf;
    (void)npf;
    rowdot_body(32, kc, a, lda, mr, brow, acc, ldacc);
}

/* The register blocking and format strings of the real tables
 * (SMM_CPU_VNNI512_* and SMM_CPU_VNNI256_* in cpu_internal.h): the driver
 * takes the same paths, and a B packed here is one the real level reads. */
const smm_cpu_vnni_kernels smm_cpu_vnni_avx512_emulated = {
    "avx512_vnni_emulated", SMM_CPU_VNNI512_FORMAT, 16, SMM_CPU_VNNI512_MR, SMM_CPU_VNNI512_NP,
    SMM_CPU_VNNI512_DMR, SMM_CPU_VNNI512_RMR, panel16, rowdot64, NULL, 0, 1, NULL,
};

const smm_cpu_vnni_kernels smm_cpu_vnni_avx_emulated = {
    "avx_vnni_emulated", SMM_CPU_VNNI256_FORMAT, 8, SMM_CPU_VNNI256_MR, SMM_CPU_VNNI256_NP,
    SMM_CPU_VNNI256_DMR, SMM_CPU_VNNI256_RMR, panel8, rowdot32, NULL, 0, 1, NULL,
};

/* The AMX level's blocking (32 rows x 2 panels: two by two 16 x 16
 * tiles), the AVX-512 format, and its small-M path on the AVX-512
 * emulation: the real level's small-M table has the AVX-512 blocking too
 * (its single pass at 8 < M <= 16 runs on a tile, the same sums), so the
 * driver takes the same paths here. */
const smm_cpu_vnni_kernels smm_cpu_vnni_amx_emulated = {
    "amx_int8_emulated", SMM_CPU_VNNI512_FORMAT, 16, SMM_CPU_AMX_MR, SMM_CPU_AMX_NP,
    SMM_CPU_AMX_MR, SMM_CPU_VNNI512_RMR, panel16, rowdot64, &smm_cpu_vnni_avx512_emulated,
    SMM_CPU_AMX_KC, 0, NULL,
};
