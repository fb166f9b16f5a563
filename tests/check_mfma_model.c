/*
 * check_mfma_model.c - the MFMA fragment layouts of lib/rocm/mfma_layout.h
 * (the functions the gfx942 / gfx90a kernels load and store tiles with),
 * proved on the host against a C model of the instructions. Needs no GPU.
 *
 * The model (mfma_model below) is written from AMD's description of each
 * instruction (CDNA3 ISA guide, "Matrix Arithmetic Instructions"; CDNA2 for
 * v_mfma_i32_32x32x8i8): it works on the wave's 64 lanes of VGPRs, reading
 * each A[i][k] and B[k][j] from the lane and byte the ISA assigns to it and
 * adding each product into the accumulator register and lane the ISA
 * assigns to D[i][j]. It is written in the forward direction (element ->
 * lane, register), while the header maps (lane, register) -> element, so a
 * mistake in either shows up as a wrong tile product.
 *
 * Tests:
 *   - tile products: random A (m x K) and B (n x K, N x K storage) with
 *     padded strides, a random int32 starting tile, 1..6 K steps of the
 *     instruction; fragments loaded with the header's helpers into simulated
 *     VGPRs, the model run, accumulators stored with the helper into a
 *     poisoned strided tile; memcmp against a plain triple loop (int32
 *     wrapping) and the padding untouched. Extreme tiles (all -128, all 127)
 *     force the int32 wrap;
 *   - tails: the store helper writes exactly the rows x cols corner;
 *   - bijections: every operand byte and accumulator register of the wave
 *     names a distinct element, and every element of the tile is named;
 *   - the load helpers fill byte e with the element the maps name;
 *   - spot values printed by AMD's matrix instruction calculator;
 *   - a deliberately wrong fragment load makes the product comparison fail
 *     (the comparison can fail).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/rocm/mfma_layout.h"

typedef struct shape {
    const char *name;
    int m, k; /* n == m */
} shape;

static const shape shapes[3] = {
    { "v_mfma_i32_32x32x16_i8", SMM_MFMA_32X32X16_M, SMM_MFMA_32X32X16_K },
    { "v_mfma_i32_16x16x32_i8", SMM_MFMA_16X16X32_M, SMM_MFMA_16X16X32_K },
    { "v_mfma_i32_32x32x8i8", SMM_MFMA_32X32X8_M, SMM_MFMA_32X32X8_K },
};

/* ------------------------------------------------------------------ */
/* The model                                                           */
/* ------------------------------------------------------------------ */

/* The VGPRs one instruction reads and writes, [register][lane]: A and B
 * take one VGPR (4 int8, 32x32x8) or a pair (8 int8, low VGPR = first four
 * bytes); D/C take 16 (32x32) or 4 (16x16) registers of int32. */
typedef struct wave_regs {
    uint32_t a[2][SMM_MFMA_WAVE];
    uint32_t b[2][SMM_MFMA_WAVE];
    uint32_t acc[16][SMM_MFMA_WAVE];
} wave_regs;

/*
 * Where the ISA puts an input element (A[row][kk] with row = i, or
 * B[kk][col] with row = j): the 64 lanes form 64 / M groups of M lanes;
 * group g holds the g-th run of K / (64 / M) consecutive k, lane (g*M + i)
 * holding row i, the run's elements packed from the lowest byte up.
 */
static int8_t model_in(const uint32_t v[2][SMM_MFMA_WAVE], int M, int K, int row, int kk)
{
    const int groups = SMM_MFMA_WAVE / M;
    const int run = K / groups; /* k values per lane */
    const int lane = (kk / run) * M + row;
    const int byte = kk % run;
    return (int8_t)(uint8_t)(v[byte / 4][lane] >> (8 * (byte % 4)));
}

/*
 * Where the ISA puts D[i][j] (32-bit results): blocks of 4 rows x N
 * columns fill a register's lanes, one block per N lanes, so one register
 * holds 64 / N such blocks; the next 4 registers continue the rows.
 */
