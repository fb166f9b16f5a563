/*
 * testutil.h - helpers shared by the Check suites in tests/.
 *
 * Every suite calls tu_main(): it picks the seed (SMM_TEST_SEED or a fresh
 * one), prints it so that any failure can be replayed, and runs the suite.
 * Tests draw their random inputs from tu_rng(), seeded from the suite seed
 * and the test's name, so one test replays the same inputs whether it runs
 * alone (CK_RUN_CASE) or with the others.
 */
#ifndef SMM_TESTUTIL_H
#define SMM_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "conformance.h"
#include "scaledmm.h"

/* The suite's seed (set by tu_main before any test runs). */
extern uint64_t tu_seed;

/* A generator for the named test, derived from tu_seed and the name. */
cf_rng tu_rng(const char *test_name);

/* Prints the seed, runs the suite (every test case in it), prints a
 * summary; returns the exit status for main (0 = all passed; 99, automake's
 * hard error, with nothing run, when SMM_TEST_SEED is set but not a seed). */
int tu_main(Suite *s, const char *name);

/* tu_main for a suite with a GPU part (it tests every backend tu_backends
 * gives): when the build has a GPU backend (configure --with-rocm or
 * --with-cuda) that cannot run here, a passing run exits 77 (automake's
 * SKIP) and prints why, instead of 0. */
int tu_main_gpu(Suite *s, const char *name);

/* Adds a test case named `name` with a timeout of `timeout_s` seconds
 * (tests run under sanitizers in CI: keep these generous). */
TCase *tu_tcase(Suite *s, const char *name, double timeout_s);

/* Whether SMM_TEST_BACKENDS (a comma- or space-separated list of backend
 * names; unset or empty: all) lets the suites test backend b. The reference
 * is what every backend is compared with, whichever are selected. */
int tu_backend_selected(smm_backend b);

/* Backends that can run here: REFERENCE, CPU, and any GPU backend. The
 * calls of a GPU context take device pointers: tests that hand host buffers
 * straight to the library use tu_host_backends; the conformance battery
 * (cf_*) stages its buffers itself and runs on all of them. */
/* (Only those SMM_TEST_BACKENDS selects.) */
int tu_backends(smm_backend out[4]);
/* The same without the GPU backends. */
int tu_host_backends(smm_backend out[4]);

/* Thread counts to test a backend at: 1, 2 and 3 (the reference, which is
 * single-threaded, and GPU backends, which ignore it: only 1). Returns how
 * many were written to out. */
int tu_thread_counts(smm_backend b, int out[3]);

/* A context on `backend` with `threads` threads (0 = default); aborts the
 * test if it cannot be created. */
smm_context *tu_ctx(smm_backend backend, int threads);

/* A buffer of `size` bytes with `guard` poisoned bytes either side. */
typedef struct tu_buf {
    unsigned char *mem;   /* whole allocation */
    unsigned char *p;     /* the usable bytes */
    size_t size, guard;
    unsigned char poison;
} tu_buf;
void tu_buf_alloc(tu_buf *b, size_t size, size_t offset, unsigned char poison);
void tu_buf_poison(tu_buf *b, unsigned char poison);
/* 1 when every byte (usable and guard) still holds the poison. */
int tu_buf_untouched(const tu_buf *b);
void tu_buf_free(tu_buf *b);

/* An allocator that counts, and fails on request: every library allocation
 * of a context created with tu_counting_allocator() goes through it.
 * Thread-safe. Memory it returns is filled with 0xCD (nothing may rely on
 * zeroed memory). */
typedef struct tu_counting {
    int64_t calls;      /* alloc calls so far */
    int64_t live;       /* successful allocations not yet freed */
    int64_t fail_at;    /* the alloc call (0-based) that returns NULL; -1 none */
    int bad_request;    /* set when an alignment was not a power of two <= 4096 */
    void *largest;      /* the largest allocation so far (and its size) */
    size_t largest_size;
} tu_counting;
/* Counter set to fail nothing; its allocator. */
void tu_counting_init(tu_counting *c);
smm_allocator tu_counting_allocator(tu_counting *c);
/* Makes the n-th alloc call from now fail (n >= 0), or none (n < 0). */
void tu_counting_fail_in(tu_counting *c, int64_t n);

/* Bits of a float and back. */
uint32_t tu_f2u(float f);
float tu_u2f(uint32_t u);

/* Marks a failing case message with the backend and thread count. */
#define TU_FAIL_CASE(backend, threads, desc, msg)                                    \
    ck_abort_msg("backend %s, %d threads: %s\n    case: %s\n    (replay with "       \
                 "SMM_TEST_SEED=0x%016llx)",                                          \
                 smm_backend_name(backend), (threads), (msg), (desc),                 \
                 (unsigned long long)tu_seed)

#endif
