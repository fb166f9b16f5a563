/*
 * bench_machine.c - the machine's own limits, measured once per bench run:
 * the int8 dot-product peak of the cores (a register-only loop) and the
 * memory read bandwidth (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BM_X86 1
#else
#define BM_X86 0
#endif
#include "buffers.h"
#include "timer.h"

#define PEAK_REPS 3          /* timed runs of the peak loop (median) */
#define PEAK_REP_S 0.1       /* target seconds per timed run */
#define PEAK_CALIB_S 0.02    /* calibration runs last at least this long */
#define BW_REPS 15           /* timed repetitions of the read probe */
#define BW_REP_S 0.05        /* target seconds per repetition */
#define BW_LLC_FACTOR 8      /* buffer >= this many times the last-level cache */
#define BW_L3_FACTOR 4       /* buffer >= this many times all L3s together */
#define BW_PICK_ROUNDS 2     /* single passes per read loop when picking one */
#define BW_PF_N 2            /* prefetch distances tried (bytes ahead) */
#define BW_PF_DIST {1024, 4096}
#define BW_PF_FAR_KIB 8      /* KiB ahead of the near+far loop's L2 prefetch */
#define BW_PF_FAR (BW_PF_FAR_KIB * 1024)
#define BW_STR_(x) #x
#define BW_STR(x) BW_STR_(x)

/* Whether the space-separated list `list` holds the word `name`. */
static int has_word(const char *list, const char *name)
{
    size_t n = strlen(name);
    const char *p = list;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
        p += n;
    }
    return 0;
}

/* ---- the peak loops ----
 * Each runs `iters` iterations of 12 dot-product instructions into 12
 * independent accumulators, all in registers (the loop is inline assembly,
 * so no compiler can shorten it), then folds the accumulators and stores
 * them to `sink` (64 bytes), which the caller reads. The input values do
 * not matter for the timing. */

#if BM_X86
#define ACC12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

/* AVX-512 VNNI: vpdpbusd zmm, 16 lanes x 4 u8*s8 products = 64 MACs. */
#define ZERO_Z(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define DP_Z(i)   "vpdpbusd %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ADD_Z(i)  "vpaddd %%zmm" #i ", %%zmm0, %%zmm0\n\t"
__attribute__((target("avx512f,avx512vnni")))
static void peak_avx512vnni(long iters, int32_t *sink)
{
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"
        "vpabsd %%zmm30, %%zmm31\n\t"
        ACC12(ZERO_Z)
        "1:\n\t"
        ACC12(DP_Z)
        "sub $1, %0\n\t"
        "jnz 1b\n\t"
        ADD_Z(1) ADD_Z(2) ADD_Z(3) ADD_Z(4) ADD_Z(5) ADD_Z(6) ADD_Z(7) ADD_Z(8)
        ADD_Z(9) ADD_Z(10) ADD_Z(11)
        "vmovdqu32 %%zmm0, (%1)\n\t"
        "vzeroupper\n\t"
        : "+r"(iters)
        : "r"(sink)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
          "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm30", "xmm31");
}

/* AVX-VNNI: vpdpbusd ymm, VEX-encoded, 8 lanes x 4 = 32 MACs. */
#define ZERO_Y(i) "vpxor %%ymm" #i ", %%ymm" #i ", %%ymm" #i "\n\t"
#define DP_Y(i)   "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define ADD_Y(i)  "vpaddd %%ymm" #i ", %%ymm0, %%ymm0\n\t"
#define FOLD_Y ADD_Y(1) ADD_Y(2) ADD_Y(3) ADD_Y(4) ADD_Y(5) ADD_Y(6) ADD_Y(7) \
    ADD_Y(8) ADD_Y(9) ADD_Y(10) ADD_Y(11)
