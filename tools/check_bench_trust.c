/*
 * check_bench_trust.c - the reliability tests of `scaledmm bench`
 * (tools/bench_trust.c, compiled in) on synthetic timings: clean timings
 * pass, whatever their medians; timings on multiples of a scheduler tick,
 * timings that vary widely, a machine loaded by other work and a bandwidth
 * probe that varies widely are each flagged, with a reason that says so;
 * runs sized to a target length are not taken for tick-quantised;
 * the bench's own threads in the load average are not counted against it.
 */
#include "config.h"
#include "testutil.h"
/* The tests under test, compiled in: the tool has no library. */
#include "bench_trust.c"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NPOINTS 16
#define RUNS 5

typedef struct timings {
    double s[NPOINTS * RUNS];
    int counts[NPOINTS];
} timings;

/* Uniform in [0, 1). */
static double unit(cf_rng *r)
{
    return (double)(cf_rng_next(r) >> 11) * 0x1p-53;
}

/* NPOINTS points of RUNS runs: medians from 0.3 ms to 60 ms, spread
 * evenly in log scale and offset at random, each run within +-rel of its
 * median. */
static void make_clean(timings *t, cf_rng *r, double rel)
{
    int i, j;
    for (i = 0; i < NPOINTS; i++) {
        double med = 0.3e-3 * pow(200.0, (i + unit(r)) / NPOINTS);
        t->counts[i] = RUNS;
        for (j = 0; j < RUNS; j++)
            t->s[i * RUNS + j] = med * (1.0 + rel * (2.0 * unit(r) - 1.0));
    }
}

static bench_trust_input input_of(const timings *t)
{
    bench_trust_input in;
    memset(&in, 0, sizeof in);
    in.samples = t->s;
    in.counts = t->counts;
    in.npoints = NPOINTS;
    in.load_start = 0.1;
    in.load_end = 2.0;     /* the bench's own 2 threads */
    in.other_cpus = -1.0;  /* unknown: the load averages decide */
    in.steal_frac = -1.0;
    in.wait_frac = -1.0;
    in.threads = 2;
    in.cpus = 2;
    in.probe_min = 30.0;
    in.probe_max = 33.0;
    return in;
}

/* Whether one of tr's reasons contains `word`. */
static int has_reason(const bench_trust *tr, const char *word)
{
    int i;
    for (i = 0; i < tr->nreasons; i++)
        if (strstr(tr->reasons[i], word))
            return 1;
    return 0;
}

static void dump(const bench_trust *tr)
{
    int i;
    for (i = 0; i < tr->nreasons; i++)
        fprintf(stderr, "  reason: %s\n", tr->reasons[i]);
}

/* The run with input in is judged unreliable for exactly one reason, and
 * that reason contains word. */
static void assert_flagged_for(const bench_trust_input *in, const char *word)
{
    bench_trust tr;
    bench_trust_assess(in, &tr);
    dump(&tr);
    ck_assert_msg(!tr.reliable, "judged reliable; expected: %s", word);
    ck_assert_int_eq(tr.nreasons, 1);
    ck_assert_msg(has_reason(&tr, word), "no reason with \"%s\"", word);
}

START_TEST(test_clean)
{
    cf_rng r = tu_rng("clean");
    int rep;
    /* Many draws: the quantum test must not fire on clean timings by
     * chance (it is allowed to, rarely; never in these draws). */
    for (rep = 0; rep < 200; rep++) {
        timings t;
        bench_trust_input in;
        bench_trust tr;
        make_clean(&t, &r, 0.03);
        in = input_of(&t);
        bench_trust_assess(&in, &tr);
        if (!tr.reliable)
            dump(&tr);
        ck_assert_msg(tr.reliable, "clean timings flagged (draw %d)", rep);
        ck_assert_int_eq(tr.nreasons, 0);
        ck_assert_int_eq(tr.spread_checked, NPOINTS);
        ck_assert(fabs(tr.load_other - 0.1) < 1e-12);
    }
}
END_TEST

/* One point with a wild run among clean ones stays reliable. */
START_TEST(test_one_outlier)
{
    cf_rng r = tu_rng("one_outlier");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    make_clean(&t, &r, 0.02);
    t.s[3 * RUNS] *= 3.0;
    in = input_of(&t);
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
    ck_assert_int_eq(tr.spread_points, 1);
}
END_TEST

