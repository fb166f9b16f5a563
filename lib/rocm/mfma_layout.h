/*
 * mfma_layout.h - where each element of an int8 MFMA's operands and int32
 * accumulators lives in a 64-lane wave, written once and compiled both into
 * the GPU kernels (lib/rocm/gemm.hip) and into the host model test
 * (tests/check_mfma_model.c), which runs a C model of the instructions over
 * whole tiles through these very functions.
 *
 * Instructions covered (an instruction is named by its tile shape (m, k);
 * all three are square in M x N, n == m):
 *   (32, 16)  v_mfma_i32_32x32x16_i8  gfx940/941/942 (CDNA3, MI300)
 *             A, B: 8 int8 per lane (a 64-bit VGPR pair); D: 16 int32 per lane
 *   (16, 32)  v_mfma_i32_16x16x32_i8  gfx940/941/942
 *             A, B: 8 int8 per lane; D: 4 int32 per lane
 *   (32,  8)  v_mfma_i32_32x32x8i8    gfx908, gfx90a (CDNA1/2, MI100/MI200)
 *             A, B: 4 int8 per lane (one VGPR); D: 16 int32 per lane
 * Each computes D = A * B + C over one m x m tile with a K step of k:
 *   D[i][j] = C[i][j] + sum_{kk<k} A[i][kk] * B[kk][j]   (int32, wrapping)
 * with no modifiers (cbsz = abid = blgp = 0).
 *
 * The layout is the one of AMD's "AMD Instinct MI300 Instruction Set
 * Architecture" (CDNA3) guide, chapter "Matrix Arithmetic Instructions"
 * (dense MFMA operand and result layouts, no modifiers), and of the
 * CDNA2 guide for gfx90a; AMD's own tool that prints those layouts,
 * github.com/ROCm/amd_matrix_instruction_calculator (matrix_calculator.py,
 * class InstCalcGfx9, methods __get_input_reg_lanes / __get_output_reg_lanes;
 * e.g. `--architecture cdna3 --instruction v_mfma_i32_32x32x16_i8
 * --detail-instruction` prints "A[i][k] Lane: 32 * floor(k / 8) + i"),
 * computes every gfx9 dense MFMA with the same rule:
 *
 *   E = m * k / 64 operand bytes per lane (8, 8 and 4 above).
 *   A[i][kk]  is byte (kk % E) of lane (kk / E) * m + i
 *   B[kk][j]  is byte (kk % E) of lane (kk / E) * m + j
 *             (byte e is bits [8e+7 : 8e] of the lane's operand, the low
 *             VGPR of a pair holding bytes 0..3)
 *   D[i][j]   is accumulator register
 *                 r = (i / (4 * G)) * 4 + (i % 4),   G = 64 / m
 *             of lane ((i / 4) % G) * m + j
 *     i.e. 32x32: r = 4 * (i / 8) + (i % 4), lane = 32 * ((i / 4) % 2) + j
 *          16x16: r = i % 4,                 lane = 16 * (i / 4) + j
 *
 * So a lane's operand bytes are E consecutive k of one row of A (and of one
 * row of B when B is stored N x K, as this library stores it): the
 * fragment loads below are one contiguous E-byte read per lane.
 *
 * Everything here is SMM_HD (host and device inline; a plain C compiler gets
 * static inline from gpu_compat.h). Arguments are not checked: m, k must be
 * one of the three shapes, 0 <= lane < 64, 0 <= e < E, 0 <= r < m*m/64.
 */
#ifndef SMM_MFMA_LAYOUT_H
#define SMM_MFMA_LAYOUT_H

#include "gpu_compat.h"
#include <stdint.h>

#define SMM_MFMA_WAVE 64

/* The three shapes (m, k): m is also n. */
#define SMM_MFMA_32X32X16_M 32
#define SMM_MFMA_32X32X16_K 16
#define SMM_MFMA_16X16X32_M 16
#define SMM_MFMA_16X16X32_K 32
#define SMM_MFMA_32X32X8_M 32
#define SMM_MFMA_32X32X8_K 8

/* Operand bytes per lane (E): 8 for the gfx942 shapes, 4 for 32x32x8. */
SMM_HD int smm_mfma_operand_bytes(int m, int k)
{
    return m * k / SMM_MFMA_WAVE;
}

/* Accumulator registers per lane: 16 for 32x32, 4 for 16x16. */
SMM_HD int smm_mfma_acc_regs(int m)
{
    return m * m / SMM_MFMA_WAVE;
}

/* ------------------------------------------------------------------ */
/* Lane -> element maps                                                */
/* ------------------------------------------------------------------ */

/* A operand: byte e of `lane` holds A[smm_mfma_a_row][smm_mfma_a_k]. */
SMM_HD int smm_mfma_a_row(int m, int k, int lane, int e)
{
    (void)k;
    (void)e;
    return lane % m;
}

SMM_HD int smm_mfma_a_k(int m, int k, int lane, int e)
{
    return (lane / m) * smm_mfma_operand_bytes(m, k) + e;
}

/* B operand: byte e of `lane` holds B[smm_mfma_b_k][smm_mfma_b_col] (B as
 * the instruction sees it, K x N; the library's N x K row j is column j). */
SMM_HD int smm_mfma_b_col(int m, int k, int lane, int e)
{
    (void)k;
    (void)e;
    return lane % m;
}

SMM_HD int smm_mfma_b_k(int m, int k, int lane, int e)
{
    return (lane / m) * smm_mfma_operand_bytes(m, k) + e;
}