static uint32_t *model_out(wave_regs *w, int M, int N, int i, int j)
{
    const int blocks_per_reg = SMM_MFMA_WAVE / N;
    const int block = i / 4;
    const int reg = (block / blocks_per_reg) * 4 + i % 4;
    const int lane = (block % blocks_per_reg) * N + j;
    (void)M;
    return &w->acc[reg][lane];
}

/* D = A * B + C on the wave's registers (in place on acc), int32 wrapping. */
static void mfma_model(wave_regs *w, int M, int K)
{
    const int N = M;
    static uint32_t d[32][32];

    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            uint32_t s = *model_out(w, M, N, i, j);
            for (int kk = 0; kk < K; kk++)
                s += (uint32_t)((int32_t)model_in(w->a, M, K, i, kk) *
                                (int32_t)model_in(w->b, M, K, j, kk));
            d[i][j] = s;
        }
    for (int i = 0; i < M; i++) /* all reads done before any write */
        for (int j = 0; j < N; j++)
            *model_out(w, M, N, i, j) = d[i][j];
}

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static void put_frag(uint32_t v[2][SMM_MFMA_WAVE], int lane, uint64_t frag)
{
    v[0][lane] = (uint32_t)frag;
    v[1][lane] = (uint32_t)(frag >> 32);
}

/* A wrong A load: the lane groups of k swapped (lane l reads the fragment
 * of lane l ^ m), as a kernel would with the groups mixed up. */
static uint64_t wrong_load_a(int m, int k, const int8_t *a, int64_t lda, int lane)
{
    return smm_mfma_load_a(m, k, a, lda, lane ^ m);
}

static int32_t i32_from_u32(uint32_t u)
{
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static void fill_i8(cf_rng *r, int8_t *p, size_t n, int kind)
{
    for (size_t t = 0; t < n; t++)
        p[t] = kind == 1 ? -128 : kind == 2 ? 127 : (int8_t)(uint8_t)cf_rng_next(r);
}

/*
 * One tile product through the layout helpers and the model; 0 on a
 * bit-exact match with the triple loop and untouched padding, else 1 with
 * `msg` set. bad_a: use wrong_load_a for A (negative control).
 */
static int run_tile(cf_rng *r, const shape *sh, int steps, int kind, int bad_a, char *msg,
                    size_t msz)
{
    const int m = sh->m, n = sh->m, k = sh->k, kt = k * steps;
    const int64_t lda = kt + cf_rng_range(r, 0, 9), ldb = kt + cf_rng_range(r, 0, 9);
    const int64_t ldc = n + cf_rng_range(r, 0, 5);
    const size_t csz = (size_t)(m * ldc);
    int8_t *a = malloc((size_t)(m * lda)), *b = malloc((size_t)(n * ldb));
    int32_t *c0 = malloc((size_t)m * n * sizeof *c0);
    int32_t *c = malloc(csz * sizeof *c), *want = malloc(csz * sizeof *want);
    static wave_regs w;
    int fail = 0;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c0);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(want);
    fill_i8(r, a, (size_t)(m * lda), kind);
    fill_i8(r, b, (size_t)(n * ldb), kind);
    for (int t = 0; t < m * n; t++)
        c0[t] = kind ? INT32_MAX - (int32_t)cf_rng_range(r, 0, 1000)
                     : (int32_t)(uint32_t)cf_rng_next(r);

    /* The triple loop: want = c0 + A * B^T, wrapping; padding poisoned. */
    memset(want, 0xA5, csz * sizeof *want);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            uint32_t s = (uint32_t)c0[i * n + j];
            for (int kk = 0; kk < kt; kk++)
                s += (uint32_t)((int32_t)a[i * lda + kk] * (int32_t)b[j * ldb + kk]);
            want[i * ldc + j] = i32_from_u32(s);
        }

    /* C into the accumulators (the map from the header, read backwards). */
    memset(&w, 0xEE, sizeof w);
    for (int lane = 0; lane < SMM_MFMA_WAVE; lane++)
        for (int reg = 0; reg < smm_mfma_acc_regs(m); reg++)
            w.acc[reg][lane] = (uint32_t)c0[smm_mfma_d_row(m, lane, reg) * n +
                                            smm_mfma_d_col(m, lane, reg)];

    for (int s = 0; s < steps; s++) {
        for (int lane = 0; lane < SMM_MFMA_WAVE; lane++) {
            uint64_t fa = bad_a ? wrong_load_a(m, k, a + s * k, lda, lane)
                                : smm_mfma_load_a(m, k, a + s * k, lda, lane);
            uint64_t fb = smm_mfma_load_b(m, k, b + s * k, ldb, lane);
            if (smm_mfma_operand_bytes(m, k) == 4 && ((fa >> 32) || (fb >> 32))) {
                snprintf(msg, msz, "%s: 4-byte fragment with upper bits set", sh->name);
                fail = 1;
            }
            put_frag(w.a, lane, fa);
            put_frag(w.b, lane, fb);
        }
        mfma_model(&w, m, k);
    }

    memset(c, 0xA5, csz * sizeof *c);
    for (int lane = 0; lane < SMM_MFMA_WAVE; lane++) {
        int32_t acc[16];
        for (int reg = 0; reg < smm_mfma_acc_regs(m); reg++)
            acc[reg] = i32_from_u32(w.acc[reg][lane]);
        smm_mfma_store_acc(m, acc, c, ldc, lane, m, n);
    }

    if (!fail && memcmp(c, want, csz * sizeof *c) != 0) {
        size_t t = 0;
        while (c[t] == want[t])
            t++;
        snprintf(msg, msz,
                 "%s, %d K step(s), lda %lld, ldb %lld, ldc %lld: C[%lld][%lld] = %ld, "
                 "triple loop %ld",
                 sh->name, steps, (long long)lda, (long long)ldb, (long long)ldc,
                 (long long)(t / (size_t)ldc), (long long)(t % (size_t)ldc), (long)c[t],
                 (long)want[t]);
        fail = 1;
    }
    free(a);
    free(b);
    free(c0);
    free(c);
    free(want);
    return fail;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

