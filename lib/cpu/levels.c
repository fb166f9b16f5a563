/*
 * levels.c - the CPU backend's kernel levels: one descriptor per level
 * (name, feature test, kernels, packed-B format, description) in one
 * ordered table, the walk that chooses a context's level, and the public
 * query of the levels (smm_cpu_levels, smm_cpu_level_chosen).
 *
 * The table is ordered lowest level first; the backend takes the highest
 * real level this CPU, OS and build run, capped by the environment
 * variable SMM_CPU_ISA (as oneDNN's ONEDNN_MAX_CPU_ISA), so every level can
 * be tested on a machine that has a higher one. The emulations at the end
 * (testing aids) are portable C with a real level's blocking and packed
 * format; they are chosen only by name. Every level computes the same bits.
 *
 * Adding a level: its kernels in their own file (a table the build leaves
 * NULL when the compiler cannot build it), that file in lib/Makefile.am,
 * a feature test and a descriptor here, and the level in the man page's
 * SMM_CPU_ISA paragraph (doc/scaledmm.1).
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ */
/* Feature tests                                                       */
/* ------------------------------------------------------------------ */

/* lib/probe.c already clears avx2/fma without OS YMM support and the
 * avx512 features without OS ZMM support; checked again here. */
static int avx2_supported(const smm_cpu_info *ci, const char **why)
{
    *why = "no avx2+fma, or the OS does not save YMM state";
    return ci->avx2 && ci->fma && ci->os_ymm;
}

static int avx_vnni_supported(const smm_cpu_info *ci, const char **why)
{
    const char *no;
    *why = "no avx_vnni+avx2+fma, or the OS does not save YMM state";
    return avx2_supported(ci, &no) && ci->avx_vnni;
}

static int avx512_vnni_supported(const smm_cpu_info *ci, const char **why)
{
    const char *no;
    *why = "no avx512f+bw+vl+avx512_vnni, or the OS does not save ZMM state";
    return avx2_supported(ci, &no) && ci->os_zmm && ci->avx512f && ci->avx512bw &&
           ci->avx512vl && ci->avx512_vnni;
}

/* The AMX level also runs the AVX-512 VNNI level's kernels (small M, K
 * tails). */
static int amx_int8_supported(const smm_cpu_info *ci, const char **why)
{
    if (!smm_cpu_vnni_avx512) {
        *why = "built without the avx512_vnni kernels it also runs";
        return 0;
    }
    if (!avx512_vnni_supported(ci, why))
        return 0;
    *why = "no amx_tile+amx_int8, or the OS does not manage the tile state";
    return ci->amx_tile && ci->amx_int8 && ci->os_amx;
}

/* ------------------------------------------------------------------ */
/* The table                                                           */
/* ------------------------------------------------------------------ */

static const smm_cpu_kernels *const kernels_c = &smm_cpu_kernels_c;
static const smm_cpu_vnni_kernels *const avx_emulated = &smm_cpu_vnni_avx_emulated;
static const smm_cpu_vnni_kernels *const avx512_emulated = &smm_cpu_vnni_avx512_emulated;
static const smm_cpu_vnni_kernels *const amx_emulated = &smm_cpu_vnni_amx_emulated;

