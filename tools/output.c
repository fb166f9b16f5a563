/*
 * output.c - the results table and its text, CSV and JSON writers
 * (see output.h). Cells and metadata are held as jansson values, so the
 * JSON writer is jansson's encoder and the others format the same values.
 */
#include "output.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct out_table {
    const out_column *cols;
    int ncols;
    json_t *rows;   /* array of arrays of ncols values (json null = empty) */
    json_t *meta;   /* object, insertion order kept (jansson >= 2.8) */
    char **banner;  /* text format: lines before the metadata and after
                       the table */
    unsigned char *hidden;  /* ncols flags: left out of the text format */
    int nbanner;
};

int out_parse_format(const char *s, out_format *fmt)
{
    if (!s)
        return -1;
    if (strcmp(s, "table") == 0)
        *fmt = OUT_TABLE;
    else if (strcmp(s, "csv") == 0)
        *fmt = OUT_CSV;
    else if (strcmp(s, "json") == 0)
        *fmt = OUT_JSON;
    else
        return -1;
    return 0;
}

out_table *out_table_new(const out_column *cols, int ncols)
{
    out_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cols = cols;
    t->ncols = ncols;
    t->rows = json_array();
    t->meta = json_object();
    t->hidden = calloc((size_t)ncols, 1);
    if (!t->rows || !t->meta || !t->hidden) {
        out_table_free(t);
        return NULL;
    }
    return t;
}

void out_table_free(out_table *t)
{
    if (!t)
        return;
    json_decref(t->rows);
    json_decref(t->meta);
    while (t->nbanner > 0)
        free(t->banner[--t->nbanner]);
    free(t->banner);
    free(t->hidden);
    free(t);
}

int out_add_row(out_table *t)
{
    json_t *row = json_array();
    int i;
    if (!row)
        return -1;
    for (i = 0; i < t->ncols; i++)
        if (json_array_append_new(row, json_null()) != 0) {
            json_decref(row);
            return -1;
        }
    if (json_array_append_new(t->rows, row) != 0)
        return -1;
    return (int)json_array_size(t->rows) - 1;
}

static void set_cell(out_table *t, int row, int col, out_col_type type, json_t *v)
{
    json_t *r = json_array_get(t->rows, (size_t)row);
    if (!r || col < 0 || col >= t->ncols || t->cols[col].type != type) {
        fprintf(stderr, "scaledmm: internal error: bad cell (%d, %d)\n", row, col);
        abort();
    }
    /* v may be NULL (out of memory, or a non-finite real): leave the cell
     * empty rather than fail the whole report. */
    json_array_set_new(r, (size_t)col, v ? v : json_null());
}

void out_set_str(out_table *t, int row, int col, const char *s)
{
    set_cell(t, row, col, COL_STR, s ? json_string(s) : NULL);
}

void out_set_int(out_table *t, int row, int col, int64_t v)
{
    set_cell(t, row, col, COL_INT, json_integer((json_int_t)v));
}

void out_set_real(out_table *t, int row, int col, double v)
{
    set_cell(t, row, col, COL_REAL, isfinite(v) ? json_real(v) : NULL);
}

void out_meta_str(out_table *t, const char *key, const char *value)
{
    json_object_set_new(t->meta, key, json_string(value ? value : ""));
}

void out_meta_int(out_table *t, const char *key, int64_t value)
{
    json_object_set_new(t->meta, key, json_integer((json_int_t)value));
}

void out_meta_real(out_table *t, const char *key, double value)
{
    json_object_set_new(t->meta, key, isfinite(value) ? json_real(value) : json_null());
}

void out_meta_bool(out_table *t, const char *key, int value)
{
    json_object_set_new(t->meta, key, json_boolean(value));
}

void out_meta_strs(out_table *t, const char *key, const char *const *values, int n)
{
    json_t *a = json_array();
    int i;
    for (i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(values[i] ? values[i] : ""));
    if (a)
        json_object_set_new(t->meta, key, a);
}

void out_hide_column(out_table *t, int col, int hide)
{
    if (col >= 0 && col < t->ncols)
        t->hidden[col] = hide != 0;
}

int out_banner(out_table *t, const char *line)
{
    char **b = realloc(t->banner, (size_t)(t->nbanner + 1) * sizeof *b);
    if (!b)
        return -1;
    t->banner = b;
    if (!(b[t->nbanner] = strdup(line)))
        return -1;
    t->nbanner++;
    return 0;
}

/* Text of one value as the text and CSV writers print it ("" if empty;
 * booleans "true" or "false"; a list its items joined by "; "). */
static void format_value(const json_t *v, int decimals, char *buf, size_t size)
{
    if (json_is_array(v)) {
        size_t i, len = 0;
        buf[0] = '\0';
        for (i = 0; i < json_array_size(v) && len + 1 < size; i++) {
            snprintf(buf + len, size - len, "%s%s", i ? "; " : "",
                     json_is_string(json_array_get(v, i))
                         ? json_string_value(json_array_get(v, i)) : "");
            len = strlen(buf);
        }
    } else if (json_is_boolean(v))
        snprintf(buf, size, "%s", json_is_true(v) ? "true" : "false");
    else if (json_is_string(v))
        snprintf(buf, size, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, size, "%.*f", decimals, json_real_value(v));
    else
        buf[0] = '\0';
}

