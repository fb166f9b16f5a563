/*
 * safetensors.c - safetensors files and sharded checkpoints (see
 * safetensors.h for the format and the checks).
 *
 * Reading maps the file read-only and validates the whole header before any
 * tensor is handed out; the JSON is parsed by jansson with duplicate keys
 * rejected. Writing builds the header with jansson, pads it with spaces to a
 * multiple of 8 bytes (as the reference implementation does, so that the
 * data area starts 8-byte aligned), packs the data with the widest element
 * types first (so every tensor is aligned for its type, and the data area
 * has no gaps, as the reference implementation requires), and goes through
 * a temporary file renamed into place.
 */
#define _XOPEN_SOURCE 700 /* realpath (XSI), with POSIX 2008 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Element types                                                       */
/* ------------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_I8] = {"I8", 1},   [ST_I32] = {"I32", 4}, [ST_U8] = {"U8", 1},
    [ST_I16] = {"I16", 2}, [ST_I64] = {"I64", 8}, [ST_F64] = {"F64", 8},
    [ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t st_dtype_size(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

int st_dtype_from_name(const char *name, st_dtype *out)
{
    for (int t = 0; t < ST_DTYPE_COUNT; t++)
        if (strcmp(name, dtypes[t].name) == 0) {
            *out = (st_dtype)t;
            return 0;
        }
    return -1;
}

int st_nbytes(st_dtype dtype, int ndim, const int64_t *shape, size_t *out)
{
    if ((unsigned)dtype >= ST_DTYPE_COUNT || ndim < 0 || ndim > ST_MAX_DIMS)
        return -1;
    /* Any zero dimension makes the count zero, whatever the others are;
     * the others must still be non-negative and the product of the
     * non-zero ones must not overflow (the count would be meaningless). */
    uint64_t n = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return -1;
        if (shape[d] == 0) {
            zero = 1;
            continue;
        }
        if (n > (uint64_t)INT64_MAX / (uint64_t)shape[d])
            return -1;
        n *= (uint64_t)shape[d];
    }
    if (n > (uint64_t)SIZE_MAX / dtypes[dtype].size)
        return -1;
    *out = zero ? 0 : (size_t)(n * dtypes[dtype].size);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Messages                                                            */
/* ------------------------------------------------------------------ */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A name from a file, fit for a message: at most 80 bytes, anything but
 * printable ASCII as \xHH. */
static const char *shown(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 5 < size; i++) {
        if (i == 80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            buf[o++] = (char)c;
        } else {
            snprintf(buf + o, size - o, "\\x%02x", c);
            o += 4;
        }
    }
    buf[o] = '\0';
    return buf;
}
#define SHOWN(s) shown((s), (char[400]){0}, 400)

/* ------------------------------------------------------------------ */
/* Reading one file                                                    */
/* ------------------------------------------------------------------ */

#define ST_MAX_HEADER ((uint64_t)100 << 20)

struct st_file {
    char *display;
    void *map;              /* the mapping (st_open), or NULL (st_parse) */
    size_t map_size;
    st_tensor *tensors;     /* header order */
    size_t n;
    size_t *by_name;        /* indices into tensors, sorted by name */
    char **meta_keys, **meta_values;
    size_t n_meta;
};