const smm_cpu_level smm_cpu_level_table[] = {
    {
        .name = "scalar",
        .alias = "c",
        .description = "portable C kernels",
        .k = &kernels_c,
        .format = smm_cpu_packed_format,
    },
    {
        .name = "avx2",
        .description = "AVX2 kernels (int16 vpmaddwd)",
        .supported = avx2_supported,
        .k = &smm_cpu_kernels_avx2,
        .format = smm_cpu_packed_format,
    },
    {
        .name = "avx_vnni",
        .description = "AVX-VNNI kernels (vpdpbusd ymm, +128 shift with column-sum compensation)",
        .supported = avx_vnni_supported,
        .k = &smm_cpu_kernels_avx2,
        .v = &smm_cpu_vnni_avx,
        .format = SMM_CPU_VNNI256_FORMAT,
    },
    {
        .name = "avx512_vnni",
        .description = "AVX-512 VNNI kernels (vpdpbusd zmm, +128 shift with column-sum "
                       "compensation)",
        .supported = avx512_vnni_supported,
        .k = &smm_cpu_kernels_avx2,
        .v = &smm_cpu_vnni_avx512,
        .format = SMM_CPU_VNNI512_FORMAT,
    },
    {
        .name = "amx_int8",
        .description = "AMX-INT8 kernels (tdpbusd on 16 x 16 tiles for M > 16 and for "
                       "8 < M <= 16 with packed weights, AVX-512 VNNI otherwise; +128 shift "
                       "with column-sum compensation)",
        .supported = amx_int8_supported,
        .permit = smm_cpu_amx_permit,
        .k = &smm_cpu_kernels_avx2,
        .v = &smm_cpu_vnni_amx,
        .format = SMM_CPU_VNNI512_FORMAT,
    },
    /* The emulations (SMM_CPU_ISA=<name>; smm_cpu_levels' EMULATED set). */
    {
        .name = "avx_vnni_emulated",
        .description = "portable C emulation of the avx_vnni data flow, a testing aid",
        .v = &avx_emulated,
        .format = SMM_CPU_VNNI256_FORMAT,
        .emulation = 1,
    },
    {
        .name = "avx512_vnni_emulated",
        .description = "portable C emulation of the avx512_vnni data flow, a testing aid",
        .v = &avx512_emulated,
        .format = SMM_CPU_VNNI512_FORMAT,
        .emulation = 1,
    },
    {
        .name = "amx_int8_emulated",
        .description = "portable C emulation of the amx_int8 blocking, a testing aid",
        .v = &amx_emulated,
        .format = SMM_CPU_VNNI512_FORMAT,
        .emulation = 1,
    },
};
const int smm_cpu_level_count = (int)(sizeof smm_cpu_level_table / sizeof smm_cpu_level_table[0]);

/* ------------------------------------------------------------------ */
/* The walk                                                            */
/* ------------------------------------------------------------------ */

int smm_cpu_level_runs(const smm_cpu_level *l, const char **why, int ask)
{
    if (l->emulation)
        return 1;
    if ((l->k && !*l->k) || (l->v && !*l->v)) {
        *why = "built without its kernels";
        return 0;
    }
    if (l->supported && !l->supported(smm_cpu_info_get(), why))
        return 0;
    if (l->permit && ask) {
        *why = "the OS refused this process the tile state (arch_prctl)";
        return l->permit();
    }
    return 1;
}

/* The best int16 table this machine runs (the emulations' epilogue and
 * quantizer). */
static const smm_cpu_kernels *best_int16(void)
{
    const smm_cpu_kernels *k = &smm_cpu_kernels_c;
    for (int i = 0; i < smm_cpu_level_count; i++) {
        const smm_cpu_level *l = &smm_cpu_level_table[i];
        const char *no;
        if (!l->emulation && !l->v && l->k && smm_cpu_level_runs(l, &no, 0))
            k = *l->k;
    }
    return k;
}

/* The level SMM_CPU_ISA names (its name or alias, any case), or -1. */
static int level_named(const char *s)
{
    for (int i = 0; i < smm_cpu_level_count; i++) {
        const smm_cpu_level *l = &smm_cpu_level_table[i];
        if (strcasecmp(s, l->name) == 0 || (l->alias && strcasecmp(s, l->alias) == 0))
            return i;
    }
    return -1;
}

