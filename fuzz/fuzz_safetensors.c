/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors header parser:
 * any byte string is either rejected with a message or accepted with every
 * tensor inside the image (read in full, so that ASan checks the bounds).
 * Build and run with fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    st_file *f = st_parse(data, size, "fuzz", err, sizeof err);
    if (!f) {
        if (err[0] == '\0' || !memchr(err, '\0', sizeof err))
            abort();                    /* rejected without a message */
        return 0;
    }
    unsigned sum = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const uint8_t *p = t->data;
        if (p < data || (size_t)(p - data) > size || t->nbytes > size - (size_t)(p - data))
            abort();                    /* outside the image */
        size_t nb;
        if (st_nbytes(t->dtype, t->ndim, t->shape, &nb) != 0 || nb != t->nbytes)
            abort();
        if (st_find(f, t->name) != t)
            abort();
        for (size_t j = 0; j < t->nbytes; j++)
            sum += p[j];
    }
    for (size_t i = 0; i < st_metadata_count(f); i++)
        if (!st_metadata(f, st_metadata_key(f, i)))
            abort();
    sink = sum;
    st_close(f);
    return 0;
}