void st_close(st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->tensors[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    if (f->map)
        munmap(f->map, f->map_size);
    free(f->display);
    free(f);
}

typedef struct span {
    uint64_t begin, end;
    size_t index;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Orders pointers to tensors by name. */
static int cmp_tensor_ptr(const void *a, const void *b)
{
    const st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Sorted-by-name index of `n` tensors; NULL on allocation failure. */
static size_t *name_index(const st_tensor *t, size_t n)
{
    const st_tensor **p = malloc((n ? n : 1) * sizeof *p);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!p || !idx) {
        free(p);
        free(idx);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = &t[i];
    qsort(p, n, sizeof *p, cmp_tensor_ptr);
    for (size_t i = 0; i < n; i++)
        idx[i] = (size_t)(p[i] - t);
    free(p);
    return idx;
}

/* Integer array element as a non-negative int64, or -1. */
static int get_nonneg(const json_t *v, int64_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return -1;
    *out = (int64_t)x;
    return 0;
}

/* Validates one tensor entry `v` named `name` into *t (not its name). */
static int parse_entry(const char *disp, const char *name, json_t *v, uint64_t data_size,
                       st_tensor *t, char *err, size_t errlen)
{
    if (!json_is_object(v)) {
        seterr(err, errlen, "%s: tensor '%s': entry is not a JSON object", disp, SHOWN(name));
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0) {
            seterr(err, errlen, "%s: tensor '%s': unknown key '%s' (expected dtype, shape, "
                   "data_offsets)", disp, SHOWN(name), SHOWN(key));
            return -1;
        }
    }
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!dt || !sh || !off) {
        seterr(err, errlen, "%s: tensor '%s': missing %s", disp, SHOWN(name),
               !dt ? "dtype" : !sh ? "shape" : "data_offsets");
        return -1;
    }
    if (!json_is_string(dt)) {
        seterr(err, errlen, "%s: tensor '%s': dtype is not a string", disp, SHOWN(name));
        return -1;
    }
    if (st_dtype_from_name(json_string_value(dt), &t->dtype) != 0) {
        seterr(err, errlen, "%s: tensor '%s': unknown dtype '%s'", disp, SHOWN(name),
               SHOWN(json_string_value(dt)));
        return -1;
    }
    if (!json_is_array(sh)) {
        seterr(err, errlen, "%s: tensor '%s': shape is not an array", disp, SHOWN(name));
        return -1;
    }
    if (json_array_size(sh) > ST_MAX_DIMS) {
        seterr(err, errlen, "%s: tensor '%s': shape has %zu dimensions (at most %d supported)",
               disp, SHOWN(name), json_array_size(sh), ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)json_array_size(sh);
    for (int d = 0; d < t->ndim; d++)
        if (get_nonneg(json_array_get(sh, (size_t)d), &t->shape[d]) != 0) {
            seterr(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                   disp, SHOWN(name), d);
            return -1;
        }
    for (int d = t->ndim; d < ST_MAX_DIMS; d++)
        t->shape[d] = 0;
    int64_t b, e;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        get_nonneg(json_array_get(off, 0), &b) != 0 || get_nonneg(json_array_get(off, 1), &e) != 0) {
        seterr(err, errlen, "%s: tensor '%s': data_offsets is not [begin, end] of "
               "non-negative integers", disp, SHOWN(name));
        return -1;
    }
    if (b > e) {
        seterr(err, errlen, "%s: tensor '%s': data_offsets begin %lld > end %lld", disp,
               SHOWN(name), (long long)b, (long long)e);
        return -1;
    }
    if ((uint64_t)e > data_size) {
        seterr(err, errlen, "%s: tensor '%s': data_offsets end %lld beyond the data area "
               "(%llu bytes)", disp, SHOWN(name), (long long)e, (unsigned long long)data_size);
        return -1;
    }
    size_t nbytes;
    if (st_nbytes(t->dtype, t->ndim, t->shape, &nbytes) != 0) {
        seterr(err, errlen, "%s: tensor '%s': shape size overflows", disp, SHOWN(name));
        return -1;
    }
    if ((uint64_t)nbytes != (uint64_t)(e - b)) {
        seterr(err, errlen, "%s: tensor '%s': shape and dtype %s give %zu bytes, "
               "data_offsets give %lld", disp, SHOWN(name), dtypes[t->dtype].name, nbytes,
               (long long)(e - b));
        return -1;
    }
    t->nbytes = nbytes;
    t->data = (const void *)(uintptr_t)(uint64_t)b;     /* offset for now */
    return 0;
}

static int parse_metadata(st_file *f, json_t *m, char *err, size_t errlen)
{
    if (!json_is_object(m)) {
        seterr(err, errlen, "%s: __metadata__ is not a JSON object", f->display);
        return -1;
    }
    if (f->meta_keys) {     /* cannot happen: duplicate keys are rejected */
        seterr(err, errlen, "%s: __metadata__ given twice", f->display);
        return -1;
    }
    size_t n = json_object_size(m);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_values = calloc(n ? n : 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values) {
        seterr(err, errlen, "%s: out of memory", f->display);
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val) {
        if (!json_is_string(val)) {
            seterr(err, errlen, "%s: __metadata__ value of '%s' is not a string", f->display,
                   SHOWN(key));
            return -1;
        }
        f->meta_keys[f->n_meta] = strdup(key);
        f->meta_values[f->n_meta] = strdup(json_string_value(val));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1]) {
            seterr(err, errlen, "%s: out of memory", f->display);
            return -1;
        }
    }
    return 0;
}