START_TEST(test_tile_products)
{
    cf_rng r = tu_rng("tile_products");
    char msg[512];

    for (int si = 0; si < 3; si++)
        for (int rep = 0; rep < 24; rep++) {
            const int steps = 1 + rep % 6;
            const int kind = rep < 20 ? 0 : 1 + rep % 2; /* random, then extremes */
            if (run_tile(&r, &shapes[si], steps, kind, 0, msg, sizeof msg))
                ck_abort_msg("%s (replay with SMM_TEST_SEED=0x%016llx)", msg,
                             (unsigned long long)tu_seed);
        }
}
END_TEST

/* The extreme tiles do wrap: all -128 (or 127) products summed into a
 * starting value near INT32_MAX leave the int32 range, so a model or loop
 * that saturated would differ. */
START_TEST(test_wrap_reached)
{
    const int64_t top = INT32_MAX, prod = 128 * 128;
    for (int si = 0; si < 3; si++)
        ck_assert(top - 1000 + prod * shapes[si].k > top);
}
END_TEST

START_TEST(test_negative_control)
{
    cf_rng r = tu_rng("negative_control");
    char msg[512];

    for (int si = 0; si < 3; si++)
        ck_assert_msg(run_tile(&r, &shapes[si], 2, 0, 1, msg, sizeof msg) == 1,
                      "%s: a wrong A fragment load was not detected", shapes[si].name);
}
END_TEST

/* The store helper writes exactly the rows x cols corner of the tile. */
START_TEST(test_tails)
{
    cf_rng r = tu_rng("tails");

    for (int si = 0; si < 3; si++) {
        const int m = shapes[si].m;
        for (int rep = 0; rep < 40; rep++) {
            const int rows = (int)cf_rng_range(&r, 1, m), cols = (int)cf_rng_range(&r, 1, m);
            const int64_t ldc = m + 3;
            int32_t c[32 * 35], want[32 * 35];
            memset(c, 0x5A, sizeof c);
            memset(want, 0x5A, sizeof want);
            for (int lane = 0; lane < SMM_MFMA_WAVE; lane++) {
                int32_t acc[16];
                for (int reg = 0; reg < smm_mfma_acc_regs(m); reg++) {
                    const int i = smm_mfma_d_row(m, lane, reg), j = smm_mfma_d_col(m, lane, reg);
                    acc[reg] = i * 1000 + j;
                    if (i < rows && j < cols)
                        want[i * ldc + j] = acc[reg];
                }
                smm_mfma_store_acc(m, acc, c, ldc, lane, rows, cols);
            }
            ck_assert_msg(memcmp(c, want, sizeof c) == 0, "%s: store of a %d x %d tail",
                          shapes[si].name, rows, cols);
        }
    }
}
END_TEST

