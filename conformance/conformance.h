/*
 * conformance.h - the conformance battery shared by `scaledmm check` and the
 * Check test suite (tests/check_conformance.c).
 *
 * Every case builds fresh random inputs from a seeded generator, runs the
 * same call on the tested context and on a reference context, poisons the
 * outputs before each run, and compares bitwise (memcmp): every output
 * element written, every byte outside a strided view untouched.
 *
 * The tested context may be a GPU context (rocm, cuda): its calls then get
 * device copies of every input (smm_malloc / smm_memcpy, address kept
 * modulo 64, NaN-patterned guards around each) and of every output buffer
 * with its poison, guards and gaps; after the call and smm_synchronize the
 * outputs come back to the host and are checked as above, and the device
 * inputs (guards included) must be unchanged. A staging failure is a case
 * failure naming the call and the runtime's message.
 */
#ifndef SMM_CONFORMANCE_H
#define SMM_CONFORMANCE_H

#include <stdint.h>
#include <stdio.h>
#include "scaledmm.h"

/* xoshiro256** pseudo-random generator: reproducible from one 64-bit seed. */
typedef struct cf_rng { uint64_t s[4]; } cf_rng;
void cf_rng_seed(cf_rng *r, uint64_t seed);
uint64_t cf_rng_next(cf_rng *r);
/* Uniform in [lo, hi] (inclusive). */
int64_t cf_rng_range(cf_rng *r, int64_t lo, int64_t hi);

/* The seed to use, stored in *seed: the environment variable SMM_TEST_SEED
 * (decimal or 0x hex, digits only: no sign or blanks) when set and not
 * empty, else a fresh one from the clock and pid. Returns 0; or -1, with
 * *seed untouched and a line on stderr, when SMM_TEST_SEED is set to
 * something else, so that a replay never runs on another seed than the
 * one asked for. */
int cf_seed(uint64_t *seed);

typedef struct cf_options {
    uint64_t seed;        /* battery seed; each case derives its own */
    int quick;            /* fewer and smaller cases */
    int num_threads;      /* applied to the tested context (0 = default) */
    /* Optional: called before each case (name, index, total), for progress
     * displays; NULL for none. */
    void (*progress)(const char *case_name, int index, int total, void *user);
    void *user;
} cf_options;

/* Outcome of one group of cases (one row of `scaledmm check`'s table). */
typedef struct cf_group_result {
    const char *group;    /* "gemm_s8s8s32", "scaled_mm_f32", ..., "quantize" */
    int cases;            /* cases run */
    int failures;         /* cases whose bits differ */
    int skipped;          /* cases the tested backend returned UNSUPPORTED */
} cf_group_result;

#define CF_MAX_GROUPS 16

typedef struct cf_report {
    int ngroups;
    cf_group_result groups[CF_MAX_GROUPS];
    int failures;                 /* total */
    /* First mismatch, or the first unexpected status, in words: case name,
     * seed, shape, the element index and both values' bits in hex. "" when
     * none. */
    char first_failure[1024];
} cf_report;

/*
 * Runs the whole battery: smm_gemm_s8s8s32, smm_scaled_mm in every output
 * type with all four scale-mode combinations, bias on/off, azp per-tensor
 * and per-token, strided and unaligned views, tails around blocking sizes,
 * extreme values; smm_quantize_i8 in every mode and input type.
 * `tested` and `reference` are contexts (the latter on
 * SMM_BACKEND_REFERENCE). Returns the number of failing cases (0 = pass).
 */
int cf_run_battery(smm_context *tested, smm_context *reference,
                   const cf_options *opt, cf_report *report);

/* ------------------------------------------------------------------ */
/* Building blocks of the battery, shared with the test suite           */
/* ------------------------------------------------------------------ */

/* Names of the battery's groups, in the order cf_run_battery runs them:
 * "gemm_s8s8s32", "scaled_mm_f32", "scaled_mm_f16", "scaled_mm_bf16",
 * "quantize_f32", "quantize_f16", "quantize_bf16". Sets *count. */
const char *const *cf_group_names(int *count);

/* Runs one group of the battery (a name from cf_group_names) and appends its
 * row to report (which the caller zero-initialises once). Returns the number
 * of failing cases, or -1 for an unknown group name. */
int cf_run_group(smm_context *tested, smm_context *reference,
                 const cf_options *opt, const char *group, cf_report *report);