/* Accumulator: register r of `lane` holds D[smm_mfma_d_row][smm_mfma_d_col]. */
SMM_HD int smm_mfma_d_row(int m, int lane, int r)
{
    const int groups = SMM_MFMA_WAVE / m; /* 4-row groups side by side in a register */
    return (r / 4) * (4 * groups) + ((lane / m) % groups) * 4 + (r % 4);
}

SMM_HD int smm_mfma_d_col(int m, int lane, int r)
{
    (void)r;
    return lane % m;
}

/* ------------------------------------------------------------------ */
/* Fragment loads and stores (what the kernels call)                   */
/* ------------------------------------------------------------------ */

/*
 * Element offset, in a row-major int8 tile with leading dimension ld, of
 * the first of the E consecutive bytes that form `lane`'s operand:
 *   A tile: m rows x k columns (A[i][kk] at i * ld + kk)     -> A fragment
 *   B tile: m rows x k columns, N x K storage (B[kk][j] at j * ld + kk)
 *                                                            -> B fragment
 * (The A and B maps are the same function of the stored row-major tile.)
 */
SMM_HD int64_t smm_mfma_frag_offset(int m, int k, int lane, int64_t ld)
{
    return (int64_t)smm_mfma_a_row(m, k, lane, 0) * ld + smm_mfma_a_k(m, k, lane, 0);
}

/*
 * `lane`'s packed operand for the tile at `tile` (see smm_mfma_frag_offset):
 * byte e of the result (bits 8e+7..8e) is the tile element for byte e. For
 * E == 4 (32x32x8) the upper 32 bits are zero; pass (int)(uint32_t) of it
 * to the instruction. Byte loads: no alignment assumed. A kernel that knows
 * the address is 8- (or 4-) byte aligned may read the same bytes at
 * tile + smm_mfma_frag_offset(...) with one vector load instead.
 */
SMM_HD uint64_t smm_mfma_load_frag(int m, int k, const int8_t *tile, int64_t ld, int lane)
{
    const int8_t *p = tile + smm_mfma_frag_offset(m, k, lane, ld);
    const int bytes = smm_mfma_operand_bytes(m, k);
    uint64_t v = 0;
    int e;

    for (e = 0; e < bytes; e++)
        v |= (uint64_t)(uint8_t)p[e] << (8 * e);
    return v;
}

/* The A fragment of an m x k tile of A (row-major, leading dimension lda). */
SMM_HD uint64_t smm_mfma_load_a(int m, int k, const int8_t *a, int64_t lda, int lane)
{
    return smm_mfma_load_frag(m, k, a, lda, lane);
}

/* The B fragment of an n x k tile of B stored N x K row-major (ldb). */
SMM_HD uint64_t smm_mfma_load_b(int m, int k, const int8_t *b, int64_t ldb, int lane)
{
    return smm_mfma_load_frag(m, k, b, ldb, lane);
}

/*
 * Stores `lane`'s accumulators acc[0 .. m*m/64 - 1] into the m x m int32
 * tile c (row-major, leading dimension ldc), skipping elements at row >=
 * rows or column >= cols (tile tails; pass m, m for a full tile).
 */
SMM_HD void smm_mfma_store_acc(int m, const int32_t *acc, int32_t *c, int64_t ldc, int lane,
                               int rows, int cols)
{
    const int regs = smm_mfma_acc_regs(m);
    int r;

    for (r = 0; r < regs; r++) {
        const int i = smm_mfma_d_row(m, lane, r), j = smm_mfma_d_col(m, lane, r);
        if (i < rows && j < cols)
            c[(int64_t)i * ldc + j] = acc[r];
    }
}

/* ------------------------------------------------------------------ */
/* The instructions themselves (AMD device code only)                  */
/* ------------------------------------------------------------------ */

#if defined(SMM_GPU_AMD)
/* The accumulator types (clang vector extensions; also in the host pass). */
typedef int smm_i32x4 __attribute__((ext_vector_type(4)));
typedef int smm_i32x16 __attribute__((ext_vector_type(16)));
#endif

/* Each wrapper exists only in the device pass for a target that has the
 * instruction; kernels guard their use with the same macros. */
#if defined(SMM_GPU_AMD) && defined(__HIP_DEVICE_COMPILE__)

#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
/* v_mfma_i32_32x32x16_i8: acc += A(32x16) * B(16x32). */
SMM_DEV smm_i32x16 smm_mfma_32x32x16(uint64_t a, uint64_t b, smm_i32x16 acc)
{
    return __builtin_amdgcn_mfma_i32_32x32x16_i8((long)a, (long)b, acc, 0, 0, 0);
}

/* v_mfma_i32_16x16x32_i8: acc += A(16x32) * B(32x16). */
SMM_DEV smm_i32x4 smm_mfma_16x16x32(uint64_t a, uint64_t b, smm_i32x4 acc)
{
    return __builtin_amdgcn_mfma_i32_16x16x32_i8((long)a, (long)b, acc, 0, 0, 0);
}
#endif

#if defined(__gfx908__) || defined(__gfx90a__)
/* v_mfma_i32_32x32x8i8: acc += A(32x8) * B(8x32). */
SMM_DEV smm_i32x16 smm_mfma_32x32x8(uint64_t a, uint64_t b, smm_i32x16 acc)
{
    return __builtin_amdgcn_mfma_i32_32x32x8i8((int)(uint32_t)a, (int)(uint32_t)b, acc, 0, 0,
                                               0);
}
#endif
#endif /* AMD device code */

#endif
