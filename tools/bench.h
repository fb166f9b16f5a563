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
 * weights from memory, as a decode step does. By default each copy is
 * packed once with smm_pack_b, as an inference engine loads its weights,
 * and passed as b_packed (--weights raw: the int8 rows themselves).
 * The baseline is OpenBLAS cblas_sgemm on the same problem in float32
 * (activations widened from bf16, weights as floats), same thread count,
 * weights rotated the same way; and, when the tool is built with it,
 * oneDNN's s8 x s8 matmul of the same int8 activations by the same weights
 * (reordered once into the layout oneDNN prefers), per-channel output
 * scales, float32 output (bench_onednn.h).
 * On a GPU context (or with --device-api) the point runs on device memory
 * instead: bench_point_device below.
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
    int onednn;           /* run the oneDNN baseline (built with it) */
    int device;           /* device path: smm_malloc'd buffers, batches of
                             asynchronous launches, smm_synchronize */
    uint64_t seed;        /* data seed */
    size_t llc_bytes;     /* last-level cache size */
    int prepack;          /* weights packed once per copy with smm_pack_b
                             and passed as b_packed (host and device path) */
    const char *packed_format;  /* smm_packed_b_format of those, once known */
} bench_config;

/* One layer's weights in rotation copies. */
typedef struct bench_weights {
    int64_t n, k;
    int copies;           /* int8 weight copies (with their scales) */
    int8_t **b;           /* copies x (N x K), row-major, ldb = K */
    smm_packed_b **packed;  /* copies packed by smm_pack_b (bench_weights_pack),
                               or NULL: b is passed raw */
    float **scale_b;      /* copies x N per-channel scales */
    int copies_f32;       /* float copies for the SGEMM baseline (0: none) */
    float **b_f32;        /* copies_f32 x (N x K), the same values as float */
    struct bench_onednn *onednn;  /* oneDNN's state for this layer, or NULL
                                     (bench_onednn.h; freed with the weights) */
    smm_context *dev_ctx; /* context of the device copies below, or NULL */
    int dev_copies;       /* device weight copies (with their scales) */
    int8_t **dev_b;       /* dev_copies x (N x K) in smm_malloc memory, or
                             NULL entries once packed into dev_packed */
    smm_packed_b **dev_packed; /* dev_copies packed on dev_ctx, or NULL */
    float **dev_scale_b;  /* dev_copies x N in smm_malloc memory */
} bench_weights;

/* Copies needed for `bytes` per copy: the smallest count whose total
 * exceeds 2 * llc_bytes (at least 1). */
int bench_copies(size_t bytes, size_t llc_bytes);

/* Creates a layer's weights from cfg->seed and the tags. Returns 0, or -1
 * when out of memory (message in err; *w then holds nothing). */
int bench_weights_init(bench_weights *w, const bench_config *cfg, int64_t n, int64_t k,
                       uint64_t tag_model, uint64_t tag_layer, char *err, size_t errsize);
void bench_weights_free(bench_weights *w);
/* Packs every copy of w's weights once with smm_pack_b on ctx (sets
 * packed). Returns 0, or -1 with the reason in err (nothing kept). */
int bench_weights_pack(bench_weights *w, smm_context *ctx, char *err, size_t errsize);

/* Bytes of weights (with their scales) the device path keeps in rotation:
 * the tool cannot ask the GPU for its L2 size through the library, so the
 * copies total more than this bound, several times any current GPU's L2. */
#define BENCH_DEVICE_ROTATE_BYTES ((size_t)256 << 20)

/* bench_device.c: uploads w's first copy (weights and scales) into as many
 * smm_malloc'd copies on ctx as make their total exceed
 * BENCH_DEVICE_ROTATE_BYTES (sets dev_ctx, dev_copies, dev_b,
 * dev_scale_b; bench_weights_free frees them). With pack, each weight copy
 * is then packed with smm_pack_b on ctx into dev_packed and its smm_malloc
 * copy freed (dev_b[c] NULL), as an inference engine loads its weights.
 * Returns 0, or -1 with the reason in err (nothing left allocated). */
int bench_weights_to_device(bench_weights *w, smm_context *ctx, int pack, char *err,
                            size_t errsize);
/* Frees what bench_weights_to_device made (packed and smm_malloc'd copies,
 * their pointer arrays) and clears those fields; bench_weights_free calls
 * it. Safe on weights without device copies. */
void bench_weights_free_device(bench_weights *w);

/* The quantize and scaled_mm arguments of one layer call as the bench
 * makes it (bench_point.c): bf16 x (M x K) -> int8 q (M x K) with
 * per-token scales scale_a (M); q times b (N x K) with scale_a x scale_b
 * (N), no bias, bf16 c (M x N); every leading dimension dense. */
void bench_layer_args(int64_t m, int64_t n, int64_t k, const uint16_t *x, int8_t *q,
                      float *scale_a, const int8_t *b, const float *scale_b, uint16_t *c,
                      smm_quantize_args *qa, smm_scaled_mm_args *ma);

/* The smm_linear arguments of the same layer in one call (qa, ma as
 * bench_layer_args made them, ma's b or b_packed set): the int8
 * activations and scales are returned into qa's q and scale. */
void bench_linear_args(const smm_quantize_args *qa, const smm_scaled_mm_args *ma,
                       smm_linear_args *la);