/* Every (lane, byte) / (lane, register) names a distinct element in range,
 * and the wave covers the whole tile. */
START_TEST(test_bijections)
{
    for (int si = 0; si < 3; si++) {
        const int m = shapes[si].m, k = shapes[si].k, e_n = smm_mfma_operand_bytes(m, k);
        static int seen_a[32 * 32], seen_b[32 * 32], seen_d[32 * 32];
        memset(seen_a, 0, sizeof seen_a);
        memset(seen_b, 0, sizeof seen_b);
        memset(seen_d, 0, sizeof seen_d);
        ck_assert_int_eq(e_n * SMM_MFMA_WAVE, m * k);
        ck_assert_int_eq(smm_mfma_acc_regs(m) * SMM_MFMA_WAVE, m * m);
        for (int lane = 0; lane < SMM_MFMA_WAVE; lane++) {
            for (int e = 0; e < e_n; e++) {
                const int i = smm_mfma_a_row(m, k, lane, e), ka = smm_mfma_a_k(m, k, lane, e);
                const int j = smm_mfma_b_col(m, k, lane, e), kb = smm_mfma_b_k(m, k, lane, e);
                ck_assert(i >= 0 && i < m && ka >= 0 && ka < k);
                ck_assert(j >= 0 && j < m && kb >= 0 && kb < k);
                seen_a[i * k + ka]++;
                seen_b[j * k + kb]++;
                /* The fragment is E consecutive bytes from the offset. */
                ck_assert_int_eq(smm_mfma_frag_offset(m, k, lane, 1000) + e,
                                 (int64_t)i * 1000 + ka);
            }
            for (int reg = 0; reg < smm_mfma_acc_regs(m); reg++) {
                const int i = smm_mfma_d_row(m, lane, reg), j = smm_mfma_d_col(m, lane, reg);
                ck_assert(i >= 0 && i < m && j >= 0 && j < m);
                seen_d[i * m + j]++;
            }
        }
        for (int t = 0; t < m * k; t++) {
            ck_assert_msg(seen_a[t] == 1, "%s: A element %d held %d times", shapes[si].name, t,
                          seen_a[t]);
            ck_assert_msg(seen_b[t] == 1, "%s: B element %d held %d times", shapes[si].name, t,
                          seen_b[t]);
        }
        for (int t = 0; t < m * m; t++)
            ck_assert_msg(seen_d[t] == 1, "%s: D element %d held %d times", shapes[si].name, t,
                          seen_d[t]);
    }
}
END_TEST

/* The load helpers put in byte e exactly the element the maps name (a
 * permutation of k shared by A and B would leave every product right, so
 * the tile products alone cannot see it). */
