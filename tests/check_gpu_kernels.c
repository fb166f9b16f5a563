/*
 * check_gpu_kernels.c - every GPU GEMM kernel family, forced in turn
 * through the plugin's internal force interface (lib/rocm/kernels.h), on
 * the edge shapes of its tiles, compared bit for bit with the reference
 * backend (lib/reference.c, through the public API on a REFERENCE
 * context); and the GPU quantizer against the reference on random cases.
 *
 * Shapes: M, N and K below, at and across the tile sizes (8, 16, 32, 64,
 * 128, 256), odd K, K = 0, a K whose int32 sums wrap; random row strides
 * and 0..15-byte base offsets (unaligned rows take the guarded paths);
 * every output type; per-tensor / per-token scale_a, per-tensor /
 * per-channel scale_b, optional bias, optional per-tensor / per-token
 * azp, special scale and bias values (NaN, Inf, subnormals, -0, values
 * that overflow float16 / bfloat16), azp values that wrap; a raw or a
 * packed B (the decode kernels read a packed B early); the decode
 * kernels' row groups, clusters, stages and shared-memory form forced at
 * random. C is poisoned around and inside its strided view: the bytes
 * outside the view must be unchanged, as the reference leaves them.
 *
 * A forced kernel that cannot run a problem gives way to the automatic
 * choice (kernels.h); the suite prints, per family, how many cases ran it.
 * Families a device lacks (sm_90a kernels on other GPUs) may run no case;
 * with SMM_TEST_GPU_ALL_KERNELS=1 every family of the vendor must run.
 *
 * Without a GPU backend that can run here (no device, or a build without
 * one), the suite exits 77 (SKIP) and says why.
 */
#include "config.h"
#include "testutil.h"

#define SMM_GPU_FORCE_ONLY
#include "../lib/rocm/kernels.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static smm_backend gpu_backend;
static smm_gpu_force_set_fn force_set;
static smm_gpu_kernel_counts_fn kernel_counts;
static smm_gpu_kernel_name_fn kernel_name;

/* Per family: cases forced, cases in which the forced kernel ran. */
static long fam_cases[SMM_GPU_KERNEL_COUNT], fam_ran[SMM_GPU_KERNEL_COUNT];
/* AUTO: which kernel the rules chose, per kernel. */
static long auto_chose[SMM_GPU_KERNEL_COUNT];

static const int nvidia_families[] = {
    SMM_GPU_KERNEL_AUTO, SMM_GPU_KERNEL_GENERIC, SMM_GPU_KERNEL_MMA,
    SMM_GPU_KERNEL_WGMMA, SMM_GPU_KERNEL_TMA, SMM_GPU_KERNEL_DECODE,
    SMM_GPU_KERNEL_DECODE_TMA, SMM_GPU_KERNEL_DECODE_RING};
static const int amd_families[] = {SMM_GPU_KERNEL_AUTO, SMM_GPU_KERNEL_GENERIC,
                                   SMM_GPU_KERNEL_MFMA};

static int is_decode(int kernel)
{
    return kernel == SMM_GPU_KERNEL_DECODE || kernel == SMM_GPU_KERNEL_DECODE_TMA ||
           kernel == SMM_GPU_KERNEL_DECODE_RING;
}

/* Finds the force interface in the plugin the library loaded for the
 * GPU context (the same path: dlopen returns the loaded copy). */
static void find_force_interface(void)
{
    const char *dir = getenv("SMM_GPU_PLUGIN_DIR");
    const char *file =
        gpu_backend == SMM_BACKEND_CUDA ? "libscaledmm-cuda.so" : "libscaledmm-rocm.so";
    char path[4096];
    void *h;

    ck_assert_msg(dir != NULL && *dir, "SMM_GPU_PLUGIN_DIR is not set (make check sets it)");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "the GPU plugin %s is not loaded: %s", path, dlerror());
    force_set = (smm_gpu_force_set_fn)dlsym(h, "smm_gpu_force_set");
    kernel_counts = (smm_gpu_kernel_counts_fn)dlsym(h, "smm_gpu_kernel_counts");
    kernel_name = (smm_gpu_kernel_name_fn)dlsym(h, "smm_gpu_kernel_name");
    ck_assert_msg(force_set && kernel_counts && kernel_name,
                  "%s does not export the force interface (plugin.map)", path);
}