START_TEST(test_wide_spread)
{
    cf_rng r = tu_rng("spread");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    int i;
    make_clean(&t, &r, 0.02);
    /* Half the points: one run 60% slower than the others. */
    for (i = 0; i < NPOINTS; i += 2)
        t.s[i * RUNS + 1] *= 1.6;
    in = input_of(&t);
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(!tr.reliable);
    ck_assert_int_eq(tr.spread_points, NPOINTS / 2);
    ck_assert(has_reason(&tr, "vary by more than"));
    ck_assert(tr.quantum == 0.0);
}
END_TEST

/* Timings that a 4 ms tick cuts into: every run a multiple of 4 ms (the
 * work, 1 to 60 ms, rounded up), plus a few microseconds of noise. */
START_TEST(test_quantised)
{
    cf_rng r = tu_rng("quantised");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    int i;
    make_clean(&t, &r, 0.1);
    for (i = 0; i < NPOINTS * RUNS; i++)
        t.s[i] = 4e-3 * ceil(t.s[i] / 4e-3) + 2e-6 * unit(&r);
    in = input_of(&t);
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(!tr.reliable);
    ck_assert_msg(fabs(tr.quantum - 4e-3) < 1e-9, "quantum %g", tr.quantum);
    ck_assert(has_reason(&tr, "multiple of 4 ms"));
}
END_TEST

/* Runs sized to about 20 ms each (the device path) sit near multiples of
 * every tick by design: not flagged for it. */
START_TEST(test_calibrated)
{
    cf_rng r = tu_rng("calibrated");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    int i;
    for (i = 0; i < NPOINTS * RUNS; i++)
        t.s[i] = 20e-3 * (1.0 + 0.005 * (2.0 * unit(&r) - 1.0));
    for (i = 0; i < NPOINTS; i++)
        t.counts[i] = RUNS;
    in = input_of(&t);
    bench_trust_assess(&in, &tr);
    ck_assert(!tr.reliable);  /* uncalibrated, they would be */
    in.runs_calibrated = 1;
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(tr.reliable);
}
END_TEST

/* Layer times of a real run (scaledmm bench --model all --m 1,512
 * --repeats 1 --max-time 0, 2 threads on 2 busy vCPUs): the M = 1 points
 * (3 to 30 ms of work when idle: 0.8 to 4 ms) waited for whole 4 ms ticks;
 * the M = 512 points, work plus ticks, are not multiples. */
START_TEST(test_real_ticks)
{
    static const double ms[16] = { 14.135, 83.378, 16.003, 67.780, 16.000, 205.525,
                                   15.994, 155.550, 15.997, 199.475, 19.991, 191.283,
                                   32.001, 1054.510, 24.011, 586.535 };
    double s[16];
    int counts[16], i;
    bench_trust_input in;
    bench_trust tr;
    for (i = 0; i < 16; i++) {
        s[i] = ms[i] * 1e-3;
        counts[i] = 1;
    }
    memset(&in, 0, sizeof in);
    in.samples = s;
    in.counts = counts;
    in.npoints = 16;
    in.load_start = in.load_end = -1.0;
    in.other_cpus = in.steal_frac = in.wait_frac = -1.0;
    in.threads = 2;
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(!tr.reliable);
    ck_assert_msg(fabs(tr.quantum - 4e-3) < 1e-9, "quantum %g", tr.quantum);
}
END_TEST

/* A coarse clock: short runs read 0 or one 10 ms tick. */
START_TEST(test_coarse_clock)
{
    cf_rng r = tu_rng("coarse_clock");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    int i;
    make_clean(&t, &r, 0.05);
    for (i = 0; i < NPOINTS * RUNS; i++)
        t.s[i] = 10e-3 * floor(t.s[i] / 10e-3 + unit(&r));
    in = input_of(&t);
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(!tr.reliable);
    ck_assert_msg(fabs(tr.quantum - 10e-3) < 1e-9, "quantum %g", tr.quantum);
}
END_TEST

START_TEST(test_loaded)
{
    cf_rng r = tu_rng("loaded");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    make_clean(&t, &r, 0.02);
    in = input_of(&t);
    /* Other work before the bench started. */
    in.load_start = 1.7;
    assert_flagged_for(&in, "load average 1.70");
    /* Other work that started while it ran. */
    in.load_start = 0.2;
    in.load_end = 3.5;
    bench_trust_assess(&in, &tr);
    ck_assert(!tr.reliable);
    ck_assert(fabs(tr.load_other - 1.5) < 1e-12);
    /* A bigger machine has room for it. */
    in.cpus = 8;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
    /* Unknown load: no verdict on it. */
    in.cpus = 2;
    in.load_start = in.load_end = -1.0;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
}
END_TEST