__attribute__((target("avx2,avxvnni")))
static void peak_avxvnni(long iters, int32_t *sink)
{
    __asm__ volatile(
        "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\t"
        "vpabsd %%ymm14, %%ymm15\n\t"
        ACC12(ZERO_Y)
        "1:\n\t"
        ACC12(DP_Y)
        "sub $1, %0\n\t"
        "jnz 1b\n\t"
        FOLD_Y
        "vmovdqu %%ymm0, (%1)\n\t"
        "vzeroupper\n\t"
        : "+r"(iters)
        : "r"(sink)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
          "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");
}

/* AVX2: vpmaddwd ymm (16 int16 products, summed in pairs into 8 int32) and
 * vpaddd into the accumulator = 16 MACs per pair. The two temporaries
 * alternate; register renaming keeps the 12 chains independent. */
#define MADD_Y(i) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define MA_Y(i, t) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #t "\n\t" \
    "vpaddd %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n\t"
__attribute__((target("avx2")))
static void peak_avx2(long iters, int32_t *sink)
{
    __asm__ volatile(
        "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\t"
        "vpabsw %%ymm14, %%ymm15\n\t"
        ACC12(ZERO_Y)
        "1:\n\t"
        MA_Y(0, 12) MA_Y(1, 13) MA_Y(2, 12) MA_Y(3, 13) MA_Y(4, 12) MA_Y(5, 13)
        MA_Y(6, 12) MA_Y(7, 13) MA_Y(8, 12) MA_Y(9, 13) MA_Y(10, 12) MA_Y(11, 13)
        "sub $1, %0\n\t"
        "jnz 1b\n\t"
        FOLD_Y
        "vmovdqu %%ymm0, (%1)\n\t"
        "vzeroupper\n\t"
        : "+r"(iters)
        : "r"(sink)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
          "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
          "xmm15");
}

/* AMX-INT8: tdpbusd on 16 x 64-byte tiles, 16 x 16 x 64 = 16384 MACs each:
 * 6 accumulator tiles (tmm0-5) against one A tile (tmm6, u8) and one B
 * tile (tmm7, s8), all zero (the values do not change the timing), so 6
 * independent chains. The tile configuration is per thread: each call
 * loads it and releases the tiles at the end. */
#define DP_T(i) "tdpbusd %%tmm7, %%tmm6, %%tmm" #i "\n\t"
__attribute__((target("amx-tile,amx-int8")))
static void peak_amx(long iters, int32_t *sink)
{
    unsigned char cfg[64] __attribute__((aligned(64)));
    int32_t out[16 * 16] __attribute__((aligned(64)));
    int i;
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1; /* palette 1 */
    for (i = 0; i < 8; i++) {
        cfg[16 + 2 * i] = 64; /* bytes per row (little-endian uint16) */
        cfg[48 + i] = 16;     /* rows */
    }
    __asm__ volatile(
        "ldtilecfg (%2)\n\t"
        "tilezero %%tmm0\n\t" "tilezero %%tmm1\n\t" "tilezero %%tmm2\n\t"
        "tilezero %%tmm3\n\t" "tilezero %%tmm4\n\t" "tilezero %%tmm5\n\t"
        "tilezero %%tmm6\n\t" "tilezero %%tmm7\n\t"
        "1:\n\t"
        DP_T(0) DP_T(1) DP_T(2) DP_T(3) DP_T(4) DP_T(5)
        "sub $1, %0\n\t"
        "jnz 1b\n\t"
        "mov $64, %%rax\n\t"
        "tilestored %%tmm0, (%1,%%rax,1)\n\t"
        "tilerelease\n\t"
        : "+r"(iters)
        : "r"(out), "r"(cfg)
        : "memory", "cc", "rax");
    memcpy(sink, out, 16 * sizeof(int32_t));
}

/* Whether this process may use the AMX tile state: Linux grants it on
 * request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), as the
 * library's AMX level asks for it too. A copy of the library's own check,
 * which is internal (the tools use the public API only). */
static int amx_permitted(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    return 0;
#endif
}
#endif

typedef void (*peak_fn)(long iters, int32_t *sink);

