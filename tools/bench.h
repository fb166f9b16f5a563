/*
 * bench.h - measuring one w8a8 linear layer, as `scaledmm bench` runs it.
 *
 * One point = one layer shape (N x K weights) at one M (tokens):
 *   1. smm_quantize_i8: bf16 activations M x K -> int8, dynamic per-token
 *      symmetric scales (M floats), as vLLM serves w8a8 models;
 *   2. smm_scaled_mm: int8 M x K times int8 weights N x K, per-token x
 *      per-channel scales, no bias, bfloat16 output M x N.
 * The layer time is the median over timed runs of (1) + (2) measured
 * together; the medians of (1) and (2) alone are reported beside it.
 * Weights (and their scales) rotate over enough copies that all copies
 * together exceed twice the last-level cache, so each timed call reads its
 * weights from memory, as a decode step does.
 * The baseline is OpenBLAS cblas_sgemm on the same problem in float32
 * (activations widened from bf16, weights as floats), same thread count,
 * weights rotated the same way.
 * Every point is verified: for a few sampled rows the reference backend
 * quantizes the same bf16 row and multiplies it, and the int8 row, its
 * scale and the bf16 output row must equal the tested backend's bit for
 * bit (memcmp).
 */
#ifndef SMM_TOOL_BENCH_H
#define SMM_TOOL_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include "scaledmm.h"

typedef struct bench_config {
    smm_context *ctx;     /* backend under test */
    smm_context *ref;     /* SMM_BACKEND_REFERENCE, for verification */
    int threads;          /* threads of ctx and of OpenBLAS (>= 1) */
    int repeats;          /* timed runs per measurement, at most */
    double max_time;      /* stop timed runs once they took this long (s) */
    int baseline;         /* run the SGEMM baseline */
    uint64_t seed;        /* data seed */
    size_t llc_bytes;     /* last-level cache size */
} bench_config;

/* One layer's weights in rotation copies. */
typedef struct bench_weights {
    int64_t n, k;
    int copies;           /* int8 weight copies (with their scales) */
    int8_t **b;           /* copies x (N x K), row-major, ldb = K */
    float **scale_b;      /* copies x N per-channel scales */
    int copies_f32;       /* float copies for the SGEMM baseline (0: none) */
    float **b_f32;        /* copies_f32 x (N x K), the same values as float */
} bench_weights;

/* Copies needed for `bytes` per copy: the smallest count whose total
 * exceeds 2 * llc_bytes (at least 1). */
int bench_copies(size_t bytes, size_t llc_bytes);

/* Creates a layer's weights from cfg->seed and the tags. Returns 0, or -1
 * when out of memory (message in err; *w then holds nothing). */
int bench_weights_init(bench_weights *w, const bench_config *cfg, int64_t n, int64_t k,
                       uint64_t tag_model, uint64_t tag_layer, char *err, size_t errsize);
void bench_weights_free(bench_weights *w);

typedef struct bench_result {
    int runs;             /* timed runs of the int8 layer */
    double quant_s;       /* median quantize time (s) */
    double mm_s;          /* median smm_scaled_mm time (s) */
    double layer_s;       /* median of quantize + smm_scaled_mm (s) */
    int sgemm_runs;       /* timed SGEMM runs (0: baseline skipped) */
    double sgemm_s;       /* median SGEMM time (s) */
    int rows_checked;     /* rows compared with the reference */
    int verified;         /* 1: every sampled row equal bit for bit */
    char message[512];    /* first mismatch or failed call, in words */
} bench_result;

/*
 * Measures one point (see the top of this file). Activations come from
 * cfg->seed and the tags. Returns 0 when everything ran (res->verified
 * says whether the bits matched), -1 when a call failed or memory ran out
 * (res->message says which).
 */
int bench_point(const bench_config *cfg, const bench_weights *w, int64_t m,
                uint64_t tag_model, uint64_t tag_layer, bench_result *res);

/* ---- parts of bench_point, each in its own file ---- */

/* bench_sgemm.c: times cblas_sgemm(RowMajor, NoTrans, Trans) of the float
 * activations a32 (M x K) by the weight copies (K x N seen through the
 * N x K layout) into c32 (M x N): one warm-up, then up to cfg->repeats
 * timed runs (stopping once cfg->max_time is spent). Sets res->sgemm_runs
 * and res->sgemm_s. */
void bench_sgemm(const bench_config *cfg, const bench_weights *w, int64_t m,
                 const float *a32, float *c32, bench_result *res);

/* bench_verify.c: for rows 0, M/2 and M-1 (the distinct ones), runs the
 * reference on the bf16 activation row x[r] with the weight copy `copy`
 * and compares the tested backend's int8 row q[r], scale_a[r] and bf16
 * output row c[r] with memcmp. Sets res->rows_checked, res->verified and,
 * on a mismatch, res->message. Returns 0, or -1 when a reference call
 * failed or memory ran out (res->message says which). */
int bench_verify(const bench_config *cfg, const bench_weights *w, int copy, int64_t m,
                 const uint16_t *x, const int8_t *q, const float *scale_a,
                 const uint16_t *c, bench_result *res);

/* ---- the machine's limits (bench_machine.c), measured once per run ---- */

typedef struct bench_machine {
    int threads;           /* threads both measurements ran on */
    double peak_gops;      /* int8 dot-product peak, 1e9 ops/s (2 per
                              multiply-add); 0: not measured */
    char peak_insn[96];    /* the instruction timed, or why none was */
    double peak_s;         /* seconds the peak measurement took */
    double bw_gbps;        /* memory read bandwidth, 1e9 bytes/s; 0: not
                              measured */
    size_t bw_bytes;       /* buffer read per pass */
    char bw_how[96];       /* the loads used, or why not measured */
    double bw_s;           /* seconds the bandwidth measurement took */
} bench_machine;

/*
 * Measures, on `threads` OpenMP threads at once:
 *  - the int8 dot-product peak: every thread runs a register-only loop
 *    (inline assembly, 12 independent accumulators) of the widest
 *    instruction smm_cpu_features() allows: vpdpbusd zmm (avx512_vnni),
 *    vpdpbusd ymm (avx_vnni, VEX), else vpmaddwd ymm + vpaddd (avx2, 16
 *    multiply-adds per vpmaddwd); calibrated to about 0.1 s per run, median
 *    of 3 runs; ops = 2 x multiply-adds. Not measured off x86 or without
 *    AVX2 (peak_gops 0).
 *  - the memory read bandwidth: every thread ORs its own contiguous part
 *    of a buffer of at least 8 x llc_bytes with 32-byte loads (8-byte
 *    without AVX2); one warm-up pass, median of 5 timed passes; bytes per
 *    second over the whole buffer. Not measured when the buffer cannot be
 *    allocated (bw_gbps 0, bw_how says so).
 * Takes about 0.5 s plus 6 passes over the buffer. Never fails.
 */
void bench_machine_measure(bench_machine *mc, int threads, size_t llc_bytes);

/* Median of v[0..n-1] (n >= 1); reorders v. */
double bench_median(double *v, int n);

#endif
