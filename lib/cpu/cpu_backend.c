/*
 * cpu_backend.c - the CPU backend's registration: probe, per-context kernel
 * choice, and the operations table (smm_cpu_ops).
 *
 * The kernels are chosen once per context, by level (levels.c: one
 * descriptor per level, in one ordered table): the highest level this CPU
 * runs, capped by the environment variable SMM_CPU_ISA.
 */
#include "config.h"
#include "cpu/cpu_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* A context's kernels: its level's (levels.c); why (cap bytes) receives the
 * level and the reason. */
static void cpu_select(smm_cpu_state *st, char *why, size_t cap)
{
    st->level = smm_cpu_level_select(&st->k, why, cap);
    st->v = st->level->v ? *st->level->v : NULL;
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

/* The context's level's packed format: the scalar and AVX2 levels share
 * gemm.c's layout; each VNNI vector width has its own (a packed B of
 * another format is an error, lib/check.c). */
static const char *cpu_packed_format(const smm_context *ctx)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    return st ? st->level->format : smm_cpu_packed_format;
}

static smm_status cpu_mm(smm_context *ctx, const smm_mm_problem *p)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    return st && st->v ? smm_cpu_vnni_mm(ctx, p) : smm_cpu_mm(ctx, p);
}

/* smm_linear: fused on the VNNI levels (quantization in the pass that
 * packs A'), the two calls on the others. */
static smm_status cpu_linear(smm_context *ctx, const smm_quantize_args *q, const smm_mm_problem *p)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    if (st && st->v)
        return smm_cpu_vnni_linear(ctx, q, p);
    smm_status s = smm_cpu_quantize(ctx, q);
    return s == SMM_OK ? smm_cpu_mm(ctx, p) : s;
}

/* smm_scaled_epilogue: the level's epilogue (the one its matrix
 * multiplications end with) on each row of the caller's accumulators,
 * the rows shared among the threads. int32 and uint32_t are the same
 * bits: the epilogue reads them modulo 2^32, as it reads its own sums. */
typedef struct {
    smm_cpu_epilogue_fn epi;
    smm_cpu_epilogue e;
    const smm_epilogue_args *a;
} epilogue_job;

static void epilogue_range(const void *job, int64_t r0, int64_t r1)
{
    const epilogue_job *j = job;
    const uint32_t *colsum = (const uint32_t *)j->a->colsum_b;   /* NULL without azp */
    for (int64_t i = r0; i < r1; i++)
        j->epi(&j->e, i, 0, j->a->n, (const uint32_t *)(j->a->acc + i * j->a->ldacc), colsum);
}

static smm_status cpu_epilogue(smm_context *ctx, const smm_epilogue_args *a)
{
    const smm_cpu_state *st = (const smm_cpu_state *)ctx->backend_data;
    const epilogue_job job = {
        st ? st->k->epilogue : smm_cpu_kernels_c.epilogue,
        {a->scale_a, a->scale_a_len, a->scale_b, a->scale_b_len, a->bias, a->azp, a->azp_len,
         a->c, a->ldc, a->c_dtype},
        a,
    };
    smm_cpu_run_rows(ctx, a->m, a->n, epilogue_range, &job);
    return SMM_OK;
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
    .linear = cpu_linear,
    .epilogue = cpu_epilogue,
    .packed_format = cpu_packed_format,
    .pack_b = cpu_pack_b,
};