typedef struct peak_kernel {
    const char *feature;  /* word of smm_cpu_features() it needs */
    const char *insn;     /* in words, for the output */
    int macs_per_iter;    /* int8/int16 multiply-adds per loop iteration */
    peak_fn fn;
} peak_kernel;

/* The rank of a CPU kernel level named as SMM_CPU_ISA names it (read as
 * the library reads it: any case, "c" for scalar): its place in the
 * library's list of levels, lowest first (smm_cpu_levels); the portable
 * emulations of the VNNI levels use no dot-product instruction, so they
 * rank as scalar. -1 if none. */
static int level_rank(const char *name)
{
    const char *names[32];
    int n = 0, i;
    if (!name)
        return -1;
    if (strcasecmp(name, "c") == 0)
        return 0;
    if (smm_cpu_levels(SMM_CPU_LEVELS_EMULATED, names, 32, &n) == SMM_OK)
        for (i = 0; i < n && i < 32; i++)
            if (strcasecmp(name, names[i]) == 0)
                return 0;
    if (smm_cpu_levels(SMM_CPU_LEVELS_ALL, names, 32, &n) == SMM_OK)
        for (i = 0; i < n && i < 32; i++)
            if (strcasecmp(name, names[i]) == 0)
                return i;
    return -1;
}

/* Chooses the widest loop the CPU runs, at or below the level SMM_CPU_ISA
 * caps the CPU backend at (the peak of the instructions the backend may
 * use); NULL when none. */
static const peak_kernel *peak_choose(void)
{
#if BM_X86
    static const peak_kernel kernels[] = {
        { "avx512_vnni", "vpdpbusd zmm (AVX-512 VNNI, 64 MACs each)", 12 * 64,
          peak_avx512vnni },
        { "avx_vnni", "vpdpbusd ymm (AVX-VNNI, 32 MACs each)", 12 * 32, peak_avxvnni },
        { "avx2", "vpmaddwd ymm + vpaddd (AVX2, 16 MACs per vpmaddwd)", 12 * 16,
          peak_avx2 },
    };
    const char *features = smm_cpu_features();
    const int cap = level_rank(getenv("SMM_CPU_ISA"));
    size_t i;
    for (i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (has_word(features, kernels[i].feature) &&
            (cap < 0 || level_rank(kernels[i].feature) <= cap))
            return &kernels[i];
#endif
    return NULL;
}

/* Runs `fn` for `iters` iterations on every thread at once; seconds. */
static double peak_run(const peak_kernel *k, int threads, long iters)
{
    int32_t sinks[64][16] __attribute__((aligned(64)));
    volatile int32_t keep = 0;
    double t0, t1;
    int i;
    (void)threads;
    t0 = timer_now();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        k->fn(iters, sinks[tid % 64]);
    }
    t1 = timer_now();
    for (i = 0; i < (threads < 64 ? threads : 64); i++)
        keep += sinks[i][0];
    (void)keep;
    return t1 - t0;
}

/* Times k on every thread: calibrated to about PEAK_REP_S per run, median
 * of PEAK_REPS runs; 1e9 ops/s (2 per multiply-add). */
static double peak_gops(const peak_kernel *k, int threads)
{
    double times[PEAK_REPS], t;
    long iters = 1L << 12;
    int r, pass;

    /* Calibration (also starts the threads and brings the clocks up):
     * double until long enough; the faster of two runs, so that a thread
     * descheduled once on a busy machine does not shrink the count. */
    (void)peak_run(k, threads, iters);
    for (;;) {
        double t2;
        t = peak_run(k, threads, iters);
        t2 = peak_run(k, threads, iters);
        t = t2 < t ? t2 : t;
        if (t >= PEAK_CALIB_S || iters >= (1L << 40))
            break;
        iters *= 2;
    }
    for (pass = 0; pass < 2; pass++) {
        iters = (long)((double)iters * PEAK_REP_S / (t > 1e-9 ? t : 1e-9));
        if (iters < 1)
            iters = 1;
        for (r = 0; r < PEAK_REPS; r++)
            times[r] = peak_run(k, threads, iters);
        t = bench_median(times, PEAK_REPS);
        /* Runs far shorter than planned: the calibration was slowed down;
         * once more with the count the timed runs give. */
        if (t >= 0.5 * PEAK_REP_S)
            break;
    }
    return 2.0 * (double)k->macs_per_iter * (double)iters * (double)threads / t * 1e-9;
}