const smm_cpu_level *smm_cpu_level_select(const smm_cpu_kernels **k, char *why, size_t cap)
{
    const char *env = getenv("SMM_CPU_ISA");
    const smm_cpu_level *const t = smm_cpu_level_table;
    int max = 0, named = -1;
    for (int i = 0; i < smm_cpu_level_count; i++)
        if (!t[i].emulation)
            max = i;   /* the highest real level */
    if (env && *env)
        named = level_named(env);
    const int unknown = env && *env && named < 0;
    const int capped = named >= 0 && !t[named].emulation;
    if (capped)
        max = named;

    /* Every level this machine runs, for the reason string. */
    char runs[128] = "";
    for (int i = 0; i < smm_cpu_level_count; i++) {
        const char *no;
        if (!t[i].emulation && smm_cpu_level_runs(&t[i], &no, 0)) {
            size_t len = strlen(runs);
            snprintf(runs + len, sizeof runs - len, "%s%s", len ? " " : "", t[i].name);
        }
    }

    if (named >= 0 && t[named].emulation) {
        *k = best_int16();
        if (why)
            snprintf(why, cap, "level %s (SMM_CPU_ISA=%s: %s; packed format %s); levels this "
                     "CPU runs: %s", t[named].name, env, t[named].description, t[named].format,
                     runs);
        return &t[named];
    }

    /* The highest real level at or below the cap that runs here (level 0
     * runs everywhere), and why the one above it does not. */
    int lvl = max;
    const char *missing = "";
    while (lvl > 0 && (t[lvl].emulation || !smm_cpu_level_runs(&t[lvl], &missing, 1)))
        lvl--;
    int above = lvl + 1;
    while (above <= max && t[above].emulation)
        above++;
    if (above <= max)
        smm_cpu_level_runs(&t[above], &missing, 1);
    *k = t[lvl].k ? *t[lvl].k : best_int16();
    if (!why)
        return &t[lvl];
    char because[200];
    if (unknown)
        snprintf(because, sizeof because,
                 "SMM_CPU_ISA=%.24s%s is not a level, so nothing is capped%s%s%s%s", env,
                 strlen(env) > 24 ? "..." : "", above <= max ? "; above it, " : "",
                 above <= max ? t[above].name : "", above <= max ? ": " : "",
                 above <= max ? missing : "");
    else if (above <= max)
        snprintf(because, sizeof because, "above it, %s: %s%s%s", t[above].name, missing,
                 capped ? "; SMM_CPU_ISA caps at " : "", capped ? t[max].name : "");
    else if (capped)
        snprintf(because, sizeof because, "SMM_CPU_ISA=%s caps the level", env);
    else
        snprintf(because, sizeof because, "the highest level");
    snprintf(why, cap, "level %s: %s (%s); levels this CPU runs: %s", t[lvl].name,
             t[lvl].description, because, runs);
    return &t[lvl];
}

/* ------------------------------------------------------------------ */
/* The public query                                                    */
/* ------------------------------------------------------------------ */

SMM_API smm_status smm_cpu_levels(smm_cpu_level_set set, const char **names, int max, int *count)
{
    if ((int)set < (int)SMM_CPU_LEVELS_RUNNABLE || (int)set > (int)SMM_CPU_LEVELS_EMULATED ||
        max < 0 || (max > 0 && !names) || !count)
        return SMM_ERR_INVALID_ARG;
    int n = 0;
    for (int i = 0; i < smm_cpu_level_count; i++) {
        const smm_cpu_level *l = &smm_cpu_level_table[i];
        const char *no;
        int in;
        switch (set) {
        case SMM_CPU_LEVELS_RUNNABLE: in = !l->emulation && smm_cpu_level_runs(l, &no, 0); break;
        case SMM_CPU_LEVELS_ALL: in = !l->emulation; break;
        default: in = l->emulation; break;
        }
        if (!in)
            continue;
        if (n < max)
            names[n] = l->name;
        n++;
    }
    *count = n;
    return SMM_OK;
}

SMM_API const char *smm_cpu_level_chosen(void)
{
    const smm_cpu_kernels *k;
    return smm_cpu_level_select(&k, NULL, 0)->name;
}

SMM_API const char *smm_cpu_level_description(const char *name)
{
    int i = name ? level_named(name) : -1;
    return i >= 0 ? smm_cpu_level_table[i].description : NULL;
}
