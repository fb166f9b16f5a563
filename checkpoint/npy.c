/*
 * npy.c - NumPy .npy files and single-tensor safetensors files (see npy.h).
 *
 * The .npy header is a Python dict literal, e.g.
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n'. It is parsed here by a small strict
 * parser of exactly that grammar (it is not JSON): quoted keys without
 * escapes, the three keys once each, 'descr' a string, 'fortran_order' True
 * or False, 'shape' a tuple of non-negative decimal integers ("(3,)" for one
 * dimension, "()" for a scalar), optional trailing comma.
 * Format reference: numpy/lib/format.py (NEP 1).
 */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER ((size_t)1 << 20)

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

static const struct {
    const char *descr;
    st_dtype dtype;
} descrs[] = {
    {"<f4", ST_F32}, {"<f2", ST_F16}, {"|i1", ST_I8}, {"<i1", ST_I8}, {"<i4", ST_I32},
};

/* The descr written for each type; NULL where .npy is not supported. */
static const char *descr_of(st_dtype t)
{
    switch (t) {
    case ST_F32: return "<f4";
    case ST_F16: return "<f2";
    case ST_I8: return "|i1";
    case ST_I32: return "<i4";
    default: return NULL;
    }
}

void npy_array_free(npy_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------ */
/* The header dict                                                     */
/* ------------------------------------------------------------------ */

typedef struct cursor {
    const char *p, *end;
    const char *disp;
    char *err;
    size_t errlen;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* Consumes `ch` (after blanks); 0, or -1 without consuming. */
static int accept(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 0;
    }
    return -1;
}

static int fail(cursor *c, const char *what)
{
    seterr(c->err, c->errlen, "%s: .npy header: %s", c->disp, what);
    return -1;
}

/* A quoted string of printable ASCII without escapes into buf. */
static int parse_str(cursor *c, char *buf, size_t size)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\' || n + 1 >= size)
            return -1;
        buf[n++] = (char)ch;
        c->p++;
    }
    if (c->p >= c->end)
        return -1;
    c->p++;
    buf[n] = '\0';
    return 0;
}

static int parse_word(cursor *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        const char *after = c->p + n;
        if (after < c->end && ((*after >= 'A' && *after <= 'Z') || (*after >= 'a' && *after <= 'z') ||
                               (*after >= '0' && *after <= '9') || *after == '_'))
            return -1;
        c->p = after;
        return 0;
    }
    return -1;
}

/* A non-negative decimal integer (no sign, no leading zeros, no suffix). */
static int parse_dim(cursor *c, int64_t *out)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == '-')
        return fail(c, "negative dimension in 'shape'");
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return fail(c, "'shape' is not a tuple of integers");
    if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
        return fail(c, "'shape' dimension with a leading zero");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p - '0';
        if (v > (INT64_MAX - d) / 10)
            return fail(c, "'shape' dimension overflows");
        v = v * 10 + d;
        c->p++;
    }
    if (c->p < c->end && ((*c->p >= 'A' && *c->p <= 'Z') || (*c->p >= 'a' && *c->p <= 'z') ||
                          *c->p == '.' || *c->p == '_'))
        return fail(c, "'shape' is not a tuple of integers");
    *out = v;
    return 0;
}

static int parse_shape(cursor *c, npy_array *a)
{
    if (accept(c, '(') != 0)
        return fail(c, "'shape' is not a tuple");
    a->ndim = 0;
    if (accept(c, ')') == 0)
        return 0;
    for (;;) {
        if (a->ndim == ST_MAX_DIMS)
            return fail(c, "'shape' has more dimensions than supported (8)");
        if (parse_dim(c, &a->shape[a->ndim]) != 0)
            return -1;
        a->ndim++;
        if (accept(c, ')') == 0) {
            if (a->ndim == 1)   /* "(3)" is an integer, not a tuple */
                return fail(c, "'shape' is not a tuple (one dimension needs a comma)");
            return 0;
        }
        if (accept(c, ',') != 0)
            return fail(c, "'shape' tuple: expected ',' or ')'");
        if (accept(c, ')') == 0)
            return 0;
    }
}

