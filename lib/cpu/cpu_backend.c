/*
 * cpu_backend.c - the CPU backend's registration: probe, per-context kernel
 * choice, and the operations table (smm_cpu_ops).
 *
 * The kernel table is chosen once per context from the CPU features found by
 * lib/probe.c, highest level first. The environment variable SMM_CPU_ISA
 * caps the level (scalar | avx2 | avx_vnni | avx512_vnni | amx_int8, as oneDNN's
 * ONEDNN_MAX_CPU_ISA), so every level can be tested on a machine that has a
 * higher one; every level computes the same bits.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The ISA levels, lowest first. */
enum { LVL_SCALAR, LVL_AVX2, LVL_AVX_VNNI, LVL_AVX512_VNNI, LVL_AMX_INT8, LVL_COUNT };
static const char *const level_names[LVL_COUNT] = {"scalar", "avx2", "avx_vnni", "avx512_vnni",
                                                   "amx_int8"};

/* Can this CPU, OS and build run the level? Else *why says what is missing.
 * ask: for amx_int8 on Linux, ask for the process's tile-state permission
 * (a process-wide change, so only when the level is about to be chosen;
 * without ask the level is taken to run when the CPU and OS support it). */
static int level_runs(int lvl, const char **why, int ask)
{
    const smm_cpu_info *ci = smm_cpu_info_get();
    /* lib/probe.c already clears avx2/fma without OS YMM support and the
     * avx512 features without OS ZMM support; checked again here. */
    const int avx2 = ci->avx2 && ci->fma && ci->os_ymm;
    switch (lvl) {
    case LVL_SCALAR:
        return 1;
    case LVL_AVX2:
        *why = !smm_cpu_kernels_avx2 ? "built without AVX2 kernels"
                                     : "no avx2+fma, or the OS does not save YMM state";
        return smm_cpu_kernels_avx2 && avx2;
    case LVL_AVX_VNNI:
        *why = !smm_cpu_vnni_avx ? "built without AVX-VNNI kernels"
                                 : "no avx_vnni+avx2+fma, or the OS does not save YMM state";
        return smm_cpu_vnni_avx && smm_cpu_kernels_avx2 && avx2 && ci->avx_vnni;
    case LVL_AVX512_VNNI:
        *why = !smm_cpu_vnni_avx512
                   ? "built without AVX-512 VNNI kernels"
                   : "no avx512f+bw+vl+avx512_vnni, or the OS does not save ZMM state";
        return smm_cpu_vnni_avx512 && smm_cpu_kernels_avx2 && avx2 && ci->os_zmm && ci->avx512f &&
               ci->avx512bw && ci->avx512vl && ci->avx512_vnni;
    case LVL_AMX_INT8:
        /* Also runs the AVX-512 VNNI level's kernels (small M, K tails). */
        if (!smm_cpu_vnni_amx) {
            *why = "built without AMX kernels";
            return 0;
        }
        if (!level_runs(LVL_AVX512_VNNI, why, 0))
            return 0;
        *why = "no amx_tile+amx_int8, or the OS does not manage the tile state";
        if (!(ci->amx_tile && ci->amx_int8 && ci->os_amx))
            return 0;
        *why = "the OS refused this process the tile state (arch_prctl)";
        return !ask || smm_cpu_amx_permit();
    default:
        return 0;
    }
}

/* The kernels of a context: the best level this CPU runs, capped by
 * SMM_CPU_ISA (scalar | avx2 | avx_vnni | avx512_vnni | amx_int8, "c" a
 * synonym of scalar; unknown values cap nothing and say so). Three more
 * values, a testing aid, select the portable emulation of a VNNI or AMX
 * level's blocking (avx512_vnni_emulated, avx_vnni_emulated,
 * amx_int8_emulated). why (cap bytes) receives the
 * level and the reason; st gets the tables. */
