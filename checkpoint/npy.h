/*
 * npy.h - NumPy .npy files (format versions 1.0-3.0, C order, little-endian)
 * of float32 ('<f4'), float16 ('<f2'), int8 ('|i1') and int32 ('<i4'); and
 * single-tensor safetensors files, which also carry bfloat16. The header
 * dict is parsed by a small strict parser of the three keys the format
 * defines ('descr', 'fortran_order', 'shape').
 */
#ifndef SMM_NPY_H
#define SMM_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

/* A tensor in memory (owns data). dtype uses the safetensors enum. */
typedef struct npy_array {
    st_dtype dtype;     /* ST_F32, ST_F16, ST_BF16 (safetensors only), ST_I8, ST_I32 */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t nbytes;
} npy_array;

/* Reads .npy, or a safetensors file holding exactly one tensor (chosen by
 * the extension .safetensors; any other name is read as .npy). Returns 0,
 * or -1 with a message naming the file in err and *out zeroed. .npy checks:
 * magic, version 1.0/2.0/3.0, header dict with exactly the keys 'descr'
 * ('<f4', '<f2', '|i1', '<i1', '<i4'), 'fortran_order' (False) and 'shape'
 * (tuple of at most ST_MAX_DIMS non-negative integers), ending in '\n';
 * byte count without overflow and equal to what the file holds after the
 * header (too short and too long both rejected). Big-endian, object and
 * Fortran-order arrays are rejected by name. */
int tensor_file_read(const char *path, npy_array *out, char *err, size_t errlen);
/* Writes .npy (format 1.0; prefix and header padded with spaces to a
 * multiple of 64 bytes, as numpy does) or, for a name ending in .safetensors,
 * a safetensors file with the one tensor named "tensor"; bfloat16 only
 * there. a->nbytes must equal what dtype and shape give. Goes through a
 * temporary file renamed into place. Returns 0, or -1 with a message and
 * nothing written. */
int tensor_file_write(const char *path, const npy_array *a, char *err, size_t errlen);
/* Frees a->data and zeroes *a (a may be NULL). */
void npy_array_free(npy_array *a);

/* Parses a whole .npy image in memory (the checks of tensor_file_read) into
 * *out, copying the data. Returns 0, or -1 with a message naming
 * display_name. Used by tensor_file_read and the fuzz target. */
int npy_parse(const void *image, size_t size, const char *display_name, npy_array *out,
              char *err, size_t errlen);

#endif