static int parse_descr(cursor *c, npy_array *a)
{
    char d[64];
    skip_ws(c);
    if (c->p < c->end && *c->p == '[')
        return fail(c, "'descr' is a list: structured arrays are not supported");
    if (parse_str(c, d, sizeof d) != 0)
        return fail(c, "'descr' is not a string");
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
        if (strcmp(d, descrs[i].descr) == 0) {
            a->dtype = descrs[i].dtype;
            return 0;
        }
    char msg[160];
    if (d[0] == '>')
        snprintf(msg, sizeof msg, "big-endian descr '%s' is not supported", d);
    else if (strchr(d, 'O'))
        snprintf(msg, sizeof msg, "object arrays (descr '%s') are not supported", d);
    else
        snprintf(msg, sizeof msg, "unsupported descr '%s' (supported: '<f4', '<f2', '|i1', "
                 "'<i4')", d);
    return fail(c, msg);
}

/* Parses the dict text[0..len) (which ends in '\n') into a. */
static int parse_dict(cursor *c, npy_array *a)
{
    if (c->p == c->end || c->end[-1] != '\n')
        return fail(c, "does not end with a newline");
    c->end--;
    if (accept(c, '{') != 0)
        return fail(c, "not a dict");
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    while (accept(c, '}') != 0) {
        char key[32];
        if (parse_str(c, key, sizeof key) != 0)
            return fail(c, "expected a quoted key or '}'");
        if (accept(c, ':') != 0)
            return fail(c, "expected ':' after a key");
        int *seen = strcmp(key, "descr") == 0           ? &seen_descr
                    : strcmp(key, "fortran_order") == 0 ? &seen_fortran
                    : strcmp(key, "shape") == 0         ? &seen_shape
                                                        : NULL;
        if (!seen) {
            char msg[80];
            snprintf(msg, sizeof msg, "unknown key '%s'", key);
            return fail(c, msg);
        }
        if (*seen)
            return fail(c, "duplicate key");
        *seen = 1;
        if (seen == &seen_descr) {
            if (parse_descr(c, a) != 0)
                return -1;
        } else if (seen == &seen_fortran) {
            if (parse_word(c, "True") == 0)
                return fail(c, "fortran_order True is not supported (C order only)");
            if (parse_word(c, "False") != 0)
                return fail(c, "'fortran_order' is not True or False");
        } else if (parse_shape(c, a) != 0) {
            return -1;
        }
        if (accept(c, ',') != 0) {
            if (accept(c, '}') != 0)
                return fail(c, "expected ',' or '}'");
            break;
        }
    }
    skip_ws(c);
    if (c->p != c->end)
        return fail(c, "unexpected text after the dict");
    if (!seen_descr || !seen_fortran || !seen_shape)
        return fail(c, !seen_descr ? "missing key 'descr'" : !seen_fortran
                                       ? "missing key 'fortran_order'" : "missing key 'shape'");
    return 0;
}

int npy_parse(const void *image, size_t size, const char *display_name, npy_array *out,
              char *err, size_t errlen)
{
    const unsigned char *b = image;
    const char *disp = display_name ? display_name : "(memory)";
    npy_array a;
    memset(&a, 0, sizeof a);
    memset(out, 0, sizeof *out);
    if (size < 10 || memcmp(b, NPY_MAGIC, 6) != 0) {
        seterr(err, errlen, "%s: not a .npy file (bad magic or too short)", disp);
        return -1;
    }
    int major = b[6], minor = b[7];
    size_t prefix, hlen;
    if (major == 1 && minor == 0) {
        prefix = 10;
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (size < 12) {
            seterr(err, errlen, "%s: .npy header length truncated", disp);
            return -1;
        }
        prefix = 12;
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        seterr(err, errlen, "%s: unsupported .npy version %d.%d", disp, major, minor);
        return -1;
    }
    if (hlen > NPY_MAX_HEADER) {
        seterr(err, errlen, "%s: .npy header length %zu exceeds the limit", disp, hlen);
        return -1;
    }
    if (hlen > size - prefix) {
        seterr(err, errlen, "%s: .npy header length %zu beyond the end of the file", disp, hlen);
        return -1;
    }
    cursor c = {(const char *)b + prefix, (const char *)b + prefix + hlen, disp, err, errlen};
    if (parse_dict(&c, &a) != 0)
        return -1;
    size_t nbytes;
    if (st_nbytes(a.dtype, a.ndim, a.shape, &nbytes) != 0) {
        seterr(err, errlen, "%s: .npy shape size overflows", disp);
        return -1;
    }
    size_t have = size - prefix - hlen;
    if (have != nbytes) {
        seterr(err, errlen, "%s: file too %s: the header gives %zu data bytes, the file holds %zu",
               disp, have < nbytes ? "short" : "long", nbytes, have);
        return -1;
    }
    if (!(a.data = malloc(nbytes ? nbytes : 1))) {
        seterr(err, errlen, "%s: out of memory", disp);
        return -1;
    }
    memcpy(a.data, b + prefix + hlen, nbytes);
    a.nbytes = nbytes;
    *out = a;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Files                                                               */
/* ------------------------------------------------------------------ */

static int is_safetensors(const char *path)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(path), e = sizeof ext - 1;
    return n >= e && strcmp(path + n - e, ext) == 0;
}