/* ---- random inputs ---- */

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A scale or bias: mostly moderate, special_pct percent special values. */
static float rnd_float(cf_rng *r, int special_pct, float mag)
{
    if (cf_rng_range(r, 0, 99) < special_pct) {
        switch (cf_rng_range(r, 0, 7)) {
        case 0: return f32_of_bits(0x7FC00000u);              /* NaN */
        case 1: return f32_of_bits(0x7F800000u);              /* +Inf */
        case 2: return f32_of_bits(0xFF800000u);              /* -Inf */
        case 3: return f32_of_bits(0x80000000u);              /* -0 */
        case 4: return f32_of_bits((uint32_t)cf_rng_range(r, 1, 0x7FFFFF)); /* subnormal */
        case 5: return 1e30f;                                 /* overflows f16 / bf16 */
        case 6: return -3.0e38f;
        default: return 65504.0f;
        }
    }
    return (float)((double)cf_rng_range(r, -1000000, 1000000) / 1000000.0) * mag;
}

static const int64_t edge_mn[] = {1,  2,  3,  4,  7,   8,   9,   15,  16,  17,  24,  25,
                                  31, 32, 33, 63, 64,  65,  127, 128, 129, 255, 256, 257};
static const int64_t edge_k[] = {0,  1,  3,  4,  15,  16,  17,  31,  32,  33,  63,
                                 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4096};

static int64_t pick(cf_rng *r, const int64_t *v, int n)
{
    return v[cf_rng_range(r, 0, n - 1)];
}

/* A row stride for rows of `len` bytes / elements: often a multiple of
 * 16 (the aligned paths), else anything from len up. */
static int64_t rnd_ld(cf_rng *r, int64_t len, int64_t rows)
{
    if (rows <= 1 && cf_rng_range(r, 0, 1))
        return len > 0 ? len : 1;
    if (cf_rng_range(r, 0, 9) < 6)
        return (len + 15) / 16 * 16 + 16 * cf_rng_range(r, 0, 2);
    return (len > 0 ? len : 1) + cf_rng_range(r, 0, 17);
}

static size_t dtype_size(smm_dtype t)
{
    return t == SMM_DTYPE_I32 || t == SMM_DTYPE_F32 ? 4 : t == SMM_DTYPE_I8 ? 1 : 2;
}

/* ---- one case ---- */

typedef struct gemm_case {
    int64_t m, n, k, lda, ldb, ldc;
    int off_a, off_b, off_c; /* base offsets in bytes (C: in elements) */
    smm_dtype c_dtype;
    int scale_a_per_row, scale_b_per_col, bias, azp; /* azp: 0 none, 1 tensor, 2 row */
    int packed, wrap;
    smm_gpu_force force;
} gemm_case;

/* Device copy of `bytes` bytes of host memory at an offset `off` into a
 * fresh allocation (returned in *base for smm_free). */
static void *to_dev(smm_context *g, const void *src, size_t bytes, size_t off, void **base)
{
    void *p = NULL;
    ck_assert_int_eq(smm_malloc(g, bytes + off + 16, &p), SMM_OK);
    *base = p;
    if (bytes > 0)
        ck_assert_int_eq(smm_memcpy(g, (char *)p + off, src, bytes, SMM_MEMCPY_HOST_TO_DEVICE),
                         SMM_OK);
    return (char *)p + off;
}

/* Runs c on the reference and on the GPU, compares; returns 1 when the
 * forced kernel ran (AUTO: always). */
