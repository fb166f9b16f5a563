/*
 * cli.c - command-line helpers: strict number parsing, error messages,
 * progress display (see cli.h).
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static void vprefixed(const char *cmd, const char *fmt, va_list ap)
{
    if (cmd)
        fprintf(stderr, "scaledmm %s: ", cmd);
    else
        fputs("scaledmm: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprefixed(cmd, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Try 'scaledmm %s --help'.\n", cmd);
    else
        fputs("Try 'scaledmm --help'.\n", stderr);
    return EXIT_USAGE;
}

int cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprefixed(cmd, fmt, ap);
    va_end(ap);
    return EXIT_FAILED;
}

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    extern int optind, optopt;
    const char *arg = (optind > 0) ? argv[optind - 1] : "?";
    if (c == ':')
        return cli_usage_error(cmd, "option '%s' needs an argument", arg);
    if (optopt && arg[0] == '-' && arg[1] == '-' && strchr(arg, '='))
        return cli_usage_error(cmd, "option '%.*s' takes no argument",
                               (int)(strchr(arg, '=') - arg), arg);
    if (optopt && !(arg[0] == '-' && arg[1] == '-'))
        return cli_usage_error(cmd, "unknown option '-%c'", optopt);
    return cli_usage_error(cmd, "unknown option '%s'", arg);
}

/* Leading blanks are accepted by strtol and friends; we are stricter. */
static int starts_like_number(const char *s, int allow_sign)
{
    if (!s || !*s)
        return 0;
    if (allow_sign && (*s == '-' || *s == '+'))
        s++;
    return isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1]));
}

static int parse_long_range(const char *s, long lo, long hi, long *out,
                            const char **why)
{
    char *end;
    long v;
    if (!starts_like_number(s, 1)) {
        *why = "not an integer";
        return -1;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (*end != '\0') {
        *why = "not an integer";
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        *why = "out of range";
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_long(const char *cmd, const char *opt, const char *s,
                   long lo, long hi, long *out)
{
    const char *why = "";
    if (parse_long_range(s, lo, hi, out, &why) != 0) {
        cli_usage_error(cmd, "%s: '%s' is %s (expected an integer in [%ld, %ld])",
                        opt, s, why, lo, hi);
        return -1;
    }
    return 0;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    int base = 10;
    const char *p = s;
    if (s && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        p = s + 2;
        if (!isxdigit((unsigned char)*p))
            goto bad;
    } else if (!starts_like_number(s, 0) || *s == '.') {
        goto bad;
    }
    errno = 0;
    v = strtoull(p, &end, base);
    if (*end != '\0')
        goto bad;
    if (errno == ERANGE) {
        cli_usage_error(cmd, "%s: '%s' is out of range (at most 2^64-1)", opt, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
bad:
    cli_usage_error(cmd, "%s: '%s' is not an unsigned integer (decimal or 0x hex)",
                    opt, s ? s : "");
    return -1;
}

int cli_parse_double(const char *cmd, const char *opt, const char *s,
                     double lo, double hi, double *out)
{
    char *end;
    double v;
    if (!starts_like_number(s, 1))
        goto bad;
    errno = 0;
    v = strtod(s, &end);
    if (*end != '\0')
        goto bad;
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: '%s' is out of range (expected [%g, %g])",
                        opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
bad:
    cli_usage_error(cmd, "%s: '%s' is not a number", opt, s ? s : "");
    return -1;
}

int cli_parse_long_list(const char *cmd, const char *opt, const char *s,
                        long lo, long hi, long *out, int max, int *count)
{
    char item[32];
    const char *p = s;
    int n = 0;
    if (!s || !*s) {
        cli_usage_error(cmd, "%s: empty list", opt);
        return -1;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *why = "";
        long v;
        if (len == 0) {
            cli_usage_error(cmd, "%s: '%s' has an empty entry", opt, s);
            return -1;
        }
        if (len >= sizeof item) {
            cli_usage_error(cmd, "%s: entry '%.*s' is too long", opt, (int)len, p);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_long_range(item, lo, hi, &v, &why) != 0) {
            cli_usage_error(cmd, "%s: entry '%s' is %s (expected integers in [%ld, %ld])",
                            opt, item, why, lo, hi);
            return -1;
        }
        if (n == max) {
            cli_usage_error(cmd, "%s: more than %d entries", opt, max);
            return -1;
        }
        out[n++] = v;
        if (!comma)
            break;
        p = comma + 1;
    }
    *count = n;
    return 0;
}

int cli_check_path(const char *cmd, const char *what, const char *s)
{
    if (s && *s)
        return 0;
    cli_usage_error(cmd, "%s: empty path", what);
    return -1;
}

int cli_parse_backend(const char *cmd, const char *opt, const char *s,
                      smm_backend *out)
{
    if (!s || smm_backend_from_name(s, out) != SMM_OK) {
        cli_usage_error(cmd, "%s: unknown backend '%s' (expected auto, reference, cpu, "
                        "rocm or cuda)", opt, s ? s : "");
        return -1;
    }
    return 0;
}

int cli_open_backend(const char *cmd, smm_backend b, smm_context **ctx)
{
    const char *env = getenv("SMM_BACKEND"), *reason = "";
    smm_backend want = b;
    smm_status st = smm_context_create(ctx, b);
    if (st == SMM_OK)
        return 0;
    if (b == SMM_BACKEND_AUTO && env && *env) {
        if (smm_backend_from_name(env, &want) != SMM_OK) {
            cli_error(cmd, "SMM_BACKEND=%s is not a backend name (reference, cpu, rocm, "
                      "cuda or auto)", env);
            return -1;
        }
        if (want == SMM_BACKEND_AUTO)
            want = smm_backend_auto();
    } else if (b == SMM_BACKEND_AUTO) {
        want = smm_backend_auto();
    }
    if (!smm_backend_available(want, &reason))
        cli_error(cmd, "backend %s cannot run here: %s%s", smm_backend_name(want),
                  reason ? reason : "",
                  (b == SMM_BACKEND_AUTO && env && *env) ? " (requested by SMM_BACKEND)" : "");
    else
        cli_error(cmd, "cannot create a %s context: %s", smm_backend_name(want),
                  smm_strerror(st));
    return -1;
}

/* Log mode (progress_log): plain lines, at most one per interval. */
static struct {
    const char *cmd;      /* NULL: log mode off */
    double interval, start, last;
} plog;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int progress_enabled(void)
{
    static int enabled = -1;
    if (enabled < 0)
        enabled = isatty(STDERR_FILENO) ? 1 : 0;
    return enabled;
}

void progress_log(const char *cmd, double interval_s)
{
    if (progress_enabled())
        return;
    plog.cmd = cmd;
    plog.interval = interval_s;
    plog.start = now_s();
    plog.last = -1e300;
}

int progress_shown(void)
{
    return progress_enabled() || plog.cmd != NULL;
}

/* Width of the terminal on stderr (80 when unknown). */
static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

void progress_update(const char *fmt, ...)
{
    char line[512];
    int width;
    va_list ap;
    if (!progress_enabled() && plog.cmd) {
        double t = now_s();
        if (t - plog.last < plog.interval)
            return;
        plog.last = t;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        fprintf(stderr, "scaledmm %s: %s (%.0f s elapsed)\n", plog.cmd, line, t - plog.start);
        fflush(stderr);
        return;
    }
    if (!progress_enabled())
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one screen line, so that the next update overwrites all of it */
    width = terminal_width() - 1;
    if (width > 0 && width < (int)sizeof line)
        line[width] = '\0';
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
}

void progress_clear(void)
{
    if (!progress_enabled())
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}