static void measure_peak(bench_machine *mc, int threads)
{
    const peak_kernel *k = peak_choose();
    double t0 = timer_now();

    if (!k) {
        snprintf(mc->peak_insn, sizeof mc->peak_insn, "no int8 dot-product loop for "
                 "this CPU%s", level_rank(getenv("SMM_CPU_ISA")) == 0 ? " at this SMM_CPU_ISA level" : "");
        return;
    }
    mc->peak_gops = peak_gops(k, threads);
    snprintf(mc->peak_insn, sizeof mc->peak_insn, "%s", k->insn);
    mc->peak_s = timer_now() - t0;
}

/* The AMX tile peak, on a CPU with AMX-INT8 (else nothing: tile_insn
 * empty), when SMM_CPU_ISA lets the backend use it and Linux grants the
 * tile state (else tile_insn says why not). */
static void measure_tile_peak(bench_machine *mc, int threads)
{
#if BM_X86
    static const peak_kernel amx = { "amx_int8", "tdpbusd (AMX-INT8, 16 x 16 x 64 = 16384 MACs "
                                     "each)", 6 * 16384, peak_amx };
    const int cap = level_rank(getenv("SMM_CPU_ISA"));
    double t0 = timer_now();

    if (!has_word(smm_cpu_features(), "amx_int8"))
        return;
    if (cap >= 0 && level_rank("amx_int8") > cap) {
        snprintf(mc->tile_insn, sizeof mc->tile_insn, "SMM_CPU_ISA caps the backend below "
                 "amx_int8");
        return;
    }
    if (!amx_permitted()) {
        snprintf(mc->tile_insn, sizeof mc->tile_insn, "Linux did not grant the AMX tile "
                 "state (arch_prctl ARCH_REQ_XCOMP_PERM)");
        return;
    }
    mc->tile_gops = peak_gops(&amx, threads);
    snprintf(mc->tile_insn, sizeof mc->tile_insn, "%s", amx.insn);
    mc->tile_s = timer_now() - t0;
#else
    (void)mc;
    (void)threads;
#endif
}

/* ---- memory read bandwidth ---- */

#if BM_X86
/* The read loops: OR `bytes` (a multiple of 512) into 8 independent
 * accumulators with aligned loads of 64 (AVX-512) or 32 (AVX2) bytes.
 * The _t0 and _nta forms also ask, for every line, for the line `pf`
 * bytes ahead (prefetcht0, prefetchnta): on some CPUs (e.g. AMD Zen) the
 * hardware prefetchers alone keep too few lines in flight for one core's
 * stream to reach the memory's bandwidth, and the decode kernels prefetch
 * ahead too. The _t0t1 forms add, as the decode kernels do on Intel CPUs,
 * a prefetcht1 of the line BW_PF_FAR bytes ahead: a prefetch into L2
 * holds no L1 fill buffer, so more lines are in flight per core. A
 * prefetch past the buffer's end never faults. */
