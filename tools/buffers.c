/*
 * buffers.c - aligned allocation and random fills (buffers.h).
 */
#include "buffers.h"

#include <stdlib.h>
#include "scaledmm.h"

void *buf_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
        return NULL;
    return p;
}

/* splitmix64 step: spreads tags over the whole seed space. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void buf_rng(cf_rng *r, uint64_t seed, uint64_t tag1, uint64_t tag2, uint64_t tag3)
{
    cf_rng_seed(r, mix(mix(mix(seed ^ mix(tag1)) ^ tag2) ^ tag3));
}

void buf_fill_i8(cf_rng *r, int8_t *p, size_t count)
{
    size_t i = 0;
    while (i < count) {
        uint64_t x = cf_rng_next(r);
        int j;
        /* 7 values per draw, 9 bits each (bias < 1/500 per value: fine
         * for benchmark data). */
        for (j = 0; j < 7 && i < count; j++, i++, x >>= 9)
            p[i] = (int8_t)((int)((x & 511u) % 255u) - 127);
    }
}

/* Uniform in [0, 1) from the top 24 bits of a draw. */
static float unit(uint64_t x)
{
    return (float)(x >> 40) * (1.0f / 16777216.0f);
}

void buf_fill_bf16(cf_rng *r, uint16_t *p, size_t count, float range)
{
    size_t i;
    for (i = 0; i < count; i++) {
        float u = unit(cf_rng_next(r));
        p[i] = smm_f32_to_bf16((2.0f * u - 1.0f) * range);
    }
}

void buf_fill_f32(cf_rng *r, float *p, size_t count, float lo, float hi)
{
    size_t i;
    for (i = 0; i < count; i++)
        p[i] = lo + (hi - lo) * unit(cf_rng_next(r));
}