static int write_meta_lines(const out_table *t, FILE *f, const char *prefix)
{
    const char *key;
    json_t *v;
    char buf[1024];
    json_object_foreach(t->meta, key, v) {
        if (json_is_real(v))
            snprintf(buf, sizeof buf, "%g", json_real_value(v));
        else
            format_value(v, 0, buf, sizeof buf);
        fprintf(f, "%s%s: %s\n", prefix, key, buf);
    }
    return ferror(f) ? -1 : 0;
}

static int write_text(const out_table *t, FILE *f)
{
    size_t nrows = json_array_size(t->rows), r;
    int *width = calloc((size_t)t->ncols, sizeof *width);
    char buf[512];
    int c, first, last = -1;
    if (!width)
        return -1;
    for (c = 0; c < t->ncols; c++) {
        width[c] = (int)strlen(t->cols[c].name);
        if (!t->hidden[c])
            last = c;
    }
    for (r = 0; r < nrows; r++) {
        json_t *row = json_array_get(t->rows, r);
        for (c = 0; c < t->ncols; c++) {
            format_value(json_array_get(row, (size_t)c), t->cols[c].decimals, buf, sizeof buf);
            if (buf[0] == '\0')
                strcpy(buf, "-");
            if ((int)strlen(buf) > width[c])
                width[c] = (int)strlen(buf);
        }
    }
    for (c = 0; c < t->nbanner; c++)
        fprintf(f, "%s\n", t->banner[c]);
    if (t->nbanner > 0)
        fputc('\n', f);
    if (write_meta_lines(t, f, "") != 0) {
        free(width);
        return -1;
    }
    if (json_object_size(t->meta) > 0)
        fputc('\n', f);
    first = 1;
    for (c = 0; c < t->ncols; c++) {
        int left = t->cols[c].type == COL_STR;
        if (t->hidden[c])
            continue;
        fprintf(f, "%s%*s", first ? "" : "  ", left ? -width[c] : width[c], t->cols[c].name);
        first = 0;
    }
    fputc('\n', f);
    for (r = 0; r < nrows; r++) {
        json_t *row = json_array_get(t->rows, r);
        first = 1;
        for (c = 0; c < t->ncols; c++) {
            int left = t->cols[c].type == COL_STR;
            if (t->hidden[c])
                continue;
            format_value(json_array_get(row, (size_t)c), t->cols[c].decimals, buf, sizeof buf);
            if (buf[0] == '\0')
                strcpy(buf, "-");
            /* no trailing blanks on the last column */
            if (c == last && left)
                fprintf(f, "%s%s", first ? "" : "  ", buf);
            else
                fprintf(f, "%s%*s", first ? "" : "  ", left ? -width[c] : width[c], buf);
            first = 0;
        }
        fputc('\n', f);
    }
    if (t->nbanner > 0)
        fputc('\n', f);
    for (c = 0; c < t->nbanner; c++)
        fprintf(f, "%s\n", t->banner[c]);
    free(width);
    return ferror(f) ? -1 : 0;
}

/* RFC 4180 quoting, only where needed. */
static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static int write_csv(const out_table *t, FILE *f, FILE *notes)
{
    size_t nrows = json_array_size(t->rows), r;
    char buf[512];
    int c;
    if (notes && write_meta_lines(t, notes, "# ") != 0)
        return -1;
    for (c = 0; c < t->ncols; c++) {
        if (c)
            fputc(',', f);
        csv_field(f, t->cols[c].name);
    }
    fputc('\n', f);
    for (r = 0; r < nrows; r++) {
        json_t *row = json_array_get(t->rows, r);
        for (c = 0; c < t->ncols; c++) {
            const json_t *v = json_array_get(row, (size_t)c);
            if (c)
                fputc(',', f);
            /* CSV keeps more digits than the text table */
            if (json_is_real(v))
                snprintf(buf, sizeof buf, "%.6g", json_real_value(v));
            else
                format_value(v, t->cols[c].decimals, buf, sizeof buf);
            csv_field(f, buf);
        }
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

static int write_json(const out_table *t, FILE *f)
{
    json_t *doc = json_object(), *rows = json_array();
    size_t nrows = json_array_size(t->rows), r;
    int c, rc = -1;
    if (!doc || !rows)
        goto done;
    if (json_object_set(doc, "meta", t->meta) != 0)
        goto done;
    for (r = 0; r < nrows; r++) {
        json_t *row = json_array_get(t->rows, r), *obj = json_object();
        if (!obj)
            goto done;
        for (c = 0; c < t->ncols; c++)
            json_object_set(obj, t->cols[c].name, json_array_get(row, (size_t)c));
        if (json_array_append_new(rows, obj) != 0)
            goto done;
    }
    if (json_object_set(doc, "rows", rows) != 0)
        goto done;
    if (json_dumpf(doc, f, JSON_INDENT(2) | JSON_REAL_PRECISION(7)) != 0)
        goto done;
    fputc('\n', f);
    rc = ferror(f) ? -1 : 0;
done:
    json_decref(rows);
    json_decref(doc);
    return rc;
}

int out_write(const out_table *t, out_format fmt, FILE *out, FILE *notes)
{
    int rc;
    switch (fmt) {
    case OUT_TABLE: rc = write_text(t, out); break;
    case OUT_CSV:   rc = write_csv(t, out, notes); break;
    case OUT_JSON:  rc = write_json(t, out); break;
    default:        rc = -1; break;
    }
    if (fflush(out) != 0)
        rc = -1;
    return rc;
}
