/*
 * output.h - a results table written as aligned text, CSV or JSON.
 *
 * A table has fixed columns (name, type, decimals) and rows of cells; any
 * cell may be empty ("-" in text, an empty field in CSV, null in JSON).
 * Metadata (key/value pairs: seed, backend, notes) goes with it: in text as
 * "key: value" lines before the table, in JSON as the "meta" object, in CSV
 * as "# key: value" lines on a separate stream (stderr), so that stdout
 * stays plain CSV.
 */
#ifndef SMM_TOOL_OUTPUT_H
#define SMM_TOOL_OUTPUT_H

#include <stdint.h>
#include <stdio.h>

typedef enum { OUT_TABLE, OUT_CSV, OUT_JSON } out_format;

typedef enum { COL_STR, COL_INT, COL_REAL } out_col_type;

typedef struct out_column {
    const char *name;   /* header; JSON key; CSV header */
    out_col_type type;
    int decimals;       /* COL_REAL: digits after the point in text and CSV
                           (JSON keeps full precision) */
} out_column;

typedef struct out_table out_table;

/* Parses "table", "csv" or "json". Returns 0, or -1 (*fmt untouched). */
int out_parse_format(const char *s, out_format *fmt);

/* A table with the given columns (the array must outlive the table).
 * NULL when out of memory. */
out_table *out_table_new(const out_column *cols, int ncols);
void out_table_free(out_table *t);

/* Appends an empty row; returns its index, or -1 when out of memory. */
int out_add_row(out_table *t);

/* Set a cell of an existing row; the type must match the column's
 * (a mismatch aborts: it is a programming error). Strings are copied. */
void out_set_str(out_table *t, int row, int col, const char *s);
void out_set_int(out_table *t, int row, int col, int64_t v);
void out_set_real(out_table *t, int row, int col, double v);

/* Metadata, kept in insertion order; strings are copied. */
void out_meta_str(out_table *t, const char *key, const char *value);
void out_meta_int(out_table *t, const char *key, int64_t value);
void out_meta_real(out_table *t, const char *key, double value);
/* A boolean (JSON true/false; "true"/"false" in text and CSV). */
void out_meta_bool(out_table *t, const char *key, int value);
/* A list of n strings (a JSON array; in text and CSV joined by "; "). */
void out_meta_strs(out_table *t, const char *key, const char *const *values, int n);

/* Leaves column col out of the text format (hide != 0) or puts it back;
 * CSV and JSON always have every column. */
void out_hide_column(out_table *t, int col, int hide);

/* A line the text format prints before the metadata and again after the
 * table (a warning that must not be missed); the other formats leave it
 * out (their metadata carries the same facts). Returns 0, or -1 when out
 * of memory. */
int out_banner(out_table *t, const char *line);

/*
 * Writes the table to `out` in `fmt`. `notes` receives the metadata in CSV
 * format (may be NULL: metadata dropped). Returns 0, or -1 on a write or
 * JSON-encoding error.
 */
int out_write(const out_table *t, out_format fmt, FILE *out, FILE *notes);

#endif
