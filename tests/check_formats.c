/*
 * check_formats.c - the file formats under the checkpoint commands:
 * safetensors files, sharded checkpoints (index + shards) and .npy files.
 *
 * - Every file of the malformed corpus (tests/data/malformed, listed in its
 *   MANIFEST) is rejected, through the file and through the in-memory
 *   parser, with a message that names the file, the tensor where there is
 *   one, and the problem.
 * - Every valid file (tests/data/valid/MANIFEST) reads back with exactly
 *   the listed dtype, shape and bytes; the writers reproduce two of them
 *   byte for byte.
 * - Round trips of random tensors of every dtype through the .npy and
 *   safetensors writers and readers.
 * - Writers refuse bad input and then write nothing (an existing file stays
 *   as it was; no temporary file is left).
 * - Sharded checkpoints built in a temporary directory: opened, and
 *   rejected when a shard or a tensor is missing or the index is bad.
 * - Random corruptions of valid images never crash the parsers, and
 *   whatever they accept lies within the image.
 *
 * The corpus is found through SMM_TEST_DATA (set by `make check`).
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "safetensors.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static const char *data_dir(void)
{
    const char *d = getenv("SMM_TEST_DATA");
    return d && *d ? d : "data";
}

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* The whole file in a buffer of exactly its size (so that ASan sees any
 * read past the end); NULL if it cannot be read. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return NULL;
    }
    *len = (size_t)sb.st_size;
    unsigned char *b = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static char *make_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    char *tmpl = path_join(t && *t ? t : "/tmp", "smm-formats-XXXXXX");
    ck_assert_msg(mkdtemp(tmpl) != NULL, "mkdtemp(%s): %s", tmpl, strerror(errno));
    return tmpl;
}

static size_t dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* Removes the files in dir (one level), then dir. */
static void remove_tmpdir(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *p = path_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* Err buffer poisoned before each call: afterwards it must hold a
 * terminated, non-empty message. */
#define ERRLEN 1024
static void err_poison(char *err)
{
    memset(err, 'X', ERRLEN);
}
static void err_check(const char *err, const char *what)
{
    ck_assert_msg(memchr(err, '\0', ERRLEN) != NULL, "%s: message not terminated", what);
    ck_assert_msg(err[0] != '\0' && err[0] != 'X', "%s: no message", what);
}
#define ck_assert_has(err, needle, what)                                                  \
    ck_assert_msg(strstr((err), (needle)) != NULL, "%s: message \"%s\" lacks \"%s\"",    \
                  (what), (err), (needle))

/* Tab-separated lines of a MANIFEST. */
typedef struct manifest {
    char *text;
    char **field;   /* rows * cols */
    size_t rows, cols;
} manifest;

static void manifest_load(manifest *m, const char *path, size_t cols)
{
    size_t len;
    unsigned char *b = slurp(path, &len);
    ck_assert_msg(b != NULL, "cannot read %s (is SMM_TEST_DATA set?)", path);
    m->text = realloc(b, len + 1);
    m->text[len] = '\0';
    m->cols = cols;
    m->rows = 0;
    m->field = NULL;
    char *save = NULL;
    for (char *line = strtok_r(m->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        m->field = realloc(m->field, (m->rows + 1) * cols * sizeof *m->field);
        ck_assert_ptr_nonnull(m->field);
        char *p = line;
        for (size_t c = 0; c < cols; c++) {
            m->field[m->rows * cols + c] = p;
            char *tab = strchr(p, '\t');
            if (c + 1 < cols) {
                ck_assert_msg(tab != NULL, "%s: line %zu has too few fields", path, m->rows + 1);
                *tab = '\0';
                p = tab + 1;
            } else {
                ck_assert_msg(tab == NULL, "%s: line %zu has too many fields", path, m->rows + 1);
            }
        }
        m->rows++;
    }
}

static const char *mf(const manifest *m, size_t r, size_t c)
{
    return m->field[r * m->cols + c];
}

static void manifest_free(manifest *m)
{
    free(m->text);
    free(m->field);
}

static unsigned char *unhex(const char *s, size_t *len)
{
    size_t n = strlen(s);
    ck_assert_uint_eq(n % 2, 0);
    unsigned char *b = malloc(n / 2 + 1);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(s + 2 * i, "%2x", &v), 1);
        b[i] = (unsigned char)v;
    }
    *len = n / 2;
    return b;
}

/* Checks a tensor against a valid-MANIFEST row (dtype, shape, hex). */
static void check_tensor(const char *what, st_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, size_t nbytes, const char *mdtype,
                         const char *mshape, const char *mhex)
{
    ck_assert_msg(strcmp(st_dtype_name(dtype), mdtype) == 0, "%s: dtype %s, expected %s", what,
                  st_dtype_name(dtype), mdtype);
    char sh[256] = "";
    size_t o = 0;
    for (int d = 0; d < ndim; d++)
        o += (size_t)snprintf(sh + o, sizeof sh - o, "%s%lld", d ? "," : "", (long long)shape[d]);
    ck_assert_msg(strcmp(sh, mshape) == 0, "%s: shape %s, expected %s", what, sh, mshape);
    size_t n;
    unsigned char *want = unhex(mhex, &n);
    ck_assert_msg(nbytes == n, "%s: %zu bytes, expected %zu", what, nbytes, n);
    ck_assert_msg(n == 0 || memcmp(data, want, n) == 0, "%s: bytes differ", what);
    free(want);
}

