/*
 * fuzz_index.c - libFuzzer target for the sharded-checkpoint index parser
 * (model.safetensors.index.json): any byte string is either rejected with a
 * message or accepted with a positive entry count. Build and run with
 * fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    long n = st_index_validate((const char *)data, size, "fuzz", err, sizeof err);
    if (n < 0 && (err[0] == '\0' || !memchr(err, '\0', sizeof err)))
        abort();                        /* rejected without a message */
    if (n == 0 || n < -1)
        abort();                        /* an accepted index has entries */
    return 0;
}
