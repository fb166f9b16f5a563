/*
 * fuzz_npy.c - libFuzzer target for the .npy header parser: any byte string
 * is either rejected with a message or accepted with a consistent shape and
 * byte count. Build and run with fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    npy_array a;
    if (npy_parse(data, size, "fuzz", &a, err, sizeof err) != 0) {
        if (err[0] == '\0' || !memchr(err, '\0', sizeof err) || a.data)
            abort();
        return 0;
    }
    size_t nb;
    if (st_nbytes(a.dtype, a.ndim, a.shape, &nb) != 0 || nb != a.nbytes || nb > size)
        abort();
    if (nb && memcmp(a.data, data + size - nb, nb) != 0)
        abort();
    npy_array_free(&a);
    return 0;
}