static int read_safetensors(const char *path, npy_array *out, char *err, size_t errlen)
{
    st_file *f = st_open(path, err, errlen);
    if (!f)
        return -1;
    int rc = -1;
    if (st_count(f) != 1) {
        seterr(err, errlen, "%s: holds %zu tensors; a tensor file holds exactly one", path,
               st_count(f));
        goto done;
    }
    const st_tensor *t = st_at(f, 0);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_I8 &&
        t->dtype != ST_I32) {
        seterr(err, errlen, "%s: tensor '%s': dtype %s not supported here (F32, F16, BF16, I8, "
               "I32)", path, t->name, st_dtype_name(t->dtype));
        goto done;
    }
    if (!(out->data = malloc(t->nbytes ? t->nbytes : 1))) {
        seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    memcpy(out->data, t->data, t->nbytes);
    out->nbytes = t->nbytes;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    rc = 0;
done:
    st_close(f);
    return rc;
}

static int read_npy(const char *path, npy_array *out, char *err, size_t errlen)
{
    size_t fsize = 0;
    int fd = st_open_regular(path, &fsize, err, errlen);
    if (fd < 0)
        return -1;
    size_t size = fsize;
    void *map = NULL;
    if (size > 0 && (map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        seterr(err, errlen, "%s: mmap: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    int rc = npy_parse(map ? map : "", size, path, out, err, errlen);
    if (map)
        munmap(map, size);
    return rc;
}

int tensor_file_read(const char *path, npy_array *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    return is_safetensors(path) ? read_safetensors(path, out, err, errlen)
                                : read_npy(path, out, err, errlen);
}

int tensor_file_write(const char *path, const npy_array *a, char *err, size_t errlen)
{
    size_t nb;
    if ((a->dtype != ST_F32 && a->dtype != ST_F16 && a->dtype != ST_BF16 && a->dtype != ST_I8 &&
         a->dtype != ST_I32) || a->ndim < 0 || a->ndim > ST_MAX_DIMS ||
        st_nbytes(a->dtype, a->ndim, a->shape, &nb) != 0) {
        seterr(err, errlen, "%s: bad dtype or shape", path);
        return -1;
    }
    if (nb != a->nbytes || (nb > 0 && !a->data)) {
        seterr(err, errlen, "%s: nbytes %zu, but shape and dtype give %zu", path, a->nbytes, nb);
        return -1;
    }
    if (is_safetensors(path)) {
        st_tensor t = {.name = (char *)"tensor", .dtype = a->dtype, .ndim = a->ndim,
                       .data = a->data, .nbytes = a->nbytes};
        memcpy(t.shape, a->shape, sizeof t.shape);
        return st_write(path, &t, 1, NULL, NULL, 0, err, errlen);
    }
    const char *descr = descr_of(a->dtype);
    if (!descr) {
        seterr(err, errlen, "%s: %s cannot be stored in .npy (use .safetensors)", path,
               st_dtype_name(a->dtype));
        return -1;
    }
    /* 10- or 12-byte prefix, dict, spaces, '\n': a multiple of 64 bytes. */
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int d = 0; d < a->ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "",
                      (long long)a->shape[d]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", a->ndim == 1 ? "," : "");
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    unsigned char hdr[640];
    size_t hlen = total - 10;
    memcpy(hdr, NPY_MAGIC, 6);
    hdr[6] = 1;
    hdr[7] = 0;
    hdr[8] = (unsigned char)(hlen & 0xff);
    hdr[9] = (unsigned char)(hlen >> 8);
    memcpy(hdr + 10, dict, (size_t)n);
    memset(hdr + 10 + n, ' ', total - 10 - (size_t)n - 1);
    hdr[total - 1] = '\n';
    const void *parts[2] = {hdr, a->data};
    size_t sizes[2] = {total, a->nbytes};
    return st_write_file_atomic(path, parts, sizes, 2, err, errlen);
}