static int run_case(smm_context *ref, smm_context *g, const gemm_case *c, cf_rng *r)
{
    const int64_t m = c->m, n = c->n, k = c->k;
    const size_t a_bytes = m > 0 ? (size_t)((m - 1) * c->lda + k) : 0;
    const size_t b_bytes = n > 0 ? (size_t)((n - 1) * c->ldb + k) : 0;
    const size_t es = dtype_size(c->c_dtype);
    const size_t c_elems = (size_t)((m - 1) * c->ldc + n);
    const size_t c_bytes = c_elems * es;
    int8_t *a = malloc(a_bytes + 1), *b = malloc(b_bytes + 1);
    unsigned char *c_ref = malloc(c_bytes), *c_gpu = malloc(c_bytes);
    float *sa = malloc(sizeof(float) * (size_t)m), *sb = malloc(sizeof(float) * (size_t)n);
    float *bias = malloc(sizeof(float) * (size_t)n);
    int32_t *azp = malloc(sizeof(int32_t) * (size_t)m);
    size_t i;

    ck_assert(a && b && c_ref && c_gpu && sa && sb && bias && azp);
    for (i = 0; i < a_bytes; i++)
        a[i] = c->wrap ? -128 : (int8_t)cf_rng_range(r, -128, 127);
    for (i = 0; i < b_bytes; i++)
        b[i] = c->wrap ? -128 : (int8_t)cf_rng_range(r, -128, 127);
    for (i = 0; i < c_bytes; i++)
        c_ref[i] = (unsigned char)(0xA5 ^ (i * 7));
    for (int64_t j = 0; j < m; j++) {
        sa[j] = rnd_float(r, 5, 0.05f);
        azp[j] = cf_rng_range(r, 0, 9) == 0 ? (int32_t)(uint32_t)cf_rng_next(r)
                                            : (int32_t)cf_rng_range(r, -128, 127);
    }
    for (int64_t j = 0; j < n; j++) {
        sb[j] = rnd_float(r, 5, 0.05f);
        bias[j] = rnd_float(r, 5, 10.0f);
    }

    /* Device copies. */
    void *ba, *bb, *bc, *bsa, *bsb, *bbias, *bazp;
    const int8_t *da = to_dev(g, a, a_bytes, (size_t)c->off_a, &ba);
    const int8_t *db = to_dev(g, b, b_bytes, (size_t)c->off_b, &bb);
    void *dc = to_dev(g, c_ref, c_bytes, (size_t)c->off_c * es, &bc);
    const float *dsa = to_dev(g, sa, sizeof(float) * (size_t)m, 0, &bsa);
    const float *dsb = to_dev(g, sb, sizeof(float) * (size_t)n, 0, &bsb);
    const float *dbias = to_dev(g, bias, sizeof(float) * (size_t)n, 0, &bbias);
    const int32_t *dazp = to_dev(g, azp, sizeof(int32_t) * (size_t)m, 0, &bazp);
    smm_packed_b *pb = NULL;
    if (c->packed)
        ck_assert_int_eq(smm_pack_b(g, n, k, db, c->ldb, &pb), SMM_OK);

    smm_gpu_counts before, after;
    smm_status st_ref, st_gpu;
    kernel_counts(&before);
    force_set(&c->force);
    if (c->c_dtype == SMM_DTYPE_I32) {
        st_ref = smm_gemm_s8s8s32(ref, m, n, k, a, c->lda, b, c->ldb, (int32_t *)c_ref, c->ldc);
        st_gpu = c->packed ? smm_gemm_s8s8s32_packed(g, m, n, k, da, c->lda, pb, dc, c->ldc)
                           : smm_gemm_s8s8s32(g, m, n, k, da, c->lda, db, c->ldb, dc, c->ldc);
    } else {
        smm_scaled_mm_args x;
        memset(&x, 0, sizeof x);
        x.m = m, x.n = n, x.k = k;
        x.a = a, x.lda = c->lda, x.b = b, x.ldb = c->ldb;
        x.scale_a = sa, x.scale_a_len = c->scale_a_per_row ? m : 1;
        x.scale_b = sb, x.scale_b_len = c->scale_b_per_col ? n : 1;
        x.bias = c->bias ? bias : NULL;
        x.azp = c->azp ? azp : NULL, x.azp_len = c->azp == 2 ? m : 1;
        x.c = c_ref, x.ldc = c->ldc, x.c_dtype = c->c_dtype;
        st_ref = smm_scaled_mm(ref, &x);
        x.a = da, x.b = c->packed ? NULL : db, x.b_packed = pb;
        x.scale_a = dsa, x.scale_b = dsb;
        x.bias = c->bias ? dbias : NULL, x.azp = c->azp ? dazp : NULL;
        x.c = dc;
        st_gpu = smm_scaled_mm(g, &x);
    }
    force_set(NULL);
    ck_assert_int_eq(smm_synchronize(g), SMM_OK);
    kernel_counts(&after);
    ck_assert_msg(st_ref == st_gpu, "status: reference %s, GPU %s (%s)", smm_strerror(st_ref),
                  smm_strerror(st_gpu), smm_context_last_error(g));
    ck_assert_int_eq(smm_memcpy(g, c_gpu, dc, c_bytes, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);

    int ran = -1;
    for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
        if (after.launches[kk] != before.launches[kk])
            ran = kk;
    if (memcmp(c_ref, c_gpu, c_bytes) != 0) {
        size_t at = 0;
        while (c_ref[at] == c_gpu[at])
            at++;
        ck_abort_msg("forced %s (ran %s): M %" PRId64 " N %" PRId64 " K %" PRId64
                     " lda %" PRId64 " ldb %" PRId64 " ldc %" PRId64
                     " offsets %d %d %d, %s, scale_a %s, scale_b %s, bias %d, azp %d, "
                     "packed %d, groups %d cluster %d stages %d pre %d: C differs at byte "
                     "%zu (element %zu)",
                     kernel_name(c->force.kernel), ran > 0 ? kernel_name(ran) : "none", m, n,
                     k, c->lda, c->ldb, c->ldc, c->off_a, c->off_b, c->off_c,
                     smm_dtype_name(c->c_dtype), c->scale_a_per_row ? "row" : "tensor",
                     c->scale_b_per_col ? "col" : "tensor", c->bias, c->azp, c->packed,
                     c->force.groups, c->force.cluster, c->force.stages, c->force.pre, at,
                     at / es);
    }

    smm_packed_b_destroy(pb);
    smm_free(g, ba), smm_free(g, bb), smm_free(g, bc), smm_free(g, bsa), smm_free(g, bsb);
    smm_free(g, bbias), smm_free(g, bazp);
    free(a), free(b), free(c_ref), free(c_gpu), free(sa), free(sb), free(bias), free(azp);
    if (st_gpu != SMM_OK || m == 0 || n == 0)
        return 0;
    if (c->force.kernel == SMM_GPU_KERNEL_AUTO) {
        if (ran > 0)
            auto_chose[ran]++;
        return 1;
    }
    return ran == c->force.kernel;
}

static void random_case(cf_rng *r, gemm_case *c, int kernel, int big)
{
    static const smm_dtype types[] = {SMM_DTYPE_I32, SMM_DTYPE_F32, SMM_DTYPE_F16,
                                      SMM_DTYPE_BF16};
    memset(c, 0, sizeof *c);
    c->m = pick(r, edge_mn, (int)(sizeof edge_mn / sizeof edge_mn[0]));
    if (is_decode(kernel) || cf_rng_range(r, 0, 3) == 0)
        c->m = cf_rng_range(r, 1, 33);
    c->n = pick(r, edge_mn, (int)(sizeof edge_mn / sizeof edge_mn[0]));
    c->k = pick(r, edge_k, (int)(sizeof edge_k / sizeof edge_k[0]));
    if (big) {
        c->m = cf_rng_range(r, 0, 1) ? 2048 : cf_rng_range(r, 1, 32);
        c->n = 4096 + cf_rng_range(r, 0, 1) * cf_rng_range(r, 1, 255);
        c->k = 128 * cf_rng_range(r, 1, 3) + cf_rng_range(r, 0, 1) * 64;
    }
    c->lda = rnd_ld(r, c->k, c->m);
    c->ldb = rnd_ld(r, c->k, c->n);
    c->ldc = rnd_ld(r, c->n, c->m);
    if (cf_rng_range(r, 0, 9) < 2) {
        c->off_a = (int)cf_rng_range(r, 0, 15);
        c->off_b = (int)cf_rng_range(r, 0, 15);
    }
    c->c_dtype = types[cf_rng_range(r, 0, 3)];
    c->off_c = cf_rng_range(r, 0, 9) < 2 ? (int)cf_rng_range(r, 1, 3) : 0;
    if (c->c_dtype == SMM_DTYPE_I32 || c->c_dtype == SMM_DTYPE_F32)
        c->off_c = 0; /* 4-byte elements stay 4-byte aligned */
    c->scale_a_per_row = (int)cf_rng_range(r, 0, 1);
    c->scale_b_per_col = (int)cf_rng_range(r, 0, 1);
    c->bias = (int)cf_rng_range(r, 0, 1);
    c->azp = (int)cf_rng_range(r, 0, 2);
    c->packed = (int)cf_rng_range(r, 0, 1);
    c->force.kernel = kernel;
    if (is_decode(kernel) && cf_rng_range(r, 0, 1)) {
        static const int g[] = {1, 2, 4}, s[] = {1, 2, 4};
        c->force.groups = g[cf_rng_range(r, 0, 2)];
        c->force.cluster = s[cf_rng_range(r, 0, 2)];
        c->force.pre = (int)cf_rng_range(r, -1, 1);
        if (kernel == SMM_GPU_KERNEL_DECODE_TMA)
            c->force.stages = (int)cf_rng_range(r, 2, 16);
        if (kernel == SMM_GPU_KERNEL_DECODE_RING)
            c->force.stages = (int)cf_rng_range(r, 3, 8);
    }
}

static void run_family(int kernel, int cases)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *g = tu_ctx(gpu_backend, 0);
    char name[64];
    snprintf(name, sizeof name, "family-%d", kernel);
    cf_rng r = tu_rng(name);
    gemm_case c;

    find_force_interface();
    for (int i = 0; i < cases; i++) {
        random_case(&r, &c, kernel, i < 2);
        if (i == 2) { /* int32 sums that wrap */
            c.m = 2, c.n = 3, c.k = 140000, c.lda = c.ldb = 140000, c.ldc = 3;
            c.off_a = c.off_b = c.off_c = 0, c.wrap = 1;
        }
        fam_cases[kernel]++;
        fam_ran[kernel] += run_case(ref, g, &c, &r);
    }
    printf("check_gpu_kernels: family %s: %ld cases, the forced kernel ran in %ld\n",
           kernel_name(kernel), fam_cases[kernel], fam_ran[kernel]);
    if (kernel == SMM_GPU_KERNEL_AUTO)
        for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
            if (auto_chose[kk])
                printf("check_gpu_kernels: family auto: %s chosen in %ld\n", kernel_name(kk),
                       auto_chose[kk]);
    fflush(stdout);
    /* The kernels every GPU of the vendor has must have run. */
    const char *all = getenv("SMM_TEST_GPU_ALL_KERNELS");
    const int must = (all && strcmp(all, "1") == 0) || kernel == SMM_GPU_KERNEL_AUTO ||
                     kernel == SMM_GPU_KERNEL_GENERIC || kernel == SMM_GPU_KERNEL_MFMA;
    ck_assert_msg(!must || fam_ran[kernel] > 0, "the forced kernel %s never ran",
                  kernel_name(kernel));
    smm_context_destroy(g);
    smm_context_destroy(ref);
}