/* Value classes of int8 operands. */
typedef enum {
    CF_VALUES_UNIFORM,   /* uniform in [-128, 127] */
    CF_VALUES_MIN,       /* all -128 */
    CF_VALUES_MAX,       /* all 127 */
    CF_VALUES_EXTREME,   /* random mix of -128 and 127 */
    CF_VALUES_SMALL,     /* uniform in [-3, 3] */
    CF_VALUES_COUNT
} cf_values;

/* Fills an int8 rows x cols view (leading dimension ld) with values of class
 * cls; the bytes between rows get random values too. */
void cf_fill_i8(cf_rng *r, int8_t *p, int64_t rows, int64_t cols, int64_t ld,
                cf_values cls);

/* Base-pointer offset in bytes of a case's buffer: CF_OFFSET_RANDOM draws one
 * in [0, 63]; offsets of float/int32/16-bit buffers are rounded down to a
 * multiple of the element size. */
#define CF_OFFSET_RANDOM (-1)

/* One smm_gemm_s8s8s32 (c_dtype SMM_DTYPE_I32) or smm_scaled_mm problem.
 * Zero-initialise, then set what matters. Inputs are generated from the seed
 * given to cf_run_mm_case. */
typedef struct cf_mm_case {
    smm_dtype c_dtype;
    int64_t m, n, k, lda, ldb, ldc;   /* elements; a matrix with one row may
                                         have any leading dimension */
    cf_values a_values, b_values;
    int scale_a_per_token;            /* scale_a_len = M instead of 1 */
    int scale_b_per_channel;          /* scale_b_len = N instead of 1 */
    int bias;                         /* 1: random bias; 2: bias cancelling
                                         row 0's product exactly (fma test) */
    int azp;                          /* 0 none, 1 per-tensor, 2 per-token */
    int specials;                     /* occasional 0, negative, huge,
                                         subnormal, Inf, NaN scales/bias,
                                         int32-range zero points */
    int a_off, b_off, c_off;          /* base offsets in bytes, or
                                         CF_OFFSET_RANDOM */
} cf_mm_case;

/* One smm_quantize_i8 problem. */
typedef struct cf_quant_case {
    smm_dtype x_dtype;
    smm_quant_mode mode;
    int asym;                         /* static: azp input; dynamic: azp output */
    int64_t m, k, ldx, ldq;
    int row_classes;                  /* rows drawn from classes: ordinary,
                                         constant, zero, all-NaN, with Inf,
                                         subnormal range, overflowing range,
                                         exact ties */
    int specials;                     /* NaN/Inf/huge/subnormal elements and
                                         special static scales */
    int x_off, out_off;               /* byte offsets of x and of the outputs,
                                         or CF_OFFSET_RANDOM */
} cf_quant_case;

/* Outcome of a case. */
#define CF_PASS 0
#define CF_FAIL 1
#define CF_SKIP 2   /* the tested backend returned SMM_ERR_UNSUPPORTED */

/*
 * Runs one case on `tested` (twice, outputs poisoned with 0xA5 and 0x5A) and
 * on `reference` (poisoned with 0xA5) and compares: same status (SMM_OK),
 * every output element bit-identical in all three runs, every byte outside
 * the output views (guards before and after, gaps between rows) untouched,
 * inputs unchanged. On failure writes a description (first differing
 * element, both values' bits in hex) into msg.
 */
int cf_run_mm_case(smm_context *tested, smm_context *reference,
                   const cf_mm_case *c, uint64_t seed, char *msg, size_t msgsz);
int cf_run_quant_case(smm_context *tested, smm_context *reference,
                      const cf_quant_case *c, uint64_t seed, char *msg, size_t msgsz);

/* The same comparison for inputs the caller built: args describe the inputs
 * (args->c / q, scale, azp outputs are ignored and allocated here with
 * c_off bytes of offset; for smm_quantize_i8 in DYNAMIC_PER_TOKEN mode a
 * non-NULL args->azp asks for zero points). c_dtype SMM_DTYPE_I32 calls
 * smm_gemm_s8s8s32. */
int cf_compare_mm(smm_context *tested, smm_context *reference,
                  const smm_scaled_mm_args *args, int c_off, char *msg, size_t msgsz);
int cf_compare_quantize(smm_context *tested, smm_context *reference,
                        const smm_quantize_args *args, int out_off,
                        char *msg, size_t msgsz);

/* One-line description of a case ("m=3 n=65 k=129 lda=... sa=token ..."). */
void cf_describe_mm_case(const cf_mm_case *c, char *buf, size_t size);
void cf_describe_quant_case(const cf_quant_case *c, char *buf, size_t size);

#endif