#define OR512_LOOP(PF)                                                           \
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0,     \
            a5 = a0, a6 = a0, a7 = a0;                                           \
    uint64_t out[8];                                                             \
    size_t i;                                                                    \
    for (i = 0; i < bytes; i += 512) {                                           \
        PF                                                                       \
        a0 = _mm512_or_si512(a0, _mm512_load_si512((const void *)(p + i)));      \
        a1 = _mm512_or_si512(a1, _mm512_load_si512((const void *)(p + i + 64))); \
        a2 = _mm512_or_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));\
        a3 = _mm512_or_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));\
        a4 = _mm512_or_si512(a4, _mm512_load_si512((const void *)(p + i + 256)));\
        a5 = _mm512_or_si512(a5, _mm512_load_si512((const void *)(p + i + 320)));\
        a6 = _mm512_or_si512(a6, _mm512_load_si512((const void *)(p + i + 384)));\
        a7 = _mm512_or_si512(a7, _mm512_load_si512((const void *)(p + i + 448)));\
    }                                                                            \
    a0 = _mm512_or_si512(_mm512_or_si512(_mm512_or_si512(a0, a1), _mm512_or_si512(a2, a3)), \
                         _mm512_or_si512(_mm512_or_si512(a4, a5), _mm512_or_si512(a6, a7))); \
    _mm512_storeu_si512((void *)out, a0);                                        \
    return out[0] | out[1] | out[2] | out[3] | out[4] | out[5] | out[6] | out[7];

#define OR256_LOOP(PF)                                                           \
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0,     \
            a5 = a0, a6 = a0, a7 = a0;                                           \
    uint64_t out[4];                                                             \
    size_t i;                                                                    \
    for (i = 0; i < bytes; i += 256) {                                           \
        PF                                                                       \
        a0 = _mm256_or_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));   \
        a1 = _mm256_or_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));  \
        a2 = _mm256_or_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));  \
        a3 = _mm256_or_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));  \
        a4 = _mm256_or_si256(a4, _mm256_load_si256((const __m256i *)(p + i + 128))); \
        a5 = _mm256_or_si256(a5, _mm256_load_si256((const __m256i *)(p + i + 160))); \
        a6 = _mm256_or_si256(a6, _mm256_load_si256((const __m256i *)(p + i + 192))); \
        a7 = _mm256_or_si256(a7, _mm256_load_si256((const __m256i *)(p + i + 224))); \
    }                                                                            \
    a0 = _mm256_or_si256(_mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3)), \
                         _mm256_or_si256(_mm256_or_si256(a4, a5), _mm256_or_si256(a6, a7))); \
    _mm256_storeu_si256((__m256i *)out, a0);                                     \
    return out[0] | out[1] | out[2] | out[3];

/* One prefetch per line of a step, D bytes ahead: 8 lines of the 512-byte
 * step, 4 of the 256-byte step. */
#define PF_LINES(N, D, H)                                                        \
    for (int l = 0; l < (N); l++)                                                \
        _mm_prefetch((const char *)(p + i + (D) + 64 * l), H);
#define PF8(H) PF_LINES(8, pf, H)
#define PF4(H) PF_LINES(4, pf, H)
#define PF8_FAR PF8(_MM_HINT_T0) PF_LINES(8, BW_PF_FAR, _MM_HINT_T1)
#define PF4_FAR PF4(_MM_HINT_T0) PF_LINES(4, BW_PF_FAR, _MM_HINT_T1)

__attribute__((target("avx512f")))
static uint64_t or_avx512(const unsigned char *p, size_t bytes, size_t pf)
{
    (void)pf;
    OR512_LOOP()
}
__attribute__((target("avx512f")))
static uint64_t or_avx512_t0(const unsigned char *p, size_t bytes, size_t pf)
{
    OR512_LOOP(PF8(_MM_HINT_T0))
}
__attribute__((target("avx512f")))
static uint64_t or_avx512_nta(const unsigned char *p, size_t bytes, size_t pf)
{
    OR512_LOOP(PF8(_MM_HINT_NTA))
}
__attribute__((target("avx512f")))
static uint64_t or_avx512_t0t1(const unsigned char *p, size_t bytes, size_t pf)
{
    OR512_LOOP(PF8_FAR)
}
__attribute__((target("avx2")))
static uint64_t or_avx2(const unsigned char *p, size_t bytes, size_t pf)
{
    (void)pf;
    OR256_LOOP()
}
__attribute__((target("avx2")))
static uint64_t or_avx2_t0(const unsigned char *p, size_t bytes, size_t pf)
{
    OR256_LOOP(PF4(_MM_HINT_T0))
}
__attribute__((target("avx2")))
static uint64_t or_avx2_nta(const unsigned char *p, size_t bytes, size_t pf)
{
    OR256_LOOP(PF4(_MM_HINT_NTA))
}
__attribute__((target("avx2")))
static uint64_t or_avx2_t0t1(const unsigned char *p, size_t bytes, size_t pf)
{
    OR256_LOOP(PF4_FAR)
}
#endif