static void cpu_select(smm_cpu_state *st, char *why, size_t cap)
{
    const char *env = getenv("SMM_CPU_ISA");
    int max = LVL_COUNT - 1, unknown = 0;
    const smm_cpu_vnni_kernels *emulated = NULL;
    if (env && *env) {
        if (strcasecmp(env, "scalar") == 0 || strcasecmp(env, "c") == 0)
            max = LVL_SCALAR;
        else if (strcasecmp(env, "avx2") == 0)
            max = LVL_AVX2;
        else if (strcasecmp(env, "avx_vnni") == 0)
            max = LVL_AVX_VNNI;
        else if (strcasecmp(env, "avx512_vnni") == 0)
            max = LVL_AVX512_VNNI;
        else if (strcasecmp(env, "amx_int8") == 0)
            max = LVL_AMX_INT8;
        else if (strcasecmp(env, "amx_int8_emulated") == 0)
            emulated = &smm_cpu_vnni_amx_emulated;
        else if (strcasecmp(env, "avx512_vnni_emulated") == 0)
            emulated = &smm_cpu_vnni_avx512_emulated;
        else if (strcasecmp(env, "avx_vnni_emulated") == 0)
            emulated = &smm_cpu_vnni_avx_emulated;
        else
            unknown = 1;
    }

    const int capped = env && *env && !unknown; /* a level was named */

    /* Every level this machine runs, for the reason string. */
    char runs[80] = "";
    for (int l = 0; l < LVL_COUNT; l++) {
        const char *w = NULL;
        if (level_runs(l, &w, 0)) {
            size_t len = strlen(runs);
            snprintf(runs + len, sizeof runs - len, "%s%s", len ? " " : "", level_names[l]);
        }
    }

    const char *no = NULL;
    const int avx2 = level_runs(LVL_AVX2, &no, 0);
    st->k = avx2 ? smm_cpu_kernels_avx2 : &smm_cpu_kernels_c;
    st->v = NULL;
    if (emulated) {
        st->v = emulated;
        snprintf(why, cap, "level %s (SMM_CPU_ISA=%s: portable C emulation of the VNNI data flow, "
                 "a testing aid; packed format %s); levels this CPU runs: %s",
                 emulated->name, env, emulated->format, runs);
        return;
    }

    /* The highest level at or below the cap that runs here, and why the
     * one above it does not. */
    int lvl = max;
    const char *missing = "";
    while (lvl > LVL_SCALAR && !level_runs(lvl, &missing, 1))
        lvl--;
    if (lvl < max)
        level_runs(lvl + 1, &missing, 1);
    switch (lvl) {
    case LVL_AMX_INT8: st->v = smm_cpu_vnni_amx; break;
    case LVL_AVX512_VNNI: st->v = smm_cpu_vnni_avx512; break;
    case LVL_AVX_VNNI: st->v = smm_cpu_vnni_avx; break;
    case LVL_SCALAR: st->k = &smm_cpu_kernels_c; break;
    default: break;
    }
    static const char *const what[LVL_COUNT] = {
        "portable C kernels",
        "AVX2 kernels (int16 vpmaddwd)",
        "AVX-VNNI kernels (vpdpbusd ymm, +128 shift with column-sum compensation)",
        "AVX-512 VNNI kernels (vpdpbusd zmm, +128 shift with column-sum compensation)",
        "AMX-INT8 kernels (tdpbusd on 16 x 16 tiles for M > 16 and for 8 < M <= 16 with "
        "packed weights, AVX-512 VNNI otherwise; +128 shift with column-sum compensation)",
    };
    char because[160];
    if (unknown)
        snprintf(because, sizeof because,
                 "SMM_CPU_ISA=%.24s%s is not a level, so nothing is capped%s%s", env,
                 strlen(env) > 24 ? "..." : "", lvl < max ? "; above it: " : "",
                 lvl < max ? missing : "");
    else if (lvl < max)
        snprintf(because, sizeof because, "above it: %s%s%s", missing,
                 capped ? "; SMM_CPU_ISA caps at " : "", capped ? level_names[max] : "");
    else if (capped)
        snprintf(because, sizeof because, "SMM_CPU_ISA=%s caps the level", env);
    else
        snprintf(because, sizeof because, "the highest level");
    snprintf(why, cap, "level %s: %s (%s); levels this CPU runs: %s", level_names[lvl], what[lvl],
             because, runs);
}

