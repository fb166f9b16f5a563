/*
 * cli.h - command-line helpers shared by the subcommands of `scaledmm`:
 * strict number parsing, option-error messages, progress on stderr.
 */
#ifndef SMM_TOOL_CLI_H
#define SMM_TOOL_CLI_H

#include <stdint.h>
#include <stdio.h>
#include "scaledmm.h"

/* Exit statuses of the tool (documented in doc/scaledmm.1). */
enum {
    EXIT_PASS = 0,   /* success; every check passed */
    EXIT_FAILED = 1, /* a mismatch, a failed library call, or a backend that
                        cannot run here */
    EXIT_USAGE = 2   /* bad command line */
};

/* Prints "scaledmm CMD: MESSAGE" and a hint to run `scaledmm CMD --help` on
 * stderr. cmd may be NULL (top level). Returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "scaledmm CMD: MESSAGE" on stderr. Returns EXIT_FAILED. */
int cli_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports a getopt_long error (c is '?' or ':') for `cmd` in words; returns
 * EXIT_USAGE. Call with the optstring starting with ':'. */
int cli_getopt_error(const char *cmd, int c, char **argv);

/*
 * Parse a whole decimal string (surrounding blanks not allowed) into a
 * value in [lo, hi]. On error prints "scaledmm CMD: OPT: ..." and returns
 * -1 (*out untouched); returns 0 on success.
 */
int cli_parse_long(const char *cmd, const char *opt, const char *s,
                   long lo, long hi, long *out);

/* Decimal or 0x-prefixed hexadecimal unsigned 64-bit value, whole string,
 * no sign. Errors as cli_parse_long. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);

/* A finite decimal number in [lo, hi]. Errors as cli_parse_long. */
int cli_parse_double(const char *cmd, const char *opt, const char *s,
                     double lo, double hi, double *out);

/*
 * A comma-separated list of integers in [lo, hi], e.g. "1,16,128". At most
 * max entries, no empty entries. Stores the values in out[] and their
 * count in *count. Errors as cli_parse_long.
 */
int cli_parse_long_list(const char *cmd, const char *opt, const char *s,
                        long lo, long hi, long *out, int max, int *count);

/* A file or directory path given on the command line (what names it, e.g.
 * "--input" or "CHECKPOINT"): any non-empty string. An empty one is a usage
 * error (it would otherwise name "/config.json" once a file name is
 * appended): prints "scaledmm CMD: WHAT: empty path" and returns -1; 0
 * when s is not empty. */
int cli_check_path(const char *cmd, const char *what, const char *s);

/* A backend name as smm_backend_from_name accepts it ("auto", "reference",
 * "cpu", "rocm", "cuda"). Errors as cli_parse_long. */
int cli_parse_backend(const char *cmd, const char *opt, const char *s,
                      smm_backend *out);

/*
 * Creates a context on backend b (AUTO: as the library resolves it, with
 * SMM_BACKEND honoured). On failure prints why (the backend's
 * smm_backend_available reason, or the SMM_BACKEND value AUTO refused) as
 * "scaledmm CMD: ..." and returns -1 with *ctx NULL; 0 on success.
 */
int cli_open_backend(const char *cmd, smm_backend b, smm_context **ctx);

/* Progress lines on stderr, shown only when stderr is a terminal. Each
 * update overwrites the previous line; progress_clear erases it. */
int progress_enabled(void);
/* When stderr is not a terminal: from now on, progress_update prints its
 * line as "scaledmm CMD: LINE (N s elapsed)" followed by a newline, at most
 * once every interval_s seconds (the first update at once), and
 * progress_clear does nothing. No effect on a terminal. cmd must outlive
 * the calls. */
void progress_log(const char *cmd, double interval_s);
/* Whether progress is shown at all (a terminal, or progress_log on). */
int progress_shown(void);
void progress_update(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_clear(void);

#endif