/* Parses the header; on success the tensors' data fields hold offsets. */
static int parse_header(st_file *f, const unsigned char *img, size_t size, char *err,
                        size_t errlen)
{
    const char *disp = f->display;
    if (size < 8) {
        seterr(err, errlen, "%s: %zu bytes, too short for the 8-byte header length", disp, size);
        return -1;
    }
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | img[i];
    if (h > ST_MAX_HEADER) {
        seterr(err, errlen, "%s: header length %llu exceeds the limit of %llu bytes", disp,
               (unsigned long long)h, (unsigned long long)ST_MAX_HEADER);
        return -1;
    }
    if (h > size - 8) {
        seterr(err, errlen, "%s: header length %llu beyond the end of the file (%zu bytes)",
               disp, (unsigned long long)h, size);
        return -1;
    }
    uint64_t data_size = size - 8 - h;
    json_error_t je;
    json_t *root = json_loadb((const char *)img + 8, (size_t)h, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        seterr(err, errlen, "%s: header is not valid JSON: %s (header byte %d)", disp,
               SHOWN(je.text), je.position);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root)) {
        seterr(err, errlen, "%s: header is not a JSON object", disp);
        goto done;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) {
        seterr(err, errlen, "%s: out of memory", disp);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_metadata(f, val, err, errlen) != 0)
                goto done;
            continue;
        }
        st_tensor *t = &f->tensors[f->n];
        if (parse_entry(disp, key, val, data_size, t, err, errlen) != 0)
            goto done;
        if (!(t->name = strdup(key))) {
            seterr(err, errlen, "%s: out of memory", disp);
            goto done;
        }
        f->n++;
    }
    /* No two tensors share a byte. */
    span *s = malloc((f->n ? f->n : 1) * sizeof *s);
    if (!s) {
        seterr(err, errlen, "%s: out of memory", disp);
        goto done;
    }
    for (size_t i = 0; i < f->n; i++) {
        s[i].begin = (uint64_t)(uintptr_t)f->tensors[i].data;
        s[i].end = s[i].begin + f->tensors[i].nbytes;
        s[i].index = i;
    }
    qsort(s, f->n, sizeof *s, cmp_span);
    uint64_t reach = 0;
    size_t reach_by = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (s[i].begin < reach && s[i].end > s[i].begin) {
            seterr(err, errlen, "%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s'", disp,
                   SHOWN(f->tensors[s[i].index].name), (unsigned long long)s[i].begin,
                   (unsigned long long)s[i].end, SHOWN(f->tensors[reach_by].name));
            free(s);
            goto done;
        }
        if (s[i].end > reach) {
            reach = s[i].end;
            reach_by = s[i].index;
        }
    }
    free(s);
    const unsigned char *data = img + 8 + h;
    for (size_t i = 0; i < f->n; i++)
        f->tensors[i].data = data + (uintptr_t)f->tensors[i].data;
    if (!(f->by_name = name_index(f->tensors, f->n))) {
        seterr(err, errlen, "%s: out of memory", disp);
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

st_file *st_parse(const void *image, size_t size, const char *display_name, char *err,
                  size_t errlen)
{
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->display = strdup(display_name ? display_name : "(memory)"))) {
        free(f);
        seterr(err, errlen, "%s: out of memory", display_name ? display_name : "(memory)");
        return NULL;
    }
    if (parse_header(f, image, size, err, errlen) != 0) {
        st_close(f);
        return NULL;
    }
    return f;
}

