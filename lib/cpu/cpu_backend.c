/*
 * cpu_backend.c - the CPU backend's registration: probe, per-context kernel
 * choice, and the operations table (smm_cpu_ops).
 *
 * The kernel table is chosen once per context from the CPU features found by
 * lib/probe.c, highest level first. The environment variable SMM_CPU_ISA
 * caps the level (scalar | avx2 | avx_vnni | avx512_vnni, as oneDNN's
 * ONEDNN_MAX_CPU_ISA), so every level can be tested on a machine that has a
 * higher one; every level computes the same bits.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The best kernel table this CPU runs, capped by SMM_CPU_ISA
 * (scalar | avx2 | avx_vnni | avx512_vnni; "c" is a synonym of scalar;
 * unknown values cap nothing). *why names the table and the reason. */
static const smm_cpu_kernels *cpu_select_kernels(const char **why)
{
    const char *cap = getenv("SMM_CPU_ISA");
    int allow_avx2 = 1;
    if (cap && *cap && (strcasecmp(cap, "scalar") == 0 || strcasecmp(cap, "c") == 0))
        allow_avx2 = 0;
    const smm_cpu_info *ci = smm_cpu_info_get();
    if (!allow_avx2) {
        *why = "portable C kernels (SMM_CPU_ISA caps the level)";
    } else if (!smm_cpu_kernels_avx2) {
        *why = "portable C kernels (built without AVX2 kernels)";
    } else if (!(ci->avx2 && ci->fma && ci->os_ymm)) {
        *why = "portable C kernels (no AVX2+FMA, or the OS does not save YMM state)";
    } else {
        *why = "AVX2 kernels (C compiled for avx2,fma)";
        return smm_cpu_kernels_avx2;
    }
    return &smm_cpu_kernels_c;
}

static int cpu_probe(const char **reason)
{
    static char msg[160];
    const char *why;
    cpu_select_kernels(&why);
#ifdef _OPENMP
    snprintf(msg, sizeof msg, "%s, OpenMP, up to %d threads", why, omp_get_max_threads());
#else
    snprintf(msg, sizeof msg, "%s, built without OpenMP: one thread", why);
#endif
    *reason = msg;
    return 1;
}

static smm_status cpu_init(smm_context *ctx)
{
    smm_cpu_state *st = smm_host_alloc(ctx, sizeof *st, 64);
    if (!st)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "cpu backend: out of memory");
    const char *why;
    st->k = cpu_select_kernels(&why);
    ctx->backend_data = st;
    return SMM_OK;
}

static void cpu_fini(smm_context *ctx)
{
    smm_host_free(ctx, ctx->backend_data);
    ctx->backend_data = NULL;
}

/* Every kernel level computes from the same packed layout (gemm.c). */
static const char *cpu_packed_format(const smm_context *ctx)
{
    (void)ctx;
    return smm_cpu_packed_format;
}

const smm_backend_ops smm_cpu_ops = {
    SMM_BACKEND_CPU,
    "cpu",
    cpu_probe,
    cpu_init,
    cpu_fini,
    smm_cpu_mm,
    smm_cpu_quantize,
    cpu_packed_format,
    smm_cpu_pack_b,
};