/* The same with 8-byte loads, 8 accumulators. */
static uint64_t or_scalar(const unsigned char *p, size_t bytes, size_t pf)
{
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    size_t i, n = bytes / 8;
    (void)pf;
    for (i = 0; i < n; i += 8) {
        a0 |= q[i];
        a1 |= q[i + 1];
        a2 |= q[i + 2];
        a3 |= q[i + 3];
        a4 |= q[i + 4];
        a5 |= q[i + 5];
        a6 |= q[i + 6];
        a7 |= q[i + 7];
    }
    return a0 | a1 | a2 | a3 | a4 | a5 | a6 | a7;
}

typedef uint64_t (*or_fn)(const unsigned char *p, size_t bytes, size_t pf);

/* A read loop and how far ahead it prefetches (0: not at all). */
typedef struct {
    or_fn fn;
    size_t pf;
    const char *how;
} bw_loop;

/* One repetition: `passes` passes in which every thread ORs its own
 * contiguous chunk; seconds. */
static double bw_rep(unsigned char *buf, size_t chunk, int threads, const bw_loop *lp,
                     int passes, uint64_t *out)
{
    uint64_t acc = 0;
    double t0, t1;
    (void)threads;
    t0 = timer_now();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(|:acc)
#endif
    {
        int tid = 0, p;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        for (p = 0; p < passes; p++)
            acc |= lp->fn(buf + (size_t)tid * chunk, chunk, lp->pf);
    }
    t1 = timer_now();
    *out |= acc;
    return t1 - t0;
}

/* Bytes of the probe's buffer: BW_L3_FACTOR x all the L3 instances
 * together, at least BW_LLC_FACTOR x llc_bytes, at most a quarter of the
 * physical memory (when known). */
static size_t bw_buffer_bytes(size_t llc_bytes, int l3_instances)
{
    size_t want = (size_t)BW_L3_FACTOR * llc_bytes * (size_t)(l3_instances > 0 ? l3_instances : 1);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (want < (size_t)BW_LLC_FACTOR * llc_bytes)
        want = (size_t)BW_LLC_FACTOR * llc_bytes;
    if (pages > 0 && page > 0 && want > (size_t)pages / 4 * (size_t)page)
        want = (size_t)pages / 4 * (size_t)page;
    return want;
}

