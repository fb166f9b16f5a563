/*
 * check_gpu_convert.c - the GPU kernels' float conversions
 * (lib/rocm/epilogue.h: binary32 -> binary16 / bfloat16 / canonical
 * binary32 for the GEMM output, binary16 / bfloat16 -> binary32 for the
 * quantizer's input) against the reference's (lib/convert.c), bit for bit,
 * on the host. The GPU code carries its own copy of these integer
 * routines (device code cannot call the library); this suite is what keeps
 * the copies equal on machines without a GPU. Needs no GPU toolchain: the
 * header's host-and-device functions compile as static inline C here.
 *
 * Tests:
 *   - widening: all 65536 binary16 and all 65536 bfloat16 patterns;
 *   - narrowing, every 13th binary32 pattern from a random start (about
 *     330 million values, every exponent and sign), plus every pattern within
 *     2^16 of each rounding and range boundary (the binary16 overflow and
 *     normal / subnormal thresholds, the zero threshold, Inf and the NaNs,
 *     the largest finite value, zero) with either sign;
 *   - a deliberately wrong binary16 conversion (ties away from zero) is
 *     caught by the same comparison over the boundary windows (the
 *     comparison can fail).
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "../lib/rocm/epilogue.h"

/* The reference's binary32 output: any NaN stored as 0x7FFFFFFF
 * (doc/numerics.md; lib/reference.c). */
static uint32_t ref_canonical(float x)
{
    return x != x ? 0x7FFFFFFFu : smm_epi_f32_bits(x);
}

/* A wrong binary16 conversion for the negative control: ties rounded away
 * from zero instead of to even. */
static uint16_t bad_f32_to_f16(float x)
{
    const uint32_t u = smm_epi_f32_bits(x);
    const uint16_t h = smm_epi_f32_to_f16(x);
    const uint32_t mag = u & 0x7FFFFFFFu;
    if (mag >= 0x38800000u && mag < 0x477FF000u && (u & 0x1FFFu) == 0x1000u && !(h & 1u))
        return (uint16_t)(h + 1u);
    return h;
}

typedef uint16_t (*narrow_fn)(float);

/* Compares one binary32 pattern through the three narrowing conversions;
 * f16 is the conversion under test for binary16 (smm_epi_f32_to_f16 or the
 * negative control). Returns the number of mismatches and reports the
 * first few. */
static long check_pattern(uint32_t u, narrow_fn f16, long *reported)
{
    const float x = smm_epi_f32_from_bits(u);
    long bad = 0;
    uint16_t want16 = smm_f32_to_f16(x), got16 = f16(x);

    if (want16 != got16) {
        if ((*reported)++ < 5)
            fprintf(stderr, "f16: 0x%08X -> 0x%04X, reference 0x%04X\n", (unsigned)u,
                    (unsigned)got16, (unsigned)want16);
        bad++;
    }
    want16 = smm_f32_to_bf16(x);
    got16 = smm_epi_f32_to_bf16(x);
    if (want16 != got16) {
        if ((*reported)++ < 5)
            fprintf(stderr, "bf16: 0x%08X -> 0x%04X, reference 0x%04X\n", (unsigned)u,
                    (unsigned)got16, (unsigned)want16);
        bad++;
    }
    if (smm_epi_f32_canonical(x) != ref_canonical(x)) {
        if ((*reported)++ < 5)
            fprintf(stderr, "f32: 0x%08X -> 0x%08X, reference 0x%08X\n", (unsigned)u,
                    (unsigned)smm_epi_f32_canonical(x), (unsigned)ref_canonical(x));
        bad++;
    }
    return bad;
}

/* Magnitudes at which a conversion changes behaviour. */
static const uint32_t boundaries[] = {
    0x00000000u, /* zero */
    0x00800000u, /* smallest normal binary32 */
    0x33000000u, /* 2^-25: half the smallest binary16 subnormal */
    0x33800000u, /* 2^-24: smallest binary16 subnormal */
    0x38800000u, /* 2^-14: smallest binary16 normal */
    0x477FE000u, /* 65504: largest finite binary16 */
    0x477FF000u, /* 65520: rounds to Inf */
    0x7F7F0000u, /* largest finite bfloat16 */
    0x7F7FFFFFu, /* largest finite binary32 */
    0x7F800000u, /* Inf */
    0x7FC00000u, /* quiet NaN */
};

/* Every 13th pattern from `start` (none when start > 0xFFFFFFFF), then the
 * windows around the boundaries. */
static long sweep(uint64_t start, narrow_fn f16, long *reported)
{
    long bad = 0;
    uint64_t u;
    size_t i;

    for (u = start; u <= 0xFFFFFFFFu; u += 13)
        bad += check_pattern((uint32_t)u, f16, reported);
    for (i = 0; i < sizeof boundaries / sizeof boundaries[0]; i++) {
        int64_t d;
        for (d = -65536; d <= 65536; d++) {
            const int64_t mag = (int64_t)boundaries[i] + d;
            if (mag < 0 || mag > 0x7FFFFFFF)
                continue;
            bad += check_pattern((uint32_t)mag, f16, reported);
            bad += check_pattern((uint32_t)mag | 0x80000000u, f16, reported);
        }
    }
    return bad;
}

START_TEST(test_widening)
{
    long bad = 0;
    uint32_t h;

    for (h = 0; h <= 0xFFFFu; h++) {
        const uint32_t want = smm_epi_f32_bits(smm_f16_to_f32((uint16_t)h));
        const uint32_t got = smm_epi_f32_bits(smm_epi_f16_to_f32((uint16_t)h));
        const uint32_t wantb = smm_epi_f32_bits(smm_bf16_to_f32((uint16_t)h));
        const uint32_t gotb = smm_epi_f32_bits(smm_epi_bf16_to_f32((uint16_t)h));
        if (want != got || wantb != gotb) {
            if (bad < 5)
                fprintf(stderr, "0x%04X: f16 0x%08X (reference 0x%08X), bf16 0x%08X (0x%08X)\n",
                        (unsigned)h, (unsigned)got, (unsigned)want, (unsigned)gotb,
                        (unsigned)wantb);
            bad++;
        }
    }
    ck_assert_msg(bad == 0, "%ld of 65536 binary16 / bfloat16 patterns differ", bad);
}
END_TEST

START_TEST(test_narrowing)
{
    cf_rng r = tu_rng("narrowing");
    const uint32_t start = (uint32_t)cf_rng_range(&r, 0, 12);
    long reported = 0;
    const long bad = sweep(start, smm_epi_f32_to_f16, &reported);

    ck_assert_msg(bad == 0, "%ld conversions differ from the reference (sweep from %u)", bad,
                  (unsigned)start);
}
END_TEST

START_TEST(test_negative_control)
{
    long reported = 5; /* quiet: mismatches are expected here */
    const long bad = sweep((uint64_t)1 << 32, bad_f32_to_f16, &reported); /* windows only */

    ck_assert_msg(bad > 0, "a binary16 conversion with ties away from zero went unnoticed");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_convert");
    TCase *tc = tu_tcase(s, "convert", 600);

    tcase_add_test(tc, test_widening);
    tcase_add_test(tc, test_narrowing);
    tcase_add_test(tc, test_negative_control);
    return tu_main(s, "gpu_convert");
}