/* ------------------------------------------------------------------ */
/* The malformed corpus                                                */
/* ------------------------------------------------------------------ */

START_TEST(test_malformed_corpus)
{
    char *dir = path_join(data_dir(), "malformed");
    char *mpath = path_join(dir, "MANIFEST");
    manifest m;
    manifest_load(&m, mpath, 4);
    size_t per_kind[3] = {0, 0, 0};
    char err[ERRLEN], what[512];
    for (size_t r = 0; r < m.rows; r++) {
        const char *file = mf(&m, r, 0), *kind = mf(&m, r, 1), *tensor = mf(&m, r, 2),
                   *phrase = mf(&m, r, 3);
        char *path = path_join(dir, file);
        size_t len;
        unsigned char *img = slurp(path, &len);
        ck_assert_msg(img != NULL, "corpus file %s missing", path);
        snprintf(what, sizeof what, "%s (%s)", path, kind);
        if (strcmp(kind, "st") == 0) {
            per_kind[0]++;
            err_poison(err);
            st_file *f = st_open(path, err, ERRLEN);
            ck_assert_msg(f == NULL, "%s: accepted", what);
            err_check(err, what);
            ck_assert_has(err, path, what);
            ck_assert_has(err, phrase, what);
            if (strcmp(tensor, "-") != 0) {
                char q[256];
                snprintf(q, sizeof q, "'%s'", tensor);
                if (strstr(err, q) == NULL)     /* jansson quotes with "" */
                    snprintf(q, sizeof q, "\"%s\"", tensor);
                ck_assert_has(err, q, what);
            }
            /* The same image in memory, under another name. */
            err_poison(err);
            f = st_parse(img, len, "in-memory image", err, ERRLEN);
            ck_assert_msg(f == NULL, "%s: st_parse accepted", what);
            err_check(err, what);
            ck_assert_has(err, "in-memory image", what);
            ck_assert_has(err, phrase, what);
            /* And as a one-file checkpoint. */
            err_poison(err);
            st_checkpoint *c = st_checkpoint_open(path, err, ERRLEN);
            ck_assert_msg(c == NULL, "%s: st_checkpoint_open accepted", what);
            err_check(err, what);
            ck_assert_has(err, path, what);
        } else if (strcmp(kind, "index") == 0) {
            per_kind[1]++;
            err_poison(err);
            long n = st_index_validate((const char *)img, len, path, err, ERRLEN);
            ck_assert_msg(n == -1, "%s: accepted (%ld entries)", what, n);
            err_check(err, what);
            ck_assert_has(err, path, what);
            ck_assert_has(err, phrase, what);
            if (strcmp(tensor, "-") != 0) {
                char q[256];
                snprintf(q, sizeof q, "'%s'", tensor);
                if (strstr(err, q) == NULL)
                    snprintf(q, sizeof q, "\"%s\"", tensor);
                ck_assert_has(err, q, what);
            }
            err_poison(err);
            st_checkpoint *c = st_checkpoint_open(path, err, ERRLEN);
            ck_assert_msg(c == NULL, "%s: st_checkpoint_open accepted", what);
            err_check(err, what);
            ck_assert_has(err, path, what);
            ck_assert_has(err, phrase, what);
        } else if (strcmp(kind, "npy") == 0) {
            per_kind[2]++;
            npy_array a;
            memset(&a, 0x5a, sizeof a);
            err_poison(err);
            ck_assert_msg(tensor_file_read(path, &a, err, ERRLEN) == -1, "%s: accepted", what);
            ck_assert_msg(a.data == NULL && a.nbytes == 0, "%s: output not cleared", what);
            err_check(err, what);
            ck_assert_has(err, path, what);
            ck_assert_has(err, phrase, what);
            memset(&a, 0x5a, sizeof a);
            err_poison(err);
            ck_assert_msg(npy_parse(img, len, "in-memory image", &a, err, ERRLEN) == -1,
                          "%s: npy_parse accepted", what);
            ck_assert_msg(a.data == NULL, "%s: output not cleared", what);
            err_check(err, what);
            ck_assert_has(err, phrase, what);
        } else {
            ck_abort_msg("%s: unknown kind in MANIFEST", what);
        }
        free(img);
        free(path);
    }
    /* Every file of the directory is in the manifest, and there are many. */
    ck_assert_uint_eq(dir_entries(dir), m.rows + 1);
    ck_assert_uint_ge(per_kind[0], 30);
    ck_assert_uint_ge(per_kind[1], 10);
    ck_assert_uint_ge(per_kind[2], 20);
    manifest_free(&m);
    free(mpath);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The valid files                                                     */
/* ------------------------------------------------------------------ */

START_TEST(test_valid_corpus)
{
    char *dir = path_join(data_dir(), "valid");
    char *mpath = path_join(dir, "MANIFEST");
    manifest m;
    manifest_load(&m, mpath, 6);
    char err[ERRLEN], what[512];
    size_t checked = 0;
    for (size_t r = 0; r < m.rows;) {
        const char *file = mf(&m, r, 0), *kind = mf(&m, r, 1);
        size_t end = r;
        while (end < m.rows && strcmp(mf(&m, end, 0), file) == 0)
            end++;
        size_t nt = strcmp(mf(&m, r, 2), "-") == 0 && strcmp(kind, "npy") != 0 ? 0 : end - r;
        char *path = path_join(dir, file);
        err_poison(err);
        if (strcmp(kind, "st") == 0) {
            st_file *f = st_open(path, err, ERRLEN);
            ck_assert_msg(f != NULL, "%s: %s", path, err);
            ck_assert_uint_eq(st_count(f), nt);
            ck_assert_ptr_null(st_at(f, nt));
            ck_assert_ptr_null(st_find(f, "no such tensor"));
            for (size_t i = 0; i < nt; i++) {
                const char *name = mf(&m, r + i, 2);
                const st_tensor *t = st_find(f, name);
                snprintf(what, sizeof what, "%s: %s", path, name);
                ck_assert_msg(t != NULL, "%s: not found", what);
                ck_assert_msg(st_at(f, i) == t, "%s: not in header order", what);
                check_tensor(what, t->dtype, t->ndim, t->shape, t->data, t->nbytes,
                             mf(&m, r + i, 3), mf(&m, r + i, 4), mf(&m, r + i, 5));
                checked++;
            }
            if (strcmp(file, "single_f32.safetensors") == 0) {
                ck_assert_str_eq(st_metadata(f, "format"), "pt");
                ck_assert_uint_eq(st_metadata_count(f), 1);
                ck_assert_str_eq(st_metadata_key(f, 0), "format");
                ck_assert_ptr_null(st_metadata(f, "absent"));
            }
            ck_assert_str_eq(st_display_name(f), path);
            st_close(f);
        } else if (strcmp(kind, "checkpoint") == 0) {
            st_checkpoint *c = st_checkpoint_open(path, err, ERRLEN);
            ck_assert_msg(c != NULL, "%s: %s", path, err);
            ck_assert_uint_eq(st_checkpoint_count(c), nt);
            ck_assert_ptr_null(st_checkpoint_find(c, "no such tensor"));
            for (size_t i = 0; i < nt; i++) {
                const char *name = mf(&m, r + i, 2);
                const st_tensor *t = st_checkpoint_find(c, name);
                snprintf(what, sizeof what, "%s: %s", path, name);
                ck_assert_msg(t != NULL, "%s: not found", what);
                ck_assert_msg(st_checkpoint_at(c, i) == t, "%s: not in index order", what);
                check_tensor(what, t->dtype, t->ndim, t->shape, t->data, t->nbytes,
                             mf(&m, r + i, 3), mf(&m, r + i, 4), mf(&m, r + i, 5));
                checked++;
            }
            st_checkpoint_close(c);
            /* The index file itself also opens the checkpoint. */
            char *ipath = path_join(path, "model.safetensors.index.json");
            c = st_checkpoint_open(ipath, err, ERRLEN);
            ck_assert_msg(c != NULL, "%s: %s", ipath, err);
            ck_assert_uint_eq(st_checkpoint_count(c), nt);
            st_checkpoint_close(c);
            size_t len;
            unsigned char *text = slurp(ipath, &len);
            ck_assert_int_eq(st_index_validate((const char *)text, len, ipath, err, ERRLEN),
                             (long)nt);
            free(text);
            free(ipath);
        } else {
            ck_assert_str_eq(kind, "npy");
            npy_array a;
            int rc = tensor_file_read(path, &a, err, ERRLEN);
            ck_assert_msg(rc == 0, "%s: %s", path, err);
            check_tensor(path, a.dtype, a.ndim, a.shape, a.data, a.nbytes, mf(&m, r, 3),
                         mf(&m, r, 4), mf(&m, r, 5));
            npy_array_free(&a);
            ck_assert_ptr_null(a.data);
            checked++;
        }
        free(path);
        r = end;
    }
    ck_assert_uint_ge(checked, 25);
    manifest_free(&m);
    free(mpath);
    free(dir);
}
END_TEST

/* The writers reproduce corpus files byte for byte (the corpus follows the
 * reference implementations' layouts). */
START_TEST(test_writers_exact)
{
    char *tmp = make_tmpdir();
    char err[ERRLEN];
    char *vdir = path_join(data_dir(), "valid");

    /* single_f32.safetensors: metadata {"format": "pt"}, "weight" F32 [2,3]. */
    char *ref = path_join(vdir, "single_f32.safetensors");
    size_t rlen, olen;
    unsigned char *want = slurp(ref, &rlen);
    ck_assert_ptr_nonnull(want);
    st_file *f = st_open(ref, err, ERRLEN);
    ck_assert_msg(f != NULL, "%s", err);
    const char *k[] = {"format"}, *v[] = {"pt"};
    char *out = path_join(tmp, "w.safetensors");
    ck_assert_msg(st_write(out, st_at(f, 0), 1, k, v, 1, err, ERRLEN) == 0, "%s", err);
    unsigned char *got = slurp(out, &olen);
    ck_assert_uint_eq(olen, rlen);
    ck_assert_msg(memcmp(got, want, rlen) == 0, "st_write output differs from %s", ref);
    st_close(f);
    free(got);
    free(want);
    free(out);
    free(ref);

    /* f4_2x3.npy. */
    ref = path_join(vdir, "f4_2x3.npy");
    want = slurp(ref, &rlen);
    ck_assert_ptr_nonnull(want);
    npy_array a;
    ck_assert_msg(tensor_file_read(ref, &a, err, ERRLEN) == 0, "%s", err);
    out = path_join(tmp, "w.npy");
    ck_assert_msg(tensor_file_write(out, &a, err, ERRLEN) == 0, "%s", err);
    got = slurp(out, &olen);
    ck_assert_uint_eq(olen, rlen);
    ck_assert_msg(memcmp(got, want, rlen) == 0, "tensor_file_write output differs from %s", ref);
    npy_array_free(&a);
    free(got);
    free(want);
    free(out);
    free(ref);
    free(vdir);
    remove_tmpdir(tmp);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Round trips                                                         */
/* ------------------------------------------------------------------ */

static void random_bytes(cf_rng *r, void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)cf_rng_next(r);
}

/* A random shape: 0..max_ndim dimensions of 0..7 (a zero now and then). */
static void random_shape(cf_rng *r, int max_ndim, int *ndim, int64_t *shape)
{
    *ndim = (int)cf_rng_range(r, 0, max_ndim);
    for (int d = 0; d < ST_MAX_DIMS; d++)
        shape[d] = d < *ndim ? cf_rng_range(r, cf_rng_range(r, 0, 9) == 0 ? 0 : 1, 7) : 0;
}

static void roundtrip_tensor_files(const char *test, const char *ext, const st_dtype *types,
                                   size_t ntypes)
{
    cf_rng r = tu_rng(test);
    char *tmp = make_tmpdir();
    char err[ERRLEN];
    char *path = path_join(tmp, ext);
    for (size_t ti = 0; ti < ntypes; ti++)
        for (int rep = 0; rep < 12; rep++) {
            npy_array a;
            memset(&a, 0, sizeof a);
            a.dtype = types[ti];
            random_shape(&r, rep == 0 ? 0 : rep < 4 ? 1 : 4, &a.ndim, a.shape);
            ck_assert_int_eq(st_nbytes(a.dtype, a.ndim, a.shape, &a.nbytes), 0);
            a.data = malloc(a.nbytes + 1);
            random_bytes(&r, a.data, a.nbytes);
            ck_assert_msg(tensor_file_write(path, &a, err, ERRLEN) == 0, "%s", err);
            npy_array b;
            memset(&b, 0x5a, sizeof b);
            ck_assert_msg(tensor_file_read(path, &b, err, ERRLEN) == 0, "%s", err);
            ck_assert_int_eq(b.dtype, a.dtype);
            ck_assert_int_eq(b.ndim, a.ndim);
            ck_assert_msg(memcmp(b.shape, a.shape, sizeof a.shape) == 0,
                          "%s %s: shape differs (replay with SMM_TEST_SEED=0x%016llx)", ext,
                          st_dtype_name(a.dtype), (unsigned long long)tu_seed);
            ck_assert_uint_eq(b.nbytes, a.nbytes);
            ck_assert_msg(a.nbytes == 0 || memcmp(b.data, a.data, a.nbytes) == 0,
                          "%s %s: data differs (replay with SMM_TEST_SEED=0x%016llx)", ext,
                          st_dtype_name(a.dtype), (unsigned long long)tu_seed);
            struct stat sb;
            ck_assert_int_eq(stat(path, &sb), 0);
            size_t header = (size_t)sb.st_size - a.nbytes;
            if (strcmp(ext, "t.npy") == 0)
                ck_assert_uint_eq(header % 64, 0);
            else
                ck_assert_uint_eq(header % 8, 0);
            npy_array_free(&a);
            npy_array_free(&b);
        }
    ck_assert_uint_eq(dir_entries(tmp), 1);     /* no temporary left */
    free(path);
    remove_tmpdir(tmp);
}

START_TEST(test_npy_roundtrip)
{
    static const st_dtype t[] = {ST_F32, ST_F16, ST_I8, ST_I32};
    roundtrip_tensor_files("npy_roundtrip", "t.npy", t, 4);
}
END_TEST

START_TEST(test_single_safetensors_roundtrip)
{
    static const st_dtype t[] = {ST_F32, ST_F16, ST_BF16, ST_I8, ST_I32};
    roundtrip_tensor_files("single_safetensors_roundtrip", "t.safetensors", t, 5);
}
END_TEST

START_TEST(test_safetensors_roundtrip)
{
    cf_rng r = tu_rng("safetensors_roundtrip");
    char *tmp = make_tmpdir();
    char *path = path_join(tmp, "m.safetensors");
    char err[ERRLEN];
    for (int rep = 0; rep < 20; rep++) {
        size_t n = (size_t)cf_rng_range(&r, rep == 0 ? 0 : 1, 24);
        st_tensor t[24];
        char names[24][32];
        for (size_t i = 0; i < n; i++) {
            memset(&t[i], 0, sizeof t[i]);
            /* every dtype at least once when n allows */
            t[i].dtype = (st_dtype)(i < ST_DTYPE_COUNT ? (int)i
                                                       : (int)cf_rng_range(&r, 0, ST_DTYPE_COUNT - 1));
            snprintf(names[i], sizeof names[i], "layers.%zu.%s", (n - i) * 7 % 31,
                     st_dtype_name(t[i].dtype));
            t[i].name = names[i];
            random_shape(&r, 4, &t[i].ndim, t[i].shape);
            ck_assert_int_eq(st_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &t[i].nbytes), 0);
            void *p = malloc(t[i].nbytes + 1);
            random_bytes(&r, p, t[i].nbytes);
            t[i].data = p;
        }
        const char *mk[] = {"format", "note"}, *mv[] = {"pt", "r\xc3\xa9sum\xc3\xa9 \"quoted\""};
        size_t nm = (size_t)(rep % 3);
        ck_assert_msg(st_write(path, t, n, mk, mv, nm, err, ERRLEN) == 0, "%s", err);
        st_file *f = st_open(path, err, ERRLEN);
        ck_assert_msg(f != NULL, "%s", err);
        ck_assert_uint_eq(st_count(f), n);
        ck_assert_uint_eq(st_metadata_count(f), nm);
        for (size_t i = 0; i < nm; i++)
            ck_assert_str_eq(st_metadata(f, mk[i]), mv[i]);
        size_t len;
        unsigned char *img = slurp(path, &len);
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--)
            h = h << 8 | img[i];
        ck_assert_uint_eq(h % 8, 0);
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            const st_tensor *g = st_at(f, i);
            ck_assert_str_eq(g->name, t[i].name);
            ck_assert_ptr_eq(st_find(f, t[i].name), g);
            ck_assert_int_eq(g->dtype, t[i].dtype);
            ck_assert_int_eq(g->ndim, t[i].ndim);
            ck_assert_msg(memcmp(g->shape, t[i].shape, sizeof g->shape) == 0, "shape differs");
            ck_assert_uint_eq(g->nbytes, t[i].nbytes);
            ck_assert_msg(g->nbytes == 0 || memcmp(g->data, t[i].data, g->nbytes) == 0,
                          "tensor %s: data differs (replay with SMM_TEST_SEED=0x%016llx)",
                          g->name, (unsigned long long)tu_seed);
            /* Aligned for its type (the mapping is page-aligned). */
            ck_assert_uint_eq((uintptr_t)g->data % st_dtype_size(g->dtype), 0);
            total += g->nbytes;
        }
        ck_assert_uint_eq(8 + h + total, len);      /* packed, no gaps */
        free(img);
        st_close(f);
        for (size_t i = 0; i < n; i++)
            free((void *)t[i].data);
    }
    ck_assert_uint_eq(dir_entries(tmp), 1);
    free(path);
    remove_tmpdir(tmp);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Writers refuse bad input and write nothing                          */