/* Most timed runs per measurement (--repeats). */
#define BENCH_MAX_RUNS 1000

typedef struct bench_result {
    int runs;             /* timed runs of the int8 layer */
    double run_s[BENCH_MAX_RUNS];  /* each of those runs as timed (s), in no
                                      particular order; device path: a run of
                                      'launches' launches */
    double quant_s;       /* median quantize time (s) */
    double mm_s;          /* median smm_scaled_mm time (s) */
    double layer_s;       /* median of quantize + smm_scaled_mm (s) */
    int sgemm_runs;       /* timed SGEMM runs (0: baseline skipped) */
    double sgemm_s;       /* median SGEMM time (s) */
    int onednn_runs;      /* timed oneDNN matmul runs (0: not run) */
    double onednn_s;      /* median oneDNN matmul time (s) */
    char onednn_impl[160];  /* the oneDNN implementation that ran, or
                               "error: " and why it did not */
    int launches;         /* device path: launches per timed run */
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

/*
 * bench_device.c: the same point through the device API, as a GPU context
 * needs it: activations, int8 activations, scales and output in smm_malloc
 * memory, the inputs copied there with smm_memcpy; one warm-up; then each
 * measurement (quantize alone, scaled_mm alone, both) is up to
 * cfg->repeats timed runs (stopping once cfg->max_time is spent) of
 * res->launches back-to-back launches followed by smm_synchronize, timed
 * with CLOCK_MONOTONIC on the host; a run's time / launches is one sample,
 * the median of the samples is reported. Launches rotate over the device
 * weight copies (bench_weights_to_device must have run). launches is
 * chosen per point so that one run lasts about 20 ms (3 to 2000).
 * Finally the outputs are poisoned, one more layer runs, the int8
 * activations, scales and bf16 output are copied back and bench_verify
 * checks them. Returns like bench_point.
 */
int bench_point_device(const bench_config *cfg, const bench_weights *w, int64_t m,
                       uint64_t tag_model, uint64_t tag_layer, bench_result *res);

/* The device's copy bandwidth (bench_device.c). */
typedef struct bench_device {
    double copy_gbps;     /* (bytes read + bytes written) / s, 1e9; 0: not
                             measured */
    size_t copy_bytes;    /* bytes of one copy */
    int copies;           /* copies per timed run */
    double copy_s;        /* seconds the measurement took */
    char how[160];        /* why not measured, when copy_gbps is 0 */
} bench_device;

/* Times device-to-device smm_memcpy of a large buffer (1 GiB, halved until
 * the two buffers can be allocated, at least 64 MiB) on ctx: one warm-up,
 * then 5 timed runs of 4 copies + smm_synchronize, median. Never fails. */
void bench_device_measure(bench_device *d, smm_context *ctx);

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
    double tile_gops;      /* the AMX tile peak (tdpbusd), 1e9 ops/s; 0:
                              not measured */
    char tile_insn[96];    /* the instruction timed, why not measured, or
                              empty (no AMX-INT8) */
    double tile_s;         /* seconds the tile peak measurement took */
    double bw_gbps;        /* memory read bandwidth, 1e9 bytes/s: the
                              probe's fastest repetition (bw_max_gbps); 0:
                              not measured */
    double bw_min_gbps;    /* its slowest repetition */
    double bw_median_gbps; /* its median repetition */
    double bw_max_gbps;    /* its fastest repetition */
    int bw_reps;           /* timed repetitions */
    int bw_passes;         /* passes over the buffer per repetition */
    size_t bw_bytes;       /* buffer read per pass */
    char bw_how[128];      /* the read loop used, or why not measured */
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
 *  - on a CPU with AMX-INT8, the tile peak the same way: tdpbusd into 6
 *    independent accumulator tiles of 16 x 64 bytes (16384 multiply-adds
 *    each), when SMM_CPU_ISA allows the amx_int8 level and Linux grants
 *    the tile state (tile_gops 0 otherwise, tile_insn saying why).
 *  - the memory read bandwidth: every thread ORs its own contiguous part
 *    of a buffer of 4 x all the L3 caches together (llc_bytes x
 *    l3_instances), at least 8 x llc_bytes, at most a quarter of the
 *    physical memory, into 8 independent accumulators with the widest
 *    loads the CPU has: 64-byte (avx512f), else 32-byte (avx2), else
 *    8-byte. With avx2 or avx512f, six read loops: plain, with a
 *    prefetcht0 or prefetchnta per line 1 KiB or 4 KiB ahead, and with a
 *    prefetcht0 1 KiB and a prefetcht1 8 KiB ahead; after a
 *    warm-up pass, the loop whose best of 2 single passes was fastest is
 *    taken (bw_how names it), and its pass time sets the passes. Then 15
 *    timed repetitions of as many passes as take about 0.05 s; bytes per second
 *    over the whole buffer, of the slowest, median and fastest repetition
 *    (bw_gbps = the fastest: what the memory can give). Not measured when
 *    the buffer cannot be allocated (bw_gbps 0, bw_how says so).
 * Takes about 0.5 s plus 0.8 s and 14 passes over the buffer. Never fails.
 */
void bench_machine_measure(bench_machine *mc, int threads, size_t llc_bytes,
                           int l3_instances);

/* Median of v[0..n-1] (n >= 1); reorders v. */
double bench_median(double *v, int n);

#endif