static void measure_bandwidth(bench_machine *mc, int threads, size_t llc_bytes,
                              int l3_instances)
{
    double times[BW_REPS], t, t0 = timer_now();
    size_t chunk, total;
    unsigned char *buf;
    volatile uint64_t keep;
    uint64_t acc = 0;
    /* The candidate read loops, plain first; the fastest one is timed. */
    bw_loop loops[2 + 2 * BW_PF_N];
    int nloops = 0, best = 0, passes = 1, r, i;
    char how[96];

    loops[nloops++] = (bw_loop){or_scalar, 0, "8-byte loads"};
#if BM_X86
    {
        const int z = has_word(smm_cpu_features(), "avx512f");
        if (z || has_word(smm_cpu_features(), "avx2")) {
            static const size_t dist[BW_PF_N] = BW_PF_DIST;
            nloops = 0;
            loops[nloops++] = (bw_loop){z ? or_avx512 : or_avx2, 0,
                                        z ? "64-byte loads (AVX-512)" : "32-byte loads (AVX2)"};
            for (i = 0; i < BW_PF_N; i++) {
                loops[nloops++] = (bw_loop){z ? or_avx512_t0 : or_avx2_t0, dist[i], "prefetcht0"};
                loops[nloops++] = (bw_loop){z ? or_avx512_nta : or_avx2_nta, dist[i], "prefetchnta"};
            }
            loops[nloops++] = (bw_loop){z ? or_avx512_t0t1 : or_avx2_t0t1, dist[0],
                                        "prefetcht1 " BW_STR(BW_PF_FAR_KIB) " KiB and prefetcht0"};
        }
    }
#endif
    /* Each thread's chunk a multiple of 4 KiB (and so of 512 bytes). */
    chunk = (bw_buffer_bytes(llc_bytes, l3_instances) / (size_t)threads + 4095) &
            ~(size_t)4095;
    total = chunk * (size_t)threads;
    buf = buf_alloc(total);
    if (!buf) {
        snprintf(mc->bw_how, sizeof mc->bw_how, "not measured: out of memory for "
                 "%zu MiB", total >> 20);
        return;
    }
    /* Each thread writes its own chunk first (its pages near it). */
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        memset(buf + (size_t)tid * chunk, 0x5a, chunk);
    }
    /* Warm-up pass; then every loop's best of BW_PICK_ROUNDS single passes
     * (the rounds interleave the loops, so that a slow moment hurts them
     * alike) picks the loop, whose pass time sets the passes per
     * repetition: enough for BW_REP_S seconds, far above a scheduler tick. */
    (void)bw_rep(buf, chunk, threads, &loops[0], 1, &acc);
    {
        double pick[2 + 2 * BW_PF_N];
        for (i = 0; i < nloops; i++)
            pick[i] = 1e30;
        for (r = 0; r < BW_PICK_ROUNDS; r++)
            for (i = 0; i < nloops; i++) {
                t = bw_rep(buf, chunk, threads, &loops[i], 1, &acc);
                if (t < pick[i])
                    pick[i] = t;
            }
        for (i = 1; i < nloops; i++)
            if (pick[i] < pick[best])
                best = i;
        t = pick[best];
    }
    if (t > 0.0 && t < BW_REP_S)
        passes = (int)(BW_REP_S / t + 0.5);
    if (passes < 1)
        passes = 1;
    for (r = 0; r < BW_REPS; r++)
        times[r] = bw_rep(buf, chunk, threads, &loops[best], passes, &acc);
    keep = acc;
    (void)keep;
    free(buf);
    /* times sorted: the fastest repetition gives the highest rate */
    t = bench_median(times, BW_REPS);
    mc->bw_max_gbps = (double)total * passes / times[0] * 1e-9;
    mc->bw_median_gbps = (double)total * passes / t * 1e-9;
    mc->bw_min_gbps = (double)total * passes / times[BW_REPS - 1] * 1e-9;
    mc->bw_gbps = mc->bw_max_gbps;
    mc->bw_bytes = total;
    mc->bw_passes = passes;
    mc->bw_reps = BW_REPS;
    if (loops[best].pf > 0)
        snprintf(how, sizeof how, "%s, %s %zu KiB ahead", loops[0].how, loops[best].how,
                 loops[best].pf >> 10);
    else
        snprintf(how, sizeof how, "%s", loops[0].how);
    if (nloops > 1)
        snprintf(mc->bw_how, sizeof mc->bw_how, "%s: the fastest of %d read loops", how, nloops);
    else
        snprintf(mc->bw_how, sizeof mc->bw_how, "%s", how);
    mc->bw_s = timer_now() - t0;
}

void bench_machine_measure(bench_machine *mc, int threads, size_t llc_bytes,
                           int l3_instances)
{
    memset(mc, 0, sizeof *mc);
    if (threads < 1)
        threads = 1;
    mc->threads = threads;
    measure_peak(mc, threads);
    measure_tile_peak(mc, threads);
    measure_bandwidth(mc, threads, llc_bytes, l3_instances);
}
