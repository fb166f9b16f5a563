/*
 * safetensors.h - safetensors files and sharded checkpoints, read through
 * mmap and written atomically; the header is JSON, parsed with jansson.
 *
 * Format (https://huggingface.co/docs/safetensors): 8 bytes little-endian
 * header length H, H bytes of UTF-8 JSON {"name": {"dtype": "F32",
 * "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__":
 * {"k": "v"}}, then the data area; offsets are relative to the data area.
 *
 * Every header is checked before any tensor is handed out: H within the
 * file, valid JSON object, known dtype, shape of non-negative integers whose
 * element count times the dtype size neither overflows nor differs from
 * end - begin, begin <= end <= data size, tensors not overlapping. Errors
 * name the file and, where there is one, the tensor.
 */
#ifndef SMM_SAFETENSORS_H
#define SMM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* Element types of safetensors ("F32", "F16", "BF16", "I8", "I32", others
 * are recognised so that they can be copied, but not computed on). */
typedef enum {
    ST_F32, ST_F16, ST_BF16, ST_I8, ST_I32, ST_U8, ST_I16, ST_I64, ST_F64, ST_BOOL,
    ST_DTYPE_COUNT
} st_dtype;

const char *st_dtype_name(st_dtype t);      /* "F32", ...; "?" if out of range */
size_t st_dtype_size(st_dtype t);           /* bytes per element; 0 if out of range */
/* The type named `name` ("F32", ...): 0 and *out set, or -1 if unknown. */
int st_dtype_from_name(const char *name, st_dtype *out);
/* Bytes of a tensor of `ndim` (0..ST_MAX_DIMS) dimensions `shape`: 0 and
 * *out set, or -1 if a dimension is negative or the element count (as
 * int64) or the byte count (as size_t) overflows. A zero dimension gives 0
 * bytes; ndim 0 (a scalar) gives one element. */
int st_nbytes(st_dtype dtype, int ndim, const int64_t *shape, size_t *out);

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;       /* into the mapping; read-only. Aligned for its type
                               only if the writer arranged it (st_write does):
                               read elements through memcpy */
    size_t nbytes;
} st_tensor;

/* Opens `path` for reading without blocking: a FIFO, a device or a
 * directory gives -1 with "PATH: not a regular file" in err (never a
 * hang); a missing or unreadable file, "PATH: <strerror>". Returns the
 * descriptor (O_RDONLY, O_CLOEXEC, blocking mode restored); the size in
 * *size when size is non-NULL. */
int st_open_regular(const char *path, size_t *size, char *err, size_t errlen);
/* Reads a whole regular file of at most `limit` bytes (st_open_regular's
 * checks) into a NUL-terminated buffer; NULL with a message naming it. */
char *st_read_small(const char *path, size_t limit, size_t *len, char *err, size_t errlen);
/* "dir/name" without doubling a slash that ends `dir` ("a/" + "b" is
 * "a/b", "/" + "b" is "/b"); malloc'd, NULL when out of memory. */
char *st_path_join(const char *dir, const char *name);

/* One mapped file. */
typedef struct st_file st_file;

/* Opens and validates `path`. On failure returns NULL and writes a message
 * naming the file (and tensor) into err. The file stays mapped until
 * st_close; it must not be truncated meanwhile (SIGBUS). Tensors may leave
 * gaps in the data area but may not overlap; entries with keys other than
 * dtype, shape, data_offsets are rejected. */
st_file *st_open(const char *path, char *err, size_t errlen);
/* Validates an in-memory image (used by st_open and the fuzz target). The
 * image must outlive the result. */
st_file *st_parse(const void *image, size_t size, const char *display_name,
                  char *err, size_t errlen);
void st_close(st_file *f);

size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i);            /* header order */
const st_tensor *st_find(const st_file *f, const char *name);  /* NULL if absent */
/* "__metadata__" value for key, or NULL. */
const char *st_metadata(const st_file *f, const char *key);
/* The metadata entries in header order: count, and the i-th key (NULL if
 * i >= count; its value through st_metadata). */
size_t st_metadata_count(const st_file *f);
const char *st_metadata_key(const st_file *f, size_t i);
/* The name given to st_open / st_parse (for messages). */
const char *st_display_name(const st_file *f);

/* Writes a file with the given tensors (data copied from each .data) and
 * optional metadata (n_meta key/value pairs), via a temporary file renamed
 * into place. The header lists tensors in the given order (metadata first);
 * the data area packs them widest element type first (ties in the given
 * order), without gaps, so every tensor is aligned for its type. Checks
 * before writing: names non-empty, unique, valid UTF-8, not "__metadata__";
 * dtype and shape valid; nbytes equal to what shape and dtype give; data
 * non-NULL when nbytes > 0; metadata keys unique. Returns 0, or -1 with a
 * message in err and no file created or changed. */
int st_write(const char *path, const st_tensor *tensors, size_t n,
             const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
             char *err, size_t errlen);

/* Writes the concatenation of `nparts` buffers to `path` through a
 * temporary file in the same directory (fsync'd) renamed into place: mode
 * 0644 for a new file, an existing file's mode kept. A symbolic link is
 * followed (the file it names is replaced, the link stays); a path that is
 * (or links to) something other than a regular file, such as /dev/null or
 * a FIFO, is opened and written in place, never replaced. Returns 0, or -1
 * with a message naming the file (the temporary removed, a regular `path`
 * untouched). Used by st_write and the .npy writer. */
int st_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes,
                         size_t nparts, char *err, size_t errlen);

/*
 * A checkpoint directory: model.safetensors, or the shards listed by
 * model.safetensors.index.json ({"weight_map": {"tensor": "file"}}), every
 * shard opened once and validated, every tensor of the index present in its
 * shard, and every tensor of a shard listed in the index for that shard.
 * Index checks: JSON object without duplicate keys; "weight_map" a
 * non-empty object whose values are plain file names (no '/', '\\', "..");
 * "metadata", if present, an object; other keys ignored. `dir` may also
 * name a .safetensors file (opened alone) or an index .json file (shards
 * next to it). Tensors come in index order (header order for one file);
 * they stay valid until st_checkpoint_close.
 */
typedef struct st_checkpoint st_checkpoint;
st_checkpoint *st_checkpoint_open(const char *dir, char *err, size_t errlen);
/* Validates an index JSON text (used by st_checkpoint_open and the fuzz
 * target): returns the number of entries, or -1 with a message. */
long st_index_validate(const char *json, size_t len, const char *display_name,
                       char *err, size_t errlen);
void st_checkpoint_close(st_checkpoint *c);
size_t st_checkpoint_count(const st_checkpoint *c);
const st_tensor *st_checkpoint_at(const st_checkpoint *c, size_t i);
const st_tensor *st_checkpoint_find(const st_checkpoint *c, const char *name);

#endif
