/*
 * bench_trust.c - the reliability tests of a bench run's timings
 * (bench_trust.h).
 */
#include "bench_trust.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scheduler ticks, largest first (a tie names the largest). */
static const double quanta[] = { 10e-3, 8e-3, 4e-3, 2e-3, 1e-3 };
#define NQUANTA ((int)(sizeof quanta / sizeof quanta[0]))

static void add_reason(bench_trust *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_reason(bench_trust *out, const char *fmt, ...)
{
    va_list ap;
    out->reliable = 0;
    if (out->nreasons >= BENCH_TRUST_MAX_REASONS)
        return;
    va_start(ap, fmt);
    vsnprintf(out->reasons[out->nreasons++], sizeof out->reasons[0], fmt, ap);
    va_end(ap);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* (max - min) / median of n >= 1 values (copied, not reordered); -1 when
 * the median is not positive. */
static double spread_of(const double *v, int n)
{
    double buf[64], *s = n <= 64 ? buf : malloc((size_t)n * sizeof *s), med, r;
    if (!s)
        return -1.0;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    med = (n % 2) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    r = med > 0.0 ? (s[n - 1] - s[0]) / med : -1.0;
    if (s != buf)
        free(s);
    return r;
}

static void test_spread(const bench_trust_input *in, bench_trust *out)
{
    const double *p = in->samples;
    int i;
    for (i = 0; i < in->npoints; p += in->counts[i], i++) {
        double s;
        if (in->counts[i] < 3)
            continue;
        out->spread_checked++;
        s = spread_of(p, in->counts[i]);
        if (s > BENCH_TRUST_SPREAD_MAX)
            out->spread_points++;
    }
    if (out->spread_checked > 0 &&
        out->spread_points > BENCH_TRUST_SPREAD_FRAC * out->spread_checked)
        add_reason(out, "%d of %d points vary by more than %.0f%% of their median "
                   "between timed runs", out->spread_points, out->spread_checked,
                   BENCH_TRUST_SPREAD_MAX * 100.0);
}

/* Whether t sits on a multiple of q (t >= q / 2, or t exactly 0). */
static int on_multiple(double t, double q)
{
    double f;
    if (t == 0.0)
        return 1;
    f = t / q;
    return fabs(f - floor(f + 0.5)) <= BENCH_TRUST_QUANT_TOL;
}

static void test_quanta(const bench_trust_input *in, bench_trust *out)
{
    double best_frac = 0.0;
    int qi;
    for (qi = 0; qi < NQUANTA; qi++) {
        const double q = quanta[qi];
        const double *p = in->samples;
        int i, j, hits = 0, checked = 0, hit_points = 0;
        for (i = 0; i < in->npoints; p += in->counts[i], i++) {
            int point_hits = 0;
            for (j = 0; j < in->counts[i]; j++) {
                if (p[j] != 0.0 && !(p[j] >= 0.5 * q && p[j] <= BENCH_TRUST_QUANT_SPAN * q))
                    continue;
                checked++;
                point_hits += on_multiple(p[j], q);
            }
            hits += point_hits;
            hit_points += point_hits > 0;
        }
        if (hits >= BENCH_TRUST_QUANT_MIN && hit_points >= BENCH_TRUST_QUANT_POINTS &&
            hits >= BENCH_TRUST_QUANT_FRAC * checked &&
            (double)hits / checked > best_frac) {
            best_frac = (double)hits / checked;
            out->quantum = q;
            out->quant_hits = hits;
            out->quant_checked = checked;
        }
    }
    if (out->quantum > 0.0)
        add_reason(out, "%d of %d timings are within %.0f%% of a multiple of %g ms "
                   "(a coarse clock or scheduler tick; chance gives %.0f%%)",
                   out->quant_hits, out->quant_checked, BENCH_TRUST_QUANT_TOL * 100.0,
                   out->quantum * 1e3, 2.0 * BENCH_TRUST_QUANT_TOL * 100.0);
}

/* Competition for the CPUs: other processes' load (measured from
 * /proc/stat, else the load average), the hypervisor's steal, and the
 * bench's own threads waiting for a CPU. */
static void test_contention(const bench_trust_input *in, bench_trust *out)
{
    double other = -1.0;
    const int measured = in->other_cpus >= 0.0;
    if (measured) {
        other = in->other_cpus;
    } else {
        if (in->load_start >= 0.0)
            other = in->load_start;
        if (in->load_end >= 0.0 && in->load_end - in->threads > other)
            other = in->load_end - in->threads;
    }
    out->load_other = other;
    if (other >= 0.0 && in->cpus >= 1 &&
        other + in->threads > in->cpus + BENCH_TRUST_LOAD_SLACK)
        add_reason(out, measured ? "other processes kept %.2f CPUs busy on average + %d "
                                   "bench thread%s > %d CPU%s"
                                 : "load average %.2f from other work + %d bench thread%s "
                                   "> %d CPU%s",
                   other, in->threads, in->threads == 1 ? "" : "s", in->cpus,
                   in->cpus == 1 ? "" : "s");
    if (in->cpus >= 1 && in->steal_frac > BENCH_TRUST_STEAL_MAX)
        add_reason(out, "the hypervisor ran other guests for %.0f%% of the CPUs' time "
                   "(steal)", in->steal_frac * 100.0);
    if (in->cpus >= 1 && in->wait_frac > BENCH_TRUST_WAIT_MAX)
        add_reason(out, "the bench's threads waited for a CPU %.0f%% of the time",
                   in->wait_frac * 100.0);
}

void bench_trust_assess(const bench_trust_input *in, bench_trust *out)
{
    memset(out, 0, sizeof *out);
    out->reliable = 1;
    out->load_other = -1.0;
    test_spread(in, out);
    if (!in->runs_calibrated)
        test_quanta(in, out);
    test_contention(in, out);
    if (in->probe_min > 0.0 && in->probe_max > 0.0 &&
        (in->probe_max - in->probe_min) / in->probe_max > BENCH_TRUST_SPREAD_MAX)
        add_reason(out, "the bandwidth probe's repetitions range from %.1f to %.1f GB/s",
                   in->probe_min, in->probe_max);
}
