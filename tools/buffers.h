/*
 * buffers.h - aligned buffers and reproducible random contents for
 * `scaledmm bench`.
 */
#ifndef SMM_TOOL_BUFFERS_H
#define SMM_TOOL_BUFFERS_H

#include <stddef.h>
#include <stdint.h>
#include "conformance.h"

/* 64-byte aligned (posix_memalign) allocation of `bytes` (0 allowed: one
 * byte is allocated). NULL when out of memory. Free with free(). */
void *buf_alloc(size_t bytes);

/* A generator for one named purpose: the bench seed mixed with the given
 * tags (model, layer and M indexes), so that each point's data does not
 * depend on which other points run. */
void buf_rng(cf_rng *r, uint64_t seed, uint64_t tag1, uint64_t tag2, uint64_t tag3);

/* Uniform int8 in [-127, 127] (symmetric-quantized weights never use -128). */
void buf_fill_i8(cf_rng *r, int8_t *p, size_t count);

/* bfloat16 bits of values uniform in [-range, range]. */
void buf_fill_bf16(cf_rng *r, uint16_t *p, size_t count, float range);

/* Floats uniform in [lo, hi]. */
void buf_fill_f32(cf_rng *r, float *p, size_t count, float lo, float hi);

#endif