static int cpu_probe(const char **reason)
{
    static char msg[640];
    char why[512];
    smm_cpu_state st;
    cpu_select(&st, why, sizeof why);
#ifdef _OPENMP
    snprintf(msg, sizeof msg, "%s; OpenMP, up to %d threads", why, omp_get_max_threads());
#else
    snprintf(msg, sizeof msg, "%s; built without OpenMP: one thread", why);
#endif
    *reason = msg;
    return 1;
}

static smm_status cpu_init(smm_context *ctx)
{
    smm_cpu_state *st = smm_host_alloc(ctx, sizeof *st, 64);
    if (!st)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "cpu backend: out of memory");
    char why[512];
    cpu_select(st, why, sizeof why);
    ctx->backend_data = st;
    return SMM_OK;
}

static void cpu_fini(smm_context *ctx)
{
    smm_host_free(ctx, ctx->backend_data);
    ctx->backend_data = NULL;
}

/* The scalar and AVX2 levels share gemm.c's packed layout; each VNNI
 * vector width has its own (a packed B of another width is an error,
 * lib/check.c). */
static const char *cpu_packed_format(const smm_context *ctx)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    return st && st->v ? st->v->format : smm_cpu_packed_format;
}

static smm_status cpu_mm(smm_context *ctx, const smm_mm_problem *p)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    return st && st->v ? smm_cpu_vnni_mm(ctx, p) : smm_cpu_mm(ctx, p);
}

static smm_status packed_overflow(smm_context *ctx, int64_t n, int64_t k)
{
    return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                         "smm_pack_b: the byte size of the packed copy of %" PRId64 " x %" PRId64
                         " overflows", n, k);
}

smm_status smm_cpu_packed_alloc(smm_context *ctx, int64_t n, int64_t k, size_t header_bytes,
                                const int64_t (*size)[4], int nparts, unsigned char **mem,
                                size_t *bytes, size_t *off)
{
    int64_t total = (int64_t)align64(header_bytes);
    int ok = 1;

    for (int i = 0; ok && i < nparts; i++) {
        int64_t part = 1;
        for (int j = 0; ok && j < 4; j++)
            ok = !__builtin_mul_overflow(part, size[i][j], &part);
        off[i] = (size_t)total;
        ok = ok && !__builtin_add_overflow(total, part, &total) &&
             !__builtin_add_overflow(total, (int64_t)63, &total);
        total &= ~(int64_t)63;
    }
    if (!ok || (uint64_t)total > SIZE_MAX)
        return packed_overflow(ctx, n, k);
    *mem = smm_host_alloc(ctx, (size_t)total, 64);
    if (!*mem)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "cpu backend: out of memory (%" PRId64
                             " bytes for a packed B)", total);
    *bytes = (size_t)total;
    return SMM_OK;
}

static smm_status cpu_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb, smm_packed_b *pb)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    /* Any such copy overflows; refused before the builders round N and K
     * up to whole groups, which would be signed overflow near INT64_MAX. */
    if (pb->n > INT64_MAX / 2 || pb->k > INT64_MAX / 2)
        return packed_overflow(ctx, pb->n, pb->k);
    return st && st->v ? smm_cpu_vnni_pack_b(ctx, b, ldb, pb) : smm_cpu_pack_b(ctx, b, ldb, pb);
}

const smm_backend_ops smm_cpu_ops = {
    .id = SMM_BACKEND_CPU,
    .name = "cpu",
    .probe = cpu_probe,
    .init = cpu_init,
    .fini = cpu_fini,
    .mm = cpu_mm,
    .quantize = smm_cpu_quantize,
    .packed_format = cpu_packed_format,
    .pack_b = cpu_pack_b,
};
