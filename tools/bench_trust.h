/*
 * bench_trust.h - whether a bench run's timings can be trusted: a pure
 * function of the timings and the machine's load, so that it can be tested
 * on synthetic timings (tools/check_bench_trust.c).
 *
 * A run is unreliable when any of these holds:
 *  - spread: in more than BENCH_TRUST_SPREAD_FRAC of the points with at
 *    least 3 timed runs, (max - min) / median of the runs exceeds
 *    BENCH_TRUST_SPREAD_MAX;
 *  - quantised timings: for one of the quanta 10, 8, 4, 2 and 1 ms (the
 *    scheduler ticks of HZ = 100, 125, 250, 500, 1000), at least
 *    BENCH_TRUST_QUANT_FRAC of the timings from half a quantum to
 *    BENCH_TRUST_QUANT_SPAN quanta long lie within BENCH_TRUST_QUANT_TOL quanta of a multiple of it (by
 *    chance 2 x BENCH_TRUST_QUANT_TOL of them do), with at least
 *    BENCH_TRUST_QUANT_MIN such timings from at least
 *    BENCH_TRUST_QUANT_POINTS points; a timing of exactly 0, which only a
 *    coarse clock gives, counts as on a multiple. Of the quanta that pass,
 *    the one with the largest share of timings on its multiples is named
 *    (the largest quantum on a tie). Longer timings are left out: a long
 *    run is its work plus whole ticks, not a multiple of one, whereas a
 *    run far shorter than a tick that waited for one lasts one or more
 *    whole ticks. Not applied to calibrated runs
 *    (runs_calibrated);
 *  - load: the work not due to the bench itself plus the bench's threads
 *    exceeds the online CPUs by more than BENCH_TRUST_LOAD_SLACK: more
 *    threads wanted to run than there were CPUs. That work is, where known,
 *    the CPUs that other processes kept busy on average while the bench ran
 *    (other_cpus, over the CPUs it may run on, which are then `cpus`); else the load average (the larger of the load at the
 *    start and the load at the end less the bench's threads), which still
 *    counts, for about a minute, work that ended before the bench began;
 *  - steal: the hypervisor ran other guests for more than
 *    BENCH_TRUST_STEAL_MAX of the CPUs' time while the bench ran;
 *  - waiting: the bench's threads spent more than BENCH_TRUST_WAIT_MAX of
 *    their time runnable but waiting for a CPU (other work on the very
 *    CPUs they ran on, which the machine-wide figures above dilute);
 *  - probe spread: the read-bandwidth probe's slowest repetition was more
 *    than BENCH_TRUST_SPREAD_MAX below its fastest (relative to the
 *    fastest).
 */
#ifndef SMM_TOOL_BENCH_TRUST_H
#define SMM_TOOL_BENCH_TRUST_H

#define BENCH_TRUST_SPREAD_MAX 0.25
#define BENCH_TRUST_SPREAD_FRAC 0.25
#define BENCH_TRUST_QUANT_TOL 0.02
#define BENCH_TRUST_QUANT_FRAC 0.75
#define BENCH_TRUST_QUANT_SPAN 10
#define BENCH_TRUST_QUANT_MIN 6
#define BENCH_TRUST_QUANT_POINTS 3
#define BENCH_TRUST_LOAD_SLACK 0.5
#define BENCH_TRUST_STEAL_MAX 0.10
#define BENCH_TRUST_WAIT_MAX 0.25
#define BENCH_TRUST_MAX_REASONS 6

typedef struct bench_trust_input {
    const double *samples; /* every point's timed runs (s), point after point */
    const int *counts;     /* runs of each point (>= 0); their sum is the
                              length of samples */
    int npoints;
    double load_start;     /* 1-minute load average before the bench ran
                              (< 0: unknown) */
    double load_end;       /* the same after it ran (< 0: unknown) */
    double other_cpus;     /* CPUs other processes kept busy on average
                              while the bench ran (< 0: unknown; then the
                              load averages above are used) */
    double steal_frac;     /* the hypervisor's steal time over the CPUs'
                              time while the bench ran (< 0: unknown) */
    double wait_frac;      /* the time the bench's threads spent waiting
                              for a CPU over their wall time (< 0:
                              unknown) */
    int threads;           /* threads the bench ran on (>= 1) */
    int cpus;              /* online CPUs (< 1: unknown, no load test) */
    int runs_calibrated;   /* 1: each run's length was chosen (the device
                              path sizes its runs to about 20 ms), so their
                              lengths would sit on multiples of a tick by
                              design: the quantum test is skipped */
    double probe_min;      /* slowest and fastest repetition of the */
    double probe_max;      /* bandwidth probe (GB/s; <= 0: not measured) */
} bench_trust_input;

typedef struct bench_trust {
    int reliable;          /* 1: no reason found */
    int nreasons;
    char reasons[BENCH_TRUST_MAX_REASONS][200];  /* in words, one per test
                                                    that failed */
    int spread_points;     /* points whose spread exceeds the limit */
    int spread_checked;    /* points with >= 3 runs */
    double quantum;        /* the quantum the timings sit on (s), 0: none */
    int quant_hits;        /* timings on its multiples */
    int quant_checked;     /* timings from half of it to QUANT_SPAN x it */
    double load_other;     /* load not due to the bench (-1: unknown) */
} bench_trust;

/* Applies the tests above to in; fills *out. Never fails. */
void bench_trust_assess(const bench_trust_input *in, bench_trust *out);

#endif
