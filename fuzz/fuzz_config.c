/*
 * fuzz_config.c - libFuzzer target for the compressed-tensors
 * quantization_config parser (config.json, checkpoint/ctensors.c): any byte
 * string is either rejected with a message or accepted; an accepted config
 * then matches a few layer names, which must answer (a match, no match, or
 * an error naming the pattern) within PCRE2's limits. Build and run with
 * fuzz/run.sh.
 *
 * ct_config_parse needs none of the library's arithmetic: the few library
 * functions ctensors.c links against are stubs here, never called.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {
        "model.layers.0.mlp.down_proj", "lm_head", "", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
        "encoder.layer.5.attention.self.query",
    };
    char err[512];
    const ct_scheme *s;
    const char *g;
    size_t i;
    ct_config *c;

    err[0] = '\0';
    c = ct_config_parse((const char *)data, size, "fuzz", err, sizeof err);
    if (!c) {
        if (err[0] == '\0' || !memchr(err, '\0', sizeof err))
            abort();                    /* rejected without a message */
        return 0;
    }
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        err[0] = '\0';
        if (ct_config_lookup(c, names[i], &s, &g, err, sizeof err) != 0 && err[0] == '\0')
            abort();                    /* a failed match without a message */
    }
    ct_config_free(c);
    return 0;
}

/* Library functions ctensors.c refers to outside the config parser. */
float smm_f16_to_f32(uint16_t h) { (void)h; abort(); }
float smm_bf16_to_f32(uint16_t h) { (void)h; abort(); }
uint16_t smm_f32_to_f16(float x) { (void)x; abort(); }
uint16_t smm_f32_to_bf16(float x) { (void)x; abort(); }
smm_status smm_quantize_i8(smm_context *ctx, const smm_quantize_args *a)
{
    (void)ctx; (void)a; abort();
}
smm_status smm_scaled_mm(smm_context *ctx, const smm_scaled_mm_args *a)
{
    (void)ctx; (void)a; abort();
}
const char *smm_strerror(smm_status s) { (void)s; abort(); }
const char *smm_context_last_error(const smm_context *ctx) { (void)ctx; abort(); }