/* Measured CPU time of other processes, where known, decides instead of
 * the load average; steal time counts on its own. */
START_TEST(test_measured_load)
{
    cf_rng r = tu_rng("measured_load");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    make_clean(&t, &r, 0.02);
    in = input_of(&t);
    /* A load average left over from work that ended before the bench. */
    in.load_start = 1.7;
    in.other_cpus = 0.1;
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(tr.reliable);
    ck_assert(fabs(tr.load_other - 0.1) < 1e-12);
    /* Other work while it ran, whatever the load average said. */
    in.load_start = 0.0;
    in.load_end = 2.0;
    in.other_cpus = 0.9;
    assert_flagged_for(&in, "other processes kept 0.90 CPUs busy");
    /* Steal time above the limit, alone. */
    in.other_cpus = 0.0;
    in.steal_frac = 0.25;
    assert_flagged_for(&in, "25% of the CPUs' time (steal)");
    in.steal_frac = 0.05;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
    /* The bench's own threads waiting for their CPUs, alone. */
    in.wait_frac = 0.30;
    assert_flagged_for(&in, "waited for a CPU 30% of the time");
    in.wait_frac = 0.02;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
    /* No CPU count (a GPU run): neither steal nor waiting is judged. */
    in.cpus = 0;
    in.steal_frac = 0.5;
    in.wait_frac = 0.5;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
}
END_TEST

START_TEST(test_probe_spread)
{
    cf_rng r = tu_rng("probe_spread");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    make_clean(&t, &r, 0.02);
    in = input_of(&t);
    in.probe_min = 12.0;
    in.probe_max = 33.0;
    bench_trust_assess(&in, &tr);
    ck_assert(!tr.reliable);
    ck_assert(has_reason(&tr, "bandwidth probe"));
    in.probe_min = in.probe_max = 0.0;  /* not measured */
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
}
END_TEST

/* Everything at once: every reason listed, at most the maximum. */
START_TEST(test_all_reasons)
{
    cf_rng r = tu_rng("all_reasons");
    timings t;
    bench_trust_input in;
    bench_trust tr;
    int i;
    make_clean(&t, &r, 0.02);
    for (i = 0; i < NPOINTS; i++) {
        t.s[i * RUNS] = 8e-3;
        t.s[i * RUNS + 1] = 16e-3;
        t.s[i * RUNS + 2] = 8e-3;
        t.s[i * RUNS + 3] = 24e-3;
        t.s[i * RUNS + 4] = 8e-3;
    }
    in = input_of(&t);
    in.load_start = 4.0;
    in.probe_min = 5.0;
    in.steal_frac = 0.5;
    in.wait_frac = 0.5;
    bench_trust_assess(&in, &tr);
    dump(&tr);
    ck_assert(!tr.reliable);
    ck_assert_int_eq(tr.nreasons, 6);
    ck_assert(has_reason(&tr, "bandwidth probe"));
    ck_assert(fabs(tr.quantum - 8e-3) < 1e-9);
}
END_TEST

/* Points with fewer than 3 runs, or none, are skipped by the spread test. */
START_TEST(test_few_runs)
{
    double s[3] = { 1e-3, 3e-3, 2e-3 };
    int counts[3] = { 0, 2, 1 };
    bench_trust_input in;
    bench_trust tr;
    memset(&in, 0, sizeof in);
    in.samples = s;
    in.counts = counts;
    in.npoints = 3;
    in.load_start = in.load_end = -1.0;
    in.other_cpus = in.steal_frac = in.wait_frac = -1.0;
    in.threads = 1;
    bench_trust_assess(&in, &tr);
    ck_assert(tr.reliable);
    ck_assert_int_eq(tr.spread_checked, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_trust");
    TCase *tc = tu_tcase(s, "bench_trust", 60);
    tcase_add_test(tc, test_clean);
    tcase_add_test(tc, test_one_outlier);
    tcase_add_test(tc, test_wide_spread);
    tcase_add_test(tc, test_quantised);
    tcase_add_test(tc, test_coarse_clock);
    tcase_add_test(tc, test_calibrated);
    tcase_add_test(tc, test_real_ticks);
    tcase_add_test(tc, test_loaded);
    tcase_add_test(tc, test_measured_load);
    tcase_add_test(tc, test_probe_spread);
    tcase_add_test(tc, test_all_reasons);
    tcase_add_test(tc, test_few_runs);
    return tu_main(s, "bench_trust");
}