int st_open_regular(const char *path, size_t *size, char *err, size_t errlen)
{
    /* O_NONBLOCK: open() of a FIFO without a writer would wait forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat sb;
    int fl;
    if (fd < 0) {
        seterr(err, errlen, "%s: %s", path,
               errno == ENXIO ? "not a regular file" : strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        seterr(err, errlen, "%s: not a regular file%s", path,
               S_ISDIR(sb.st_mode) ? " (a directory)" : "");
        close(fd);
        return -1;
    }
    if ((uintmax_t)sb.st_size > (uintmax_t)SIZE_MAX) {
        seterr(err, errlen, "%s: too large to map", path);
        close(fd);
        return -1;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (size)
        *size = (size_t)sb.st_size;
    return fd;
}

st_file *st_open(const char *path, char *err, size_t errlen)
{
    size_t fsize = 0;
    int fd = st_open_regular(path, &fsize, err, errlen);
    if (fd < 0)
        return NULL;
    size_t size = fsize;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            seterr(err, errlen, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    close(fd);
    st_file *f = st_parse(map ? map : "", size, path, err, errlen);
    if (!f) {
        if (map)
            munmap(map, size);
        return NULL;
    }
    f->map = map;
    f->map_size = size;
    return f;
}

size_t st_count(const st_file *f)
{
    return f->n;
}

const st_tensor *st_at(const st_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const char *st_display_name(const st_file *f)
{
    return f->display;
}

/* Binary search of `name` among tensors t, through sorted indices. */
static const st_tensor *find_sorted(const st_tensor *const *p, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p[mid]->name, name);
        if (c == 0)
            return p[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t st_metadata_count(const st_file *f)
{
    return f->n_meta;
}

const char *st_metadata_key(const st_file *f, size_t i)
{
    return i < f->n_meta ? f->meta_keys[i] : NULL;
}

const char *st_metadata(const st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_values[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */
/* ------------------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes the parts, in order, to fd; -1 with errno on failure. */
static int write_parts(int fd, const void *const *parts, const size_t *sizes, size_t nparts)
{
    for (size_t i = 0; i < nparts; i++)
        if (sizes[i] > 0 && write_all(fd, parts[i], sizes[i]) != 0)
            return -1;
    return 0;
}

/* Writes the parts straight into an existing non-regular file (a device,
 * a FIFO), without truncating or replacing it. */
static int write_in_place(const char *path, const void *const *parts, const size_t *sizes,
                          size_t nparts, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (write_parts(fd, parts, sizes, nparts) != 0) {
        seterr(err, errlen, "%s: write: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (close(fd) != 0) {
        seterr(err, errlen, "%s: close: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int st_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes,
                         size_t nparts, char *err, size_t errlen)
{
    /* A link: the file it names is the one to replace, write into, or
     * (a dangling link) create. */
    struct stat sb;
    char *resolved = NULL;
    int created = 0;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        resolved = realpath(path, NULL);
        if (!resolved && errno == ENOENT && stat(path, &sb) != 0) {
            /* Dangling: the file it names is created through the link, as
             * a shell's > creates it (with the kernel's rules on following
             * links), and then replaced like any existing file. */
            int fd = open(path, O_WRONLY | O_CREAT | O_NOCTTY, 0666);
            if (fd < 0) {
                seterr(err, errlen, "%s: %s", path, strerror(errno));
                return -1;
            }
            close(fd);
            created = 1;
            resolved = realpath(path, NULL);
        }
        if (!resolved && stat(path, &sb) != 0) {
            /* a loop of links, or a link that cannot be resolved */
            seterr(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        /* Still NULL: it names something realpath cannot spell
         * (/dev/stdout on a pipe), written through the link's own path. */
    }
    const char *target = resolved ? resolved : path;
    mode_t mode = 0644;
    if (stat(target, &sb) == 0) {
        if (!S_ISREG(sb.st_mode)) {
            int rc = write_in_place(target, parts, sizes, nparts, err, errlen);
            free(resolved);
            return rc;
        }
        mode = sb.st_mode & 07777;
    }
    size_t len = strlen(target);
    char *tmp = malloc(len + 16);
    if (!tmp) {
        seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    memcpy(tmp, target, len);
    memcpy(tmp + len, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        seterr(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
        goto fail;
    }
    const char *what = "fchmod";
    int ok = fchmod(fd, mode) == 0;
    if (ok && write_parts(fd, parts, sizes, nparts) != 0) {
        ok = 0;
        what = "write";
    }
    if (ok && fsync(fd) != 0) {
        ok = 0;
        what = "fsync";
    }
    if (close(fd) != 0 && ok) {
        ok = 0;
        what = "close";
    }
    if (ok && rename(tmp, target) != 0) {
        ok = 0;
        what = "rename";
    }
    if (!ok) {
        seterr(err, errlen, "%s: %s: %s", path, what, strerror(errno));
        unlink(tmp);
        goto fail;
    }
    free(tmp);
    free(resolved);
    return 0;
fail:
    if (created)
        unlink(target); /* the empty file made through the link */
    free(tmp);
    free(resolved);
    return -1;
}

typedef struct order_item {
    size_t index;
    size_t size;
} order_item;

static int cmp_order(const void *a, const void *b)
{
    const order_item *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;      /* widest first */
    return x->index < y->index ? -1 : x->index > y->index;
}

int st_write(const char *path, const st_tensor *tensors, size_t n,
             const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
             char *err, size_t errlen)
{
    int rc = -1;
    json_t *root = json_object();
    json_t *meta = NULL;
    order_item *ord = malloc((n ? n : 1) * sizeof *ord);
    uint64_t *begin = malloc((n ? n : 1) * sizeof *begin);
    const void **parts = malloc((n + 2) * sizeof *parts);
    size_t *sizes = malloc((n + 2) * sizeof *sizes);
    char *hdr = NULL, *padded = NULL;
    if (!root || !ord || !begin || !parts || !sizes) {
        seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    /* Check everything before writing anything. */
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        size_t nb;
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0) {
            seterr(err, errlen, "%s: tensor %zu: missing or reserved name", path, i);
            goto done;
        }
        if ((unsigned)t->dtype >= ST_DTYPE_COUNT || t->ndim < 0 || t->ndim > ST_MAX_DIMS ||
            st_nbytes(t->dtype, t->ndim, t->shape, &nb) != 0) {
            seterr(err, errlen, "%s: tensor '%s': bad dtype or shape", path, SHOWN(t->name));
            goto done;
        }
        if (nb != t->nbytes || (nb > 0 && !t->data)) {
            seterr(err, errlen, "%s: tensor '%s': nbytes %zu, but shape and dtype give %zu",
                   path, SHOWN(t->name), t->nbytes, nb);
            goto done;
        }
        ord[i].index = i;
        ord[i].size = dtypes[t->dtype].size;
    }
    qsort(ord, n, sizeof *ord, cmp_order);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        begin[ord[i].index] = at;
        at += tensors[ord[i].index].nbytes;
    }
    if (n_meta > 0) {
        if (!(meta = json_object())) {
            seterr(err, errlen, "%s: out of memory", path);
            goto done;
        }
        for (size_t i = 0; i < n_meta; i++) {
            if (!meta_keys[i] || !meta_values[i]) {
                seterr(err, errlen, "%s: metadata %zu: missing key or value", path, i);
                goto done;
            }
            if (json_object_get(meta, meta_keys[i])) {
                seterr(err, errlen, "%s: metadata key '%s' given twice", path,
                       SHOWN(meta_keys[i]));
                goto done;
            }
            json_t *s = json_string(meta_values[i]);
            if (!s || json_object_set_new(meta, meta_keys[i], s) != 0) {
                seterr(err, errlen, "%s: metadata '%s': key or value is not valid UTF-8", path,
                       SHOWN(meta_keys[i]));
                goto done;
            }
        }
        if (json_object_set(root, "__metadata__", meta) != 0) {
            seterr(err, errlen, "%s: out of memory", path);
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        if (json_object_get(root, t->name)) {
            seterr(err, errlen, "%s: tensor '%s' given twice", path, SHOWN(t->name));
            goto done;
        }
        json_t *e = json_object(), *shape = json_array(), *off = json_array();
        int bad = !e || !shape || !off ||
                  json_array_append_new(off, json_integer((json_int_t)begin[i])) != 0 ||
                  json_array_append_new(off, json_integer((json_int_t)(begin[i] + t->nbytes))) != 0;
        for (int d = 0; !bad && d < t->ndim; d++)
            bad = json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0;
        if (!bad)
            bad = json_object_set_new(e, "dtype", json_string(dtypes[t->dtype].name)) != 0 ||
                  json_object_set(e, "shape", shape) != 0 ||
                  json_object_set(e, "data_offsets", off) != 0;
        json_decref(shape);
        json_decref(off);
        if (bad || json_object_set_new(root, t->name, e) != 0) {
            if (bad)
                json_decref(e);
            seterr(err, errlen, "%s: tensor '%s': name is not valid UTF-8 (or out of memory)",
                   path, SHOWN(t->name));
            goto done;
        }
    }
    if (!(hdr = json_dumps(root, JSON_COMPACT))) {
        seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    size_t h = strlen(hdr);
    size_t hp = (h + 7) / 8 * 8;
    if (!(padded = malloc(8 + hp))) {
        seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < 8; i++)
        padded[i] = (char)(unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(padded + 8, hdr, h);
    memset(padded + 8 + h, ' ', hp - h);
    parts[0] = padded;
    sizes[0] = 8 + hp;
    for (size_t i = 0; i < n; i++) {
        parts[1 + i] = tensors[ord[i].index].data;
        sizes[1 + i] = tensors[ord[i].index].nbytes;
    }
    rc = st_write_file_atomic(path, parts, sizes, n + 1, err, errlen);
done:
    json_decref(meta);
    json_decref(root);
    free(hdr);
    free(padded);
    free(ord);
    free(begin);
    free(parts);
    free(sizes);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Checkpoints                                                         */
/* ------------------------------------------------------------------ */

#define ST_MAX_INDEX ((size_t)64 << 20)
#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

/* Parses and checks an index; returns the root (owning) or NULL. */
static json_t *index_parse(const char *json, size_t len, const char *disp, char *err,
                           size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        seterr(err, errlen, "%s: not valid JSON: %s (byte %d)", disp, SHOWN(je.text),
               je.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        seterr(err, errlen, "%s: not a JSON object", disp);
        goto bad;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta)) {
        seterr(err, errlen, "%s: \"metadata\" is not a JSON object", disp);
        goto bad;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!wm) {
        seterr(err, errlen, "%s: no \"weight_map\"", disp);
        goto bad;
    }
    if (!json_is_object(wm)) {
        seterr(err, errlen, "%s: \"weight_map\" is not a JSON object", disp);
        goto bad;
    }
    if (json_object_size(wm) == 0) {
        seterr(err, errlen, "%s: \"weight_map\" is empty", disp);
        goto bad;
    }
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!key[0] || strcmp(key, "__metadata__") == 0) {
            seterr(err, errlen, "%s: weight_map: empty or reserved tensor name", disp);
            goto bad;
        }
        if (!json_is_string(val)) {
            seterr(err, errlen, "%s: weight_map: tensor '%s': shard is not a string", disp,
                   SHOWN(key));
            goto bad;
        }
        const char *s = json_string_value(val);
        if (!s[0] || strchr(s, '/') || strchr(s, '\\') || strstr(s, "..") ||
            strcmp(s, ".") == 0) {
            seterr(err, errlen, "%s: weight_map: tensor '%s': shard '%s' is not a plain file "
                   "name", disp, SHOWN(key), SHOWN(s));
            goto bad;
        }
    }
    return root;
bad:
    json_decref(root);
    return NULL;
}

long st_index_validate(const char *json, size_t len, const char *display_name, char *err,
                       size_t errlen)
{
    json_t *root = index_parse(json, len, display_name ? display_name : "(index)", err, errlen);
    if (!root)
        return -1;
    long n = (long)json_object_size(json_object_get(root, "weight_map"));
    json_decref(root);
    return n;
}

struct st_checkpoint {
    st_file **shards;
    size_t n_shards;
    const st_tensor **order;    /* index order (or header order) */
    const st_tensor **sorted;   /* by name */
    size_t n;
};

void st_checkpoint_close(st_checkpoint *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_shards; i++)
        st_close(c->shards[i]);
    free(c->shards);
    free(c->order);
    free(c->sorted);
    free(c);
}

size_t st_checkpoint_count(const st_checkpoint *c)
{
    return c->n;
}

const st_tensor *st_checkpoint_at(const st_checkpoint *c, size_t i)
{
    return i < c->n ? c->order[i] : NULL;
}

const st_tensor *st_checkpoint_find(const st_checkpoint *c, const char *name)
{
    return find_sorted(c->sorted, c->n, name);
}

/* Fills c->sorted from c->order; 0, or -1 if out of memory. */
static int sort_checkpoint(st_checkpoint *c)
{
    c->sorted = malloc((c->n ? c->n : 1) * sizeof *c->sorted);
    if (!c->sorted)
        return -1;
    memcpy(c->sorted, c->order, c->n * sizeof *c->sorted);
    qsort(c->sorted, c->n, sizeof *c->sorted, cmp_tensor_ptr);
    return 0;
}

char *st_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p;
    while (a > 1 && dir[a - 1] == '/')
        a--;
    p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        if (a == 0 || dir[a - 1] != '/')
            p[a++] = '/';
        memcpy(p + a, name, b + 1);
    }
    return p;
}

static char *join(const char *dir, const char *name)
{
    return st_path_join(dir, name);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Reads a whole (small) file; NULL with a message on failure. */
char *st_read_small(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    size_t size = 0, n = 0;
    int fd = st_open_regular(path, &size, err, errlen);
    char *buf;
    if (fd < 0)
        return NULL;
    if (size > limit) {
        seterr(err, errlen, "%s: larger than %zu bytes", path, limit);
        close(fd);
        return NULL;
    }
    buf = malloc(size + 1);
    if (!buf) {
        seterr(err, errlen, "%s: out of memory", path);
        close(fd);
        return NULL;
    }
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    if (n != size) {
        seterr(err, errlen, "%s: read error", path);
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static char *read_small(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    return st_read_small(path, limit, len, err, errlen);
}

static st_checkpoint *open_single(const char *path, char *err, size_t errlen)
{
    st_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->shards = calloc(1, sizeof *c->shards))) {
        free(c);
        seterr(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (!(c->shards[0] = st_open(path, err, errlen))) {
        st_checkpoint_close(c);
        return NULL;
    }
    c->n_shards = 1;
    c->n = st_count(c->shards[0]);
    c->order = malloc((c->n ? c->n : 1) * sizeof *c->order);
    if (!c->order) {
        seterr(err, errlen, "%s: out of memory", path);
        st_checkpoint_close(c);
        return NULL;
    }
    for (size_t i = 0; i < c->n; i++)
        c->order[i] = st_at(c->shards[0], i);
    if (sort_checkpoint(c) != 0) {
        seterr(err, errlen, "%s: out of memory", path);
        st_checkpoint_close(c);
        return NULL;
    }
    return c;
}

static st_checkpoint *open_index(const char *dir, const char *index_path, char *err,
                                 size_t errlen)
{
    size_t len;
    char *text = read_small(index_path, ST_MAX_INDEX, &len, err, errlen);
    if (!text)
        return NULL;
    json_t *root = index_parse(text, len, index_path, err, errlen);
    free(text);
    if (!root)
        return NULL;
    json_t *wm = json_object_get(root, "weight_map");
    size_t n = json_object_size(wm);
    st_checkpoint *c = calloc(1, sizeof *c);
    const char **shard_names = calloc(n, sizeof *shard_names);
    size_t *shard_of = calloc(n, sizeof *shard_of);
    if (!c || !shard_names || !shard_of || !(c->shards = calloc(n, sizeof *c->shards)) ||
        !(c->order = calloc(n, sizeof *c->order))) {
        seterr(err, errlen, "%s: out of memory", index_path);
        goto bad;
    }
    /* Each shard once, in order of first mention. */
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(wm, key, val) {
        const char *s = json_string_value(val);
        size_t j = 0;
        while (j < c->n_shards && strcmp(shard_names[j], s) != 0)
            j++;
        if (j == c->n_shards) {
            char *p = join(dir, s);
            if (!p) {
                seterr(err, errlen, "%s: out of memory", index_path);
                goto bad;
            }
            char sub[1024];
            st_file *f = st_open(p, sub, sizeof sub);
            free(p);
            if (!f) {
                seterr(err, errlen, "%s: shard '%s' (of tensor '%s'): %s", index_path,
                       SHOWN(s), SHOWN(key), sub);
                goto bad;
            }
            shard_names[j] = s;
            c->shards[c->n_shards++] = f;
        }
        shard_of[k++] = j;
    }
    /* Every listed tensor in its shard... */
    k = 0;
    json_object_foreach(wm, key, val) {
        const st_tensor *t = st_find(c->shards[shard_of[k]], key);
        if (!t) {
            seterr(err, errlen, "%s: tensor '%s' is not in its shard '%s'", index_path,
                   SHOWN(key), SHOWN(shard_names[shard_of[k]]));
            goto bad;
        }
        c->order[k++] = t;
    }
    c->n = n;
    /* ...and every tensor of a shard listed, for that shard. */
    for (size_t j = 0; j < c->n_shards; j++)
        for (size_t i = 0; i < st_count(c->shards[j]); i++) {
            const char *name = st_at(c->shards[j], i)->name;
            json_t *v = json_object_get(wm, name);
            if (!v || strcmp(json_string_value(v), shard_names[j]) != 0) {
                seterr(err, errlen, "%s: shard '%s' holds tensor '%s', which the index %s",
                       index_path, SHOWN(shard_names[j]), SHOWN(name),
                       v ? "maps to another shard" : "does not list");
                goto bad;
            }
        }
    if (sort_checkpoint(c) != 0) {
        seterr(err, errlen, "%s: out of memory", index_path);
        goto bad;
    }
    free(shard_names);
    free(shard_of);
    json_decref(root);
    return c;
bad:
    free(shard_names);
    free(shard_of);
    json_decref(root);
    st_checkpoint_close(c);
    return NULL;
}

st_checkpoint *st_checkpoint_open(const char *dir, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        seterr(err, errlen, "%s: %s", dir, strerror(errno));
        return NULL;
    }
    if (S_ISREG(sb.st_mode)) {
        if (ends_with(dir, ".json")) {
            /* An index file: shards are next to it. */
            size_t len = strlen(dir);
            char *d = malloc(len + 2);
            if (!d) {
                seterr(err, errlen, "%s: out of memory", dir);
                return NULL;
            }
            memcpy(d, dir, len + 1);
            char *slash = strrchr(d, '/');
            if (slash == d)
                d[1] = '\0';
            else if (slash)
                *slash = '\0';
            else
                strcpy(d, ".");
            st_checkpoint *c = open_index(d, dir, err, errlen);
            free(d);
            return c;
        }
        return open_single(dir, err, errlen);
    }
    if (!S_ISDIR(sb.st_mode)) {
        seterr(err, errlen, "%s: neither a directory nor a file", dir);
        return NULL;
    }
    char *ip = join(dir, INDEX_NAME), *sp = join(dir, SINGLE_NAME);
    st_checkpoint *c = NULL;
    if (!ip || !sp)
        seterr(err, errlen, "%s: out of memory", dir);
    else if (access(ip, F_OK) == 0)
        c = open_index(dir, ip, err, errlen);
    else if (access(sp, F_OK) == 0)
        c = open_single(sp, err, errlen);
    else
        seterr(err, errlen, "%s: no %s or %s in this directory", dir, INDEX_NAME, SINGLE_NAME);
    free(ip);
    free(sp);
    return c;
}