/* ------------------------------------------------------------------ */

START_TEST(test_write_rejects)
{
    char *tmp = make_tmpdir();
    char *path = path_join(tmp, "x.safetensors");
    char *npath = path_join(tmp, "x.npy");
    char err[ERRLEN];
    float v[6] = {1, 2, 3, 4, 5, 6};
    st_tensor good = {.name = (char *)"w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3},
                      .data = v, .nbytes = sizeof v};
    st_tensor two[2] = {good, good};
    st_tensor t;

    /* Each bad call leaves no file behind. */
    err_poison(err);
    ck_assert_int_eq(st_write(path, two, 2, NULL, NULL, 0, err, ERRLEN), -1);
    err_check(err, "duplicate");
    ck_assert_has(err, "'w'", "duplicate");
    ck_assert_has(err, path, "duplicate");
    t = good;
    t.nbytes = 20;
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    ck_assert_has(err, "'w'", "nbytes");
    t = good;
    t.dtype = ST_DTYPE_COUNT;
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    t = good;
    t.shape[0] = -1;
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    t = good;
    t.ndim = ST_MAX_DIMS + 1;
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    t = good;
    t.name = (char *)"__metadata__";
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    t = good;
    t.name = (char *)"bad\xff";
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    t = good;
    t.data = NULL;
    ck_assert_int_eq(st_write(path, &t, 1, NULL, NULL, 0, err, ERRLEN), -1);
    const char *k2[] = {"a", "a"}, *v2[] = {"1", "2"};
    ck_assert_int_eq(st_write(path, &good, 1, k2, v2, 2, err, ERRLEN), -1);
    ck_assert_int_eq(file_exists(path), 0);

    npy_array a = {.dtype = ST_BF16, .ndim = 1, .shape = {3}, .data = v, .nbytes = 6};
    err_poison(err);
    ck_assert_int_eq(tensor_file_write(npath, &a, err, ERRLEN), -1);
    err_check(err, "bf16 npy");
    ck_assert_has(err, npath, "bf16 npy");
    a.dtype = ST_F32;   /* nbytes now wrong */
    ck_assert_int_eq(tensor_file_write(npath, &a, err, ERRLEN), -1);
    a.dtype = ST_U8;
    a.nbytes = 3;
    ck_assert_int_eq(tensor_file_write(npath, &a, err, ERRLEN), -1);
    ck_assert_int_eq(file_exists(npath), 0);
    ck_assert_uint_eq(dir_entries(tmp), 0);

    /* A failed write leaves an existing file as it was. */
    ck_assert_msg(st_write(path, &good, 1, NULL, NULL, 0, err, ERRLEN) == 0, "%s", err);
    size_t l1, l2;
    unsigned char *before = slurp(path, &l1);
    ck_assert_int_eq(st_write(path, two, 2, NULL, NULL, 0, err, ERRLEN), -1);
    unsigned char *after = slurp(path, &l2);
    ck_assert_uint_eq(l1, l2);
    ck_assert_int_eq(memcmp(before, after, l1), 0);
    ck_assert_uint_eq(dir_entries(tmp), 1);
    free(before);
    free(after);

    /* A directory that does not exist: an error naming the file. */
    char *nowhere = path_join(tmp, "no/such/dir.safetensors");
    err_poison(err);
    ck_assert_int_eq(st_write(nowhere, &good, 1, NULL, NULL, 0, err, ERRLEN), -1);
    err_check(err, "missing dir");
    ck_assert_has(err, nowhere, "missing dir");
    free(nowhere);

    free(path);
    free(npath);
    remove_tmpdir(tmp);
}
END_TEST