START_TEST(test_loads_match_maps)
{
    cf_rng r = tu_rng("loads_match_maps");

    for (int si = 0; si < 3; si++) {
        const int m = shapes[si].m, k = shapes[si].k, e_n = smm_mfma_operand_bytes(m, k);
        for (int rep = 0; rep < 8; rep++) {
            const int64_t lda = k + cf_rng_range(&r, 0, 40), ldb = k + cf_rng_range(&r, 0, 40);
            int8_t a[32 * 72], b[32 * 72];
            fill_i8(&r, a, sizeof a, 0);
            fill_i8(&r, b, sizeof b, 0);
            for (int lane = 0; lane < SMM_MFMA_WAVE; lane++) {
                const uint64_t fa = smm_mfma_load_a(m, k, a, lda, lane);
                const uint64_t fb = smm_mfma_load_b(m, k, b, ldb, lane);
                for (int e = 0; e < 8; e++) {
                    const int8_t ga = (int8_t)(uint8_t)(fa >> (8 * e));
                    const int8_t gb = (int8_t)(uint8_t)(fb >> (8 * e));
                    if (e >= e_n) {
                        ck_assert_msg(ga == 0 && gb == 0, "%s: byte %d of a %d-byte fragment",
                                      shapes[si].name, e, e_n);
                        continue;
                    }
                    ck_assert_msg(ga == a[smm_mfma_a_row(m, k, lane, e) * lda +
                                          smm_mfma_a_k(m, k, lane, e)],
                                  "%s: A fragment of lane %d, byte %d", shapes[si].name, lane, e);
                    ck_assert_msg(gb == b[smm_mfma_b_col(m, k, lane, e) * ldb +
                                          smm_mfma_b_k(m, k, lane, e)],
                                  "%s: B fragment of lane %d, byte %d", shapes[si].name, lane, e);
                }
            }
        }
    }
}
END_TEST

/*
 * Values from AMD's amd_matrix_instruction_calculator formulas
 * (`--detail-instruction`): A[i][k] Lane = M * floor(k / E) + i at byte
 * k % E; D[i][j] GPR = 4 * floor(i / 8) + (i % 4), Lane = 32 * floor(i / 4)
 * % 64 + j for 32x32; GPR = i % 4, Lane = 16 * floor(i / 4) + j for 16x16.
 * Found by the header's inverse maps.
 */
START_TEST(test_calculator_values)
{
    /* 32x32x16: A[5][9] in lane 37, byte 1; D[13][7] in register 5, lane 39;
     * D[31][31] in register 15, lane 63. */
    ck_assert_int_eq(smm_mfma_a_row(32, 16, 37, 1), 5);
    ck_assert_int_eq(smm_mfma_a_k(32, 16, 37, 1), 9);
    ck_assert_int_eq(smm_mfma_d_row(32, 39, 5), 13);
    ck_assert_int_eq(smm_mfma_d_col(32, 39, 5), 7);
    ck_assert_int_eq(smm_mfma_d_row(32, 63, 15), 31);
    ck_assert_int_eq(smm_mfma_d_row(32, 0, 4), 8);
    ck_assert_int_eq(smm_mfma_d_row(32, 32, 0), 4);
    /* 16x16x32: B[26][3] in lane 51, byte 2; D[13][7] in register 1, lane 55. */
    ck_assert_int_eq(smm_mfma_b_col(16, 32, 51, 2), 3);
    ck_assert_int_eq(smm_mfma_b_k(16, 32, 51, 2), 26);
    ck_assert_int_eq(smm_mfma_d_row(16, 55, 1), 13);
    ck_assert_int_eq(smm_mfma_d_col(16, 55, 1), 7);
    /* 32x32x8: A[20][6] in lane 52, byte 2. */
    ck_assert_int_eq(smm_mfma_a_row(32, 8, 52, 2), 20);
    ck_assert_int_eq(smm_mfma_a_k(32, 8, 52, 2), 6);
    ck_assert_int_eq(smm_mfma_operand_bytes(32, 8), 4);
    ck_assert_int_eq(smm_mfma_operand_bytes(32, 16), 8);
    ck_assert_int_eq(smm_mfma_operand_bytes(16, 32), 8);
}
END_TEST

static Suite *mfma_suite(void)
{
    Suite *s = suite_create("mfma_model");
    TCase *tc = tu_tcase(s, "layout", 120);
    tcase_add_test(tc, test_bijections);
    tcase_add_test(tc, test_calculator_values);
    tcase_add_test(tc, test_loads_match_maps);
    tcase_add_test(tc, test_tails);
    tc = tu_tcase(s, "model", 600);
    tcase_add_test(tc, test_tile_products);
    tcase_add_test(tc, test_wrap_reached);
    tcase_add_test(tc, test_negative_control);
    return s;
}

int main(void)
{
    return tu_main(mfma_suite(), "check_mfma_model");
}