START_TEST(test_family)
{
    const int *fams = gpu_backend == SMM_BACKEND_CUDA ? nvidia_families : amd_families;
    const int nf = gpu_backend == SMM_BACKEND_CUDA
                       ? (int)(sizeof nvidia_families / sizeof nvidia_families[0])
                       : (int)(sizeof amd_families / sizeof amd_families[0]);
    if (_i < nf)
        run_family(fams[_i], 120);
}
END_TEST

/* ---- the quantizer ---- */

START_TEST(test_quantize)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *g = tu_ctx(gpu_backend, 0);
    cf_rng r = tu_rng("quantize");
    static const smm_dtype xt[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};

    for (int i = 0; i < 600; i++) {
        const int64_t m = cf_rng_range(&r, 1, 40), k = cf_rng_range(&r, 0, 9) == 0
                                                             ? cf_rng_range(&r, 1000, 9000)
                                                             : cf_rng_range(&r, 0, 300);
        const smm_dtype t = xt[cf_rng_range(&r, 0, 2)];
        const size_t es = dtype_size(t);
        const int64_t ldx = k + cf_rng_range(&r, 0, 1) * cf_rng_range(&r, 0, 9);
        const int64_t ldq = k + cf_rng_range(&r, 0, 1) * cf_rng_range(&r, 0, 9);
        const int dynamic = (int)cf_rng_range(&r, 0, 1), with_azp = (int)cf_rng_range(&r, 0, 1);
        const size_t xb = (size_t)((m - 1) * ldx + k) * es, qb = (size_t)((m - 1) * ldq + k);
        const size_t sn = dynamic ? (size_t)m : 1;
        unsigned char *x = malloc(xb + 1);
        int8_t *q_ref = malloc(qb + 1), *q_gpu = malloc(qb + 1);
        float *s_ref = malloc(sn * 4), *s_gpu = malloc(sn * 4);
        int32_t *z_ref = malloc(sn * 4), *z_gpu = malloc(sn * 4);
        size_t j;

        for (j = 0; j < xb / es; j++) {
            float v = rnd_float(&r, 2, cf_rng_range(&r, 0, 3) == 0 ? 1e4f : 3.0f);
            if (es == 4)
                memcpy(x + 4 * j, &v, 4);
            else {
                uint16_t h = t == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
                memcpy(x + 2 * j, &h, 2);
            }
        }
        memset(q_ref, 0x5A, qb), memset(q_gpu, 0x5A, qb);
        for (j = 0; j < sn; j++) {
            s_ref[j] = dynamic ? -1.0f : rnd_float(&r, 3, 0.1f);
            z_ref[j] = dynamic ? -7 : (int32_t)cf_rng_range(&r, -200, 200);
        }
        memcpy(s_gpu, s_ref, sn * 4), memcpy(z_gpu, z_ref, sn * 4);

        void *bx, *bq, *bs, *bz;
        const void *dx = to_dev(g, x, xb, 0, &bx);
        int8_t *dq = to_dev(g, q_gpu, qb, 0, &bq);
        float *ds = to_dev(g, s_gpu, sn * 4, 0, &bs);
        int32_t *dz = to_dev(g, z_gpu, sn * 4, 0, &bz);

        smm_quantize_args a;
        memset(&a, 0, sizeof a);
        a.m = m, a.k = k, a.x = x, a.x_dtype = t, a.ldx = ldx, a.q = q_ref, a.ldq = ldq;
        a.scale = s_ref, a.azp = with_azp ? z_ref : NULL;
        a.mode = dynamic ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
        smm_status st_ref = smm_quantize_i8(ref, &a);
        a.x = dx, a.q = dq, a.scale = ds, a.azp = with_azp ? dz : NULL;
        smm_status st_gpu = smm_quantize_i8(g, &a);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        ck_assert_msg(st_ref == st_gpu, "quantize status: reference %s, GPU %s",
                      smm_strerror(st_ref), smm_strerror(st_gpu));
        ck_assert_int_eq(smm_memcpy(g, q_gpu, dq, qb, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, s_gpu, ds, sn * 4, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, z_gpu, dz, sn * 4, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_msg(memcmp(q_ref, q_gpu, qb) == 0 && memcmp(s_ref, s_gpu, sn * 4) == 0 &&
                          memcmp(z_ref, z_gpu, sn * 4) == 0,
                      "quantize case %d differs: M %" PRId64 " K %" PRId64 " %s ldx %" PRId64
                      " ldq %" PRId64 " %s azp %d",
                      i, m, k, smm_dtype_name(t), ldx, ldq, dynamic ? "dynamic" : "static",
                      with_azp);
        smm_free(g, bx), smm_free(g, bq), smm_free(g, bs), smm_free(g, bz);
        free(x), free(q_ref), free(q_gpu), free(s_ref), free(s_gpu), free(z_ref), free(z_gpu);
    }
    printf("check_gpu_kernels: quantize: 600 cases\n");
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

static Suite *gpu_kernels_suite(void)
{
    Suite *s = suite_create("gpu_kernels");
    TCase *tc = tu_tcase(s, "family", 600);
    tcase_add_loop_test(tc, test_family, 0, 8);
    tc = tu_tcase(s, "quantize", 300);
    tcase_add_test(tc, test_quantize);
    return s;
}

int main(void)
{
    uint64_t seed;
    const char *why_rocm = "", *why_cuda = "";

    if (cf_seed(&seed) != 0) /* tu_main reports it, running nothing */
        return tu_main(gpu_kernels_suite(), "check_gpu_kernels");
    if (tu_backend_selected(SMM_BACKEND_ROCM) &&
        smm_backend_available(SMM_BACKEND_ROCM, &why_rocm))
        gpu_backend = SMM_BACKEND_ROCM;
    else if (tu_backend_selected(SMM_BACKEND_CUDA) &&
             smm_backend_available(SMM_BACKEND_CUDA, &why_cuda))
        gpu_backend = SMM_BACKEND_CUDA;
    else {
        printf("check_gpu_kernels: SKIP: no GPU backend can run here (rocm: %s; cuda: %s)\n",
               why_rocm && *why_rocm ? why_rocm : "not selected",
               why_cuda && *why_cuda ? why_cuda : "not selected");
        return 77;
    }
    printf("check_gpu_kernels: testing the %s backend's kernels\n",
           smm_backend_name(gpu_backend));
    return tu_main(gpu_kernels_suite(), "check_gpu_kernels");
}