/* What the file writer (`scaledmm run --output`) may be pointed at
 * besides a new file: an existing file keeps its mode; a link stays a link
 * and the file it names gets the data (a dangling link: that file is
 * created; a loop of links is an error); a device is written in place,
 * never replaced; a device that fails the write gives an error naming it;
 * no temporary file is left behind. (`quantize` moves its files into the
 * output directory instead: check_checkpoint.) */
START_TEST(test_write_targets)
{
    char *tmp = make_tmpdir();
    char *file = path_join(tmp, "y.npy"), *link = path_join(tmp, "link.npy");
    char *dnull = path_join(tmp, "null.npy"), *dfull = path_join(tmp, "full.npy");
    char err[ERRLEN];
    float v[6] = {1, 2, 3, 4, 5, 6};
    npy_array a = {.dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = v, .nbytes = sizeof v};
    struct stat sb;
    size_t entries = 2, l;

    write_text(file, "old");
    ck_assert_int_eq(chmod(file, 0600), 0);
    ck_assert_msg(tensor_file_write(file, &a, err, ERRLEN) == 0, "%s", err);
    ck_assert_int_eq(stat(file, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0600);

    ck_assert_int_eq(symlink("y.npy", link), 0);
    v[0] = 9;
    ck_assert_msg(tensor_file_write(link, &a, err, ERRLEN) == 0, "%s", err);
    ck_assert_int_eq(lstat(link, &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
    unsigned char *b = slurp(file, &l);
    ck_assert_uint_ge(l, sizeof v);
    ck_assert_int_eq(memcmp(b + l - sizeof v, v, sizeof v), 0);
    free(b);
    ck_assert_int_eq(stat(file, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0600);

    if (stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode)) {
        ck_assert_int_eq(symlink("/dev/null", dnull), 0);
        entries++;
        ck_assert_msg(tensor_file_write(dnull, &a, err, ERRLEN) == 0, "%s", err);
        ck_assert_int_eq(lstat(dnull, &sb), 0);
        ck_assert(S_ISLNK(sb.st_mode));
        ck_assert_int_eq(stat("/dev/null", &sb), 0);
        ck_assert(S_ISCHR(sb.st_mode));
    }
    if (stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode)) {
        ck_assert_int_eq(symlink("/dev/full", dfull), 0);
        entries++;
        err_poison(err);
        ck_assert_int_eq(tensor_file_write(dfull, &a, err, ERRLEN), -1);
        err_check(err, "/dev/full");
        ck_assert_has(err, "/dev/full", "/dev/full");
        ck_assert_int_eq(stat("/dev/full", &sb), 0);
        ck_assert(S_ISCHR(sb.st_mode));
    }
    /* A dangling link (relative, through a second link, and absolute):
     * its target is created, the links stay links. */
    {
        char *dang = path_join(tmp, "dang.npy"), *dang2 = path_join(tmp, "dang2.npy");
        char *made = path_join(tmp, "made.npy"), *made2 = path_join(tmp, "made2.npy");
        char *loop = path_join(tmp, "loop.npy");
        ck_assert_int_eq(symlink("made.npy", dang), 0);
        ck_assert_int_eq(symlink("dang.npy", dang2), 0);
        ck_assert_int_eq(symlink(made2, loop), 0); /* absolute */
        entries += 3;
        v[0] = 11;
        ck_assert_msg(tensor_file_write(dang2, &a, err, ERRLEN) == 0, "%s", err);
        entries++;
        ck_assert_int_eq(lstat(dang, &sb), 0);
        ck_assert(S_ISLNK(sb.st_mode));
        ck_assert_int_eq(lstat(dang2, &sb), 0);
        ck_assert(S_ISLNK(sb.st_mode));
        ck_assert_int_eq(lstat(made, &sb), 0);
        ck_assert(S_ISREG(sb.st_mode));
        b = slurp(made, &l);
        ck_assert_uint_ge(l, sizeof v);
        ck_assert_int_eq(memcmp(b + l - sizeof v, v, sizeof v), 0);
        free(b);
        ck_assert_msg(tensor_file_write(loop, &a, err, ERRLEN) == 0, "%s", err);
        entries++;
        ck_assert_int_eq(lstat(made2, &sb), 0);
        ck_assert(S_ISREG(sb.st_mode));
        ck_assert_int_eq(lstat(loop, &sb), 0);
        ck_assert(S_ISLNK(sb.st_mode));
        /* a loop of links: an error, nothing created */
        ck_assert_int_eq(unlink(loop), 0);
        ck_assert_int_eq(symlink("loop.npy", loop), 0);
        err_poison(err);
        ck_assert_int_eq(tensor_file_write(loop, &a, err, ERRLEN), -1);
        err_check(err, "a loop of links");
        ck_assert_has(err, "loop.npy", "a loop of links");
        free(dang);
        free(dang2);
        free(made);
        free(made2);
        free(loop);
    }
    ck_assert_uint_eq(dir_entries(tmp), entries);

    free(file);
    free(link);
    free(dnull);
    free(dfull);
    remove_tmpdir(tmp);
}
END_TEST


/* ------------------------------------------------------------------ */
/* Sharded checkpoints                                                 */
/* ------------------------------------------------------------------ */

typedef struct ckpt {
    char *dir;
    float a[4];
    int8_t b[6];
    int32_t c[3];
} ckpt;

static void ckpt_write_shard(ckpt *k, const char *file, const st_tensor *t, size_t n)
{
    char err[ERRLEN];
    char *p = path_join(k->dir, file);
    ck_assert_msg(st_write(p, t, n, NULL, NULL, 0, err, ERRLEN) == 0, "%s", err);
    free(p);
}

/* Two shards: s1 = {a, b}, s2 = {c}; and the index for them. */
static void ckpt_build(ckpt *k, cf_rng *r)
{
    k->dir = make_tmpdir();
    random_bytes(r, k->a, sizeof k->a);
    random_bytes(r, k->b, sizeof k->b);
    random_bytes(r, k->c, sizeof k->c);
    st_tensor s1[2] = {
        {.name = (char *)"a", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = k->a,
         .nbytes = sizeof k->a},
        {.name = (char *)"b", .dtype = ST_I8, .ndim = 2, .shape = {2, 3}, .data = k->b,
         .nbytes = sizeof k->b},
    };
    st_tensor s2 = {.name = (char *)"c", .dtype = ST_I32, .ndim = 1, .shape = {3},
                    .data = k->c, .nbytes = sizeof k->c};
    ckpt_write_shard(k, "s1.safetensors", s1, 2);
    ckpt_write_shard(k, "s2.safetensors", &s2, 1);
}

static void ckpt_index(ckpt *k, const char *text)
{
    char *p = path_join(k->dir, "model.safetensors.index.json");
    write_text(p, text);
    free(p);
}

static const char *good_index =
    "{\"metadata\": {\"total_size\": 34}, \"weight_map\": "
    "{\"c\": \"s2.safetensors\", \"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\"}}\n";

/* Opening must fail with a message holding both needles. */
static void ckpt_expect_fail(ckpt *k, const char *n1, const char *n2, const char *what)
{
    char err[ERRLEN];
    err_poison(err);
    st_checkpoint *c = st_checkpoint_open(k->dir, err, ERRLEN);
    ck_assert_msg(c == NULL, "%s: accepted", what);
    err_check(err, what);
    ck_assert_has(err, n1, what);
    if (n2)
        ck_assert_has(err, n2, what);
}

START_TEST(test_checkpoint_sharded)
{
    cf_rng r = tu_rng("checkpoint_sharded");
    ckpt k;
    char err[ERRLEN];
    ckpt_build(&k, &r);
    ckpt_index(&k, good_index);
    st_checkpoint *c = st_checkpoint_open(k.dir, err, ERRLEN);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_uint_eq(st_checkpoint_count(c), 3);
    ck_assert_str_eq(st_checkpoint_at(c, 0)->name, "c");     /* index order */
    ck_assert_str_eq(st_checkpoint_at(c, 1)->name, "a");
    ck_assert_str_eq(st_checkpoint_at(c, 2)->name, "b");
    ck_assert_ptr_null(st_checkpoint_at(c, 3));
    const st_tensor *t = st_checkpoint_find(c, "a");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(memcmp(t->data, k.a, sizeof k.a), 0);
    t = st_checkpoint_find(c, "b");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ST_I8);
    ck_assert_int_eq(memcmp(t->data, k.b, sizeof k.b), 0);
    t = st_checkpoint_find(c, "c");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(memcmp(t->data, k.c, sizeof k.c), 0);
    ck_assert_ptr_null(st_checkpoint_find(c, "d"));
    st_checkpoint_close(c);

    /* A tensor the index lists but its shard lacks. */
    ckpt_index(&k, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                   "\"c\": \"s2.safetensors\", \"ghost\": \"s2.safetensors\"}}");
    ckpt_expect_fail(&k, "'ghost'", "s2.safetensors", "missing tensor");
    /* A tensor mapped to the wrong shard. */
    ckpt_index(&k, "{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s1.safetensors\", "
                   "\"c\": \"s2.safetensors\"}}");
    ckpt_expect_fail(&k, "'a'", "model.safetensors.index.json", "wrong shard");
    /* A tensor of a shard that the index does not list. */
    ckpt_index(&k, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}");
    ckpt_expect_fail(&k, "'b'", "does not list", "unlisted tensor");
    /* A bad index. */
    ckpt_index(&k, "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
    ckpt_expect_fail(&k, "not a plain file name", "model.safetensors.index.json", "bad index");
    ckpt_index(&k, "{\"weight_map\": {\"a\": \"s1.safetensors\",");
    ckpt_expect_fail(&k, "not valid JSON", "model.safetensors.index.json", "truncated index");
    /* A missing shard. */
    ckpt_index(&k, good_index);
    char *s2 = path_join(k.dir, "s2.safetensors"), *s2x = path_join(k.dir, "moved");
    ck_assert_int_eq(rename(s2, s2x), 0);
    ckpt_expect_fail(&k, "s2.safetensors", "'c'", "missing shard");
    /* A corrupt shard: its own message, inside one naming the index. */
    write_text(s2, "garbage");
    ckpt_expect_fail(&k, "s2.safetensors", "too short", "corrupt shard");
    ck_assert_int_eq(rename(s2x, s2), 0);
    c = st_checkpoint_open(k.dir, err, ERRLEN);
    ck_assert_msg(c != NULL, "%s", err);
    st_checkpoint_close(c);
    free(s2);
    free(s2x);
    remove_tmpdir(k.dir);
}
END_TEST

START_TEST(test_checkpoint_single)
{
    cf_rng r = tu_rng("checkpoint_single");
    ckpt k;
    char err[ERRLEN];
    k.dir = make_tmpdir();
    ckpt_expect_fail(&k, k.dir, "model.safetensors", "empty directory");
    random_bytes(&r, k.a, sizeof k.a);
    st_tensor t = {.name = (char *)"a", .dtype = ST_F32, .ndim = 2, .shape = {2, 2},
                   .data = k.a, .nbytes = sizeof k.a};
    ckpt_write_shard(&k, "model.safetensors", &t, 1);
    st_checkpoint *c = st_checkpoint_open(k.dir, err, ERRLEN);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_uint_eq(st_checkpoint_count(c), 1);
    ck_assert_int_eq(memcmp(st_checkpoint_find(c, "a")->data, k.a, sizeof k.a), 0);
    st_checkpoint_close(c);
    char *missing = path_join(k.dir, "absent");
    err_poison(err);
    ck_assert_ptr_null(st_checkpoint_open(missing, err, ERRLEN));
    err_check(err, "absent");
    ck_assert_has(err, missing, "absent");
    free(missing);
    remove_tmpdir(k.dir);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Corrupted images                                                    */
/* ------------------------------------------------------------------ */

/* Whatever the parser accepts lies inside the image. */
static void check_inside(const st_file *f, const unsigned char *img, size_t len)
{
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const unsigned char *p = t->data;
        ck_assert_msg(p >= img && t->nbytes <= len && p - img <= (ptrdiff_t)(len - t->nbytes),
                      "tensor outside the image");
    }
}

START_TEST(test_corrupted_images)
{
    cf_rng r = tu_rng("corrupted_images");
    static const char *seeds[] = {"mixed.safetensors", "single_f32.safetensors",
                                  "f4_2x3.npy", "i4_2x2x2.npy"};
    char *vdir = path_join(data_dir(), "valid");
    char err[ERRLEN];
    long accepted = 0, rejected = 0;
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        char *p = path_join(vdir, seeds[s]);
        size_t len;
        unsigned char *orig = slurp(p, &len);
        ck_assert_msg(orig != NULL, "cannot read %s", p);
        int is_npy = strstr(seeds[s], ".npy") != NULL;
        for (int it = 0; it < 3000; it++) {
            /* Truncate, or flip / overwrite a few bytes, or both. */
            size_t n = len;
            int op = (int)cf_rng_range(&r, 0, 3);
            if (op == 0)
                n = (size_t)cf_rng_range(&r, 0, (int64_t)len);
            unsigned char *img = malloc(n ? n : 1);
            memcpy(img, orig, n);
            if (op != 0 && n > 0) {
                int flips = (int)cf_rng_range(&r, 1, 4);
                for (int j = 0; j < flips; j++) {
                    size_t at = (size_t)cf_rng_range(&r, 0, (int64_t)n - 1);
                    /* mostly in the header, where the parsing is */
                    if (cf_rng_range(&r, 0, 3) != 0 && n > 200)
                        at = (size_t)cf_rng_range(&r, 0, 199);
                    static const char tokens[] = "0123456789-,:[]{}\"' .e()\n";
                    img[at] = cf_rng_range(&r, 0, 1)
                                  ? (unsigned char)tokens[cf_rng_range(&r, 0, sizeof tokens - 2)]
                                  : (unsigned char)cf_rng_next(&r);
                }
            }
            if (is_npy) {
                npy_array a;
                if (npy_parse(img, n, "corrupt", &a, err, ERRLEN) == 0) {
                    size_t nb;
                    ck_assert_int_eq(st_nbytes(a.dtype, a.ndim, a.shape, &nb), 0);
                    ck_assert_uint_eq(nb, a.nbytes);
                    ck_assert_uint_le(a.nbytes, n);
                    npy_array_free(&a);
                    accepted++;
                } else {
                    ck_assert_has(err, "corrupt", "npy");
                    rejected++;
                }
            } else {
                st_file *f = st_parse(img, n, "corrupt", err, ERRLEN);
                if (f) {
                    check_inside(f, img, n);
                    st_close(f);
                    accepted++;
                } else {
                    ck_assert_has(err, "corrupt", "safetensors");
                    rejected++;
                }
            }
            free(img);
        }
        free(orig);
        free(p);
    }
    ck_assert_int_gt(rejected, 1000);
    free(vdir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("formats");
    TCase *tc = tu_tcase(s, "corpus", 120);
    tcase_add_test(tc, test_malformed_corpus);
    tcase_add_test(tc, test_valid_corpus);
    tcase_add_test(tc, test_writers_exact);
    tc = tu_tcase(s, "roundtrip", 120);
    tcase_add_test(tc, test_npy_roundtrip);
    tcase_add_test(tc, test_single_safetensors_roundtrip);
    tcase_add_test(tc, test_safetensors_roundtrip);
    tcase_add_test(tc, test_write_rejects);
    tcase_add_test(tc, test_write_targets);
    tc = tu_tcase(s, "checkpoint", 120);
    tcase_add_test(tc, test_checkpoint_sharded);
    tcase_add_test(tc, test_checkpoint_single);
    tc = tu_tcase(s, "robustness", 300);
    tcase_add_test(tc, test_corrupted_images);
    return tu_main(s, "check_formats");
}
